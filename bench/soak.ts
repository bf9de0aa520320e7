// The soak (issue 23, "Done when"): for a while (3 minutes by default) plans are prepared, run and
// disposed, and buffers of random sizes are allocated, a third of them forgotten (left to the
// collector and the native-memory budget), the rest disposed. The process's RSS is read after
// every iteration; each window of --every seconds reports its lowest and highest RSS, and the
// verdict is whether RSS is flat after the warm-up (--warmup seconds, default the first minute):
// the windows after it are cut in two halves, and the second half's highest peak and highest
// trough may pass the first half's by at most --margin MiB. Halves, not single windows: forgotten
// buffers make RSS a sawtooth up to the budget, and where a window catches it depends on how fast
// a loaded machine runs the loop; memory that stays raises the whole second half.
//
//   bun run bench/soak.ts     # 180 s, windows of 10 s, warm-up 60 s, budget 64 MiB, margin 32 MiB
//   bun run bench/soak.ts --seconds 10 --every 1 --warmup 4 --budget 16 --margin 48 --json
//                             # what test/soak.test.ts runs
//   --only plans | --only buffers: half of the work, to tell which half grows
//
// Every plan's answer is checked (one output element against float64), so a soak that stays
// flat by doing nothing fails. Not a bench file of `bun run bench` (no `.bench.ts`).
import { Device, memoryStats, setMemoryBudget, Tensor } from "../src";

const MiB = 2 ** 20;
function flag(name: string, def: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return def;
  const v = Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${name} wants a positive number, got ${process.argv[i + 1]}`);
  return v;
}
const seconds = flag("seconds", 180);
const every = flag("every", 10);
const warmup = flag("warmup", Math.min(60, seconds / 3));
const margin = flag("margin", 32) * MiB;
const budget = flag("budget", 64); // MiB: the sawtooth of forgotten buffers stays this tall
const json = process.argv.includes("--json");
const only = process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1] : undefined;
if (only !== undefined && only !== "plans" && only !== "buffers") throw new Error(`--only wants plans or buffers, got ${only}`);

setMemoryBudget(budget * MiB);
const dev = Device.default();

// A seeded generator, so two soaks do the same work.
let seed = 0x9e3779b9;
function rand(): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 2 ** 32;
}
function randomData(n: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = rand() * 2 - 1;
  return a;
}

// A few program structures (so kernels compile once, then come from the caches), each prepared
// afresh every time it is used and disposed after its runs.
const SHAPES: [number, number, number][] = [
  [16, 32, 8],
  [64, 64, 32],
  [8, 128, 16],
  [32, 16, 64],
];
let planRuns = 0;
async function onePlan(): Promise<void> {
  const [m, k, n] = SHAPES[Math.floor(rand() * SHAPES.length)]!;
  const x = Tensor.from(new Float32Array(m * k), [m, k], { name: "x" });
  const w = Tensor.from(new Float32Array(k * n), [k, n], { name: "w" });
  const plan = x.matmul(w).relu().prepare({ outputNames: ["y"] });
  try {
    for (let r = 0; r < 3; r++) {
      const xs = randomData(m * k);
      const ws = randomData(k * n);
      const { y } = await plan.run({ x: xs, w: ws });
      // check one element against float64
      const i = Math.floor(rand() * m);
      const j = Math.floor(rand() * n);
      let want = 0;
      for (let t = 0; t < k; t++) want += xs[i * k + t]! * ws[t * n + j]!;
      want = Math.max(0, want);
      const got = (y as Float32Array)[i * n + j]!;
      if (Math.abs(got - want) > 1e-4 * (1 + Math.abs(want))) throw new Error(`plan ${m}x${k}x${n}: y[${i},${j}] = ${got}, want ${want}`);
      planRuns++;
    }
  } finally {
    plan.dispose();
  }
}

// Buffers from 1 KiB to 16 MiB, log-uniform; every third one forgotten.
let buffers = 0;
let forgotten = 0;
function someBuffers(): void {
  for (let b = 0; b < 4; b++) {
    const bytes = Math.floor(1024 * 2 ** (rand() * 14)) & ~3;
    const buf = dev.alloc(bytes).fill(buffers & 255, { type: "u8" });
    buffers++;
    if (buffers % 3 === 0) forgotten++; // left to the collector
    else buf.dispose();
  }
}

interface Window {
  t: number; // end of the window, seconds
  minMiB: number;
  maxMiB: number;
  liveMiB: number; // live native bytes at the window's end
  heapMiB: number;
  iterations: number;
}
const rss = () => process.memoryUsage().rss;
const windows: Window[] = [];
const t0 = performance.now();
let lo = Infinity;
let hi = 0;
let iterations = 0;
let next = every;
for (;;) {
  if (only !== "buffers") await onePlan();
  else await new Promise((r) => setImmediate(r));
  if (only !== "plans") someBuffers();
  iterations++;
  const r = rss();
  lo = Math.min(lo, r);
  hi = Math.max(hi, r);
  const t = (performance.now() - t0) / 1000;
  if (t >= next) {
    const mu = process.memoryUsage();
    windows.push({
      t: +t.toFixed(1),
      minMiB: lo / MiB,
      maxMiB: hi / MiB,
      liveMiB: (memoryStats.liveBytes + memoryStats.liveHostBytes) / MiB,
      heapMiB: mu.heapUsed / MiB,
      iterations,
    });
    lo = Infinity;
    hi = 0;
    while (next <= t) next += every; // an iteration longer than a window (a first compile) ends one window
    if (t >= seconds) break;
  }
}

// Flat after the warm-up: the second half of the later windows no higher than the first half, within `margin`.
const after = windows.filter((w) => w.t > warmup);
if (after.length < 2) throw new Error(`soak: ${after.length} window(s) after the warm-up; run longer than --warmup + 2 × --every`);
const h1 = after.slice(0, Math.floor(after.length / 2));
const h2 = after.slice(h1.length);
const top = (ws: Window[], f: (w: Window) => number) => Math.max(...ws.map(f));
const peakGrowth = top(h2, (w) => w.maxMiB) - top(h1, (w) => w.maxMiB);
const troughGrowth = top(h2, (w) => w.minMiB) - top(h1, (w) => w.minMiB);
const flat = peakGrowth * MiB <= margin && troughGrowth * MiB <= margin;
// the troughs' trend after the warm-up (least squares), MiB per minute: for the report
const slope = (() => {
  const n = after.length;
  const mt = after.reduce((a, w) => a + w.t, 0) / n;
  const mv = after.reduce((a, w) => a + w.minMiB, 0) / n;
  const num = after.reduce((a, w) => a + (w.t - mt) * (w.minMiB - mv), 0);
  const den = after.reduce((a, w) => a + (w.t - mt) ** 2, 0);
  return den ? (num / den) * 60 : 0;
})();
const spark = (vals: number[]) => {
  const bars = "▁▂▃▄▅▆▇█";
  const lo2 = Math.min(...vals);
  const span = Math.max(...vals) - lo2 || 1;
  return vals.map((v) => bars[Math.min(7, Math.floor(((v - lo2) / span) * 8))]).join("");
};
const summary = {
  seconds,
  every,
  warmup,
  marginMiB: margin / MiB,
  budgetMiB: budget,
  iterations,
  planRuns,
  buffers,
  forgotten,
  collections: memoryStats.collections,
  peakGrowthMiB: +peakGrowth.toFixed(1),
  troughGrowthMiB: +troughGrowth.toFixed(1),
  troughSlopeMiBPerMin: +slope.toFixed(2),
  flat,
  windows: windows.map((w) => ({ ...w, minMiB: +w.minMiB.toFixed(1), maxMiB: +w.maxMiB.toFixed(1), liveMiB: +w.liveMiB.toFixed(1), heapMiB: +w.heapMiB.toFixed(1) })),
};
if (json) console.log(JSON.stringify(summary));
else {
  console.log(`soak: ${seconds} s on ${dev.name}, budget ${budget} MiB, ${iterations} iterations, ${planRuns} plan runs, ${buffers} buffers (${forgotten} forgotten), ${memoryStats.collections} collections`);
  console.log(" t (s)   RSS min   RSS max   live native   JS heap");
  for (const w of windows)
    console.log(`${w.t.toFixed(0).padStart(6)} ${w.minMiB.toFixed(0).padStart(7)} MiB ${w.maxMiB.toFixed(0).padStart(6)} MiB ${w.liveMiB.toFixed(0).padStart(8)} MiB ${w.heapMiB.toFixed(0).padStart(6)} MiB`);
  console.log(`RSS max per window: ${spark(windows.map((w) => w.maxMiB))}  (${Math.min(...windows.map((w) => w.maxMiB)).toFixed(0)}–${Math.max(...windows.map((w) => w.maxMiB)).toFixed(0)} MiB)`);
  const signed = (v: number) => `${v >= 0 ? "+" : ""}${v.toFixed(1)}`;
  console.log(`after the first ${warmup} s, second half against first: peak ${signed(peakGrowth)} MiB, trough ${signed(troughGrowth)} MiB (troughs' trend ${signed(slope)} MiB/min): ${flat ? "flat" : "NOT flat"} (margin ${margin / MiB} MiB)`);
}
process.exitCode = flat ? 0 : 1;
