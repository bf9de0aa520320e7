// Greedy generation with onnxruntime-node over the model bench/onnx/export_gpt2.py writes: the
// same loop as GPT2.generate in examples/gpt2.ts (prompt once, then one decode step per token,
// the present keys and values fed back as the next step's past), timed the same way (inputs
// written and logits read back inside the timings).
import type { GPT2Config, Generation } from "../../src/models";

type Ort = typeof import("onnxruntime-node");
type Session = import("onnxruntime-node").InferenceSession;
type OrtTensor = import("onnxruntime-node").Tensor;

/** The committed fixture's config and seed (test/fixtures/gpt2_tiny/). */
export const TINY_CONFIG: GPT2Config = { nLayer: 2, nEmbd: 32, nHead: 2, vocabSize: 64, nCtx: 16 };
export const TINY_SEED = 7;

function argmax(a: Float32Array, from: number, n: number): number {
  let best = 0;
  for (let i = 1; i < n; i++) if (a[from + i]! > a[from + best]!) best = i;
  return best;
}

export class OrtGPT2 {
  private constructor(
    readonly ort: Ort,
    readonly session: Session,
    readonly config: GPT2Config,
    readonly threads: number,
  ) {}

  /** A CPU session over `model` (a path or the bytes), `threads` intra-op threads, one inter-op. */
  static async create(model: string | Uint8Array, config: GPT2Config, threads: number): Promise<OrtGPT2> {
    const ort: Ort = await import("onnxruntime-node");
    const opts = { executionProviders: ["cpu"], intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: "all" as const };
    const session = typeof model === "string" ? await ort.InferenceSession.create(model, opts) : await ort.InferenceSession.create(model, opts);
    return new OrtGPT2(ort, session, config, threads);
  }

  #empty(): Record<string, OrtTensor> {
    const { nLayer: L, nEmbd: C, nHead: H } = this.config;
    const feeds: Record<string, OrtTensor> = {};
    for (let i = 0; i < L; i++)
      for (const n of ["key", "value"]) feeds[`past_${n}.${i}`] = new this.ort.Tensor("float32", new Float32Array(0), [1, H, 0, C / H]);
    return feeds;
  }

  /** One run: `ids` new tokens after `past` (the previous run's outputs, or none). */
  async run(ids: readonly number[], past?: Record<string, OrtTensor>): Promise<Record<string, OrtTensor>> {
    const feeds = past ? { ...past } : this.#empty();
    feeds.input_ids = new this.ort.Tensor("int64", BigInt64Array.from(ids, (t) => BigInt(t)), [1, ids.length]);
    return this.session.run(feeds);
  }

  /** The next run's past from a run's outputs (present_* renamed past_*; no copy). */
  pastOf(out: Record<string, OrtTensor>): Record<string, OrtTensor> {
    const past: Record<string, OrtTensor> = {};
    for (let i = 0; i < this.config.nLayer; i++) {
      past[`past_key.${i}`] = out[`present_key.${i}`]!;
      past[`past_value.${i}`] = out[`present_value.${i}`]!;
    }
    return past;
  }

  /** Greedy generation of `n` tokens after `prompt`, as GPT2.generate. */
  async generate(prompt: readonly number[], n: number): Promise<Generation> {
    const V = this.config.vocabSize;
    const t0 = performance.now();
    let out = await this.run(prompt);
    const all = out.logits!.data as Float32Array;
    let logits = all.slice((prompt.length - 1) * V, prompt.length * V);
    const promptMs = performance.now() - t0;
    const tokens = [argmax(logits, 0, V)];
    const lg = [logits];
    const stepMs: number[] = [];
    while (tokens.length < n) {
      const s0 = performance.now();
      out = await this.run([tokens[tokens.length - 1]!], this.pastOf(out));
      logits = (out.logits!.data as Float32Array).slice(0, V);
      stepMs.push(performance.now() - s0);
      tokens.push(argmax(logits, 0, V));
      lg.push(logits);
    }
    return { tokens, logits: lg, promptMs, stepMs };
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }
}
