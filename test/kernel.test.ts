import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Program, Status, compileStats } from "../src";
import { expectGpuError, randomFloats } from "./helpers";
import { cudaKernels, kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "basic" });
const s = dev.createStream();
afterAll(() => {
  s.dispose();
  mod.dispose();
  dev.dispose();
});

const close = (got: Float32Array, want: Float64Array | number[], tol: number) => {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < got.length; i++) {
    const w = want[i]!;
    if (Math.abs(got[i]! - w) > tol * Math.max(1, Math.abs(w))) throw new Error(`element ${i}: got ${got[i]}, want ${w}`);
  }
};

describe("kernels on random inputs against TypeScript references", () => {
  const vadd = mod.kernel("vadd", ["buffer", "buffer", "buffer", "i32"]);
  const saxpy = mod.kernel("saxpy", ["f32", "buffer", "buffer", "i32"]);
  const reduce = mod.kernel("reduce_sum", ["buffer", "buffer", "i32"]);
  const matmul = mod.kernel("matmul_tiled", ["buffer", "buffer", "buffer", "i32", "i32", "i32"]);

  for (const n of [256, 1000, 4096, 4099]) {
    test(`vadd and saxpy, n=${n} (block 128${n % 128 ? ", not dividing n" : ""})`, () => {
      const a = randomFloats(n, n), b = randomFloats(n, n + 1);
      using A = dev.alloc(n * 4).write(a);
      using B = dev.alloc(n * 4).write(b);
      using C = dev.alloc(n * 4).fill(0);
      const grid = Math.ceil(n / 128);
      vadd.launch(s, { grid, block: 128, args: [A, B, C, n] });
      s.synchronize();
      close(C.read(Float32Array), Float64Array.from(a, (x, i) => x + b[i]!), 1e-6);
      saxpy.launch(s, { grid, block: 128, args: [2.5, A, B, n] });
      s.synchronize();
      close(B.read(Float32Array), Float64Array.from(a, (x, i) => Math.fround(2.5) * x + b[i]!), 1e-5);
    });

    test(`tree reduction, n=${n}`, () => {
      const x = randomFloats(n, 7 * n);
      const block = 256;
      const grid = Math.ceil(n / block);
      using X = dev.alloc(n * 4).write(x);
      using P = dev.alloc(grid * 4);
      reduce.launch(s, { grid, block, args: [X, P, n], sharedBytes: block * 4 });
      s.synchronize();
      const partial = P.read(Float32Array);
      const ref = new Float64Array(grid);
      for (let i = 0; i < n; i++) ref[Math.floor(i / block)]! += x[i]!;
      close(partial, ref, 1e-4);
    });
  }

  for (const [M, N, K] of [[32, 48, 64], [37, 29, 53], [1, 1, 1], [100, 3, 17]] as const) {
    test(`tiled matmul ${M}x${K} · ${K}x${N}`, () => {
      const a = randomFloats(M * K, M), b = randomFloats(K * N, N + 100);
      using A = dev.alloc(a.byteLength).write(a);
      using B = dev.alloc(b.byteLength).write(b);
      using C = dev.alloc(M * N * 4);
      matmul.launch(s, { grid: [Math.ceil(N / 16), Math.ceil(M / 16)], block: [16, 16], args: [A, B, C, M, N, K], sharedBytes: 2 * 256 * 4 });
      s.synchronize();
      const ref = new Float64Array(M * N);
      for (let i = 0; i < M; i++) for (let j = 0; j < N; j++) {
        let acc = 0;
        for (let k = 0; k < K; k++) acc += a[i * K + k]! * b[k * N + j]!;
        ref[i * N + j] = acc;
      }
      close(C.read(Float32Array), ref, 1e-4);
    });
  }
});

describe("launch validation: nothing is launched on bad input", () => {
  const vadd = mod.kernel("vadd", ["buffer", "buffer", "buffer", "i32"]);
  test("wrong count, wrong types, zero grid, disposed buffer", () => {
    using A = dev.alloc(64).fill(1, { type: "u8" });
    using C = dev.alloc(64).fill(0);
    // @ts-expect-error the types catch it too; JavaScript callers get the GpuError
    expectGpuError(() => vadd.launch(s, { grid: 1, block: 16, args: [A, A, C] }), Status.INVALID_VALUE, /expected 4 arguments/);
    // @ts-expect-error the types catch it too; JavaScript callers get the GpuError
    expectGpuError(() => vadd.launch(s, { grid: 1, block: 16, args: [A, A, 3, 16] }), Status.INVALID_VALUE, /args\[2\] must be a Buffer/);
    expectGpuError(() => vadd.launch(s, { grid: 1, block: 16, args: [A, A, C, 1.5] }), Status.INVALID_VALUE, /i32/);
    expectGpuError(() => vadd.launch(s, { grid: 1, block: 16, args: [A, A, C, 2 ** 31] }), Status.INVALID_VALUE, /i32/);
    expectGpuError(() => vadd.launch(s, { grid: 0, block: 16, args: [A, A, C, 16] }), Status.INVALID_VALUE, /grid/);
    expectGpuError(() => vadd.launch(s, { grid: [1, 0], block: 16, args: [A, A, C, 16] }), Status.INVALID_VALUE, /grid/);
    expectGpuError(() => vadd.launch(s, { grid: 1, block: [] as unknown as number, args: [A, A, C, 16] }), Status.INVALID_VALUE, /block/);
    const D = dev.alloc(64);
    D.dispose();
    expectGpuError(() => vadd.launch(s, { grid: 1, block: 16, args: [A, A, D, 16] }), Status.INVALID_HANDLE, /disposed/);
    s.synchronize();
    expect([...C.read(Uint8Array)].every((x) => x === 0)).toBe(true);
    expectGpuError(() => mod.kernel("vadd", ["buffer", "float" as never]), Status.INVALID_VALUE, /unknown argument type/);
    expectGpuError(() => mod.kernel("no_such_kernel", []), Status.NOT_FOUND);
  });

  test("a buffer of another device is refused", () => {
    const other = Device.backends().filter((b) => b.available && b.backend !== "cpu");
    if (other.length === 0) return; // one device only on this machine: covered where a GPU exists
    using d2 = Device.open(`${other[0]!.backend}:0`);
    using A = d2.alloc(64);
    using C = dev.alloc(64);
    expectGpuError(() => vadd.launch(s, { grid: 1, block: 16, args: [A, A, C, 16] }), Status.INVALID_VALUE, /another device/);
  });
});

describe("the compile cache", () => {
  const prev = process.env.BUNGPU_CACHE_DIR;
  const dir = mkdtempSync(join(tmpdir(), "bungpu-kcache-"));
  afterAll(() => {
    if (prev === undefined) delete process.env.BUNGPU_CACHE_DIR;
    else process.env.BUNGPU_CACHE_DIR = prev;
    rmSync(dir, { recursive: true, force: true });
  });
  const src = `#include "bungpu_cpu.h"\n/* ${Math.random()} */\nBG_KERNEL(twice) {\n  float* x = BG_ARG(0, float*);\n  BG_FOR_BLOCKS { BG_FOR_THREADS { x[threadIdx.x] *= 2.0f; } }\n}\n`;
  const run = () => {
    const m = Program.compile(dev, src);
    using X = dev.alloc(16).write(new Float32Array([1, 2, 3, 4]));
    m.kernel("twice", ["buffer"]).launch(s, { grid: 1, block: 4, args: [X] });
    s.synchronize();
    const out = [...X.read(Float32Array)];
    m.dispose();
    return out;
  };

  test("a second compile is served from disk without running the compiler", () => {
    process.env.BUNGPU_CACHE_DIR = dir;
    const runs0 = compileStats.compilerRuns;
    expect(run()).toEqual([2, 4, 6, 8]);
    expect(compileStats.compilerRuns).toBe(runs0 + 1);
    const hits = compileStats.diskHits;
    expect(run()).toEqual([2, 4, 6, 8]);
    expect(compileStats.compilerRuns).toBe(runs0 + 1);
    expect(compileStats.diskHits).toBe(hits + 1);
  });

  test("a corrupted cache entry is rebuilt, never trusted", () => {
    process.env.BUNGPU_CACHE_DIR = dir;
    const kdir = join(dir, "kernels", "cpu");
    const libs = readdirSync(kdir).filter((f) => /\.(so|dylib)$/.test(f));
    expect(libs.length).toBe(1);
    writeFileSync(join(kdir, libs[0]!), "garbage, not a library");
    const runs0 = compileStats.compilerRuns, bad0 = compileStats.rebuiltCorrupt;
    expect(run()).toEqual([2, 4, 6, 8]);
    expect(compileStats.rebuiltCorrupt).toBe(bad0 + 1);
    expect(compileStats.compilerRuns).toBe(runs0 + 1);
    // and the meta file going missing is treated the same way
    rmSync(join(kdir, libs[0]!.replace(/\.(so|dylib)$/, ".json")));
    expect(run()).toEqual([2, 4, 6, 8]);
    expect(compileStats.compilerRuns).toBe(runs0 + 2);
  });

  test("entries swapped between two keys (each library with its own record) are rebuilt, not run as the other kernel", () => {
    // found by the fuzzer's cache damage: records named no key, so a swapped pair passed their
    // size and hash checks and each key ran the other's code
    process.env.BUNGPU_CACHE_DIR = dir;
    const kdir = join(dir, "kernels", "cpu");
    const scale = (k: number) => `#include "bungpu_cpu.h"\n/* ${Math.random()} */\nBG_KERNEL(scale) {\n  float* x = BG_ARG(0, float*);\n  BG_FOR_BLOCKS { BG_FOR_THREADS { x[threadIdx.x] *= ${k}.0f; } }\n}\n`;
    const [s3, s5] = [scale(3), scale(5)];
    const runScale = (source: string) => {
      const m = Program.compile(dev, source);
      using X = dev.alloc(8).write(new Float32Array([1, 2]));
      m.kernel("scale", ["buffer"]).launch(s, { grid: 1, block: 2, args: [X] });
      s.synchronize();
      m.dispose();
      return [...X.read(Float32Array)];
    };
    const before = new Set(existsSync(kdir) ? readdirSync(kdir) : []);
    expect(runScale(s3)).toEqual([3, 6]);
    const k3 = readdirSync(kdir).filter((f) => !before.has(f));
    expect(runScale(s5)).toEqual([5, 10]);
    const k5 = readdirSync(kdir).filter((f) => !before.has(f) && !k3.includes(f));
    const base = (fs: string[]) => fs.find((f) => f.endsWith(".json"))!.replace(/\.json$/, "");
    const [a, b] = [base(k3), base(k5)];
    for (const ext of [".json", ...k3.filter((f) => !f.endsWith(".json")).map((f) => f.slice(a.length))]) {
      renameSync(join(kdir, a + ext), join(kdir, "swap"));
      renameSync(join(kdir, b + ext), join(kdir, a + ext));
      renameSync(join(kdir, "swap"), join(kdir, b + ext));
    }
    const bad0 = compileStats.rebuiltCorrupt;
    expect(runScale(s3)).toEqual([3, 6]); // was [5, 10]
    expect(runScale(s5)).toEqual([5, 10]);
    expect(compileStats.rebuiltCorrupt).toBe(bad0 + 2);
  });

  test("a compile error throws COMPILE with the compiler's log and the line", () => {
    process.env.BUNGPU_CACHE_DIR = dir;
    const bad = `#include "bungpu_cpu.h"\nBG_KERNEL(broken) {\n  int x = ;\n}\n`;
    const e = expectGpuError(() => Program.compile(dev, bad, { name: "broken" }), Status.COMPILE);
    expect(e.message).toMatch(/broken\.c:3:/);
    expect(e.message).toMatch(/error/);
  });
});

describe("the last resort: Bun's TinyCC", () => {
  test("with no C compiler (BUNGPU_CC=tinycc), kernels compile in memory and compute the same results", () => {
    const r = Bun.spawnSync(["bun", "run", join(import.meta.dir, "fixtures", "tinycc_kernels.ts")], {
      env: { ...process.env, BUNGPU_CC: "tinycc" },
      cwd: join(import.meta.dir, ".."),
    });
    expect(r.stderr.toString()).toBe("");
    const out = JSON.parse(r.stdout.toString());
    expect(out.compiler).toBe("tinycc (bun:ffi)");
    expect(out.runs).toBe(1);
    expect(out.vadd).toBe(true);
    expect(out.reduce).toBe(true);
    expect(out.matmul).toBe(true);
    expect(out.error).toMatch(/^991 .*TinyCC.*\nbroken\.c:3: error/s);
  }, 60_000);
});

const nvcc = Bun.which("nvcc") ?? (existsSync("/usr/local/cuda/bin/nvcc") ? "/usr/local/cuda/bin/nvcc" : null);
describe("CUDA versions of the same kernels", () => {
  test.skipIf(!nvcc)("compile with nvcc --ptx", () => {
    const dir = mkdtempSync(join(tmpdir(), "bungpu-nvcc-"));
    try {
      writeFileSync(join(dir, "basic.cu"), cudaKernels);
      const r = Bun.spawnSync([nvcc!, "--ptx", "-arch=sm_80", "-o", join(dir, "basic.ptx"), join(dir, "basic.cu")], { stderr: "pipe" });
      expect(r.stderr.toString()).toBe("");
      expect(r.exitCode).toBe(0);
      const ptx = readFileSync(join(dir, "basic.ptx"), "utf8");
      for (const k of ["vadd", "saxpy", "reduce_sum", "matmul_tiled", "slow_fill", "sum_into", "spin_ms", "empty", "add_scalar"])
        expect(ptx).toContain(`.entry ${k}(`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("the NVRTC path on a device without NVRTC", () => {
  test("a refused compile is a GpuError, even with a live handle left in the result slot by an earlier call", async () => {
    const { compileCudaImage } = await import("../src/compile/cuda");
    const { Ring } = await import("../src/ring");
    for (let i = 0; i < 3; i++) {
      // ring creation writes a live native pointer into the first out slot: the refused compile
      // after it must not take it for its result
      const ring = Ring.create(dev, { messageBytes: 16, capacity: 4 });
      try {
        expectGpuError(() => compileCudaImage(dev, 'extern "C" __global__ void k() {}', {}, false), Status.NOT_SUPPORTED);
      } finally {
        ring.dispose();
      }
    }
  });
});
