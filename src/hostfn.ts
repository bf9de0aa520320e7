// TypeScript functions run in stream order. A JavaScript function is never called from a native
// thread: the stream reaches a hand-off point and waits; this module, polling from the JS thread,
// runs the function and releases the stream. Two hand-offs:
//  - CUDA: the stream records an event, then waits with cuStreamWaitValue32 on a word of mapped
//    pinned memory until TypeScript writes RELEASED there, then writes IDLE back
//    (cuStreamWriteValue32). TypeScript polls the event. No driver thread is held meanwhile:
//    CUDA runs every stream's cuLaunchHostFunc callbacks on one thread, so a parked callback
//    stalled the host functions of all other streams, and a wait across streams could deadlock.
//  - Elsewhere (and on a CUDA driver without stream memory operations): a shim signal, a host
//    function that stores REACHED in its state word and waits for RELEASED.
import { api, nativeView, type Api } from "../ffi/result";
import { EventFlag, HostAllocFlag, Signal } from "../ffi/constants";
import { backends, type BackendName } from "./backends";
import type { DeviceState } from "./device_state";
import { GpuError, Status } from "./errors";

interface Pending {
  fn: () => unknown;
  running: boolean;
  onError: (e: unknown) => void;
  /** The native handle of the stream the function belongs to. */
  stream: number;
  /** Has the stream reached the function? */
  reached(): boolean;
  /** Let the stream go on (the function has finished). */
  release(): void;
}

/** The stream whose host function is executing right now on this thread, or 0. */
let runningOn = 0;

/**
 * Refuse a blocking wait made from inside a host function when the wait includes that
 * function's own stream: the stream is parked until the function returns, so the wait could
 * never end. (CUDA forbids driver calls in host functions outright; here waits on other streams
 * and reads of their results stay allowed.)
 */
export function refuseSelfWait(call: string, waitsOn: (stream: number) => boolean): void {
  if (runningOn !== 0 && waitsOn(runningOn))
    throw new GpuError(
      Status.ILLEGAL_STATE,
      `${call}: called from a host function of a stream it would wait for; that stream is held until the function returns. Use the stream's async forms, or do this after the function`,
      { backend: "typescript", call },
    );
}

/**
 * Whether a host function of a stream `waitsOn` names holds that stream now: this runs inside
 * it, or it is an async function awaiting its promise (which cannot settle while the JS thread
 * blocks). Either way the stream is held until the function finishes, so a dispose() that must
 * wait for it is deferred instead (deferDispose): waiting would deadlock, and dispose() never
 * throws.
 */
export function insideHostFnOf(waitsOn: (stream: number) => boolean): boolean {
  if (runningOn !== 0 && waitsOn(runningOn)) return true;
  for (const p of pending) if (p.running && waitsOn(p.stream)) return true;
  return false;
}

/**
 * Try a deferred dispose() again shortly. The timer does not keep the process alive by itself
 * (an async host function that never settles must not, either).
 */
export function deferDispose(retry: () => void): void {
  const t = setTimeout(retry, 2);
  (t as { unref?: () => void }).unref?.();
}

/** The calls that belong to no device (signals). */
const shim = api();

const pool: { sig: number; word: Uint32Array }[] = [];
const pending = new Set<Pending>();

function takeSignal(): { sig: number; word: Uint32Array } {
  const s = pool.pop();
  if (s) return s;
  const sig = shim.signal_create();
  return { sig, word: new Uint32Array(nativeView(shim.signal_address(sig), 4)) };
}

function releaseSignal(s: { sig: number; word: Uint32Array }): void {
  shim.signal_release(s.sig);
  // The stream resets the word to IDLE after it wakes; only then may the signal be reused.
  const reuse = () => {
    if (s.word[0] === Signal.IDLE) pool.push({ sig: s.sig, word: s.word });
    else setTimeout(reuse, 1);
  };
  reuse();
}

// ---- CUDA: stream memory operations on mapped words --------------------------------------------

const WORD_IDLE = 0;
const WORD_RELEASED = 2;
const CHUNK_WORDS = 1024;

/** Per device: mapped pinned words (chunks of 4 KiB) and events, reused. */
class WordPool {
  readonly #state: DeviceState;
  readonly #chunks: { view: Uint32Array; dptr: number }[] = [];
  readonly #free: { view: Uint32Array; i: number; dptr: number }[] = [];
  /** Released words waiting for their stream to write IDLE back. */
  readonly #settling: { view: Uint32Array; i: number; dptr: number }[] = [];
  readonly #events: number[] = [];
  /** The device's calls (its backend can wait on a word: see BackendRecord.streamWaitValue). */
  readonly #api: Api;
  constructor(state: DeviceState) {
    this.#state = state;
    this.#api = state.api;
  }

  #word(): { view: Uint32Array; i: number; dptr: number } {
    for (let k = this.#settling.length - 1; k >= 0; k--) {
      const w = this.#settling[k]!;
      if (w.view[w.i] === WORD_IDLE) {
        this.#settling.splice(k, 1);
        this.#free.push(w);
      }
    }
    const w = this.#free.pop();
    if (w) return w;
    this.#chunk();
    return this.#free.pop()!;
  }

  #chunk(): void {
    const [host, dptr] = this.#api.host_alloc(this.#state.handle, CHUNK_WORDS * 4, HostAllocFlag.MAPPED);
    const view = new Uint32Array(nativeView(host, CHUNK_WORDS * 4));
    view.fill(WORD_IDLE);
    this.#chunks.push({ view, dptr });
    for (let i = CHUNK_WORDS - 1; i >= 0; i--) this.#free.push({ view, i, dptr: dptr + 4 * i });
  }

  /** The first chunk, now: see beforeFirstCapture. */
  reserve(): void {
    if (this.#chunks.length === 0) this.#chunk();
  }

  #event(): number {
    const e = this.#events.pop();
    if (e !== undefined) return e;
    return this.#api.event_create(this.#state.handle, EventFlag.DISABLE_TIMING);
  }

  /**
   * Queue the hand-off on `stream`: record an event, wait for the word to read RELEASED, write
   * IDLE. Returns how to see it reached and how to release it.
   */
  enqueue(stream: number): { reached(): boolean; release(): void } {
    const w = this.#word();
    const ev = this.#event();
    w.view[w.i] = WORD_IDLE;
    try {
      this.#api.event_record(ev, stream);
      this.#api.stream_wait_value32(stream, w.dptr, WORD_RELEASED);
    } catch (e) {
      this.#events.push(ev); // recorded or not, harmless: nothing waits on it
      this.#free.push(w);
      throw e;
    }
    // After the wait: the word back to IDLE, so it can be reused. Without it the word is never
    // reused (the stream still goes on once released).
    let reset = true;
    try {
      this.#api.stream_write_value32(stream, w.dptr, WORD_IDLE);
    } catch {
      reset = false;
    }
    let done = false;
    return {
      reached: () => {
        if (done) return true;
        if (!this.#state.open) return (done = true);
        // Not ready: not yet. Any failure (a sticky device error) counts as reached, so the
        // function runs and the stream is released rather than held forever.
        try {
          return (done = this.#api.event_query(ev));
        } catch {
          return (done = true);
        }
      },
      release: () => {
        w.view[w.i] = WORD_RELEASED;
        if (!this.#state.open) return;
        this.#events.push(ev);
        if (reset) this.#settling.push(w);
      },
    };
  }
}

const wordPools = new WeakMap<DeviceState, WordPool | null>();

/** Open devices whose host functions wait on words (CUDA), for beforeFirstCapture. */
const wordDevices = new Set<DeviceState>();

/** @internal A device opened (Device's constructor). */
export function noteDeviceOpened(state: DeviceState): void {
  if (backends[state.backend].streamWaitValue) wordDevices.add(state);
}

/**
 * @internal Called by Stream.beginCapture before the capture begins. The words host functions
 * wait on are mapped pinned memory (cuMemHostAlloc), and allocating it while a stream of this
 * thread captures (Global or ThreadLocal mode) is an unsafe call under CUDA's capture-mode rules:
 * refused with 900, and the capture invalidated. So a host function on another stream, legal
 * during the capture, failed when it was the device's first (the fuzzer on the driver simulator,
 * FUZZ_BACKEND=cuda, seed 1). Before the first capture of the thread begins, every open device's
 * pool gets its first chunk (1,024 words: host functions pending at once during a capture beyond
 * that still need a chunk, and fail as before).
 */
export function beforeFirstCapture(): void {
  for (const st of wordDevices) if (!st.open) wordDevices.delete(st);
  for (const st of wordDevices) if (st.captures > 0) return; // (a capture is open: allocating now is the unsafe call)
  for (const st of wordDevices) wordPool(st)?.reserve();
}

/** The word pool of a device whose streams wait on words (CUDA), or null (then: a shim signal). */
function wordPool(state: DeviceState): WordPool | null {
  let p = wordPools.get(state);
  if (p === undefined) {
    p = backends[state.backend].streamWaitValue && !process.env["BUNGPU_HOSTFN_SIGNALS"] ? new WordPool(state) : null;
    wordPools.set(state, p);
  }
  return p;
}

function runOne(p: Pending): void {
  p.running = true;
  let result: unknown;
  const outer = runningOn;
  runningOn = p.stream;
  try {
    result = p.fn();
  } catch (e) {
    runningOn = outer;
    p.onError(e);
    finish(p);
    return;
  }
  runningOn = outer;
  if (result && typeof (result as Promise<unknown>).then === "function") {
    (result as Promise<unknown>).then(
      () => finish(p),
      (e) => {
        p.onError(e);
        finish(p);
      },
    );
  } else finish(p);
}

function finish(p: Pending): void {
  pending.delete(p);
  p.release();
}

/** Run every host function whose stream has reached it. Returns how many are still pending. */
export function serviceHostFns(): number {
  if (pending.size === 0) return 0;
  for (const p of pending) if (!p.running && p.reached()) runOne(p);
  return pending.size;
}

export function hostFnsPending(): number {
  return pending.size;
}

/** Enqueue `fn` on `stream` (a native stream handle) of the device whose state is `state`. */
export function enqueueHostFn(stream: number, fn: () => unknown, onError: (e: unknown) => void, backend?: BackendName, state?: DeviceState): void {
  const words = state ? wordPool(state) : null;
  if (words) {
    let handoff: { reached(): boolean; release(): void } | null = null;
    try {
      handoff = words.enqueue(stream);
    } catch (e) {
      // A driver without stream memory operations: signals from now on, for this device.
      if (!(e instanceof GpuError && e.code === Status.NOT_SUPPORTED)) throw e;
      wordPools.set(state!, null);
    }
    if (handoff) {
      pending.add({ fn, running: false, onError, stream, reached: handoff.reached, release: handoff.release });
      kick();
      return;
    }
  }
  const s = takeSignal();
  try {
    api(backend).stream_host_signal(stream, s.sig);
  } catch (e) {
    pool.push(s);
    throw e;
  }
  pending.add({ fn, running: false, onError, stream, reached: () => s.word[0] === Signal.REACHED, release: () => releaseSignal(s) });
  kick();
}

/**
 * Keep servicing while anything is pending, without blocking the event loop: a short phase of
 * setImmediate turns, then setTimeout with a backing-off delay (as pollUntil). The loop keeps the
 * process alive while a host function is still to run (its stream will reach it); once every
 * pending one is running (an async function awaiting its promise), the loop's timer is unref'd:
 * a promise that never settles does not keep the process alive, as with any pending promise.
 * Whatever that promise awaits (a timer, I/O) keeps the process alive by itself.
 */
function kick(): void {
  if (servicing) {
    timer?.ref(); // a new function to run: keep the process alive for it again
    return;
  }
  if (pending.size === 0) return;
  servicing = true;
  const start = performance.now();
  let delay = 0;
  const tick = () => {
    try {
      serviceHostFns();
    } catch {
      /* a failing hand-off is the stream's to report; keep servicing the others */
    }
    timer = undefined;
    if (pending.size === 0) {
      servicing = false;
      return;
    }
    if (performance.now() - start < 2) {
      setImmediate(tick);
      return;
    }
    delay = Math.min(4, delay + 0.5);
    timer = setTimeout(tick, delay);
    let waiting = true;
    for (const p of pending) if (!p.running) waiting = false;
    if (waiting) timer.unref();
  };
  setImmediate(tick);
}
let servicing = false;
let timer: ReturnType<typeof setTimeout> | undefined;

// ---- failures: reported by the next wait, never dropped ------------------------------------------

/** Host-function failures of one stream that no wait has reported yet. */
export interface FailureSink {
  /** The native device handle of the stream (device-wide waits report these too). */
  device: number;
  errors: unknown[];
}

const unreported = new Set<FailureSink>();
let exitHook = false;

/** A host function of the stream whose sink this is threw (or its promise rejected). */
export function recordFailure(sink: FailureSink, e: unknown): void {
  sink.errors.push(e);
  unreported.add(sink);
  if (!exitHook && typeof process !== "undefined" && typeof process.on === "function") {
    exitHook = true;
    // Nothing waited for them before the event loop emptied: unhandled rejections, so the
    // failure is seen (and the exit code says so), as a throw from any other callback would be.
    process.on("beforeExit", () => {
      for (const sink of [...unreported]) abandonFailures(sink, "Stream.hostFn");
    });
  }
}

function failureError(call: string, errors: unknown[]): GpuError {
  const msg = (e: unknown) => (e instanceof Error ? e.message : String(e));
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more: ${errors.slice(1).map(msg).join("; ")})` : "";
  const err = new GpuError(Status.LAUNCH_FAILED, `${call}: a host function on this stream threw: ${msg(errors[0])}${more}`, {
    backend: "typescript",
    call,
  });
  (err as { cause?: unknown }).cause = errors[0];
  return err;
}

/** A wait on the stream of `sink` finished: throw what its host functions threw since the last. */
export function raiseFailures(call: string, sink: FailureSink): void {
  if (sink.errors.length === 0) return;
  const errors = sink.errors.splice(0);
  unreported.delete(sink);
  throw failureError(call, errors);
}

/** A device-wide wait finished: throw what host functions of any stream of `device` threw. */
export function raiseDeviceFailures(call: string, device: number): void {
  const errors: unknown[] = [];
  for (const sink of unreported)
    if (sink.device === device) {
      errors.push(...sink.errors.splice(0));
      unreported.delete(sink);
    }
  if (errors.length) throw failureError(call, errors);
}

/**
 * The stream goes (disposed or collected) with failures no wait reported: raise them as an
 * unhandled rejection instead of dropping them (dispose() itself never throws for them).
 */
export function abandonFailures(sink: FailureSink, call: string): void {
  if (sink.errors.length === 0) return;
  const errors = sink.errors.splice(0);
  unreported.delete(sink);
  void Promise.reject(failureError(call, errors));
}

/**
 * Before a blocking native wait: refuse it if made from inside a host function of a stream it
 * waits on (`waitsOn`), and otherwise run the queued host functions until `ready()`, so the
 * native wait that follows cannot be held up by the JS thread.
 */
export function beforeBlockingWait(call: string, waitsOn: (stream: number) => boolean, ready: () => boolean): void {
  refuseSelfWait(call, waitsOn);
  // Both: a stream that cannot be queried (capturing) counts as idle, yet the native wait still
  // needs its host functions run.
  if (pending.size) blockUntil(() => !pendingOn(waitsOn) && ready(), call);
}

/** Whether a host function queued on a stream `waitsOn` accepts has not finished yet. */
function pendingOn(waitsOn: (stream: number) => boolean): boolean {
  for (const p of pending) if (waitsOn(p.stream)) return true;
  return false;
}

/**
 * Block the JS thread until `ready()` holds, running host functions meanwhile (a blocking wait
 * would otherwise deadlock on a stream held for the JS thread). An async host function cannot be
 * finished while the thread is blocked: that is refused with a GpuError instead of hanging.
 */
export function blockUntil(ready: () => boolean, call: string): void {
  let spins = 0;
  while (!ready()) {
    for (const p of pending)
      if (p.running)
        throw new GpuError(
          Status.ILLEGAL_STATE,
          `${call}: would wait forever on an async host function; use the awaitable form (done())`,
          { backend: "typescript", call },
        );
    serviceHostFns();
    if (++spins > 1000) Bun.sleepSync(0.05);
  }
}
