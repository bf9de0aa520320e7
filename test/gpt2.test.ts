// The GPT-2-style decoder of examples/gpt2.ts: a tiny random model written to safetensors, loaded,
// and generating greedily; a plain float64 forward pass over the whole sequence at every step
// (test/gpt2_reference.ts, independent of the Tensor API) must choose the same tokens with logits close to
// bungpu's. The decode step is prepared once: generating compiles nothing. Bad files are GpuError.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GpuError, Status, compileStats } from "../src";
import { Tensor, tensorCompileStats } from "../src/tensor";
import { GPT2, writeRandomGPT2, type GPT2Config } from "../src/models";
import { refGenerate } from "./gpt2_reference";

const dir = mkdtempSync(join(tmpdir(), "bungpu-gpt2-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CFG: GPT2Config = { nLayer: 2, nEmbd: 32, nHead: 2, vocabSize: 64, nCtx: 16 };
// float32 against float64 over two layers: logits (magnitude ~1-10) agree to this absolute bound.
const TOL = 2e-3;

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

  test("prompt() then step() by hand gives generate()'s logits; the cache is filled on the device", () => {
    const prompt = [3, 17, 42, 5];
    const ref = refGenerate(weights, CFG, prompt, 3);
    const all = model.prompt(prompt);
    expect(all.length).toBe(prompt.length * CFG.vocabSize);
    const V = CFG.vocabSize;
    let maxErr = 0;
    const logits: Float32Array[] = [all.slice((prompt.length - 1) * V)];
    logits.push(model.step(ref.tokens[0]!, prompt.length));
    logits.push(model.step(ref.tokens[1]!, prompt.length + 1));
    logits.forEach((l, k) => l.forEach((v, i) => (maxErr = Math.max(maxErr, Math.abs(v - ref.logits[k]![i]!)))));
    expect(maxErr).toBeLessThan(TOL);
  });

  test("the decode step is one prepared plan, reused across generations of any length", () => {
    expect(model.prepares).toBe(3); // the prompt, head and decode plans
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
    expectInvalid(() => model.generate([1], 0), Status.INVALID_VALUE, "maxNewTokens must");
    expectInvalid(() => model.generate([1, 2, 3], 15), Status.INVALID_VALUE, "exceed the context");
    expectInvalid(() => model.prompt(new Array<number>(17).fill(1)), Status.INVALID_VALUE, "1 to 16 token ids");
    model.prompt([1, 2]);
    expectInvalid(() => model.step(1, 3), Status.INVALID_VALUE, "cache holds [0, 2)");
    expectInvalid(() => model.step(1, 16), Status.INVALID_VALUE, "outside [1, 16)");
    expectInvalid(() => model.step(-1, 2), Status.INVALID_VALUE, "outside [0, 64)");
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
    expectInvalid(() => GPT2.load(path, { ...CFG, nEmbd: 64 }), Status.INVALID_VALUE, "expected [64");
    // metadata without a config, and a config that does not divide
    const nometa = join(dir, "nometa.safetensors");
    Tensor.toSafetensors(nometa, { wte: Tensor.from(weights.wte!, [64, 32]) });
    expectInvalid(() => GPT2.load(nometa), Status.INVALID_VALUE, "in its metadata");
    expectInvalid(() => GPT2.load(path, { ...CFG, nHead: 3 }), Status.INVALID_VALUE, "multiple of nHead");
  });
});
