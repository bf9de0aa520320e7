// GPT2.fromPretrained / fromTensors (issue 21 item 1): the checkpoints users have. The config.json
// of test/fixtures/gpt2_hf was written by transformers 5.18 (GPT2Config.save_pretrained: n_inner
// 48, layer_norm_epsilon 1e-3, an untied head, scale_attn_by_inverse_layer_idx). The weights are
// made here (non-unit norms, non-zero biases) and written as transformers names them: its folder
// layout (transformer.* and lm_head.weight, one file or shards with an index), and the hub's older
// single-file layout (no prefix, attn.bias mask buffers). Logits are compared with the float64
// reference of test/gpt2_reference.ts, which reads the same config fields.
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Status, Tensor } from "../src";
import { GPT2, configFromTransformers, gpt2Shapes, loadTokenizer, randomGPT2Weights, type GPT2Config } from "../src/models";
import { refGenerate, refLogits } from "./gpt2_reference";
import { expectGpuError, expectWithin } from "./helpers";
import { constantHolders } from "../src/tensor/constants";

const dev = Device.open("cpu");
const dir = mkdtempSync(join(tmpdir(), "bungpu-gpt2-hf-"));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  dev.dispose();
});

const FIX = join(import.meta.dir, "fixtures", "gpt2_hf", "config.json");
const hfJson = JSON.parse(readFileSync(FIX, "utf8")) as Record<string, unknown>;
const cfg = configFromTransformers(hfJson);
const w = randomGPT2Weights(cfg, 3);
const PROMPT = [5, 17, 2, 40, 33, 9];

/** transformers' name for a model name (GPT2LMHeadModel's state dict). */
function hfName(n: string, prefix = "transformer."): string {
  if (n === "lm_head") return "lm_head.weight";
  if (n === "wte" || n === "wpe") return `${prefix}${n}.weight`;
  return `${prefix}${n}`;
}
function writeFolder(path: string, json: Record<string, unknown>, weights: Record<string, Float32Array>, shards = 1): void {
  mkdirSync(path, { recursive: true });
  writeFileSync(join(path, "config.json"), JSON.stringify(json, null, 2));
  const c = configFromTransformers(json);
  const shapes = gpt2Shapes(c);
  const names = Object.keys(weights);
  const map: Record<string, string> = {};
  for (let k = 0; k < shards; k++) {
    const file = shards === 1 ? "model.safetensors" : `model-0000${k + 1}-of-0000${shards}.safetensors`;
    const part: Record<string, Tensor> = {};
    names.forEach((n, i) => {
      if (i % shards !== k) return;
      part[hfName(n)] = Tensor.from(weights[n]!, shapes[n]!);
      map[hfName(n)] = file;
    });
    Tensor.toSafetensors(join(path, file), part, { format: "pt" });
  }
  if (shards > 1) writeFileSync(join(path, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: map }));
}
function lastLogits(m: GPT2, tokens: number[]): Float32Array {
  const V = m.config.vocabSize;
  return m.logits(tokens).slice((tokens.length - 1) * V, tokens.length * V);
}

describe("GPT2.fromPretrained", () => {
  test("the config transformers wrote is read field by field", () => {
    expect(cfg).toEqual({
      nLayer: 2, nEmbd: 32, nHead: 4, vocabSize: 96, nCtx: 64, nInner: 48, layerNormEpsilon: 1e-3, activation: "gelu_new",
      tieWordEmbeddings: false, scaleAttnWeights: true, scaleAttnByInverseLayerIdx: true, eosTokenId: 1,
    });
  });

  test("a transformers folder (untied head, n_inner, epsilon, inverse-layer scaling): logits and greedy tokens match float64", () => {
    const path = join(dir, "hf");
    writeFolder(path, hfJson, w);
    using m = GPT2.fromPretrained(path, { device: dev });
    expect(m.config.tieWordEmbeddings).toBe(false);
    expectWithin(lastLogits(m, PROMPT), refLogits(w, cfg, PROMPT), 1e-4);
    const ref = refGenerate(w, cfg, PROMPT, 6);
    expect(m.generate(PROMPT, 6).tokens).toEqual(ref.tokens);
  });

  // On the CPU backend the decode cache is device memory nothing writes before the steps do: it
  // is no input of the decode plan and prepare uploads nothing for it (with the weights read
  // straight into device memory, test/safetensors.test.ts, a 124M checkpoint's peak RSS while
  // loading is 1.13x the file: bench/RESULTS.md). Each step reads only rows written before it.
  test("the decode cache is no input and no upload; steps read only what the cache was given", () => {
    const path = join(dir, "hf-direct");
    writeFolder(path, hfJson, w);
    using m = GPT2.fromPretrained(path, { device: dev });
    expect(m.decodePlan.inputNames).toEqual(["token"]);
    const ref = refGenerate(w, cfg, PROMPT, 6);
    const g = m.generate(PROMPT, 6);
    expect(g.tokens).toEqual(ref.tokens);
    g.logits.forEach((l, k) => expectWithin(l, ref.logits[k]!, 1e-4));
  });

  test("sharded with model.safetensors.index.json: the same logits", () => {
    const one = join(dir, "hf1"), two = join(dir, "hf2");
    writeFolder(one, hfJson, w, 1);
    writeFolder(two, hfJson, w, 2);
    using a = GPT2.fromPretrained(one, { device: dev });
    using b = GPT2.fromPretrained(two, { device: dev });
    expect([...lastLogits(b, PROMPT)]).toEqual([...lastLogits(a, PROMPT)]);
  });

  test("the hub's single file (no prefix, attn.bias buffers, tied head) with its config.json beside it", () => {
    const json = { ...hfJson, tie_word_embeddings: true, scale_attn_by_inverse_layer_idx: false, n_inner: null };
    const c = configFromTransformers(json);
    const wt = randomGPT2Weights(c, 4);
    const path = join(dir, "hub");
    mkdirSync(path, { recursive: true });
    writeFileSync(join(path, "config.json"), JSON.stringify(json));
    const shapes = gpt2Shapes(c);
    const tensors: Record<string, Tensor> = {};
    for (const [n, a] of Object.entries(wt)) tensors[hfName(n, "")] = Tensor.from(a, shapes[n]!);
    const mask = new Float32Array(c.nCtx * c.nCtx);
    for (let i = 0; i < c.nCtx; i++) for (let j = 0; j <= i; j++) mask[i * c.nCtx + j] = 1;
    for (let i = 0; i < c.nLayer; i++) tensors[`h.${i}.attn.bias`] = Tensor.from(mask, [1, 1, c.nCtx, c.nCtx]);
    Tensor.toSafetensors(join(path, "gpt2.safetensors"), tensors);
    using m = GPT2.fromPretrained(join(path, "gpt2.safetensors"), { device: dev });
    expect(m.config.nInner).toBeUndefined();
    expectWithin(lastLogits(m, PROMPT), refLogits(wt, c, PROMPT), 1e-4);
  });

  // A half checkpoint stays in half on the device: its matrices and the KV cache keep the
  // checkpoint's dtype, kernels convert as they load and accumulate in float32. So the prompt's
  // logits are those of the rounded weights computed in float32 (float64 reference within 1e-4),
  // while decode steps read keys and values rounded to the half dtype: their logits are within
  // that rounding of the reference. { dtype: "float32" } upcasts: then steps match within 1e-4.
  test("float16 and bfloat16 checkpoints are kept and computed in half: weights and KV cache half, logits of the rounded weights", () => {
    for (const dtype of ["float16", "bfloat16"] as const) {
      const path = join(dir, `half-${dtype}`);
      mkdirSync(path, { recursive: true });
      writeFileSync(join(path, "config.json"), JSON.stringify({ ...hfJson, torch_dtype: dtype }));
      const shapes = gpt2Shapes(cfg);
      const tensors: Record<string, Tensor> = {};
      for (const [n, a] of Object.entries(w)) tensors[hfName(n)] = Tensor.from(a, shapes[n]!).cast(dtype);
      Tensor.toSafetensors(join(path, "model.safetensors"), tensors);
      // the reference reads the rounded values back (float16 as numbers; bfloat16 bits are a float32's top half)
      const back = Tensor.fromSafetensors(join(path, "model.safetensors"));
      const rounded: Record<string, Float32Array> = {};
      for (const n of Object.keys(w)) {
        const t = back[hfName(n)]!;
        expect(t.dtype).toBe(dtype);
        if (dtype === "float16") rounded[n] = Float32Array.from(t.toArray("float16") as ArrayLike<number>);
        else rounded[n] = new Float32Array(Uint32Array.from(t.toArray("bfloat16"), (b) => b << 16).buffer);
      }
      const steps = 4;
      const ref = refGenerate(rounded, cfg, PROMPT, steps + 1);
      {
        using m = GPT2.fromPretrained(path, { device: dev });
        expect(m.dtype).toBe(dtype);
        expectWithin(lastLogits(m, PROMPT), refLogits(rounded, cfg, PROMPT), 1e-4);
        // decode steps read the half cache: within the half dtype's rounding of the keys and values
        let P = PROMPT.length, worst = 0;
        for (let k = 0; k < steps; k++, P++) {
          const got = m.step(ref.tokens[k]!, P), want = ref.logits[k + 1]!;
          for (let j = 0; j < want.length; j++) worst = Math.max(worst, Math.abs(got[j]! - want[j]!));
        }
        const unit = dtype === "float16" ? 2 ** -11 : 2 ** -8;
        expect(worst).toBeLessThan(64 * unit);
        expect(worst).toBeGreaterThan(1e-6); // the cache really is half: exact float32 steps would be closer
      }
      {
        using m = GPT2.fromPretrained(path, { device: dev, dtype: "float32" });
        expect(m.dtype).toBe("float32");
        m.logits(PROMPT);
        let P = PROMPT.length;
        for (let k = 0; k < steps; k++, P++) expectWithin(m.step(ref.tokens[k]!, P), ref.logits[k + 1]!, 1e-4);
      }
    }
  });

  test("a float32 checkpoint computed in half ({ dtype }): the matrices on the device take 2 bytes a value, greedy tokens as float32's", () => {
    const shapes = gpt2Shapes(cfg);
    const tensors: Record<string, Tensor> = {};
    for (const [n, a] of Object.entries(w)) tensors[n] = Tensor.from(a, shapes[n]!);
    using m32 = GPT2.fromTensors(cfg, tensors, { device: dev });
    using mb = GPT2.fromTensors(cfg, tensors, { device: dev, dtype: "bfloat16" });
    expect(m32.dtype).toBe("float32");
    expect(mb.dtype).toBe("bfloat16");
    // the float32 model reads the caller's tensor; the bfloat16 one its own converted copy, half the bytes
    const fc = tensors["h.0.mlp.c_fc.weight"]!;
    expect(m32.promptPlan.buffer(fc.node.id)!.byteLength).toBe(shapes["h.0.mlp.c_fc.weight"]!.reduce((a, b) => a * b) * 4);
    expect(mb.promptPlan.buffer(fc.node.id)).toBeUndefined();
    const total = (m: GPT2) => [m.promptPlan, m.headPlan].flatMap((p) => p.buffers()).reduce((a, b) => a + b.byteLength, 0);
    const matrices = Object.entries(shapes).filter(([n]) => /^(wte|wpe|lm_head)$|\.(c_attn|c_proj|c_fc)\.weight$/.test(n)).reduce((a, [, sh]) => a + sh[0]! * sh[1]!, 0);
    // the bfloat16 prompt and head plans hold 2 bytes less per matrix value and per key and value output (this head is untied: no matrix in both)
    expect(total(m32) - total(mb)).toBe(matrices * 2 + cfg.nLayer * 2 * cfg.nCtx * cfg.nEmbd * 2);
    const g32 = m32.generate(PROMPT, 6), gb = mb.generate(PROMPT, 6);
    expect(gb.tokens.length).toBe(6);
    // bfloat16 weights move logits by about their rounding (2^-8 relative): close to float32's, not equal
    let worst = 0;
    for (let j = 0; j < g32.logits[0]!.length; j++) worst = Math.max(worst, Math.abs(gb.logits[0]![j]! - g32.logits[0]![j]!));
    expect(worst).toBeGreaterThan(1e-6);
    expect(worst).toBeLessThan(0.25);
    expectGpuError(() => GPT2.fromTensors(cfg, tensors, { device: dev, dtype: "int8" as never }), Status.INVALID_VALUE, "dtype must be one of");
  });

  test("other activations and unscaled attention follow the config", () => {
    for (const [act, scale] of [["gelu", true], ["relu", false], ["silu", true]] as const) {
      const json = { ...hfJson, activation_function: act, scale_attn_weights: scale };
      const c = configFromTransformers(json);
      const path = join(dir, `act-${act}`);
      writeFolder(path, json, w);
      using m = GPT2.fromPretrained(path, { device: dev });
      expectWithin(lastLogits(m, PROMPT), refLogits(w, c, PROMPT), 1e-4);
    }
  });

  test("a checkpoint it cannot compute correctly is refused with INVALID_VALUE naming why", () => {
    const bad = (name: string, json: Record<string, unknown>) => {
      const path = join(dir, `bad-${name}`);
      mkdirSync(path, { recursive: true });
      writeFileSync(join(path, "config.json"), JSON.stringify(json));
      copyFileSync(join(dir, "hf", "model.safetensors"), join(path, "model.safetensors"));
      return path;
    };
    expectGpuError(() => GPT2.fromPretrained(bad("type", { ...hfJson, model_type: "gpt_neo" })), Status.INVALID_VALUE, "model_type");
    expectGpuError(() => GPT2.fromPretrained(bad("cross", { ...hfJson, add_cross_attention: true })), Status.INVALID_VALUE, "add_cross_attention");
    expectGpuError(() => GPT2.fromPretrained(bad("act", { ...hfJson, activation_function: "quick_gelu" })), Status.INVALID_VALUE, "quick_gelu");
    expectGpuError(() => GPT2.fromPretrained(bad("inner", { ...hfJson, n_inner: 128 })), Status.INVALID_VALUE, "expected [32, 128]");
    expectGpuError(() => GPT2.fromPretrained(join(dir, "nowhere")), Status.FILE_NOT_FOUND, "nowhere");
    mkdirSync(join(dir, "empty"), { recursive: true });
    expectGpuError(() => GPT2.fromPretrained(join(dir, "empty")), Status.INVALID_VALUE, "no model.safetensors");
    // tensors: one missing, one of another architecture, one of the wrong shape
    const shapes = gpt2Shapes(cfg);
    const all = Object.fromEntries(Object.entries(w).map(([n, a]) => [hfName(n), a]));
    const { ["transformer.ln_f.bias"]: _gone, ...missing } = all;
    expectGpuError(() => GPT2.fromTensors(cfg, missing), Status.INVALID_VALUE, "transformer.ln_f.bias");
    expectGpuError(() => GPT2.fromTensors(cfg, { ...all, "transformer.h.0.crossattention.c_attn.weight": new Float32Array(4) }), Status.INVALID_VALUE, "crossattention");
    expectGpuError(() => GPT2.fromTensors(cfg, { ...all, "transformer.wpe.weight": new Float32Array(5) }), Status.INVALID_VALUE, "wpe");
    expect(shapes["lm_head"]).toEqual([96, 32]);
  });

  test("the untied head counts: dropping lm_head for wte changes the answer", () => {
    // a config that says tied, given the same weights, uses wte as the head and ignores lm_head
    const tied: GPT2Config = { ...cfg, tieWordEmbeddings: true };
    using m = GPT2.fromTensors(tied, Object.fromEntries(Object.entries(w).map(([n, a]) => [hfName(n), a])), { device: dev });
    expectWithin(lastLogits(m, PROMPT), refLogits(w, tied, PROMPT), 1e-4);
    const untied = refLogits(w, cfg, PROMPT);
    expect(Math.abs(lastLogits(m, PROMPT)[0]! - untied[0]!)).toBeGreaterThan(1e-3);
  });
});

describe("GPT2.generate", () => {
  test("sampling is reproducible by seed; topK 1 is greedy; a stop token ends it", () => {
    using m = GPT2.fromTensors(cfg, w, { device: dev });
    const greedy = m.generate(PROMPT, { maxNewTokens: 8, stop: [] }).tokens;
    expect(greedy).toEqual(refGenerate(w, cfg, PROMPT, 8).tokens);
    const a = m.generate(PROMPT, { maxNewTokens: 8, temperature: 1.5, topP: 0.95, seed: 7, stop: [] }).tokens;
    const b = m.generate(PROMPT, { maxNewTokens: 8, temperature: 1.5, topP: 0.95, seed: 7, stop: [] }).tokens;
    expect(b).toEqual(a);
    const seeds = [1, 2, 3, 4, 5].map((seed) => m.generate(PROMPT, { maxNewTokens: 8, temperature: 1.5, seed, stop: [] }).tokens.join(","));
    expect(new Set(seeds).size).toBeGreaterThan(1); // different seeds, different samples
    expect(m.generate(PROMPT, { maxNewTokens: 8, temperature: 1, topK: 1, seed: 3, stop: [] }).tokens).toEqual(greedy);
    const stopped = m.generate(PROMPT, { maxNewTokens: 8, stop: greedy[2]! }).tokens;
    expect(stopped).toEqual(greedy.slice(0, greedy.indexOf(greedy[2]!) + 1));
    expectGpuError(() => m.generate(PROMPT, { maxNewTokens: 2, temperature: -1 }), Status.INVALID_VALUE, "temperature");
    expectGpuError(() => m.generate(PROMPT, { maxNewTokens: 2, topP: 0 }), Status.INVALID_VALUE, "topP");
    expectGpuError(() => m.generate(PROMPT, { maxNewTokens: 2, topK: 0 }), Status.INVALID_VALUE, "topK");
  });
});

describe("loadTokenizer", () => {
  const EXPECTED = JSON.parse(readFileSync(join(import.meta.dir, "fixtures", "gpt2_hf", "tokenizer_expected.json"), "utf8")) as {
    tokenizers_version: string;
    vocab_size: number;
    samples: { text: string; ids: number[]; decoded: string }[];
  };

  test("byte-level BPE: the ids and text of Hugging Face's Rust tokenizers, for the tokenizer.json it wrote", async () => {
    // tokenizer.json and the expected ids were written by the Python tokenizers package (see tokenizer_expected.json)
    const tok = await loadTokenizer(join(import.meta.dir, "fixtures", "gpt2_hf"));
    expect(tok.vocabSize).toBe(EXPECTED.vocab_size);
    for (const s of EXPECTED.samples) {
      expect(tok.encode(s.text)).toEqual(s.ids);
      expect(tok.decode(s.ids)).toBe(s.decoded);
    }
    expect(tok.decode(EXPECTED.samples[4]!.ids, { skipSpecial: true })).toBe("A stream");
    expectGpuError(() => tok.decode([EXPECTED.vocab_size]), Status.INVALID_VALUE, "token ids");
  });

  test("text in, text out through the model; a missing or broken tokenizer is a GpuError", async () => {
    const tok = await loadTokenizer(join(import.meta.dir, "fixtures", "gpt2_hf", "tokenizer.json"));
    const c: GPT2Config = { ...cfg, vocabSize: tok.vocabSize, tieWordEmbeddings: true };
    using m = GPT2.fromTensors(c, randomGPT2Weights(c, 9), { device: dev });
    const ids = tok.encode("Hello, world!");
    const out = m.generate(ids, { maxNewTokens: 5, stop: [] });
    expect(out.tokens).toEqual(refGenerate(randomGPT2Weights(c, 9), c, ids, 5).tokens);
    expect(typeof tok.decode(out.tokens)).toBe("string");
    await expect(loadTokenizer(join(dir, "no-such"))).rejects.toMatchObject({ code: Status.FILE_NOT_FOUND });
    mkdirSync(join(dir, "badtok"), { recursive: true });
    writeFileSync(join(dir, "badtok", "tokenizer.json"), "{ not json");
    await expect(loadTokenizer(join(dir, "badtok"))).rejects.toMatchObject({ code: Status.INVALID_VALUE });
  });
});

describe("constant weights (PrepareOptions.constants)", () => {
  test("two plans prepared with the same constant share one device buffer; runs and setWeights cannot change it", async () => {
    const wdata = Float32Array.from({ length: 64 }, (_, i) => i / 8);
    const W = Tensor.from(wdata, [8, 8], { name: "W" });
    const x = Tensor.from(new Float32Array(8), [1, 8], { name: "x" });
    const a = x.matmul(W).prepare({ device: dev, constants: [W] });
    const b = x.matmul(W).relu().prepare({ device: dev, constants: [W] });
    const wa = a.buffer(W.id)!, wb = b.buffer(W.id)!;
    expect(a.inputNames).toEqual(["x"]); // a constant is not an input
    expect(wa.address).toBe(wb.address);
    expect(constantHolders(wa)).toBe(2);
    const xs = Float32Array.from({ length: 8 }, (_, i) => i - 3);
    const want = Array.from({ length: 8 }, (_, j) => xs.reduce((s, v, i) => s + v * wdata[i * 8 + j]!, 0));
    expect([...(await a.run({ x: xs })).output0!]).toEqual(want);
    await expect(a.run({ x: xs, W: wdata })).rejects.toMatchObject({ code: Status.INVALID_VALUE });
    expectGpuError(() => a.setWeights({ W: wdata }), Status.INVALID_VALUE, "constant");
    a.dispose();
    expect(constantHolders(wb)).toBe(1);
    expect([...(await b.run({ x: xs })).output0!]).toEqual(want.map((v) => Math.max(v, 0))); // still there for b
    b.dispose();
    expect(constantHolders(wb)).toBe(0);
    expectGpuError(() => x.matmul(W).prepare({ device: dev, constants: [x.mul(2)] }), Status.INVALID_VALUE, "tensor of data");
  });
});
