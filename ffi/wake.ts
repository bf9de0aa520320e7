// The one native-to-JavaScript entry point: a thread-safe bun:ffi callback that a device thread
// (the CPU backend's stream worker, CUDA's host-function thread, Metal's completion queue) calls
// when it reaches a host function. Bun does not run JavaScript on that thread: the call is queued
// to the JavaScript thread's event loop and wakes it, and the native thread goes on at once. So
// completion needs no timer: the work wakes the loop itself.
import { JSCallback } from "bun:ffi";

export interface WakeCallback {
  /** The C function pointer (bg_host_fn: void (*)(void* user)). */
  readonly ptr: number;
  close(): void;
}

/**
 * A thread-safe callback taking one pointer-sized token. `onWake(token)` runs on the JavaScript
 * thread, in a later turn of the event loop than the native call. Null where the runtime cannot
 * make one (the caller then polls).
 */
export function wakeCallback(onWake: (token: number) => void): WakeCallback | null {
  try {
    const cb = new JSCallback((token: number | bigint | null) => onWake(Number(token ?? 0)), { args: ["ptr"], returns: "void", threadsafe: true });
    const p = cb.ptr;
    if (p === null || p === 0) {
      cb.close();
      return null;
    }
    return { ptr: Number(p), close: () => cb.close() };
  } catch {
    return null;
  }
}
