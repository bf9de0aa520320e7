// Continuous batching over a GPT2's batched decode plan: GPT2Batch (made by GPT2.batch()). The plan
// and its buffers are the model's (gpt2.ts builds them); this file keeps which sequence holds which
// row, feeds each step its rows' tokens and positions, writes the new keys and values into each
// row's cache slot and picks each row's token with its own sampler.
import type { Buffer } from "../buffer";
import type { CommandEncoder } from "../encoder";
import { invalid } from "../errors";
import type { ExecutionPlan } from "../tensor";
import { generationSetup, pick, type GenerateOptions, type SamplingConfig } from "./sampling";

/** One token of a sequence of a GPT2Batch. */
export interface BatchToken {
  /** The sequence (join's id). */
  id: number;
  token: number;
  /** The sequence's last token (maxNewTokens reached, or a stop token): its slot is free again. */
  done: boolean;
  /** The logits the token was chosen from (a view, valid until the next step). */
  logits: Float32Array;
}

/** @internal what GPT2.batch() hands its batch */
export interface BatchParts {
  config: SamplingConfig & { nLayer: number; nEmbd: number };
  slots: number;
  context: number;
  plan: ExecutionPlan;
  tokens: Buffer;
  pos: Buffer;
  k: Buffer[];
  v: Buffer[];
  /** Run the prompt plan over `tokens`: the plan (its keys and values ready) and the last position's logits. */
  prompt(tokens: readonly number[]): { plan: ExecutionPlan; logits: Float32Array };
  copies: CommandEncoder;
  /** Bytes of one position's keys (or values) in a cache: nEmbd × the cache dtype's size. */
  kvRowBytes: number;
  /**
   * Run the batched prompt plan over `prompts` (right-padded to the longest): the plan, its
   * outputs ready: each row's last logits [rows, vocab], then per layer keys and values, row r's
   * positions starting at r × rowStride.
   */
  prompts(prompts: readonly (readonly number[])[]): { plan: ExecutionPlan; rowStride: number };
}

interface BatchSeq {
  id: number;
  row: number;
  /** Positions its cache holds (the next token's position). */
  pos: number;
  last: number;
  count: number;
  n: number;
  o: GenerateOptions;
  stop: Set<number>;
  rnd: () => number;
}

/**
 * Continuous batching over a GPT2's batched decode plan (made by `model.batch()`): up to `slots`
 * sequences, each with its own KV-cache slot and position, decoded together one token per
 * step(). Sequences join and leave between steps. Each sequence gets the tokens generate() gives
 * it alone: the same options and seed, its own sampler, its rows never seeing another's.
 *
 *   const b = model.batch();
 *   const first = b.join(prompt, { maxNewTokens: 20 });   // { id, token, done }
 *   while (b.active) for (const t of b.step()) ...;       // one token of every active sequence
 *   b.leave(id);                                          // stop one early, its slot freed
 *
 * Rows are kept packed: the plan runs over rows [0, active) (a Variable B), and a sequence that
 * leaves gives its row to the last one, whose cache rows are copied over on the device.
 */
export class GPT2Batch {
  readonly slots: number;
  /** Positions each slot's cache holds: a sequence's prompt + maxNewTokens - 1 must fit. */
  readonly context: number;
  readonly #p: BatchParts;
  readonly #rows: BatchSeq[] = [];
  readonly #byId = new Map<number, BatchSeq>();
  readonly #tok: Int32Array;
  readonly #pos: Int32Array;
  #nextId = 1;
  #disposed = false;
  /** Decode steps run and tokens they produced (join's first tokens not counted). */
  steps = 0;
  stepTokens = 0;

  /** @internal made by GPT2.batch() */
  constructor(parts: BatchParts) {
    this.#p = parts;
    this.slots = parts.slots;
    this.context = parts.context;
    this.#tok = new Int32Array(parts.slots);
    this.#pos = new Int32Array(parts.slots);
  }

  get disposed(): boolean {
    return this.#disposed;
  }
  /** Sequences holding a slot. */
  get active(): number {
    return this.#rows.length;
  }
  /** Slots free for join(). */
  get free(): number {
    return this.#disposed ? 0 : this.slots - this.#rows.length;
  }
  /** Whether sequence `id` holds a slot (joined, not done, not left). */
  has(id: number): boolean {
    return this.#byId.has(id);
  }

  #live(call: string): void {
    if (this.#disposed) invalid(call, "the batch is disposed");
  }

  /** Copy rows [0, rows) of every layer's key and value from `src` (outputs 1 + 2i, 2 + 2i, row `from`) into slot `row` at position `at`. */
  #copyKV(src: ExecutionPlan | null, from: number, row: number, at: number, rows: number): void {
    const { config, k, v, copies, context } = this.#p;
    const rb = this.#p.kvRowBytes;
    for (let i = 0; i < config.nLayer; i++) {
      const sk = src ? src.outputBufferAt(1 + 2 * i)! : k[i]!, sv = src ? src.outputBufferAt(2 + 2 * i)! : v[i]!;
      const srcOffset = src ? from * rb : from * context * rb;
      copies.copy(k[i]!, sk, { srcOffset, dstOffset: (row * context + at) * rb, bytes: rows * rb });
      copies.copy(v[i]!, sv, { srcOffset, dstOffset: (row * context + at) * rb, bytes: rows * rb });
    }
  }

  /** Check join()'s arguments without running anything (a server answers bad requests before they queue): INVALID_VALUE as join() would. */
  check(prompt: readonly number[], opts: number | GenerateOptions): void {
    generationSetup("GPT2Batch.join", this.#p.config, prompt, opts, this.context);
  }

  /**
   * Start a sequence: `prompt` runs through the prompt plan alone and its first token is picked
   * (generate()'s options: a token count, or { maxNewTokens, temperature, topK, topP, seed, stop }).
   * Returns that token; unless it is already the last one (done), the sequence holds a slot and
   * each step() gives its next token. No free slot, or bad arguments: INVALID_VALUE.
   */
  join(prompt: readonly number[], opts: number | GenerateOptions): BatchToken {
    const call = "GPT2Batch.join";
    this.#live(call);
    if (this.#rows.length >= this.slots) invalid(call, `all ${this.slots} slots are taken; wait until a sequence is done or leaves`);
    const cfg = this.#p.config;
    const { o, n, stop, rnd } = generationSetup(call, cfg, prompt, opts, this.context);
    const T = prompt.length;
    const { plan: pp, logits } = this.#p.prompt(prompt);
    const token = pick(logits, o, rnd);
    const id = this.#nextId++;
    const done = n === 1 || stop.has(token);
    if (!done) {
      const seq: BatchSeq = { id, row: this.#rows.length, pos: T, last: token, count: 1, n, o, stop, rnd };
      this.#copyKV(pp, 0, seq.row, 0, T);
      this.#p.copies.submit(this.#p.plan.device.defaultStream, { wait: true });
      this.#rows.push(seq);
      this.#byId.set(id, seq);
    }
    return { id, token, done, logits };
  }

  /**
   * Start several sequences at once: their prompts run together in one run of the batched prompt
   * plan (each padded on the right to the longest; causal attention keeps the pads out of every
   * real position), then each first token is picked as join() would pick it. `opts` is one
   * options value for all, or one per prompt. Returns the first tokens in prompt order; each
   * sequence gets exactly the tokens join() gives it. Fewer free slots than prompts, or bad
   * arguments: INVALID_VALUE, before anything runs.
   */
  joinAll(prompts: readonly (readonly number[])[], opts: number | GenerateOptions | readonly (number | GenerateOptions)[]): BatchToken[] {
    const call = "GPT2Batch.joinAll";
    this.#live(call);
    if (!Array.isArray(prompts) || prompts.length === 0) invalid(call, "prompts must be a non-empty array of token id arrays");
    if (Array.isArray(opts) && opts.length !== prompts.length) invalid(call, `opts has ${opts.length} entries for ${prompts.length} prompts`);
    if (prompts.length > this.slots - this.#rows.length) invalid(call, `${prompts.length} prompts need ${prompts.length} free slots; ${this.slots - this.#rows.length} of ${this.slots} are free`);
    const cfg = this.#p.config, V = cfg.vocabSize;
    const setups = prompts.map((p, i) => generationSetup(call, cfg, p, Array.isArray(opts) ? (opts as (number | GenerateOptions)[])[i]! : (opts as number | GenerateOptions), this.context));
    const { plan, rowStride } = this.#p.prompts(prompts);
    const all = plan.readOutput(0) as Float32Array;
    const out: BatchToken[] = [];
    prompts.forEach((prompt, i) => {
      const { o, n, stop, rnd } = setups[i]!;
      const logits = all.subarray(i * V, (i + 1) * V);
      const token = pick(logits, o, rnd);
      const id = this.#nextId++;
      const done = n === 1 || stop.has(token);
      if (!done) {
        const seq: BatchSeq = { id, row: this.#rows.length, pos: prompt.length, last: token, count: 1, n, o, stop, rnd };
        this.#copyKV(plan, i * rowStride, seq.row, 0, prompt.length);
        this.#rows.push(seq);
        this.#byId.set(id, seq);
      }
      out.push({ id, token, done, logits });
    });
    this.#p.copies.submit(this.#p.plan.device.defaultStream, { wait: true });
    return out;
  }

  /**
   * One decode step of every active sequence, in one run of the batched plan: each one's next
   * token, in row order. A sequence whose token is its last (done) leaves at once.
   */
  step(): BatchToken[] {
    const call = "GPT2Batch.step";
    this.#live(call);
    const rows = this.#rows, B = rows.length;
    if (B === 0) return [];
    const { plan, config } = this.#p;
    const V = config.vocabSize;
    let P = 1;
    for (let b = 0; b < B; b++) {
      const s = rows[b]!;
      this.#tok[b] = s.last;
      this.#pos[b] = s.pos;
      if (s.pos > P) P = s.pos;
    }
    this.#p.tokens.write(this.#tok);
    this.#p.pos.write(this.#pos);
    plan.executeWithVars({ B, P });
    const all = plan.readOutput(0) as Float32Array;
    for (let b = 0; b < B; b++) this.#copyKV(plan, b, b, rows[b]!.pos, 1);
    this.#p.copies.submit(plan.device.defaultStream, { wait: true });
    const out: BatchToken[] = [];
    const finished: BatchSeq[] = [];
    for (let b = 0; b < B; b++) {
      const s = rows[b]!;
      const logits = all.subarray(b * V, (b + 1) * V);
      const token = pick(logits, s.o, s.rnd);
      s.pos++;
      s.count++;
      s.last = token;
      const done = s.count >= s.n || s.stop.has(token);
      if (done) finished.push(s);
      out.push({ id: s.id, token, done, logits });
    }
    for (const s of finished) this.#remove(s);
    this.steps++;
    this.stepTokens += B;
    return out;
  }

  /** Sequence `id` leaves now (a client gone): its slot is free for join(). False if it holds none (unknown, done or left). */
  leave(id: number): boolean {
    if (this.#disposed) return false;
    const s = this.#byId.get(id);
    if (!s) return false;
    this.#remove(s);
    return true;
  }

  /** Free `s`'s row: the last row moves into it (its cache rows copied on the device). */
  #remove(s: BatchSeq): void {
    this.#byId.delete(s.id);
    const last = this.#rows.pop()!;
    if (last === s) return;
    this.#copyKV(null, last.row, s.row, 0, last.pos);
    this.#p.copies.submit(this.#p.plan.device.defaultStream, { wait: true });
    last.row = s.row;
    this.#rows[s.row] = last;
  }

  /** Drop every sequence; the model may open another batch. Never throws. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#rows.length = 0;
    this.#byId.clear();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}
