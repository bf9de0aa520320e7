// Issue 21 item 2: cold start. A fresh process with an empty kernel cache prepares (a) the demo's
// transformer block (11 kernels) and (b) the demo's GPT-2-style decoder (load from safetensors,
// the prompt and the decode plans), once with tiered compilation (the default: -O0 at once, -O3 in
// the background) and once with BUNGPU_TIER=optimized (-O3, waited for: what every first prepare
// cost before). Each process reports its prepare time, its first run, the time until the -O3 build
// took over, and a run after that; the two tiers' outputs are compared bit for bit. Processes, not
// mitata: a cold start happens once per process. Each configuration runs ROUNDS times, alternating,
// and the medians are printed.
// Run: bun run bench/coldstart.bench.ts   (COLD_ROUNDS=n, default 3)
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cpuCompilerLabel } from "../src/compile";

const root = join(import.meta.dir, "..");
const ROUNDS = Number(process.env.COLD_ROUNDS ?? 3);

const BLOCK = `
import { Device } from "./src";
import { demoTransformerModel } from "./examples/demo";
const dev = Device.open("cpu");
const m = demoTransformerModel(64);
const t0 = performance.now();
const plan = m.out.prepare({ device: dev });
const prepareMs = performance.now() - t0;
let t = performance.now(); plan.execute(); const firstRunMs = performance.now() - t;
const out = Buffer.from((plan.readOutput() as Float32Array).buffer).toString("hex");
await plan.optimized();
const optimizedAfterMs = performance.now() - t0;
plan.execute();
t = performance.now(); for (let i = 0; i < 20; i++) plan.execute(); const runMs = (performance.now() - t) / 20;
console.log(JSON.stringify({ prepareMs, firstRunMs, optimizedAfterMs, runMs, out }));
`;

const DECODER = `
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GPT2, writeRandomGPT2 } from "./src/models";
const dir = mkdtempSync(join(tmpdir(), "bungpu-cold-"));
const path = join(dir, "gpt2.safetensors");
writeRandomGPT2(path, { nLayer: 2, nEmbd: 32, nHead: 2, vocabSize: 64, nCtx: 24 }, 5);
const t0 = performance.now();
const model = GPT2.load(path);
const prepareMs = performance.now() - t0;
let t = performance.now();
const g = model.generate([3, 17, 42, 5], 8);
const firstRunMs = performance.now() - t;
await model.optimized();
const optimizedAfterMs = performance.now() - t0;
t = performance.now(); model.generate([3, 17, 42, 5], 8); const runMs = performance.now() - t;
console.log(JSON.stringify({ prepareMs, firstRunMs, optimizedAfterMs, runMs, out: g.tokens.join(",") }));
model.dispose();
rmSync(dir, { recursive: true, force: true });
`;

interface Sample {
  prepareMs: number;
  firstRunMs: number;
  optimizedAfterMs: number;
  runMs: number;
  out: string;
}

function once(code: string, tier: string): Sample {
  const cache = mkdtempSync(join(tmpdir(), "bungpu-cold-cache-"));
  try {
    const r = Bun.spawnSync([process.execPath, "-e", code], { cwd: root, env: { ...process.env, BUNGPU_CACHE_DIR: cache, BUNGPU_TIER: tier }, stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`${tier}: exit ${r.exitCode}\n${r.stderr.toString()}`);
    return JSON.parse(r.stdout.toString().trim().split("\n").pop()!) as Sample;
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const fmt = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(2));

console.log(`cold start: an empty kernel cache per process; C compiler ${cpuCompilerLabel()}; ${navigator.hardwareConcurrency} hardware threads; ${ROUNDS} rounds, medians`);
for (const [what, code] of [["demo transformer block (11 kernels)", BLOCK], ["demo GPT-2 decoder (load + prompt and decode plans)", DECODER]] as const) {
  const runs: Record<string, Sample[]> = { tiered: [], optimized: [] };
  for (let i = 0; i < ROUNDS; i++) for (const tier of ["tiered", "optimized"]) runs[tier]!.push(once(code, tier === "tiered" ? "" : tier));
  const outs = new Set([...runs.tiered!, ...runs.optimized!].map((s) => s.out));
  console.log(`\n${what}: outputs of every process ${outs.size === 1 ? "identical (quick and optimized builds, bit for bit)" : "DIFFER"}`);
  console.log(`  ${"tier".padEnd(10)} ${"prepare ms".padStart(11)} ${"first run ms".padStart(13)} ${"-O3 in use after ms".padStart(20)} ${"run ms (-O3)".padStart(13)}`);
  for (const tier of ["tiered", "optimized"]) {
    const s = runs[tier]!;
    console.log(`  ${tier.padEnd(10)} ${fmt(median(s.map((x) => x.prepareMs))).padStart(11)} ${fmt(median(s.map((x) => x.firstRunMs))).padStart(13)} ${fmt(median(s.map((x) => x.optimizedAfterMs))).padStart(20)} ${fmt(median(s.map((x) => x.runMs))).padStart(13)}`);
  }
  if (outs.size !== 1) process.exitCode = 1;
}
