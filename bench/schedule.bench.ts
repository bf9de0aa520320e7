// Issue 4: per-step cost of a schedule of tiny steps (an empty kernel) run in Stream, Graph and
// MultiStream(2) modes, against a C loop inside the shim issuing the same launches one by one
// (bg_bench_issue_loop over a BG_CMD_LAUNCH command buffer). Each measurement is one run:
// enqueue + synchronize. Run: bun run bench/schedule.bench.ts
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { N, addressOf, check } from "../ffi/native";
import { Cmd } from "../ffi/sys";
import { Device, Program } from "../src";
import { ExecMode, Schedule, type Executable } from "../src/schedule";
import { kernelSources } from "../test/kernels";

const dev = Device.open(process.env.BUNGPU_DEVICE ?? "cpu");
const mod = Program.compile(dev, kernelSources, { name: "basic" }); // cpu and cuda sources: BUNGPU_DEVICE=cuda:0 runs it too
const empty = mod.kernel("empty", []);
const SIZES = [10, 100, 1000];
const MODES = [ExecMode.Stream, ExecMode.Graph, ExecMode.MultiStream(2)];

/** BG_CMD_LAUNCH × steps: u32 op, u32 size; u64 kernel; u32 grid[3]; u32 block[3]; u32 shared; u32 nargs. */
function launchCommands(steps: number): { ab: ArrayBuffer; ptr: number; len: number } {
  const size = 48;
  const ab = new ArrayBuffer(Math.max(16384, steps * size));
  const u32 = new Uint32Array(ab);
  const k = empty.handle;
  for (let i = 0; i < steps; i++) {
    const w = (i * size) / 4;
    u32[w] = Cmd.LAUNCH;
    u32[w + 1] = size;
    u32[w + 2] = k >>> 0;
    u32[w + 3] = Math.floor(k / 4294967296);
    u32.set([1, 1, 1, 1, 1, 1, 0, 0], w + 4);
  }
  return { ab, ptr: addressOf(ab), len: steps * size };
}

const cStream = dev.createStream({ nonBlocking: true });
const execs: Executable[] = [];
const names = (mode: ExecMode, n: number) => `${String(mode)} ×${n}`;

for (const n of SIZES) {
  const schedule = new Schedule();
  for (let i = 0; i < n; i++) schedule.addKernel(empty, { grid: 1, block: 1, args: [] });
  const cmds = launchCommands(n);
  const byMode = MODES.map((m) => {
    const x = schedule.compile(dev, m);
    execs.push(x);
    x.run().synchronize(); // Graph: the capture happens here, outside the timed part
    return x;
  });
  group(`one run of ${n} empty-kernel steps (enqueue + synchronize)`, () => {
    summary(() => {
      bench(`C loop ×${n}`, () => {
        const rc = N.bg_bench_issue_loop(cStream.handle, cmds.ptr, cmds.len, 1);
        if (rc !== 0) check(rc, "bg_bench_issue_loop");
        cStream.synchronize();
        do_not_optimize(cmds.ab);
      }).baseline(true);
      for (const x of byMode)
        bench(names(x.mode, n), () => {
          x.run();
          x.synchronize();
        });
    });
  });
}

const res = await run();

// Per-step cost and the ratios the issue asks for: time of one run / steps (mean and median),
// and the marginal cost of one more step, (t(1000) - t(10)) / 990, which leaves out the fixed
// cost of a run (the wake-up and synchronize round trip every mode and the C loop pay once).
const stat = new Map<string, { avg: number; p50: number }>();
for (const t of res.benchmarks) for (const r of t.runs) if (r.stats) stat.set(r.name, { avg: r.stats.avg, p50: r.stats.p50 });
const per = (name: string, n: number, k: "avg" | "p50") => (stat.get(name)?.[k] ?? NaN) / n;
const fmt = (ns: number) => (ns >= 1000 ? `${(ns / 1000).toFixed(2)} µs` : `${ns.toFixed(1)} ns`);
const cols = ["C loop", ...MODES.map(String)];
const key = (col: number, n: number) => (col === 0 ? `C loop ×${n}` : names(MODES[col - 1]!, n));
for (const k of ["avg", "p50"] as const) {
  console.log(`\nper-step cost, ${k === "avg" ? "mean" : "median"} of one run (enqueue + synchronize) / steps`);
  console.log(`${"steps".padStart(6)} ${cols.map((c) => c.padStart(15)).join("")}   Stream/Graph  Graph/C`);
  for (const n of SIZES) {
    const v = cols.map((_, i) => per(key(i, n), n, k));
    console.log(`${String(n).padStart(6)} ${v.map((x) => fmt(x).padStart(15)).join("")}   ${(v[1]! / v[2]!).toFixed(2).padStart(11)}×  ${(v[2]! / v[0]!).toFixed(2).padStart(6)}×`);
  }
}
const lo = SIZES[0]!, hi = SIZES[SIZES.length - 1]!;
const marginal = (i: number) => (per(key(i, hi), 1, "p50") - per(key(i, lo), 1, "p50")) / (hi - lo);
const mv = cols.map((_, i) => marginal(i));
console.log(`\nmarginal cost of one more step (medians, ${hi} vs ${lo} steps): ${cols.map((c, i) => `${c} ${fmt(mv[i]!)}`).join(", ")}; Stream/Graph ${(mv[1]! / mv[2]!).toFixed(2)}×, Graph/C ${(mv[2]! / mv[0]!).toFixed(2)}×`);
const s100 = per(names(ExecMode.Stream, 100), 100, "avg"), g100 = per(names(ExecMode.Graph, 100), 100, "avg"), c100 = per("C loop ×100", 100, "avg");
console.log(`aims at 100 steps (means): Graph ≥5× cheaper than Stream: ${(s100 / g100).toFixed(2)}× ${s100 / g100 >= 5 ? "met" : "NOT met"}; Graph within 1.2× of the C loop: ${(g100 / c100).toFixed(2)}× ${g100 / c100 <= 1.2 ? "met" : "NOT met"}`);

for (const x of execs) x.dispose();
cStream.dispose();
mod.dispose();
