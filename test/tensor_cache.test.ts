// The plan cache: a plan prepared from it is the plan prepared cold (bit-identical results, same
// kernels, buffers and memory plan); corrupt or mismatched entries are rebuilt; data is never
// baked in; a changed program misses. Runs against a temporary BUNGPU_CACHE_DIR (cacheRoot() reads
// the variable at call time), plus fresh processes for the warm start itself.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device } from "../src";
import { cpuCompilerLabel } from "../src/compile";
import { Tensor, Variable, generate, schedule, tensorCompileStats, type ExecutionPlan, type Lang } from "../src/tensor";
import { decodeIR, encodeIR } from "../src/tensor/ir";
import { forgetPlanCacheMemory } from "../src/tensor/cache";
import { seededRandom } from "../src/tensor/reference";

const prevDir = process.env.BUNGPU_CACHE_DIR;
const dir = mkdtempSync(join(tmpdir(), "bungpu-plancache-"));
beforeAll(() => {
  process.env.BUNGPU_CACHE_DIR = dir;
  forgetPlanCacheMemory();
});
afterAll(() => {
  if (prevDir === undefined) delete process.env.BUNGPU_CACHE_DIR;
  else process.env.BUNGPU_CACHE_DIR = prevDir;
  forgetPlanCacheMemory();
  rmSync(dir, { recursive: true, force: true });
});

const planFiles = () => readdirSync(join(dir, "plans")).filter((f) => f.endsWith(".json"));

function data(n: number, seed: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: n }, () => Math.fround(r() * 2 - 1));
}

/** Programs of several kinds; `seed` changes the data only, never the structure. */
const programs: Record<string, (seed: number) => { outs: Tensor[]; vars?: Record<string, number>[] }> = {
  "attention over a Variable": (seed) => {
    const S = new Variable("S", 1, 12).bind(7);
    const x = Tensor.from(data(12 * 4, seed), [12, 4]).shrink([[0, S], null]);
    const wq = Tensor.from(data(16, seed + 1), [4, 4]), wk = Tensor.from(data(16, seed + 2), [4, 4]);
    const att = x.matmul(wq).matmul(x.matmul(wk).T).mul(0.5).softmax(-1);
    return { outs: [att.matmul(x), x.sum(0)], vars: [{ S: 3 }, { S: 12 }, { S: 1 }] };
  },
  "matmul + bias + gelu, layerNorm": (seed) => {
    const a = Tensor.from(data(9 * 20, seed), [9, 20]), w = Tensor.from(data(20 * 33, seed + 1), [20, 33]), b = Tensor.from(data(33, seed + 2), [33]);
    return { outs: [a.matmul(w).add(b).gelu().layerNorm()] };
  },
  "views: pad, flip, permute, slice, expand, int32": (seed) => {
    const a = Tensor.from(data(6 * 5, seed), [6, 5]);
    const p = a.pad([[1, 2], [0, 3]]).flip(0).permute([1, 0]).slice([[1, 7], [2, 8]]);
    const i = Tensor.from(Int32Array.from(data(5, seed + 3), (v) => Math.round(v * 10)), [5]);
    const e = i.reshape([1, 5]).expand([3, 5]).mul(2).sub(1);
    return { outs: [p.exp().add(p.T.sum(1, true).T), e, a.maximum(Number.NEGATIVE_INFINITY).where(a, Number.NaN).min(-0)] };
  },
};

function bits(a: Float32Array | Int32Array): number[] {
  return Array.from(new Int32Array(a.buffer, a.byteOffset, a.length));
}

/** Every output's bits after execute() and after each set of variable values. */
function run(plan: ExecutionPlan, vars: Record<string, number>[] = []): number[][] {
  const out: number[][] = [];
  const read = () => {
    for (let i = 0; i < plan.numOutputs; i++) out.push(bits(plan.readOutput(i)));
  };
  plan.execute();
  read();
  for (const v of vars) {
    plan.executeWithVars(v);
    read();
  }
  return out;
}

/** What a plan is apart from its results: kernels, buffers, the memory plan. */
function shape(plan: ExecutionPlan) {
  return {
    kernels: plan.kernels().map((k) => [k.entryPoint, k.source]),
    prepared: plan.preparedKernels().map((k) => [k.signature, k.bufferIndices, k.vars, k.ir.text, k.ir.name]),
    buffers: plan.bufferInfo.map((b) => ({ ...b, astId: 0 })),
    peak: plan.peakBytes,
    arena: plan.intermediateBytes,
    outputIdx: plan.outputBufferIdx,
  };
}

function prepared(f: () => ExecutionPlan): { results: number[][]; shape: ReturnType<typeof shape>; plan: ExecutionPlan } {
  const plan = f();
  return { results: [], shape: shape(plan), plan };
}

describe("plan cache", () => {
  for (const [name, build] of Object.entries(programs)) {
    test(`${name}: from the cache (memory and disk) it is bit-identical to a cold prepare`, () => {
      const cold = prepared(() => {
        const p = build(1);
        return Tensor.prepareBatch(p.outs, { planCache: false });
      });
      const vars = build(1).vars;
      cold.results = run(cold.plan, vars);
      cold.plan.dispose();

      const h0 = tensorCompileStats.planCacheHits, m0 = tensorCompileStats.planCacheMisses;
      const first = prepared(() => Tensor.prepareBatch(build(1).outs)); // miss: scheduled, stored
      expect(tensorCompileStats.planCacheMisses).toBe(m0 + 1);
      first.results = run(first.plan, vars);
      first.plan.dispose();

      const mem = prepared(() => Tensor.prepareBatch(build(1).outs)); // hit from memory
      forgetPlanCacheMemory();
      const disk = prepared(() => Tensor.prepareBatch(build(1).outs)); // hit from disk
      expect(tensorCompileStats.planCacheHits).toBe(h0 + 2);
      expect(tensorCompileStats.planCacheMisses).toBe(m0 + 1);
      for (const p of [mem, disk]) {
        p.results = run(p.plan, vars);
        expect(p.shape).toEqual(cold.shape);
        expect(p.results).toEqual(cold.results);
        p.plan.dispose();
      }
      expect(first.shape).toEqual(cold.shape);
      expect(first.results).toEqual(cold.results);
    });
  }

  test("different data with the same shapes reuses the cached plan and gives its own results", () => {
    const build = programs["matmul + bias + gelu, layerNorm"]!;
    const expectFor = (seed: number) => {
      const p = Tensor.prepareBatch(build(seed).outs, { planCache: false });
      const r = run(p);
      p.dispose();
      return r;
    };
    forgetPlanCacheMemory();
    const h0 = tensorCompileStats.planCacheHits, m0 = tensorCompileStats.planCacheMisses;
    const results = [5, 6, 7].map((seed) => {
      const p = Tensor.prepareBatch(build(seed).outs);
      const r = run(p);
      p.dispose();
      return r;
    });
    expect(tensorCompileStats.planCacheMisses).toBe(m0); // stored by the test above
    expect(tensorCompileStats.planCacheHits).toBe(h0 + 3);
    expect(results[0]).not.toEqual(results[1]);
    expect(results[1]).not.toEqual(results[2]);
    [5, 6, 7].forEach((seed, i) => expect(results[i]).toEqual(expectFor(seed)));
    // the cache files hold structure, never the data
    const floats = Array.from(data(9 * 20, 5).slice(0, 8), (v) => JSON.stringify(v));
    for (const f of planFiles()) {
      const text = readFileSync(join(dir, "plans", f), "utf8");
      for (const v of floats) expect(text.includes(v)).toBe(false);
    }
  });

  test("a changed shape, op, constant or variable bound misses the cache", () => {
    const x = (n: number) => Tensor.from(data(n * 8, 3), [n, 8]);
    const variants = [
      () => x(4).exp().sum(1),
      () => x(5).exp().sum(1), // shape
      () => x(4).log().sum(1), // op
      () => x(4).exp().max(1), // reduce op
      () => x(4).exp().sum(0), // axis
      () => x(4).exp().add(2).sum(1), // constant
      () => x(4).exp().add(3).sum(1),
      () => x(4).exp().flip(1).sum(1), // view
      () => x(4).shrink([[0, new Variable("N", 1, 4).bind(2)], null]).exp().sum(1), // a variable
      () => x(4).shrink([[0, new Variable("N", 1, 3).bind(2)], null]).exp().sum(1), // its bound
      () => x(4).shrink([[0, new Variable("M", 1, 3).bind(2)], null]).exp().sum(1), // its name
    ];
    forgetPlanCacheMemory();
    const m0 = tensorCompileStats.planCacheMisses, h0 = tensorCompileStats.planCacheHits;
    for (const v of variants) v().prepare().dispose();
    expect(tensorCompileStats.planCacheMisses).toBe(m0 + variants.length);
    expect(tensorCompileStats.planCacheHits).toBe(h0);
    for (const v of variants) v().prepare().dispose();
    expect(tensorCompileStats.planCacheHits).toBe(h0 + variants.length);
    // fusion off is another plan too
    x(4).exp().sum(1).prepare({ fusion: false }).dispose();
    expect(tensorCompileStats.planCacheMisses).toBe(m0 + variants.length + 1);
  });

  test("a corrupt or mismatched entry is rebuilt, never trusted", () => {
    // a structure of its own (the views program, times 3), so that its entry is new here
    const build = () => ({ outs: programs["views: pad, flip, permute, slice, expand, int32"]!(11).outs.map((o) => o.mul(3)) });
    const want = (() => {
      const p = Tensor.prepareBatch(build().outs, { planCache: false });
      const r = run(p);
      p.dispose();
      return r;
    })();
    const before = new Set(planFiles());
    Tensor.prepareBatch(build().outs).dispose();
    const mine = planFiles().filter((f) => !before.has(f));
    expect(mine.length).toBe(1);
    const file = join(dir, "plans", mine[0]!);
    const good = readFileSync(file, "utf8");
    const other = planFiles().find((f) => f !== mine[0])!;
    const otherText = readFileSync(join(dir, "plans", other), "utf8");
    const key = good.slice(0, good.indexOf("\n"));
    const corruptions: [string, string][] = [
      ["garbage", "garbage, not a plan"],
      ["truncated", good.slice(0, good.length >> 1)],
      ["a flipped byte", good.replace(/"body":"(.)/, (_m, c: string) => `"body":"${c === "x" ? "y" : "x"}`)],
      ["another key", `${"0".repeat(64)}${good.slice(good.indexOf("\n"))}`],
      // the right key and a valid checksum over another program's content: it does not fit
      ["another program's content", `${key}${otherText.slice(otherText.indexOf("\n"))}`],
      ["empty", ""],
    ];
    for (const [what, text] of corruptions) {
      writeFileSync(file, text);
      forgetPlanCacheMemory();
      const r0 = tensorCompileStats.planCacheRebuilt, m0 = tensorCompileStats.planCacheMisses, h0 = tensorCompileStats.planCacheHits;
      const p = Tensor.prepareBatch(build().outs);
      const got = run(p);
      p.dispose();
      expect({ what, rebuilt: tensorCompileStats.planCacheRebuilt - r0, misses: tensorCompileStats.planCacheMisses - m0, hits: tensorCompileStats.planCacheHits - h0 }).toEqual(
        { what, rebuilt: 1, misses: 1, hits: 0 },
      );
      expect(got).toEqual(want);
      // rewritten: the next fresh read is a hit again
      expect(readFileSync(file, "utf8")).toBe(good);
      forgetPlanCacheMemory();
      Tensor.prepareBatch(build().outs).dispose();
      expect(tensorCompileStats.planCacheHits).toBe(h0 + 1);
    }
  });

  test("a lowered kernel survives the JSON round trip: the same IR and the same code in every language", () => {
    const a = Tensor.from(data(30, 1), [6, 5]);
    const S = new Variable("S", 1, 6).bind(3);
    const progs = [
      a.pad([[1, 1], null]).exp().maximum(Number.NEGATIVE_INFINITY).where(a.pad([[1, 1], null]), Number.NaN).sum(1),
      a.matmul(a.T).add(-0).relu(),
      a.shrink([[0, S], null]).sum(0).mul(Tensor.fromDims([S], "float32")),
      Tensor.randn([4, 4], { seed: 3 }).add(Tensor.arange(4).float()),
    ];
    for (const t of progs)
      for (const k of schedule([t.node]).kernels) {
        const back = decodeIR(JSON.parse(JSON.stringify(encodeIR(k.ir))));
        expect(back.text).toBe(k.ir.text);
        expect(back.name).toBe(k.ir.name);
        for (const lang of ["c", "cuda", "metal"] as Lang[]) expect(generate(back, lang).source).toBe(generate(k.ir, lang).source);
      }
  });

  test("a fresh process prepares from the caches: no scheduling, no compiler, no `cc --version`", () => {
    const sub = mkdtempSync(join(tmpdir(), "bungpu-plancache-proc-"));
    try {
      const script = join(sub, "prep.ts");
      const src = join(import.meta.dir, "..", "src");
      writeFileSync(
        script,
        `import { compileStats } from ${JSON.stringify(join(src, "index.ts"))};
import { Tensor, Variable, tensorCompileStats } from ${JSON.stringify(join(src, "tensor", "index.ts"))};
const S = new Variable("S", 1, 16).bind(5);
const x = Tensor.from(Float32Array.from({ length: 16 * 8 }, (_, i) => Math.sin(i)), [16, 8]).shrink([[0, S], null]);
const w = Tensor.from(Float32Array.from({ length: 8 * 8 }, (_, i) => Math.cos(i)), [8, 8]);
const y = x.matmul(w).gelu().softmax(-1);
const plan = Tensor.prepareBatch([y, x.pad([[0, 0], [1, 2]]).flip(1).sum(0)]);
const out = [];
for (const s of [5, 16, 2]) {
  plan.executeWithVars({ S: s });
  for (let i = 0; i < plan.numOutputs; i++) out.push(Array.from(new Int32Array(plan.readOutput(i).buffer)));
}
console.log(JSON.stringify({ out, hits: tensorCompileStats.planCacheHits, misses: tensorCompileStats.planCacheMisses,
  compilerRuns: compileStats.compilerRuns, versionSpawns: compileStats.versionSpawns }));
`,
      );
      const proc = () => {
        const r = Bun.spawnSync(["bun", script], { env: { ...process.env, BUNGPU_CACHE_DIR: join(sub, "cache") }, stdout: "pipe", stderr: "pipe" });
        expect(r.stderr.toString()).toBe("");
        return JSON.parse(r.stdout.toString()) as { out: number[][]; hits: number; misses: number; compilerRuns: number; versionSpawns: number };
      };
      const a = proc(), b = proc();
      expect([a.hits, a.misses]).toEqual([0, 1]);
      expect([b.hits, b.misses, b.compilerRuns, b.versionSpawns]).toEqual([1, 0, 0, 0]);
      if (Device.default().backend === "cpu" && cpuCompilerLabel() !== "tinycc (bun:ffi)") expect(a.versionSpawns).toBe(1);
      expect(b.out).toEqual(a.out);
    } finally {
      rmSync(sub, { recursive: true, force: true });
    }
  }, 60_000);
});
