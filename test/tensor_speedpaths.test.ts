// The CPU backend's fast paths, checked for values against the float64 reference: the 6×32 reduce
// tile (one 16-lane pass with AVX-512, two 8-lane passes without it: the second run compiles the
// same kernels without -march=native, in a subprocess), and matrix-vector products reading B in
// place (one row tile: nothing would reuse a packed panel); and ExecutionPlan.runSync, inputs in
// and outputs out in one call, whose command list on the CPU backend runs on the calling thread
// when its stream is idle (and waits its turn behind work already queued when it is not).
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Device, ExecMode, GpuError, Program, Status, Variable } from "../src";
import { CommandList } from "../src/commands";
import { Tensor } from "../src/tensor";
import { Ref, seededRandom } from "../src/tensor/reference";
import { speedCases, speedErrors } from "./fixtures/speedpaths_cases";
import { kernelSources } from "./kernels";
import { expectCode, expectInvalid, toTensor } from "./tensor_helpers";

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

  test.if(cpu)("tile shapes: 32 columns where the columns come in 32s; B packed only with rows 4 KiB apart and several row tiles", () => {
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
    const rows = (s: string) => Number(/NRT = \(ROWS \+ (\d+)\)/.exec(s)?.[1]) + 1;
    const wide = src(mm(64, 32, 1024));
    expect([rows(wide), cols(wide)]).toEqual([6, 32]);
    expect(wide).toContain("bg_pk"); // B rows 4 KiB apart, 11 row tiles share each panel
    const narrow = src(mm(66, 32, 96));
    expect([rows(narrow), cols(narrow)]).toEqual([6, 32]);
    expect(narrow).not.toContain("bg_pk"); // B rows 384 bytes apart: read in place
    const gemv = src(mm(1, 32, 1024));
    expect([rows(gemv), cols(gemv)]).toEqual([1, 128]); // x·W streams W's rows, 128 columns at a time
    expect(gemv).toContain("__builtin_prefetch"); // the rows ahead
    expect(gemv).not.toContain("bg_pk"); // one row tile: nothing would reuse a panel
    expect(cols(src(mm(1, 32, 224)))).toBe(32); // under 256 columns: the register tile
    expect(cols(src(mm(64, 32, 48)))).toBe(16); // 48 columns: 16-column tiles
  });
});

describe("CPU row-streaming matrix-vector products", () => {
  test.if(cpu)("x·W (+ b, gelu) matches float64 with partial column tiles and sums past the 4096-row block", () => {
    for (const [K, N] of [[5000, 300], [96, 1000], [777, 256]] as const) {
      const xr = randRef([1, K], K), wr = randRef([K, N], N), br = randRef([N], 3);
      const plan = toTensor(xr).matmul(toTensor(wr)).add(toTensor(br)).gelu().prepare();
      try {
        expect(plan.preparedKernels()[0]!.source).toContain("__builtin_prefetch");
        plan.execute();
        const got = plan.readOutput(0) as Float32Array;
        const want = xr.matmul(wr).zip(br, (a, b) => a + b).map((v) => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3))));
        let worst = 0;
        for (let j = 0; j < N; j++) worst = Math.max(worst, Math.abs(got[j]! - want.data[j]!) / (1 + Math.abs(want.data[j]!)));
        expect(worst).toBeLessThan(2e-5 * Math.sqrt(K));
      } finally {
        plan.dispose();
      }
    }
  });
});

// ---- ExecutionPlan.runSync ------------------------------------------------------------------------

function randRef(shape: number[], seed: number): Ref {
  const r = seededRandom(seed);
  return Ref.fill(shape, () => Math.fround(-1 + 2 * r()));
}
const F = (r: Ref) => Float32Array.from(r.data);

/** y = relu(x·w + b) and s = Σ x, with x 8×40, w 40×64: two outputs, three inputs. */
function layer() {
  const x0 = randRef([8, 40], 21), w = randRef([40, 64], 22), b = randRef([64], 23);
  const x = Tensor.from(F(x0), [8, 40], { name: "x" });
  const plan = Tensor.prepareBatch([x.matmul(Tensor.from(F(w), [40, 64], { name: "w" })).add(Tensor.from(F(b), [64], { name: "b" })).relu(), x.sum()], {
    outputNames: ["y", "s"],
  });
  const want = (xr: Ref) => ({ y: xr.matmul(w).zip(b, (p, q) => Math.max(p + q, 0)), s: xr.sum([0, 1]).data[0]! });
  return { plan, want, x0 };
}

function close(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < got.length; i++)
    if (!(Math.abs(got[i]! - want[i]!) <= 1e-5 + 1e-4 * Math.abs(want[i]!))) throw new Error(`${what}: element ${i}: got ${got[i]}, want ${want[i]}`);
}

describe("ExecutionPlan.runSync", () => {
  test("inputs by position or name, outputs fresh or into the caller's arrays, against float64", async () => {
    const { plan, want, x0 } = layer();
    try {
      for (let k = 0; k < 3; k++) {
        const xr = randRef([8, 40], 100 + k);
        const w = want(xr);
        const [y, s] = plan.runSync([F(xr)]);
        close(y!, w.y.data, `run ${k} y`);
        close(s!, [w.s], `run ${k} s`);
        const yInto = new Float32Array(8 * 64).fill(NaN);
        const named = plan.runSync({ x: F(xr) }, { outputs: { y: yInto } });
        expect(named.y).toBe(yInto);
        close(yInto, w.y.data, `run ${k} y into`);
        close(named.s!, [w.s], `run ${k} s by name`);
        const sInto = new Float32Array(1);
        const pos = plan.runSync([F(xr)], { outputs: [undefined, sInto] });
        expect(pos[1]).toBe(sInto);
        close(sInto, [w.s], `run ${k} s into`);
      }
      // an input not given is the prepared one again
      const [y0] = plan.runSync();
      close(y0!, want(x0).y.data, "prepared input");
      // the async run agrees
      const [yr] = await plan.run([F(randRef([8, 40], 7))]);
      close(yr!, want(randRef([8, 40], 7)).y.data, "run()");
    } finally {
      plan.dispose();
    }
  });

  test("variables: an output smaller than its buffer is gathered into the caller's array", () => {
    const S = new Variable("S", 1, 16);
    const x = randRef([16, 24], 31);
    const plan = Tensor.from(F(x), [16, 24], { name: "x" }).shrink([[0, S], null]).mul(3).sum(1).prepare();
    try {
      for (const n of [16, 5, 1]) {
        const into = new Float32Array(n);
        const out = plan.runSync({ S: n }, { outputs: [into] });
        expect(out.output0).toBe(into);
        close(into, Array.from({ length: n }, (_, r) => 3 * x.sum([1]).data[r]!), `S = ${n}`);
      }
      expectCode(() => plan.runSync({ S: 4 }, { outputs: [new Float32Array(5)] }), Status.INVALID_VALUE, "length under S = 4");
    } finally {
      plan.dispose();
    }
  });

  test("a mode runs through the compiled schedule", () => {
    const { plan, want } = layer();
    try {
      const xr = randRef([8, 40], 41);
      const [y] = plan.runSync([F(xr)], { mode: ExecMode.Graph });
      close(y!, want(xr).y.data, "Graph");
    } finally {
      plan.dispose();
    }
  });

  test("bad inputs and outputs are GpuError INVALID_VALUE, nothing written; busy and disposed are ILLEGAL_STATE", async () => {
    const { plan, want, x0 } = layer();
    try {
      const good = F(randRef([8, 40], 51));
      const bad: [string, () => unknown][] = [
        ["input of the wrong dtype", () => plan.runSync([new Int32Array(320)])],
        ["input of the wrong length", () => plan.runSync([new Float32Array(319)])],
        ["unknown input name", () => plan.runSync({ nope: good })],
        ["feeds not an object", () => plan.runSync(3 as never)],
        ["options not an object", () => plan.runSync([good], 3 as never)],
        ["output of the wrong dtype", () => plan.runSync([good], { outputs: [new Int32Array(512)] })],
        ["output of the wrong length", () => plan.runSync([good], { outputs: [new Float32Array(511)] })],
        ["unknown output name", () => plan.runSync([good], { outputs: { z: new Float32Array(1) } })],
        ["too many output arrays", () => plan.runSync([good], { outputs: [undefined, undefined, new Float32Array(1)] })],
        ["outputs not an array or object", () => plan.runSync([good], { outputs: new Float32Array(512) as never })],
        ["overlapping output arrays", () => {
          const a = new Float32Array(513);
          return plan.runSync([good], { outputs: [a.subarray(0, 512), a.subarray(511, 512)] });
        }],
        ["a mode that is not an ExecMode", () => plan.runSync([good], { mode: "Graph" as never })],
      ];
      for (const [what, f] of bad) expectCode(f, Status.INVALID_VALUE, what);
      // nothing was written: the plan still holds its prepared input
      close(plan.runSync()[0]!, want(x0).y.data, "after refusals");
      const p = plan.executeAsync();
      expectCode(() => plan.runSync([good]), Status.ILLEGAL_STATE, "during executeAsync");
      await p;
    } finally {
      plan.dispose();
    }
    expectCode(() => plan.runSync(), Status.ILLEGAL_STATE, "after dispose");
  });

  test("a waited submit behind queued work on the same stream runs after it (not inline ahead of it)", () => {
    // list 1: ~30 ms of spinning, then b = 0, queued without waiting; list 2: b += 10, waited for.
    // In order, b ends at 10; a list 2 run at once on the calling thread would leave 0.
    const dev = Device.default();
    using mod = Program.compile(dev, kernelSources, { name: "speedpaths" });
    const spin = mod.kernel("spin_ms", ["i32"]);
    const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
    using s = dev.createStream({ nonBlocking: true });
    using b = dev.alloc(4 * 64).fill(0);
    for (let round = 0; round < 3; round++) {
      new CommandList(dev).launch(spin, { grid: 1, block: 1, args: [30] }).memset(b, 0).submit(s);
      new CommandList(dev).launch(addScalar, { grid: 1, block: 64, args: [b, 10, 64] }).submit(s, { wait: true });
      expect([...b.read(Float32Array)].every((v) => v === 10)).toBe(true);
    }
  });
});

describe("CPU host-to-device copies", () => {
  test("large writes (streaming stores from 16 KiB) land whole at any offset and length", () => {
    const dev = Device.default();
    using b = dev.alloc(1 << 20);
    for (const n of [16383, 16384, 16385, 16384 + 63, 65536 + 20, 300_001]) {
      for (const off of [0, 1, 4, 12, 60, 100]) {
        b.fill(0xab, { type: "u8" });
        const src = new Uint8Array(n + 7);
        for (let i = 0; i < src.length; i++) src[i] = (i * 131 + n + off) & 255;
        const view = src.subarray(3, 3 + n); // an unaligned source too
        b.write(view, { offset: off });
        const back = b.read();
        for (let i = 0; i < off; i++) if (back[i] !== 0xab) throw new Error(`n ${n} off ${off}: byte ${i} before the range changed`);
        for (let i = 0; i < n; i++) if (back[off + i] !== view[i]) throw new Error(`n ${n} off ${off}: byte ${i}: ${back[off + i]} vs ${view[i]}`);
        if (back[off + n] !== 0xab) throw new Error(`n ${n} off ${off}: the byte after the range changed`);
      }
    }
  });
});

test("runSync takes and gives each dtype's own arrays (float16 in and out), and refuses another dtype's array", () => {
  const x = Tensor.from(new Float16Array([1, 2, 3, 4]), [4], { name: "x", dtype: "float16" });
  const plan = x.mul(2).add(1).prepare();
  try {
    const out = plan.runSync({ x: new Float16Array([5, 6, 7, 8]) }) as unknown as Record<string, Float16Array>;
    expect(out.output0).toBeInstanceOf(Float16Array);
    expect(Array.from(out.output0!)).toEqual([11, 13, 15, 17]);
    const into = new Float16Array(4);
    plan.runSync({ x: new Float16Array([0.5, 1, 1.5, 2]) }, { outputs: [into as never] });
    expect(Array.from(into)).toEqual([2, 3, 4, 5]);
    expectInvalid(() => plan.runSync({ x: new Float16Array(4) }, { outputs: [new Float32Array(4)] }), "a float32 array for a float16 output");
    expectInvalid(() => plan.runSync({ x: new Float32Array(4) }), "a float32 array for a float16 input");
  } finally {
    plan.dispose();
  }
});
