// The GPT-2-style decoder of examples/gpt2.ts: a tiny random model written to safetensors, loaded,
// and generating greedily; a plain float64 forward pass over the whole sequence at every step
// (written here, independent of the Tensor API) must choose the same tokens with logits close to
// bungpu's. The decode step is prepared once: generating compiles nothing. Bad files are GpuError.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GpuError, Status, compileStats } from "../src";
import { Tensor, tensorCompileStats } from "../src/tensor";
import { GPT2, writeRandomGPT2, type GPT2Config } from "../examples/gpt2";

const dir = mkdtempSync(join(tmpdir(), "bungpu-gpt2-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CFG: GPT2Config = { nLayer: 2, nEmbd: 32, nHead: 2, vocabSize: 64, nCtx: 16 };
// float32 against float64 over two layers: logits (magnitude ~1-10) agree to this absolute bound.
const TOL = 2e-3;

// ---- float64 reference: the whole sequence, every step ------------------------------------------

type W = Record<string, Float32Array>;

function layerNorm(x: number[], g: Float32Array, b: Float32Array): number[] {
  const n = x.length;
  const mean = x.reduce((a, v) => a + v, 0) / n;
  const vr = x.reduce((a, v) => a + (v - mean) ** 2, 0) / n;
  const r = 1 / Math.sqrt(vr + 1e-5);
  return x.map((v, i) => (v - mean) * r * g[i]! + b[i]!);
}

/** x[in] · W[in, out] + b (Conv1D layout). */
function linear(x: number[], w: Float32Array, b: Float32Array): number[] {
  const out = b.length, inn = x.length;
  const y = Array.from(b, Number);
  for (let i = 0; i < inn; i++) for (let j = 0; j < out; j++) y[j]! += x[i]! * w[i * out + j]!;
  return y;
}

const gelu = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

/** The logits at the last position of `tokens`. */
function refLogits(w: W, cfg: GPT2Config, tokens: number[]): number[] {
  const { nEmbd: C, nHead: H, nLayer: L, vocabSize: V } = cfg;
  const D = C / H;
  const T = tokens.length;
  let xs = tokens.map((t, p) => Array.from({ length: C }, (_, c) => w.wte![t * C + c]! + w.wpe![p * C + c]!));
  for (let l = 0; l < L; l++) {
    const g = (n: string) => w[`h.${l}.${n}`]!;
    const qkv = xs.map((x) => linear(layerNorm(x, g("ln_1.weight"), g("ln_1.bias")), g("attn.c_attn.weight"), g("attn.c_attn.bias")));
    const att = xs.map(() => new Array<number>(C).fill(0));
    for (let h = 0; h < H; h++)
      for (let i = 0; i < T; i++) {
        const s: number[] = [];
        for (let j = 0; j <= i; j++) {
          let d = 0;
          for (let e = 0; e < D; e++) d += qkv[i]![h * D + e]! * qkv[j]![C + h * D + e]!;
          s.push(d / Math.sqrt(D));
        }
        const m = Math.max(...s);
        const p = s.map((v) => Math.exp(v - m));
        const z = p.reduce((a, v) => a + v, 0);
        for (let j = 0; j <= i; j++) for (let e = 0; e < D; e++) att[i]![h * D + e]! += (p[j]! / z) * qkv[j]![2 * C + h * D + e]!;
      }
    xs = xs.map((x, i) => {
      const proj = linear(att[i]!, g("attn.c_proj.weight"), g("attn.c_proj.bias"));
      return x.map((v, c) => v + proj[c]!);
    });
    xs = xs.map((x) => {
      const hdn = linear(layerNorm(x, g("ln_2.weight"), g("ln_2.bias")), g("mlp.c_fc.weight"), g("mlp.c_fc.bias")).map(gelu);
      const o = linear(hdn, g("mlp.c_proj.weight"), g("mlp.c_proj.bias"));
      return x.map((v, c) => v + o[c]!);
    });
  }
  const hf = layerNorm(xs[T - 1]!, w["ln_f.weight"]!, w["ln_f.bias"]!);
  return Array.from({ length: V }, (_, t) => hf.reduce((a, v, c) => a + v * w.wte![t * C + c]!, 0));
}

function refGenerate(w: W, cfg: GPT2Config, prompt: number[], n: number): { tokens: number[]; logits: number[][] } {
  const seq = [...prompt];
  const tokens: number[] = [], logits: number[][] = [];
  for (let k = 0; k < n; k++) {
    const l = refLogits(w, cfg, seq);
    let best = 0;
    for (let i = 1; i < l.length; i++) if (l[i]! > l[best]!) best = i;
    tokens.push(best);
    logits.push(l);
    seq.push(best);
  }
  return { tokens, logits };
}

function expectInvalid(f: () => unknown, code: number, part: string): void {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(GpuError);
  expect((err as GpuError).code).toBe(code);
  expect((err as GpuError).message).toContain(part);
}

describe("GPT-2-style decoder", () => {
  const path = join(dir, "tiny.safetensors");
  const weights = writeRandomGPT2(path, CFG, 7);
  const model = GPT2.load(path);
  afterAll(() => model.dispose());

  test("the file holds GPT-2's names and Conv1D shapes, the config in its metadata", () => {
    const t = Tensor.fromSafetensors(path);
    expect(t.wte!.shape).toEqual([64, 32]);
    expect(t.wpe!.shape).toEqual([16, 32]);
    expect(t["h.1.attn.c_attn.weight"]!.shape).toEqual([32, 96]);
    expect(t["h.0.mlp.c_fc.weight"]!.shape).toEqual([32, 128]);
    expect(t["h.0.mlp.c_proj.weight"]!.shape).toEqual([128, 32]);
    expect(t["ln_f.bias"]!.shape).toEqual([32]);
    expect(Tensor.safetensorsMetadata(path)).toEqual({ nLayer: "2", nEmbd: "32", nHead: "2", vocabSize: "64", nCtx: "16" });
    expect(model.config).toEqual(CFG);
  });

  for (const prompt of [[3, 17, 42, 5], [9], [60, 1, 2, 3, 4, 5, 6, 7, 8, 9]]) {
    const n = Math.min(8, CFG.nCtx - prompt.length + 1);
    test(`greedy generation from a ${prompt.length}-token prompt matches the float64 reference (${n} tokens)`, () => {
      const ref = refGenerate(weights, CFG, prompt, n);
      const compiles = tensorCompileStats.compiles, runs = compileStats.compilerRuns;
      const got = model.generate(prompt, n);
      // the decode plan prepared at load ran every step: nothing compiled while generating
      expect(tensorCompileStats.compiles).toBe(compiles);
      expect(compileStats.compilerRuns).toBe(runs);
      expect(got.tokens).toEqual(ref.tokens);
      expect(got.logits.length).toBe(n);
      expect(got.stepMs.length).toBe(n - 1);
      let maxErr = 0;
      got.logits.forEach((l, k) => {
        expect(l.length).toBe(CFG.vocabSize);
        l.forEach((v, i) => (maxErr = Math.max(maxErr, Math.abs(v - ref.logits[k]![i]!))));
      });
      expect(maxErr).toBeLessThan(TOL);
    });
  }

  test("with fusion off, the same tokens and logits", () => {
    const unfused = GPT2.load(path, undefined, { fusion: false });
    try {
      const prompt = [3, 17, 42, 5];
      const ref = refGenerate(weights, CFG, prompt, 6);
      const got = unfused.generate(prompt, 6);
      expect(unfused.decodePlan.kernels().length).toBeGreaterThan(model.decodePlan.kernels().length);
      expect(got.tokens).toEqual(ref.tokens);
      let maxErr = 0;
      got.logits.forEach((l, k) => l.forEach((v, i) => (maxErr = Math.max(maxErr, Math.abs(v - ref.logits[k]![i]!)))));
      expect(maxErr).toBeLessThan(TOL);
    } finally {
      unfused.dispose();
    }
  });

  test("the decode step is one prepared plan, reused across generations of any length", () => {
    expect(model.prepares).toBe(2);
    const [pp, dp] = [model.promptPlan, model.decodePlan];
    const compiles = tensorCompileStats.compiles;
    const a = model.generate([1, 2], 5), b = model.generate([1, 2], 5);
    expect(a.tokens).toEqual(b.tokens); // the cache of an earlier run does not leak into a later one
    expect(model.promptPlan).toBe(pp);
    expect(model.decodePlan).toBe(dp);
    expect(tensorCompileStats.compiles).toBe(compiles);
  });

  test("the generated tokens are not a degenerate constant over several prompts", () => {
    const seen = new Set<number>();
    for (const p of [[0], [7], [13], [21], [33], [50]]) for (const t of model.generate(p, 3).tokens) seen.add(t);
    expect(seen.size).toBeGreaterThan(1);
  });

  test("bad arguments to generate are GpuError INVALID_VALUE", () => {
    expectInvalid(() => model.generate([], 2), Status.INVALID_VALUE, "prompt");
    expectInvalid(() => model.generate([64], 2), Status.INVALID_VALUE, "outside");
    expectInvalid(() => model.generate([1], 0), Status.INVALID_VALUE, "n must");
    expectInvalid(() => model.generate([1, 2, 3], 15), Status.INVALID_VALUE, "exceed the context");
  });

  test("a bad weights file is a GpuError", () => {
    expectInvalid(() => GPT2.load(join(dir, "missing.safetensors")), Status.FILE_NOT_FOUND, "missing.safetensors");
    const junk = join(dir, "junk.safetensors");
    writeFileSync(junk, new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]));
    expectInvalid(() => GPT2.load(junk, CFG), Status.INVALID_VALUE, "junk.safetensors");
    // a valid file with a tensor missing
    const partial = join(dir, "partial.safetensors");
    Tensor.toSafetensors(partial, { wte: Tensor.from(weights.wte!, [64, 32]) }, { nLayer: "2", nEmbd: "32", nHead: "2", vocabSize: "64", nCtx: "16" });
    expectInvalid(() => GPT2.load(partial), Status.INVALID_VALUE, "no tensor");
    // a tensor of the wrong shape (config says a wider model)
    expectInvalid(() => GPT2.load(path, { ...CFG, nEmbd: 64 }), Status.INVALID_VALUE, "expected float32");
    // metadata without a config, and a config that does not divide
    const nometa = join(dir, "nometa.safetensors");
    Tensor.toSafetensors(nometa, { wte: Tensor.from(weights.wte!, [64, 32]) });
    expectInvalid(() => GPT2.load(nometa), Status.INVALID_VALUE, "metadata has no");
    expectInvalid(() => GPT2.load(path, { ...CFG, nHead: 3 }), Status.INVALID_VALUE, "multiple of nHead");
  });
});
