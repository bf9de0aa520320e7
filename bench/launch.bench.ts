// Issue 3: per-launch cost of an empty kernel from TypeScript against the same launches issued
// by a C loop inside the shim; a stream synchronize round trip; a compile-cache hit against a
// cold compile.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { N, nativeView, readPtr, slot } from "../ffi/native";
import { Signal } from "../ffi/sys";
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

// Issue cost alone, with the worker out of the way: the stream is parked on a host signal while
// 1000 launches are issued into its queue (from C, then from TypeScript), so neither side races
// the worker for the queue; then the signal is released and the stream drained (untimed).
N.bg_signal_create(slot(0));
const sig = readPtr(0);
N.bg_signal_address(sig, slot(0));
const word = new Uint32Array(nativeView(readPtr(0), 4));
const parked = (issue: () => void): number => {
  N.bg_stream_host_signal(s.handle, sig);
  while (Atomics.load(word, 0) !== Signal.REACHED) {} // Atomics: a plain load could be hoisted out of the loop
  const t0 = Bun.nanoseconds();
  issue();
  const t = Bun.nanoseconds() - t0;
  N.bg_signal_release(sig);
  s.synchronize();
  return t;
};
/** Median ns per launch of each of two issuers, sampled alternately so drift hits both alike. */
const paired = (c: () => void, ts: () => void): [number, number] => {
  for (let w = 0; w < 100; w++) parked(c), parked(ts); // warm both paths and the JIT
  const a: number[] = [], b: number[] = [];
  for (let r = 0; r < 400; r++) a.push(parked(c)), b.push(parked(ts));
  const mid = (xs: number[]) => xs.sort((x, y) => x - y)[xs.length >> 1]! / ITER;
  return [mid(a), mid(b)];
};
const rows: [string, () => void, () => void][] = [
  ["empty kernel, no arguments", () => N.bg_bench_launch_loop(empty.handle, s.handle, 1, 1, noArgs, 0, ITER), () => {
    for (let i = 0; i < ITER; i++) empty.launch(s, { grid: 1, block: 1, args: [] });
  }],
  ["3 typed arguments (buffer, f32, i32)", () => N.bg_bench_launch_loop(addScalar.handle, s.handle, 1, 1, argBlock, 3, ITER), () => {
    for (let i = 0; i < ITER; i++) addScalar.launch(s, { grid: 1, block: 1, args: [buf, 1, 1] });
  }],
];
if (!process.env.BENCH_JSON) {
  console.log("\nissue cost per launch, worker parked (median of 400 × 1000 launches):");
  for (const [name, c, ts] of rows) {
    const [cns, tns] = paired(c, ts);
    console.log(`  ${name.padEnd(38)} C ${cns.toFixed(1).padStart(6)} ns   TypeScript ${tns.toFixed(1).padStart(6)} ns   ${(tns / cns).toFixed(2)}×`);
  }
}
N.bg_signal_destroy(sig);
rmSync(cacheDir, { recursive: true, force: true });
do_not_optimize(dev);
