// Dynamic batching: concurrent requests of a few rows each merged into one run of a plan prepared
// over a batch Variable, each request given back exactly its own rows. A request joins the batch
// being gathered; the batch is run (plan.run, with the variable set to its row count) when it
// holds maxBatch rows, when the plan has no batch in flight (at the end of the current turn, so
// requests of one turn go together), or when its oldest request has waited maxDelayMs. While a
// batch computes, the next one gathers: under load runs grow toward maxBatch by themselves.
import { describeGot, invalid, nearest } from "../errors";
import { hostArrayName, hostArray as dtypeArray, isHostArrayOf, type DType, type HostArray } from "./dtype";
import type { RunInput, RunOutput } from "./options";

export interface BatchOptions {
  /** The name of the plan's batch Variable: the leading dimension of every batched input and of every output. */
  variable: string;
  /** Rows a run takes at most (default and upper bound: the variable's maximum). */
  maxBatch?: number;
  /** How long a request may wait for others before its batch runs (default 1 ms). */
  maxDelayMs?: number;
  /** The batched inputs (default: the one input whose leading dimension is the variable's maximum). */
  inputs?: readonly string[];
}

/** What a batcher needs of its plan (ExecutionPlan.batched fills it in). */
export interface BatchTarget {
  variable: string;
  min: number;
  max: number;
  inputs: readonly { name: string; dtype: DType; shape: readonly number[] }[];
  /** Each output's leading dimension is the variable: `rowElements` elements a row. */
  outputs: readonly { name: string; rowElements: number }[];
  run(feeds: Record<string, RunInput | number>): Promise<Record<string, RunOutput>>;
}

interface Request {
  rows: number;
  data: HostArray[];
  resolve(v: Record<string, RunOutput>): void;
  reject(e: unknown): void;
}

export class RunBatcher {
  readonly #t: BatchTarget;
  readonly #batched: { name: string; dtype: DType; rowElements: number }[];
  readonly #maxBatch: number;
  readonly #maxDelayMs: number;
  #gathering: Request[] = [];
  #rows = 0;
  #inFlight = 0;
  #scheduled = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #stats = { requests: 0, batches: 0, rows: 0 };

  constructor(target: BatchTarget, opts: BatchOptions) {
    const call = "ExecutionPlan.batched";
    this.#t = target;
    const maxBatch = opts.maxBatch ?? target.max;
    if (!Number.isSafeInteger(maxBatch) || maxBatch < 1 || maxBatch > target.max || maxBatch < target.min)
      invalid(call, `maxBatch must be an integer in [${Math.max(1, target.min)}, ${target.max}] (the bounds of ${target.variable}), got ${describeGot(opts.maxBatch)}`);
    const delay = opts.maxDelayMs ?? 1;
    if (typeof delay !== "number" || !Number.isFinite(delay) || delay < 0) invalid(call, `maxDelayMs must be a number ≥ 0, got ${describeGot(opts.maxDelayMs)}`);
    this.#maxBatch = maxBatch;
    this.#maxDelayMs = delay;
    let names: readonly string[];
    if (opts.inputs !== undefined) {
      if (!Array.isArray(opts.inputs) || opts.inputs.some((n) => typeof n !== "string")) invalid(call, `inputs must be an array of input names, got ${describeGot(opts.inputs)}`);
      names = opts.inputs;
    } else {
      names = target.inputs.filter((i) => i.shape[0] === target.max).map((i) => i.name);
      if (names.length === 0) invalid(call, `no input has ${target.variable}'s maximum (${target.max}) as its leading dimension; name the batched inputs`);
      if (names.length > 1) invalid(call, `inputs ${names.join(", ")} all lead with ${target.max}: name the batched ones ({ inputs: [...] })`);
    }
    this.#batched = names.map((n) => {
      const at = target.inputs.filter((i) => i.name === n);
      if (at.length !== 1) invalid(call, at.length ? `${at.length} inputs are named ${JSON.stringify(n)}` : `the plan has no input named ${JSON.stringify(n)}`);
      const i = at[0]!;
      if (i.shape[0] !== target.max) invalid(call, `input ${JSON.stringify(n)} has leading dimension ${i.shape[0]}, not ${target.variable}'s maximum ${target.max}`);
      return { name: n, dtype: i.dtype, rowElements: i.shape.slice(1).reduce((p, q) => p * q, 1) };
    });
  }

  /** Requests served, runs made and rows they held (rows / batches: the mean batch). */
  get stats(): { readonly requests: number; readonly batches: number; readonly rows: number } {
    return { ...this.#stats };
  }

  /**
   * Run the plan on this request's rows, batched with others: `feeds` gives each batched input
   * (by name) as k whole rows of its dtype's typed array, the same k ≥ 1 for all, k ≤ maxBatch;
   * resolves with each output's k rows (a fresh array). Inputs the batcher does not batch keep the
   * plan's data (setWeights changes them) and cannot be given here. Bad feeds reject with
   * GpuError INVALID_VALUE, alone: the batch goes on without them.
   */
  run(feeds: Readonly<Record<string, RunInput>>): Promise<Record<string, RunOutput>> {
    const call = "RunBatcher.run";
    let req: Omit<Request, "resolve" | "reject">;
    try {
      if (feeds === null || typeof feeds !== "object" || Array.isArray(feeds)) invalid(call, `feeds must be an object of inputs by name, got ${describeGot(feeds)}`);
      const f = feeds as Record<string, RunInput>;
      for (const k of Object.keys(f))
        if (!this.#batched.some((b) => b.name === k)) {
          const names = this.#batched.map((b) => b.name), near = nearest(k, names);
          invalid(call, `${JSON.stringify(k)} is not a batched input (${near === undefined ? "" : `did you mean ${near}? `}batched: ${names.join(", ")})`);
        }
      let rows = -1;
      const data = this.#batched.map((b) => {
        const d = f[b.name];
        if (d === undefined) invalid(call, `input ${JSON.stringify(b.name)} is missing`);
        if (!isHostArrayOf(b.dtype, d)) invalid(call, `input ${JSON.stringify(b.name)} must be a ${hostArrayName(b.dtype)}, got ${describeGot(d)}`);
        const a = d as HostArray;
        if (a.length === 0 || a.length % b.rowElements !== 0)
          invalid(call, `input ${JSON.stringify(b.name)} has ${a.length} elements: want whole rows of ${b.rowElements}`);
        const k = a.length / b.rowElements;
        if (rows >= 0 && k !== rows) invalid(call, `input ${JSON.stringify(b.name)} has ${k} rows, the others ${rows}`);
        rows = k;
        return a;
      });
      if (rows > this.#maxBatch) invalid(call, `${rows} rows is more than maxBatch (${this.#maxBatch})`);
      req = { rows, data: data.map((a) => a.slice() as HostArray) }; // the caller may reuse its arrays at once
    } catch (e) {
      return Promise.reject(e);
    }
    return new Promise((resolve, reject) => {
      if (this.#rows + req.rows > this.#maxBatch) this.#flush();
      this.#gathering.push({ ...req, resolve, reject });
      this.#rows += req.rows;
      this.#stats.requests++;
      if (this.#rows >= this.#maxBatch) this.#flush();
      else if (this.#inFlight === 0) this.#soon();
      else this.#timer ??= setTimeout(() => this.#flush(), this.#maxDelayMs);
    });
  }

  /** Flush at the end of this turn: requests of the same turn go together. */
  #soon(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      if (this.#inFlight === 0) this.#flush();
    });
  }

  #flush(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    const reqs = this.#gathering;
    if (reqs.length === 0) return;
    const rows = this.#rows;
    this.#gathering = [];
    this.#rows = 0;
    const t = this.#t;
    const feeds: Record<string, RunInput | number> = { [t.variable]: Math.max(rows, t.min) };
    this.#batched.forEach((b, bi) => {
      const all = dtypeArray(b.dtype, t.max * b.rowElements) as Float32Array;
      let at = 0;
      for (const r of reqs) {
        all.set(r.data[bi] as Float32Array, at);
        at += r.rows * b.rowElements;
      }
      feeds[b.name] = all;
    });
    this.#inFlight++;
    this.#stats.batches++;
    this.#stats.rows += rows;
    t.run(feeds).then(
      (outs) => {
        let row = 0;
        for (const r of reqs) {
          const mine: Record<string, RunOutput> = {};
          for (const o of t.outputs) mine[o.name] = outs[o.name]!.slice(row * o.rowElements, (row + r.rows) * o.rowElements) as RunOutput;
          row += r.rows;
          r.resolve(mine);
        }
        this.#done();
      },
      (e: unknown) => {
        for (const r of reqs) r.reject(e);
        this.#done();
      },
    );
  }

  #done(): void {
    this.#inFlight--;
    if (this.#gathering.length > 0 && this.#inFlight === 0) this.#flush();
  }
}
