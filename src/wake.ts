// Completion without polling. A wait asks the stream to call back when it gets there
// (bg_stream_notify: the CPU backend's worker counts the work finished first, then calls; elsewhere
// a host function) with a thread-safe bun:ffi callback (ffi/wake.ts): the device's thread queues
// the call to the JavaScript thread and wakes its event loop, and the wait settles in that turn. No timer runs while the work runs, so a wait settles within
// microseconds of the work finishing, and a busy event loop delays it by at most the turn it is in.
//
// Two things a host function alone does not give, and what this module adds:
//  - Keeping the process alive. A pending native callback is not an event-loop handle: one shared
//    interval timer is ref'd while anything waits, unref'd when nothing does.
//  - Lost wake-ups. CUDA does not call a host function once its context has failed
//    (cuLaunchHostFunc), so the same interval asks each wait older than WATCH_MS whether its work
//    is finished or failed (the query the polling path uses) and settles it if the next pass
//    still finds it waiting (the callback may be queued behind the timer).
// Where no callback can be made, or BUNGPU_COMPLETION=poll asks for it, or the stream is capturing
// (a host function would become a graph node), waits poll as before (poll.ts).
import { wakeCallback, type WakeCallback } from "../ffi/wake";
import type { Api } from "../ffi/result";
import { StreamFlag } from "../ffi/constants";
import type { DeviceState } from "./device_state";

interface Waiter {
  resolve(): void;
  /** True once the waited-for work has finished or failed (the safety net's query). */
  check(): boolean;
  since: number;
  /** The safety net found the work done but the callback not yet run: it settles the wait on its next pass. */
  doneSeen: boolean;
}

const WATCH_MS = 20;

const waiters = new Map<number, Waiter>();
let nextToken = 1;
let callback: WakeCallback | null | undefined;
let watchdog: ReturnType<typeof setInterval> | undefined;
let watchdogRefd = false;

/** Wake-ups delivered by the callback, and waits the safety net settled instead (tests read these). */
export const wakeStats = { woken: 0, rescued: 0, polled: 0 };

function settle(token: number, w: Waiter): void {
  waiters.delete(token);
  if (waiters.size === 0 && watchdogRefd) {
    watchdog?.unref();
    watchdogRefd = false;
  }
  w.resolve();
}

function onWake(token: number): void {
  const w = waiters.get(token);
  if (!w) return; // already settled by the safety net
  wakeStats.woken++;
  settle(token, w);
}

function watch(): void {
  const now = performance.now();
  for (const [token, w] of waiters) {
    if (now - w.since < WATCH_MS) continue;
    let done: boolean;
    try {
      done = w.check();
    } catch {
      done = true; // a failed query: the wait's owner reports the failure
    }
    // Work found done is given one more pass for its callback, which may be queued behind this
    // very timer: only a callback still missing then (CUDA skips them after a context error) is lost.
    if (done && w.doneSeen) {
      wakeStats.rescued++;
      settle(token, w);
    } else if (done) w.doneSeen = true;
  }
}

function keepAlive(): void {
  if (!watchdog) watchdog = setInterval(watch, WATCH_MS);
  if (!watchdogRefd) {
    watchdog.ref();
    watchdogRefd = true;
  }
}

/** Whether waits use the callback (false: they poll). */
function wakeAvailable(): boolean {
  if (callback === undefined) callback = process.env["BUNGPU_COMPLETION"] === "poll" ? null : wakeCallback(onWake);
  return callback !== null;
}

/**
 * Resolve once `stream` (a native stream handle) has run everything queued on it before this call.
 * `check()` answers the safety net (finished or failed). Returns null where the callback is not
 * available or the backend refused the host function; the caller then polls.
 */
export function afterStream(api: Api, stream: number, check: () => boolean): Promise<void> | null {
  const w = wakeWaiter(check);
  if (w) {
    try {
      api.stream_notify(stream, w.ptr, w.token);
      return w.done;
    } catch {
      w.cancel();
    }
  }
  wakeStats.polled++;
  return null;
}

/**
 * Resolve once event `event` (a native handle, recorded) has completed: a stream of the device's
 * own waits on it and calls back (afterStream). Null where that is unavailable; the caller polls.
 */
export function afterEvent(state: DeviceState, event: number, check: () => boolean): Promise<void> | null {
  if (!wakeAvailable()) {
    wakeStats.polled++;
    return null;
  }
  const api = state.api;
  let s = state.wakeStreams.pop();
  try {
    s ??= api.stream_create(state.handle, StreamFlag.NON_BLOCKING, 0);
    api.stream_wait_event(s, event);
  } catch {
    if (s !== undefined) state.wakeStreams.push(s);
    wakeStats.polled++;
    return null;
  }
  const woken = afterStream(api, s, check);
  if (!woken) {
    state.wakeStreams.push(s);
    return null;
  }
  const h = s;
  return woken.finally(() => {
    if (state.open) state.wakeStreams.push(h);
  });
}

/** Destroy the device's wake streams (it is closing; they have finished: the device waited). */
export function closeWakeStreams(state: DeviceState): void {
  for (const s of state.wakeStreams.splice(0)) {
    try {
      state.api.stream_destroy(s);
    } catch {
      /* the device closes regardless */
    }
  }
}

/**
 * A wait that something other than a stream wakes: the thread-safe callback's address and the
 * token to give it (a ring kernel's doorbell, bungpu.h), and the promise it settles. `check()`
 * answers the safety net as for afterStream. Null where the callback is not available.
 */
export function wakeWaiter(check: () => boolean): { ptr: number; token: number; done: Promise<void>; cancel(): void } | null {
  if (!wakeAvailable()) return null;
  const token = nextToken++;
  if (nextToken > 0x7fffffff) nextToken = 1;
  let resolve!: () => void;
  const done = new Promise<void>((r) => (resolve = r));
  const w: Waiter = { resolve, check, since: performance.now(), doneSeen: false };
  waiters.set(token, w);
  keepAlive();
  // No longer wanted (its owner woke otherwise): forget it; a late call of its token does nothing.
  const cancel = () => {
    if (waiters.get(token) === w) settle(token, w);
  };
  return { ptr: callback!.ptr, token, done, cancel };
}
