// Executables: a schedule compiled for one device and ExecMode, its steps lowered to one command
// list (see Executable), and the ExecModes themselves.
// Over 600 lines since schedules may span devices: one class lowers every mode (Stream, Eager,
// MultiStream, Graph, several devices) and shares its run, wait and release paths among them;
// split by mode, each file would carry its own copy of those.
import { Buffer, HostBuffer, type HostData } from "./buffer";
import { Device } from "./device";
import { describeGot, GpuError, Status, invalid, disposed, illegalState, options, type OptionKeys } from "./errors";
import { Event } from "./event";
import { CaptureMode, GraphExec } from "./capture";
import { CMD_BYTES, CommandList } from "./commands";
import { planFixedStreams, planStreams, segments, singleStreamPlan, type StreamPlan } from "./hazards";
import { INSPECT, plural } from "./inspect";
import { checkArgs, type ArgValue } from "./launch";
import type { PeerCopyPath, Stream } from "./stream";
import { isBuffer, type KernelOp, type Step } from "./step";

// The keys each options argument may have (errors.ts `options` refuses any other).
const RUN_KEYS: OptionKeys<RunOptions> = { inputs: true };

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
    if (!Number.isInteger(n) || n < 1 || n > 64) invalid("ExecMode.MultiStream", `n must be an integer from 1 to 64, got ${describeGot(n)}`);
    return new ExecMode("MultiStream", n);
  }

  equals(o: ExecMode): boolean {
    return o instanceof ExecMode && o.kind === this.kind && o.streams === this.streams;
  }

  toString(): string {
    return this.kind === "MultiStream" ? `MultiStream(${this.streams})` : this.kind;
  }

  [INSPECT](): string {
    return `ExecMode.${this}`;
  }
}

export interface ScheduleCompileOptions {
  /**
   * Graph mode: the capture mode (default CaptureMode.Global). Checked and kept in
   * `Executable.captureMode`, but Graph mode builds its graph from the command list without a
   * stream capture, so no capture mode applies to it any more.
   */
  captureMode?: CaptureMode;
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

/** One issue of a run over several devices, on the stream of device `k`, in program order. */
type DeviceOp =
  | { kind: "range"; k: number; from: number; to: number }
  | { kind: "wait"; k: number; event: Event }
  | { kind: "peer"; k: number; step: number };

interface Staging {
  host: HostBuffer;
  ev: Event;
  used: boolean;
}

/**
 * A schedule compiled for one device and ExecMode: its steps lowered to one command list once.
 * A schedule whose steps name other devices of the same backend (Step.copyPeer, kernels of
 * another device) runs over all of them in Stream or Eager mode: one stream per device, each
 * device's steps lowered to its own list, and an event record on one device waited for by
 * another's stream at every hazard between them (hazards.ts, planFixedStreams). A run starts
 * and ends on the compile device's stream (a fork event out, join events back), so done() and
 * synchronize() cover every device.
 * Stream and Eager submit the list in one crossing per run; MultiStream submits ranges of it, one
 * per stream segment (hazards.ts), with the event records and waits of the stream plan inside;
 * Graph makes a graph of the list on the first run (CommandList.toGraph) and replays it. setArgs
 * rewrites the argument words of the step's launch in the list (and, in Graph mode, the node).
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
  /** Several devices: every device the steps use (the compile device first), their lists, the run. */
  #devices: Device[] = [];
  #lists: CommandList[] = [];
  #stepList: CommandList[] = [];
  #program: DeviceOp[] = [];
  /** Per copyPeer step index: the path its copy took on the latest run (peer or staged). */
  readonly copyPaths = new Map<number, PeerCopyPath>();

  /** @internal use `schedule.compile(device, mode)`. */
  constructor(device: Device, steps: Step[], mode: ExecMode, opts: ScheduleCompileOptions) {
    const call = "Schedule.compile";
    if (!(device instanceof Device)) invalid(call, "expected a Device");
    if (!(mode instanceof ExecMode)) invalid(call, `mode must be an ExecMode (Stream, Graph, Eager or MultiStream(n)), got ${describeGot(mode)}`);
    const captureMode = opts.captureMode ?? CaptureMode.Global;
    if (!(captureMode instanceof CaptureMode)) invalid(call, "captureMode must be a CaptureMode");
    device.handle; // disposed: INVALID_HANDLE
    const devices = [device], slot: number[] = [];
    for (let i = 0; i < steps.length; i++) {
      const st = steps[i]!;
      const sd = st.device;
      let k = devices.findIndex((d) => d.state.handle === sd.state.handle);
      if (k < 0) {
        if (sd.backend !== device.backend) invalid(call, `step ${i} (${st.label}) is for ${sd.spec}, of another backend than ${device.spec}`);
        sd.handle; // disposed: INVALID_HANDLE
        k = devices.push(sd) - 1;
      }
      slot.push(k);
      for (const b of st.buffers) if (b.disposed) disposedStepBuffer(call, i, st, b);
      if (st.op.kind === "kernel") st.op.kernel.handle;
    }
    // a copy between devices is issued by the executable, not a list command: the same path
    const multi = devices.length > 1 || steps.some((st) => st.op.kind === "peer");
    if (multi && (mode.kind === "Graph" || mode.kind === "MultiStream"))
      throw new GpuError(Status.NOT_SUPPORTED, `${call}: a schedule over several devices (${devices.map((d) => d.spec).join(", ")}; copies between devices) runs in Stream or Eager mode, not ${mode}`, { backend: "typescript", call });
    this.device = device;
    this.mode = mode;
    this.steps = Object.freeze(steps);
    this.captureMode = captureMode;
    const n = mode.kind === "MultiStream" ? mode.streams : 1;
    this.plan = multi ? planFixedStreams(steps, slot, devices.length) : n > 1 ? planStreams(steps, n) : singleStreamPlan(steps);
    let bytes = 0;
    for (const st of steps) bytes += st.op.kind === "kernel" ? CMD_BYTES.LAUNCH_HEADER + 8 * st.op.kernel.codes.length : CMD_BYTES.COPY;
    this.#list = new CommandList(device, { initialBytes: bytes * (n > 1 ? 2 : 1) });
    try {
      if (multi) this.#lowerDevices(call, devices, steps);
      else this.#lower(call, device, steps, n);
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
    const lastOf = new Map(segs.map((g, k) => [g.stream, k] as const)); // later entries win
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
        if (seg.stream !== 0 && lastOf.get(seg.stream) === k) list.eventRecord(joins[seg.stream - 1]!, call);
        if (seg.stream === 0 && k === segs.length - 1) joinAll(); // every other stream's last list is in already
      }),
    );
    if (segs[segs.length - 1]!.stream !== 0) range(0, joinAll);
  }

  /** Several devices: one stream each, lists per device, the run as a program of issues (see the class comment). */
  #lowerDevices(call: string, devices: Device[], steps: readonly Step[]): void {
    const plan = this.plan;
    this.#devices = devices;
    for (const d of devices) this.#streams.push(d.createStream({ nonBlocking: true }));
    const lists = (this.#lists = devices.map((d, k) => (k === 0 ? this.#list : new CommandList(d, { initialBytes: 256 }))));
    const ev = (k: number) => {
      const e = devices[k]!.createEvent({ timing: false });
      this.#events.push(e);
      return e;
    };
    const stepEvent = new Map<number, Event>();
    for (const j of new Set(plan.waits.flat())) stepEvent.set(j, ev(plan.stream[j]!));
    const fork = ev(0);
    const prog = this.#program;
    let open: { k: number; from: number } | null = null;
    const close = () => {
      if (open && lists[open.k]!.byteLength > open.from) prog.push({ kind: "range", k: open.k, from: open.from, to: lists[open.k]!.byteLength });
      open = null;
    };
    const inList = (k: number, f: (l: CommandList) => void) => {
      if (open && open.k !== k) close();
      open ??= { k, from: lists[k]!.byteLength };
      f(lists[k]!);
    };
    const issue = (o: DeviceOp) => {
      close();
      prog.push(o);
    };
    let knode = 0;
    inList(0, (l) => l.eventRecord(fork, call));
    const started = new Set([0]);
    for (const seg of segments(plan)) {
      const k = seg.stream;
      if (!started.has(k)) issue({ kind: "wait", k, event: fork });
      started.add(k);
      for (const i of seg.items) {
        for (const j of plan.waits[i]!) issue({ kind: "wait", k, event: stepEvent.get(j)! }); // another device's record
        const st = steps[i]!;
        this.#stepList[i] = lists[k]!;
        this.#args[i] = st.op.kind === "kernel" ? [...st.op.args] : [];
        this.#argOffset[i] = -1;
        this.#knode[i] = -1;
        if (st.op.kind === "peer") issue({ kind: "peer", k, step: i });
        else
          inList(k, (l) => {
            const at = st.lower(l, call);
            this.#argOffset[i] = at;
            this.#knode[i] = at >= 0 ? knode++ : -1;
          });
        const e = stepEvent.get(i);
        if (e) inList(k, (l) => l.eventRecord(e, call));
      }
    }
    const joins: [number, Event][] = [];
    for (const k of started) if (k !== 0) joins.push([k, ev(k)]);
    for (const [k, e] of joins) inList(k, (l) => l.eventRecord(e, call));
    for (const [, e] of joins) issue({ kind: "wait", k: 0, event: e });
    close();
  }

  /** One run over several devices: the program's issues in order. */
  #runDevices(call: string): void {
    const streams = this.#streams, lists = this.#lists;
    for (const o of this.#program) {
      const s = streams[o.k]!;
      if (o.kind === "range") lists[o.k]!.submitRange(s, o.from, o.to, call);
      else if (o.kind === "wait") s.wait(o.event);
      else {
        const p = this.steps[o.step]!.op;
        if (p.kind !== "peer") continue;
        this.copyPaths.set(o.step, s.copyPeer(p.dst, p.src, { dstOffset: p.dstOffset, srcOffset: p.srcOffset, bytes: p.bytes }).path);
      }
    }
  }

  /** Every device the steps run on, the compile device first (one entry unless steps name others). */
  get devices(): readonly Device[] {
    return this.#devices.length ? this.#devices : [this.device];
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
    for (const d of this.#devices) if (!d.state.open) disposed(call, `device ${d.spec} of this executable`);
    this.#list.checkRefs(call, "used by a step");
    for (const l of this.#lists) if (l !== this.#list) l.checkRefs(call, "used by a step");
    this.steps.forEach((st, i) => {
      if (st.op.kind === "peer") for (const b of st.buffers) if (b.disposed) disposedStepBuffer(call, i, st, b);
    });
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
    // validate everything first (a scratch pack, ./launch's rules), then refuse a moved buffer binding, then patch
    checkArgs(call, k, args);
    for (let i = 0; i < k.signature.length; i++) {
      if (k.signature[i] !== "buffer") continue;
      const a = args[i] as Buffer, b = old[i] as Buffer;
      if (a !== b && (a.address !== b.address || a.byteLength !== b.byteLength))
        invalid(call, `${k.name}: argument ${i} is a buffer binding; it may not change range in a compiled schedule (its hazards depend on it); build a new schedule`);
    }
    (this.#stepList[stepIndex] ?? this.#list).patchArgs(call, this.#argOffset[stepIndex]!, k, args);
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
    const graph = this.#list.toGraph(this.#streams[0]!, "Executable.run");
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
    opts = options("Executable.run", opts, RUN_KEYS);
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
    } else if (this.#program.length) {
      if (total) this.#upload(opts.inputs!, total);
      this.#runDevices(call);
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
    opts = options("Executable.runAsync", opts, RUN_KEYS);
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

  /** `await using exec = schedule.compile(…)`: wait for the runs in flight without blocking, then dispose. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (!this.#live) return;
    try {
      await this.done();
    } finally {
      this.dispose();
    }
  }

  /**
   * How the steps were spread over streams, with the reason when fewer were used than the mode
   * allows: "2 of 4 streams used (the schedule's widest level has 2 independent steps), 1
   * cross-stream wait per run".
   */
  get streamSummary(): string {
    const n = this.mode.kind === "MultiStream" ? this.mode.streams : 1;
    const used = Math.max(1, this.plan.usedStreams.length);
    const waits = `${plural(this.plan.eventCount, "cross-stream wait")} per run`;
    if (n === 1) return "1 stream";
    if (used === n) return `${n} streams used, ${waits}`;
    const widest = widestLevel(this.plan.deps);
    const why =
      widest <= 1
        ? "no two steps of the schedule are independent"
        : widest <= used
          ? `the schedule's widest level has ${plural(widest, "independent step")}`
          : "steps went to the streams of the steps they depend on, where no independent work would wait";
    return `${used} of ${n} streams used (${why}), ${waits}`;
  }

  /** "Executable(MultiStream(4), 3 steps: 2 kernels, 1 copy; 2 of 4 streams used (…), …)". */
  toString(): string {
    const count = (kind: Step["kind"]) => this.steps.filter((s) => s.kind === kind).length;
    const kinds = [plural(count("kernel"), "kernel"), plural(count("copy"), "copy", "copies"), plural(count("fill"), "fill")].filter((t) => !t.startsWith("0 "));
    const parts = [`${plural(this.steps.length, "step")}${kinds.length ? `: ${kinds.join(", ")}` : ""}`, this.streamSummary];
    const replays = this.stats.replays;
    if (this.mode.kind === "Graph" && this.#live) parts.push(this.#graph ? `graph launched ${replays === 1 ? "once" : `${replays} times`}` : "graph made on the first run");
    if (!this.#live) parts.push("disposed");
    return `Executable(${this.mode} on ${this.device.spec}, ${parts.join("; ")})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}

/** The most steps that share a depth in the dependency DAG (depth: longest chain of hazards before a step). */
function widestLevel(deps: readonly (readonly number[])[]): number {
  const depth: number[] = [];
  const width = new Map<number, number>();
  let widest = 0;
  for (let i = 0; i < deps.length; i++) {
    let d = 0;
    for (const j of deps[i]!) d = Math.max(d, depth[j]! + 1);
    depth[i] = d;
    const w = (width.get(d) ?? 0) + 1;
    width.set(d, w);
    widest = Math.max(widest, w);
  }
  return widest;
}

/**
 * INVALID_HANDLE for buffer `b` of step `i`, disposed since the step was made, named as a launch
 * door names it: "step 0 (vadd): args[1] is a disposed buffer", or a copy's source or destination.
 */
function disposedStepBuffer(call: string, i: number, st: Step, b: Buffer): never {
  const op = st.op;
  const root = (x: Buffer) => x.allocation.address;
  let what = "a buffer it uses";
  if (op.kind === "kernel") {
    const j = op.args.findIndex((a) => a === b);
    if (j >= 0) what = `args[${j}]`;
  } else if (op.kind === "copy" || op.kind === "peer") what = op.dst === b || root(op.dst) === root(b) ? "its destination" : "its source";
  else what = "its destination";
  throw new GpuError(Status.INVALID_HANDLE, `${call}: step ${i} (${st.label}): ${what} is a disposed buffer`, { backend: "typescript", call });
}
