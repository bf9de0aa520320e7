// Continuous batching (issue 21 item 4): GPT2.batch() decodes every active sequence in one run of
// the batched decode plan, sequences joining and leaving between steps. Each sequence must get
// exactly what generate() gives it alone — the same tokens (greedy, and seeded sampling), the
// same logits — whatever else shares the batch, whichever row it sits in (rows are repacked when
// one leaves), and however long the others are. Nothing compiles while stepping. Bad use is
// GpuError INVALID_VALUE.
import { afterAll, describe, expect, test } from "bun:test";
import { Device, Status, compileStats } from "../src";
import { tensorCompileStats } from "../src/tensor";
import { GPT2, randomGPT2Weights, type BatchToken, type GenerateOptions, type GPT2Config } from "../src/models";
import { expectGpuError, expectWithin } from "./helpers";

const dev = Device.open("cpu");
// An untied head and per-layer score scaling: the batched plan honours the config like the others.
const CFG: GPT2Config = { nLayer: 2, nEmbd: 32, nHead: 2, vocabSize: 64, nCtx: 24, tieWordEmbeddings: false, scaleAttnByInverseLayerIdx: true };
const w = randomGPT2Weights(CFG, 5);
const model = GPT2.fromTensors(CFG, w, { device: dev, batch: { slots: 3, context: 20 } });
afterAll(() => {
  model.dispose();
  dev.dispose();
});
// Rows of one plan run against the single-sequence decode plan: the same numbers up to rounding.
const TOL = 1e-5;

interface Job {
  prompt: number[];
  opts: GenerateOptions;
  /** The step (count of step() calls made) at which it joins. */
  at: number;
  /** Leave after this many tokens (a client gone), if given. */
  leaveAfter?: number;
}

/** Run `jobs` through one batch, joining each at its step once a slot is free; each one's tokens and logits. */
function runBatch(jobs: Job[], m: GPT2 = model): { tokens: number[][]; logits: Float32Array[][]; maxActive: number } {
  using b = m.batch();
  const tokens: number[][] = jobs.map(() => []), logits: Float32Array[][] = jobs.map(() => []);
  const idOf = new Map<number, number>();
  const record = (k: number, t: BatchToken) => {
    tokens[k]!.push(t.token);
    logits[k]!.push(t.logits.slice());
    if (!t.done && jobs[k]!.leaveAfter === tokens[k]!.length) expect(b.leave(t.id)).toBe(true);
  };
  let next = 0, steps = 0, maxActive = 0;
  while (next < jobs.length || b.active > 0) {
    while (next < jobs.length && jobs[next]!.at <= steps && b.free > 0) {
      const t = b.join(jobs[next]!.prompt, jobs[next]!.opts);
      idOf.set(t.id, next);
      record(next++, t);
    }
    maxActive = Math.max(maxActive, b.active);
    for (const t of b.step()) record(idOf.get(t.id)!, t);
    steps++;
  }
  return { tokens, logits, maxActive };
}

function expectAlone(jobs: Job[], got: ReturnType<typeof runBatch>, m: GPT2 = model): void {
  jobs.forEach((j, k) => {
    const alone = m.generate(j.prompt, j.opts);
    const n = j.leaveAfter ?? alone.tokens.length;
    expect(got.tokens[k]).toEqual(alone.tokens.slice(0, n));
    for (let i = 0; i < n; i++) expectWithin(got.logits[k]![i]!, alone.logits[i]!, TOL);
  });
}

describe("GPT2.batch: continuous batching", () => {
  test("sequences decoded together get generate()'s greedy tokens and logits; nothing compiles", () => {
    const jobs: Job[] = [
      { prompt: [1, 2, 3], opts: { maxNewTokens: 9, stop: [] }, at: 0 },
      { prompt: [50], opts: { maxNewTokens: 20, stop: [] }, at: 0 }, // fills its slot's whole context
      { prompt: [7, 8, 9, 10, 11, 12, 13], opts: { maxNewTokens: 6, stop: [] }, at: 0 },
    ];
    const compiles = tensorCompileStats.compiles, runs = compileStats.compilerRuns;
    const got = runBatch(jobs);
    expect(tensorCompileStats.compiles).toBe(compiles);
    expect(compileStats.compilerRuns).toBe(runs);
    expect(got.maxActive).toBe(3);
    expectAlone(jobs, got);
  });

  test("a bfloat16 model (weights and every slot's KV cache in bfloat16): each sequence gets generate()'s tokens", () => {
    using half = GPT2.fromTensors(CFG, w, { device: dev, dtype: "bfloat16", batch: { slots: 3, context: 20 } });
    expect(half.dtype).toBe("bfloat16");
    const jobs: Job[] = [
      { prompt: [1, 2, 3], opts: { maxNewTokens: 9, stop: [] }, at: 0 },
      { prompt: [50, 51], opts: { maxNewTokens: 12, stop: [] }, at: 1 },
      { prompt: [7, 8, 9, 10], opts: { maxNewTokens: 6, stop: [] }, at: 2 },
    ];
    const got = runBatch(jobs, half);
    expectAlone(jobs, got, half);
    // and the half model is not the float32 one: its logits differ by about bfloat16's rounding
    const a = half.generate([1, 2, 3], { maxNewTokens: 1, stop: [] }).logits[0]!, b = model.generate([1, 2, 3], { maxNewTokens: 1, stop: [] }).logits[0]!;
    const worst = a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i]!)), 0);
    expect(worst).toBeGreaterThan(1e-6);
    expect(worst).toBeLessThan(0.25);
  });

  test("joinAll: prompts of different lengths in one run of the batched prompt plan (right-padded, causal) give each sequence generate()'s tokens", () => {
    const prompts = [[1, 2, 3], [50], [7, 8, 9, 10, 11, 12, 13]];
    const opts: GenerateOptions[] = [
      { maxNewTokens: 9, stop: [] },
      { maxNewTokens: 12, temperature: 0.8, topK: 5, seed: 3, stop: [] },
      { maxNewTokens: 6, stop: [] },
    ];
    for (const m of [model, GPT2.fromTensors(CFG, w, { device: dev, dtype: "bfloat16", batch: { slots: 3, context: 20 } })]) {
      const before = m.prepares;
      using b = m.batch();
      const tokens: number[][] = prompts.map(() => []), logits: Float32Array[][] = prompts.map(() => []);
      const first = b.joinAll(prompts, opts);
      expect(m.prepares).toBe(before + 1); // the batched prompt plan, made on first use
      const row = new Map<number, number>();
      first.forEach((t, k) => {
        tokens[k]!.push(t.token);
        logits[k]!.push(t.logits.slice());
        row.set(t.id, k);
      });
      while (b.active > 0) for (const t of b.step()) {
        tokens[row.get(t.id)!]!.push(t.token);
        logits[row.get(t.id)!]!.push(t.logits.slice());
      }
      prompts.forEach((p, k) => {
        const alone = m.generate(p, opts[k]!);
        expect(tokens[k]).toEqual(alone.tokens);
        for (let i = 0; i < alone.tokens.length; i++) expectWithin(logits[k]![i]!, alone.logits[i]!, m.dtype === "float32" ? TOL : 1e-3);
      });
      // a second joinAll reuses the plan: nothing compiles
      const compiles = tensorCompileStats.compiles;
      b.joinAll([[4, 5], [6]], 3);
      expect(tensorCompileStats.compiles).toBe(compiles);
      expect(m.prepares).toBe(before + 1);
      expectGpuError(() => b.joinAll([[1], [2]], 3), Status.INVALID_VALUE, "free slots");
      expectGpuError(() => b.joinAll([[1]], [3, 4]), Status.INVALID_VALUE, "entries");
      expectGpuError(() => b.joinAll([], 3), Status.INVALID_VALUE, "non-empty");
      if (m !== model) m.dispose();
    }
  });

  test("joining mid-way, leaving early, finishing at different steps and reusing freed slots changes nobody's tokens", () => {
    const jobs: Job[] = [
      { prompt: [4, 5], opts: { maxNewTokens: 14, stop: [] }, at: 0 },
      { prompt: [30, 31, 32], opts: { maxNewTokens: 10, stop: [] }, at: 0, leaveAfter: 3 }, // row 1 leaves: row 2 moves into it
      { prompt: [60, 61, 62, 63, 0, 1], opts: { maxNewTokens: 8, stop: [] }, at: 1 },
      { prompt: [11], opts: { maxNewTokens: 11, stop: [] }, at: 4 }, // waits for a free slot
      { prompt: [22, 23, 24, 25], opts: { maxNewTokens: 5, stop: [] }, at: 5 },
      { prompt: [9, 9, 9], opts: { maxNewTokens: 1, stop: [] }, at: 6 }, // done at join: holds no slot
    ];
    const got = runBatch(jobs);
    expect(got.maxActive).toBe(3);
    expectAlone(jobs, got);
  });

  test("seeded sampling (temperature, topK, topP) gives each sequence generate()'s tokens, reproducibly", () => {
    const mk = (at: number, seed: number, extra: Partial<GenerateOptions> = {}): Job => ({
      prompt: [seed % 64, (seed * 7) % 64],
      opts: { maxNewTokens: 10, temperature: 1.3, seed, stop: [], ...extra },
      at,
    });
    const jobs = [mk(0, 1), mk(0, 2, { topK: 8 }), mk(2, 3, { topP: 0.9 }), mk(3, 4), mk(5, 1)];
    const a = runBatch(jobs), b = runBatch(jobs);
    expect(b.tokens).toEqual(a.tokens);
    expectAlone(jobs, a);
    // the seed matters, and sampling is not greedy
    expect(new Set(a.tokens.slice(0, 4).map((t) => t.join(","))).size).toBe(4);
  });

  test("a stop token ends a sequence (included) and frees its slot", () => {
    const prompt = [3, 1, 4];
    const greedy = model.generate(prompt, { maxNewTokens: 8, stop: [] }).tokens;
    const stopAt = greedy.findIndex((t, i) => i > 0 && greedy.indexOf(t) === i); // a token first seen after the first
    const stop = greedy[stopAt]!;
    using b = model.batch();
    const first = b.join(prompt, { maxNewTokens: 8, stop });
    const out = [first.token];
    let last: BatchToken = first;
    while (!last.done) out.push((last = b.step()[0]!).token);
    expect(out).toEqual(greedy.slice(0, stopAt + 1));
    expect(b.active).toBe(0);
    expect(b.has(first.id)).toBe(false);
    expect(b.free).toBe(3);
  });

  test("bad use is GpuError INVALID_VALUE; leave() and dispose() never throw", () => {
    const noBatch = GPT2.fromTensors(CFG, w, { device: dev });
    try {
      expectGpuError(() => noBatch.batch(), Status.INVALID_VALUE, "no batched decode plan");
    } finally {
      noBatch.dispose();
    }
    expectGpuError(() => GPT2.fromTensors(CFG, w, { device: dev, batch: { slots: 0 } }), Status.INVALID_VALUE, "batch.slots");
    expectGpuError(() => GPT2.fromTensors(CFG, w, { device: dev, batch: { slots: 2, context: 99 } }), Status.INVALID_VALUE, "batch.context");
    const b = model.batch();
    expectGpuError(() => model.batch(), Status.INVALID_VALUE, "dispose() it first");
    expectGpuError(() => b.join([], 2), Status.INVALID_VALUE, "prompt");
    expectGpuError(() => b.join([64], 2), Status.INVALID_VALUE, "outside");
    expectGpuError(() => b.join([1, 2, 3], 19), Status.INVALID_VALUE, "exceed the context 20");
    expectGpuError(() => b.join([1], { maxNewTokens: 2, temperature: -1 }), Status.INVALID_VALUE, "temperature");
    expectGpuError(() => b.join([1], null as unknown as number), Status.INVALID_VALUE, "options");
    const ids = [b.join([1], 5).id, b.join([2], 5).id, b.join([3], 5).id];
    expectGpuError(() => b.join([4], 5), Status.INVALID_VALUE, "all 3 slots are taken");
    expect(b.leave(ids[1]!)).toBe(true);
    expect(b.leave(ids[1]!)).toBe(false);
    expect(b.leave(12345)).toBe(false);
    expect(b.step().map((t) => t.id)).toEqual([ids[0]!, ids[2]!]);
    b.dispose();
    b.dispose();
    expect(b.leave(ids[0]!)).toBe(false);
    expectGpuError(() => b.step(), Status.INVALID_VALUE, "disposed");
    expectGpuError(() => b.join([1], 2), Status.INVALID_VALUE, "disposed");
    using again = model.batch(); // the slots are free again
    expect(again.free).toBe(3);
  });
});
