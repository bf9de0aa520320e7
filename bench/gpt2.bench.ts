// Issue 13: the GPT-2-style decoder of examples/gpt2.ts against onnxruntime-node on the same
// weights. One random model (4 layers, width 256, 4 heads, vocabulary 2048, context 256) is
// written to a temp dir as safetensors; bench/onnx/export_gpt2.py turns it into an ONNX model of
// the same computation (Python's onnx package is installed once into the tests' pip cache where
// python3 lacks it; if python3 or pip is missing, the reason is printed and bungpu is measured
// alone). Both run on the CPU with the same thread count: onnxruntime's
// intraOpNumThreads = the CPU backend's pool (one thread per online core, the device's
// computeUnits), one inter-op thread. Measured side by side in one mitata run, each INCLUDING
// writing its inputs and reading its outputs back (what a user pays):
//  1. the prompt: 32 tokens in, every position's logits out, the KV cache filled
//     (bungpu: GPT2.prompt; onnxruntime: session.run with an empty past);
//  2. one decode step at context 32 (and 192 unless quick): a token in, its logits out, its key and
//     value cached (bungpu: GPT2.step; onnxruntime: session.run with the past of that length);
//  3. bungpu's decode plan alone (executeWithVars, no input or output), to show what the host
//     side costs.
// Then the outputs' agreement (max |diff| of the logits over a greedy generation, same tokens?),
// the ratios, and a per-kernel profile of the decode step (executeWithVarsProfiled).
// Run: bun run bench/gpt2.bench.ts   (TENSOR_BENCH_QUICK=1 for a short run; GPT2_BENCH_SHAPE=124m for GPT-2 small's shape; PYTHON=… names the
//      interpreter, python3 by default)
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device } from "../src";
import { GPT2, writeRandomGPT2, type GPT2Config } from "../src/models";
import { OrtGPT2 } from "./onnx/ort_gpt2";
import { pipCacheRoot, pipInstallOnce } from "../test/pip_cache";

// Steady-state timings: kernels built at -O3 before they run (no tiered first build; see bench/coldstart.bench.ts).
process.env.BUNGPU_TIER ??= "optimized";

const quick = !!process.env.TENSOR_BENCH_QUICK;
const note = (s: string) => process.stderr.write(`${s}\n`);

// GPT2_BENCH_SHAPE=124m: GPT-2 small's shape (12 layers, width 768, 12 heads, vocabulary 50257,
// context 1024: 498 MB of float32 weights, read from memory at every decode step), prompt of 64
const big = process.env.GPT2_BENCH_SHAPE === "124m";
const CFG: GPT2Config = big ? { nLayer: 12, nEmbd: 768, nHead: 12, vocabSize: 50257, nCtx: 1024 } : { nLayer: 4, nEmbd: 256, nHead: 4, vocabSize: 2048, nCtx: 256 };
const PROMPT = big ? 64 : 32;
const LONG = 192; // a second decode position, the cache holding this many tokens
const GEN = quick || big ? 16 : 48; // tokens generated to compare the outputs

const dev = Device.default();
const threads = dev.props.computeUnits;
const dir = mkdtempSync(join(tmpdir(), "bungpu-gpt2-bench-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const weightsPath = join(dir, "gpt2.safetensors"), onnxPath = join(dir, "gpt2.onnx");
writeRandomGPT2(weightsPath, CFG, 11);
note(`model: ${CFG.nLayer} layers, width ${CFG.nEmbd}, ${CFG.nHead} heads, vocabulary ${CFG.vocabSize}, context ${CFG.nCtx}; ${dev.name}, ${threads} threads`);

let t0 = performance.now();
const model = GPT2.load(weightsPath);
note(`bungpu: loaded and prepared both plans in ${(performance.now() - t0).toFixed(0)} ms; prompt plan ${model.promptPlan.kernels().length} kernels, decode plan ${model.decodePlan.kernels().length} kernels`);
// The same checkpoint kept in bfloat16 on the device (weights and KV cache; float32 accumulation):
// half the bytes a decode step reads (GPT2_BENCH_HALF=0 leaves it out).
const half = process.env.GPT2_BENCH_HALF !== "0" ? GPT2.fromPretrained(weightsPath, { dtype: "bfloat16" }) : null;
const weightBytes = (m: GPT2) => m.decodePlan.buffers().filter((b) => b.byteLength >= CFG.nEmbd * CFG.nEmbd * 2).reduce((a, b) => a + b.byteLength, 0);

// ---- onnxruntime ---------------------------------------------------------------------------------

let ort: OrtGPT2 | null = null;
let ortWhyNot = "";
t0 = performance.now();
const python = process.env.PYTHON ?? "python3";
// The exporter needs Python's onnx package: where python3 lacks it, it is installed once (with
// what it needs) into the per-user cache the tests' NVRTC and NCCL come from, and put on PYTHONPATH.
const pyPath: string[] = [];
if (Bun.spawnSync([python, "-c", "import onnx, numpy"], { stdout: "ignore", stderr: "ignore" }).exitCode !== 0) {
  const root = pipCacheRoot("onnx");
  note(`python3 has no onnx package: installing it into ${root} (once)…`);
  const why = pipInstallOnce(root, "onnx", (d) => existsSync(join(d, "onnx", "__init__.py")), true);
  if (why) note(why);
  else pyPath.push(root);
}
let pyErr = "";
try {
  const env = pyPath.length ? { ...process.env, PYTHONPATH: [...pyPath, process.env.PYTHONPATH].filter(Boolean).join(":") } : process.env;
  const py = Bun.spawnSync([python, join(import.meta.dir, "onnx", "export_gpt2.py"), weightsPath, onnxPath], { stdout: "pipe", stderr: "pipe", env });
  if (py.exitCode !== 0) pyErr = new TextDecoder().decode(py.stderr).trim().split("\n").pop() || `exit ${py.exitCode}`;
} catch (e) {
  pyErr = `cannot run ${python}: ${e instanceof Error ? e.message : String(e)}`;
}
if (pyErr) ortWhyNot = `bench/onnx/export_gpt2.py failed (python3 with numpy and onnx needed): ${pyErr}`;
else {
  note(`export_gpt2.py: ONNX model written in ${(performance.now() - t0).toFixed(0)} ms`);
  try {
    ort = await OrtGPT2.create(onnxPath, CFG, threads);
    note(`onnxruntime-node ${ort.ort.env.versions.common}: CPU execution provider, intraOpNumThreads ${threads}, interOpNumThreads 1`);
  } catch (e) {
    ortWhyNot = `onnxruntime-node unavailable: ${e instanceof Error ? e.message.split("\n")[0] : String(e)}`;
  }
}
if (!ort) note(`${ortWhyNot}; measuring bungpu alone`);

// ---- agreement -----------------------------------------------------------------------------------

const rnd = (i: number) => (i * 2654435761) % CFG.vocabSize;
const prompt = Array.from({ length: PROMPT }, (_, i) => rnd(i + 1));
const longPrompt = Array.from({ length: LONG }, (_, i) => rnd(i + 7));
const ours = model.generate(prompt, GEN);
let agreement = "";
if (ort) {
  const theirs = await ort.generate(prompt, GEN);
  let maxDiff = 0, maxAbs = 0;
  ours.logits.forEach((l, k) =>
    l.forEach((v, i) => {
      maxDiff = Math.max(maxDiff, Math.abs(v - theirs.logits[k]![i]!));
      maxAbs = Math.max(maxAbs, Math.abs(v));
    }),
  );
  let same = 0;
  while (same < GEN && ours.tokens[same] === theirs.tokens[same]) same++;
  agreement =
    `agreement over ${GEN} greedy tokens from a ${PROMPT}-token prompt: ${same === GEN ? "the same tokens" : `the same first ${same} tokens, then DIFFERENT`}; ` +
    `logits max |diff| ${maxDiff.toExponential(2)} (max |logit| ${maxAbs.toFixed(2)})`;
  note(agreement);
}

// ---- the measured calls --------------------------------------------------------------------------

const tok = ours.tokens[0]!;
type Past = Awaited<ReturnType<OrtGPT2["run"]>>;
let ortPast: Past | null = null, ortLongPast: Past | null = null;
if (ort) {
  ortPast = ort.pastOf(await ort.run(prompt));
  if (!quick) ortLongPast = ort.pastOf(await ort.run(longPrompt));
}

const B_PROMPT = `bungpu GPT2.prompt (${PROMPT} tokens)`, O_PROMPT = `onnxruntime session.run (${PROMPT} tokens)`;
const B_STEP = (p: number) => `bungpu GPT2.step at ${p}`, O_STEP = (p: number) => `onnxruntime session.run, 1 token at ${p}`;
const B_PLAN = (p: number) => `bungpu decode plan alone at ${p}`;
const H_STEP = (p: number) => `bungpu bfloat16 GPT2.step at ${p}`, H_PROMPT = `bungpu bfloat16 GPT2.prompt (${PROMPT} tokens)`;

const stepGroup = (P: number, past: Past | null, fill: number[]) => {
  group(`decode step, context ${P}`, () => {
    summary(() => {
      if (ort && past) {
        const o = ort, pa = past;
        bench(O_STEP(P), async () => do_not_optimize((await o.run([tok], pa)).logits!.data)).baseline(true);
      }
      // the cache holds [0, P) once the prompt of P tokens ran; each step rewrites row P
      bench(B_STEP(P), function* () {
        model.prompt(fill);
        yield () => do_not_optimize(model.step(tok, P));
      });
      bench(B_PLAN(P), () => model.decodePlan.executeWithVars({ P }));
      if (half) {
        const h = half;
        bench(H_STEP(P), function* () {
          h.prompt(fill);
          yield () => do_not_optimize(h.step(tok, P));
        });
      }
    });
  });
};

group(`prompt, ${PROMPT} tokens`, () => {
  summary(() => {
    if (ort) {
      const o = ort;
      bench(O_PROMPT, async () => do_not_optimize((await o.run(prompt)).logits!.data)).baseline(true);
    }
    bench(B_PROMPT, () => do_not_optimize(model.prompt(prompt)));
    if (half) bench(H_PROMPT, () => do_not_optimize(half.prompt(prompt)));
  });
});
stepGroup(PROMPT, ortPast, prompt);
if (!quick) stepGroup(LONG, ortLongPast, longPrompt);

const res = await run();
const stat = new Map<string, { p50: number; min: number }>();
for (const t of res.benchmarks) for (const r of t.runs) if (r.stats) stat.set(r.name, { p50: r.stats.p50, min: r.stats.min });
const get = (name: string) => stat.get(name) ?? { p50: NaN, min: NaN };

// ---- report --------------------------------------------------------------------------------------

const us = (ns: number) => `${(ns / 1e3).toFixed(0)} µs`;
console.log(`\n== results (medians; ${dev.name}; ${threads} threads each)`);
const line = (what: string, b: string, o: string) => {
  const bt = get(b).p50;
  if (!ort) return console.log(`${what}: bungpu ${us(bt)}; onnxruntime not compared: ${ortWhyNot}`);
  const ot = get(o).p50;
  console.log(`${what}: bungpu ${us(bt)}, onnxruntime-node ${us(ot)}: bungpu takes ${(bt / ot).toFixed(2)}× onnxruntime's time (${bt <= ot ? "faster or equal" : "slower"})`);
};
line(`prompt (${PROMPT} tokens)`, B_PROMPT, O_PROMPT);
for (const P of quick ? [PROMPT] : [PROMPT, LONG]) {
  line(`decode step at ${P}`, B_STEP(P), O_STEP(P));
  const plan = get(B_PLAN(P)), step = get(B_STEP(P));
  console.log(
    `  bungpu's step at ${P}: the plan alone ${us(plan.p50)} (min ${us(plan.min)}); token write + logits read + cache copies ≈ ` +
      `${us(step.p50 - plan.p50)} by medians, ${us(step.min - plan.min)} by minima (noisy: a difference of two timings)`,
  );
}
if (agreement) console.log(agreement);
if (half) {
  const fb = weightBytes(model), hb = weightBytes(half);
  for (const P of quick ? [PROMPT] : [PROMPT, LONG]) {
    const f = get(B_STEP(P)).p50, h = get(H_STEP(P)).p50;
    console.log(
      `bfloat16 weights and cache: decode step at ${P} ${us(h)} (${(h / f).toFixed(2)}× float32's ${us(f)}); ` +
        `the step's matrices ${(hb / 1e6).toFixed(0)} MB read at ${(hb / h).toFixed(1)} GB/s (float32: ${(fb / 1e6).toFixed(0)} MB at ${(fb / f).toFixed(1)} GB/s)`,
    );
  }
  const fp = get(B_PROMPT).p50, hp = get(H_PROMPT).p50;
  console.log(`bfloat16 prompt (${PROMPT} tokens): ${us(hp)} (${(hp / fp).toFixed(2)}× float32's ${us(fp)})`);
  const g = half.generate(prompt, GEN);
  let same = 0;
  while (same < GEN && g.tokens[same] === ours.tokens[same]) same++;
  console.log(`bfloat16 against float32 over ${GEN} greedy tokens: ${same === GEN ? "the same tokens" : `the same first ${same}, then different`}`);
}

// where the time goes, kernel by kernel (each timed by a pair of events: adds overhead), grouped
// by kernel (one per layer: ×nLayer), with the loop bounds the generated source declares
function profile(what: string, run: () => import("../src/tensor").KernelProfile[]): void {
  const reps = quick ? 5 : 20;
  const acc = new Map<string, { ms: number; n: number; shape: string }>();
  let kernels = 0;
  for (let r = 0; r < reps; r++) {
    const prof = run();
    kernels = prof.length;
    const seen = new Map<string, number>();
    for (const k of prof) {
      seen.set(k.entryPoint, (seen.get(k.entryPoint) ?? 0) + 1);
      const shape = [...k.source.matchAll(/const int (D\d|R\d|ROWS|COLS) = (\d+);/g)].map((m) => `${m[1]} ${m[2]}`).join(", ");
      const e = acc.get(k.entryPoint) ?? { ms: 0, n: 0, shape };
      e.ms += k.elapsedMs / reps;
      acc.set(k.entryPoint, e);
    }
    for (const [name, n] of seen) acc.get(name)!.n = n;
  }
  const total = [...acc.values()].reduce((a, b) => a + b.ms, 0);
  console.log(`\n${what}, profiled: ${kernels} kernels (${acc.size} distinct), ${(total * 1e3).toFixed(0)} µs summed over kernels (mean of ${reps}); the slowest:`);
  for (const [name, e] of [...acc].sort((a, b) => b[1].ms - a[1].ms).slice(0, 8))
    console.log(`  ${(e.ms * 1e3).toFixed(1).padStart(7)} µs  ${name} ×${e.n}  (${e.shape})`);
}
model.prompt(prompt);
profile(`decode step at ${PROMPT}`, () => model.decodePlan.executeWithVarsProfiled({ P: PROMPT }));
profile(`prompt of ${PROMPT} tokens`, () => model.promptPlan.executeWithVarsProfiled({ T: PROMPT }));

model.dispose();
half?.dispose();
await ort?.dispose();
