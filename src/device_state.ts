// What a device's resources share with it, below the Device class: its native state (open, the
// streams it waits for, the captures open on it and what they use), and the small surface of a
// Device that Buffer, Stream, Event and the capture code need. device.ts builds on this module
// and imports theirs; nothing here imports them, so no module is completed by another's side
// effects.
import { api, type Api } from "../ffi/result";
import type { BackendName } from "./backends";

/** Shared state a device's resources hold, so a finalizer never touches a closed device. */
export interface DeviceState {
  handle: number;
  open: boolean;
  backend: BackendName;
  /** The result-layer calls, naming this backend in their errors. */
  api: Api;
  /**
   * Long-lived users of the device (a running RingKernel) that must be stopped before it closes,
   * held weakly so they can still be collected.
   */
  dependents: Set<WeakRef<{ dispose(): void }>>;
  /** Streams created on this device, held weakly: what device.done() waits for. */
  streams: Set<WeakRef<{ done(): Promise<void>; readonly disposed: boolean; readonly handle: number; readonly nonBlocking: boolean }>>;
  /**
   * Native handles of streams running a persistent ring kernel, which never finishes on its own:
   * device-wide waits leave them out (a RingKernel is stopped with stop(), not waited for).
   */
  residentStreams: Set<number>;
  /** Captures begun through Stream.beginCapture and not yet ended, on any stream of this device. */
  captures: number;
  /**
   * Releases by finalisers that ran while a capture was open: freeing then is illegal in a capture
   * (it would invalidate it), so they wait here and run when the last capture ends.
   */
  deferredReleases: (() => void)[];
  /**
   * While a capture is open: what the captured work uses (buffers, kernels, host buffers) and the
   * kernels of its kernel nodes in capture order, so the Graph and its GraphExec keep them alive.
   */
  captureLog: CaptureLog | null;
  /**
   * Streams of other devices with copies queued that read or write this device's memory
   * (Stream.copyPeer), until each is seen idle: closing the device waits for them first, since
   * its memory goes with it and their device does not know to wait.
   */
  peerStreams: Set<{ drain(): void }>;
  /**
   * Native streams of the shim's own, not in use, on which an Event.done() waits for its event and
   * asks to be called back (wake.ts): destroyed when the device closes.
   */
  wakeStreams: number[];
  /**
   * Collectives of this device's communicators recorded in the thread's open Communicator group,
   * not yet issued: a dispose() meanwhile is kept in `afterGroup` and runs once the group has
   * issued them (closing now would leave the group a collective on a closed device).
   */
  grouped: number;
  afterGroup: (() => void) | null;
}

/** What the work captured while captures were open uses; see DeviceState.captureLog. */
export interface CaptureLog {
  uses: Set<object>;
  /**
   * A counted use of each of `uses`, taken when the work was captured: a buffer disposed while
   * the capture is open stays allocated until the capture's graph takes over (endCapture) or the
   * last capture ends without one.
   */
  holds: { add(o: object): void; drop(): void };
  /** Kernels launched into a capture, in order: the kernel nodes, unless captures overlapped. */
  kernels: object[];
  /** Another capture began while one was open: `kernels` mixes both, so no node order is known. */
  overlapped: boolean;
}

/** A new state for a native device `handle` of `backend`, sharing the stream sets given. */
export function newDeviceState(
  handle: number,
  backend: BackendName,
  shared: { streams: DeviceState["streams"]; residentStreams: Set<number> },
): DeviceState {
  return {
    handle,
    open: true,
    backend,
    api: api(backend),
    dependents: new Set(),
    streams: shared.streams,
    residentStreams: shared.residentStreams,
    captures: 0,
    deferredReleases: [],
    captureLog: null,
    peerStreams: new Set(),
    wakeStreams: [],
    grouped: 0,
    afterGroup: null,
  };
}

/**
 * The part of a Device that the modules below it use. device.ts widens this interface to the
 * whole Device class (a declaration merge), so `buffer.device` is typed as a Device everywhere
 * (and `defaultStream`, which returns a Stream, comes from there).
 */
export interface DeviceRef {
  readonly state: DeviceState;
  readonly handle: number;
  readonly backend: BackendName;
  readonly spec: string;
  /** @internal Run what a synchronous copy or memset would wait on (see Device.beforeSyncCopy). */
  beforeSyncCopy(call: string): void;
}

/** What work is queued on, as the modules below Stream see one (a Stream). */
export interface StreamRef {
  readonly handle: number;
  readonly device: DeviceRef;
  /** Created with { nonBlocking: true } (a Stream always says; a bare reference may not). */
  readonly nonBlocking?: boolean;
  /** Stream.usedBy: work queued here uses these buffers (non-blocking streams only). */
  usedBy?(work: string, uses: Iterable<unknown>): void;
}

/** Marks a Device object (set by its constructor), so the modules below can recognise one. */
export const DEVICE: unique symbol = Symbol("bungpu.device");

export function isDevice(x: unknown): x is DeviceRef {
  return typeof x === "object" && x !== null && DEVICE in x;
}

/**
 * @internal Work was just enqueued on the native stream `stream`: if it is being captured, the
 * graph must keep `kernel` and `uses` alive (a replay reads them long after this call).
 */
export function noteCaptured(state: DeviceState, stream: number, kernel: object | null, uses: readonly unknown[]): void {
  const log = state.captureLog;
  if (!log) return;
  try {
    if (state.api.stream_capture_status(stream) === 0) return;
  } catch {
    return;
  }
  if (kernel) {
    log.kernels.push(kernel);
    log.uses.add(kernel);
    log.holds.add(kernel);
  }
  for (const u of uses)
    if (u !== null && typeof u === "object") {
      log.uses.add(u);
      log.holds.add(u);
    }
}

/** A finaliser's release: now, or when the device's open captures have ended. */
export function releaseOutsideCapture(state: DeviceState, release: () => void): void {
  if (state.captures > 0) state.deferredReleases.push(release);
  else release();
}

/** A capture on the device ended: run the finalisers' releases it held back. */
export function captureEnded(state: DeviceState): void {
  if (state.captures > 0) state.captures--;
  if (state.captures === 0 && state.captureLog) {
    const log = state.captureLog;
    state.captureLog = null;
    log.holds.drop(); // the graphs made by endCapture took their own holds first
  }
  if (state.captures > 0 || state.deferredReleases.length === 0) return;
  const list = state.deferredReleases.splice(0);
  for (const f of list) {
    try {
      f();
    } catch {
      /* a finaliser's release has no caller to report to */
    }
  }
}
