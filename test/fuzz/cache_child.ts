// One run against a damaged cache (test/fuzz/surfaces.ts, the "cache" handler): started with a
// private BUNGPU_CACHE_DIR and TMPDIR that the driver damaged first, and BUNGPU_LIB set to the
// driver's library (the shim is not rebuilt), or, for a case of the shim's own cache, with
// BUNGPU_NO_PREBUILT=1 over a cache holding the driver's library and its record. It compiles kernel variant K (a CPU kernel adding
// K + 1), prepares tensor plan variant P, runs both and prints their results as one JSON line;
// the driver checks them, and that stderr shows no raw error code and at most one warning.
//
//   bun test/fuzz/cache_child.ts K P
import { Device, Program, compileStats, loadInfo } from "../../src";
import { Tensor } from "../../src/tensor";

const K = Number(process.argv[2] ?? 0), P = Number(process.argv[3] ?? 0);
const d = Device.open("cpu");
const src = `#include "bungpu_cpu.h"
BG_KERNEL(fz_cache_inc) { int* p = BG_ARG(0, int*); int n = BG_ARG(1, int); BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += ${K + 1}; } } }`;
const k = Program.compile(d, { cpu: src, cuda: "", metal: "" }, { name: `fz_cache_${K}` }).kernel("fz_cache_inc", ["buffer", "i32"]);
const b = d.alloc(16).write(new Int32Array([1, 2, 3, 4]));
const s = d.createStream();
k.launch(s, { grid: 1, block: 4, args: [b, 4] });
s.synchronize();
const x = Tensor.from(new Float32Array([1, 2, 3, 4]));
const y = P === 0 ? x.mul(2).sum() : P === 1 ? x.add(P).mul(x) : x.sub(1).max();
const plan = y.prepare({ device: d });
plan.execute();
console.log(JSON.stringify({ k: [...(b.read(Int32Array) as Int32Array)], t: [...(plan.readOutput() as Float32Array)], diskHits: compileStats.diskHits, source: loadInfo.source }));
