// Schedules: an ordered list of Steps (kernel launches, copies, memsets), each with the byte
// ranges it reads and writes, written once and run in any ExecMode:
//   Stream          every step issued on one stream, every run
//   Graph           captured on the first run, replayed after; changed scalars update the graph
//   Eager           one run, then the executable disposes itself
//   MultiStream(n)  steps spread over n streams by hazards on overlapping byte ranges
//                   (read-after-write, write-after-read, write-after-write), events only at
//                   cross-stream edges
// Every mode gives the results of running the steps one by one, in order.
import { N, check, addressOf } from "../ffi/native";
import { Status } from "../ffi/sys";
import { Buffer, HostBuffer, checkSize, fillPattern, type FillType, type HostData } from "./buffer";
import { Device } from "./device";
import { GpuError, describeValue, invalid, disposed, illegalState, options } from "./errors";
import { Event } from "./event";
import { CaptureMode, GraphExec } from "./capture";
import { Kernel, dim3, packArgs, type ArgArea, type ArgValue, type Dim3 } from "./kernel";
import { Stream } from "./stream";

// ---- byte ranges ---------------------------------------------------------------------------------

/** `bytes` bytes at `offset` inside the allocation whose base address is `base`. */
export interface ByteRange {
  readonly base: number;
  readonly offset: number;
  readonly bytes: number;
}

/** The bytes a buffer (or view) covers: its allocation's base plus its byteOffset. */
export function rangeOf(b: Buffer, offset = 0, bytes = b.byteLength - offset): ByteRange {
  return Object.freeze({ base: b.allocation.address, offset: b.byteOffset + offset, bytes });
}

/** True when the two ranges share at least one byte (empty ranges share none). */
export function overlaps(a: ByteRange, b: ByteRange): boolean {
  return a.base === b.base && a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

function anyOverlap(as: readonly ByteRange[], bs: readonly ByteRange[]): boolean {
  for (const a of as) for (const b of bs) if (overlaps(a, b)) return true;
  return false;
}

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
type FillOp = { kind: "fill"; buffer: Buffer; offset: number; bytes: number; pattern: number; elemSize: 1 | 2 | 4 };
type StepOp = KernelOp | CopyOp | FillOp;

// Validation scratch for packArgs (an explicit ArrayBuffer; its contents are never submitted).
const CHECK_AB = new ArrayBuffer(16384);
const CHECK_AREA: ArgArea = {
  u32: new Uint32Array(CHECK_AB),
  i32: new Int32Array(CHECK_AB),
  f32: new Float32Array(CHECK_AB),
  f64: new Float64Array(CHECK_AB),
  i64: new BigInt64Array(CHECK_AB),
};

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
    if (!(kernel instanceof Kernel)) invalid(call, "expected a Kernel");
    if (!cfg || typeof cfg !== "object") invalid(call, "expected a launch configuration { grid, block, args }");
    kernel.handle; // throws if its module is gone
    const dev = kernel.device;
    const grid = dim3(call, "grid", cfg.grid);
    const block = dim3(call, "block", cfg.block);
    const shared = cfg.sharedBytes ?? 0;
    if (!Number.isInteger(shared) || shared < 0) invalid(call, "sharedBytes must be a non-negative integer");
    packArgs(call, kernel.name, kernel.signature, cfg.args, dev.state.handle, CHECK_AREA, 0);
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
      { kind: "kernel", kernel, grid, block, sharedBytes: shared, args: Object.freeze(args) },
      dev,
      reads.map((b) => rangeOf(b)),
      writes.map((b) => rangeOf(b)),
      buffers,
      cfg.label ?? kernel.name,
    );
  }

  /** A device-to-device copy (the ranges may not overlap). Reads src's range, writes dst's. */
  static copy(dst: Buffer, src: Buffer, opts: CopyStepOptions = {}): Step {
    opts = options("Step.copy", opts);
    const call = "Step.copy";
    if (!isBuffer(dst) || !isBuffer(src)) invalid(call, "dst and src must be Buffers");
    if (dst.device.state.handle !== src.device.state.handle) invalid(call, `dst is on ${dst.device.spec}, src on ${src.device.spec}`);
    if (dst.disposed || src.disposed) disposed(call, "buffer");
    const so = checkSize(call, "srcOffset", opts.srcOffset ?? 0);
    const dO = checkSize(call, "dstOffset", opts.dstOffset ?? 0);
    const bytes = checkSize(call, "byte count", opts.bytes ?? src.byteLength - so);
    if (so + bytes > src.byteLength) rangeError(call, "src", so, bytes, src.byteLength);
    if (dO + bytes > dst.byteLength) rangeError(call, "dst", dO, bytes, dst.byteLength);
    const r = rangeOf(src, so, bytes), w = rangeOf(dst, dO, bytes);
    if (overlaps(r, w)) invalid(call, "source and destination ranges overlap");
    return new Step({ kind: "copy", dst, src, dstOffset: dO, srcOffset: so, bytes }, dst.device, [r], [w], [dst, src], opts.label ?? "copy");
  }

  /** A memset of `value` as elements of `type` (default "u8"). Writes its range. */
  static fill(buffer: Buffer, value: number, opts: FillStepOptions = {}): Step {
    opts = options("Step.fill", opts);
    const call = "Step.fill";
    if (!isBuffer(buffer)) invalid(call, "expected a Buffer");
    if (buffer.disposed) disposed(call, "buffer");
    const { pattern, size } = fillPattern(call, value, opts.type ?? "u8");
    const off = checkSize(call, "offset", opts.offset ?? 0);
    const bytes = checkSize(call, "byte count", opts.bytes ?? buffer.byteLength - off);
    if (off + bytes > buffer.byteLength) rangeError(call, "buffer", off, bytes, buffer.byteLength);
    if (bytes % size || (buffer.address + off) % size) invalid(call, `range is not aligned to ${size}-byte elements`);
    return new Step(
      { kind: "fill", buffer, offset: off, bytes, pattern, elemSize: size },
      buffer.device,
      [],
      [rangeOf(buffer, off, bytes)],
      [buffer],
      opts.label ?? "fill",
    );
  }

  /** True when `later` must wait for this step: RAW, WAR or WAW on overlapping bytes. */
  hazardWith(later: Step): boolean {
    return anyOverlap(later.reads, this.writes) || anyOverlap(later.writes, this.reads) || anyOverlap(later.writes, this.writes);
  }

  toString(): string {
    return `Step(${this.kind}: ${this.label})`;
  }
}

function rangeError(call: string, what: string, off: number, bytes: number, len: number): never {
  throw new GpuError(Status.INVALID_VALUE, `${call}: ${what} range [${off}, ${off + bytes}) is past the end (${len} bytes)`, {
    backend: "typescript",
    call,
  });
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
    return hazards(this.#steps);
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

/** Direct hazards of each step on earlier ones, by allocation, in O(accesses per allocation). */
function hazards(steps: readonly Step[]): number[][] {
  type Access = { step: number; offset: number; end: number; write: boolean };
  const byBase = new Map<number, Access[]>();
  const out: number[][] = [];
  for (let i = 0; i < steps.length; i++) {
    const st = steps[i]!;
    const deps = new Set<number>();
    const scan = (r: ByteRange, write: boolean) => {
      if (r.bytes === 0) return;
      const list = byBase.get(r.base);
      if (!list) return;
      const end = r.offset + r.bytes;
      for (const a of list) if ((write || a.write) && a.offset < end && r.offset < a.end) deps.add(a.step);
    };
    for (const r of st.reads) scan(r, false);
    for (const r of st.writes) scan(r, true);
    const push = (r: ByteRange, write: boolean) => {
      if (r.bytes === 0) return;
      let list = byBase.get(r.base);
      if (!list) byBase.set(r.base, (list = []));
      list.push({ step: i, offset: r.offset, end: r.offset + r.bytes, write });
    };
    for (const r of st.reads) push(r, false);
    for (const r of st.writes) push(r, true);
    out.push([...deps].sort((a, b) => a - b));
  }
  return out;
}

// ---- multi-stream plan -----------------------------------------------------------------------------

/** Where each step runs and which cross-stream waits order it; deterministic for a schedule. */
export interface StreamPlan {
  /** The stream index of each step. */
  readonly stream: readonly number[];
  /** For each step, the earlier steps (on other streams) whose completion event its stream waits on first. */
  readonly waits: readonly (readonly number[])[];
  /** Direct hazards of each step (see Schedule.dependencies). */
  readonly deps: readonly (readonly number[])[];
  /** Cross-stream waits per run between steps (not counting the per-run fork and join). */
  readonly eventCount: number;
  /** Streams that hold at least one step. */
  readonly usedStreams: readonly number[];
}

/**
 * Assign steps to `n` streams. A step goes to the stream of its latest dependency when that
 * stream's last step is already an ancestor of it (no independent work would queue in front);
 * else to another such free stream (an empty one, or one whose tail it depends on), preferring the
 * most recent tail; else to the least-loaded stream, lowest index first. Each step waits only on
 * the events of dependencies its stream does not already know to be complete (vector clocks).
 */
export function planStreams(steps: readonly Step[], n: number): StreamPlan {
  const deps = hazards(steps);
  const m = steps.length;
  const stream: number[] = new Array(m);
  const pos: number[] = new Array(m);
  const vc: Int32Array[] = new Array(m);
  const waits: number[][] = new Array(m);
  const count = new Int32Array(n); // steps per stream
  const tail = new Int32Array(n).fill(-1); // last step index per stream
  const atPos: number[][] = Array.from({ length: n }, () => []); // stream, position -> step
  const known: Int32Array[] = Array.from({ length: n }, () => new Int32Array(n).fill(-1));
  let eventCount = 0;
  for (let i = 0; i < m; i++) {
    const d = deps[i]!;
    const reach = new Int32Array(n).fill(-1); // what i must (transitively) come after, per stream
    const need = new Int32Array(n).fill(-1); // latest direct dependency, per stream
    for (const j of d) {
      const v = vc[j]!;
      for (let t = 0; t < n; t++) if (v[t]! > reach[t]!) reach[t] = v[t]!;
      if (pos[j]! > need[stream[j]!]!) need[stream[j]!] = pos[j]!;
    }
    const free = (t: number) => count[t] === 0 || reach[t]! >= count[t]! - 1;
    let s = -1;
    const latest = d.length ? d[d.length - 1]! : -1;
    if (latest >= 0 && free(stream[latest]!)) s = stream[latest]!;
    if (s < 0) {
      let best = -2;
      for (let t = 0; t < n; t++) if (free(t) && tail[t]! > best) (best = tail[t]!), (s = t);
    }
    if (s < 0) {
      s = 0;
      for (let t = 1; t < n; t++) if (count[t]! < count[s]!) s = t;
    }
    // waits: the latest direct dependency on each other stream, unless already known or implied
    const ks = known[s]!;
    const cand: number[] = [];
    for (let t = 0; t < n; t++) if (t !== s && need[t]! >= 0 && ks[t]! < need[t]!) cand.push(atPos[t]![need[t]!]!);
    const w: number[] = [];
    for (const j of cand) {
      const t = stream[j]!, p = pos[j]!;
      let implied = false;
      for (const k of cand) if (k !== j && vc[k]![t]! >= p) implied = true;
      if (!implied) w.push(j);
    }
    w.sort((a, b) => a - b);
    for (const j of w) {
      const v = vc[j]!;
      for (let t = 0; t < n; t++) if (v[t]! > ks[t]!) ks[t] = v[t]!;
    }
    eventCount += w.length;
    stream[i] = s;
    pos[i] = count[s]!;
    atPos[s]!.push(i);
    count[s]!++;
    tail[s] = i;
    ks[s] = pos[i]!;
    vc[i] = Int32Array.from(ks);
    waits[i] = w;
  }
  const usedStreams: number[] = [];
  for (let t = 0; t < n; t++) if (count[t]! > 0) usedStreams.push(t);
  return Object.freeze({ stream, waits, deps, eventCount, usedStreams });
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

/** Per-step issue data, flattened once at compile time. */
interface Issued {
  kind: 0 | 1 | 2; // kernel, copy, fill
  k: number; // kernel handle
  g0: number; g1: number; g2: number;
  b0: number; b1: number; b2: number;
  shared: number;
  argPtr: number;
  nargs: number;
  knode: number; // kernel node index in capture order
  dst: number;
  src: number;
  bytes: number;
  pattern: number;
  elemSize: number;
  count: number;
}

interface Staging {
  host: HostBuffer;
  ev: Event;
  used: boolean;
}

/** A schedule compiled for one device and ExecMode. */
export class Executable {
  readonly device: Device;
  readonly mode: ExecMode;
  readonly steps: readonly Step[];
  readonly captureMode: CaptureMode;
  readonly stats: ExecStats = { runs: 0, captures: 0, graphUpdates: 0, replays: 0 };
  /** The stream assignment (MultiStream; for other modes every step is on stream 0). */
  readonly plan: StreamPlan;

  #streams: Stream[] = [];
  #sh: number[] = [];
  #issued: Issued[] = [];
  #args: ArgValue[][] = [];
  #arena: ArrayBuffer;
  #area: ArgArea;
  #arenaPtr: number;
  #stepEvents: (Event | null)[] = [];
  #evh: number[] = [];
  #waitH: number[][] = [];
  #fork: Event | null = null;
  #joins: Event[] = [];
  #graph: GraphExec | null = null;
  #dirty = new Set<number>();
  #buffers: Buffer[];
  #kernels: Kernel[];
  #staging: Staging[] = [];
  #stageNext = 0;
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
    this.#buffers = [...new Set(steps.flatMap((s) => s.buffers))];
    this.#kernels = [...new Set(steps.flatMap((s) => (s.op.kind === "kernel" ? [s.op.kernel] : [])))];

    // Pack every kernel's arguments once into one arena that never moves.
    let slots = 0;
    for (const s of steps) if (s.op.kind === "kernel") slots += s.op.kernel.signature.length;
    this.#arena = new ArrayBuffer(Math.max(16384, slots * 8));
    this.#area = {
      u32: new Uint32Array(this.#arena),
      i32: new Int32Array(this.#arena),
      f32: new Float32Array(this.#arena),
      f64: new Float64Array(this.#arena),
      i64: new BigInt64Array(this.#arena),
    };
    this.#arenaPtr = addressOf(this.#arena);
    let at = 0, knode = 0;
    for (const s of steps) {
      const op = s.op;
      const it: Issued = { kind: 0, k: 0, g0: 0, g1: 0, g2: 0, b0: 0, b1: 0, b2: 0, shared: 0, argPtr: 0, nargs: 0, knode: -1, dst: 0, src: 0, bytes: 0, pattern: 0, elemSize: 0, count: 0 };
      if (op.kind === "kernel") {
        packArgs(call, op.kernel.name, op.kernel.signature, op.args, dh, this.#area, at);
        Object.assign(it, {
          kind: 0, k: op.kernel.handle, g0: op.grid[0], g1: op.grid[1], g2: op.grid[2], b0: op.block[0], b1: op.block[1], b2: op.block[2],
          shared: op.sharedBytes, argPtr: this.#arenaPtr + at * 8, nargs: op.kernel.signature.length, knode: knode++,
        });
        this.#args.push([...op.args]);
        at += op.kernel.signature.length;
      } else if (op.kind === "copy") {
        Object.assign(it, { kind: 1, dst: op.dst.address + op.dstOffset, src: op.src.address + op.srcOffset, bytes: op.bytes });
        this.#args.push([]);
      } else {
        Object.assign(it, { kind: 2, dst: op.buffer.address + op.offset, pattern: op.pattern, elemSize: op.elemSize, count: op.bytes / op.elemSize });
        this.#args.push([]);
      }
      this.#issued.push(it);
    }

    const n = mode.kind === "MultiStream" ? mode.streams : 1;
    this.plan =
      n > 1
        ? planStreams(steps, n)
        : Object.freeze({
            stream: steps.map(() => 0),
            waits: steps.map(() => []),
            deps: hazards(steps),
            eventCount: 0,
            usedStreams: steps.length ? [0] : [],
          });
    try {
      const used = Math.max(1, this.plan.usedStreams.length ? Math.max(...this.plan.usedStreams) + 1 : 1);
      for (let t = 0; t < used; t++) {
        const st = device.createStream({ nonBlocking: true });
        this.#streams.push(st);
        this.#sh.push(st.handle);
      }
      if (n > 1) {
        const waitedOn = new Set(this.plan.waits.flat());
        for (let i = 0; i < steps.length; i++) {
          const ev = waitedOn.has(i) ? device.createEvent({ timing: false }) : null;
          this.#stepEvents.push(ev);
          this.#evh.push(ev ? ev.handle : 0);
        }
        for (let i = 0; i < steps.length; i++) this.#waitH.push(this.plan.waits[i]!.map((j) => this.#evh[j]!));
        if (this.#streams.length > 1) {
          this.#fork = device.createEvent({ timing: false });
          for (let t = 1; t < this.#streams.length; t++) this.#joins.push(device.createEvent({ timing: false }));
        }
      }
    } catch (e) {
      this.#release();
      throw e;
    }
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
    const bs = this.#buffers;
    for (let i = 0; i < bs.length; i++) if (bs[i]!.disposed) disposed(call, "buffer used by a step");
    const ks = this.#kernels;
    for (let i = 0; i < ks.length; i++) if (ks[i]!.module.disposed) disposed(call, `module of kernel ${ks[i]!.name}`);
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
   * Graph mode the next run updates the captured graph in place instead of capturing again.
   */
  setArgs(stepIndex: number, args: readonly ArgValue[]): this {
    const call = "Executable.setArgs";
    if (!this.#live) disposed(call, "executable");
    const op = this.#kernelStep(call, stepIndex);
    const k = op.kernel;
    packArgs(call, k.name, k.signature, args, this.device.state.handle, CHECK_AREA, 0);
    const old = this.#args[stepIndex]!;
    for (let i = 0; i < k.signature.length; i++) {
      if (k.signature[i] !== "buffer") continue;
      const a = args[i] as Buffer, b = old[i] as Buffer;
      if (a !== b && (a.address !== b.address || a.byteLength !== b.byteLength))
        invalid(call, `${k.name}: argument ${i} is a buffer binding; it may not change range in a compiled schedule (its hazards depend on it); build a new schedule`);
    }
    const it = this.#issued[stepIndex]!;
    const at = (it.argPtr - this.#arenaPtr) / 8;
    packArgs(call, k.name, k.signature, args, this.device.state.handle, this.#area, at);
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
    const base = st.host.hostAddress;
    const s = this.#sh[0]!;
    let off = 0;
    for (const [b, data] of inputs) {
      const src = data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      bytes.set(src, off);
      if (src.byteLength) check(N.bg_memcpy_htod_async(s, b.address, base + off, src.byteLength), "bg_memcpy_htod_async", this.device.backend);
      off += (src.byteLength + 63) & ~63;
    }
    st.ev.record(this.#streams[0]!);
    st.used = true;
  }

  #issue(i: number, s: number): void {
    const it = this.#issued[i]!;
    let rc: number;
    if (it.kind === 0) rc = N.bg_launch(it.k, s, it.g0, it.g1, it.g2, it.b0, it.b1, it.b2, it.shared, it.argPtr, it.nargs);
    else if (it.kind === 1) rc = it.bytes ? N.bg_memcpy_dtod_async(s, it.dst, it.src, it.bytes) : 0;
    else rc = it.count ? N.bg_memset_async(s, it.dst, it.pattern, it.elemSize, it.count) : 0;
    if (rc !== 0) check(rc, it.kind === 0 ? "bg_launch" : it.kind === 1 ? "bg_memcpy_dtod_async" : "bg_memset_async", this.device.backend);
  }

  #capture(): void {
    const st = this.#streams[0]!;
    st.beginCapture(this.captureMode);
    try {
      const s = this.#sh[0]!;
      for (let i = 0; i < this.#issued.length; i++) this.#issue(i, s);
    } catch (e) {
      try {
        st.endCapture().dispose();
      } catch {
        /* already discarded by the shim */
      }
      throw e;
    }
    const graph = st.endCapture();
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
        for (const i of this.#dirty) {
          const it = this.#issued[i]!;
          g.setPackedArgs(it.knode, it.argPtr, it.nargs);
          this.stats.graphUpdates++;
        }
        this.#dirty.clear();
      }
      if (total) this.#upload(opts.inputs!, total);
      g.launch(this.#streams[0]!);
      this.stats.replays++;
    } else if (this.#streams.length === 1) {
      if (total) this.#upload(opts.inputs!, total);
      const s = this.#sh[0]!;
      const n = this.#issued.length;
      for (let i = 0; i < n; i++) this.#issue(i, s);
    } else {
      if (total) this.#upload(opts.inputs!, total);
      this.#runMulti();
    }
    this.stats.runs++;
    if (kind === "Eager") {
      const p = this.#streams[0]!.done().finally(() => this.dispose());
      p.catch(() => {});
      this.#eagerDone = p;
    }
    return this;
  }

  #runMulti(): void {
    const sh = this.#sh;
    const backend = this.device.backend;
    const s0 = sh[0]!;
    const fork = this.#fork!.handle;
    let rc = N.bg_event_record(fork, s0);
    if (rc !== 0) check(rc, "bg_event_record", backend);
    for (let t = 1; t < sh.length; t++) {
      rc = N.bg_stream_wait_event(sh[t]!, fork);
      if (rc !== 0) check(rc, "bg_stream_wait_event", backend);
    }
    const stream = this.plan.stream;
    const evh = this.#evh;
    const waitH = this.#waitH;
    for (let i = 0; i < this.#issued.length; i++) {
      const s = sh[stream[i]!]!;
      const w = waitH[i]!;
      for (let k = 0; k < w.length; k++) {
        rc = N.bg_stream_wait_event(s, w[k]!);
        if (rc !== 0) check(rc, "bg_stream_wait_event", backend);
      }
      this.#issue(i, s);
      const e = evh[i]!;
      if (e) {
        rc = N.bg_event_record(e, s);
        if (rc !== 0) check(rc, "bg_event_record", backend);
      }
    }
    for (let t = 1; t < sh.length; t++) {
      const j = this.#joins[t - 1]!.handle;
      rc = N.bg_event_record(j, sh[t]!);
      if (rc !== 0) check(rc, "bg_event_record", backend);
      rc = N.bg_stream_wait_event(s0, j);
      if (rc !== 0) check(rc, "bg_stream_wait_event", backend);
    }
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
    for (const e of this.#stepEvents) if (e) quiet(() => e.dispose());
    if (this.#fork) quiet(() => this.#fork!.dispose());
    for (const e of this.#joins) quiet(() => e.dispose());
    for (const st of this.#staging) {
      quiet(() => st.ev.dispose());
      quiet(() => st.host.dispose());
    }
    this.#staging = [];
    for (const s of this.#streams) quiet(() => s.dispose());
    this.#streams = [];
    this.#sh = [];
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  toString(): string {
    return `Executable(${this.mode}, ${this.steps.length} steps${this.#live ? "" : ", disposed"})`;
  }
}
