// Device: one opened backend device. Device.open("cpu" | "cuda[:N]" | "metal[:N]": a backend name
// of ./backends, then an ordinal), Device.default() (the backends by rank: CUDA, then Metal, then
// CPU; BUNGPU_DEVICE overrides), Device.list().
import { api, backendInfo, backendNumbers, devicePropsBytes } from "../ffi/result";
import { bg_device_props } from "../ffi/constants";
import { backends, type BackendName } from "./backends";
import { Buffer, HostBuffer, releaseDeviceMemory, type FillType, type GpuBufferOf } from "./buffer";
import { DEVICE, newDeviceState, type DeviceState } from "./device_state";
import { describeGot, GpuError, Status, invalid, disposed, options, type OptionKeys, reword } from "./errors";
import { Event, type EventOptions } from "./event";
import { beforeBlockingWait, deferDispose, insideHostFnOf, noteDeviceOpened, raiseDeviceFailures } from "./hostfn";
import { INSPECT, plural } from "./inspect";
import { settled } from "./poll";
import { closeWakeStreams } from "./wake";
import { ADOPT_DEFAULT, MemoryPool } from "./memory_pool";
import { Stream, type StreamOptions } from "./stream";

// The keys each options argument may have (errors.ts `options` refuses any other).
const HOST_KEYS: OptionKeys<{ mapped?: boolean }> = { mapped: true };
const STREAM_KEYS: OptionKeys<StreamOptions> = { nonBlocking: true, priority: true };

// The modules below this one (buffer, stream, event, capture) know a device as a DeviceRef, the
// part of it they use; here that interface is widened to the whole class, so `buffer.device`,
// `stream.device` and the rest are typed as a Device without importing this module.
declare module "./device_state" {
  interface DeviceRef extends Device {}
}

// What other modules have always imported from here.
export { captureEnded, noteCaptured, releaseOutsideCapture, type CaptureLog, type DeviceState } from "./device_state";

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
  /** The most threads of a block in x, y and z (every launch is checked against them: src/launch.ts). */
  maxBlockDim: [number, number, number];
  /** The most blocks of a grid in x, y and z. */
  maxGridDim: [number, number, number];
  /** The most blocks in one grid (0: only the per-dimension limits). */
  maxGridBlocks: number;
}

export interface BackendInfo {
  backend: BackendName;
  available: boolean;
  devices: number;
  /** Why it is unavailable (naming what was looked for), or a note. */
  message: string;
}

const BACKEND_NAMES = Object.keys(backends) as BackendName[];
const SPEC = new RegExp(`^(${BACKEND_NAMES.join("|")})(?::(\\d+))?$`);
const SPEC_FORMS = BACKEND_NAMES.flatMap((b) => [`"${b}"`, `"${b}:N"`]);
/** What Device.default() tries, in order, when BUNGPU_DEVICE is not set. */
const DEFAULT_ORDER = [...BACKEND_NAMES].sort((a, b) => backends[a].defaultRank - backends[b].defaultRank).map((b) => specOf(b, 0));

function parseSpec(spec: string): { backend: BackendName; ordinal: number } {
  const m = SPEC.exec(spec.trim().toLowerCase());
  if (!m) invalid("Device.open", `unknown device "${spec}" (want ${SPEC_FORMS.slice(0, -1).join(", ")} or ${SPEC_FORMS.at(-1)}; ${devicesHere()})`);
  return { backend: m[1] as BackendName, ordinal: m[2] ? Number(m[2]) : 0 };
}

/** "devices here: cuda:0, cpu": what Device.open can open on this machine, for error messages. */
function devicesHere(): string {
  let list: string[];
  try {
    list = Device.list();
  } catch {
    return "the devices here could not be listed";
  }
  return list.length ? `devices here: ${list.join(", ")}` : "no device can be opened here";
}

/** An error of opening a device, with the devices that can be opened (and "1 device", not "1 device(s)"). */
/** Why a backend with a record here is absent from the loaded library. */
function notBuilt(b: BackendName): string {
  return `the loaded libbungpu has no ${b} backend (no line in its shim/backends.c)`;
}

function openError(e: unknown): unknown {
  if (!(e instanceof GpuError) || (e.code !== Status.INVALID_DEVICE && e.code !== Status.BACKEND_UNAVAILABLE && e.code !== Status.NO_DEVICE)) return e;
  return reword(e, (d) => `${d.replace(/\b(\d+) device\(s\)/g, (_, n: string) => plural(Number(n), "device"))}; ${devicesHere()}`);
}

/** The spec of device `ordinal` of `backend`: "cuda:0", or the bare name where the backend says so. */
function specOf(backend: BackendName, ordinal: number): string {
  return backends[backend].bareSpec && ordinal === 0 ? backend : `${backend}:${ordinal}`;
}

let defaultDevice: Device | undefined;

/** The stream sets of each open native device, shared by every Device object opened on it. */
const sharedByHandle = new Map<number, { streams: DeviceState["streams"]; residentStreams: Set<number>; opened: number; states: Set<DeviceState> }>();

/** @internal One state of each open native device (the tracer finds a stream's device here). */
export function openDeviceStates(): DeviceState[] {
  const out: DeviceState[] = [];
  for (const shared of sharedByHandle.values())
    for (const st of shared.states)
      if (st.open) {
        out.push(st);
        break;
      }
  return out;
}

export class Device {
  readonly [DEVICE] = true;
  readonly state: DeviceState;
  readonly ordinal: number;
  #props: DeviceProps | undefined;
  #defaultStream: Stream | undefined;
  #defaultPool: MemoryPool | undefined;

  private constructor(handle: number, backend: BackendName, ordinal: number) {
    // Device objects opened on one native device share its stream sets: a wait of one covers the
    // streams (and host functions) of all, so none blocks on work only another one would service.
    let shared = sharedByHandle.get(handle);
    if (!shared) sharedByHandle.set(handle, (shared = { streams: new Set(), residentStreams: new Set(), opened: 0, states: new Set() }));
    shared.opened++;
    this.state = newDeviceState(handle, backend, shared);
    shared.states.add(this.state);
    noteDeviceOpened(this.state);
    this.ordinal = ordinal;
  }

  /** Every backend, whether it loaded, how many devices it has, and why not. */
  static backends(): BackendInfo[] {
    return BACKEND_NAMES.map((b) => {
      const n = backendNumbers().get(b);
      return { backend: b, ...(n === undefined ? { available: false, devices: 0, message: notBuilt(b) } : backendInfo(n)) };
    });
  }

  /** Device specs that can be opened here, e.g. ["cuda:0", "cpu"]. */
  static list(): string[] {
    const out: string[] = [];
    for (const b of Device.backends())
      for (let i = 0; i < b.devices; i++) out.push(specOf(b.backend, i));
    return out;
  }

  static open(spec: string): Device {
    if (typeof spec !== "string") invalid("Device.open", `spec must be a string, got ${describeGot(spec)}`);
    const { backend, ordinal } = parseSpec(spec);
    let handle: number;
    try {
      const n = backendNumbers().get(backend);
      if (n === undefined) throw new GpuError(Status.BACKEND_UNAVAILABLE, `bg_device_open: ${notBuilt(backend)}`, { backend, call: "bg_device_open" });
      handle = api(backend).device_open(n, ordinal);
    } catch (e) {
      throw openError(e);
    }
    return new Device(handle, backend, ordinal);
  }

  /** BUNGPU_DEVICE if set; else the first of CUDA, Metal, CPU that opens. Shared; do not dispose. */
  static default(): Device {
    if (defaultDevice?.state.open) return defaultDevice;
    const env = process.env["BUNGPU_DEVICE"];
    if (env) {
      try {
        defaultDevice = Device.open(env);
      } catch (e) {
        // The variable chose this device: say so, or the caller looks for a Device.open it never wrote.
        if (!(e instanceof GpuError)) throw e;
        throw reword(e, (d) => `BUNGPU_DEVICE=${env} (the environment variable that chooses Device.default()'s device; unset it to try ${DEFAULT_ORDER.join(", then ")}): ${d}`, "Device.default");
      }
      return defaultDevice;
    }
    const errors: string[] = [];
    for (const spec of DEFAULT_ORDER) {
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
    return specOf(this.backend, this.ordinal);
  }

  get props(): DeviceProps {
    if (this.#props) return this.#props;
    const { size, offset } = bg_device_props;
    const buf = devicePropsBytes(this.handle, size, this.backend);
    const dv = new DataView(buf.buffer);
    const nameBytes = offset.backend - offset.name;
    const end = buf.indexOf(0);
    const i = (field: keyof typeof offset) => dv.getInt32(offset[field], true);
    this.#props = {
      name: new TextDecoder().decode(buf.subarray(offset.name, end < 0 ? nameBytes : Math.min(end, nameBytes))),
      backend: BACKEND_NAMES[i("backend")] ?? this.backend,
      ordinal: i("ordinal"),
      computeUnits: i("compute_units"),
      computeCapability: [i("cc_major"), i("cc_minor")],
      maxThreadsPerBlock: i("max_threads_per_block"),
      warpSize: i("warp_size"),
      unifiedMemory: i("unified_memory") !== 0,
      canMapHostMemory: i("can_map_host_memory") !== 0,
      concurrentKernels: i("concurrent_kernels") !== 0,
      maxSharedBytesPerBlock: i("max_shared_bytes_per_block"),
      totalMemory: Number(dv.getBigUint64(offset.total_mem, true)),
      maxBlockDim: [0, 4, 8].map((o) => dv.getInt32(offset.max_block_dim + o, true)) as [number, number, number],
      maxGridDim: [0, 4, 8].map((o) => dv.getInt32(offset.max_grid_dim + o, true)) as [number, number, number],
      maxGridBlocks: Number(dv.getBigUint64(offset.max_grid_blocks, true)),
    };
    return this.#props;
  }

  get name(): string {
    return this.props.name;
  }

  memInfo(): { free: number; total: number } {
    const [free, total] = this.state.api.device_mem_info(this.handle);
    return { free, total };
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
    beforeBlockingWait("Device.synchronize", (s) => all.includes(s), () => this.#idle(all));
    if (this.state.residentStreams.size === 0) this.state.api.device_synchronize(h);
    else for (const s of all) this.state.api.stream_synchronize(s);
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
    const waited = backends[this.backend].legacyDefaultStream ? this.#streamHandles(true) : [this.defaultStream.handle];
    beforeBlockingWait(call, (s) => waited.includes(s), () => this.#idle(waited));
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
    if (!this.#defaultStream) this.#defaultStream = Stream.defaultOf(this);
    return this.#defaultStream;
  }

  /** The device's own memory pool, where Stream.alloc takes memory unless told otherwise. */
  get defaultPool(): MemoryPool {
    if (!this.#defaultPool) this.#defaultPool = new MemoryPool(this, { [ADOPT_DEFAULT]: true } as never);
    return this.#defaultPool;
  }

  /**
   * `bytes` of device memory; `{ type }` declares its elements (the default of `fill`).
   * `shareable`: memory another process can map (Buffer.exportHandle); the CPU backend then
   * allocates it in shared memory, CUDA needs nothing special and ignores it.
   */
  alloc<E extends FillType>(bytes: number, opts: { type: E; shareable?: boolean | undefined }): GpuBufferOf<E>;
  alloc(bytes: number, opts?: { type?: FillType | undefined; shareable?: boolean | undefined }): Buffer;
  alloc(bytes: number, opts: { type?: FillType | undefined; shareable?: boolean | undefined } = {}): Buffer {
    return Buffer.alloc(this, bytes, opts);
  }

  /**
   * Map memory another process exported with Buffer.exportHandle (cuIpcOpenMemHandle); dispose()
   * unmaps it. A handle exported by this very process is INVALID_CONTEXT, as on CUDA.
   */
  openSharedBuffer(handle: string | Uint8Array): Buffer {
    return Buffer.openShared(this, handle);
  }

  /** Open an event another process exported with Event.exportHandle (cuIpcOpenEventHandle). */
  openSharedEvent(handle: string | Uint8Array): Event {
    return Event.openShared(this, handle);
  }

  allocHost(bytes: number, opts: { mapped?: boolean } = {}): HostBuffer {
    return HostBuffer.alloc(this, bytes, options("Device.allocHost", opts, HOST_KEYS).mapped ?? false);
  }

  createStream(opts: StreamOptions = {}): Stream {
    return Stream.create(this, options("Device.createStream", opts, STREAM_KEYS));
  }

  createEvent(opts: EventOptions = {}): Event {
    return Event.create(this, opts);
  }

  // ---- several devices -------------------------------------------------------------------------

  #peer(call: string, other: unknown): Device {
    if (!(other instanceof Device)) invalid(call, `expected a Device, got ${describeGot(other)}`);
    this.handle;
    other.handle; // a disposed device is INVALID_HANDLE on either side
    return other;
  }

  /**
   * Whether this device's work can address `other`'s memory once peer access is enabled
   * (cuDeviceCanAccessPeer). False for the device itself and for a device of another backend.
   * CPU devices (BUNGPU_CPU_DEVICES=N) share one address space: true between any two.
   */
  canAccessPeer(other: Device): boolean {
    const o = this.#peer("Device.canAccessPeer", other);
    return this.state.api.device_can_access_peer(this.handle, o.handle) !== 0;
  }

  /**
   * Let this device's work address `other`'s memory (cuCtxEnablePeerAccess; one direction only):
   * copies on this device's streams to or from `other` then go directly instead of being staged
   * through host memory. Twice: PEER_ACCESS_ALREADY_ENABLED; where canAccessPeer is false:
   * INVALID_DEVICE. Closing either device ends it.
   */
  enablePeerAccess(other: Device): this {
    const o = this.#peer("Device.enablePeerAccess", other);
    this.state.api.device_enable_peer_access(this.handle, o.handle);
    return this;
  }

  /** Undo enablePeerAccess (cuCtxDisablePeerAccess); not enabled: PEER_ACCESS_NOT_ENABLED. */
  disablePeerAccess(other: Device): this {
    const o = this.#peer("Device.disablePeerAccess", other);
    this.state.api.device_disable_peer_access(this.handle, o.handle);
    return this;
  }

  /**
   * Close this handle. Its dependents (running ring kernels) are disposed first, so no persistent
   * kernel is left holding a stream the device would wait on. Buffers, streams and events of it
   * throw afterwards.
   */
  dispose(): void {
    if (!this.state.open) return;
    // A collective of one of its communicators is recorded in the open Communicator group: the
    // group's end issues it, then the device closes (as a buffer the group uses is held).
    if (this.state.grouped > 0) {
      this.state.afterGroup = () => this.dispose();
      return;
    }
    // Closing the device drains its streams: queued host functions must run first. A running
    // ring kernel's stream is left out (it never idles; its RingKernel is stopped just below).
    const all = this.#waitedHandles();
    // Inside a host function of one of its streams: that stream is held until the function
    // returns, so the device closes in a later turn (dispose() never throws).
    if (insideHostFnOf((s) => all.includes(s))) {
      deferDispose(() => this.dispose());
      return;
    }
    try {
      beforeBlockingWait("Device.dispose", (s) => all.includes(s), () => this.#idle(all));
    } catch {
      // An async host function awaits its promise: closing now could block on a stream that
      // still needs the JS thread. Try again in a later turn (dispose() never throws).
      deferDispose(() => this.dispose());
      return;
    }
    for (const ref of [...this.state.dependents]) {
      try {
        ref.deref()?.dispose();
      } catch {
        /* the device closes regardless; a dependent's failure must not keep it open */
      }
    }
    this.state.dependents.clear();
    // Other devices' streams still copying to or from its memory finish first (Stream.copyPeer).
    for (const s of [...this.state.peerStreams]) {
      try {
        s.drain(); // host functions' failures stay for that stream's next wait
      } catch {
        /* dispose() never throws */
      }
    }
    this.state.peerStreams.clear();
    // Its memory goes with it, even while another Device object keeps the native device open.
    const shared = sharedByHandle.get(this.state.handle);
    shared?.states.delete(this.state);
    try {
      releaseDeviceMemory(this.state, shared ? ([...shared.states].find((s) => s.open) ?? null) : null);
    } catch {
      /* dispose() never throws; the native close below frees what is left */
    }
    this.state.open = false;
    if (shared && --shared.opened <= 0) sharedByHandle.delete(this.state.handle);
    if (this === defaultDevice) defaultDevice = undefined;
    closeWakeStreams(this.state);
    try {
      this.state.api.device_close(this.state.handle);
    } catch {
      /* dispose() never throws: the handle is gone either way */
    }
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /** Whether every one of these native streams has finished its work (a failed query counts). */
  #idle(streams: number[]): boolean {
    const api = this.state.api;
    return streams.every((h) => settled(() => api.stream_query(h)));
  }

  /** 'Device(cuda:0, "NVIDIA H100 80GB HBM3", backend cuda, index 0)'; ", disposed" once closed. */
  toString(): string {
    let name = "";
    if (this.state.open)
      try {
        name = `, ${JSON.stringify(this.name)}`;
      } catch {
        /* the properties could not be read: the rest still says which device */
      }
    return `Device(${this.spec}${name}, backend ${this.backend}, index ${this.ordinal}${this.state.open ? "" : ", disposed"})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}


