// Issue 7: the tensor compiler's ExecutionPlan against the machine and against other libraries.
//  1. a fused chain of 8 elementwise ops over 16M float32 (one kernel) against the machine's copy
//     bandwidth (Buffer.copyTo of the same bytes: memmove on the CPU backend); GB/s counts bytes
//     read + bytes written;
//  2. a 1024×1024 float32 matmul against numpy's `a @ b` (python3, timed by numpy's own loop in a
//     subprocess of this run), in GFLOP/s;
//  3. a two-layer MLP (batch 64, 256 → 512 → 256, gelu then relu; the demo's model) against
//     onnxruntime-node on the CPU with the same weights; the ONNX model is written here as
//     protobuf bytes (no Python onnx package); also with the input written and the output read
//     each run (runSync, a fresh output array or the caller's), as session.run does;
//  4. warm prepare() of a ~20-kernel plan from the caches in a fresh process (one process
//     compiles into the plan and kernel caches, fresh ones time prepare(); the same with the
//     plan cache off; then a phase-by-phase breakdown).
//  5. per-execute overhead of a small multi-kernel plan (6 unfused elementwise kernels over 256
//     float32): kernel by kernel (one launch call each, then a synchronize) against the plan's
//     one command list (submit and wait in one crossing), in the same mitata run.
// Run: bun run bench/tensor.bench.ts   (TENSOR_BENCH_QUICK=1 for a short run;
//      TENSOR_BENCH_PREPARE_ONLY=1 for part 4 alone; TENSOR_BENCH_OVERHEAD_ONLY=1 for part 5 alone)
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { Device, compileStats } from "../src";
import { ExecMode } from "../src/schedule";
import { Program } from "../src/kernel";
import { Tensor, generate, schedule, tensorCompileStats, type ExecutionPlan } from "../src/tensor";
import { toposort } from "../src/tensor/ast";
import { prelude } from "../src/tensor/codegen";
import { langOf } from "../src/tensor/prepare";
import { loadPlan, planCacheContext, planFromCache, planKey, structureKey } from "../src/tensor/cache";
import { collectVars } from "../src/tensor/scheduler";
import { initializer, node, Pb, valueInfo } from "./onnx/writer";
import { seededRandom } from "../src/tensor/reference";

// Steady-state timings: kernels built at -O3 before they run (no tiered first build; see bench/coldstart.bench.ts).
process.env.BUNGPU_TIER ??= "optimized";

const quick = !!process.env.TENSOR_BENCH_QUICK;
const note = (s: string) => process.stderr.write(`${s}\n`);

// ---- 4 (child side): a fresh process that builds the ~20-kernel model and times prepare() ------

/** 10 layers, widths varying so that every kernel differs: matmul + bias + relu, then a layerNorm. */
function prepModel(): Tensor {
  const widths = [64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144];
  const rnd = seededRandom(7);
  const w = (n: number) => Float32Array.from({ length: n }, () => rnd() - 0.5);
  let y = Tensor.from(w(16 * widths[0]!), [16, widths[0]!]);
  for (let i = 0; i + 1 < widths.length; i++) {
    const a = widths[i]!, b = widths[i + 1]!;
    y = y.matmul(Tensor.from(w(a * b), [a, b])).add(Tensor.from(w(b), [b])).relu();
    if (i % 3 === 2) y = y.layerNorm();
  }
  return y.softmax(-1);
}

if (process.argv.includes("--prepare-child")) {
  const dev = Device.default(); // opening the device is not prepare()'s work
  const planCache = !process.argv.includes("--no-plan-cache");
  const model = prepModel();
  const t0 = performance.now();
  const plan = model.prepare({ device: dev, planCache });
  const ms = performance.now() - t0;
  plan.execute();
  const out = {
    ms,
    kernels: plan.preparedKernels().length,
    distinct: new Set(plan.preparedKernels().map((k) => k.entryPoint)).size,
    compilerRuns: compileStats.compilerRuns,
    versionSpawns: compileStats.versionSpawns,
    diskHits: compileStats.diskHits,
    tensorCompiles: tensorCompileStats.compiles,
    planCacheHits: tensorCompileStats.planCacheHits,
    sum: Array.from(plan.readOutput(0)).reduce((p, q) => p + q, 0),
  };
  plan.dispose();
  console.log(JSON.stringify(out));
  process.exit(0);
}

if (process.argv.includes("--phases-child")) {
  // where a warm prepare's time goes, phase by phase, in a fresh process (same caches): the steps
  // prepare() takes on a plan-cache hit, in its order
  const dev = Device.default();
  const model = prepModel();
  const t: Record<string, number> = {};
  let t0 = performance.now();
  const context = planCacheContext(dev);
  t.compilerIdentity = performance.now() - t0; // the context of the key: mostly the compiler identity
  t0 = performance.now();
  const nodes = toposort([model.node]);
  const vars = collectVars(nodes, "bench");
  const pos = new Map(nodes.map((n, i) => [n, i] as const));
  const key = planKey(structureKey(nodes, pos, [model.node]), context);
  t.structureKey = performance.now() - t0; // one walk over the graph and its sha256
  t0 = performance.now();
  const cachedPlan = loadPlan(key);
  t.planLoad = performance.now() - t0; // read, key + checksum verification, JSON.parse
  if (!cachedPlan) throw new Error("--phases-child: the plan is not in the plan cache");
  t0 = performance.now();
  const lang = langOf(dev); // the device's kernel language, as prepare() picks it (BUNGPU_DEVICE=cuda:0 runs this too)
  const { gens } = planFromCache(cachedPlan, nodes, [model.node], vars, lang);
  t.planBind = performance.now() - t0; // positions → live nodes, launch functions
  t0 = performance.now();
  const source = prelude(lang) + gens.map((g) => g.body).join("\n");
  const mod = Program.compile(dev, source, { name: `tensor_${gens.length}k`, options: dev.backend === "cpu" ? ["-ffp-contract=fast"] : [] });
  t.moduleFromDiskCache = performance.now() - t0; // source hash, artifact verification, dlopen
  t0 = performance.now();
  for (const g of gens) mod.kernel(g.name, g.signature);
  t.kernelLookup = performance.now() - t0;
  console.log(JSON.stringify({ ...t, compilerRuns: compileStats.compilerRuns, versionSpawns: compileStats.versionSpawns, diskHits: compileStats.diskHits }));
  process.exit(0);
}

if (process.argv.includes("--cold-phases-child")) {
  // what the plan cache skips: scheduling + lowering and code generation, run cold
  const model = prepModel();
  const t: Record<string, number> = {};
  let t0 = performance.now();
  const sched = schedule([model.node], {}, "bench");
  t.schedule = performance.now() - t0;
  t0 = performance.now();
  sched.kernels.map((k) => generate(k.ir, "c"));
  t.codegen = performance.now() - t0;
  t0 = performance.now();
  const r = Bun.spawnSync(["cc", "--version"], { stdout: "pipe" });
  do_not_optimize(r);
  t.ccVersionSpawn = performance.now() - t0; // what the remembered compiler identity saves
  console.log(JSON.stringify(t));
  process.exit(0);
}

// ---- 4. warm prepare() in fresh processes -------------------------------------------------------

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

function warmPrepare() {
  note("warm prepare(): a warming process, then timed fresh processes…");
  const child = (...flags: string[]) => {
    const r = Bun.spawnSync(["bun", import.meta.path, ...flags], { stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`${flags.join(" ")} failed: ${new TextDecoder().decode(r.stderr)}`);
    return JSON.parse(new TextDecoder().decode(r.stdout).trim().split("\n").pop()!) as Record<string, number>;
  };
  const n = quick ? 3 : 7;
  const warm = child("--prepare-child");
  const prepRuns = Array.from({ length: n }, () => child("--prepare-child"));
  // the same, with the plan cache off: scheduling, lowering and codegen in every process (kernels
  // still from the kernel disk cache): the figure before the plan cache
  const noPlanRuns = Array.from({ length: n }, () => child("--prepare-child", "--no-plan-cache"));
  const phaseRuns = Array.from({ length: quick ? 1 : 3 }, () => child("--phases-child"));
  const cold = child("--cold-phases-child");
  return { warm, prepRuns, noPlanRuns, phaseRuns, cold };
}

function warmPrepareReport({ warm, prepRuns, noPlanRuns, phaseRuns, cold }: ReturnType<typeof warmPrepare>): void {
  const pms = prepRuns.map((r) => r.ms!).sort((a, b) => a - b);
  const nms = noPlanRuns.map((r) => r.ms!).sort((a, b) => a - b);
  const med = pms[pms.length >> 1]!;
  console.log(
    `warm prepare(): ${warm.kernels} kernels (${warm.distinct} distinct), fresh process, from the plan cache (hits ${prepRuns.map((r) => r.planCacheHits).join("/")}) and the kernel disk cache (compiler runs ${prepRuns.map((r) => r.compilerRuns).join("/")}, \`cc --version\` spawns ${prepRuns.map((r) => r.versionSpawns).join("/")}): ` +
      `median ${med.toFixed(2)} ms, best ${pms[0]!.toFixed(2)} ms, worst ${pms[pms.length - 1]!.toFixed(2)} ms over ${pms.length} processes (the warming process took ${warm.ms!.toFixed(0)} ms, ${warm.compilerRuns} compiler runs) ` +
      `(aim < 10 ms: ${med < 10 ? "met" : "NOT met"})`,
  );
  console.log(`  without the plan cache (planCache: false; kernels from the disk cache): median ${nms[nms.length >> 1]!.toFixed(2)} ms, best ${nms[0]!.toFixed(2)} ms`);
  const keys = Object.keys(phaseRuns[0]!).filter((k) => !["compilerRuns", "versionSpawns", "diskHits"].includes(k));
  console.log(`  phases of a plan-cache hit in a fresh process (ms, median of ${phaseRuns.length}): ${keys.map((k) => `${k} ${median(phaseRuns.map((r) => r[k]!)).toFixed(2)}`).join(", ")}`);
  console.log(`  what the caches skip, cold (ms): ${Object.entries(cold).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(", ")}`);
}

if (process.env.TENSOR_BENCH_PREPARE_ONLY) {
  warmPrepareReport(warmPrepare());
  process.exit(0);
}

// ---- 5. per-execute overhead: kernel by kernel vs one command list ---------------------------------

const OVH_N = 256;
const OVH_EACH = "6-kernel plan, kernel by kernel (launch + synchronize)";
const OVH_LIST = "6-kernel plan, one command list (one crossing)";

/** Six unfused elementwise kernels over a small tensor: launch overhead dominates. */
function overheadPlan(device: Device): ExecutionPlan {
  const x = Tensor.from(Float32Array.from({ length: OVH_N }, (_, i) => i / OVH_N), [OVH_N]);
  const plan = x.add(1).mul(2).relu().sub(0.5).exp().neg().prepare({ device, fusion: false });
  if (plan.preparedKernels().length !== 6) throw new Error(`overhead plan: 6 kernels expected, got ${plan.preparedKernels().length}`);
  plan.execute({ launch: "each" });
  const a = plan.readOutput(0);
  plan.execute();
  const b = plan.readOutput(0);
  for (let i = 0; i < OVH_N; i++) if (a[i] !== b[i]) throw new Error(`overhead plan: the two ways disagree at ${i}`);
  return plan;
}

function overheadGroup(plan: ExecutionPlan): void {
  group(`per-execute overhead: 6 kernels over ${OVH_N} float32`, () => {
    summary(() => {
      bench(OVH_EACH, () => plan.execute({ launch: "each" })).baseline(true);
      bench(OVH_LIST, () => plan.execute());
    });
  });
}

function overheadReport(get: (name: string) => { p50: number; min: number }): void {
  const e = get(OVH_EACH), l = get(OVH_LIST);
  console.log(
    `per-execute overhead, 6 kernels over ${OVH_N} float32 on ${dev.spec}: kernel by kernel ${(e.p50 / 1e3).toFixed(2)} µs (best ${(e.min / 1e3).toFixed(2)}), ` +
      `one command list ${(l.p50 / 1e3).toFixed(2)} µs (best ${(l.min / 1e3).toFixed(2)}): ${(e.p50 / l.p50).toFixed(2)}× less per execute`,
  );
}

function statsOf(res: Awaited<ReturnType<typeof run>>) {
  const stat = new Map<string, { avg: number; p50: number; min: number }>();
  for (const t of res.benchmarks) for (const r of t.runs) if (r.stats) stat.set(r.name, { avg: r.stats.avg, p50: r.stats.p50, min: r.stats.min });
  return (name: string) => stat.get(name) ?? { avg: NaN, p50: NaN, min: NaN };
}

// ---- the main process ------------------------------------------------------------------------

const dev = Device.default();

if (process.env.TENSOR_BENCH_OVERHEAD_ONLY) {
  const plan = overheadPlan(dev);
  overheadGroup(plan);
  overheadReport(statsOf(await run()));
  plan.dispose();
  process.exit(0);
}

const rnd = seededRandom(1234);
const randArray = (n: number, scale = 1) => Float32Array.from({ length: n }, () => (rnd() * 2 - 1) * scale);
const plans: ExecutionPlan[] = [];

// 1. fused elementwise chain vs copy bandwidth
const EW_N = 16 << 20;
note("preparing the elementwise chain…");
const ewInput = new Float32Array(EW_N);
for (let i = 0; i < EW_N; i++) ewInput[i] = (i % 1000) * 0.001;
let ew = Tensor.from(ewInput, [EW_N]);
const OPS = 8;
for (let i = 0; i < OPS; i++) ew = i % 4 === 0 ? ew.add(0.5) : i % 4 === 1 ? ew.mul(0.75) : i % 4 === 2 ? ew.maximum(0.1) : ew.sub(0.25);
const ewPlan = ew.prepare({ device: dev });
plans.push(ewPlan);
if (ewPlan.preparedKernels().length !== 1) throw new Error(`the chain should be one kernel, got ${ewPlan.preparedKernels().length}`);
ewPlan.execute({ mode: ExecMode.Graph });
{
  const got = ewPlan.readOutput(0);
  for (const i of [0, 12345, EW_N - 1]) {
    let x = Math.fround(ewInput[i]!);
    for (let k = 0; k < OPS; k++) x = Math.fround(k % 4 === 0 ? x + 0.5 : k % 4 === 1 ? x * 0.75 : k % 4 === 2 ? Math.max(x, Math.fround(0.1)) : x - 0.25);
    if (Math.abs(got[i]! - x) > 1e-6) throw new Error(`elementwise chain: element ${i}: ${got[i]} vs ${x}`);
  }
}
const copySrc = dev.alloc(EW_N * 4).write(ewInput);
const copyDst = dev.alloc(EW_N * 4).fill(0);

// 2. matmul
const MM = 1024;
note("preparing the matmul…");
const mmA = randArray(MM * MM), mmB = randArray(MM * MM);
const mmPlan = Tensor.from(mmA, [MM, MM]).matmul(Tensor.from(mmB, [MM, MM])).prepare({ device: dev });
plans.push(mmPlan);
mmPlan.execute({ mode: ExecMode.Graph });
{
  const got = mmPlan.readOutput(0);
  for (const [i, j] of [[0, 0], [517, 3], [1023, 1023]] as const) {
    let s = 0;
    for (let k = 0; k < MM; k++) s += mmA[i * MM + k]! * mmB[k * MM + j]!;
    if (Math.abs(got[i * MM + j]! - s) > 1e-3) throw new Error(`matmul: [${i}, ${j}] ${got[i * MM + j]} vs ${s}`);
  }
}

// 3. MLP vs onnxruntime
const B = 64, IN = 256, HID = 512, OUT = 256;
note("preparing the MLP…");
const mlp = { x: randArray(B * IN), w1: randArray(IN * HID, 1 / 16), b1: randArray(HID, 0.1), w2: randArray(HID * OUT, 1 / 22), b2: randArray(OUT, 0.1) };
const mlpPlan = Tensor.from(mlp.x, [B, IN])
  .matmul(Tensor.from(mlp.w1, [IN, HID]))
  .add(Tensor.from(mlp.b1, [HID]))
  .gelu()
  .matmul(Tensor.from(mlp.w2, [HID, OUT]))
  .add(Tensor.from(mlp.b2, [OUT]))
  .relu()
  .prepare({ device: dev });
plans.push(mlpPlan);
mlpPlan.execute({ mode: ExecMode.Graph });
const ours = mlpPlan.readOutput(0);
const MLP_LIST = "bungpu execute (default: the plan's command list, submitted and waited for in one crossing)";
const MLP_SYNC_FRESH = "bungpu runSync(x): input written, list run and waited in one crossing, fresh output";
const MLP_SYNC_INTO = "bungpu runSync(x, { outputs: [y] }): the same, output read into the caller's array";
const mlpIn = mlpPlan.inputNames[0]!;
const mlpOut = new Float32Array(B * OUT);
{
  const got = mlpPlan.runSync({ [mlpIn]: mlp.x }, { outputs: [mlpOut] })[mlpPlan.outputNames[0]!]!;
  for (let i = 0; i < got.length; i++) if (got[i] !== ours[i]) throw new Error(`MLP: runSync and execute disagree at ${i}: ${got[i]} vs ${ours[i]}`);
}

/** The MLP as ONNX: opset 20 for Gelu(approximate="tanh"), the same formula as Tensor.gelu. */
function mlpOnnx(): Uint8Array {
  const g = new Pb();
  const tanhAttr = new Pb().str(1, "approximate").bytes(4, [...new TextEncoder().encode("tanh")]).int(20, 3); // AttributeProto: s, type STRING
  g.msg(1, node("MatMul", ["x", "w1"], ["h0"]));
  g.msg(1, node("Add", ["h0", "b1"], ["h1"]));
  g.msg(1, node("Gelu", ["h1"], ["h2"], [tanhAttr]));
  g.msg(1, node("MatMul", ["h2", "w2"], ["h3"]));
  g.msg(1, node("Add", ["h3", "b2"], ["h4"]));
  g.msg(1, node("Relu", ["h4"], ["y"]));
  g.str(2, "mlp");
  g.msg(5, initializer("w1", [IN, HID], mlp.w1)).msg(5, initializer("b1", [HID], mlp.b1));
  g.msg(5, initializer("w2", [HID, OUT], mlp.w2)).msg(5, initializer("b2", [OUT], mlp.b2));
  g.msg(11, valueInfo("x", [B, IN]));
  g.msg(12, valueInfo("y", [B, OUT]));
  return new Pb().int(1, 9).str(2, "bungpu-bench").msg(7, g).msg(8, new Pb().str(1, "").int(2, 20)).done(); // ir_version 9 (opset 20 needs ≥ 9)
}

type Ort = typeof import("onnxruntime-node");
let ort: { mod: Ort; session: import("onnxruntime-node").InferenceSession; feeds: Record<string, import("onnxruntime-node").Tensor> } | null = null;
let ortError = "";
note("loading onnxruntime-node…");
try {
  const mod: Ort = await import("onnxruntime-node");
  const session = await mod.InferenceSession.create(mlpOnnx(), {
    executionProviders: ["cpu"],
    intraOpNumThreads: navigator.hardwareConcurrency,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  const feeds = { x: new mod.Tensor("float32", mlp.x, [B, IN]) };
  const r = await session.run(feeds);
  const y = r.y!.data as Float32Array;
  let err = 0;
  for (let i = 0; i < y.length; i++) err = Math.max(err, Math.abs(y[i]! - ours[i]!));
  if (!(err < 1e-3)) throw new Error(`onnxruntime and bungpu disagree: max |diff| ${err}`);
  note(`onnxruntime-node ${mod.env.versions.common}: output matches ours (max |diff| ${err.toExponential(2)})`);
  ort = { mod, session, feeds };
} catch (e) {
  ortError = e instanceof Error ? e.message.split("\n")[0]! : String(e);
  note(`onnxruntime-node unavailable, skipping that comparison: ${ortError}`);
}

// numpy, timed by itself (best of its own repeats, and the median)
function numpyMatmul(): { best: number; median: number; version: string } | { error: string } {
  const py = `
import json, time, numpy as np

n = ${MM}
rng = np.random.default_rng(0)
a = rng.random((n, n), dtype=np.float32); b = rng.random((n, n), dtype=np.float32)
for _ in range(3): a @ b
ts = []
t_end = time.perf_counter() + ${quick ? 0.5 : 2.0}
while time.perf_counter() < t_end or len(ts) < 10:
    t = time.perf_counter(); c = a @ b; ts.append(time.perf_counter() - t)
ts.sort()
print(json.dumps({"best": ts[0], "median": ts[len(ts) // 2], "version": np.__version__}))
`;
  const r = Bun.spawnSync(["python3", "-c", py], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) return { error: new TextDecoder().decode(r.stderr).trim().split("\n").pop() ?? "python3 failed" };
  return JSON.parse(new TextDecoder().decode(r.stdout)) as { best: number; median: number; version: string };
}

// ---- mitata ---------------------------------------------------------------------------------

group(`elementwise: ${OPS} fused ops over ${EW_N >> 20}M float32 vs copy of the same bytes`, () => {
  summary(() => {
    bench("Buffer.copyTo (memmove), 64 MiB", () => {
      copySrc.copyTo(copyDst);
    }).baseline(true);
    bench(`fused chain of ${OPS} ops, Graph`, () => ewPlan.execute({ mode: ExecMode.Graph }));
    bench(`fused chain of ${OPS} ops, Stream`, () => ewPlan.execute({ mode: ExecMode.Stream }));
  });
});

group(`matmul ${MM}×${MM} float32`, () => {
  bench("bungpu matmul, Graph", () => mmPlan.execute({ mode: ExecMode.Graph }));
});

group(`MLP batch ${B}, ${IN} → ${HID} → ${OUT} (gelu, relu)`, () => {
  summary(() => {
    if (ort) {
      const o = ort;
      bench("onnxruntime-node session.run (cpu)", async () => do_not_optimize(await o.session.run(o.feeds))).baseline(true);
    }
    bench("bungpu execute, Graph", () => mlpPlan.execute({ mode: ExecMode.Graph }));
    bench("bungpu execute, Stream", () => mlpPlan.execute({ mode: ExecMode.Stream }));
    bench(MLP_LIST, () => mlpPlan.execute());
    bench("bungpu bufferMut write x + execute (Graph) + readOutput", () => {
      mlpPlan.bufferMutById(mlpPlan.bufferInfo.find((b) => b.kind === "input")!.astId)!.write(mlp.x);
      mlpPlan.execute({ mode: ExecMode.Graph });
      do_not_optimize(mlpPlan.readOutput(0));
    });
    // what session.run does: the input in, the output out, per run
    bench(MLP_SYNC_FRESH, () => do_not_optimize(mlpPlan.runSync({ [mlpIn]: mlp.x })));
    bench(MLP_SYNC_INTO, () => do_not_optimize(mlpPlan.runSync({ [mlpIn]: mlp.x }, { outputs: [mlpOut] })));
  });
});

const ovhPlan = overheadPlan(dev);
plans.push(ovhPlan);
overheadGroup(ovhPlan);

const get = statsOf(await run());

// numpy after our own timings (its BLAS threads would otherwise compete with ours)
note("timing numpy…");
const np = numpyMatmul();

// ---- report -----------------------------------------------------------------------------------

const bytes = 2 * EW_N * 4;
const gbs = (ns: number) => bytes / ns; // bytes per ns = GB/s
const copyT = get("Buffer.copyTo (memmove), 64 MiB"), ewT = get(`fused chain of ${OPS} ops, Graph`);
console.log(`\n== results (medians; GB/s count ${bytes >> 20} MiB read + written per run)`);
console.log(
  `elementwise: fused ${OPS}-op chain ${gbs(ewT.p50).toFixed(1)} GB/s (best ${gbs(ewT.min).toFixed(1)}), copy ${gbs(copyT.p50).toFixed(1)} GB/s (best ${gbs(copyT.min).toFixed(1)}): ` +
    `${((100 * copyT.p50) / ewT.p50).toFixed(0)}% of copy bandwidth (aim ≥ 70%: ${copyT.p50 / ewT.p50 >= 0.7 ? "met" : "NOT met"})`,
);
const flops = 2 * MM ** 3;
const mmT = get("bungpu matmul, Graph");
const oursG = flops / mmT.p50; // flop per ns = GFLOP/s
if ("error" in np) console.log(`matmul: bungpu ${oursG.toFixed(1)} GFLOP/s; numpy unavailable: ${np.error}`);
else {
  const npG = flops / (np.median * 1e9);
  console.log(
    `matmul ${MM}³: bungpu ${oursG.toFixed(1)} GFLOP/s (best ${(flops / mmT.min).toFixed(1)}), numpy ${np.version} ${npG.toFixed(1)} GFLOP/s (best ${(flops / (np.best * 1e9)).toFixed(1)}): ` +
      `${((100 * oursG) / npG).toFixed(0)}% of numpy (aim ≥ 50%: ${oursG / npG >= 0.5 ? "met" : "NOT met"})`,
  );
}
const mlpG = get("bungpu execute, Graph");
if (ort) {
  const o = get("onnxruntime-node session.run (cpu)");
  console.log(
    `MLP: bungpu ${(mlpG.p50 / 1e3).toFixed(1)} µs (Graph; Stream ${(get("bungpu execute, Stream").p50 / 1e3).toFixed(1)} µs, default command list ${(get(MLP_LIST).p50 / 1e3).toFixed(1)} µs, with input write + readOutput ${(get("bungpu bufferMut write x + execute (Graph) + readOutput").p50 / 1e3).toFixed(1)} µs), ` +
      `onnxruntime-node ${(o.p50 / 1e3).toFixed(1)} µs: ${(o.p50 / mlpG.p50).toFixed(2)}× (aim: no slower: ${mlpG.p50 <= o.p50 ? "met" : "NOT met"})`,
  );
  const fresh = get(MLP_SYNC_FRESH), into = get(MLP_SYNC_INTO);
  console.log(
    `MLP with the input written and the output read each run, as session.run does: runSync ${(fresh.p50 / 1e3).toFixed(1)} µs with a fresh output array, ` +
      `${(into.p50 / 1e3).toFixed(1)} µs into the caller's array; onnxruntime-node ${(o.p50 / 1e3).toFixed(1)} µs: ${(o.p50 / fresh.p50).toFixed(2)}× / ${(o.p50 / into.p50).toFixed(2)}× ` +
      `(aim: no slower: ${fresh.p50 <= o.p50 ? "met" : "NOT met"} / ${into.p50 <= o.p50 ? "met" : "NOT met"})`,
  );
} else console.log(`MLP: bungpu ${(mlpG.p50 / 1e3).toFixed(1)} µs (Graph); onnxruntime-node not compared: ${ortError}`);
overheadReport(get);
warmPrepareReport(warmPrepare());

for (const p of plans) p.dispose();
copySrc.dispose();
copyDst.dispose();
