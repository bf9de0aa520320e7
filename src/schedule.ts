// Schedules: an ordered list of Steps (kernel launches, copies, memsets), each with the byte
// ranges it reads and writes, written once and run in any ExecMode:
//   Stream          every step issued on one stream, every run
//   Graph           captured on the first run, replayed after; changed scalars update the graph
//   Eager           one run, then the executable disposes itself
//   MultiStream(n)  steps spread over n streams by hazards on overlapping byte ranges
//                   (read-after-write, write-after-read, write-after-write), events only at
//                   cross-stream edges
// Every mode gives the results of running the steps one by one, in order.
import { Buffer, HostBuffer, fillPattern, type FillType, type HostData } from "./buffer";
import { Device } from "./device";
import { describeValue, invalid, disposed, illegalState, options } from "./errors";
import { Event } from "./event";
import { CaptureMode, GraphExec } from "./capture";
import { CommandList, checkLaunch, graphFromCommands, validateCommand } from "./commands";
import { dependencies, hazardBetween, overlaps, planStreams, rangeOf, segments, singleStreamPlan, type ByteRange, type StreamPlan } from "./hazards";
import { Kernel, type ArgValue, type Dim3 } from "./kernel";
import { Stream } from "./stream";

export { overlaps, planStreams, rangeOf, type ByteRange, type StreamPlan } from "./hazards";

// ---- steps -----------------------------------------------------------------------------------------

export interface KernelStepConfig {
  grid: Dim3;
  block: Dim3;
  args: readonly ArgValue[];
  sharedBytes?: number;
  /** Buffers (views) the kernel reads. With neither list given, every buffer argument counts as read and written. */
  reads?: readonly Buffer[];
  /** Buffers (views) the kernel writes. */
  writes?: readonly Buffer[];
  label?: string;
}

export interface CopyStepOptions {
  bytes?: number;
  dstOffset?: number;
  srcOffset?: number;
  label?: string;
}

export interface FillStepOptions {
  type?: FillType;
  offset?: number;
  bytes?: number;
  label?: string;
}

type KernelOp = {
  kind: "kernel";
  kernel: Kernel;
  grid: [number, number, number];
  block: [number, number, number];
  sharedBytes: number;
  args: readonly ArgValue[];
};
type CopyOp = { kind: "copy"; dst: Buffer; src: Buffer; dstOffset: number; srcOffset: number; bytes: number };
type FillOp = { kind: "fill"; buffer: Buffer; offset: number; bytes: number; pattern: number; elemSize: 1 | 2 | 4; value: number; type: FillType };
type StepOp = KernelOp | CopyOp | FillOp;

function isBuffer(b: unknown): b is Buffer {
  return b instanceof Buffer;
}

/** One unit of work with the byte ranges it reads and writes. Immutable once made. */
export class Step {
  readonly op: Readonly<StepOp>;
  readonly reads: readonly ByteRange[];
  readonly writes: readonly ByteRange[];
  readonly label: string;
  readonly device: Device;
  /** Every buffer the step touches (for liveness checks). */
  readonly buffers: readonly Buffer[];

  private constructor(op: StepOp, device: Device, reads: ByteRange[], writes: ByteRange[], buffers: Buffer[], label: string) {
    this.op = Object.freeze(op);
    this.device = device;
    this.reads = Object.freeze(reads);
    this.writes = Object.freeze(writes);
    this.buffers = Object.freeze(buffers);
    this.label = label;
    Object.freeze(this);
  }

  get kind(): StepOp["kind"] {
    return this.op.kind;
  }

  /** A kernel launch. Its ranges are `reads`/`writes`, or, when neither is given, every buffer argument read and written. */
  static kernel(kernel: Kernel, cfg: KernelStepConfig): Step {
    const call = "Step.kernel";
    const { grid, block, sharedBytes } = checkLaunch(call, kernel, cfg);
    const dev = kernel.device;
    const args = [...cfg.args];
    const argBufs = args.filter(isBuffer);
    const list = (what: string, l: readonly Buffer[] | undefined): Buffer[] => {
      if (l === undefined) return [];
      if (!Array.isArray(l)) invalid(call, `${what} must be an array of Buffers`);
      for (const b of l) {
        if (!isBuffer(b)) invalid(call, `${what} must hold Buffers (views), got ${String(b)}`);
        if (b.device.state.handle !== dev.state.handle) invalid(call, `${what}: a buffer of another device (${b.device.spec})`);
        if (b.disposed) disposed(call, `buffer in ${what}`);
      }
      return [...l];
    };
    let reads: Buffer[], writes: Buffer[];
    if (cfg.reads === undefined && cfg.writes === undefined) {
      reads = argBufs;
      writes = argBufs;
    } else {
      reads = list("reads", cfg.reads);
      writes = list("writes", cfg.writes);
    }
    const buffers = [...new Set([...argBufs, ...reads, ...writes])];
    return new Step(
      { kind: "kernel", kernel, grid, block, sharedBytes, args: Object.freeze(args) },
      dev,
      reads.map((b) => rangeOf(b)),
      writes.map((b) => rangeOf(b)),
      buffers,
      cfg.label ?? kernel.name,
    );
  }

  /** A device-to-device copy (the ranges may not overlap). Reads src's range, writes dst's. */
  static copy(dst: Buffer, src: Buffer, opts: CopyStepOptions = {}): Step {
    const call = "Step.copy";
    opts = options(call, opts);
    if (!isBuffer(dst) || !isBuffer(src)) invalid(call, "dst and src must be Buffers");
    if (dst.device.state.handle !== src.device.state.handle) invalid(call, `dst is on ${dst.device.spec}, src on ${src.device.spec}`);
    const so = opts.srcOffset ?? 0, dO = opts.dstOffset ?? 0;
    validateCommand(dst.device, (l) => l.copy(dst, src, { srcOffset: so, dstOffset: dO, bytes: opts.bytes }, call));
    const bytes = opts.bytes ?? src.byteLength - so;
    const r = rangeOf(src, so, bytes), w = rangeOf(dst, dO, bytes);
    if (overlaps(r, w)) invalid(call, "source and destination ranges overlap");
    return new Step({ kind: "copy", dst, src, dstOffset: dO, srcOffset: so, bytes }, dst.device, [r], [w], [dst, src], opts.label ?? "copy");
  }

  /** A memset of `value` as elements of `type` (default "u8"). Writes its range. */
  static fill(buffer: Buffer, value: number, opts: FillStepOptions = {}): Step {
    const call = "Step.fill";
    opts = options(call, opts);
    if (!isBuffer(buffer)) invalid(call, "expected a Buffer");
    const type = opts.type ?? "u8";
    const off = opts.offset ?? 0;
    validateCommand(buffer.device, (l) => l.memset(buffer, value, { type, offset: off, bytes: opts.bytes }, call));
    const { pattern, size } = fillPattern(call, value, type);
    const bytes = opts.bytes ?? buffer.byteLength - off;
    return new Step(
      { kind: "fill", buffer, offset: off, bytes, pattern, elemSize: size, value, type },
      buffer.device,
      [],
      [rangeOf(buffer, off, bytes)],
      [buffer],
      opts.label ?? "fill",
    );
  }

  /** True when `later` must wait for this step: RAW, WAR or WAW on overlapping bytes. */
  hazardWith(later: Step): boolean {
    return hazardBetween(this, later) !== null;
  }

  /** Append this step's command to `list`; returns the byte offset of its argument slots (-1 when it has none). */
  lower(list: CommandList, call: string): number {
    const op = this.op;
    if (op.kind === "kernel") {
      list.launch(op.kernel, { grid: op.grid, block: op.block, args: op.args, sharedBytes: op.sharedBytes }, call);
      return list.lastArgOffset;
    }
    if (op.kind === "copy") list.copy(op.dst, op.src, { dstOffset: op.dstOffset, srcOffset: op.srcOffset, bytes: op.bytes }, call);
    else list.memset(op.buffer, op.value, { type: op.type, offset: op.offset, bytes: op.bytes }, call);
    return -1;
  }

  toString(): string {
    return `Step(${this.kind}: ${this.label})`;
  }
}

// ---- exec modes ------------------------------------------------------------------------------------

export type ExecKind = "Stream" | "Graph" | "Eager" | "MultiStream";

/** How a Schedule runs. `ExecMode.Stream` is the default. */
export class ExecMode {
  /** Every step issued on one stream, every run. */
  static readonly Stream = new ExecMode("Stream", 1);
  /** Capture on the first run, replay the graph after; changed scalars update it in place. */
  static readonly Graph = new ExecMode("Graph", 1);
  /** Compile, run once and dispose. */
  static readonly Eager = new ExecMode("Eager", 1);
  static readonly default = ExecMode.Stream;

  readonly kind: ExecKind;
  /** Streams the mode uses. */
  readonly streams: number;

  private constructor(kind: ExecKind, streams: number) {
    this.kind = kind;
    this.streams = streams;
    Object.freeze(this);
  }

  /** A pool of `n` streams; steps assigned by their data dependencies. */
  static MultiStream(n: number): ExecMode {
    if (!Number.isInteger(n) || n < 1 || n > 64) invalid("ExecMode.MultiStream", `n must be an integer from 1 to 64, got ${String(n)}`);
    return new ExecMode("MultiStream", n);
  }

  equals(o: ExecMode): boolean {
    return o instanceof ExecMode && o.kind === this.kind && o.streams === this.streams;
  }

  toString(): string {
    return this.kind === "MultiStream" ? `MultiStream(${this.streams})` : this.kind;
  }
}

// ---- schedules -------------------------------------------------------------------------------------

export interface ScheduleCompileOptions {
  /** Graph mode: the capture mode (default CaptureMode.Global). */
  captureMode?: CaptureMode;
}

/** An ordered list of steps. Results of every ExecMode equal running them one by one. */
export class Schedule {
  #steps: Step[] = [];

  constructor(steps: Iterable<Step> = []) {
    if (steps === null || typeof steps !== "object" || typeof (steps as Iterable<Step>)[Symbol.iterator] !== "function")
      invalid("new Schedule", `steps must be an iterable of Steps, got ${describeValue(steps)}`);
    for (const s of steps) this.add(s);
  }

  add(...steps: Step[]): this {
    for (const s of steps) if (!(s instanceof Step)) invalid("Schedule.add", `expected a Step, got ${String(s)}`);
    this.#steps.push(...steps);
    return this;
  }

  addKernel(kernel: Kernel, cfg: KernelStepConfig): this {
    return this.add(Step.kernel(kernel, cfg));
  }

  addCopy(dst: Buffer, src: Buffer, opts?: CopyStepOptions): this {
    return this.add(Step.copy(dst, src, opts));
  }

  addFill(buffer: Buffer, value: number, opts?: FillStepOptions): this {
    return this.add(Step.fill(buffer, value, opts));
  }

  get steps(): readonly Step[] {
    return this.#steps;
  }

  get length(): number {
    return this.#steps.length;
  }

  /** For each step, the earlier steps it has a hazard with (RAW, WAR, WAW on overlapping bytes), ascending. */
  dependencies(): number[][] {
    return dependencies(this.#steps);
  }

  /** Prepare the schedule to run on `device` in `mode`. */
  compile(device: Device, mode: ExecMode = ExecMode.Stream, opts: ScheduleCompileOptions = {}): Executable {
    opts = options("Schedule.compile", opts);
    return new Executable(device, [...this.#steps], mode, opts);
  }

  /** Compile in Eager mode, run once, and resolve when the run is done and everything is freed. */
  static async runEager(device: Device, steps: Schedule | Iterable<Step>, opts: RunOptions = {}): Promise<void> {
    opts = options("Schedule.runEager", opts);
    const s = steps instanceof Schedule ? steps : new Schedule(steps);
    const exec = s.compile(device, ExecMode.Eager);
    exec.run(opts);
    await exec.done();
  }
}

// ---- executables -----------------------------------------------------------------------------------

export type InputPair = readonly [Buffer, HostData];

export interface RunOptions {
  /**
   * Host data written into buffers before this run's steps, in stream order (and in Graph mode
   * outside the captured region, before the graph launch).
   */
  inputs?: readonly InputPair[];
}

export interface ExecStats {
  /** Runs enqueued. */
  runs: number;
  /** Graph captures made (Graph mode: 1 after the first run, however many scalars changed). */
  captures: number;
  /** Kernel nodes updated in place in the graph exec (instead of re-capturing). */
  graphUpdates: number;
  /** Graph launches (replays). */
  replays: number;
}

interface Staging {
  host: HostBuffer;
  ev: Event;
  used: boolean;
}

/**
 * A schedule compiled for one device and ExecMode: its steps lowered to command lists once.
 * Stream and Eager submit one list in one crossing per run; MultiStream submits one list per
 * segment of consecutive steps on one stream, with the event records and waits of the stream plan
 * inside the lists; Graph makes a graph of the one list on the first run and replays it. setArgs
 * rewrites the argument words of the step's launch in its list (and, in Graph mode, the node).
 */
export class Executable {
  readonly device: Device;
  readonly mode: ExecMode;
  readonly steps: readonly Step[];
  readonly captureMode: CaptureMode;
  readonly stats: ExecStats = { runs: 0, captures: 0, graphUpdates: 0, replays: 0 };
  /** The stream assignment (MultiStream; for other modes every step is on stream 0). */
  readonly plan: StreamPlan;

  #streams: Stream[] = [];
  /** Every command of one run, and the ranges of it submitted in order: [stream, from, to] each. */
  #list: CommandList;
  #ranges: number[] = [];
  /** Per step: the byte offset of its argument slots in the list (-1: none), its kernel node. */
  #argOffset: number[] = [];
  #knode: number[] = [];
  #args: ArgValue[][] = [];
  #events: Event[] = [];
  #graph: GraphExec | null = null;
  #dirty = new Set<number>();
  #staging: Staging[] = [];
  #stageNext = 0;
  #inputs: CommandList | null = null;
  #live = true;
  #eagerDone: Promise<void> | null = null;

  /** @internal use `schedule.compile(device, mode)`. */
  constructor(device: Device, steps: Step[], mode: ExecMode, opts: ScheduleCompileOptions) {
    const call = "Schedule.compile";
    if (!(device instanceof Device)) invalid(call, "expected a Device");
    if (!(mode instanceof ExecMode)) invalid(call, `mode must be an ExecMode (Stream, Graph, Eager or MultiStream(n)), got ${String(mode)}`);
    const captureMode = opts.captureMode ?? CaptureMode.Global;
    if (!(captureMode instanceof CaptureMode)) invalid(call, "captureMode must be a CaptureMode");
    const dh = device.handle;
    for (let i = 0; i < steps.length; i++) {
      const st = steps[i]!;
      if (st.device.state.handle !== dh) invalid(call, `step ${i} (${st.label}) is for ${st.device.spec}, not ${device.spec}`);
      for (const b of st.buffers) if (b.disposed) disposed(call, `buffer of step ${i} (${st.label})`);
      if (st.op.kind === "kernel") st.op.kernel.handle;
    }
    this.device = device;
    this.mode = mode;
    this.steps = Object.freeze(steps);
    this.captureMode = captureMode;
    const n = mode.kind === "MultiStream" ? mode.streams : 1;
    this.plan = n > 1 ? planStreams(steps, n) : singleStreamPlan(steps);
    let bytes = 0;
    for (const st of steps) bytes += st.op.kind === "kernel" ? 48 + 8 * st.op.kernel.codes.length : 32;
    this.#list = new CommandList(device, { initialBytes: bytes * (n > 1 ? 2 : 1) });
    try {
      this.#lower(call, device, steps, n);
    } catch (e) {
      this.#release();
      throw e;
    }
  }

  /** Lower the steps to command lists (see the class comment). */
  #lower(call: string, device: Device, steps: readonly Step[], n: number): void {
    const plan = this.plan;
    const used = Math.max(1, plan.usedStreams.length ? Math.max(...plan.usedStreams) + 1 : 1);
    for (let t = 0; t < used; t++) this.#streams.push(device.createStream({ nonBlocking: true }));
    let knode = 0;
    const list = this.#list;
    const lowerStep = (i: number) => {
      const st = steps[i]!;
      const at = st.lower(list, call);
      this.#argOffset[i] = at;
      this.#knode[i] = at >= 0 ? knode++ : -1;
      this.#args[i] = st.op.kind === "kernel" ? [...st.op.args] : [];
    };
    const ranges = this.#ranges;
    const range = (stream: number, append: () => void) => {
      const from = list.byteLength;
      append();
      ranges.push(stream, from, list.byteLength);
    };
    if (n === 1 || this.#streams.length === 1) {
      range(0, () => steps.forEach((_, i) => lowerStep(i)));
      return;
    }
    // MultiStream: ranges of the list submitted in order (hazards.ts's segments: every wait after
    // the range that records it), event records and waits inside them. Stream 0 forks the others
    // at the start of a run and joins them at its end.
    const ev = () => {
      const e = device.createEvent({ timing: false });
      this.#events.push(e);
      return e;
    };
    const stepEvent = new Map<number, Event>();
    for (const j of new Set(plan.waits.flat())) stepEvent.set(j, ev());
    const fork = ev();
    const joins = this.#streams.slice(1).map(() => ev());
    const segs = segments(plan);
    const started = new Set<number>();
    const joinAll = () => {
      for (let t = 1; t < this.#streams.length; t++) if (started.has(t)) list.eventWait(joins[t - 1]!, call);
    };
    segs.forEach((seg, k) =>
      range(seg.stream, () => {
        if (k === 0) list.eventRecord(fork, call);
        else if (!started.has(seg.stream)) list.eventWait(fork, call);
        started.add(seg.stream);
        for (const i of seg.items) {
          for (const j of plan.waits[i]!) list.eventWait(stepEvent.get(j)!, call);
          lowerStep(i);
          const e = stepEvent.get(i);
          if (e) list.eventRecord(e, call);
        }
        if (seg.stream !== 0 && segs.findLastIndex((g) => g.stream === seg.stream) === k) list.eventRecord(joins[seg.stream - 1]!, call);
        if (seg.stream === 0 && k === segs.length - 1) joinAll(); // every other stream's last list is in already
      }),
    );
    if (segs[segs.length - 1]!.stream !== 0) range(0, joinAll);
  }

  get disposed(): boolean {
    return !this.#live;
  }

  /** The streams this executable owns (stream 0 is where runs start and end). */
  get streams(): readonly Stream[] {
    return this.#streams;
  }

  /** The graph exec of Graph mode (null before the first run). */
  get graphExec(): GraphExec | null {
    return this.#graph;
  }

  #alive(call: string): void {
    if (!this.#live) disposed(call, "executable");
    if (!this.device.state.open) disposed(call, "device of this executable");
    this.#list.checkRefs(call, "used by a step");
  }

  /** The current arguments of kernel step `stepIndex`. */
  args(stepIndex: number): readonly ArgValue[] {
    this.#kernelStep("Executable.args", stepIndex);
    return this.#args[stepIndex]!;
  }

  #kernelStep(call: string, stepIndex: number): KernelOp {
    if (!Number.isInteger(stepIndex) || stepIndex < 0 || stepIndex >= this.steps.length)
      invalid(call, `step ${String(stepIndex)} out of range (the schedule has ${this.steps.length})`);
    const op = this.steps[stepIndex]!.op;
    if (op.kind !== "kernel") invalid(call, `step ${stepIndex} is a ${op.kind}, not a kernel launch`);
    return op;
  }

  /**
   * Change kernel step `stepIndex`'s arguments for the following runs. Scalars may change
   * freely; a buffer argument must stay the same range (the step's hazards depend on it). In
   * Graph mode the next run updates the graph in place instead of making it again.
   */
  setArgs(stepIndex: number, args: readonly ArgValue[]): this {
    const call = "Executable.setArgs";
    if (!this.#live) disposed(call, "executable");
    const k = this.#kernelStep(call, stepIndex).kernel;
    const old = this.#args[stepIndex]!;
    // validate everything first (a scratch pack), then refuse a moved buffer binding, then patch
    if (!Array.isArray(args)) invalid(call, `${k.name}: args must be an array`);
    for (let i = 0; i < k.signature.length; i++) {
      if (k.signature[i] !== "buffer" || !(args[i] instanceof Buffer)) continue; // patchArgs refuses the rest
      const a = args[i] as Buffer, b = old[i] as Buffer;
      if (a !== b && (a.address !== b.address || a.byteLength !== b.byteLength))
        invalid(call, `${k.name}: argument ${i} is a buffer binding; it may not change range in a compiled schedule (its hazards depend on it); build a new schedule`);
    }
    this.#list.patchArgs(call, this.#argOffset[stepIndex]!, k, args);
    this.#args[stepIndex] = [...args];
    if (this.#graph) this.#dirty.add(stepIndex);
    return this;
  }
  /** Change one argument of kernel step `stepIndex` (see setArgs). */
  setArg(stepIndex: number, argIndex: number, value: ArgValue): this {
    const cur = [...this.args(stepIndex)];
    if (!Number.isInteger(argIndex) || argIndex < 0 || argIndex >= cur.length)
      invalid("Executable.setArg", `argument ${String(argIndex)} out of range (the kernel takes ${cur.length})`);
    cur[argIndex] = value;
    return this.setArgs(stepIndex, cur);
  }

  #checkInputs(call: string, inputs: readonly InputPair[] | undefined): number {
    if (inputs === undefined) return 0;
    if (!Array.isArray(inputs)) invalid(call, "inputs must be an array of [Buffer, data] pairs");
    let total = 0;
    for (const pair of inputs) {
      if (!Array.isArray(pair) || pair.length !== 2) invalid(call, "each input must be a [Buffer, data] pair");
      const [b, data] = pair;
      if (!isBuffer(b)) invalid(call, "an input's first element must be a Buffer");
      if (b.device.state.handle !== this.device.state.handle) invalid(call, `an input buffer of another device (${b.device.spec})`);
      if (b.disposed) disposed(call, "input buffer");
      if (!(data instanceof ArrayBuffer) && !ArrayBuffer.isView(data)) invalid(call, "an input's data must be a TypedArray, DataView or ArrayBuffer");
      if (data.byteLength > b.byteLength) invalid(call, `input of ${data.byteLength} bytes does not fit a ${b.byteLength}-byte buffer`);
      total += (data.byteLength + 63) & ~63;
    }
    return total;
  }

  /** Copy inputs through pinned staging memory on stream 0, in stream order. */
  #upload(inputs: readonly InputPair[], total: number): void {
    if (total === 0) return;
    // Two staging areas in turn; one is reused only once its last upload has finished.
    if (this.#staging.length < 2) {
      this.#staging.push({ host: this.device.allocHost(Math.max(total, 4096)), ev: this.device.createEvent({ timing: false }), used: false });
      if (this.#staging.length < 2) this.#staging.push({ host: this.device.allocHost(Math.max(total, 4096)), ev: this.device.createEvent({ timing: false }), used: false });
    }
    const st = this.#staging[this.#stageNext]!;
    this.#stageNext = (this.#stageNext + 1) % this.#staging.length;
    if (st.used) st.ev.synchronize();
    if (st.host.byteLength < total) {
      const old = st.host;
      st.host = this.device.allocHost(total);
      old.dispose();
    }
    const bytes = st.host.bytes;
    const list = (this.#inputs ??= new CommandList(this.device, { initialBytes: 0 }));
    let off = 0;
    for (const [b, data] of inputs) {
      const src = data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      bytes.set(src, off);
      list.copyHtoD(b, st.host, { srcOffset: off, bytes: src.byteLength }, "Executable.run");
      off += (src.byteLength + 63) & ~63;
    }
    list.eventRecord(st.ev, "Executable.run");
    list.submit(this.#streams[0]!, {}, "Executable.run");
    st.used = true;
  }

  /** Graph mode's first run: a graph of the one list, instantiated. */
  #capture(): void {
    const graph = graphFromCommands(this.#list, this.#streams[0]!, this.captureMode);
    try {
      this.#graph = graph.instantiate();
    } finally {
      graph.dispose();
    }
    this.#dirty.clear();
    this.stats.captures++;
  }

  /** Enqueue one run of the schedule. Returns at once; see done() and synchronize(). */
  run(opts: RunOptions = {}): this {
    opts = options("Executable.run", opts);
    const call = "Executable.run";
    this.#alive(call);
    if (this.mode.kind === "Eager" && this.stats.runs > 0) illegalState(call, "an Eager executable runs once");
    const total = this.#checkInputs(call, opts.inputs);
    const kind = this.mode.kind;
    if (kind === "Graph") {
      if (!this.#graph) this.#capture();
      const g = this.#graph!;
      if (this.#dirty.size) {
        const list = this.#list;
        for (const i of this.#dirty) {
          const op = this.steps[i]!.op as KernelOp;
          g.setPackedArgs(this.#knode[i]!, list.address + this.#argOffset[i]!, op.kernel.codes.length);
          this.stats.graphUpdates++;
        }
        this.#dirty.clear();
      }
      if (total) this.#upload(opts.inputs!, total);
      g.launch(this.#streams[0]!);
      this.stats.replays++;
    } else {
      if (total) this.#upload(opts.inputs!, total);
      const list = this.#list, r = this.#ranges, streams = this.#streams;
      for (let i = 0; i < r.length; i += 3) list.submitRange(streams[r[i]!]!, r[i + 1]!, r[i + 2]!, call);
    }
    this.stats.runs++;
    if (kind === "Eager") {
      const p = this.#streams[0]!.done().finally(() => this.dispose());
      p.catch(() => {});
      this.#eagerDone = p;
    }
    return this;
  }

  /** Enqueue a run and resolve when it is done. */
  runAsync(opts: RunOptions = {}): Promise<void> {
    opts = options("Executable.runAsync", opts);
    this.run(opts);
    return this.done();
  }

  /** Resolves when every run enqueued so far is done; never blocks the event loop. */
  async done(): Promise<void> {
    if (this.#eagerDone) return this.#eagerDone;
    if (!this.#live) return;
    await this.#streams[0]!.done();
  }

  /** Block until every run enqueued so far is done. */
  synchronize(): void {
    if (!this.#live) return;
    for (const s of this.#streams) s.synchronize();
    if (this.mode.kind === "Eager" && this.stats.runs > 0) this.dispose();
  }

  /** Wait for the runs in flight (nothing is lost), then free the streams, events and graph. */
  dispose(): void {
    if (!this.#live) return;
    this.#live = false;
    let err: unknown;
    if (this.device.state.open)
      for (const s of this.#streams) {
        try {
          s.synchronize();
        } catch (e) {
          err ??= e;
        }
      }
    this.#release();
    if (err) throw err;
  }

  #release(): void {
    this.#live = false;
    const quiet = (f: () => void) => {
      try {
        f();
      } catch {
        /* recorded by the first failure above */
      }
    };
    if (this.#graph) quiet(() => this.#graph!.dispose());
    this.#graph = null;
    for (const e of this.#events) quiet(() => e.dispose());
    this.#events = [];
    for (const st of this.#staging) {
      quiet(() => st.ev.dispose());
      quiet(() => st.host.dispose());
    }
    this.#staging = [];
    for (const s of this.#streams) quiet(() => s.dispose());
    this.#streams = [];
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  toString(): string {
    return `Executable(${this.mode}, ${this.steps.length} steps${this.#live ? "" : ", disposed"})`;
  }
}
