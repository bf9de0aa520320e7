// Ring: TypeScript wrapper over the shim's single-producer single-consumer rings (bg_ring_*).
// Batches cross the FFI once; head and tail are also read directly through a zero-copy view of
// the ring header, so polling for a response costs no FFI call.
import { nativeView, type Api } from "../../ffi/result";
import { RING_HEAD_OFFSET, RING_TAIL_OFFSET, RING_META_OFFSET } from "../../ffi/constants";
import type { Device } from "../device";
import { isDevice } from "../device_state";
import { describeGot, invalid, disposed, options, type OptionKeys } from "../errors";
import { checkRingShape } from "./source";

// The keys each options argument may have (errors.ts `options` refuses any other).
const RING_KEYS: OptionKeys<RingOptions> = { messageBytes: true, capacity: true };

export interface RingOptions {
  /** Bytes per message: a multiple of 4, 4..65536. */
  messageBytes: number;
  /** Messages the ring holds: a power of two, 2..16777216. */
  capacity: number;
}

const HEAD_W = RING_HEAD_OFFSET / 4;
const TAIL_W = RING_TAIL_OFFSET / 4;
const META_W = RING_META_OFFSET / 4;
/** The word of the header a consumer reads to stop (0 open, 1 stop once drained, 2 abort). */
export const CLOSED_W = META_W + 2;

/** Bytes of `v` as a Uint8Array view (no copy), or a GpuError. */
export function bytesView(call: string, v: unknown): Uint8Array {
  if (v instanceof Uint8Array) return v;
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  invalid(call, `expected a TypedArray, DataView or ArrayBuffer message, got ${describeGot(v)}`);
}

// The raw push and pop, for callers that have already checked the handle, the view and the count
// against the ring (Ring.push/pop and the ring transport). Not re-exported from the package: a
// wrong count or view here would let the shim read or write past the caller's array.
// `gpu` is the ring's device's result layer (device.state.api).
export function pushChecked(gpu: Api, h: number, u8: Uint8Array, n: number): number {
  return gpu.ring_push(h, u8, n);
}

export function popChecked(gpu: Api, h: number, out: Uint8Array, max: number): number {
  return gpu.ring_pop(h, out, max);
}

/**
 * A single-producer single-consumer ring of fixed-size messages in memory the host and the
 * device both see (shim: bg_ring_*). Never overwrites: `push` accepts what fits.
 */
export class Ring {
  readonly device: Device;
  readonly messageBytes: number;
  readonly capacity: number;
  #handle: number;
  #live = true;
  #host: number;
  #devAddr: number;
  #hdrAb: ArrayBuffer | undefined;
  /** u32 words over the 384-byte header: head lo at 0, tail lo at 32, meta at 64.. */
  #hdr: Uint32Array;

  private constructor(device: Device, handle: number, messageBytes: number, capacity: number) {
    this.device = device;
    this.#handle = handle;
    this.messageBytes = messageBytes;
    this.capacity = capacity;
    [this.#host, this.#devAddr] = device.state.api.ring_address(handle);
    this.#hdrAb = nativeView(this.#host, RING_META_OFFSET + 48); // meta words 0..11: sizes, closed, the doorbell
    this.#hdr = new Uint32Array(this.#hdrAb);
  }

  static create(device: Device, opts: RingOptions): Ring {
    const call = "Ring.create";
    if (!isDevice(device)) invalid(call, "expected a Device");
    if (!opts || typeof opts !== "object") invalid(call, "expected { messageBytes, capacity }");
    options(call, opts, RING_KEYS);
    checkRingShape(call, opts.messageBytes, opts.capacity);
    return new Ring(device, device.state.api.ring_create(device.handle, opts.messageBytes, opts.capacity), opts.messageBytes, opts.capacity);
  }

  get handle(): number {
    if (!this.device.state.open) disposed("Ring", "device of this ring");
    if (!this.#live) disposed("Ring", "ring");
    return this.#handle;
  }

  get disposed(): boolean {
    return !this.#live || !this.device.state.open;
  }

  /** Host address of the ring's base (header, then data at +384). */
  get hostAddress(): number {
    this.handle;
    return this.#host;
  }

  /** Device address of the ring's base (what a kernel receives). */
  get deviceAddress(): number {
    this.handle;
    return this.#devAddr;
  }

  /** Messages in the ring now (read from the header, no FFI call). */
  count(): number {
    this.handle;
    return (this.#hdr[TAIL_W]! - this.#hdr[HEAD_W]!) >>> 0;
  }

  /**
   * @internal Ask the producer to call `fn(user)` (a C function pointer, bungpu.h's doorbell) after
   * it next publishes: the function and its argument first, then the bell (a sequentially
   * consistent store, which the producer's exchange reads).
   */
  armBell(fn: number, user: number): void {
    const m = META_W, h = this.#hdr;
    h[m + 6] = fn >>> 0;
    h[m + 7] = Math.floor(fn / 4294967296) >>> 0;
    h[m + 8] = user >>> 0;
    h[m + 9] = Math.floor(user / 4294967296) >>> 0;
    Atomics.store(h, m + 4, 1);
  }

  /** @internal Unchecked count for hot polling loops of an owner that keeps the ring alive. */
  countFast(): number {
    return (this.#hdr[TAIL_W]! - this.#hdr[HEAD_W]!) >>> 0;
  }

  /** Free slots now. */
  room(): number {
    return this.capacity - this.count();
  }

  /** The `closed` word of the header (0 open; its meaning beyond that is the users'). */
  get closed(): number {
    this.handle;
    return Atomics.load(this.#hdr, CLOSED_W);
  }

  set closed(v: number) {
    this.handle;
    if (!Number.isInteger(v) || v < 0 || v > 4294967295) invalid("Ring.closed", `expected a u32, got ${describeGot(v)}`);
    Atomics.store(this.#hdr, CLOSED_W, v);
  }

  /** @internal */
  closedFast(): number {
    return Atomics.load(this.#hdr, CLOSED_W);
  }

  /**
   * Push whole messages from `msgs` (byteLength a multiple of messageBytes); returns how many
   * fitted (0 when full). Never overwrites.
   */
  push(msgs: ArrayBufferView | ArrayBuffer, count?: number): number {
    const call = "Ring.push";
    const h = this.handle;
    const u8 = bytesView(call, msgs);
    const mb = this.messageBytes;
    if (u8.byteLength % mb) invalid(call, `${u8.byteLength} bytes is not a whole number of ${mb}-byte messages`);
    const max = u8.byteLength / mb;
    const n = count ?? max;
    if (!Number.isInteger(n) || n < 0 || n > max) invalid(call, `count must be an integer in 0..${max}, got ${describeGot(count)}`);
    if (n === 0) return 0;
    return pushChecked(this.device.state.api, h, u8, n);
  }

  /**
   * Pop up to `max` messages (default: all there are, at most capacity) into `into` (or a new
   * array); returns the bytes popped (a view of `into` of k * messageBytes).
   */
  pop(max?: number, into?: Uint8Array): Uint8Array {
    const call = "Ring.pop";
    const h = this.handle;
    const mb = this.messageBytes;
    let m = max ?? (into ? Math.floor(into.byteLength / mb) : this.count());
    if (!Number.isInteger(m) || m < 0) invalid(call, `max must be a non-negative integer, got ${describeGot(max)}`);
    if (into !== undefined) {
      if (!(into instanceof Uint8Array)) invalid(call, "into must be a Uint8Array");
      if (m * mb > into.byteLength) invalid(call, `into holds ${Math.floor(into.byteLength / mb)} messages, asked for ${m}`);
    }
    m = Math.min(m, this.capacity);
    const out = into ?? new Uint8Array(Math.min(m, this.count()) * mb);
    if (!into) m = out.byteLength / mb;
    if (m === 0) return out.subarray(0, 0);
    const k = popChecked(this.device.state.api, h, out, m);
    return out.subarray(0, k * mb);
  }

  dispose(): void {
    if (!this.#live) return;
    this.#live = false;
    try {
      this.#hdrAb?.transfer(0);
    } catch {
      /* a view Bun cannot detach: nothing else reads it once the ring is dead */
    }
    this.#hdrAb = undefined;
    const st = this.device.state;
    if (!st.open) return;
    try {
      st.api.ring_destroy(this.#handle);
    } catch {
      /* dispose never throws: a ring the shim refused to free goes with its device */
    }
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
