// TypeScript functions run in stream order. A JavaScript function is never called from a native
// thread: the stream reaches a shim signal, stores REACHED in its state word and waits; this
// module, polling that word from the JS thread, runs the function and releases the stream.
import { N, check, slot, readPtr, nativeView } from "../ffi/native";
import { Signal, Status } from "../ffi/symbols";
import { GpuError } from "./errors";
import { pollUntil } from "./poll";

interface Pending {
  sig: number;
  word: Uint32Array;
  fn: () => unknown;
  running: boolean;
  onError: (e: unknown) => void;
  /** The native handle of the stream the function belongs to. */
  stream: number;
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

const pool: { sig: number; word: Uint32Array }[] = [];
const pending = new Set<Pending>();
let poller: Promise<void> | undefined;

function takeSignal(): { sig: number; word: Uint32Array } {
  const s = pool.pop();
  if (s) return s;
  check(N.bg_signal_create(slot(0)), "bg_signal_create");
  const sig = readPtr(0);
  check(N.bg_signal_address(sig, slot(0)), "bg_signal_address");
  return { sig, word: new Uint32Array(nativeView(readPtr(0), 4)) };
}

function release(p: Pending): void {
  pending.delete(p);
  check(N.bg_signal_release(p.sig), "bg_signal_release");
  // The stream resets the word to IDLE after it wakes; only then may the signal be reused.
  const reuse = () => {
    if (p.word[0] === Signal.IDLE) pool.push({ sig: p.sig, word: p.word });
    else setTimeout(reuse, 1);
  };
  reuse();
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
    release(p);
    return;
  }
  runningOn = outer;
  if (result && typeof (result as Promise<unknown>).then === "function") {
    (result as Promise<unknown>).then(
      () => release(p),
      (e) => {
        p.onError(e);
        release(p);
      },
    );
  } else release(p);
}

/** Run every host function whose stream has reached it. Returns how many are still pending. */
export function serviceHostFns(): number {
  if (pending.size === 0) return 0;
  for (const p of pending) if (!p.running && p.word[0] === Signal.REACHED) runOne(p);
  return pending.size;
}

export function hostFnsPending(): number {
  return pending.size;
}

/** Enqueue `fn` on `stream` (a native stream handle). */
export function enqueueHostFn(stream: number, fn: () => unknown, onError: (e: unknown) => void, backend?: "cpu" | "cuda" | "metal"): void {
  const s = takeSignal();
  const rc = N.bg_stream_host_signal(stream, s.sig);
  if (rc !== 0) {
    pool.push(s);
    check(rc, "bg_stream_host_signal", backend);
  }
  pending.add({ ...s, fn, running: false, onError, stream });
  kick();
}

/** Keep servicing while anything is pending, without blocking the event loop. */
function kick(): void {
  if (poller || pending.size === 0) return;
  poller = pollUntil(() => pending.size === 0).finally(() => {
    poller = undefined;
    kick();
  });
}

/**
 * Before a blocking native wait: refuse it if made from inside a host function of a stream it
 * waits on (`waitsOn`), and otherwise run the queued host functions until `ready()`, so the
 * native wait that follows cannot be held up by the JS thread.
 */
export function beforeBlockingWait(call: string, waitsOn: (stream: number) => boolean, ready: () => boolean): void {
  refuseSelfWait(call, waitsOn);
  if (pending.size) blockUntil(ready, call);
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
