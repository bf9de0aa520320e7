// MemoryPool: where stream-ordered allocations (Stream.alloc) come from. Each device has one
// (device.defaultPool); `new MemoryPool(device, { releaseThreshold })` makes more. A pool keeps
// freed blocks for reuse in stream order (the shim's bg_mempool_*: CUDA's cuMemPool, the CPU
// backend's own pool; Metal allocates plainly with the same API), gives memory back above its
// release threshold at each synchronize, and counts what it holds.
import { isDevice, type DeviceRef } from "./device_state";
import { describeGot, invalid, options, type OptionKeys } from "./errors";
import { checkSize } from "./buffer";
import { RELEASE, Resource } from "./resource";

// The keys each options argument may have (errors.ts `options` refuses any other).
const POOL_KEYS: OptionKeys<MemoryPoolOptions> = { releaseThreshold: true };

export interface MemoryPoolOptions {
  /**
   * Bytes of unused memory the pool may keep across a synchronize (of a stream or the device);
   * above it the pool gives unused blocks back. Default 0, as CUDA's: everything unused goes back
   * at each synchronize. Use a large value (e.g. Number.MAX_SAFE_INTEGER) to keep memory.
   */
  releaseThreshold?: number;
}

/** What a pool holds, in bytes. Peaks count since creation or the last resetPeak(). */
export interface MemoryPoolStats {
  /** Memory the pool holds: blocks handed out plus blocks kept for reuse. */
  reserved: number;
  /** Memory handed out and not yet freed. */
  used: number;
  reservedPeak: number;
  usedPeak: number;
}

function threshold(call: string, v: unknown): number {
  return checkSize(call, "releaseThreshold", v);
}

/** @internal The key of the constructor's option that adopts the device's default pool. */
export const ADOPT_DEFAULT: unique symbol = Symbol("bungpu.defaultPool");

export class MemoryPool extends Resource {
  readonly device: DeviceRef;
  /** The device's own pool (device.defaultPool): dispose() leaves it to the device. */
  readonly isDefault: boolean;
  #threshold: number;

  constructor(device: DeviceRef, opts: MemoryPoolOptions = {}) {
    if (!isDevice(device)) invalid("MemoryPool", `device must be a Device, got ${describeGot(device)}`);
    opts = options("MemoryPool", opts, POOL_KEYS);
    const adopt = (opts as { [ADOPT_DEFAULT]?: true })[ADOPT_DEFAULT] === true;
    const t = adopt ? 0 : threshold("MemoryPool", opts.releaseThreshold ?? 0);
    const dh = device.handle; // throws once the device is disposed
    const api = device.state.api;
    super(device.state, adopt ? api.mempool_default(dh) : api.mempool_create(dh, t), "memory pool");
    this.device = device;
    this.isDefault = adopt;
    this.#threshold = t;
    if (!adopt) this.track("pool");
  }

  /** The native pool handle. */
  get handle(): number {
    return this.liveHandle;
  }

  /** See MemoryPoolOptions.releaseThreshold. */
  get releaseThreshold(): number {
    return this.#threshold;
  }

  set releaseThreshold(bytes: number) {
    const t = threshold("MemoryPool.releaseThreshold", bytes);
    this.dev.api.mempool_set_threshold(this.handle, t);
    this.#threshold = t;
  }

  /**
   * Give unused memory back until the pool holds at most `keepBytes`. Blocks in use, and blocks
   * whose free has not yet run on its stream, stay.
   */
  trim(keepBytes = 0): void {
    checkSize("MemoryPool.trim", "keepBytes", keepBytes);
    this.dev.api.mempool_trim(this.handle, keepBytes);
  }

  get stats(): MemoryPoolStats {
    const [reserved, used, reservedPeak, usedPeak] = this.dev.api.mempool_stats(this.handle);
    return { reserved, used, reservedPeak, usedPeak };
  }

  /** Start the peaks again from the current values. */
  resetPeak(): void {
    this.dev.api.mempool_reset_peak(this.handle);
  }

  protected override get owns(): boolean {
    return !this.isDefault;
  }

  /** Destroy the pool; blocks still handed out stay valid until they are freed. */
  protected [RELEASE](): void {
    this.dev.api.mempool_destroy(this.rawHandle);
  }
}
