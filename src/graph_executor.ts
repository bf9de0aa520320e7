// GraphExecutor / GraphSession: batched dispatch as policies over command lists.
//
//  - GraphExecutor(device, { stream? }): begin() → a direct session (each op is encoded into the
//    session's one encoder as it is called); beginRecorded() → a record session (each op becomes
//    a node of a ComputeGraph; the work is encoded at commit/finish). The same op methods serve
//    both modes.
//  - GraphSession: dispatch, copy, fill, barrier; commit() submits what was encoded since the last
//    commit in ONE crossing (bg_submit) without waiting; finish() commits and waits; finishAsync()
//    commits and awaits stream.done(). A finished session throws ILLEGAL_STATE; one disposed
//    without finish() runs nothing it had not committed and gives its encoder back.
import type { Buffer, FillType, FillOptionsFor } from "./buffer";
import type { Device } from "./device";
import { describeGot, disposed, illegalState, invalid, options, type OptionKeys } from "./errors";
import type { CopyOptions, FillOptions } from "./commands";
import { CommandEncoder } from "./encoder";
import { ComputeGraph, DISPATCH_KEYS, resolveAccess, type BarrierMode, type GraphDispatchOptions } from "./compute_graph";
import type { Kernel, Signature } from "./kernel";
import { INSPECT, plural } from "./inspect";
import { Stream } from "./stream";

// The keys each options argument may have (errors.ts `options` refuses any other).
const COPY_KEYS: OptionKeys<CopyOptions> = { bytes: true, dstOffset: true, srcOffset: true };
const FILL_KEYS: OptionKeys<FillOptions> = { type: true, offset: true, bytes: true };
const STREAM_KEYS: OptionKeys<{ stream?: Stream }> = { stream: true };
const BEGIN_KEYS: OptionKeys<{ flushEvery?: number }> = { flushEvery: true };
const REPLAY_KEYS: OptionKeys<{ barriers?: BarrierMode }> = { barriers: true };

export {
  ComputeGraph,
  type Access,
  type BarrierMode,
  type GraphDispatchOptions,
  type GraphNode,
  type Hazard,
  type NodeKind,
  type PlannedBarrier,
} from "./compute_graph";

// ---- sessions ------------------------------------------------------------------------------

export interface SessionStats {
  /** Ops encoded (direct) or recorded (record mode). */
  dispatches: number;
  barriers: number;
  copies: number;
  fills: number;
  /** commit() calls, including the one finish() makes. */
  commits: number;
  /** Crossings that carried work: one bg_submit per non-empty commit, nothing per op. */
  ffiCrossings: number;
  /** Waits for completion (finish / finishAsync). */
  waits: number;
}

export interface ExecutorStats extends SessionStats {
  sessions: number;
  replays: number;
}

export type SessionMode = "direct" | "recorded";
export type SessionState = "open" | "finished" | "disposed";

const zeroStats = (): SessionStats => ({ dispatches: 0, barriers: 0, copies: 0, fills: 0, commits: 0, ffiCrossings: 0, waits: 0 });

export class GraphSession {
  readonly executor: GraphExecutor;
  readonly mode: SessionMode;
  readonly stats: SessionStats = zeroStats();
  #state: SessionState = "open";
  #enc: CommandEncoder | null;
  #graph: ComputeGraph | null;
  /** Record mode: nodes already committed. */
  #committed = 0;
  /** Direct mode: commit by itself after this many ops (0: only when asked). */
  readonly #flushEvery: number;
  #sinceCommit = 0;

  /** @internal Use GraphExecutor.begin() / beginRecorded(). */
  constructor(executor: GraphExecutor, mode: SessionMode, encoder: CommandEncoder, flushEvery = 0) {
    this.executor = executor;
    this.mode = mode;
    this.#enc = encoder;
    this.#graph = mode === "recorded" ? new ComputeGraph(executor.device) : null;
    this.#flushEvery = flushEvery;
  }

  /** Direct mode with flushEvery: hand what is encoded to the stream every so many ops. */
  #tick(): void {
    if (this.#flushEvery && ++this.#sinceCommit >= this.#flushEvery) this.#submit();
  }

  get state(): SessionState {
    return this.#state;
  }

  /** The recorded graph (record mode; kept after finish for replays), else null. */
  get graph(): ComputeGraph | null {
    return this.#graph;
  }

  /** Bytes encoded and not yet committed (direct mode), or recorded (record mode). */
  get byteLength(): number {
    return this.#graph ? this.#graph.byteLength : (this.#enc?.byteLength ?? 0);
  }

  #closed(call: string): never {
    illegalState(call, `the session is ${this.#state === "finished" ? "finished" : "disposed"}; begin a new one`);
  }

  dispatch<S extends Signature>(kernel: Kernel<S>, cfg: GraphDispatchOptions<NoInfer<S>>): this {
    if (this.#state !== "open") this.#closed("GraphSession.dispatch");
    if (this.#graph) this.#graph.dispatch(kernel, cfg, "GraphSession.dispatch");
    else {
      if (cfg !== null && typeof cfg === "object" && (cfg.reads !== undefined || cfg.writes !== undefined)) {
        const dev = this.executor.device.state;
        if (cfg.reads !== undefined) resolveAccess("GraphSession.dispatch", dev, "reads", cfg.reads);
        if (cfg.writes !== undefined) resolveAccess("GraphSession.dispatch", dev, "writes", cfg.writes);
      }
      this.#enc!.launch(kernel, cfg, "GraphSession.dispatch", DISPATCH_KEYS);
    }
    this.stats.dispatches++;
    if (this.#flushEvery) this.#tick();
    return this;
  }

  copy(dst: Buffer, src: Buffer, opts: CopyOptions = {}): this {
    opts = options("GraphSession.copy", opts, COPY_KEYS);
    if (this.#state !== "open") this.#closed("GraphSession.copy");
    if (this.#graph) this.#graph.recordCopy("GraphSession.copy", dst, src, opts);
    else this.#enc!.copy(dst, src, opts, "GraphSession.copy");
    this.stats.copies++;
    return this;
  }

  fill<B extends Buffer, V extends number>(buf: B, value: V, ...optsWithType: FillOptionsFor<B, V, FillOptions, FillOptions & { type: FillType }>): this;
  fill(buf: Buffer, value: number, opts: FillOptions = {}): this {
    opts = options("GraphSession.fill", opts, FILL_KEYS);
    if (this.#state !== "open") this.#closed("GraphSession.fill");
    const o = opts as FillOptions & { type: FillType }; // the type rule holds at run time (fillTypeOf)
    if (this.#graph) this.#graph.recordFill("GraphSession.fill", buf, value, o);
    else this.#enc!.memset(buf, value, o, "GraphSession.fill");
    this.stats.fills++;
    return this;
  }

  barrier(): this {
    if (this.#state !== "open") this.#closed("GraphSession.barrier");
    if (this.#graph) this.#graph.barrier();
    else this.#enc!.barrier();
    this.stats.barriers++;
    return this;
  }

  #submit(): void {
    const enc = this.#enc!;
    const g = this.#graph;
    const stream = this.executor.stream;
    let upTo = 0;
    if (g) {
      upTo = g.nodeCount;
      g.encodeRange(enc, this.#committed, upTo);
    }
    let crossed: boolean;
    try {
      crossed = enc.commit(stream);
    } catch (e) {
      if (g) enc.reset(); // the graph still holds the nodes: a later commit encodes them again
      throw e;
    }
    if (g) this.#committed = upTo;
    this.#sinceCommit = 0;
    this.stats.commits++;
    if (crossed) this.stats.ffiCrossings++;
  }

  /** Submit what was encoded since the last commit (one crossing), without waiting. */
  commit(): void {
    if (this.#state !== "open") this.#closed("GraphSession.commit");
    this.#submit();
  }

  #end(state: SessionState): void {
    this.#state = state;
    const enc = this.#enc;
    this.#enc = null;
    if (enc) this.executor._release(enc);
    this.executor._ended(this.stats);
  }

  /** Commit and wait for the work to finish. The session cannot be used afterwards. */
  finish(): void {
    if (this.#state !== "open") this.#closed("GraphSession.finish");
    this.#submit();
    this.stats.waits++;
    this.#end("finished");
    this.executor.stream.synchronize();
  }

  /** Commit, then resolve when the work has finished (never blocks the event loop). */
  async finishAsync(): Promise<void> {
    if (this.#state !== "open") this.#closed("GraphSession.finishAsync");
    this.#submit();
    this.stats.waits++;
    this.#end("finished");
    await this.executor.stream.done();
  }

  /** Drop the session: nothing uncommitted runs; the encoder goes back to the executor. */
  dispose(): void {
    if (this.#state !== "open") return;
    this.#enc?.reset();
    this.#graph = null;
    this.#end("disposed");
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /** "GraphSession(direct on cpu, open; 3 dispatches, 1 barrier, 1 commit)". */
  toString(): string {
    const t = this.stats;
    const done = [plural(t.dispatches, "dispatch", "dispatches"), plural(t.copies, "copy", "copies"), plural(t.fills, "fill"), plural(t.barriers, "barrier"), plural(t.commits, "commit")].filter((x) => !x.startsWith("0 "));
    return `GraphSession(${this.mode} on ${this.executor.device.spec}, ${this.#state}${done.length ? `; ${done.join(", ")}` : ""})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}

export class GraphExecutor {
  readonly device: Device;
  /** Where sessions and replays run (the device's default stream unless one was given). */
  readonly stream: Stream;
  readonly stats: ExecutorStats = { ...zeroStats(), sessions: 0, replays: 0 };
  #pool: CommandEncoder[] = [];

  constructor(device: Device, opts: { stream?: Stream } = {}) {
    opts = options("new GraphExecutor", opts, STREAM_KEYS);
    if (!device || typeof device !== "object" || !("state" in device)) invalid("GraphExecutor", "expected a Device");
    if (device.disposed) disposed("GraphExecutor", "device");
    const s = opts.stream ?? device.defaultStream;
    if (!(s instanceof Stream)) invalid("GraphExecutor", "stream must be a Stream");
    if (s.device.state !== device.state) invalid("GraphExecutor", "stream of another device");
    if (s.disposed) disposed("GraphExecutor", "stream");
    this.device = device;
    this.stream = s;
  }

  #acquire(call: string): CommandEncoder {
    if (this.device.disposed) disposed(call, "device");
    return this.#pool.pop() ?? new CommandEncoder(this.device);
  }

  /**
   * Begin a direct session: each op is encoded into one shared encoder as it is called, and
   * crosses to the shim at commit()/finish(). With `flushEvery: n` the session also commits by
   * itself every n dispatches, so the device starts on the first ones while TypeScript encodes
   * the rest (one crossing per commit still; on Metal, one command buffer per commit).
   */
  begin(opts: { flushEvery?: number } = {}): GraphSession {
    opts = options("GraphExecutor.begin", opts, BEGIN_KEYS);
    const f = opts.flushEvery ?? 0;
    if (!Number.isInteger(f) || f < 0) invalid("GraphExecutor.begin", `flushEvery must be a non-negative integer, got ${describeGot(f)}`);
    return new GraphSession(this, "direct", this.#acquire("GraphExecutor.begin"), f);
  }

  /** Begin a record session: ops become a ComputeGraph, encoded and submitted at commit/finish. */
  beginRecorded(): GraphSession {
    return new GraphSession(this, "recorded", this.#acquire("GraphExecutor.beginRecorded"));
  }

  #replay(call: string, graph: ComputeGraph, barriers: BarrierMode | undefined): void {
    if (!(graph instanceof ComputeGraph)) invalid(call, "expected a ComputeGraph");
    if (graph.device.state !== this.device.state) invalid(call, "graph of another device");
    const crossed = graph.submit(this.stream, { barriers });
    const st = this.stats;
    st.replays++;
    st.commits++;
    if (crossed) st.ffiCrossings++;
    st.dispatches += graph.dispatchCount;
    st.barriers += graph.barrierCount(barriers);
    st.waits++;
  }

  /** Submit a recorded graph (one crossing, no re-encoding) and wait for it. */
  replay(graph: ComputeGraph, opts: { barriers?: BarrierMode } = {}): void {
    opts = options("GraphExecutor.replay", opts, REPLAY_KEYS);
    this.#replay("GraphExecutor.replay", graph, opts.barriers);
    this.stream.synchronize();
  }

  async replayAsync(graph: ComputeGraph, opts: { barriers?: BarrierMode } = {}): Promise<void> {
    opts = options("GraphExecutor.replayAsync", opts, REPLAY_KEYS);
    this.#replay("GraphExecutor.replayAsync", graph, opts.barriers);
    await this.stream.done();
  }

  /** @internal An encoder back from a session. */
  _release(enc: CommandEncoder): void {
    enc.reset();
    if (this.#pool.length < 4 && enc.capacity <= 1 << 22) this.#pool.push(enc);
  }

  /** @internal A session ended: its counts join the executor's. */
  _ended(s: SessionStats): void {
    const t = this.stats;
    t.sessions++;
    t.dispatches += s.dispatches;
    t.barriers += s.barriers;
    t.copies += s.copies;
    t.fills += s.fills;
    t.commits += s.commits;
    t.ffiCrossings += s.ffiCrossings;
    t.waits += s.waits;
  }

  /** "GraphExecutor(cpu, on the default stream; 2 sessions, 1 replay)". */
  toString(): string {
    const on = this.stream.isDefault ? "the default stream" : "a created stream";
    return `GraphExecutor(${this.device.spec}, on ${on}; ${plural(this.stats.sessions, "session")}, ${plural(this.stats.replays, "replay")})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}

