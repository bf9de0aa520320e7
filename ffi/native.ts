// The opened symbol table and its raw helpers: a scratch block for out-values, one `check` that
// turns a status into a GpuError carrying the shim's message, and the bun:ffi helpers for
// pointers to memory and views of native memory. result.ts builds the typed wrappers on these;
// src/ calls result.ts and never these; tests and benches may (to count crossings, say).
import { ptr as ffiPtr, toArrayBuffer, CString } from "bun:ffi";
import { GpuError, type BackendLabel } from "./errors";
import { lib as loadLib, load } from "./load";

/** What a native call accepts: numbers for handles, addresses and sizes; views for memory. */
export type NativeArg = number | bigint | ArrayBufferView | ArrayBuffer | null;
type Loose<T> = { readonly [K in keyof T]: (...args: NativeArg[]) => number };

/**
 * The shim's functions. Handles and device addresses are plain numbers here (bun:ffi passes a
 * number to a pointer argument as the address), so the table is typed loosely on purpose: the
 * C signatures live in sys.ts.
 */
export const N = loadLib().symbols as unknown as Loose<typeof import("./sys").symbols>;
export const loadInfo = load().info;

// A 64 KiB ArrayBuffer: large enough that Bun never moves it, so its address is stable.
const SCRATCH_BYTES = 65536;
const scratch = new ArrayBuffer(SCRATCH_BYTES);
export const scratchU8 = new Uint8Array(scratch);
export const scratchU32 = new Uint32Array(scratch);
export const scratchI32 = new Int32Array(scratch);
export const scratchF32 = new Float32Array(scratch);
export const SCRATCH = ffiPtr(scratch);

// Out slots: 8 bytes each in the first 1 KiB; the message area after it.
export const slot = (i: number): number => SCRATCH + i * 8;
export const readPtr = (i: number): number => scratchU32[i * 2]! + scratchU32[i * 2 + 1]! * 4294967296;
export const readU64 = readPtr;
export const readI32 = (i: number): number => scratchI32[i * 2]!;
export const readF32 = (i: number): number => scratchF32[i * 2]!;
const MSG_OFFSET = 1024;
const MSG_CAP = 4096;
export const MSG_AREA = SCRATCH + MSG_OFFSET;
export const readMsg = (): string => {
  const end = scratchU8.indexOf(0, MSG_OFFSET);
  return new TextDecoder().decode(scratchU8.subarray(MSG_OFFSET, end < 0 ? MSG_OFFSET + MSG_CAP : end));
};

/** The calling thread's last shim message. */
export function lastError(): string {
  N.bg_last_error(MSG_AREA, MSG_CAP);
  return readMsg();
}

/** Throw a GpuError for a non-zero status, with the shim's own message. */
export function fail(rc: number, call: string, backend?: BackendLabel): never {
  const msg = lastError() || `${call} failed`;
  throw new GpuError(rc, msg, { backend, call });
}

/** Check a status: returns nothing on BG_OK, throws GpuError otherwise. */
export function check(rc: number, call: string, backend?: BackendLabel): void {
  if (rc !== 0) fail(rc, call, backend);
}

const enc = new TextEncoder();
/** A NUL-terminated UTF-8 copy of `s` (pass it directly as a synchronous argument). */
export function cstr(s: string): Uint8Array {
  const b = enc.encode(s);
  const out = new Uint8Array(b.length + 1);
  out.set(b);
  return out;
}

export function addressOf(view: ArrayBufferView | ArrayBuffer, byteOffset = 0): number {
  return ffiPtr(view as unknown as ArrayBuffer, byteOffset);
}

/** A view of `bytes` of native memory at `address` (no copy). */
export function nativeView(address: number, bytes: number): ArrayBuffer {
  return toArrayBuffer(address, 0, bytes);
}

export function cString(address: number): string {
  return new CString(address).toString();
}

export { ffiPtr as ptr };
