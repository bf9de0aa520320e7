// The ring kernels' generated sources: the options a user gives, checked, and the source of each
// backend, written by its record (ring.source) around the user's handler.
import { backendOf, type BackendName } from "../backends";
import type { RingShape } from "../backends/ring";
import { describeGot, invalid } from "../errors";

export { BATCH_KERNEL, RING_KERNEL } from "../backends/ring";

/** A handler in one text for every backend, or one per backend name. */
export type HandlerSource = string | Partial<Record<BackendName, string>>;

export interface RingSourceOptions {
  /** The handler, in the backend's kernel language: defines `BG_RING_HANDLER(msg, resp, state) { ... }`,
   * or a function named by `entry` with the signature `void f(const void* msg, void* resp, void* state)`
   * (MSL: `device` pointers to uchar). One C text can serve the CPU and CUDA: on CUDA it is
   * compiled as CUDA C++ where helper functions need no `__device__` and BG_RING_HANDLER's
   * parameters convert implicitly to any pointer, as `void*` does in C; an `entry` function's own
   * `void*` parameters need explicit casts there, and `void*` arithmetic is not accepted. */
  handler: HandlerSource;
  /** Name of a handler function to call instead of BG_RING_HANDLER's. */
  entry?: string;
  messageBytes: number;
  /** Bytes per response (default messageBytes). */
  responseBytes?: number;
  /** Bytes of persistent state (for BG_RING_STATE_BYTES). */
  stateBytes?: number;
}

/** A ring's message size and capacity, checked (GpuError INVALID_VALUE when out of range). */
export function checkRingShape(call: string, messageBytes: unknown, capacity: unknown): void {
  if (typeof messageBytes !== "number" || !Number.isInteger(messageBytes) || messageBytes < 4 || messageBytes > 65536 || messageBytes % 4)
    invalid(call, `messageBytes must be a multiple of 4 in 4..65536, got ${describeGot(messageBytes)}`);
  if (typeof capacity !== "number" || !Number.isInteger(capacity) || capacity < 2 || capacity > 1 << 24 || (capacity & (capacity - 1)))
    invalid(call, `capacity must be a power of two in 2..16777216, got ${describeGot(capacity)}`);
}

/** The handler function the kernels call: BG_RING_HANDLER's, or `entry`, checked. */
export function checkEntry(call: string, entry: unknown, src: string): string {
  if (entry === undefined) {
    if (!/\bBG_RING_HANDLER\s*\(/.test(src))
      invalid(call, "the handler must define BG_RING_HANDLER(msg, resp, state) { ... }, or name its function with `entry`");
    return "bg_ring_handler";
  }
  if (typeof entry !== "string" || !/^[A-Za-z_]\w*$/.test(entry)) invalid(call, `entry must be a C identifier, got ${describeGot(entry)}`);
  return entry;
}

/** The sizes of a generated source, checked (GpuError INVALID_VALUE when out of range). */
export function sourceShape(call: string, o: { messageBytes: number; responseBytes?: number; stateBytes?: number }): RingShape {
  const mb = o.messageBytes;
  const rb = o.responseBytes ?? mb;
  checkRingShape(call, mb, 2);
  if (typeof rb !== "number" || !Number.isInteger(rb) || rb < 4 || rb > 65536 || rb % 4)
    invalid(call, `responseBytes must be a multiple of 4 in 4..65536, got ${describeGot(rb)}`);
  const sb = o.stateBytes ?? 0;
  if (!Number.isSafeInteger(sb) || sb < 0) invalid(call, `stateBytes must be a non-negative integer, got ${describeGot(sb)}`);
  return { messageBytes: mb, responseBytes: rb, stateBytes: sb };
}

function handlerFor(call: string, backend: BackendName, h: HandlerSource): string {
  const src = typeof h === "string" ? h : h && typeof h === "object" ? h[backend] : undefined;
  if (typeof src !== "string" || !src.trim()) invalid(call, `no ${backend} handler source given`);
  return src;
}

/** The full kernel source RingKernel compiles for `backend` (exported for tests and inspection). */
export function ringKernelSource(backend: BackendName, o: RingSourceOptions): string {
  const call = "ringKernelSource";
  if (!o || typeof o !== "object") invalid(call, "expected options");
  const shape = sourceShape(call, o);
  const src = handlerFor(call, backend, o.handler);
  const entry = checkEntry(call, o.entry, src);
  const record = backendOf(backend);
  if (!record) invalid(call, `unknown backend ${String(backend)}`);
  return record.ring.source(src, entry, shape);
}
