// Stream capture and graphs. A created stream records the work issued to it (and to the streams
// that join it through events) into a Graph instead of running it; the Graph instantiates into a
// GraphExec that replays the whole of it with one launch. A kernel node's arguments can be
// replaced in the exec without capturing again (cuGraphExecKernelNodeSetParams on CUDA; the same
// in the CPU shim, which replays an exec in one C loop).
import { addressOf } from "../ffi/result";
import { CaptureModeId } from "../ffi/constants";
import { captureEnded, type DeviceRef, type DeviceState } from "./device_state";
import { GpuError, Status, describeGot, invalid, options, type OptionKeys } from "./errors";
import { beforeFirstCapture } from "./hostfn";
import type { Kernel } from "./kernel";
import { areaOf, checkDevice, packArgs, type ArgArea, type ArgsOf, type Signature } from "./launch";
import { INSPECT, plural } from "./inspect";
import { Holds } from "./lifetime";
import { RELEASE, Resource } from "./resource";

// The keys each options argument may have (errors.ts `options` refuses any other).
const CAPTURE_KEYS: OptionKeys<{ mode?: CaptureMode }> = { mode: true };

/**
 * How a capture treats calls that are illegal while it is open (synchronize, a synchronous copy,
 * an allocation, querying the capturing stream). Values equal CUDA's `CUstreamCaptureMode`.
 *
 * The default is `Global`: it is what the CUDA runtime and PyTorch default to, and it is the
 * safest. Any such call from any thread invalidates the capture, so a call that would have
 * corrupted the recorded work (or silently run outside it) is reported at `endCapture()` instead.
 */
export class CaptureMode {
  /** Illegal calls from any thread invalidate the capture (CU_STREAM_CAPTURE_MODE_GLOBAL). */
  static readonly Global = new CaptureMode("Global", CaptureModeId.GLOBAL);
  /** Only illegal calls from the capturing thread invalidate it (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL). */
  static readonly ThreadLocal = new CaptureMode("ThreadLocal", CaptureModeId.THREAD_LOCAL);
  /** Nothing invalidates it: the caller guarantees no interference (CU_STREAM_CAPTURE_MODE_RELAXED). */
  static readonly Relaxed = new CaptureMode("Relaxed", CaptureModeId.RELAXED);
  /** `Global` (see the class comment for why). */
  static readonly default = CaptureMode.Global;

  readonly name: "Global" | "ThreadLocal" | "Relaxed";
  readonly #value: 0 | 1 | 2;

  private constructor(name: "Global" | "ThreadLocal" | "Relaxed", value: 0 | 1 | 2) {
    this.name = name;
    this.#value = value;
    Object.freeze(this);
  }

  /** The `CUstreamCaptureMode` value: 0 Global, 1 ThreadLocal, 2 Relaxed. */
  toCuda(): 0 | 1 | 2 {
    return this.#value;
  }

  toString(): string {
    return this.name;
  }

  [INSPECT](): string {
    return `CaptureMode.${this.name}`;
  }

  static values(): readonly CaptureMode[] {
    return [CaptureMode.Global, CaptureMode.ThreadLocal, CaptureMode.Relaxed];
  }
}

export type CaptureStatus = "None" | "Active" | "Invalidated";

/** What capturing and replaying need of a stream (a Stream from device.createStream()). */
export interface CaptureStream {
  readonly handle: number;
  readonly device: DeviceRef;
  readonly isDefault: boolean;
  readonly disposed: boolean;
  captureStatus(): CaptureStatus;
  beginCapture(mode?: CaptureMode): unknown;
  endCapture(): Graph;
}

/** A captured graph: a DAG of the work issued while the capture was open. */
export class Graph extends Resource {
  readonly device: DeviceRef;
  /** What the captured work uses: kept alive (and its memory allocated) while the graph lives. */
  readonly #holds = new Holds();
  readonly #captured: Captured;

  /** @internal use `stream.endCapture()` or `Graph.capture()`. */
  constructor(device: DeviceRef, handle: number, captured: Captured = { uses: [], kernels: null }) {
    super(device.state, handle, "graph");
    this.device = device;
    this.#captured = captured;
    for (const u of captured.uses) this.#holds.add(u);
    this.track("graph", this.#holds.drop);
  }

  get handle(): number {
    return this.liveHandle;
  }

  #counts(): [number, number] {
    return this.dev.api.graph_node_count(this.handle);
  }

  /** Nodes of the graph (kernels, copies, memsets, host functions, event waits). */
  get nodeCount(): number {
    return this.#counts()[0];
  }

  /** Kernel nodes; `GraphExec.setKernelArgs` indexes them in capture order. */
  get kernelNodeCount(): number {
    return this.#counts()[1];
  }

  /** Make an executable graph; the Graph itself may be disposed afterwards. */
  instantiate(): GraphExec {
    const h = this.handle;
    const kernels = this.kernelNodeCount;
    const exec = this.dev.api.graph_instantiate(h);
    const c = this.#captured;
    return new GraphExec(this.device, exec, kernels, { uses: c.uses, kernels: c.kernels?.length === kernels ? c.kernels : null });
  }

  protected [RELEASE](): void {
    const handle = this.rawHandle;
    try {
      if (this.dev.open) this.dev.api.graph_destroy(handle);
    } finally {
      this.#holds.drop();
    }
  }

  /** "Graph(cpu, 5 nodes, 3 kernel nodes)"; "Graph(cpu, disposed)" once destroyed. */
  override toString(): string {
    if (this.disposed) return `Graph(${this.device.spec}, disposed)`;
    let counts: [number, number];
    try {
      counts = this.#counts();
    } catch {
      return `Graph(${this.device.spec})`;
    }
    return `Graph(${this.device.spec}, ${plural(counts[0], "node")}, ${plural(counts[1], "kernel node")})`;
  }

  /**
   * Capture what `fn` issues on `stream` (and on the streams it forks through events) into a
   * Graph. If `fn` throws (or its promise rejects), the capture is ended and discarded, the stream
   * is left out of capture and usable, and `fn`'s error is rethrown.
   */
  static capture<S extends CaptureStream>(stream: S, fn: (stream: S) => Promise<void>, opts?: { mode?: CaptureMode }): Promise<Graph>;
  static capture<S extends CaptureStream>(stream: S, fn: (stream: S) => void, opts?: { mode?: CaptureMode }): Graph;
  static capture<S extends CaptureStream>(stream: S, fn: (stream: S) => unknown, opts: { mode?: CaptureMode } = {}): Graph | Promise<Graph> {
    if (typeof fn !== "function") invalid("Graph.capture", "fn must be a function");
    if (stream === null || typeof stream !== "object" || typeof (stream as CaptureStream).beginCapture !== "function")
      invalid("Graph.capture", `stream must be a Stream, got ${describeGot(stream)}`);
    opts = options("Graph.capture", opts, CAPTURE_KEYS);
    stream.beginCapture(opts.mode ?? CaptureMode.Global);
    let result: unknown;
    try {
      result = fn(stream);
    } catch (e) {
      abandon(stream);
      throw e;
    }
    if (result && typeof (result as Promise<unknown>).then === "function") {
      return (result as Promise<unknown>).then(
        () => stream.endCapture(),
        (e) => {
          abandon(stream);
          throw e;
        },
      );
    }
    return stream.endCapture();
  }
}

/** End a capture that is being given up, dropping its graph and any error ending it raises. */
function abandon(stream: CaptureStream): void {
  if (stream.disposed) return;
  try {
    if (stream.captureStatus() === "None") return;
  } catch {
    return;
  }
  try {
    stream.endCapture().dispose();
  } catch {
    /* invalidated or unjoined: the shim has already discarded it */
  }
}

// Packing area for setKernelArgs: an explicit 16 KiB ArrayBuffer (Bun never moves it).
const SET_AB = new ArrayBuffer(16384);
const SET_AREA: ArgArea = areaOf(SET_AB);
const SET_PTR = addressOf(SET_AB);

/** An instantiated graph: launch it on any created stream of its device, as often as wanted. */
export class GraphExec extends Resource {
  readonly device: DeviceRef;
  /** Kernel nodes, in capture order. */
  readonly kernelNodeCount: number;
  #replays = 0;
  /**
   * Every buffer and kernel a replay can touch (captured, or set by setKernelArgs): kept alive,
   * and a disposed buffer's memory stays allocated, until the exec is disposed or collected.
   */
  readonly #holds = new Holds();
  /** The same, as a list: a launch on a non-blocking stream tells the stream what it uses (usedBy). */
  readonly #uses = new Set<object>();
  /** The kernel of each kernel node in capture order, when known. */
  readonly #kernels: readonly Kernel[] | null;
  /** Every kernel captured (to check setKernelArgs when the node order is not known). */
  readonly #kernelSet: Set<Kernel>;

  /** @internal use `graph.instantiate()`. */
  constructor(device: DeviceRef, handle: number, kernelNodes: number, captured: Captured = { uses: [], kernels: null }) {
    super(device.state, handle, "graph exec");
    this.device = device;
    this.kernelNodeCount = kernelNodes;
    this.#kernels = captured.kernels;
    this.#kernelSet = new Set(captured.uses.filter(isKernel));
    for (const u of captured.uses) this.#holds.add(u);
    for (const u of captured.uses) this.#uses.add(u);
    this.track("exec", this.#holds.drop);
  }

  get handle(): number {
    return this.liveHandle;
  }

  /** How many times this exec has been launched. */
  get replayCount(): number {
    return this.#replays;
  }

  #stream(call: string, stream: CaptureStream): number {
    if (!stream || typeof stream !== "object" || !("device" in stream)) invalid(call, "expected a Stream");
    if (stream.device.state.handle !== this.device.state.handle) invalid(call, `stream of another device (${stream.device.spec})`);
    return stream.handle;
  }

  /** Enqueue one replay of the whole graph on `stream`. */
  launch(stream: CaptureStream): this {
    const x = this.handle;
    const s = this.#stream("GraphExec.launch", stream);
    this.dev.api.graph_launch(x, s);
    this.#replays++;
    // a later host write into a buffer the replay uses waits for it (non-blocking streams; the
    // driver orders the others)
    const st = stream as CaptureStream & { nonBlocking?: boolean; usedBy?(work: string, uses: Iterable<unknown>): void };
    if (st.nonBlocking === true) st.usedBy?.("GraphExec.launch", this.#uses);
    return this;
  }

  /** Prepare the exec on `stream` so the first launch costs no more than later ones. */
  upload(stream: CaptureStream): this {
    const x = this.handle;
    const s = this.#stream("GraphExec.upload", stream);
    this.dev.api.graph_upload(x, s);
    return this;
  }

  /**
   * Replace the arguments of the `index`-th kernel node (capture order) with `args`, packed by
   * `kernel`'s signature: scalars and buffer bindings alike. Launches already enqueued keep the
   * arguments they were launched with.
   */
  setKernelArgs<S extends Signature>(index: number, kernel: Kernel<S>, args: ArgsOf<NoInfer<S>>): this {
    const call = "GraphExec.setKernelArgs";
    this.handle; // throws first if the exec or its device is gone
    if (!Number.isInteger(index) || index < 0 || index >= this.kernelNodeCount)
      invalid(call, `kernel node ${String(index)} out of range (the graph has ${this.kernelNodeCount})`);
    if (!kernel || typeof kernel !== "object" || !Array.isArray((kernel as Kernel).signature)) invalid(call, "expected a Kernel");
    checkDevice(call, kernel, this.device);
    const node = this.#kernels?.[index];
    // Node order unknown (overlapping captures, commands from an encoder): the kernel must at
    // least be one captured, or of a module whose commands were captured.
    if (node ? !sameKernel(node, kernel) : this.#kernelSet.size > 0 && !this.#holds.has(kernel.module) && ![...this.#kernelSet].some((k) => sameKernel(k, kernel)))
      invalid(
        call,
        node
          ? `kernel node ${index} runs ${describeKernel(node)}, not ${describeKernel(kernel)}: arguments are packed by the node's own kernel`
          : `${describeKernel(kernel)} is not a kernel of this graph`,
      );
    kernel.handle; // throws if its module is disposed
    packArgs(call, kernel, args, SET_AREA, 0); // the launch module's argument rules, as every door has them
    this.setPackedArgs(index, SET_PTR, kernel.signature.length);
    for (const a of args)
      if (a !== null && typeof a === "object") {
        this.#holds.add(a);
        this.#uses.add(a);
      }
    return this;
  }

  /** @internal set already-packed 8-byte slots at `address` (validated by the caller). */
  setPackedArgs(index: number, address: number, nargs: number): void {
    for (const [what, v] of [["index", index], ["address", address], ["nargs", nargs]] as const)
      if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0 || (what !== "address" && v > 0xffffffff))
        invalid("GraphExec.setPackedArgs", `${what} must be a non-negative integer, got ${describeGot(v)}`);
    this.dev.api.graph_exec_set_kernel_args(this.handle, index, address, nargs);
  }

  /**
   * Destroy the exec. Launches already enqueued still complete. Buffers disposed while the exec
   * used them are freed now.
   */
  protected [RELEASE](): void {
    const handle = this.rawHandle;
    try {
      if (this.dev.open) this.dev.api.graph_exec_destroy(handle);
    } finally {
      this.#holds.drop();
    }
  }

  /** "GraphExec(cpu, 3 kernel nodes: vadd, saxpy; launched 2 times)"; ", disposed" once destroyed. */
  override toString(): string {
    const names = this.#kernels ? [...new Set(this.#kernels.map((k) => k.name))] : [];
    const shown = names.length > 4 ? `${names.slice(0, 4).join(", ")} and ${names.length - 4} more` : names.join(", ");
    const launched = this.#replays === 1 ? "launched once" : `launched ${this.#replays} times`;
    return `GraphExec(${this.device.spec}, ${plural(this.kernelNodeCount, "kernel node")}${shown ? `: ${shown}` : ""}; ${launched}${this.disposed ? ", disposed" : ""})`;
  }
}

/** What a capture recorded for its graph to keep (see DeviceState.captureLog). */
interface Captured {
  uses: readonly object[];
  kernels: readonly Kernel[] | null;
}

function isKernel(o: object): o is Kernel {
  return Array.isArray((o as Kernel).signature) && typeof (o as Kernel).name === "string" && "module" in o;
}

/** The same kernel: one object, or one name and signature in one module. */
function sameKernel(a: Kernel, b: Kernel): boolean {
  return a === b || (a.module === b.module && a.name === b.name && a.signature.length === b.signature.length && a.signature.every((t, i) => t === b.signature[i]));
}

function describeKernel(k: Kernel): string {
  return `${k.name}(${k.signature.join(", ")})`;
}

/** @internal Begin a capture on `stream` (validated here, before the FFI). */
export function beginCapture(stream: CaptureStream, mode: CaptureMode): void {
  const call = "Stream.beginCapture";
  if (!(mode instanceof CaptureMode)) invalid(call, `mode must be a CaptureMode (Global, ThreadLocal or Relaxed), got ${describeGot(mode)}`);
  const s = stream.handle;
  if (stream.isDefault)
    throw new GpuError(
      Status.STREAM_CAPTURE_UNSUPPORTED,
      `${call}: the device's default stream cannot be captured; capture on a stream from device.createStream()`,
      { backend: "typescript", call },
    );
  const state = stream.device.state;
  beforeFirstCapture(); // (host functions' words allocated while no capture forbids it)
  state.api.stream_begin_capture(s, mode.toCuda());
  if (state.captures === 0 || !state.captureLog) state.captureLog = { uses: new Set(), holds: new Holds(), kernels: [], overlapped: state.captures > 0 };
  else state.captureLog.overlapped = true;
  state.captures++;
}

/** @internal End the capture begun on `stream` and return its Graph. */
export function endCapture(stream: CaptureStream): Graph {
  const s = stream.handle;
  const state = stream.device.state;
  let graph = 0;
  let failure: unknown = null;
  try {
    graph = state.api.stream_end_capture(s);
  } catch (e) {
    failure = e;
  }
  const captured = takeLog(state);
  // Hold what the graph uses before the capture's record lets go of it (captureEnded, when this
  // was the last open capture): a buffer disposed during the capture must stay allocated for the
  // graph, and only its Graph (or nothing) keeps it from then on.
  const bridge = new Holds();
  try {
    for (const u of captured.uses) bridge.add(u);
    // The capture is over unless the stream is still capturing (a refused end from another thread).
    if (!failure || !stillCapturing(state, s)) captureEnded(state);
    if (failure) throw failure;
    return new Graph(stream.device, graph, captured);
  } finally {
    bridge.drop();
  }
}

/** Whether native stream `s` is still capturing (an unreadable status counts as not). */
function stillCapturing(state: DeviceState, s: number): boolean {
  try {
    return state.api.stream_capture_status(s) !== 0;
  } catch {
    return false;
  }
}

/** What the ending capture's graph keeps: everything logged while captures were open. */
function takeLog(state: DeviceState): Captured {
  const log = state.captureLog;
  if (!log) return { uses: [], kernels: null };
  return { uses: [...log.uses], kernels: log.overlapped ? null : (log.kernels.slice() as Kernel[]) };
}
