// Issue 5: 1000 tiny dispatches (the empty kernel, grid 1, block 1, two arguments), each case
// followed by one stream synchronize:
//   - the C loop: bg_bench_issue_loop decodes the packed buffer and issues every command through
//     the ordinary bg_* calls (no batching): the baseline;
//   - one by one from TypeScript (Kernel.launch: one crossing per dispatch);
//   - a direct GraphSession (1000 dispatches encoded in TypeScript + one bg_submit);
//   - a recorded ComputeGraph replayed (one bg_submit of bytes packed once), also after a setArgs;
//   - encoding alone (no submit), to show the TypeScript cost per dispatch.
// BUNGPU_DEVICE=cuda runs the same cases on a GPU.
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { N } from "../ffi/native";
import { Device, Program } from "../src";
import { CommandEncoder } from "../src/encoder";
import { GraphExecutor } from "../src/graph_executor";
import { kernelSources } from "../test/kernels";

const dev = Device.open(process.env.BUNGPU_DEVICE ?? "cpu");
const mod = Program.compile(dev, kernelSources, { name: "basic" });
const empty = mod.kernel("empty", ["buffer", "i32"]); // the kernel ignores its two arguments
const s = dev.createStream();
const buf = dev.alloc(64);
const ex = new GraphExecutor(dev, { stream: s });
const ITER = 1000;
const cfg = { grid: 1, block: 1, args: [buf, 1] as const };

// The same 1000 dispatches packed once (the C loop's input) and recorded once (the replay's).
const packed = new CommandEncoder(dev);
for (let i = 0; i < ITER; i++) packed.dispatch(empty, cfg);
const bytes = packed.bytes();
const rec = ex.beginRecorded();
for (let i = 0; i < ITER; i++) rec.dispatch(empty, cfg);
rec.finish();
const graph = rec.graph!;
const scratch = new CommandEncoder(dev);
let k = 0;

const names = {
  c: "C loop: bg_bench_issue_loop (1000 bg_launch in C)",
  one: "TypeScript one by one: Kernel.launch ×1000",
  direct: "direct session: 1000 × dispatch + finish (1 bg_submit)",
  flushed: "direct session, flushEvery 250: 1000 × dispatch + finish (4 bg_submit)",
  replay: "recorded graph replayed (1 bg_submit)",
  patched: "recorded graph: setArgs on one node + replay",
  encode: "encode only: 1000 × CommandEncoder.dispatch + reset",
};

group(`${ITER} tiny dispatches (empty kernel, grid 1, block 1, 2 args) + stream synchronize, on ${dev.spec}`, () => {
  summary(() => {
    bench(names.c, () => {
      N.bg_bench_issue_loop(s.handle, bytes, bytes.byteLength, 1);
      s.synchronize();
    }).baseline(true);
    bench(names.one, () => {
      for (let i = 0; i < ITER; i++) empty.launch(s, cfg);
      s.synchronize();
    });
    bench(names.direct, () => {
      const sess = ex.begin();
      for (let i = 0; i < ITER; i++) sess.dispatch(empty, cfg);
      sess.finish();
    });
    bench(names.flushed, () => {
      const sess = ex.begin({ flushEvery: 250 });
      for (let i = 0; i < ITER; i++) sess.dispatch(empty, cfg);
      sess.finish();
    });
    bench(names.replay, () => ex.replay(graph));
    bench(names.patched, () => {
      graph.setArgs(500, [buf, k++ & 1023]);
      ex.replay(graph);
    });
  });
});

group("TypeScript encoding cost alone", () => {
  bench(names.encode, () => {
    for (let i = 0; i < ITER; i++) scratch.dispatch(empty, cfg);
    do_not_optimize(scratch.byteLength);
    scratch.reset();
  });
});

const out = await run({ format: process.env.BENCH_JSON ? "json" : "mitata" });
// Ratios against the C loop by average, median and minimum (a shared machine is noisy: the
// median and minimum show the cost with less interference).
const stats = new Map<string, { avg: number; p50: number; min: number }>();
for (const t of out.benchmarks) {
  const st = t.runs[0]?.stats;
  if (st) stats.set(t.alias, { avg: st.avg, p50: st.p50, min: st.min });
}
const base = stats.get(names.c);
if (base && !process.env.BENCH_JSON) {
  const us = (ns: number) => (ns / 1e3).toFixed(1).padStart(7);
  console.log(`\nagainst the C loop (avg ${us(base.avg)} µs, p50 ${us(base.p50)} µs, min ${us(base.min)} µs per 1000 + sync):`);
  console.log("   avg ×   p50 ×   min ×   p50 µs  case");
  for (const [name, st] of stats)
    console.log(`  ${(st.avg / base.avg).toFixed(2).padStart(5)}  ${(st.p50 / base.p50).toFixed(2).padStart(6)}  ${(st.min / base.min).toFixed(2).padStart(6)}  ${us(st.p50)}  ${name}`);
  const enc = stats.get(names.encode);
  if (enc) console.log(`  TypeScript per dispatch (encode only): p50 ${(enc.p50 / ITER).toFixed(1)} ns, min ${(enc.min / ITER).toFixed(1)} ns`);
}
do_not_optimize(dev);
