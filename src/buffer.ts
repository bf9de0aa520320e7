// GpuBuffer (Buffer to the package's own modules): device memory (an allocation, or a view of
// part of one). HostBuffer: pinned host memory exposed as a TypedArray without copying. Every
// call is validated before it reaches the FFI; a bad call throws GpuError and changes nothing.
// Over 600 lines, one file: GpuBuffer, stream-ordered buffers and HostBuffer share the
// native-memory accounting below (the budget, the collection, the finaliser net), which no other
// module may reach.
import { GpuError, nativeView } from "../ffi/result";
import { HostAllocFlag, MEM_SHAREABLE } from "../ffi/constants";
import { isDevice, releaseOutsideCapture, type DeviceRef, type DeviceState } from "./device_state";
import { describeGot, Status, hostArray, invalid, disposed, options, type OptionKeys } from "./errors";
import { hostFnsPending, insideHostFnOf } from "./hostfn";
import { HOLD } from "./lifetime";
import { bytesText } from "./inspect";
import { decodeHandle, encodeHandle, handleBytes } from "./ipc";
import { RELEASE, Resource } from "./resource";

// The keys each options argument may have (errors.ts `options` refuses any other).
const ALLOC_KEYS: OptionKeys<{ type?: FillType; shareable?: boolean }> = { type: true, shareable: true };
const OFFSET_KEYS: OptionKeys<{ offset?: number }> = { offset: true };
const COPY_TO_KEYS: OptionKeys<{ srcOffset?: number; dstOffset?: number; bytes?: number }> = { srcOffset: true, dstOffset: true, bytes: true };
const FILL_KEYS: OptionKeys<FillRange & { type?: FillType | undefined }> = { offset: true, bytes: true, type: true };

type TypedArray =
  | Int8Array | Uint8Array | Uint8ClampedArray | Int16Array | Uint16Array | Int32Array | Uint32Array
  | Float32Array | Float64Array | BigInt64Array | BigUint64Array;
type TypedArrayCtor<T extends TypedArray> = { new (n: number): T; BYTES_PER_ELEMENT: number };
export type HostData = ArrayBufferView | ArrayBuffer;

export type FillType = "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32";
/** The byte range of a fill: [offset, offset + bytes), by default the whole buffer. */
export interface FillRange {
  offset?: number | undefined;
  bytes?: number | undefined;
}

/** Check that `n` is a non-negative safe integer. */
export function checkSize(call: string, what: string, n: unknown): number {
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0)
    invalid(call, `${what} must be a non-negative integer, got ${describeGot(n)}`);
  return n;
}

const TYPED_ARRAY_CTORS: readonly unknown[] = [
  Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
  Float32Array, Float64Array, BigInt64Array, BigUint64Array,
];

/** A TypedArray constructor (Float32Array, …), else INVALID_VALUE. */
function typedArrayCtor(call: string, C: unknown): TypedArrayCtor<TypedArray> {
  if (!TYPED_ARRAY_CTORS.includes(C)) invalid(call, `expected a TypedArray constructor (e.g. Float32Array), got ${describeGot(C)}`);
  return C as TypedArrayCtor<TypedArray>;
}

function bytesOf(data: HostData): Uint8Array {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  invalid("Buffer", `expected a TypedArray, DataView or ArrayBuffer, got ${describeGot(data)}`);
}

/** One allocation shared by a buffer and its views. */
interface Allocation {
  dev: DeviceState;
  address: number;
  bytes: number;
  live: boolean;
  /** Graphs and execs that replay work on this memory: it is freed only once they are gone. */
  users?: number;
  /** Given back to the backend (once, by whichever path comes first). */
  freed?: boolean;
  /**
   * A stream-ordered allocation (Stream.alloc): freed with bg_mem_free_async on this stream.
   * `graph`: made during a capture, so the graph owns the memory; only a free inside that capture
   * reaches the shim.
   */
  ordered?: { stream: OrderedStream; graph: boolean };
  /** Shared between processes: allocated shareable here, or opened from another's handle. */
  shared?: "shareable" | "opened";
  /**
   * Non-blocking streams that queued work using this memory (launch arguments, command lists)
   * and were not yet seen idle by a host write, with what that work was: a synchronous write
   * waits for them (writeAfterUsers). Default and blocking streams are ordered by the driver.
   */
  streamUsers?: Map<WeakRef<UsingStream>, string>;
}

/** A non-blocking stream as a host write sees one (a Stream; stream.ts imports this module). */
export interface UsingStream {
  readonly disposed: boolean;
  readonly handle: number;
  query(): boolean;
  drain(): void;
  toString(): string;
}

/**
 * Before a synchronous host write into an allocation: wait for the work queued on non-blocking
 * streams that uses it (as the write already waits for the default and blocking streams), so that
 * work never sees the new bytes. A stream held by one of its host functions (the write is made in
 * it, or while an async one awaits) is at that point already: the work before it has finished and
 * the work after it starts after the write, as on CUDA. Where the wait could not end (from a host
 * function of another stream) the write is refused with a GpuError naming the work, changing
 * nothing.
 */
function writeAfterUsers(call: string, users: Map<WeakRef<UsingStream>, string>): void {
  for (const [ref, work] of users) {
    const s = ref.deref();
    let idle = true;
    if (s !== undefined && !s.disposed) {
      const h = s.handle;
      if (hostFnsPending() && insideHostFnOf((x) => x === h)) continue; // ordered at the host function
      try {
        idle = s.query();
      } catch {
        /* a stream that cannot be queried (capturing) runs nothing yet */
      }
    }
    if (!idle) {
      try {
        s!.drain();
      } catch (e) {
        if (!(e instanceof GpuError)) throw e;
        throw new GpuError(
          e.code,
          `${call}: the buffer is in use by ${work} queued on ${String(s)} and not finished; the write would wait for it, which it cannot do here (${e.message}). Write once that work is done (await the stream or the run)`,
          { backend: "typescript", call },
        );
      }
    }
    users.delete(ref);
  }
}

/** The stream a stream-ordered allocation is freed on, as this module sees one (a Stream). */
export interface OrderedStream {
  readonly handle: number;
  readonly disposed: boolean;
  readonly device: DeviceRef;
}

/** The handle a stream-ordered free goes to: its stream, or the default stream once that is gone. */
function orderedHandle(a: Allocation): number {
  const s = a.ordered!.stream;
  return s.disposed ? a.dev.api.stream_default(a.dev.handle) : s.handle;
}

/**
 * Memory currently allocated, per process: device memory through Buffer.alloc (liveAllocations,
 * liveBytes) and pinned host memory through HostBuffer.alloc (liveHostAllocations,
 * liveHostBytes). A free deferred past an open capture, or held by a graph, still counts.
 */
export const memoryStats = {
  liveAllocations: 0,
  liveBytes: 0,
  liveHostAllocations: 0,
  liveHostBytes: 0,
  /** Collections bungpu ran because live native bytes would have passed the budget (or on OUT_OF_MEMORY). */
  collections: 0,
  /** Live native bytes (device + pinned host) above which the next allocation collects first; Infinity when off. */
  budget: 0,
};

// ---- Native memory the collector knows about -------------------------------------------------
// The JS collector sees a forgotten Buffer as a few dozen bytes, not the megabytes it holds, so a
// loop of forgotten buffers can pile up gigabytes before a collection runs. Like tfjs and
// onnxruntime, bungpu counts live native bytes itself: an allocation that would take them past
// the budget first runs a full collection (Bun.gc(true)) and frees what it found dead. Bun runs
// FinalizationRegistry callbacks only on a later task, never inside Bun.gc(true), so the
// allocation path cannot wait for them: every native allocation is also watched through a
// WeakRef (cleared synchronously by the collection), and the sweep below frees the ones whose
// owner is gone right away. The budget is max(base, 2 x the bytes live after the last
// collection); the base is BUNGPU_GC_BUDGET (bytes, or with K/M/G suffix; "off" or 0 disables),
// default 256 MiB, and setMemoryBudget() changes it at run time.

type Watched = Allocation | HostAllocation;
/** Every native allocation not yet freed; the WeakRef (to its owner) while nobody disposed it. */
const owned = new Map<Watched, WeakRef<object> | null>();

const DEFAULT_BUDGET = 256 * 2 ** 20;

/** Parse a budget ("268435456", "256M", "1g", "off"); undefined when not understood. */
export function parseBudget(v: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmg]?)i?b?\s*$/i.exec(v);
  if (/^\s*(off|none|false)\s*$/i.test(v)) return Infinity;
  if (!m) return undefined;
  const n = Number(m[1]) * 2 ** ({ "": 0, k: 10, m: 20, g: 30 }[m[2]!.toLowerCase() as "" | "k" | "m" | "g"]);
  return n === 0 ? Infinity : Math.floor(n);
}

let baseBudget = (process.env["BUNGPU_GC_BUDGET"] !== undefined && parseBudget(process.env["BUNGPU_GC_BUDGET"])) || DEFAULT_BUDGET;
memoryStats.budget = baseBudget;

/**
 * Set the base of the native-memory budget: `bytes` (> 0), or "off" (never collect before an
 * allocation; an OUT_OF_MEMORY still collects and retries once). Overrides BUNGPU_GC_BUDGET.
 */
export function setMemoryBudget(bytes: number | "off"): void {
  if (bytes === "off") baseBudget = Infinity;
  else if (typeof bytes === "number" && Number.isSafeInteger(bytes) && bytes > 0) baseBudget = bytes;
  else invalid("setMemoryBudget", `expected a positive integer byte count or "off", got ${describeGot(bytes)}`);
  memoryStats.budget = baseBudget;
}

function liveNative(): number {
  return memoryStats.liveBytes + memoryStats.liveHostBytes;
}

/** Before allocating `bytes`: collect first if they would take live native bytes past the budget. */
function reserve(bytes: number): void {
  if (liveNative() + bytes > memoryStats.budget) collectNative();
}

/**
 * A full collection, then free (synchronously) every allocation whose owner it found dead; the
 * budget becomes max(base, 2 x what is still live).
 */
export function collectNative(): void {
  memoryStats.collections++;
  if (typeof Bun !== "undefined") Bun.gc(true);
  for (const [a, ref] of owned) {
    if (!ref || ref.deref() !== undefined) continue;
    owned.set(a, null);
    if ("host" in a) {
      hostRegistry.unregister(a);
      a.live = false;
      freeHost(a);
    } else {
      registry.unregister(a);
      releaseOutsideCapture(a.dev, () => void release(a));
    }
  }
  memoryStats.budget = Math.max(baseBudget, 2 * liveNative());
}

/** Allocate through `alloc` (a result-layer call); on OUT_OF_MEMORY collect and retry once. */
function allocRetry<T>(alloc: () => T): T {
  try {
    return alloc();
  } catch (e) {
    if (!(e instanceof GpuError && e.code === Status.OUT_OF_MEMORY)) throw e;
  }
  collectNative();
  return alloc();
}

/**
 * @internal The Device object of `state` is being disposed: free everything allocated through
 * it now, even while another Device object keeps the native device open (a closed native
 * device frees it all anyway). Queued work still using it finishes first (the shim defers a free
 * past queued work); host views are detached. Memory a graph or exec still replays on (it may be
 * another object's, on the same native device) passes to `heir`, an open Device object on the
 * native device, and is freed through it when the last user goes; with no heir the native
 * device closes and frees it, and no graph of it can replay.
 */
export function releaseDeviceMemory(state: DeviceState, heir: DeviceState | null = null): void {
  for (const a of [...owned.keys()]) {
    if (a.dev !== state) continue;
    // disposed like dispose() would: the object refuses every call from now on
    a.live = false;
    if ("host" in a) {
      hostRegistry.unregister(a);
      try {
        a.view?.deref()?.transfer(0);
      } catch {
        /* an ArrayBuffer Bun cannot detach */
      }
    } else registry.unregister(a);
    if (heir && a.users) {
      a.dev = heir; // the last user's drop frees it through the heir
      owned.set(a, null);
    } else if ("host" in a) freeHostNow(a);
    else free(a);
  }
}

/** Free an allocation once, by dispose() or the finaliser alike; returns the shim's status. */
function release(a: Allocation): number {
  if (!a.live) return 0;
  a.live = false;
  if (a.users) return 0; // in use by a graph or exec: freed when the last of them goes (hold)
  return free(a);
}

/** A queued free: skipped if a graph or exec took a hold while it waited (the last drop frees). */
function freeUnused(a: Allocation): number {
  return a.users ? 0 : free(a);
}

function free(a: Allocation): number {
  if (a.bytes === 0 || a.freed) return 0;
  a.freed = true;
  owned.delete(a);
  memoryStats.liveAllocations--;
  memoryStats.liveBytes -= a.bytes;
  if (!a.dev.open) return 0; // a closed device freed it
  if (a.ordered) {
    if (!a.ordered.graph) a.dev.api.mem_free_async(orderedHandle(a), a.address);
  }
  else if (a.shared === "opened") a.dev.api.ipc_mem_close(a.dev.handle, a.address);
  else a.dev.api.mem_free(a.dev.handle, a.address);
  return 0;
}

// never inside an open capture: bg_mem_free there is illegal and would invalidate it
const registry = new FinalizationRegistry<Allocation>((a) => releaseOutsideCapture(a.dev, () => void release(a)));

/**
 * Device memory: an allocation, or a view of part of one. Named beside Bun's global `Buffer`
 * (host bytes), never over it: `import { GpuBuffer } from "bungpu"`.
 */
export class GpuBuffer extends Resource {
  readonly device: DeviceRef;
  /**
   * What one element is, when the buffer was allocated with `{ type }` (views keep it): the
   * default of `fill`. Undefined for plain bytes.
   */
  readonly elementType: FillType | undefined;
  readonly #alloc: Allocation;
  /** Offset of this view inside its allocation. */
  readonly byteOffset: number;
  readonly byteLength: number;
  /** A view keeps its root alive, so the finalizer never frees memory a view still uses. */
  readonly #root: GpuBuffer | null;

  private constructor(device: DeviceRef, alloc: Allocation, byteOffset: number, byteLength: number, root: GpuBuffer | null, elementType: FillType | undefined) {
    super(alloc.dev, alloc.address, "buffer", alloc);
    this.device = device;
    this.elementType = elementType;
    this.#alloc = alloc;
    this.#root = root;
    this.byteOffset = byteOffset;
    this.byteLength = byteLength;
  }

  /**
   * `bytes` of device memory. `{ type }` declares its elements ("f32", "i32", ...): `fill(v)`
   * then writes `v` as that type. The size stays in bytes. `shareable`: memory another process
   * can map (exportHandle); the CPU backend then allocates it in shared memory, CUDA ignores it.
   */
  static alloc<E extends FillType>(device: DeviceRef, bytes: number, opts: { type: E; shareable?: boolean | undefined }): GpuBufferOf<E>;
  static alloc(device: DeviceRef, bytes: number, opts?: { type?: FillType | undefined; shareable?: boolean | undefined }): GpuBuffer;
  static alloc(device: DeviceRef, bytes: number, opts: { type?: FillType | undefined; shareable?: boolean | undefined } = {}): GpuBuffer {
    if (!isDevice(device)) invalid("Buffer.alloc", "device must be a Device");
    checkSize("Buffer.alloc", "size", bytes);
    opts = options("Buffer.alloc", opts, ALLOC_KEYS);
    const type = opts.type;
    if (type !== undefined) {
      const size = fillPattern("Buffer.alloc", 0, type).size; // INVALID_VALUE for an unknown type
      if (bytes % size) invalid("Buffer.alloc", `${bytes} bytes is not a whole number of ${size}-byte ${type} elements`);
    }
    const shareable = opts.shareable === true;
    if (shareable && bytes === 0) invalid("Buffer.alloc", "a shareable buffer needs at least 1 byte");
    const dev = device.state;
    if (!dev.open) disposed("Buffer.alloc", "device");
    const a: Allocation = { dev, address: 0, bytes, live: true, ...(shareable ? { shared: "shareable" as const } : {}) };
    if (bytes > 0) {
      reserve(bytes);
      a.address = allocRetry(() =>
        shareable ? dev.api.mem_alloc_flags(dev.handle, bytes, MEM_SHAREABLE) : dev.api.mem_alloc(dev.handle, bytes),
      );
    }
    return bytes > 0 ? GpuBuffer.#own(device, a, type) : new GpuBuffer(device, a, 0, 0, null, type);
  }

  /** The buffer over a new native allocation `a`: counted, watched by the finaliser net, owned. */
  static #own(device: DeviceRef, a: Allocation, type: FillType | undefined): GpuBuffer {
    memoryStats.liveAllocations++;
    memoryStats.liveBytes += a.bytes;
    const b = new GpuBuffer(device, a, 0, a.bytes, null, type);
    b.watch(registry, a, a);
    owned.set(a, new WeakRef(b));
    return b;
  }

  /**
   * @internal Stream.alloc: `bytes` of stream-ordered memory from `pool` (a pool handle, or 0
   * for the device's default pool), usable by work queued on `stream` from now on.
   */
  static allocOrdered(stream: OrderedStream, pool: number, bytes: number, graph: boolean): GpuBuffer {
    const device = stream.device;
    const dev = device.state;
    checkSize("Stream.alloc", "size", bytes);
    if (bytes === 0) invalid("Stream.alloc", "size must be positive (a stream-ordered allocation of 0 bytes is CUDA_ERROR_INVALID_VALUE)");
    const h = stream.handle;
    reserve(bytes);
    const a: Allocation = { dev, address: 0, bytes, live: true, ordered: { stream, graph } };
    a.address = allocRetry(() => dev.api.mem_alloc_async(h, pool || null, bytes));
    return GpuBuffer.#own(device, a, undefined);
  }

  /**
   * @internal Work (`work`, e.g. "Kernel.launch(sum_into)") was queued using this memory on the
   * non-blocking stream `ref` reaches: the next synchronous host write waits for that stream.
   */
  static usedOn(buf: GpuBuffer, ref: WeakRef<UsingStream>, work: string): void {
    const a = buf.#alloc;
    (a.streamUsers ??= new Map()).set(ref, work);
  }

  /** True for memory from Stream.alloc (freed in stream order). */
  get streamOrdered(): boolean {
    return this.#alloc.ordered !== undefined;
  }

  /**
   * Free stream-ordered memory (from Stream.alloc) at this point of `stream` (default: the
   * stream it was allocated on): work queued on `stream` afterwards may get the memory again at
   * once, other streams only once `stream` has run the work queued before the free. The buffer
   * is disposed. A second free, a view, or memory from Device.alloc is a GpuError. Inside a
   * capture, memory allocated in the same capture is freed inside the graph.
   */
  free(stream?: OrderedStream): void {
    const a = this.#alloc;
    this.#live("Buffer.free");
    if (!a.ordered) invalid("Buffer.free", "not stream-ordered memory (Stream.alloc); free it with dispose()");
    if (this.isView) invalid("Buffer.free", "a view cannot be freed; free the buffer it views");
    const s = stream ?? a.ordered.stream;
    if (typeof s !== "object" || s === null || !("handle" in s) || !("device" in s))
      invalid("Buffer.free", `stream must be a Stream, got ${describeGot(stream)}`);
    if (s.device.state !== a.dev) invalid("Buffer.free", "stream of another device");
    const h = s.handle; // throws on a disposed stream
    if (!a.users || a.ordered.graph) {
      // graph memory is the graph's, held or not: its free belongs in the capture now
      a.dev.api.mem_free_async(h, a.address); // throws, changing nothing, on a refused free
      a.freed = true;
      owned.delete(a);
      memoryStats.liveAllocations--;
      memoryStats.liveBytes -= a.bytes;
    } else a.ordered.stream = s; // a graph still replays on it: freed on `s` when the last one goes
    this.dispose();
  }

  /** The device address of this view's first byte (validated live). */
  get address(): number {
    this.#live("Buffer.address");
    return this.#alloc.address + this.byteOffset;
  }

  override get disposed(): boolean {
    return !this.#alloc.live || !this.#alloc.dev.open;
  }

  /** True when this buffer is a view of another's memory. */
  get isView(): boolean {
    return this.#root !== null;
  }

  /** The allocation this view belongs to, as [base address, bytes]; for hazard tracking. */
  get allocation(): { address: number; bytes: number } {
    return { address: this.#alloc.address, bytes: this.#alloc.bytes };
  }

  #live(call: string, what = "buffer"): number {
    if (!this.#alloc.dev.open) disposed(call, `device of this ${what}`);
    if (!this.#alloc.live) disposed(call, what);
    return this.#alloc.dev.handle;
  }

  #range(call: string, offset: number, bytes: number): void {
    checkSize(call, "offset", offset);
    checkSize(call, "byte count", bytes);
    if (offset + bytes > this.byteLength)
      throw new GpuError(
        Status.INVALID_VALUE,
        `${call}: range [${offset}, ${offset + bytes}) is past the end of a ${this.byteLength}-byte buffer`,
        { backend: "typescript", call },
      );
  }

  /** A view of [byteOffset, byteOffset + byteLength) sharing this buffer's memory. */
  view(byteOffset: number, byteLength?: number): this {
    this.#live("Buffer.view");
    checkSize("Buffer.view", "offset", byteOffset);
    if (byteLength === undefined) byteLength = Math.max(0, this.byteLength - byteOffset);
    this.#range("Buffer.view", byteOffset, byteLength);
    return new GpuBuffer(this.device, this.#alloc, this.byteOffset + byteOffset, byteLength, this.#root ?? this, this.elementType) as this;
  }

  /**
   * Copy host data into the buffer at `offset` (synchronous). Like every synchronous method
   * (`write`, `read`, `fill`, `copyTo`), it is an operation of the device's default stream: it
   * starts after the work queued before it on the default stream and on every blocking stream
   * (not on `nonBlocking` streams), and returns only when the data is in place, so work queued
   * afterwards on any stream, non-blocking ones included, sees it. On every backend. Work already
   * queued on a non-blocking stream that uses this memory is waited for first, so the write never
   * changes its input (inside a host function of another stream, where that wait could not end:
   * GpuError ILLEGAL_STATE naming the work; see docs/guide/memory.md).
   */
  write(data: HostData, opts: { offset?: number } = {}): this {
    opts = options("Buffer.write", opts, OFFSET_KEYS);
    const h = this.#live("Buffer.write");
    if (hostFnsPending()) this.device.beforeSyncCopy("Buffer.write");
    const src = bytesOf(data);
    const offset = opts.offset ?? 0;
    this.#range("Buffer.write", offset, src.byteLength);
    if (this.#alloc.streamUsers?.size) writeAfterUsers("Buffer.write", this.#alloc.streamUsers);
    if (src.byteLength > 0)
      this.#alloc.dev.api.memcpy_htod(h, this.#alloc.address + this.byteOffset + offset, src, src.byteLength);
    return this;
  }

  /**
   * Copy out (synchronous). `read()` → a new Uint8Array of the whole buffer; `read(Float32Array)`
   * → a new Float32Array of it; `read(array)` → fills `array` and returns it. It waits for the
   * work queued before it on the default stream and every blocking stream, not for `nonBlocking`
   * streams: synchronize those (or wait on an event) first. See `write` for the full rule.
   */
  read(): Uint8Array;
  read<T extends TypedArray>(into: T | TypedArrayCtor<T>, opts?: { offset?: number }): T;
  read(into: DataView | ArrayBuffer, opts?: { offset?: number }): DataView | ArrayBuffer;
  read(into?: unknown, opts: { offset?: number } = {}): unknown {
    opts = options("Buffer.read", opts, OFFSET_KEYS);
    const h = this.#live("Buffer.read");
    if (hostFnsPending()) this.device.beforeSyncCopy("Buffer.read");
    const offset = opts.offset ?? 0;
    checkSize("Buffer.read", "offset", offset);
    if (offset > this.byteLength) this.#range("Buffer.read", offset, 0);
    let out: ArrayBufferView | ArrayBuffer;
    if (into === undefined) out = hostArray("Buffer.read", this.byteLength - offset, () => new Uint8Array(this.byteLength - offset));
    else if (typeof into === "function") {
      const C = typedArrayCtor("Buffer.read", into);
      const avail = this.byteLength - offset;
      if (avail % C.BYTES_PER_ELEMENT)
        invalid("Buffer.read", `${avail} bytes is not a whole number of ${C.BYTES_PER_ELEMENT}-byte elements`);
      out = hostArray("Buffer.read", avail, () => new C(avail / C.BYTES_PER_ELEMENT));
    } else out = into as ArrayBufferView | ArrayBuffer;
    const dst = bytesOf(out);
    this.#range("Buffer.read", offset, dst.byteLength);
    if (dst.byteLength > 0)
      this.#alloc.dev.api.memcpy_dtoh(h, dst, this.#alloc.address + this.byteOffset + offset, dst.byteLength);
    return out;
  }

  /**
   * Device-to-device copy into `dst` (synchronous). Defaults: whole of this buffer. Complete on
   * return, so a launch queued next on any stream reads the copied bytes (see `write`).
   */
  copyTo(dst: GpuBuffer, opts: { srcOffset?: number; dstOffset?: number; bytes?: number } = {}): void {
    opts = options("Buffer.copyTo", opts, COPY_TO_KEYS);
    const h = this.#live("Buffer.copyTo");
    if (hostFnsPending()) this.device.beforeSyncCopy("Buffer.copyTo");
    if (!(dst instanceof GpuBuffer)) invalid("Buffer.copyTo", "dst must be a Buffer");
    dst.#live("Buffer.copyTo", "dst buffer");
    if (dst.#alloc.dev.handle !== this.#alloc.dev.handle)
      invalid("Buffer.copyTo", `dst is on ${dst.device.spec}, this buffer on ${this.device.spec}`);
    const srcOffset = opts.srcOffset ?? 0;
    const dstOffset = opts.dstOffset ?? 0;
    const bytes = opts.bytes ?? this.byteLength - srcOffset;
    this.#range("Buffer.copyTo", srcOffset, bytes);
    dst.#range("Buffer.copyTo", dstOffset, bytes);
    if (dst.#alloc.streamUsers?.size) writeAfterUsers("Buffer.copyTo", dst.#alloc.streamUsers);
    if (bytes > 0)
      this.#alloc.dev.api.memcpy_dtod(h, dst.address + dstOffset, this.address + srcOffset, bytes);
  }

  /**
   * Fill with `value` as ELEMENTS of `type`, over [offset, offset+bytes) (synchronous): `fill(1, {
   * type: "f32" })` writes 1.0 in every 4 bytes, `{ type: "u8" }` every byte. `type` defaults to
   * the buffer's `elementType` (allocated with `{ type }`); a buffer without one needs `type` for
   * any value but 0 (INVALID_VALUE), so a fill never guesses between bytes and elements.
   * Complete on return, so a launch queued next on any stream sees the filled bytes (see `write`).
   */
  fill<V extends number>(value: V, ...optsWithType: FillOptionsFor<this, V>): this;
  fill(value: number, opts: FillRange & { type?: FillType | undefined } = {}): this {
    opts = options("Buffer.fill", opts, FILL_KEYS);
    const h = this.#live("Buffer.fill");
    if (hostFnsPending()) this.device.beforeSyncCopy("Buffer.fill");
    const { pattern, size } = fillPattern("Buffer.fill", value, fillTypeOf("Buffer.fill", this, value, opts.type));
    const offset = opts.offset ?? 0;
    const bytes = opts.bytes ?? this.byteLength - offset;
    this.#range("Buffer.fill", offset, bytes);
    if (bytes % size) invalid("Buffer.fill", `${bytes} bytes is not a whole number of ${size}-byte elements`);
    if ((this.byteOffset + offset) % size) invalid("Buffer.fill", `offset is not aligned to ${size} bytes`);
    if (this.#alloc.streamUsers?.size) writeAfterUsers("Buffer.fill", this.#alloc.streamUsers);
    if (bytes > 0)
      this.#alloc.dev.api.memset(h, this.address + offset, pattern, size, bytes / size);
    return this;
  }

  /**
   * @internal A graph or exec replays work on this memory: keep it allocated, even past
   * dispose(), until the returned function is called.
   */
  [HOLD](): () => void {
    const a = this.#alloc;
    // A disposed allocation whose free is only queued (past an open capture) can still be held:
    // a capture's record holds what it used, and its graph takes over those holds after the
    // buffer was disposed during the capture.
    if (a.freed || a.bytes === 0) return () => {};
    a.users = (a.users ?? 0) + 1;
    let dropped = false;
    return () => {
      if (dropped) return;
      dropped = true;
      if (--a.users! === 0 && !a.live) releaseOutsideCapture(a.dev, () => void freeUnused(a));
    };
  }

  /** A view only forgets itself: its root frees the allocation. */
  protected override get owns(): boolean {
    return !this.isView;
  }

  /**
   * Free the allocation (dispose(): idempotent, never throws). Inside an open capture (where a
   * free is illegal and would invalidate it) the free is queued and done when the device's
   * captures have ended, like a finaliser's; a graph or exec that still replays work on the
   * memory frees it when the last of them goes.
   */
  protected [RELEASE](): void {
    const a = this.#alloc;
    if (owned.has(a)) owned.set(a, null);
    if (a.users) return;
    releaseOutsideCapture(a.dev, () => void freeUnused(a));
  }

  // ---- sharing between processes (src/ipc.ts holds the handle format) ----------------------------

  /**
   * A handle another process opens with `Device.openSharedBuffer` to map this allocation
   * (cuIpcGetMemHandle): a string to send over a pipe, a socket or a file. CUDA exports any
   * Device.alloc memory; the CPU backend only memory allocated with `{ shareable: true }`. Not
   * for views, stream-ordered memory or a buffer opened from a handle. Keep this buffer alive
   * until every importer has disposed its buffer (CUDA: freeing it earlier is undefined).
   */
  exportHandle(): string {
    const a = this.#alloc;
    this.#live("Buffer.exportHandle");
    if (this.isView) invalid("Buffer.exportHandle", "a view cannot be exported; export the buffer it views");
    if (a.ordered) invalid("Buffer.exportHandle", "stream-ordered memory (Stream.alloc) cannot be exported; use Device.alloc");
    if (a.shared === "opened") invalid("Buffer.exportHandle", "this buffer was opened from another process's handle; export it there");
    if (a.bytes === 0) invalid("Buffer.exportHandle", "an empty buffer cannot be exported");
    const out = handleBytes();
    a.dev.api.ipc_mem_export(a.dev.handle, a.address, out);
    return encodeHandle(out);
  }

  /** True for memory shared between processes: allocated shareable, or opened from a handle. */
  get shared(): "shareable" | "opened" | undefined {
    return this.#alloc.shared;
  }

  /**
   * @internal Device.openSharedBuffer: map the memory another process exported. Disposing the
   * buffer unmaps it (cuIpcCloseMemHandle) once queued work is done; opening one handle twice
   * gives the same address.
   */
  static openShared(device: DeviceRef, handle: unknown): GpuBuffer {
    const call = "Device.openSharedBuffer";
    if (!isDevice(device)) invalid(call, "device must be a Device");
    const bytes = decodeHandle(call, handle);
    const dev = device.state;
    if (!dev.open) disposed(call, "device");
    const [address, size] = dev.api.ipc_mem_open(dev.handle, bytes);
    return GpuBuffer.#own(device, { dev, address, bytes: size, live: true, shared: "opened" }, undefined);
  }

  /** "GpuBuffer(4096 bytes on cpu)"; a view says where it lies in its allocation; ", disposed" once freed. */
  override toString(): string {
    const where = this.isView ? `, view at byte ${this.byteOffset} of ${bytesText(this.#alloc.bytes)}` : "";
    return `GpuBuffer(${bytesText(this.byteLength)} on ${this.device.spec}${where}${this.disposed ? ", disposed" : ""})`;
  }
}

// The package's own modules still call the class Buffer; users get GpuBuffer (src/index.ts).

/**
 * `fill`'s options (`O`: Buffer.fill's, a Step's, …) after the value: optional where the element
 * type is known (the buffer was allocated with `{ type }`, or the value is 0), else required with
 * `type` (`WithType`: O with `type` required). A rest tuple rather than overloads, at every fill
 * (Buffer, Stream, CommandEncoder, Step, Schedule, ComputeGraph, GraphSession), so that
 * `untyped.fill(1)` reads "Expected 2 arguments, but got 1" (and "Arguments for the rest parameter
 * 'optsWithType' were not provided"), not a mismatched `this` context, and
 * `s.fill(untyped, 1, { bytes: 8 })` reads "not assignable to parameter of type 'FillRange & {
 * type: FillType; }'" (Property 'type' is missing), not "No overload matches this call".
 */
export type FillOptionsFor<B, V extends number, O = FillRange & { type?: FillType | undefined }, WithType = FillRange & { type: FillType }> = B extends {
  readonly elementType: FillType;
}
  ? [opts?: O]
  : [V] extends [0]
    ? [opts?: O]
    : [opts: WithType];

/** A buffer allocated with `{ type: E }`: its `fill(v)` writes `v` as `E` (the types know it). */
export type GpuBufferOf<E extends FillType> = GpuBuffer & { readonly elementType: E };
export { GpuBuffer as Buffer };

/**
 * The element type of a fill of `value` into `buf`: `type` when given, else the buffer's
 * `elementType`, else "u8" for 0 (all-zero bytes are all-zero elements of every type); any other
 * value without a type is INVALID_VALUE (a byte fill of 1 is not a fill of ones).
 */
export function fillTypeOf(call: string, buf: unknown, value: number, type: FillType | undefined): FillType {
  if (type !== undefined) return type;
  const declared = buf instanceof GpuBuffer ? buf.elementType : undefined;
  if (declared !== undefined) return declared;
  if (value === 0 || typeof value !== "number") return "u8"; // a non-number fails in fillPattern
  invalid(call, `a fill of ${String(value)} needs its element type: { type: "f32" } (or "i32", "u32", "u16", "i16", "u8", "i8"), or a buffer allocated with { type }`);
}

const f32 = new Float32Array(1);
const u32v = new Uint32Array(f32.buffer);

/** The memset pattern and element size for a fill of `value` as `type`. */
export function fillPattern(call: string, value: number, type: FillType): { pattern: number; size: 1 | 2 | 4 } {
  if (typeof value !== "number" || Number.isNaN(value) && type !== "f32") invalid(call, `value must be a number, got ${describeGot(value)}`);
  const int = (lo: number, hi: number) => {
    if (!Number.isInteger(value) || value < lo || value > hi) invalid(call, `value ${value} does not fit ${type}`);
  };
  switch (type) {
    case "u8": int(0, 255); return { pattern: value, size: 1 };
    case "i8": int(-128, 127); return { pattern: value & 0xff, size: 1 };
    case "u16": int(0, 65535); return { pattern: value, size: 2 };
    case "i16": int(-32768, 32767); return { pattern: value & 0xffff, size: 2 };
    case "u32": int(0, 4294967295); return { pattern: value >>> 0, size: 4 };
    case "i32": int(-2147483648, 2147483647); return { pattern: value >>> 0, size: 4 };
    case "f32": f32[0] = value; return { pattern: u32v[0]!, size: 4 };
    default: invalid(call, `unknown fill type ${String(type)}`);
  }
}

/** One pinned host allocation: what the finaliser needs, without the HostBuffer itself. */
interface HostAllocation {
  dev: DeviceState;
  host: number;
  bytes: number;
  live: boolean;
  /** Its free was queued (or done). */
  freed: boolean;
  /** Graphs and execs that copy to or from this memory; dispose() leaves the free to the last. */
  users: number;
  /** The memory's ArrayBuffer, once made (weakly: it keeps its HostBuffer alive). */
  view?: WeakRef<ArrayBuffer>;
}

/** Free a host allocation once (outside any open capture); a closed device already freed it. */
function freeHost(h: HostAllocation): void {
  if (h.freed) return;
  h.freed = true;
  releaseOutsideCapture(h.dev, () => {
    if (h.users) h.freed = false; // held while the free waited: the last drop frees it
    else freeHostNow(h);
  });
}

/** Free it now, once (an allocation leaves `owned` when freed). */
function freeHostNow(h: HostAllocation): void {
  if (!owned.has(h)) return;
  h.freed = true;
  owned.delete(h);
  memoryStats.liveHostAllocations--;
  memoryStats.liveHostBytes -= h.bytes;
  if (h.dev.open) h.dev.api.host_free(h.dev.handle, h.host);
}

// A HostBuffer collected without dispose(): its memory is freed (outside any open capture).
const hostRegistry = new FinalizationRegistry<HostAllocation>((h) => {
  h.live = false;
  freeHost(h);
});

// The memory's ArrayBuffer (and so every TypedArray over it) keeps its HostBuffer alive: a view
// can outlive the HostBuffer object, and the finaliser must not free memory a view still
// reaches. A WeakMap entry is an ephemeron: once neither the views nor the HostBuffer are
// reachable, both go, and only then does the finaliser free the memory.
const viewOwners = new WeakMap<ArrayBuffer, HostBuffer>();

/** Pinned host memory; `array` views it without copying. Mapped memory also has `deviceAddress`. */
export class HostBuffer extends Resource {
  readonly device: DeviceRef;
  readonly byteLength: number;
  readonly mapped: boolean;
  readonly #mem: HostAllocation;
  #devAddress: number;
  #ab: ArrayBuffer | undefined;

  get #host(): number {
    return this.#mem.host;
  }

  /** @internal See Buffer's [HOLD]: the memory stays allocated until the returned function runs. */
  [HOLD](): () => void {
    const mem = this.#mem;
    if (!owned.has(mem)) return () => {}; // freed (a free only queued can still be held)
    mem.users++;
    let dropped = false;
    return () => {
      if (dropped) return;
      dropped = true;
      if (--mem.users === 0 && !mem.live) freeHost(mem);
    };
  }

  private constructor(device: DeviceRef, host: number, devAddress: number, bytes: number, mapped: boolean) {
    const mem: HostAllocation = { dev: device.state, host, bytes, live: true, freed: false, users: 0 };
    super(device.state, host, "host buffer", mem);
    this.device = device;
    this.#mem = mem;
    owned.set(this.#mem, new WeakRef(this));
    memoryStats.liveHostAllocations++;
    memoryStats.liveHostBytes += bytes;
    this.#devAddress = devAddress;
    this.byteLength = bytes;
    this.mapped = mapped;
    this.watch(hostRegistry, this.#mem, this.#mem);
  }

  static alloc(device: DeviceRef, bytes: number, mapped = false): HostBuffer {
    if (!isDevice(device)) invalid("HostBuffer.alloc", "device must be a Device");
    checkSize("HostBuffer.alloc", "size", bytes);
    if (bytes === 0) invalid("HostBuffer.alloc", "size must be at least 1 byte");
    const h = device.handle;
    reserve(bytes);
    const flags = mapped ? HostAllocFlag.MAPPED : 0;
    const [host, dptr] = allocRetry(() => device.state.api.host_alloc(h, bytes, flags));
    return new HostBuffer(device, host, mapped ? dptr : 0, bytes, mapped);
  }

  #check(call: string): void {
    this.live(call);
  }

  /** The host address (for async copies). */
  get hostAddress(): number {
    this.#check("HostBuffer.hostAddress");
    return this.#host;
  }

  /** The device address of mapped memory (kernels can read and write it directly). */
  get deviceAddress(): number {
    this.#check("HostBuffer.deviceAddress");
    if (!this.mapped) invalid("HostBuffer.deviceAddress", "allocate with { mapped: true } to get a device address");
    return this.#devAddress;
  }

  /** The memory as an ArrayBuffer (no copy). Detached when the buffer is disposed. */
  get buffer(): ArrayBuffer {
    this.#check("HostBuffer.buffer");
    if (!this.#ab) {
      this.#ab = nativeView(this.#host, this.byteLength);
      viewOwners.set(this.#ab, this);
      this.#mem.view = new WeakRef(this.#ab);
    }
    return this.#ab;
  }

  /** A typed view of the memory, e.g. `hb.as(Float32Array)`. */
  as<T extends TypedArray>(C: TypedArrayCtor<T> & { new (b: ArrayBuffer, o: number, n: number): T }): T {
    typedArrayCtor("HostBuffer.as", C);
    if (this.byteLength % C.BYTES_PER_ELEMENT)
      invalid("HostBuffer.as", `${this.byteLength} bytes is not a whole number of ${C.BYTES_PER_ELEMENT}-byte elements`);
    return new C(this.buffer, 0, this.byteLength / C.BYTES_PER_ELEMENT);
  }

  get bytes(): Uint8Array {
    return new Uint8Array(this.buffer);
  }

  /**
   * Free the memory (views are detached first); dispose() is idempotent and never throws. Inside
   * an open capture the free waits for the capture to end, and a graph or exec still copying to
   * or from the memory frees it when the last of them goes.
   */
  protected [RELEASE](): void {
    if (owned.has(this.#mem)) owned.set(this.#mem, null);
    // Detach every view first, so no TypedArray can reach freed memory.
    if (this.#ab) {
      try {
        this.#ab.transfer(0);
      } catch {
        /* an ArrayBuffer Bun cannot detach: views stay, memory below is freed */
      }
      this.#ab = undefined;
    }
    if (this.#mem.users) return; // a graph or exec still copies to or from it: the last one frees it
    freeHost(this.#mem);
  }

  /** "HostBuffer(4096 bytes pinned on cpu, mapped)"; ", disposed" once freed. */
  override toString(): string {
    return `HostBuffer(${bytesText(this.byteLength)} pinned on ${this.device.spec}${this.mapped ? ", mapped" : ""}${this.disposed ? ", disposed" : ""})`;
  }
}
