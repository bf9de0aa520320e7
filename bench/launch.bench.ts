// Issue 3: per-launch cost of an empty kernel from TypeScript against the same launches issued
// by a C loop inside the shim; a stream synchronize round trip; a compile-cache hit against a
// cold compile.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { N } from "../ffi/native";
import { Device, Program } from "../src";
import { cpuKernels } from "../test/kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, cpuKernels, { name: "basic" });
const empty = mod.kernel("empty", []);
const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
const s = dev.createStream();
const buf = dev.alloc(64);
const ITER = 1000;
const noArgs = new Uint8Array(8);
const argBlock = new BigUint64Array(3);
argBlock[0] = BigInt(buf.address);
new Float32Array(argBlock.buffer, 8, 1)[0] = 1;
new Int32Array(argBlock.buffer, 16, 1)[0] = 1;

group("1000 launches of an empty kernel + synchronize", () => {
  summary(() => {
    bench("C loop: bg_launch ×1000", () => {
      N.bg_bench_launch_loop(empty.handle, s.handle, 1, 1, noArgs, 0, ITER);
      s.synchronize();
    }).baseline(true);
    bench("TypeScript: kernel.launch ×1000", () => {
      for (let i = 0; i < ITER; i++) empty.launch(s, { grid: 1, block: 1, args: [] });
      s.synchronize();
    });
  });
});

group("1000 launches with 3 typed arguments + synchronize", () => {
  summary(() => {
    bench("C loop: bg_launch ×1000", () => {
      N.bg_bench_launch_loop(addScalar.handle, s.handle, 1, 1, argBlock, 3, ITER);
      s.synchronize();
    }).baseline(true);
    bench("TypeScript: kernel.launch ×1000", () => {
      for (let i = 0; i < ITER; i++) addScalar.launch(s, { grid: 1, block: 1, args: [buf, 1, 1] });
      s.synchronize();
    });
  });
});

group("stream synchronize round trip", () => {
  bench("launch one empty kernel + synchronize", () => {
    empty.launch(s, { grid: 1, block: 1, args: [] });
    s.synchronize();
  });
  bench("synchronize an idle stream", () => s.synchronize());
  bench("launch + await stream.done()", async () => {
    empty.launch(s, { grid: 1, block: 1, args: [] });
    await s.done();
  });
});

const cacheDir = mkdtempSync(join(tmpdir(), "bungpu-bench-cache-"));
process.env.BUNGPU_CACHE_DIR = cacheDir;
let n = 0;
const src = (i: number) => `#include "bungpu_cpu.h"\n/* variant ${i} */\nBG_KERNEL(k) { float* x = BG_ARG(0, float*); BG_FOR_BLOCKS { BG_FOR_THREADS { x[threadIdx.x] += 1.0f; } } }\n`;
Program.compile(dev, src(-1)).dispose();
group("compile", () => {
  summary(() => {
    bench("cache hit (hash, verify, load)", () => Program.compile(dev, src(-1)).dispose()).baseline(true);
    bench("cold compile (C compiler run)", () => Program.compile(dev, src(n++)).dispose());
  });
});

await run({ format: process.env.BENCH_JSON ? "json" : "mitata" });
rmSync(cacheDir, { recursive: true, force: true });
do_not_optimize(dev);
