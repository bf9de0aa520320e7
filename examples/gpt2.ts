// A GPT-2-style decoder on the Tensor API, weights from a safetensors file with GPT-2's tensor
// names (wte, wpe, h.{i}.ln_1, h.{i}.attn.c_attn / c_proj in Conv1D layout [in, out],
// h.{i}.ln_2, h.{i}.mlp.c_fc / c_proj, ln_f), pre-norm blocks, GELU (tanh) MLP, a tied head
// (logits = h · wteᵀ) and greedy sampling.
//
// Two plans, each prepared ONCE when the model loads:
//  - the prompt plan runs the whole prompt (its length a Variable T), causal attention, and
//    returns every position's logits and each layer's keys and values [T, heads, headDim];
//  - the decode plan runs one token at position P (a Variable: the tokens already cached). Its KV
//    cache is a pair of plan-owned input buffers per layer, laid out [nCtx, heads, headDim] so a
//    token's keys are one contiguous row: the step reads the cache shrunk to [0, P] plus the new
//    token's own key and value (a softmax over both, so the step never writes what it reads), and
//    returns the logits and the new key and value, which are then copied into the cache at row P.
// Every token runs the same decode plan through executeWithVars({ P }): no recompile per token.
// The cache is filled on the device: after the prompt, and after each step, one command list of
// device-to-device copies (the plan's key/value output buffers into the cache buffers' rows)
// crosses once and is waited for; no key or value goes through the host.
import { CommandEncoder } from "../src/encoder";
import { invalid } from "../src/errors";
import { Tensor, Variable, type ExecutionPlan, type PrepareOptions } from "../src/tensor";
import { seededRandom } from "../src/tensor/reference";

export interface GPT2Config {
  nLayer: number;
  nEmbd: number;
  nHead: number;
  vocabSize: number;
  nCtx: number;
}

const CONFIG_KEYS = ["nLayer", "nEmbd", "nHead", "vocabSize", "nCtx"] as const;

/** The tensor names and shapes a model of `cfg` holds (GPT-2's names, Conv1D layout). */
export function gpt2Shapes(cfg: GPT2Config): Record<string, number[]> {
  const C = cfg.nEmbd;
  const s: Record<string, number[]> = { wte: [cfg.vocabSize, C], wpe: [cfg.nCtx, C] };
  for (let i = 0; i < cfg.nLayer; i++) {
    const p = `h.${i}.`;
    Object.assign(s, {
      [`${p}ln_1.weight`]: [C], [`${p}ln_1.bias`]: [C],
      [`${p}attn.c_attn.weight`]: [C, 3 * C], [`${p}attn.c_attn.bias`]: [3 * C],
      [`${p}attn.c_proj.weight`]: [C, C], [`${p}attn.c_proj.bias`]: [C],
      [`${p}ln_2.weight`]: [C], [`${p}ln_2.bias`]: [C],
      [`${p}mlp.c_fc.weight`]: [C, 4 * C], [`${p}mlp.c_fc.bias`]: [4 * C],
      [`${p}mlp.c_proj.weight`]: [4 * C, C], [`${p}mlp.c_proj.bias`]: [C],
    });
  }
  s["ln_f.weight"] = [C];
  s["ln_f.bias"] = [C];
  return s;
}

function checkConfig(call: string, cfg: GPT2Config): void {
  for (const k of CONFIG_KEYS)
    if (!Number.isInteger(cfg[k]) || cfg[k] < 1) invalid(call, `config ${k} must be a positive integer, got ${String(cfg[k])}`);
  if (cfg.nEmbd % cfg.nHead !== 0) invalid(call, `nEmbd ${cfg.nEmbd} is not a multiple of nHead ${cfg.nHead}`);
  if (cfg.nCtx < 2) invalid(call, `nCtx must be at least 2, got ${cfg.nCtx}`);
}

/**
 * Write a random model of `cfg` (seeded) to `path` as safetensors, the config in its metadata.
 * Returns the weights as plain arrays (for references).
 */
export function writeRandomGPT2(path: string, cfg: GPT2Config, seed = 1): Record<string, Float32Array> {
  checkConfig("writeRandomGPT2", cfg);
  const rnd = seededRandom(seed);
  const out: Record<string, Float32Array> = {};
  const tensors: Record<string, Tensor> = {};
  for (const [name, shape] of Object.entries(gpt2Shapes(cfg))) {
    const n = shape.reduce((a, b) => a * b, 1);
    const a = new Float32Array(n);
    const isNormW = /ln_\w+\.weight$/.test(name), isBias = name.endsWith(".bias");
    for (let i = 0; i < n; i++) {
      const r = rnd() * 2 - 1;
      a[i] = isNormW ? 1 + 0.1 * r : isBias ? 0.05 * r : name === "wte" || name === "wpe" ? 0.5 * r : (r * 1.5) / Math.sqrt(shape[0]!);
    }
    out[name] = a;
    tensors[name] = Tensor.from(a, shape);
  }
  const metadata: Record<string, string> = {};
  for (const k of CONFIG_KEYS) metadata[k] = String(cfg[k]);
  Tensor.toSafetensors(path, tensors, metadata);
  return out;
}

export interface Generation {
  /** The generated token ids (the prompt not included). */
  tokens: number[];
  /** The logits each generated token was chosen from (argmax). */
  logits: Float32Array[];
  /** Milliseconds spent in the prompt plan and, per generated token after the first, in a decode step. */
  promptMs: number;
  stepMs: number[];
}

function argmax(a: Float32Array, from = 0, n = a.length): number {
  let best = 0;
  for (let i = 1; i < n; i++) if (a[from + i]! > a[from + best]!) best = i;
  return best;
}

export class GPT2 {
  readonly config: GPT2Config;
  /** How many plans this model prepared (two: the prompt plan and the decode plan). */
  readonly prepares: number;
  readonly promptPlan: ExecutionPlan;
  readonly decodePlan: ExecutionPlan;
  readonly #tokens: Tensor;
  readonly #token: Tensor;
  readonly #kCache: Tensor[] = [];
  readonly #vCache: Tensor[] = [];
  readonly #copies: CommandEncoder;
  readonly #one = new Int32Array(1);
  /** Positions the decode cache holds (after prompt(): its length; after step(t, P): P + 1). */
  #cached = 0;

  /**
   * Load a model from a safetensors file; the config comes from its metadata unless given. `opts`
   * (device, fusion, ...) go to both plans' prepare.
   */
  static load(path: string, config?: GPT2Config, opts: PrepareOptions = {}): GPT2 {
    const call = "GPT2.load";
    let cfg = config;
    if (!cfg) {
      const meta = Tensor.safetensorsMetadata(path);
      const c: Partial<Record<(typeof CONFIG_KEYS)[number], number>> = {};
      for (const k of CONFIG_KEYS) {
        if (!(k in meta)) invalid(call, `${path}: the metadata has no ${k}; pass a config`);
        c[k] = Number(meta[k]);
      }
      cfg = c as GPT2Config;
    }
    checkConfig(call, cfg);
    const w = Tensor.fromSafetensors(path);
    for (const [name, shape] of Object.entries(gpt2Shapes(cfg))) {
      const t = w[name];
      if (!t) invalid(call, `${path}: no tensor ${JSON.stringify(name)}`);
      if (t.dtype !== "float32" || t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i]))
        invalid(call, `${path}: ${name} is ${t.dtype} [${t.shape.join(", ")}], expected float32 [${shape.join(", ")}]`);
    }
    return new GPT2(cfg, w, opts);
  }

  private constructor(cfg: GPT2Config, w: Record<string, Tensor>, opts: PrepareOptions) {
    this.config = cfg;
    const { nLayer: L, nEmbd: C, nHead: H, nCtx } = cfg;
    const D = C / H;
    // Each LayerNorm's output gets its own buffer: left fused into the matmul that reads it, the
    // normalisation is recomputed for every column block of that matmul (the prompt ran ~25%
    // slower that way on a 2-core CPU; the decode step about the same).
    const ln = (x: Tensor, p: string) => x.layerNorm({ weight: w[`${p}.weight`]!, bias: w[`${p}.bias`]!, eps: 1e-5 }).contiguous();
    const lin = (x: Tensor, p: string) => x.matmul(w[`${p}.weight`]!).add(w[`${p}.bias`]!);
    const mlp = (x: Tensor, i: number) => lin(lin(ln(x, `h.${i}.ln_2`), `h.${i}.mlp.c_fc`).gelu("tanh"), `h.${i}.mlp.c_proj`);
    const head = (x: Tensor) => ln(x, "ln_f").matmul(w.wte!.transpose(0, 1));

    // The prompt: tokens[0, T), causal self-attention.
    const T = new Variable("T", 1, nCtx).bind(1);
    this.#tokens = Tensor.from(new Int32Array(nCtx), [nCtx], { name: "tokens" });
    let x = w.wte!.indexSelect(0, this.#tokens.shrink([[0, T]])).add(w.wpe!.shrink([[0, T], null])); // [T, C]
    const promptOuts: Tensor[] = [];
    for (let i = 0; i < L; i++) {
      const qkv = lin(ln(x, `h.${i}.ln_1`), `h.${i}.attn.c_attn`); // [T, 3C]
      const part = (j: number) => qkv.shrink([null, [j * C, (j + 1) * C]]).reshape([T, H, D]);
      const [q, k, v] = [part(0), part(1), part(2)];
      const heads = (t: Tensor) => t.permute([1, 0, 2]); // [H, T, D]
      const a = heads(q).scaledDotProductAttention(heads(k), heads(v), { isCausal: true }).permute([1, 0, 2]).reshape([T, C]);
      x = x.add(lin(a, `h.${i}.attn.c_proj`));
      x = x.add(mlp(x, i));
      promptOuts.push(k, v);
    }
    this.promptPlan = Tensor.prepareBatch([head(x), ...promptOuts], opts);

    // One decode step: the token at position P, the cache holding positions [0, P).
    const P = new Variable("P", 1, nCtx - 1).bind(1);
    this.#token = Tensor.from(new Int32Array(1), [1], { name: "token" });
    const pos = Tensor.fromDims([P]).reshape([1]);
    let y = w.wte!.indexSelect(0, this.#token).add(w.wpe!.indexSelect(0, pos)); // [1, C]
    const stepOuts: Tensor[] = [];
    const scale = 1 / Math.sqrt(D);
    for (let i = 0; i < L; i++) {
      const kc = Tensor.from(new Float32Array(nCtx * C), [nCtx, H, D], { name: `cache.${i}.k` });
      const vc = Tensor.from(new Float32Array(nCtx * C), [nCtx, H, D], { name: `cache.${i}.v` });
      this.#kCache.push(kc);
      this.#vCache.push(vc);
      const qkv = lin(ln(y, `h.${i}.ln_1`), `h.${i}.attn.c_attn`); // [1, 3C]
      const part = (j: number) => qkv.shrink([null, [j * C, (j + 1) * C]]);
      const [q, kn, vn] = [part(0).reshape([H, 1, D]), part(1), part(2)];
      const K = kc.shrink([[0, P], null, null]).permute([1, 2, 0]); // [H, D, P]
      const V = vc.shrink([[0, P], null, null]).permute([1, 0, 2]); // [H, P, D]
      const sc = q.matmul(K).mul(scale); // [H, 1, P]: the cached positions
      const sn = q.mul(kn.reshape([H, 1, D])).sum(-1, true).mul(scale); // [H, 1, 1]: the token itself
      const m = sc.max(-1, true).maximum(sn);
      const ec = sc.sub(m).exp(), en = sn.sub(m).exp();
      const o = ec.matmul(V).add(en.mul(vn.reshape([H, 1, D]))).div(ec.sum(-1, true).add(en)); // [H, 1, D]
      y = y.add(lin(o.reshape([1, C]), `h.${i}.attn.c_proj`));
      y = y.add(mlp(y, i));
      stepOuts.push(kn, vn);
    }
    this.decodePlan = Tensor.prepareBatch([head(y), ...stepOuts], opts);
    this.prepares = 2;
    this.#copies = new CommandEncoder(this.decodePlan.device);
  }

  /**
   * Copy each layer's key and value rows [0, rows) from `plan`'s outputs 1 + 2i, 2 + 2i into the
   * decode cache at row `at`, on the device, in one crossing, and wait for it.
   */
  #fillCache(plan: ExecutionPlan, rows: number, at: number): void {
    const dp = this.decodePlan, rowBytes = this.config.nEmbd * 4, enc = this.#copies;
    for (let i = 0; i < this.config.nLayer; i++) {
      enc.copy(dp.buffer(this.#kCache[i]!.node.id)!, plan.outputBufferAt(1 + 2 * i)!, { dstOffset: at * rowBytes, bytes: rows * rowBytes });
      enc.copy(dp.buffer(this.#vCache[i]!.node.id)!, plan.outputBufferAt(2 + 2 * i)!, { dstOffset: at * rowBytes, bytes: rows * rowBytes });
    }
    enc.submit(dp.device.defaultStream, { wait: true });
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
    const call = "GPT2.prompt";
    const { nCtx } = this.config;
    if (!Array.isArray(tokens) || tokens.length < 1 || tokens.length > nCtx) invalid(call, `the prompt must be an array of 1 to ${nCtx} token ids`);
    for (const t of tokens) this.#checkToken(call, t);
    const pp = this.promptPlan;
    const toks = new Int32Array(nCtx);
    toks.set(tokens);
    pp.bufferMutById(this.#tokens.node.id)!.write(toks);
    pp.executeWithVars({ T: tokens.length });
    const all = pp.readOutput(0) as Float32Array;
    this.#fillCache(pp, tokens.length, 0);
    this.#cached = tokens.length;
    return all;
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
    dp.executeWithVars({ P });
    const logits = dp.readOutput(0) as Float32Array;
    this.#fillCache(dp, 1, P);
    this.#cached = P + 1;
    return logits;
  }

  /** Greedy generation of `n` tokens after `prompt` (prompt + n must fit nCtx). */
  generate(prompt: readonly number[], n: number): Generation {
    const call = "GPT2.generate";
    const { nCtx, vocabSize: V } = this.config;
    if (!Array.isArray(prompt) || prompt.length < 1) invalid(call, "prompt must be a non-empty array of token ids");
    for (const t of prompt) if (!Number.isInteger(t) || t < 0 || t >= V) invalid(call, `token ${String(t)} is outside [0, ${V})`);
    if (!Number.isInteger(n) || n < 1) invalid(call, `n must be a positive integer, got ${String(n)}`);
    if (prompt.length + n - 1 > nCtx) invalid(call, `prompt ${prompt.length} + ${n} tokens exceed the context ${nCtx}`);

    const T = prompt.length;
    const t0 = performance.now();
    let logits: Float32Array = this.prompt(prompt).slice((T - 1) * V, T * V);
    const promptMs = performance.now() - t0;
    const tokens = [argmax(logits)];
    const out = [logits];
    const stepMs: number[] = [];
    for (let P = T; tokens.length < n; P++) {
      const s0 = performance.now();
      logits = this.step(tokens[tokens.length - 1]!, P);
      stepMs.push(performance.now() - s0);
      tokens.push(argmax(logits));
      out.push(logits);
    }
    return { tokens, logits: out, promptMs, stepMs };
  }

  dispose(): void {
    this.#copies.reset();
    this.promptPlan.dispose();
    this.decodePlan.dispose();
  }
}
