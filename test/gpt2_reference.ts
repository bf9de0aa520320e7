// The float64 reference for GPT-2 (src/models/gpt2.ts): a plain forward pass over the whole
// sequence at every step, written here independent of the Tensor API (and of onnxruntime), with
// the config fields transformers' GPT2 reads (layer-norm epsilon, activation, untied head,
// attention scaling). test/gpt2.test.ts, test/gpt2_onnx.test.ts and test/gpt2_pretrained.test.ts
// check against it.
import type { GPT2Config } from "../src/models";

export type W = Record<string, Float32Array>;

function layerNorm(x: number[], g: Float32Array, b: Float32Array, eps = 1e-5): number[] {
  const n = x.length;
  const mean = x.reduce((a, v) => a + v, 0) / n;
  const vr = x.reduce((a, v) => a + (v - mean) ** 2, 0) / n;
  const r = 1 / Math.sqrt(vr + eps);
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
/** erf: its Maclaurin series below 3 (float64-exact to ~1e-13), Abramowitz–Stegun 7.1.26 above (1.5e-7). */
function erf(x: number): number {
  const a = Math.abs(x);
  let y: number;
  if (a < 3) {
    let sum = a, term = a;
    for (let n = 1; n < 80; n++) {
      term *= (-a * a) / n;
      sum += term / (2 * n + 1);
    }
    y = (2 / Math.sqrt(Math.PI)) * sum;
  } else {
    const t = 1 / (1 + 0.3275911 * a);
    y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-a * a);
  }
  return Math.sign(x) * y;
}
function activation(cfg: GPT2Config): (x: number) => number {
  switch (cfg.activation ?? "gelu_new") {
    case "gelu": return (x) => 0.5 * x * (1 + erf(x / Math.SQRT2));
    case "relu": return (x) => Math.max(x, 0);
    case "silu": case "swish": return (x) => x / (1 + Math.exp(-x));
    default: return gelu;
  }
}

/** The logits at the last position of `tokens`. */
export function refLogits(w: W, cfg: GPT2Config, tokens: number[]): number[] {
  const { nEmbd: C, nHead: H, nLayer: L, vocabSize: V } = cfg;
  const D = C / H;
  const eps = cfg.layerNormEpsilon ?? 1e-5;
  const act = activation(cfg);
  const T = tokens.length;
  let xs = tokens.map((t, p) => Array.from({ length: C }, (_, c) => w.wte![t * C + c]! + w.wpe![p * C + c]!));
  for (let l = 0; l < L; l++) {
    const g = (n: string) => w[`h.${l}.${n}`]!;
    const qkv = xs.map((x) => linear(layerNorm(x, g("ln_1.weight"), g("ln_1.bias"), eps), g("attn.c_attn.weight"), g("attn.c_attn.bias")));
    const scale = (cfg.scaleAttnWeights === false ? 1 : 1 / Math.sqrt(D)) / (cfg.scaleAttnByInverseLayerIdx ? l + 1 : 1);
    const att = xs.map(() => new Array<number>(C).fill(0));
    for (let h = 0; h < H; h++)
      for (let i = 0; i < T; i++) {
        const s: number[] = [];
        for (let j = 0; j <= i; j++) {
          let d = 0;
          for (let e = 0; e < D; e++) d += qkv[i]![h * D + e]! * qkv[j]![C + h * D + e]!;
          s.push(d * scale);
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
      const hdn = linear(layerNorm(x, g("ln_2.weight"), g("ln_2.bias"), eps), g("mlp.c_fc.weight"), g("mlp.c_fc.bias")).map(act);
      const o = linear(hdn, g("mlp.c_proj.weight"), g("mlp.c_proj.bias"));
      return x.map((v, c) => v + o[c]!);
    });
  }
  const hf = layerNorm(xs[T - 1]!, w["ln_f.weight"]!, w["ln_f.bias"]!, eps);
  const head = cfg.tieWordEmbeddings === false ? w["lm_head"]! : w["wte"]!;
  return Array.from({ length: V }, (_, t) => hf.reduce((a, v, c) => a + v * head[t * C + c]!, 0));
}

export function refGenerate(w: W, cfg: GPT2Config, prompt: number[], n: number): { tokens: number[]; logits: number[][] } {
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
