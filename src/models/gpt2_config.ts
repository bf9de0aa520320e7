// GPT-2's configuration and checkpoint files: transformers' config.json read field by field
// (configFromTransformers), the tensors a model of a config holds and their names (gpt2Shapes,
// gpt2Name: transformers' and the hub's older ones), the config checked, a checkpoint's files found
// (a save_pretrained folder, its shards, or one .safetensors file), and seeded random weights for
// tests and benches. gpt2.ts builds the model from these.
import { existsSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { describeGot, invalid } from "../errors";
import { mustExist, readJson } from "./files";
import { Tensor } from "../tensor";
import { seededRandom } from "../tensor/reference";

export interface GPT2Config {
  nLayer: number;
  nEmbd: number;
  nHead: number;
  vocabSize: number;
  /** The context: the positions the model has (transformers' n_positions). */
  nCtx: number;
  /** The MLP's inner width (transformers' n_inner; default 4 × nEmbd). */
  nInner?: number;
  /** The layer norms' epsilon (default 1e-5). */
  layerNormEpsilon?: number;
  /** The MLP's activation (transformers' activation_function; default "gelu_new", the tanh GELU). */
  activation?: GPT2Activation;
  /** Whether the head is the token embedding (default true); if not, the weights hold lm_head [vocab, embd]. */
  tieWordEmbeddings?: boolean;
  /** Attention scores divided by √headDim (default true). */
  scaleAttnWeights?: boolean;
  /** Layer i's attention scores also divided by i + 1 (default false). */
  scaleAttnByInverseLayerIdx?: boolean;
  /** The end-of-text token: generate() stops after it unless told otherwise. */
  eosTokenId?: number;
}

/** transformers' activation_function values this model computes. */
export type GPT2Activation = "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" | "gelu" | "relu" | "silu" | "swish";
const ACTIVATIONS: readonly GPT2Activation[] = ["gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu", "relu", "silu", "swish"];

export const CONFIG_KEYS = ["nLayer", "nEmbd", "nHead", "vocabSize", "nCtx"] as const;

/**
 * A GPT2Config from transformers' config.json: the fields the forward pass reads, each checked;
 * a field that would make it another model is refused (INVALID_VALUE naming it). A config.json
 * holding this package's own GPT2Config (nLayer, nEmbd, ...) is taken as it is, then checked.
 */
export function configFromTransformers(json: unknown, where = "config.json"): GPT2Config {
  const call = "GPT2.fromPretrained";
  if (json === null || typeof json !== "object" || Array.isArray(json)) invalid(call, `${where}: not a JSON object`);
  const j = json as Record<string, unknown>;
  if (j["nLayer"] !== undefined && j["n_layer"] === undefined) return j as unknown as GPT2Config;
  if (j["model_type"] !== undefined && j["model_type"] !== "gpt2") invalid(call, `${where}: model_type ${JSON.stringify(j["model_type"])} is not gpt2`);
  if (j["add_cross_attention"] === true) invalid(call, `${where}: add_cross_attention is not supported (a decoder with cross-attention)`);
  const int = (k: string, alt?: string): number => {
    const v = j[k] ?? (alt ? j[alt] : undefined);
    if (typeof v !== "number" || !Number.isInteger(v) || v < 1) invalid(call, `${where}: ${k} must be a positive integer, got ${describeGot(v)}`);
    return v;
  };
  const bool = (k: string, dflt: boolean): boolean => {
    const v = j[k];
    if (v === undefined || v === null) return dflt;
    if (typeof v !== "boolean") invalid(call, `${where}: ${k} must be true or false, got ${describeGot(v)}`);
    return v;
  };
  const act = j["activation_function"] ?? "gelu_new";
  if (!ACTIVATIONS.includes(act as GPT2Activation)) invalid(call, `${where}: activation_function ${JSON.stringify(act)} is not supported (${ACTIVATIONS.join(", ")})`);
  const eps = j["layer_norm_epsilon"] ?? 1e-5;
  if (typeof eps !== "number" || !(eps > 0)) invalid(call, `${where}: layer_norm_epsilon must be a positive number, got ${describeGot(eps)}`);
  const cfg: GPT2Config = {
    nLayer: int("n_layer"),
    nEmbd: int("n_embd"),
    nHead: int("n_head"),
    vocabSize: int("vocab_size"),
    nCtx: int("n_positions", "n_ctx"),
    layerNormEpsilon: eps,
    activation: act as GPT2Activation,
    tieWordEmbeddings: bool("tie_word_embeddings", true),
    scaleAttnWeights: bool("scale_attn_weights", true),
    scaleAttnByInverseLayerIdx: bool("scale_attn_by_inverse_layer_idx", false),
  };
  if (j["n_inner"] !== undefined && j["n_inner"] !== null) cfg.nInner = int("n_inner");
  const eos = j["eos_token_id"];
  if (typeof eos === "number" && Number.isInteger(eos) && eos >= 0 && eos < cfg.vocabSize) cfg.eosTokenId = eos;
  return cfg;
}

/** The tensor names and shapes a model of `cfg` holds (GPT-2's names, Conv1D layout). */
export function gpt2Shapes(cfg: GPT2Config): Record<string, number[]> {
  const C = cfg.nEmbd;
  const F = cfg.nInner ?? 4 * C;
  const s: Record<string, number[]> = { wte: [cfg.vocabSize, C], wpe: [cfg.nCtx, C] };
  for (let i = 0; i < cfg.nLayer; i++) {
    const p = `h.${i}.`;
    Object.assign(s, {
      [`${p}ln_1.weight`]: [C], [`${p}ln_1.bias`]: [C],
      [`${p}attn.c_attn.weight`]: [C, 3 * C], [`${p}attn.c_attn.bias`]: [3 * C],
      [`${p}attn.c_proj.weight`]: [C, C], [`${p}attn.c_proj.bias`]: [C],
      [`${p}ln_2.weight`]: [C], [`${p}ln_2.bias`]: [C],
      [`${p}mlp.c_fc.weight`]: [C, F], [`${p}mlp.c_fc.bias`]: [F],
      [`${p}mlp.c_proj.weight`]: [F, C], [`${p}mlp.c_proj.bias`]: [C],
    });
  }
  s["ln_f.weight"] = [C];
  s["ln_f.bias"] = [C];
  if (cfg.tieWordEmbeddings === false) s["lm_head"] = [cfg.vocabSize, C];
  return s;
}

/**
 * The model's name for a checkpoint's tensor, or null for one it does not use: transformers'
 * "transformer." prefix and the ".weight" of the embeddings and the head are dropped, and the
 * causal-mask buffers older checkpoints carry (attn.bias, attn.masked_bias) are skipped.
 */
export function gpt2Name(name: string): string | null {
  let n = name.startsWith("transformer.") ? name.slice("transformer.".length) : name;
  if (/^h\.\d+\.attn\.(bias|masked_bias)$/.test(n)) return null;
  if (n === "wte.weight" || n === "wpe.weight" || n === "lm_head.weight") n = n.slice(0, -".weight".length);
  return n;
}

export function checkConfig(call: string, cfg: GPT2Config): void {
  if (cfg === null || typeof cfg !== "object") invalid(call, `config must be an object, got ${describeGot(cfg)}`);
  for (const k of CONFIG_KEYS)
    if (!Number.isInteger(cfg[k]) || cfg[k] < 1) invalid(call, `config ${k} must be a positive integer, got ${describeGot(cfg[k])}`);
  if (cfg.nEmbd % cfg.nHead !== 0) invalid(call, `nEmbd ${cfg.nEmbd} is not a multiple of nHead ${cfg.nHead}`);
  if (cfg.nCtx < 2) invalid(call, `nCtx must be at least 2, got ${cfg.nCtx}`);
  if (cfg.nInner !== undefined && (!Number.isInteger(cfg.nInner) || cfg.nInner < 1)) invalid(call, `nInner must be a positive integer, got ${describeGot(cfg.nInner)}`);
  if (cfg.layerNormEpsilon !== undefined && !(typeof cfg.layerNormEpsilon === "number" && cfg.layerNormEpsilon > 0))
    invalid(call, `layerNormEpsilon must be a positive number, got ${describeGot(cfg.layerNormEpsilon)}`);
  if (cfg.activation !== undefined && !ACTIVATIONS.includes(cfg.activation)) invalid(call, `activation ${JSON.stringify(cfg.activation)} is not one of ${ACTIVATIONS.join(", ")}`);
  if (cfg.eosTokenId !== undefined && (!Number.isInteger(cfg.eosTokenId) || cfg.eosTokenId < 0 || cfg.eosTokenId >= cfg.vocabSize))
    invalid(call, `eosTokenId ${String(cfg.eosTokenId)} is outside [0, ${cfg.vocabSize})`);
}

/**
 * Random weights for a model of `cfg` (seeded; non-unit norms and non-zero biases), as plain
 * arrays by the model's names.
 */
export function randomGPT2Weights(cfg: GPT2Config, seed = 1): Record<string, Float32Array> {
  checkConfig("randomGPT2Weights", cfg);
  const rnd = seededRandom(seed);
  const out: Record<string, Float32Array> = {};
  for (const [name, shape] of Object.entries(gpt2Shapes(cfg))) {
    const n = shape.reduce((a, b) => a * b, 1);
    const a = new Float32Array(n);
    const isNormW = /ln_\w+\.weight$/.test(name), isBias = name.endsWith(".bias");
    for (let i = 0; i < n; i++) {
      const r = rnd() * 2 - 1;
      a[i] = isNormW ? 1 + 0.1 * r : isBias ? 0.05 * r : name === "wte" || name === "wpe" || name === "lm_head" ? 0.5 * r : (r * 1.5) / Math.sqrt(shape[0]!);
    }
    out[name] = a;
  }
  return out;
}

/**
 * Write a random model of `cfg` (seeded) to `path` as safetensors, the config in its metadata.
 * Returns the weights as plain arrays (for references).
 */
export function writeRandomGPT2(path: string, cfg: GPT2Config, seed = 1): Record<string, Float32Array> {
  const out = randomGPT2Weights(cfg, seed);
  const tensors: Record<string, Tensor> = {};
  const shapes = gpt2Shapes(cfg);
  for (const [name, a] of Object.entries(out)) tensors[name] = Tensor.from(a, shapes[name]!);
  const metadata: Record<string, string> = {};
  for (const k of CONFIG_KEYS) metadata[k] = String(cfg[k]);
  Tensor.toSafetensors(path, tensors, metadata);
  return out;
}

/** A checkpoint's files: the config (or null) and the safetensors files holding its weights. */
export function checkpointFiles(call: string, path: string): { config: unknown; files: string[] } {
  if (typeof path !== "string" || !path) invalid(call, `path must be a folder or a .safetensors file, got ${describeGot(path)}`);
  mustExist(call, path);
  if (statSync(path).isDirectory()) {
    const cfg = join(path, "config.json");
    const config = existsSync(cfg) ? readJson(call, cfg) : null;
    const index = join(path, "model.safetensors.index.json");
    if (existsSync(index)) {
      const j = readJson(call, index) as { weight_map?: Record<string, unknown> };
      if (!j || typeof j !== "object" || !j.weight_map || typeof j.weight_map !== "object") invalid(call, `${index}: no weight_map`);
      const files = [...new Set(Object.values(j.weight_map))];
      if (files.some((f) => typeof f !== "string" || f.includes("/") || f.includes("\\"))) invalid(call, `${index}: weight_map must name files of the folder`);
      return { config, files: (files as string[]).map((f) => join(path, f)) };
    }
    const single = join(path, "model.safetensors");
    if (!existsSync(single)) invalid(call, `${path}: no model.safetensors or model.safetensors.index.json (PyTorch .bin checkpoints are not read: save with safe_serialization)`);
    return { config, files: [single] };
  }
  const beside = join(dirname(path), "config.json");
  return { config: existsSync(beside) ? readJson(call, beside) : null, files: [path] };
}
