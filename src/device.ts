// Device: one opened backend device. Device.open("cpu" | "cuda[:N]" | "metal[:N]"),
// Device.default() (CUDA, then Metal, then CPU; BUNGPU_DEVICE overrides), Device.list().
import { N, check, slot, readPtr, readI32, readU64, scratchU8, MSG_AREA, readMsg } from "../ffi/native";
import { Backend, PROPS_SIZE, Status, type BackendName } from "../ffi/sys";
import { GpuError, invalid, disposed, options } from "./errors";
import { beforeBlockingWait, raiseDeviceFailures } from "./hostfn";
import type { Buffer, HostBuffer } from "./buffer";
import type { Stream, StreamOptions } from "./stream";
import type { Event, EventOptions } from "./event";
import type { Holds } from "./lifetime";

export interface DeviceProps {
  name: string;
  backend: BackendName;
  ordinal: number;
  computeUnits: number;
  /** CUDA compute capability, e.g. [9, 0]; [0, 0] elsewhere. */
  computeCapability: [number, number];
  maxThreadsPerBlock: number;
  warpSize: number;
  unifiedMemory: boolean;
  canMapHostMemory: boolean;
  concurrentKernels: boolean;
  maxSharedBytesPerBlock: number;
  totalMemory: number;
}

export interface BackendInfo {
  backend: BackendName;
  available: boolean;
  devices: number;
  /** Why it is unavailable (naming what was looked for), or a note. */
  message: string;
}

/** Shared state a device's resources hold, so a finalizer never touches a closed device. */
export interface DeviceState {
  handle: number;
  open: boolean;
  backend: BackendName;
  /**
   * Long-lived users of the device (a running RingKernel) that must be stopped before it closes,
   * held weakly so they can still be collected.
   */
  dependents: Set<WeakRef<{ dispose(): void }>>;
  /** Streams created on this device, held weakly: what device.done() waits for. */
  streams: Set<WeakRef<{ done(): Promise<void>; readonly disposed: boolean; readonly handle: number; readonly nonBlocking: boolean }>>;
  /**
   * Native handles of streams running a persistent ring kernel, which never finishes on its own:
   * device-wide waits leave them out (a RingKernel is stopped with stop(), not waited for).
   */
  residentStreams: Set<number>;
  /** Captures begun through Stream.beginCapture and not yet ended, on any stream of this device. */
  captures: number;
  /**
   * Releases by finalisers that ran while a capture was open: freeing then is illegal in a capture
   * (it would invalidate it), so they wait here and run when the last capture ends.
   */
  deferredReleases: (() => void)[];
  /**
   * While a capture is open: what the captured work uses (buffers, kernels, host buffers) and the
   * kernels of its kernel nodes in capture order, so the Graph and its GraphExec keep them alive.
   */
  captureLog: CaptureLog | null;
}

/** What the work captured while captures were open uses; see DeviceState.captureLog. */
export interface CaptureLog {
  uses: Set<object>;
  /**
   * A counted use of each of `uses`, taken when the work was captured: a buffer disposed while
   * the capture is open stays allocated until the capture's graph takes over (endCapture) or the
   * last capture ends without one.
   */
  holds: Holds;
  /** Kernels launched into a capture, in order: the kernel nodes, unless captures overlapped. */
  kernels: object[];
  /** Another capture began while one was open: `kernels` mixes both, so no node order is known. */
  overlapped: boolean;
}

/**
 * @internal Work was just enqueued on the native stream `stream`: if it is being captured, the
 * graph must keep `kernel` and `uses` alive (a replay reads them long after this call).
 */
export function noteCaptured(state: DeviceState, stream: number, kernel: object | null, uses: readonly unknown[]): void {
  const log = state.captureLog;
  if (!log) return;
  if (N.bg_stream_capture_status(stream, slot(0)) !== 0 || readI32(0) === 0) return;
  if (kernel) {
    log.kernels.push(kernel);
    log.uses.add(kernel);
    log.holds.add(kernel);
  }
  for (const u of uses)
    if (u !== null && typeof u === "object") {
      log.uses.add(u);
      log.holds.add(u);
    }
}

/** A finaliser's release: now, or when the device's open captures have ended. */
export function releaseOutsideCapture(state: DeviceState, release: () => void): void {
  if (state.captures > 0) state.deferredReleases.push(release);
  else release();
}

/** A capture on the device ended: run the finalisers' releases it held back. */
export function captureEnded(state: DeviceState): void {
  if (state.captures > 0) state.captures--;
  if (state.captures === 0 && state.captureLog) {
    const log = state.captureLog;
    state.captureLog = null;
    log.holds.drop(); // the graphs made by endCapture took their own holds first
  }
  if (state.captures > 0 || state.deferredReleases.length === 0) return;
  const list = state.deferredReleases.splice(0);
  for (const f of list) {
    try {
      f();
    } catch {
      /* a finaliser's release has no caller to report to */
    }
  }
}

const BACKEND_NAMES: BackendName[] = ["cpu", "cuda", "metal"];

// Late-bound constructors, set by buffer.ts / stream.ts / event.ts to avoid import cycles.
export const factories: {
  alloc?: (d: Device, bytes: number) => Buffer;
  /**
   * Free the buffers and host buffers allocated through a Device object being disposed; what a
   * graph still replays passes to `heir` (another open object on the native device), if any.
   */
  releaseMemory?: (state: DeviceState, heir: DeviceState | null) => void;
  allocHost?: (d: Device, bytes: number, mapped: boolean) => HostBuffer;
  stream?: (d: Device, opts: StreamOptions) => Stream;
  defaultStream?: (d: Device) => Stream;
  event?: (d: Device, opts: EventOptions) => Event;
} = {};

function parseSpec(spec: string): { backend: BackendName; ordinal: number } {
  const m = /^(cpu|cuda|metal)(?::(\d+))?$/.exec(spec.trim().toLowerCase());
  if (!m) invalid("Device.open", `unknown device "${spec}" (want "cpu", "cuda", "cuda:N", "metal" or "metal:N")`);
  return { backend: m[1] as BackendName, ordinal: m[2] ? Number(m[2]) : 0 };
}

let defaultDevice: Device | undefined;

/** The stream sets of each open native device, shared by every Device object opened on it. */
const sharedByHandle = new Map<number, { streams: DeviceState["streams"]; residentStreams: Set<number>; opened: number; states: Set<DeviceState> }>();

export class Device {
  readonly state: DeviceState;
  readonly ordinal: number;
  #props: DeviceProps | undefined;
  #defaultStream: Stream | undefined;

  private constructor(handle: number, backend: BackendName, ordinal: number) {
    // Device objects opened on one native device share its stream sets: a wait of one covers the
    // streams (and host functions) of all, so none blocks on work only another one would service.
    let shared = sharedByHandle.get(handle);
    if (!shared) sharedByHandle.set(handle, (shared = { streams: new Set(), residentStreams: new Set(), opened: 0, states: new Set() }));
    shared.opened++;
    this.state = { handle, open: true, backend, dependents: new Set(), streams: shared.streams, residentStreams: shared.residentStreams, captures: 0, deferredReleases: [], captureLog: null };
    shared.states.add(this.state);
    this.ordinal = ordinal;
  }

  /** Every backend, whether it loaded, how many devices it has, and why not. */
  static backends(): BackendInfo[] {
    return BACKEND_NAMES.map((b) => {
      scratchU8.fill(0, 1024, 1536);
      check(N.bg_backend_info(Backend[b], slot(0), slot(1), MSG_AREA, 512), "bg_backend_info");
      return { backend: b, available: readI32(0) === 1, devices: readI32(1), message: readMsg() };
    });
  }

  /** Device specs that can be opened here, e.g. ["cuda:0", "cpu"]. */
  static list(): string[] {
    const out: string[] = [];
    for (const b of Device.backends())
      for (let i = 0; i < b.devices; i++) out.push(b.backend === "cpu" && i === 0 ? "cpu" : `${b.backend}:${i}`);
    return out;
  }

  static open(spec: string): Device {
    if (typeof spec !== "string") invalid("Device.open", `spec must be a string, got ${typeof spec}`);
    const { backend, ordinal } = parseSpec(spec);
    check(N.bg_device_open(Backend[backend], ordinal, slot(0)), "bg_device_open", backend);
    return new Device(readPtr(0), backend, ordinal);
  }

  /** BUNGPU_DEVICE if set; else the first of CUDA, Metal, CPU that opens. Shared; do not dispose. */
  static default(): Device {
    if (defaultDevice?.state.open) return defaultDevice;
    const env = process.env.BUNGPU_DEVICE;
    if (env) {
      defaultDevice = Device.open(env);
      return defaultDevice;
    }
    const errors: string[] = [];
    for (const spec of ["cuda:0", "metal", "cpu"]) {
      try {
        defaultDevice = Device.open(spec);
        return defaultDevice;
      } catch (e) {
        errors.push(`${spec}: ${(e as Error).message}`);
      }
    }
    throw new GpuError(Status.NO_DEVICE, `no device could be opened:\n  ${errors.join("\n  ")}`, {
      call: "Device.default",
    });
  }

  get handle(): number {
    if (!this.state.open) disposed("Device", "device");
    return this.state.handle;
  }

  get backend(): BackendName {
    return this.state.backend;
  }

  get disposed(): boolean {
    return !this.state.open;
  }

  /** "cpu", "cuda:0", "metal:0". */
  get spec(): string {
    return this.backend === "cpu" && this.ordinal === 0 ? "cpu" : `${this.backend}:${this.ordinal}`;
  }

  get props(): DeviceProps {
    if (this.#props) return this.#props;
    const buf = new Uint8Array(PROPS_SIZE);
    check(N.bg_device_props_get(this.handle, buf), "bg_device_props_get", this.backend);
    const dv = new DataView(buf.buffer);
    const end = buf.indexOf(0);
    const i = (k: number) => dv.getInt32(256 + 4 * k, true);
    this.#props = {
      name: new TextDecoder().decode(buf.subarray(0, end < 0 ? 256 : Math.min(end, 256))),
      backend: BACKEND_NAMES[i(0)] ?? this.backend,
      ordinal: i(1),
      computeUnits: i(2),
      computeCapability: [i(3), i(4)],
      maxThreadsPerBlock: i(5),
      warpSize: i(6),
      unifiedMemory: i(7) !== 0,
      canMapHostMemory: i(8) !== 0,
      concurrentKernels: i(9) !== 0,
      maxSharedBytesPerBlock: i(10),
      totalMemory: Number(dv.getBigUint64(304, true)),
    };
    return this.#props;
  }

  get name(): string {
    return this.props.name;
  }

  memInfo(): { free: number; total: number } {
    check(N.bg_device_mem_info(this.handle, slot(0), slot(1)), "bg_device_mem_info", this.backend);
    return { free: readU64(0), total: readU64(1) };
  }

  /**
   * Wait for all work on the device. Blocking; done() is the non-blocking twin. TypeScript host
   * functions queued on its streams run meanwhile (the streams wait on this thread for them).
   * The stream of a running persistent RingKernel is left out (its kernel ends only when the
   * ring is stopped): then each other stream is synchronized in turn instead of the device.
   */
  synchronize(): void {
    const h = this.handle;
    const all = this.#waitedHandles();
    beforeBlockingWait("Device.synchronize", (s) => all.includes(s), () => idle(all));
    if (this.state.residentStreams.size === 0) check(N.bg_device_synchronize(h), "bg_device_synchronize", this.backend);
    else for (const s of all) check(N.bg_stream_synchronize(s), "bg_stream_synchronize", this.backend);
    raiseDeviceFailures("Device.synchronize", h); // what host functions of its streams threw
  }

  /** The streams a device-wide wait covers: all but those running a persistent ring kernel. */
  #waitedHandles(): number[] {
    const resident = this.state.residentStreams;
    return this.#streamHandles(false).filter((s) => !resident.has(s));
  }

  /** The live streams created on this device; forgets the ones collected or disposed. */
  #liveStreams(): { done(): Promise<void>; readonly handle: number; readonly nonBlocking: boolean }[] {
    const out = [];
    for (const ref of this.state.streams) {
      const s = ref.deref();
      if (!s || s.disposed) this.state.streams.delete(ref);
      else out.push(s);
    }
    return out;
  }

  /** Native handles of the default stream and the live streams (only blocking ones if asked). */
  #streamHandles(blockingOnly: boolean): number[] {
    const out = [this.defaultStream.handle];
    for (const s of this.#liveStreams()) if (!(blockingOnly && s.nonBlocking)) out.push(s.handle);
    return out;
  }

  /**
   * @internal Before a synchronous copy or memset: it is ordered after the default stream's work
   * and (CUDA and CPU: the legacy default stream) every blocking stream's, so host functions
   * queued there run first, and a call from inside one of them is refused instead of hanging.
   */
  beforeSyncCopy(call: string): void {
    const waited = this.backend === "metal" ? [this.defaultStream.handle] : this.#streamHandles(true);
    beforeBlockingWait(call, (s) => waited.includes(s), () => idle(waited));
  }

  /**
   * Resolves when the work queued so far on every stream of this device (the default stream
   * and each one created through bungpu) has finished; never blocks the event loop. As with
   * synchronize(), the stream of a running persistent RingKernel is left out.
   */
  async done(): Promise<void> {
    const resident = this.state.residentStreams;
    const settled = await Promise.allSettled([this.defaultStream, ...this.#liveStreams().filter((s) => !resident.has(s.handle))].map((s) => s.done()));
    // Every stream's failure is reported (Promise.all would drop all but the first).
    const failed = settled.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
    if (failed.length === 1) throw failed[0];
    if (failed.length > 1) {
      const first = failed[0] instanceof GpuError ? failed[0].code : Status.LAUNCH_FAILED;
      const e = new GpuError(first, `Device.done: ${failed.length} streams failed: ${failed.map((f) => (f instanceof Error ? f.message : String(f))).join(" | ")}`, { backend: "typescript", call: "Device.done" });
      (e as { cause?: unknown }).cause = failed;
      throw e;
    }
    raiseDeviceFailures("Device.done", this.state.handle);
  }

  get defaultStream(): Stream {
    if (!this.#defaultStream) this.#defaultStream = factories.defaultStream!(this);
    return this.#defaultStream;
  }

  alloc(bytes: number): Buffer {
    return factories.alloc!(this, bytes);
  }

  allocHost(bytes: number, opts: { mapped?: boolean } = {}): HostBuffer {
    return factories.allocHost!(this, bytes, options("Device.allocHost", opts).mapped ?? false);
  }

  createStream(opts: StreamOptions = {}): Stream {
    return factories.stream!(this, options("Device.createStream", opts));
  }

  createEvent(opts: EventOptions = {}): Event {
    return factories.event!(this, opts);
  }

  /**
   * Close this handle. Its dependents (running ring kernels) are disposed first, so no persistent
   * kernel is left holding a stream the device would wait on. Buffers, streams and events of it
   * throw afterwards.
   */
  dispose(): void {
    if (!this.state.open) return;
    // Closing the device drains its streams: queued host functions must run first. A running
    // ring kernel's stream is left out (it never idles; its RingKernel is stopped just below).
    const all = this.#waitedHandles();
    beforeBlockingWait("Device.dispose", (s) => all.includes(s), () => idle(all));
    for (const ref of [...this.state.dependents]) {
      try {
        ref.deref()?.dispose();
      } catch {
        /* the device closes regardless; a dependent's failure must not keep it open */
      }
    }
    this.state.dependents.clear();
    // Its memory goes with it, even while another Device object keeps the native device open.
    const shared = sharedByHandle.get(this.state.handle);
    shared?.states.delete(this.state);
    try {
      factories.releaseMemory?.(this.state, shared ? ([...shared.states].find((s) => s.open) ?? null) : null);
    } catch {
      /* dispose() never throws; the native close below frees what is left */
    }
    this.state.open = false;
    if (shared && --shared.opened <= 0) sharedByHandle.delete(this.state.handle);
    const rc = N.bg_device_close(this.state.handle);
    if (this === defaultDevice) defaultDevice = undefined;
    check(rc, "bg_device_close", this.backend);
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  toString(): string {
    return `Device(${this.spec}: ${this.state.open ? this.name : "disposed"})`;
  }
}

/** Whether every one of these native streams has finished its work. */
function idle(streams: number[]): boolean {
  return streams.every((h) => N.bg_stream_query(h) !== Status.NOT_READY);
}
