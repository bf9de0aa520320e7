// Tiered compilation of tensor kernels on the CPU: a plan whose kernels were never compiled
// starts on a quick build (-O0) while the optimized build (-O3) compiles in the background, and
// Kernel.retarget swaps it in under queued work and captured graphs. The two builds must give
// the same bits: the code generator fuses multiply-adds explicitly and compiles with
// -ffp-contract=off. First-prepare processes run in subprocesses with their own empty caches.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, GpuError, Program, Status } from "../src";
import { expectGpuError } from "./helpers";
import { cpuKernels } from "./kernels";

const root = join(import.meta.dir, "..");
const temps: string[] = [];
afterAll(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});
function emptyCache(): string {
  const d = mkdtempSync(join(tmpdir(), "bungpu-tier-"));
  temps.push(d);
  return d;
}

/** Run `code` (a module in the repository root) in a fresh process; its last line is JSON. */
function runScript(code: string, env: Record<string, string>): Record<string, unknown> {
  const r = Bun.spawnSync([process.execPath, "-e", code], { cwd: root, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe", timeout: 150_000 });
  const out = r.stdout.toString().trim();
  if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode} ${r.signalCode ?? ""}\n${out}\n${r.stderr.toString()}`);
  return JSON.parse(out.split("\n").pop()!) as Record<string, unknown>;
}

const dev = Device.open("cpu");
const src = (v: number) => `#include "bungpu_cpu.h"\nBG_KERNEL(put) { float* o = BG_ARG(0, float*); BG_FOR_BLOCKS { o[0] = ${v}.0f; } }`;

describe("Kernel.retarget", () => {
  test("queued launches, future launches and a captured graph run the new code; the old module can go", () => {
    const slow = Program.compile(dev, cpuKernels, { name: "tier_slow" }).kernel("spin_ms", ["i32"]);
    const one = Program.compile(dev, src(1), { name: "tier_one" }).kernel("put", ["buffer"]);
    const two = Program.compile(dev, src(2), { name: "tier_two" }).kernel("put", ["buffer"]);
    const three = Program.compile(dev, src(3), { name: "tier_three" }).kernel("put", ["buffer"]);
    using st = dev.createStream();
    using buf = dev.alloc(4).fill(0, { type: "f32" });
    one.launch(st, { grid: 1, block: 1, args: [buf] });
    st.synchronize();
    expect(buf.read(Float32Array)[0]).toBe(1);

    // captured before the swap
    st.beginCapture();
    one.launch(st, { grid: 1, block: 1, args: [buf] });
    using exec = st.endCapture().instantiate();

    // queued behind 150 ms of work, swapped before it runs
    buf.fill(0, { type: "f32" });
    slow.launch(st, { grid: 1, block: 1, args: [150] });
    one.launch(st, { grid: 1, block: 1, args: [buf] });
    one.retarget(two);
    two.module.dispose(); // the code stays loaded: `one` holds it
    st.synchronize();
    expect(buf.read(Float32Array)[0]).toBe(2);

    one.retarget(three);
    three.module.dispose();
    exec.launch(st);
    st.synchronize();
    expect(buf.read(Float32Array)[0]).toBe(3);
    one.launch(st, { grid: 1, block: 1, args: [buf] });
    st.synchronize();
    expect(buf.read(Float32Array)[0]).toBe(3);
    one.module.dispose();
    slow.module.dispose();
  });

  test("refuses another signature, a disposed kernel and a non-kernel with GpuErrors", () => {
    const a = Program.compile(dev, src(4), { name: "tier_a" }).kernel("put", ["buffer"]);
    const b = Program.compile(dev, src(5), { name: "tier_b" });
    const wrongSig = b.kernel("put", ["buffer", "i32"]);
    expectGpuError(() => a.retarget(wrongSig as never), Status.INVALID_VALUE, "takes (buffer, i32)");
    expectGpuError(() => a.retarget({} as never), Status.INVALID_VALUE, "expected a Kernel");
    const gone = b.kernel("put", ["buffer"]);
    b.dispose();
    const e = expectGpuError(() => a.retarget(gone), Status.INVALID_HANDLE);
    expect(e).toBeInstanceOf(GpuError);
    a.module.dispose();
  });
});

// The demo's transformer block: prepared on an empty cache, run on the quick build, then on the
// optimized one once plan.optimized() settles; both outputs as hex.
const FIRST_PREPARE = `
import { Device } from "./src";
import { tierStats } from "./src/tensor/prepare";
import { demoTransformerModel } from "./examples/demo";
const dev = Device.open("cpu");
const plan = demoTransformerModel(64).out.prepare({ device: dev });
const hex = () => Buffer.from((plan.readOutput() as Float32Array).buffer).toString("hex");
plan.execute();
const quickRun = hex();
const before = { ...tierStats };
await plan.optimized();
plan.execute();
console.log(JSON.stringify({ quickRun, optimizedRun: hex(), before, after: { ...tierStats } }));
`;

describe("a first prepare on an empty cache", () => {
  test("loads the quick build, swaps in the optimized one with the same bits, and caches it for the next process", () => {
    const cache = emptyCache();
    const first = runScript(FIRST_PREPARE, { BUNGPU_CACHE_DIR: cache, BUNGPU_TIER: "" });
    expect(first.before).toEqual({ quickModules: 1, upgraded: 0, upgradeFailures: 0 });
    expect(first.after).toEqual({ quickModules: 1, upgraded: 1, upgradeFailures: 0 });
    expect(first.optimizedRun).toBe(first.quickRun as string);
    const second = runScript(FIRST_PREPARE, { BUNGPU_CACHE_DIR: cache, BUNGPU_TIER: "" });
    expect(second.after).toEqual({ quickModules: 0, upgraded: 0, upgradeFailures: 0 }); // -O3 from the disk cache
    expect(second.optimizedRun).toBe(first.quickRun as string);
  }, 200_000);
});

// A program that never yields to the event loop: its runs notice the finished build themselves.
const NEVER_YIELDS = `
import { Device } from "./src";
import { tierStats } from "./src/tensor/prepare";
import { demoTransformerModel } from "./examples/demo";
const dev = Device.open("cpu");
const plan = demoTransformerModel(33).out.prepare({ device: dev });
const hex = () => Buffer.from((plan.readOutput() as Float32Array).buffer).toString("hex");
plan.execute();
const quickRun = hex();
const t0 = Date.now();
let runs = 0;
while (tierStats.upgraded === 0 && Date.now() - t0 < 120_000) { plan.execute(); runs++; }
console.log(JSON.stringify({ quickRun, optimizedRun: hex(), runs, stats: { ...tierStats } }));
`;

// A program that ends right after its first prepare, while the optimized build runs.
const ENDS_AT_ONCE = `
import { Device, compileStats } from "./src";
import { tierStats } from "./src/tensor/prepare";
import { demoTransformerModel } from "./examples/demo";
const plan = demoTransformerModel(17).out.prepare({ device: Device.open("cpu") });
plan.execute();
console.log(JSON.stringify({ out: Buffer.from((plan.readOutput() as Float32Array).buffer).toString("hex"), stats: { ...tierStats }, compilerRuns: compileStats.compilerRuns }));
`;

describe("the optimized build reaches", () => {
  test("a program that never yields to the event loop (its runs poll)", () => {
    const r = runScript(NEVER_YIELDS, { BUNGPU_CACHE_DIR: emptyCache(), BUNGPU_TIER: "" });
    expect(r.stats).toEqual({ quickModules: 1, upgraded: 1, upgradeFailures: 0 });
    expect(r.optimizedRun).toBe(r.quickRun as string);
  }, 200_000);

  test("the next process, when the one that started it ended first", async () => {
    const cache = emptyCache();
    const first = runScript(ENDS_AT_ONCE, { BUNGPU_CACHE_DIR: cache, BUNGPU_TIER: "" });
    expect(first.stats).toEqual({ quickModules: 1, upgraded: 0, upgradeFailures: 0 });
    // the build goes on without its process: wait for its library
    const dir = join(cache, "kernels", "cpu");
    const t0 = Date.now();
    while (!readdirSync(dir).some((f) => f.endsWith(".built")) && Date.now() - t0 < 120_000) await Bun.sleep(50);
    const second = runScript(ENDS_AT_ONCE, { BUNGPU_CACHE_DIR: cache, BUNGPU_TIER: "" });
    expect(second.stats).toEqual({ quickModules: 0, upgraded: 0, upgradeFailures: 0 }); // adopted
    expect(second.compilerRuns).toBe(0);
    expect(second.out).toBe(first.out as string);
    expect(readdirSync(dir).filter((f) => f.endsWith(".built") || f.endsWith(".part") || f.endsWith(".err"))).toEqual([]);
  }, 300_000);
});

// Programs covering the CPU code generator's paths: vector tiles of 16 and 32 columns (packed and
// gathered panels, split rows), narrow outputs with 8 accumulator lanes, plain reduce loops,
// blocked sums, transcendental epilogues, softmax, layer norm, convolution, integer arithmetic.
const PROGRAMS = `
import { Device, Tensor } from "./src";
const dev = Device.open("cpu");
let seed = 7;
const rnd = (shape: number[]) => { const n = shape.reduce((a, b) => a * b, 1); const d = new Float32Array(n); for (let i = 0; i < n; i++) { seed = (seed * 1103515245 + 12345) >>> 0; d[i] = (seed / 2 ** 32) * 2 - 1; } return Tensor.from(d, shape); };
const progs: Record<string, () => Tensor> = {
  matmul_6x16: () => rnd([37, 53]).matmul(rnd([53, 48])),
  matmul_32cols: () => rnd([20, 64]).matmul(rnd([64, 96])).add(rnd([96])).relu(),
  matmul_transposed_b: () => rnd([19, 256]).matmul(rnd([80, 256]).T),
  matvec: () => rnd([1, 512]).matmul(rnd([512, 64])),
  narrow_dot: () => rnd([9, 300]).mul(rnd([9, 300])).sum(1),
  batched_attention: () => rnd([2, 24, 16]).matmul(rnd([2, 24, 16]).transpose(-1, -2)).mul(0.25).softmax(-1).matmul(rnd([2, 24, 16])),
  layer_norm_gelu: () => rnd([33, 70]).layerNorm({ weight: rnd([70]), bias: rnd([70]) }).gelu(),
  long_sum: () => rnd([20000]).mul(rnd([20000])).sum(),
  mean_max: () => rnd([17, 129]).mean(1).add(rnd([17, 129]).max(1)),
  exp_log_tanh: () => rnd([50, 41]).exp().add(2).log().tanh().sigmoid(),
  conv2d: () => rnd([1, 3, 17, 17]).conv2d(rnd([8, 3, 3, 3]), rnd([8]), { padding: 1 }),
  int_arith: () => Tensor.arange(1000).mul(37).add(11).cast("float32").div(7),
};
const out: Record<string, string> = {};
for (const [name, build] of Object.entries(progs)) {
  const plan = build().prepare({ device: dev });
  plan.execute();
  out[name] = new Bun.CryptoHasher("sha256").update(new Uint8Array((plan.readOutput() as Float32Array).buffer)).digest("hex");
  plan.dispose();
}
console.log(JSON.stringify(out));
`;

describe("the quick and the optimized builds", () => {
  test("give the same bits on every path of the CPU code generator", () => {
    const cache = emptyCache();
    const quick = runScript(PROGRAMS, { BUNGPU_CACHE_DIR: cache, BUNGPU_TIER: "quick" });
    const optimized = runScript(PROGRAMS, { BUNGPU_CACHE_DIR: cache, BUNGPU_TIER: "optimized" });
    expect(Object.keys(quick).length).toBe(12);
    expect(optimized).toEqual(quick);
  }, 300_000);
});
