// GPT-2 in the package (`import { GPT2 } from "bungpu/models"`): a decoder on the Tensor API that
// loads the checkpoints users have. GPT2.fromPretrained reads a folder written by transformers'
// save_pretrained (config.json and model.safetensors, or the shards model.safetensors.index.json
// lists) or a single .safetensors file (transformers' names or the hub's older ones without the
// "transformer." prefix, attn.bias mask buffers skipped); GPT2.fromTensors takes weights in
// memory. Every config field the forward pass depends on is honoured (layer_norm_epsilon,
// n_inner, activation_function, tie_word_embeddings, scale_attn_weights,
// scale_attn_by_inverse_layer_idx), and one that would make it another model is refused
// (add_cross_attention, another model_type, an activation not implemented), so a checkpoint that
// differs never gives silently wrong numbers. A float16 or bfloat16 checkpoint stays in half: its
// weight matrices (embeddings, the four projections of each block, the head) and the KV cache are
// kept in the checkpoint's dtype on the device and read as such by every kernel, which converts as
// it loads and accumulates in float32 (as GPU tensor cores do); layer-norm parameters and biases,
// a few kilobytes, are float32. `{ dtype }` picks another storage dtype (float32 upcasts).
//
// Inside, the names are GPT-2's without prefixes: wte, wpe, h.{i}.ln_1, h.{i}.attn.c_attn / c_proj
// in Conv1D layout [in, out], h.{i}.ln_2, h.{i}.mlp.c_fc / c_proj, ln_f, and lm_head [vocab, embd]
// when the head is not tied; pre-norm blocks; logits = h · lm_headᵀ (wteᵀ when tied).
//
// Three plans, each prepared ONCE when the model loads:
//  - the prompt plan runs the whole prompt (its length a Variable T), causal attention, and
//    returns every position's final hidden state (after ln_f) and each layer's keys and values
//    [T, heads, headDim];
//  - the head plan turns up to HEAD_ROWS of those hidden states into logits (rows a Variable R):
//    generate() asks it for the prompt's last position only, logits() for every position, a
//    block of rows at a time, so no buffer is [context, vocabulary] (206 MB for GPT-2 small);
//  - the decode plan runs one token at position P (a Variable: the tokens already cached). Its KV
//    cache is a pair of plan-owned input buffers per layer, laid out [nCtx, heads, headDim] so a
//    token's keys are one contiguous row: the step reads the cache shrunk to [0, P] plus the new
//    token's own key and value (a softmax over both, so the step never writes what it reads), and
//    returns the logits and the new key and value, which are then copied into the cache at row P.
// With `{ batch: { slots } }` a third plan, the batched decode step, runs rows [0, B) (a Variable)
// of up to `slots` sequences at once, each row at its own position (an int32 input), reading its
// own cache slot [slots, context, heads, headDim] masked to its own positions; GPT2Batch
// (gpt2_batch.ts, made by model.batch()) runs it for continuous batching.
// Every token runs the same decode plan through executeWithVars({ P }): no recompile per token.
// The cache is filled on the device: after the prompt, and after each step, one command list of
// device-to-device copies (the plan's key/value output buffers into the cache buffers' rows)
// queues behind the run on one stream, and the logits read waits for both; no key or value goes
// through the host.
import { statSync } from "node:fs";
import { dirname, join } from "node:path";
import { Device } from "../device";
import { CommandEncoder } from "../encoder";
import { describeGot, invalid, options, unknownOption, type OptionKeys } from "../errors";
import { CONFIG_KEYS, checkConfig, checkpointFiles, configFromTransformers, gpt2Name, gpt2Shapes, type GPT2Config } from "./gpt2_config";
import { GPT2Batch } from "./gpt2_batch";
import { generationSetup, pick, type GenerateOptions } from "./sampling";
import { Tensor, Variable, type ExecutionPlan, type PrepareOptions } from "../tensor";
import { LazyNode, constantData } from "../tensor/ast";
import { deviceReader } from "../tensor/constants";
import { ITEMSIZE, hostArray } from "../tensor/dtype";

/** Hidden-state rows the head plan turns into logits per run (its output buffer: HEAD_ROWS × vocabulary floats). */
const HEAD_ROWS = 64;


export interface Generation {
  /** The generated token ids (the prompt not included). */
  tokens: number[];
  /** The logits each generated token was chosen from. */
  logits: Float32Array[];
  /** Milliseconds spent in the prompt plan and, per generated token after the first, in a decode step. */
  promptMs: number;
  stepMs: number[];
}

/** The dtypes a model keeps its weight matrices and KV cache in. */
export type GPT2DType = "float32" | "float16" | "bfloat16";
const GPT2_DTYPES: readonly GPT2DType[] = ["float32", "float16", "bfloat16"];

/** Whether `name` (a model name) is one of the weight matrices kept in the model's dtype. */
const isMatrix = (name: string) => name === "wte" || name === "wpe" || name === "lm_head" || /\.(c_attn|c_proj|c_fc)\.weight$/.test(name);

/** Options of a model's load: prepare()'s (device, fusion, ...) and the batched decode plan's. */
export interface GPT2Options extends PrepareOptions {
  /**
   * The dtype the weight matrices and the KV cache are kept in on the device (default: the
   * checkpoint's, that of its token embedding; float32 for weights given as Float32Arrays).
   * Half dtypes halve the bytes each decode step reads; products accumulate in float32.
   */
  dtype?: GPT2DType | undefined;
  /**
   * Also prepare the batched decode plan model.batch() runs (continuous batching): `slots`
   * sequences at most decoded together, each with a KV cache of `context` positions (default
   * nCtx; the cache is slots × context × nEmbd × 2 × nLayer floats).
   */
  batch?: { slots: number; context?: number } | undefined;
}

export interface FromPretrainedOptions extends GPT2Options {
  /** The config, where the checkpoint has none (no config.json beside it, no metadata). */
  config?: GPT2Config;
}

// The keys each options argument may have (errors.ts `options` refuses any other).
const GPT2_KEYS: OptionKeys<GPT2Options> = {
  fusion: true, outputNames: true, inputNames: true, device: true, noMemoryPlanning: true, constants: true, planCache: true, dtype: true, batch: true,
};
const FROM_PRETRAINED_KEYS: OptionKeys<FromPretrainedOptions> = { ...GPT2_KEYS, config: true };
const BATCH_KEYS: OptionKeys<NonNullable<GPT2Options["batch"]>> = { slots: true, context: true };

function checkBatch(call: string, cfg: GPT2Config, b: unknown): void {
  if (b === undefined) return;
  if (b === null || typeof b !== "object") invalid(call, `batch must be { slots, context? }, got ${describeGot(b)}`);
  for (const k in b) if (!Object.hasOwn(BATCH_KEYS, k)) unknownOption(call, k, Object.keys(BATCH_KEYS), "batch: ");
  const { slots, context } = b as { slots?: unknown; context?: unknown };
  if (!Number.isInteger(slots) || (slots as number) < 1 || (slots as number) > 4096) invalid(call, `batch.slots must be an integer in [1, 4096], got ${describeGot(slots)}`);
  if (context !== undefined && (!Number.isInteger(context) || (context as number) < 2 || (context as number) > cfg.nCtx))
    invalid(call, `batch.context must be an integer in [2, ${cfg.nCtx}] (the model's nCtx), got ${describeGot(context)}`);
}


export class GPT2 {
  readonly config: GPT2Config;
  /** The dtype of the weight matrices and the KV cache on the device (see GPT2Options.dtype). */
  readonly dtype: GPT2DType;
  /** Bytes of one position's keys (or values) in the cache. */
  readonly #kvRowBytes: number;
  /** How many plans this model prepared (the prompt plan, the decode plan, the batched decode plan if asked for, and the batched prompt plan once a batch first joins several prompts at once). */
  prepares: number;
  readonly promptPlan: ExecutionPlan;
  /** Logits of up to HEAD_ROWS hidden states (the prompt plan's output 0, copied in a block at a time). */
  readonly headPlan: ExecutionPlan;
  readonly decodePlan: ExecutionPlan;
  readonly #headRows: Tensor;
  readonly #tokens: Tensor;
  readonly #token: Tensor;
  readonly #kCache: Tensor[] = [];
  readonly #vCache: Tensor[] = [];
  readonly #copies: CommandEncoder;
  readonly #one = new Int32Array(1);
  /** Positions the decode cache holds (after prompt(): its length; after step(t, P): P + 1). */
  #cached = 0;
  /** The batched decode plan (load with `{ batch: { slots } }`), else null; model.batch() runs it. */
  readonly batchPlan: ExecutionPlan | null = null;
  /** Its rows (sequences decoded together at most) and each row's cache positions; 0 without one. */
  readonly batchSlots: number = 0;
  readonly batchContext: number = 0;
  #bTokens: Tensor | null = null;
  #bPos: Tensor | null = null;
  readonly #bK: Tensor[] = [];
  readonly #bV: Tensor[] = [];
  #openBatch: GPT2Batch | null = null;
  /** The batched prompt plan (made when a batch first joins several prompts at once), and how to make it. */
  #promptBatch: { plan: ExecutionPlan; tokens: Tensor; last: Tensor } | null = null;
  #makePromptBatch: (() => { plan: ExecutionPlan; tokens: Tensor; last: Tensor }) | null = null;

  /**
   * A model from the checkpoint at `path`: a folder as transformers' save_pretrained writes it
   * (config.json with model.safetensors, or with model.safetensors.index.json and its shards), or
   * one .safetensors file whose config is a config.json beside it, or its metadata (this
   * package's writeRandomGPT2), or `opts.config`. `opts` (device, ...) go to both plans' prepare.
   * A config field not supported, a tensor missing, of the wrong shape or not part of GPT-2, is a
   * GpuError INVALID_VALUE naming it.
   */
  static fromPretrained(path: string, opts: FromPretrainedOptions = {}): GPT2 {
    const call = "GPT2.fromPretrained";
    const { config: given, ...prep } = options(call, opts, FROM_PRETRAINED_KEYS);
    const { config, files } = checkpointFiles(call, path);
    let cfg = given;
    if (!cfg && config !== null) cfg = configFromTransformers(config, join(statSync(path).isDirectory() ? path : dirname(path), "config.json"));
    if (!cfg) {
      const meta = Tensor.safetensorsMetadata(files[0]!);
      const c: Partial<Record<(typeof CONFIG_KEYS)[number], number>> = {};
      for (const k of CONFIG_KEYS) {
        if (!(k in meta)) invalid(call, `${path}: no config.json beside it and no ${k} in its metadata; pass { config }`);
        c[k] = Number(meta[k]);
      }
      cfg = c as GPT2Config;
    }
    // Read straight into device memory where it is host memory (the CPU backend): the plans then
    // take each weight as it is, without a second copy.
    const device = prep.device ?? Device.default();
    let tensors: Record<string, Tensor> | null = {};
    for (const f of files) Object.assign(tensors, Tensor.fromSafetensors(f, { device }));
    const model = GPT2.fromTensors(cfg, tensors, prep, path);
    // The weights are on the device now, shared by both plans, which keep no host copy: one
    // collection gives the checkpoint's host arrays back at once instead of whenever.
    tensors = null;
    Bun.gc(true);
    return model;
  }

  /**
   * A model from weights in memory: `tensors` by name (the model's names or transformers', see
   * gpt2Name), each a Tensor or a Float32Array of the right size. The weight matrices are kept in
   * `opts.dtype` (default: the token embedding's dtype), the other parameters in float32.
   */
  static fromTensors(config: GPT2Config, tensors: Readonly<Record<string, Tensor | Float32Array>>, opts: GPT2Options = {}, where = "tensors"): GPT2 {
    const call = "GPT2.fromTensors";
    opts = options(call, opts, GPT2_KEYS);
    checkConfig(call, config);
    checkBatch(call, config, opts?.batch);
    if (tensors === null || typeof tensors !== "object") invalid(call, `tensors must be an object of Tensors by name, got ${describeGot(tensors)}`);
    const shapes = gpt2Shapes(config);
    if (opts?.dtype !== undefined && !GPT2_DTYPES.includes(opts.dtype)) invalid(call, `dtype must be one of ${GPT2_DTYPES.join(", ")}, got ${describeGot(opts.dtype)}`);
    const embedding = Object.entries(tensors).find(([n]) => gpt2Name(n) === "wte")?.[1];
    const dt: GPT2DType = opts?.dtype ?? (embedding instanceof Tensor && (embedding.dtype === "float16" || embedding.dtype === "bfloat16") ? embedding.dtype : "float32");
    const place = opts?.device ? { device: opts.device } : {};
    const w: Record<string, Tensor> = {};
    for (const [name, t] of Object.entries(tensors)) {
      const n = gpt2Name(name);
      if (n === null) continue;
      if (n === "lm_head" && config.tieWordEmbeddings !== false) continue; // tied: the head is wte (transformers writes both sometimes)
      const shape = shapes[n];
      if (!shape) invalid(call, `${where}: ${JSON.stringify(name)} is not a tensor of this GPT-2 (a different architecture, or a config that does not match)`);
      if (w[n]) invalid(call, `${where}: two tensors are ${n} (${JSON.stringify(name)} and another)`);
      let x: Tensor;
      if (t instanceof Float32Array) {
        if (t.length !== shape.reduce((p, q) => p * q, 1)) invalid(call, `${where}: ${name} has ${t.length} values, expected [${shape.join(", ")}]`);
        x = Tensor.from(t, shape);
      } else if (t instanceof Tensor) {
        if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) invalid(call, `${where}: ${name} is [${t.shape.join(", ")}], expected [${shape.join(", ")}]`);
        if (!GPT2_DTYPES.includes(t.dtype as GPT2DType)) invalid(call, `${where}: ${name} is ${t.dtype}; weights must be float32, float16 or bfloat16`);
        x = t;
      } else invalid(call, `${where}: ${name} must be a Tensor or a Float32Array, got ${describeGot(t)}`);
      // Matrices in the model's dtype, the rest in float32: converted once, here, on the device.
      const want = isMatrix(n) ? dt : "float32";
      if (x.dtype !== want) x = x.cast(want).realize(place);
      w[n] = x;
    }
    for (const n of Object.keys(shapes)) if (!w[n]) invalid(call, `${where}: no tensor ${JSON.stringify(n)} (transformers: ${JSON.stringify(n === "wte" || n === "wpe" ? `transformer.${n}.weight` : n === "lm_head" ? "lm_head.weight" : `transformer.${n}`)})`);
    return new GPT2(config, w, { ...opts, dtype: dt });
  }

  /**
   * Load a model from a safetensors file; the config comes from its metadata unless given. `opts`
   * (device, fusion, ...) go to both plans' prepare. (fromPretrained reads the same files, and
   * transformers' checkpoints.)
   */
  static load(path: string, config?: GPT2Config, opts: PrepareOptions = {}): GPT2 {
    return GPT2.fromPretrained(path, config ? { ...opts, config } : opts);
  }

  private constructor(cfg: GPT2Config, w: Record<string, Tensor>, gopts: GPT2Options) {
    this.config = cfg;
    const { batch, dtype, ...opts } = gopts ?? {};
    const dt = (this.dtype = dtype ?? "float32");
    this.#kvRowBytes = cfg.nEmbd * (dt === "float32" ? 4 : 2);
    // A weight matrix as the kernels read it: converted to float32 as it is loaded (the cast fuses
    // into the kernel that reads it; the device keeps the half copy only).
    const m = (n: string) => (w[n]!.dtype === "float32" ? w[n]! : w[n]!.float());
    // Keys and values as the cache keeps them, and back.
    const store = (t: Tensor) => (dt === "float32" ? t : t.cast(dt));
    const load = (t: Tensor) => (dt === "float32" ? t : t.float());
    const zeros = (n: number, shape: number[], name: string) => Tensor.from(new Float32Array(n), shape, { name, dtype: dt });
    // The decode step's cache: it reads positions [0, P) only, each written before, so its first
    // contents never matter. Where device memory is host memory, it is a constant over a device
    // buffer left as the allocator gives it: no host copy, no zeros written, and no page of it
    // resident until the cache fills (75 MB of float32 for GPT-2 small at full context). Elsewhere
    // zeros, uploaded at prepare. (The batched cache is read masked: it must hold finite values.)
    const reader = deviceReader(opts.device ?? Device.default());
    const unwritten = (n: number, shape: number[], name: string): Tensor => {
      if (!reader) return zeros(n, shape, name);
      const data = hostArray(dt, reader.alloc(n * ITEMSIZE[dt]));
      reader.keep(data);
      const node = new LazyNode({ op: "buffer", data }, dt, shape);
      constantData.add(node);
      return new Tensor(node);
    };
    const { nLayer: L, nEmbd: C, nHead: H, nCtx } = cfg;
    const D = C / H;
    // Each LayerNorm's output gets its own buffer: left fused into the matmul that reads it, the
    // normalisation is recomputed for every column block of that matmul (the prompt ran ~25%
    // slower that way on a 2-core CPU; the decode step about the same).
    const eps = cfg.layerNormEpsilon ?? 1e-5;
    const ln = (x: Tensor, p: string) => x.layerNorm({ weight: w[`${p}.weight`]!, bias: w[`${p}.bias`]!, eps }).contiguous();
    const lin = (x: Tensor, p: string) => x.matmul(m(`${p}.weight`)).add(w[`${p}.bias`]!);
    const act = (x: Tensor): Tensor => {
      switch (cfg.activation ?? "gelu_new") {
        case "gelu_new": case "gelu_pytorch_tanh": case "gelu_fast": return x.gelu("tanh");
        case "gelu": return x.gelu("none");
        case "relu": return x.relu();
        case "silu": case "swish": return x.silu();
      }
    };
    const mlp = (x: Tensor, i: number) => lin(act(lin(ln(x, `h.${i}.ln_2`), `h.${i}.mlp.c_fc`)), `h.${i}.mlp.c_proj`);
    const headW = m(cfg.tieWordEmbeddings === false ? "lm_head" : "wte");
    const head = (x: Tensor) => ln(x, "ln_f").matmul(headW.transpose(0, 1));
    // Attention scores' scale per layer: 1/√D unless scale_attn_weights is off, and 1/(i + 1) more
    // with scale_attn_by_inverse_layer_idx.
    const scaleOf = (i: number) => (cfg.scaleAttnWeights === false ? 1 : 1 / Math.sqrt(D)) / (cfg.scaleAttnByInverseLayerIdx ? i + 1 : 1);

    // The prompt: tokens[0, T), causal self-attention.
    const T = new Variable("T", 1, nCtx).bind(1);
    this.#tokens = Tensor.from(new Int32Array(nCtx), [nCtx], { name: "tokens" });
    const rows = (n: string, idx: Tensor) => load(w[n]!.indexSelect(0, idx)); // embedding rows, converted after the gather
    let x = rows("wte", this.#tokens.shrink([[0, T]])).add(load(w["wpe"]!.shrink([[0, T], null]))); // [T, C]
    const promptOuts: Tensor[] = [];
    for (let i = 0; i < L; i++) {
      const qkv = lin(ln(x, `h.${i}.ln_1`), `h.${i}.attn.c_attn`); // [T, 3C]
      const part = (j: number) => qkv.shrink([null, [j * C, (j + 1) * C]]).reshape([T, H, D]);
      const [q, k, v] = [part(0), part(1), part(2)];
      const heads = (t: Tensor) => t.permute([1, 0, 2]); // [H, T, D]
      const a = heads(q).scaledDotProductAttention(heads(k), heads(v), { isCausal: true, scale: scaleOf(i) }).permute([1, 0, 2]).reshape([T, C]);
      x = x.add(lin(a, `h.${i}.attn.c_proj`));
      x = x.add(mlp(x, i));
      promptOuts.push(store(k), store(v));
    }
    // The weights are constants: both plans share one device copy of them.
    const shared: PrepareOptions = { ...opts, constants: Object.values(w) };
    this.promptPlan = Tensor.prepareBatch([ln(x, "ln_f"), ...promptOuts], shared);
    const R = new Variable("R", 1, HEAD_ROWS).bind(1);
    this.#headRows = Tensor.from(new Float32Array(HEAD_ROWS * C), [HEAD_ROWS, C], { name: "head.rows" });
    this.headPlan = Tensor.prepareBatch([this.#headRows.shrink([[0, R], null]).matmul(headW.transpose(0, 1))], shared);

    // One decode step: the token at position P, the cache holding positions [0, P).
    const P = new Variable("P", 1, nCtx - 1).bind(1);
    this.#token = Tensor.from(new Int32Array(1), [1], { name: "token" });
    const pos = Tensor.fromDims([P]).reshape([1]);
    let y = rows("wte", this.#token).add(rows("wpe", pos)); // [1, C]
    const stepOuts: Tensor[] = [];
    for (let i = 0; i < L; i++) {
      const kc = unwritten(nCtx * C, [nCtx, H, D], `cache.${i}.k`);
      const vc = unwritten(nCtx * C, [nCtx, H, D], `cache.${i}.v`);
      this.#kCache.push(kc);
      this.#vCache.push(vc);
      const qkv = lin(ln(y, `h.${i}.ln_1`), `h.${i}.attn.c_attn`); // [1, 3C]
      const part = (j: number) => qkv.shrink([null, [j * C, (j + 1) * C]]);
      const [q, kn, vn] = [part(0).reshape([H, 1, D]), part(1), part(2)];
      const K = load(kc.shrink([[0, P], null, null])).permute([1, 2, 0]); // [H, D, P]
      const V = load(vc.shrink([[0, P], null, null])).permute([1, 0, 2]); // [H, P, D]
      const sc = q.matmul(K).mul(scaleOf(i)); // [H, 1, P]: the cached positions
      const sn = q.mul(kn.reshape([H, 1, D])).sum(-1, true).mul(scaleOf(i)); // [H, 1, 1]: the token itself
      const m = sc.max(-1, true).maximum(sn);
      const ec = sc.sub(m).exp(), en = sn.sub(m).exp();
      const o = ec.matmul(V).add(en.mul(vn.reshape([H, 1, D]))).div(ec.sum(-1, true).add(en)); // [H, 1, D]
      y = y.add(lin(o.reshape([1, C]), `h.${i}.attn.c_proj`));
      y = y.add(mlp(y, i));
      stepOuts.push(store(kn), store(vn));
    }
    this.decodePlan = Tensor.prepareBatch([head(y), ...stepOuts], shared);
    this.prepares = 3;
    this.#copies = new CommandEncoder(this.decodePlan.device);
    if (!batch) return;

    // The batched decode step (continuous batching): rows [0, B) of `slots`, row b the token
    // batch.tokens[b] at position batch.pos[b], its cache holding positions [0, pos[b]). The
    // caches are [slots, context, heads, headDim] per layer; the step reads every row's cache
    // shrunk to [0, P) (P: the largest position of the step) and masks out each row's positions
    // ≥ its own, so rows of different lengths share one plan run and never see each other.
    const S = batch.slots, ctx = batch.context ?? nCtx;
    const B = new Variable("B", 1, S).bind(1);
    const PB = new Variable("P", 1, ctx - 1).bind(1);
    this.#bTokens = Tensor.from(new Int32Array(S), [S], { name: "batch.tokens" });
    this.#bPos = Tensor.from(new Int32Array(S), [S], { name: "batch.pos" });
    const bpos = this.#bPos.shrink([[0, B]]);
    let z = rows("wte", this.#bTokens.shrink([[0, B]])).add(rows("wpe", bpos)); // [B, C]
    const seen = Tensor.arange(PB).reshape([1, 1, 1, PB]).cmplt(bpos.reshape([B, 1, 1, 1])); // [B, 1, 1, P]: position < the row's
    const batchOuts: Tensor[] = [];
    for (let i = 0; i < L; i++) {
      const kc = zeros(S * ctx * C, [S, ctx, H, D], `batch.cache.${i}.k`);
      const vc = zeros(S * ctx * C, [S, ctx, H, D], `batch.cache.${i}.v`);
      this.#bK.push(kc);
      this.#bV.push(vc);
      const qkv = lin(ln(z, `h.${i}.ln_1`), `h.${i}.attn.c_attn`); // [B, 3C]
      const part = (j: number) => qkv.shrink([null, [j * C, (j + 1) * C]]);
      const [q, kn, vn] = [part(0).reshape([B, H, 1, D]), part(1), part(2)];
      const K = load(kc.shrink([[0, B], [0, PB], null, null])).permute([0, 2, 3, 1]); // [B, H, D, P]
      const V = load(vc.shrink([[0, B], [0, PB], null, null])).permute([0, 2, 1, 3]); // [B, H, P, D]
      const sc = seen.where(q.matmul(K).mul(scaleOf(i)), -1e30); // [B, H, 1, P]
      const sn = q.mul(kn.reshape([B, H, 1, D])).sum(-1, true).mul(scaleOf(i)); // [B, H, 1, 1]
      const m = sc.max(-1, true).maximum(sn);
      const ec = sc.sub(m).exp(), en = sn.sub(m).exp();
      const o = ec.matmul(V).add(en.mul(vn.reshape([B, H, 1, D]))).div(ec.sum(-1, true).add(en)); // [B, H, 1, D]
      z = z.add(lin(o.reshape([B, C]), `h.${i}.attn.c_proj`));
      z = z.add(mlp(z, i));
      batchOuts.push(store(kn), store(vn));
    }
    this.batchPlan = Tensor.prepareBatch([head(z), ...batchOuts], shared);
    this.batchSlots = S;
    this.batchContext = ctx;
    this.prepares = 4;

    // Several prompts in one run (GPT2Batch.joinAll): rows [0, B) of `slots`, each prompt padded on
    // the right to the longest, T. Causal attention is the whole mask: a real position i < its
    // prompt's length sees positions j ≤ i only, all real, so the pads after it change nothing;
    // what the pads compute is never read (each row's keys and values are cached for [0, length),
    // its logits taken at length - 1). Prepared when first used: a model that never joins prompts
    // together does not compile it.
    this.#makePromptBatch = () => {
      const Bq = new Variable("B", 1, S).bind(1);
      const Tq = new Variable("T", 1, ctx).bind(1);
      const tokens = Tensor.from(new Int32Array(S * ctx), [S, ctx], { name: "prompts.tokens" });
      const last = Tensor.from(new Int32Array(S), [S], { name: "prompts.last" });
      const idx = tokens.shrink([[0, Bq], [0, Tq]]).reshape([Bq, Tq, 1]).expand([Bq, Tq, C]); // [B, T, C]
      const wte = w["wte"]!;
      let u = load(wte.reshape([1, cfg.vocabSize, C]).expand([Bq, cfg.vocabSize, C]).gather(1, idx)).add(load(w["wpe"]!.shrink([[0, Tq], null])).reshape([1, Tq, C])); // [B, T, C]
      const outs: Tensor[] = [];
      for (let i = 0; i < L; i++) {
        const qkv = lin(ln(u, `h.${i}.ln_1`), `h.${i}.attn.c_attn`); // [B, T, 3C]
        const part = (j: number) => qkv.shrink([null, null, [j * C, (j + 1) * C]]).reshape([Bq, Tq, H, D]);
        const [q, k, v] = [part(0), part(1), part(2)];
        const heads = (t: Tensor) => t.permute([0, 2, 1, 3]); // [B, H, T, D]
        const a = heads(q).scaledDotProductAttention(heads(k), heads(v), { isCausal: true, scale: scaleOf(i) }).permute([0, 2, 1, 3]).reshape([Bq, Tq, C]);
        u = u.add(lin(a, `h.${i}.attn.c_proj`));
        u = u.add(mlp(u, i));
        outs.push(store(k), store(v));
      }
      // each row's last real position, picked by a mask summed over T (exact: the rest add zeros)
      const at = Tensor.arange(Tq).reshape([1, Tq, 1]).cmpeq(last.shrink([[0, Bq]]).reshape([Bq, 1, 1])); // [B, T, 1]
      const plan = Tensor.prepareBatch([head(at.where(u, 0).sum(1)), ...outs], shared);
      this.prepares++;
      return { plan, tokens, last };
    };
  }

  /**
   * Copy each layer's key and value rows [0, rows) from `plan`'s outputs 1 + 2i, 2 + 2i into the
   * decode cache at row `at`, on the device, in one crossing, and wait for it.
   */
  /** Queue the copies of `plan`'s new keys and values into cache rows [at, at + rows) behind its run (default stream). */
  #fillCache(plan: ExecutionPlan, rows: number, at: number): void {
    const dp = this.decodePlan, rowBytes = this.#kvRowBytes, enc = this.#copies;
    for (let i = 0; i < this.config.nLayer; i++) {
      enc.copy(dp.buffer(this.#kCache[i]!.node.id)!, plan.outputBufferAt(1 + 2 * i)!, { dstOffset: at * rowBytes, bytes: rows * rowBytes });
      enc.copy(dp.buffer(this.#vCache[i]!.node.id)!, plan.outputBufferAt(2 + 2 * i)!, { dstOffset: at * rowBytes, bytes: rows * rowBytes });
    }
    enc.submit(dp.device.defaultStream, { wait: false });
  }

  #checkToken(call: string, t: unknown): void {
    if (!Number.isInteger(t) || (t as number) < 0 || (t as number) >= this.config.vocabSize)
      invalid(call, `token ${String(t)} is outside [0, ${this.config.vocabSize})`);
  }

  /**
   * Run the prompt plan over `tokens` (1 to nCtx of them) and fill the decode cache with their
   * keys and values. Returns every position's logits, [tokens.length, vocabSize] row-major.
   */
  prompt(tokens: readonly number[]): Float32Array {
    const T = this.#runPrompt("GPT2.prompt", tokens);
    return this.#logitsOf(this.promptPlan, 0, T);
  }

  /** The prompt plan over `tokens` queued, and the cache copies behind it; returns the prompt's length. */
  #runPrompt(call: string, tokens: readonly number[]): number {
    const { nCtx } = this.config;
    if (!Array.isArray(tokens) || tokens.length < 1 || tokens.length > nCtx) invalid(call, `the prompt must be an array of 1 to ${nCtx} token ids`);
    for (const t of tokens) this.#checkToken(call, t);
    const pp = this.promptPlan;
    const toks = new Int32Array(nCtx);
    toks.set(tokens);
    pp.bufferMutById(this.#tokens.node.id)!.write(toks);
    pp.executeWithVars({ T: tokens.length }, { stream: pp.device.defaultStream, async: true });
    this.#fillCache(pp, tokens.length, 0);
    this.#cached = tokens.length;
    return tokens.length;
  }

  /**
   * Logits of `plan`'s hidden-state rows [from, to) (its output 0, after work queued on the default
   * stream): through the head plan, HEAD_ROWS rows a run, each block copied on the device.
   */
  #logitsOf(plan: ExecutionPlan, from: number, to: number): Float32Array {
    const hp = this.headPlan, V = this.config.vocabSize, rowBytes = this.config.nEmbd * 4, enc = this.#copies;
    const into = this.#headRows.node.id;
    const out = new Float32Array((to - from) * V);
    for (let r = from; r < to; r += HEAD_ROWS) {
      const n = Math.min(HEAD_ROWS, to - r);
      enc.copy(hp.buffer(into)!, plan.outputBufferAt(0)!, { srcOffset: r * rowBytes, bytes: n * rowBytes });
      enc.submit(hp.device.defaultStream, { wait: false });
      hp.executeWithVars({ R: n }, { stream: hp.device.defaultStream, async: true });
      // the block's rows straight into the result (a synchronous read: after the default stream's work)
      hp.outputBufferAt(0)!.read(out.subarray((r - from) * V, (r - from + n) * V));
    }
    return out;
  }

  /**
   * One decode step: `token` at position `P` (1 ≤ P < nCtx), the cache holding positions [0, P)
   * (a prompt of P tokens, or steps up to P - 1). Returns its logits [vocabSize] and caches its
   * key and value at row P.
   */
  step(token: number, P: number): Float32Array {
    const call = "GPT2.step";
    this.#checkToken(call, token);
    if (!Number.isInteger(P) || P < 1 || P >= this.config.nCtx) invalid(call, `position ${String(P)} is outside [1, ${this.config.nCtx})`);
    if (P > this.#cached) invalid(call, `position ${P} needs positions [0, ${P}) cached; the cache holds [0, ${this.#cached})`);
    const dp = this.decodePlan;
    this.#one[0] = token;
    dp.bufferMutById(this.#token.node.id)!.write(this.#one);
    dp.executeWithVars({ P }, { stream: dp.device.defaultStream, async: true });
    this.#fillCache(dp, 1, P);
    const logits = dp.readOutput(0) as Float32Array; // waits for the run and the cache copies
    this.#cached = P + 1;
    return logits;
  }

  /** Every position's logits for `tokens`, [tokens.length, vocabSize] row-major (the prompt plan; fills the cache too). */
  logits(tokens: readonly number[]): Float32Array {
    return this.prompt(tokens);
  }

  /** The prompt's last position's logits [vocabSize] (the head runs for that row only); fills the cache. */
  promptLast(tokens: readonly number[]): Float32Array {
    const T = this.#runPrompt("GPT2.promptLast", tokens);
    return this.#logitsOf(this.promptPlan, T - 1, T);
  }

  /**
   * Generate after `prompt`: `generate(prompt, n)` takes n greedy tokens; `generate(prompt, {
   * maxNewTokens, temperature, topK, topP, seed, stop })` samples (greedy without a temperature)
   * and stops after a stop token (default the config's eosTokenId) or at maxNewTokens. The same
   * seed, prompt and options give the same tokens. prompt + tokens must fit nCtx.
   */
  generate(prompt: readonly number[], opts: number | GenerateOptions): Generation {
    const { o, n, stop, rnd } = generationSetup("GPT2.generate", this.config, prompt, opts, this.config.nCtx);
    const T = prompt.length;
    const t0 = performance.now();
    let logits: Float32Array = this.promptLast(prompt);
    const promptMs = performance.now() - t0;
    const tokens = [pick(logits, o, rnd)];
    const out = [logits];
    const stepMs: number[] = [];
    for (let P = T; tokens.length < n && !stop.has(tokens[tokens.length - 1]!); P++) {
      const s0 = performance.now();
      logits = this.step(tokens[tokens.length - 1]!, P);
      stepMs.push(performance.now() - s0);
      tokens.push(pick(logits, o, rnd));
      out.push(logits);
    }
    return { tokens, logits: out, promptMs, stepMs };
  }

  /**
   * The model's continuous batch (a model loaded with `{ batch: { slots } }`): sequences join
   * (their prompt runs alone, the first token is picked, the keys and values go to a free slot),
   * then every step() decodes one token of each of them in one run of the batched decode plan,
   * and a sequence leaves when it is done or when told to. One batch at a time: the slots are the
   * model's; another batch() while one is open is INVALID_VALUE (dispose() the first).
   */
  batch(): GPT2Batch {
    const call = "GPT2.batch";
    if (!this.batchPlan) invalid(call, "this model has no batched decode plan: load it with { batch: { slots } }");
    if (this.#openBatch && !this.#openBatch.disposed) invalid(call, "a batch of this model is open; dispose() it first");
    const bp = this.batchPlan;
    const buf = (t: Tensor) => bp.buffer(t.node.id)!;
    const pp = this.promptPlan;
    const b = new GPT2Batch({
      config: this.config,
      slots: this.batchSlots,
      context: this.batchContext,
      plan: bp,
      tokens: bp.bufferMutById(this.#bTokens!.node.id)!,
      pos: bp.bufferMutById(this.#bPos!.node.id)!,
      k: this.#bK.map(buf),
      v: this.#bV.map(buf),
      prompt: (tokens: readonly number[]) => {
        const toks = new Int32Array(this.config.nCtx);
        toks.set(tokens);
        pp.bufferMutById(this.#tokens.node.id)!.write(toks);
        pp.executeWithVars({ T: tokens.length }, { stream: pp.device.defaultStream, async: true });
        return { plan: pp, logits: this.#logitsOf(pp, tokens.length - 1, tokens.length) };
      },
      copies: this.#copies,
      kvRowBytes: this.#kvRowBytes,
      prompts: (prompts: readonly (readonly number[])[]) => {
        const pb = (this.#promptBatch ??= this.#makePromptBatch!());
        const S = this.batchSlots, ctx = this.batchContext;
        const toks = new Int32Array(S * ctx), last = new Int32Array(S);
        let T = 1;
        prompts.forEach((p, r) => {
          toks.set(p, r * ctx);
          last[r] = p.length - 1;
          T = Math.max(T, p.length);
        });
        pb.plan.bufferMutById(pb.tokens.node.id)!.write(toks);
        pb.plan.bufferMutById(pb.last.node.id)!.write(last);
        pb.plan.executeWithVars({ B: prompts.length, T });
        return { plan: pb.plan, rowStride: ctx }; // a plan's buffers hold their maximum shape: row r's keys start at r × context positions
      },
    });
    this.#openBatch = b;
    return b;
  }

  /** Settles once every plan of the model runs its optimized kernels (see ExecutionPlan.optimized). */
  async optimized(): Promise<void> {
    await Promise.all([this.promptPlan, this.headPlan, this.decodePlan, this.batchPlan, this.#promptBatch?.plan].map((p) => p?.optimized()));
  }

  dispose(): void {
    this.#openBatch?.dispose();
    this.#copies.reset();
    this.promptPlan.dispose();
    this.headPlan.dispose();
    this.decodePlan.dispose();
    this.batchPlan?.dispose();
    this.#promptBatch?.plan.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }

}
