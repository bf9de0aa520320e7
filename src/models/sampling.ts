// Choosing tokens from logits, shared by GPT2.generate and GPT2Batch: generate()'s options checked
// once (generationSetup), a seeded sampler per sequence, greedy / temperature / top-k / top-p.
import { describeGot, invalid, options, type OptionKeys } from "../errors";

// The keys each options argument may have (errors.ts `options` refuses any other).
const GENERATE_KEYS: OptionKeys<GenerateOptions> = { maxNewTokens: true, temperature: true, topK: true, topP: true, seed: true, stop: true };

/** What sampling needs of a model's config. */
export interface SamplingConfig {
  vocabSize: number;
  eosTokenId?: number | undefined;
}

export interface GenerateOptions {
  /** Tokens to generate at most. */
  maxNewTokens: number;
  /** Sampling temperature; 0 or absent: greedy (argmax). */
  temperature?: number | undefined;
  /** Sample among the k most likely tokens only. */
  topK?: number | undefined;
  /** Sample among the most likely tokens whose probabilities add up to p (nucleus sampling). */
  topP?: number | undefined;
  /** Seed of the sampler (default 0): the same seed, prompt and options give the same tokens. */
  seed?: number | undefined;
  /** Token ids that end the generation (included in it); default the config's eosTokenId. [] for none. */
  stop?: number | readonly number[] | undefined;
}


function argmax(a: Float32Array, from = 0, n = a.length): number {
  let best = 0;
  for (let i = 1; i < n; i++) if (a[from + i]! > a[from + best]!) best = i;
  return best;
}

/** A sampler: mulberry32 from `seed`, uniform in [0, 1). */
function sampler(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The `k` most likely ids of `logits` in `order` (what sorting all of them and keeping the first k
 * gives, without sorting the vocabulary): one pass keeping the best k in order.
 */
function topIds(logits: Float32Array, k: number, order: (a: number, b: number) => number): number[] {
  const top: number[] = [];
  for (let i = 0; i < logits.length; i++) {
    if (top.length === k && order(i, top[k - 1]!) >= 0) continue; // not better than the k-th
    let at = top.length === k ? k - 1 : top.length;
    while (at > 0 && order(i, top[at - 1]!) < 0) {
      if (at < k) top[at] = top[at - 1]!;
      at--;
    }
    top[at] = i;
  }
  return top;
}

/** Pick a token from `logits` as `o` says (greedy without a temperature). */
export function pick(logits: Float32Array, o: GenerateOptions, rnd: () => number): number {
  const temp = o.temperature ?? 0;
  if (!(temp > 0)) return argmax(logits);
  const V = logits.length;
  const order = (a: number, b: number) => logits[b]! - logits[a]! || a - b; // most likely first, ties by id
  let idx: number[];
  if (o.topK !== undefined && o.topK < V) idx = topIds(logits, Math.max(1, o.topK), order);
  else idx = Array.from({ length: V }, (_, i) => i).sort(order);
  const m = logits[idx[0]!]!;
  let p = idx.map((i) => Math.exp((logits[i]! - m) / temp));
  let z = p.reduce((a, b) => a + b, 0);
  if (o.topP !== undefined && o.topP < 1) {
    let acc = 0, keep = 0;
    while (keep < p.length && acc < o.topP * z) acc += p[keep++]!;
    idx = idx.slice(0, Math.max(1, keep));
    p = p.slice(0, idx.length);
    z = p.reduce((a, b) => a + b, 0);
  }
  let r = rnd() * z;
  for (let i = 0; i < p.length; i++) {
    r -= p[i]!;
    if (r < 0) return idx[i]!;
  }
  return idx[idx.length - 1]!;
}

/** A generation's checked options, its stop tokens and its sampler (generate() and GPT2Batch.join share them). */
export function generationSetup(call: string, cfg: SamplingConfig, prompt: readonly number[], opts: number | GenerateOptions, ctx: number): { o: GenerateOptions; n: number; stop: Set<number>; rnd: () => number } {
  const V = cfg.vocabSize;
  if (opts === null || (typeof opts !== "object" && typeof opts !== "number")) invalid(call, `options must be a token count or an object, got ${describeGot(opts)}`);
  const o: GenerateOptions = typeof opts === "number" ? { maxNewTokens: opts, stop: [] } : options(call, opts, GENERATE_KEYS);
  if (!Array.isArray(prompt) || prompt.length < 1) invalid(call, "prompt must be a non-empty array of token ids");
  for (const t of prompt) if (!Number.isInteger(t) || t < 0 || t >= V) invalid(call, `token ${String(t)} is outside [0, ${V})`);
  const n = o.maxNewTokens;
  if (!Number.isInteger(n) || n < 1) invalid(call, `maxNewTokens must be a positive integer, got ${describeGot(n)}`);
  if (prompt.length + n - 1 > ctx) invalid(call, `prompt ${prompt.length} + ${n} tokens exceed the context ${ctx}`);
  if (o.temperature !== undefined && !(typeof o.temperature === "number" && o.temperature >= 0 && Number.isFinite(o.temperature)))
    invalid(call, `temperature must be a number ≥ 0, got ${describeGot(o.temperature)}`);
  if (o.topK !== undefined && !(Number.isInteger(o.topK) && o.topK >= 1)) invalid(call, `topK must be a positive integer, got ${describeGot(o.topK)}`);
  if (o.topP !== undefined && !(typeof o.topP === "number" && o.topP > 0 && o.topP <= 1)) invalid(call, `topP must be in (0, 1], got ${describeGot(o.topP)}`);
  if (o.seed !== undefined && !Number.isSafeInteger(o.seed)) invalid(call, `seed must be an integer, got ${describeGot(o.seed)}`);
  const stopList = o.stop === undefined ? (cfg.eosTokenId === undefined ? [] : [cfg.eosTokenId]) : typeof o.stop === "number" ? [o.stop] : o.stop;
  if (!Array.isArray(stopList) || stopList.some((t) => !Number.isInteger(t))) invalid(call, `stop must be a token id or an array of them, got ${describeGot(o.stop)}`);
  return { o, n, stop: new Set(stopList), rnd: sampler(o.seed ?? 0) };
}
