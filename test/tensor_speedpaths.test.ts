// The CPU backend's fast paths, checked for values against the float64 reference: the 6×32 reduce
// tile (one 16-lane pass with AVX-512, two 8-lane passes without it: the second run compiles the
// same kernels without -march=native, in a subprocess), and matrix-vector products reading B in
// place (one row tile: nothing would reuse a packed panel).
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Device } from "../src";
import { Tensor } from "../src/tensor";
import { speedCases, speedErrors } from "./fixtures/speedpaths_cases";

const cpu = Device.default().backend === "cpu";

describe("CPU reduce tiles", () => {
  test.if(cpu)("products and reductions over 32-column tiles agree with float64 (this machine's vector width)", () => {
    const errs = speedErrors();
    expect(Object.keys(errs).length).toBe(speedCases().length);
    for (const [name, e] of Object.entries(errs)) expect({ name, ok: e <= 1 }).toEqual({ name, ok: true });
  });

  test.if(cpu)("the same cases compiled without -march=native (8-lane passes) agree with float64", () => {
    const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "fixtures/speedpaths_cases.ts")], {
      env: { ...process.env, BUNGPU_NO_NATIVE_ARCH: "1" },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 120_000,
    });
    expect(r.exitCode).toBe(0);
    const errs = JSON.parse(new TextDecoder().decode(r.stdout).trim().split("\n").pop()!) as Record<string, number>;
    expect(Object.keys(errs).length).toBe(speedCases().length);
    for (const [name, e] of Object.entries(errs)) expect({ name, ok: e <= 1 }).toEqual({ name, ok: true });
  });

  test.if(cpu)("tile shapes: 32 columns where the columns come in 32s, packing only with several row tiles", () => {
    const src = (t: Tensor) => {
      const p = t.prepare();
      try {
        return p.preparedKernels()[0]!.source;
      } finally {
        p.dispose();
      }
    };
    const cols = (s: string) => Number(/NBLK = NRT \* \(\(COLS \+ (\d+)\)/.exec(s)?.[1]) + 1;
    const data = (n: number) => Float32Array.from({ length: n }, (_, i) => (i % 7) - 3);
    const mm = (m: number, k: number, n: number) => Tensor.from(data(m * k), [m, k]).matmul(Tensor.from(data(k * n), [k, n]));
    const big = src(mm(64, 32, 96));
    expect(cols(big)).toBe(32);
    expect(big).toContain("bg_pk"); // 11 row tiles share each packed panel
    const gemv = src(mm(1, 32, 96));
    expect(cols(gemv)).toBe(32);
    expect(gemv).not.toContain("bg_pk");
    expect(cols(src(mm(64, 32, 48)))).toBe(16); // 48 columns: 16-column tiles
  });
});
