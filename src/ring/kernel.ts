// RingKernel: a stream of small messages handled by one handler function, either by a persistent
// kernel fed through lock-free rings (KernelMode.Ring) or by an ordinary launch per batch of
// messages (KernelMode.Batch), behind one API so a workload can measure both.
//
// Over 600 lines for a reason: RingKernel is one class whose message queue, response routing and
// poller share its private state (the destination queue, the inbox, the send queue, waiters);
// split, they would have to expose that state to each other. Its sources (source.ts), transports
// (transport.ts), rings (ring.ts) and modes (mode.ts) live beside it.
//
//  - The kernel source is generated around the user's handler for the backend (its record's
//    ring.source: C for the CPU, CUDA C, MSL), compiled with Program.compile and run:
//      Ring mode, where the backend keeps a kernel resident (CPU, CUDA): one persistent kernel
//        (grid 1, block 1) loops over the inbound ring, calls the handler on each message in place
//        and writes the response straight into the outbound ring's slot; it spins briefly when
//        idle, then naps, and exits when the inbound ring is closed (meta.closed = 1) and empty,
//        or at once on abort (2).
//      Batch mode, and Ring mode on Metal (mode "relaunch"): pending messages are staged and run
//        by a launch of the batch kernel (in, out, count, state) that handles them in order.
//    Both kernels run the handler sequentially on one thread with the same state, so the two modes
//    give identical responses and state.
//  - Responses are routed in FIFO order: every accepted message records where its response goes,
//    either to a `request()` promise or to the receive queue (`send()`), so mixing the two is
//    unambiguous: a request never sees a send's response and receive never sees a request's.
import { nativeView } from "../../ffi/result";
import { Status, RING_META_OFFSET } from "../../ffi/constants";
import { backends, type BackendName } from "../backends";
import { Buffer } from "../buffer";
import { Device } from "../device";
import { describeGot, GpuError, invalid, illegalState, disposed, options, type OptionKeys } from "../errors";
import { INSPECT, plural } from "../inspect";
import { Program, type Module } from "../kernel";
import { Stream } from "../stream";
import { KernelMode, type KernelModeName } from "./mode";
import { bytesView } from "./ring";
import { BATCH_KERNEL, RING_KERNEL, checkRingShape, ringKernelSource, sourceShape, type RingSourceOptions } from "./source";
import { BatchTransport, RingTransport, abandoned, type Transport } from "./transport";
import { wakeWaiter } from "../wake";

// The keys each options argument may have (errors.ts `options` refuses any other).
const RING_KERNEL_KEYS: OptionKeys<RingKernelOptions> = {
  handler: true, entry: true, messageBytes: true, responseBytes: true, stateBytes: true, capacity: true, state: true, mode: true, compileOptions: true,
};
const RECEIVE_KEYS: OptionKeys<{ timeoutMs?: number }> = { timeoutMs: true };

export interface RingKernelOptions extends RingSourceOptions {
  /** Ring capacity in messages (power of two); in Batch mode, the most messages per launch. */
  capacity: number;
  /** Initial state (its bytes are copied to the device), or a size in bytes (zeroed). */
  state?: ArrayBufferView | number;
  /** Bytes of state; defaults to the state's size. At least 16 bytes are allocated. */
  stateBytes?: number;
  /** Ring (default) or Batch. */
  mode?: KernelMode | KernelModeName;
  /** Extra compiler options. */
  compileOptions?: string[];
}

/** "ring": a persistent kernel; "batch": a launch per batch; "relaunch": Ring asked for, but the
 * backend cannot keep a kernel resident, so it relaunches per batch. */
export type RingRunMode = "ring" | "batch" | "relaunch";

interface Pending {
  resolve: (v: Uint8Array) => void;
  reject: (e: unknown) => void;
  done: boolean;
  value?: Uint8Array;
}

interface ReceiveWaiter {
  max: number; // 0: one message (a Uint8Array of responseBytes); else a batch of up to max
  deadline: number;
  resolve: (v: Uint8Array) => void;
  reject: (e: unknown) => void;
}

const SPIN_NS = 80_000; // request(): busy-poll this long before falling back to the poller
/** The poller turns with setImmediate while work moves and this long after; then timers. */
const IMMEDIATE_MS = 2;
const SYNC_TIMEOUT_NS = 10_000_000_000; // requestSync(): give up after 10 s
/** Asleep on the doorbell, a turn comes at least this often anyway (ms). */
const BELL_MS = 50;

function timeoutError(call: string, ms: number): GpuError {
  return new GpuError(Status.LAUNCH_TIMEOUT, `${call}: no response within ${ms} ms`, { backend: "typescript", call });
}

/**
 * A handler run on a stream of messages, by a persistent kernel (KernelMode.Ring) or a launch per
 * batch (KernelMode.Batch). See the comment at the top of this file for the model.
 *
 * Responses are paired by order: each accepted message records its response's destination
 * (a `request()` promise, or the receive queue for `send`/`sendBatch`), so `request` and
 * `receive` may be mixed; `receive` only ever returns responses to messages given to `send`.
 */
export class RingKernel {
  readonly device: Device;
  readonly kernelMode: KernelMode;
  /** "ring", "batch", or "relaunch" (Ring asked for on a backend that relaunches per batch). */
  readonly mode: RingRunMode;
  readonly messageBytes: number;
  readonly responseBytes: number;
  readonly capacity: number;
  readonly stateBytes: number;
  /** The generated source that was compiled. */
  readonly source: string;

  readonly #module: Module;
  readonly #stream: Stream;
  readonly #stateBuf: Buffer;
  readonly #t: Transport;
  readonly #ring: RingTransport | null;
  readonly #stateCtor: (new (b: ArrayBuffer) => ArrayBufferView) | null;

  /** Response destinations in message order: a count of receive-queue responses, or a request. */
  #dq: (number | Pending)[] = [];
  #dqHead = 0;
  #pendingRequests = 0;
  /** Responses pulled from the device that belong to the receive queue, oldest first. */
  #inbox: Uint8Array[] = [];
  #inboxOff = 0;
  #inboxCount = 0;
  /** Messages accepted but not yet in the transport (backpressure), oldest first. */
  #sendq: { u8: Uint8Array; n: number; done?: (() => void) | undefined; fail: (e: unknown) => void }[] = [];
  #sendqOff = 0;
  #sendqCount = 0;
  #receivers: ReceiveWaiter[] = [];
  #stopWaiters: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  #urgent = false;
  #flushQueued = false;
  #pumping = false;
  #stopping = false;
  #stopped = false;
  #live = true;
  #failure: unknown;
  #finalState: Uint8Array | undefined;
  #processedIn = 0;
  #pulled = 0;

  private constructor(
    device: Device,
    kernelMode: KernelMode,
    mode: RingRunMode,
    shape: { messageBytes: number; responseBytes: number; stateBytes: number },
    capacity: number,
    source: string,
    module: Module,
    stream: Stream,
    stateBuf: Buffer,
    t: Transport,
    stateCtor: (new (b: ArrayBuffer) => ArrayBufferView) | null,
  ) {
    this.device = device;
    this.kernelMode = kernelMode;
    this.mode = mode;
    this.messageBytes = shape.messageBytes;
    this.responseBytes = shape.responseBytes;
    this.stateBytes = shape.stateBytes;
    this.capacity = capacity;
    this.source = source;
    this.#module = module;
    this.#stream = stream;
    this.#stateBuf = stateBuf;
    this.#t = t;
    this.#ring = t instanceof RingTransport ? t : null;
    this.#stateCtor = stateCtor;
    if (this.#ring)
      abandoned.register(
        this,
        { hdr: new Uint32Array(nativeView(this.#ring.inRing.hostAddress, RING_META_OFFSET + 16)), device, stream, parts: [t, stateBuf, stream, module] },
        this,
      );
    this.#dependent = new WeakRef(this);
    device.state.dependents.add(this.#dependent);
  }

  /** This kernel's entry in its device's dependents, so Device.dispose() stops it first. */
  #dependent: WeakRef<RingKernel>;

  /** Whether `device` can keep a kernel resident (Ring mode proper) or relaunches per batch. */
  static supportsPersistent(device: Device): boolean {
    return backends[device.backend].ring.persistent;
  }

  /** The source RingKernel would compile for `backend` (see ringKernelSource). */
  static source(backend: BackendName, opts: RingSourceOptions): string {
    return ringKernelSource(backend, opts);
  }

  /** Compile the handler, allocate rings and state, and start the kernel (Ring) or get ready (Batch). */
  static launch(device: Device, opts: RingKernelOptions): RingKernel {
    const call = "RingKernel.launch";
    if (!(device instanceof Device)) invalid(call, "expected a Device");
    if (!opts || typeof opts !== "object") invalid(call, "expected options");
    options(call, opts, RING_KERNEL_KEYS);
    const kernelMode = opts.mode === undefined ? KernelMode.Ring : KernelMode.parse(opts.mode);
    checkRingShape(call, opts.messageBytes, opts.capacity);
    // State: initial bytes or a size; stateBytes must agree with the initial bytes.
    let init: Uint8Array | undefined;
    let stateCtor: (new (b: ArrayBuffer) => ArrayBufferView) | null = null;
    let sb: number;
    if (opts.state === undefined) sb = opts.stateBytes ?? 0;
    else if (typeof opts.state === "number") sb = opts.state;
    else if (ArrayBuffer.isView(opts.state)) {
      init = new Uint8Array(opts.state.buffer, opts.state.byteOffset, opts.state.byteLength);
      sb = init.byteLength;
      if (!(opts.state instanceof DataView)) stateCtor = opts.state.constructor as new (b: ArrayBuffer) => ArrayBufferView;
    } else invalid(call, "state must be a TypedArray, a DataView or a byte count");
    if (!Number.isSafeInteger(sb) || sb < 0) invalid(call, `state size must be a non-negative integer, got ${describeGot(sb)}`);
    if (opts.stateBytes !== undefined && opts.stateBytes !== sb)
      invalid(call, `stateBytes ${String(opts.stateBytes)} does not match the state given (${sb} bytes)`);
    const shape = sourceShape(call, { ...opts, stateBytes: sb });
    const backend = device.backend;
    const persistent = kernelMode.isRing() && RingKernel.supportsPersistent(device);
    const mode: RingRunMode = kernelMode.isBatch() ? "batch" : persistent ? "ring" : "relaunch";
    const source = ringKernelSource(backend, { ...opts, stateBytes: sb });
    if (opts.compileOptions !== undefined && (!Array.isArray(opts.compileOptions) || opts.compileOptions.some((o) => typeof o !== "string")))
      invalid(call, "compileOptions must be an array of strings");

    const module = Program.compile(device, source, { name: "ring_kernel", options: opts.compileOptions });
    const cleanup: { dispose(): void }[] = [module];
    try {
      const stream = Stream.create(device, { nonBlocking: true });
      cleanup.push(stream);
      const stateBuf = Buffer.alloc(device, Math.max(16, sb));
      cleanup.push(stateBuf);
      stateBuf.fill(0);
      if (init && init.byteLength) stateBuf.write(init);
      let t: Transport;
      // A batch's end wakes the kernel's tick at once (the stream calls back), set once it exists.
      let tick = (): void => {};
      if (persistent) {
        const k = module.kernel(RING_KERNEL, ["i64", "i64", "buffer"]);
        t = new RingTransport(device, k, stream, stateBuf, shape.messageBytes, shape.responseBytes, opts.capacity);
      } else {
        const k = module.kernel(BATCH_KERNEL, ["buffer", "buffer", "u32", "buffer"]);
        t = new BatchTransport(device, k, stream, stateBuf, shape.messageBytes, shape.responseBytes, opts.capacity, () => tick());
      }
      const rk = new RingKernel(device, kernelMode, mode, shape, opts.capacity, source, module, stream, stateBuf, t, stateCtor);
      tick = () => rk.#tick();
      return rk;
    } catch (e) {
      for (const c of cleanup.reverse()) {
        try {
          c.dispose();
        } catch {
          /* report the first failure */
        }
      }
      throw e;
    }
  }

  // ---- state of the object ----

  get disposed(): boolean {
    return !this.#live || !this.device.state.open;
  }

  /** True once stop() has finished: the kernel has exited and every response was delivered. */
  get stopped(): boolean {
    return this.#stopped;
  }

  #alive(call: string): void {
    if (!this.#live) disposed(call, "ring kernel");
    if (!this.device.state.open) disposed(call, "device of this ring kernel");
    if (this.#failure !== undefined) throw this.#failure;
  }

  #accepting(call: string): void {
    this.#alive(call);
    if (this.#stopping) illegalState(call, "the ring kernel is stopping or stopped; no more messages are accepted");
  }

  /** Messages accepted and not yet answered (in the device, staged, or waiting for room). */
  get inFlight(): number {
    let n = this.#pendingRequests;
    for (let i = this.#dqHead; i < this.#dq.length; i++) {
      const d = this.#dq[i]!;
      if (typeof d === "number") n += d;
    }
    return n;
  }

  /** The handler's state after stop(): a copy, typed like the initial state (else a Uint8Array). */
  get state(): ArrayBufferView {
    const s = this.#stateBytesAfterStop("RingKernel.state");
    return this.#stateCtor ? new this.#stateCtor(s.slice().buffer) : s.slice();
  }

  /** The state's bytes as `C` (e.g. Float64Array) after stop(). */
  stateAs<T extends ArrayBufferView>(C: new (b: ArrayBuffer) => T): T {
    const s = this.#stateBytesAfterStop("RingKernel.stateAs");
    return new C(s.slice().buffer);
  }

  #stateBytesAfterStop(call: string): Uint8Array {
    if (!this.#finalState) {
      if (!this.#live) disposed(call, "ring kernel");
      illegalState(call, "the state is readable after stop() (the kernel owns it while it runs)");
    }
    return this.#finalState.subarray(0, this.stateBytes);
  }

  // ---- messages in ----

  #msg(call: string, msg: unknown): Uint8Array {
    const u8 = bytesView(call, msg);
    if (u8.byteLength !== this.messageBytes)
      invalid(call, `a message is ${this.messageBytes} bytes, got ${u8.byteLength}`);
    return u8;
  }

  #msgs(call: string, msgs: unknown): { u8: Uint8Array; n: number } {
    if (Array.isArray(msgs)) {
      const mb = this.messageBytes;
      const u8 = new Uint8Array(msgs.length * mb);
      for (let i = 0; i < msgs.length; i++) u8.set(this.#msg(call, msgs[i]), i * mb);
      return { u8, n: msgs.length };
    }
    const u8 = bytesView(call, msgs);
    if (u8.byteLength % this.messageBytes)
      invalid(call, `${u8.byteLength} bytes is not a whole number of ${this.messageBytes}-byte messages`);
    return { u8, n: u8.byteLength / this.messageBytes };
  }

  #destRun(n: number): void {
    const last = this.#dq.length > this.#dqHead ? this.#dq[this.#dq.length - 1] : undefined;
    if (typeof last === "number") this.#dq[this.#dq.length - 1] = last + n;
    else this.#dq.push(n);
  }

  /** Push now what fits, in order behind anything already waiting for room; returns how many. */
  #pushNow(u8: Uint8Array, n: number): number {
    if (this.#sendqCount) return 0;
    const k = this.#t.push(u8, n);
    this.#processedIn += k;
    return k;
  }

  #enqueue(u8: Uint8Array, n: number, done: (() => void) | undefined, fail: (e: unknown) => void): void {
    this.#sendq.push({ u8: u8.slice(0, n * this.messageBytes), n, done, fail });
    this.#sendqCount += n;
  }

  /** Move waiting messages into the transport while it has room. */
  #drainSendq(): void {
    const mb = this.messageBytes;
    while (this.#sendq.length) {
      const e = this.#sendq[0]!;
      const left = e.n - this.#sendqOff;
      const k = this.#t.push(e.u8.subarray(this.#sendqOff * mb), left);
      this.#processedIn += k;
      this.#sendqCount -= k;
      if (k < left) {
        this.#sendqOff += k;
        return;
      }
      this.#sendq.shift();
      this.#sendqOff = 0;
      e.done?.();
    }
  }

  /** Send one message if there is room now; false when full (nothing is overwritten or queued). */
  trySend(msg: ArrayBufferView | ArrayBuffer): boolean {
    const call = "RingKernel.trySend";
    this.#accepting(call);
    const u8 = this.#msg(call, msg);
    if (this.#pushNow(u8, 1) !== 1) return false;
    this.#destRun(1);
    return true;
  }

  /** Send as many of `msgs` as fit now (in order); returns how many were accepted. */
  trySendBatch(msgs: ArrayBufferView | ArrayBuffer | readonly (ArrayBufferView | ArrayBuffer)[]): number {
    const call = "RingKernel.trySendBatch";
    this.#accepting(call);
    const { u8, n } = this.#msgs(call, msgs);
    const k = n ? this.#pushNow(u8, n) : 0;
    if (k) this.#destRun(k);
    return k;
  }

  /**
   * Send one message; its response goes to receive(). Resolves once the message is accepted
   * (at once when there is room; otherwise when the kernel has made room: backpressure).
   */
  send(msg: ArrayBufferView | ArrayBuffer): Promise<void> {
    const call = "RingKernel.send";
    this.#accepting(call);
    const u8 = this.#msg(call, msg);
    this.#destRun(1);
    if (this.#pushNow(u8, 1) === 1) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#enqueue(u8, 1, resolve, reject);
      this.#pump();
    });
  }

  /** Send many messages (one Uint8Array of n * messageBytes, or an array of messages), in order. */
  sendBatch(msgs: ArrayBufferView | ArrayBuffer | readonly (ArrayBufferView | ArrayBuffer)[]): Promise<void> {
    const call = "RingKernel.sendBatch";
    this.#accepting(call);
    const { u8, n } = this.#msgs(call, msgs);
    if (n === 0) return Promise.resolve();
    this.#destRun(n);
    const k = this.#pushNow(u8, n);
    if (k === n) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#enqueue(u8.subarray(k * this.messageBytes), n - k, resolve, reject);
      this.#pump();
    });
  }

  /**
   * Send `msg` and resolve with its response. Busy-polls the outbound ring for a short while
   * (no timer) before handing over to the poller, so a round trip costs no event-loop turn.
   */
  request(msg: ArrayBufferView | ArrayBuffer): Promise<Uint8Array> {
    const call = "RingKernel.request";
    this.#accepting(call);
    const u8 = this.#msg(call, msg);
    let p!: Pending;
    const promise = new Promise<Uint8Array>((resolve, reject) => {
      p = { resolve, reject, done: false };
    });
    this.#dq.push(p);
    this.#pendingRequests++;
    if (this.#pushNow(u8, 1) !== 1) {
      this.#enqueue(u8, 1, undefined, () => {});
      this.#pump();
      return promise;
    }
    if (this.#ring) {
      // Spin on the outbound ring's header (zero-copy view): no FFI call until a response is there.
      const out = this.#ring.outRing;
      const t0 = Bun.nanoseconds();
      for (;;) {
        if (out.countFast() !== 0) {
          this.#route();
          if (p.done) return promise;
        }
        if (Bun.nanoseconds() - t0 > SPIN_NS) break;
      }
      this.#pump();
    } else if (!this.#flushQueued) {
      // Batch: requests made in the same turn share one launch, issued from a microtask.
      this.#flushQueued = true;
      queueMicrotask(() => {
        this.#flushQueued = false;
        this.#spinBatch();
        this.#pump();
      });
    }
    return promise;
  }

  /** Batch: launch what is staged and busy-poll its completion for a short while. */
  #spinBatch(): void {
    if (!this.#live) return;
    this.#urgent = true;
    this.#tick();
    const t0 = Bun.nanoseconds();
    while (this.#pendingRequests > 0 && this.#failure === undefined && Bun.nanoseconds() - t0 < SPIN_NS) this.#tick();
  }

  /**
   * Send `msg` and wait for its response, blocking the JS thread (for latency-critical loops and
   * benches). Earlier requests' promises are settled on the way; throws LAUNCH_TIMEOUT after 10 s.
   */
  requestSync(msg: ArrayBufferView | ArrayBuffer): Uint8Array {
    const call = "RingKernel.requestSync";
    this.#accepting(call);
    const u8 = this.#msg(call, msg);
    const p: Pending = { resolve: () => {}, reject: () => {}, done: false };
    const t0 = Bun.nanoseconds();
    // Room first: wait for the kernel (ring) or complete earlier batches (batch).
    while (this.#sendqCount || this.#pushNow(u8, 1) !== 1) {
      this.#tick();
      if (this.#failure !== undefined) throw this.#failure;
      if (!this.#ring) this.#t.flushSync();
      if (Bun.nanoseconds() - t0 > SYNC_TIMEOUT_NS) throw timeoutError(call, SYNC_TIMEOUT_NS / 1e6);
    }
    this.#dq.push(p);
    this.#pendingRequests++;
    if (!this.#ring) {
      this.#t.flushSync();
      this.#route();
    } else {
      const out = this.#ring.outRing;
      for (;;) {
        if (out.countFast() !== 0) {
          this.#route();
          if (p.done) break;
        }
        if (Bun.nanoseconds() - t0 > SYNC_TIMEOUT_NS) {
          this.#failAll(timeoutError(call, SYNC_TIMEOUT_NS / 1e6));
          throw this.#failure;
        }
      }
    }
    if (!p.done) illegalState(call, "no response after a synchronous flush");
    this.#serveReceivers();
    return p.value!;
  }

  /** Batch mode: launch the staged messages now (Ring mode: nothing to do). */
  flush(): void {
    this.#alive("RingKernel.flush");
    this.#urgent = true;
    this.#tick();
  }

  // ---- responses out ----

  /** Route responses in order: requests get theirs; receive-queue responses are pulled into the
   * inbox only when a request waits behind them, when stopping, or in Batch mode. */
  #route(): void {
    const t = this.#t;
    const eager = !this.#ring || this.#stopping;
    while (this.#dqHead < this.#dq.length) {
      const d = this.#dq[this.#dqHead]!;
      if (typeof d !== "number") {
        if (t.available() === 0) break;
        const r = t.pull(1);
        if (r.byteLength === 0) break;
        this.#pulled++;
        this.#dqHead++;
        this.#pendingRequests--;
        d.done = true;
        d.value = r;
        d.resolve(r);
        continue;
      }
      if (!eager && this.#pendingRequests === 0) break;
      const avail = t.available();
      if (avail === 0) break;
      const r = t.pull(Math.min(d, avail));
      const k = r.byteLength / this.responseBytes;
      if (k === 0) break;
      this.#pulled += k;
      this.#inbox.push(r);
      this.#inboxCount += k;
      if (k === d) this.#dqHead++;
      else {
        this.#dq[this.#dqHead] = d - k;
        break;
      }
    }
    if (this.#dqHead > 1024 && this.#dqHead * 2 > this.#dq.length) {
      this.#dq = this.#dq.slice(this.#dqHead);
      this.#dqHead = 0;
    }
  }

  /** Take up to `max` receive-queue responses (inbox first, then the ring); k * responseBytes bytes. */
  #take(max: number): Uint8Array {
    const rb = this.responseBytes;
    if (this.#inboxCount) {
      const c = this.#inbox[0]!;
      const left = c.byteLength / rb - this.#inboxOff;
      const k = Math.min(left, max);
      const out = c.subarray(this.#inboxOff * rb, (this.#inboxOff + k) * rb);
      this.#inboxOff += k;
      this.#inboxCount -= k;
      if (k === left) {
        this.#inbox.shift();
        this.#inboxOff = 0;
      }
      return out;
    }
    const d = this.#dq[this.#dqHead];
    if (typeof d !== "number") return EMPTY;
    const r = this.#t.pull(Math.min(d, max));
    const k = r.byteLength / rb;
    this.#pulled += k;
    if (k === d) this.#dqHead++;
    else if (k) this.#dq[this.#dqHead] = d - k;
    return r;
  }

  /** One response to a sent message, or null if none is ready. */
  tryReceive(): Uint8Array | null {
    this.#alive("RingKernel.tryReceive");
    this.#urgent = true;
    this.#tick();
    const r = this.#take(1);
    return r.byteLength ? r : null;
  }

  /** Up to `max` responses now, concatenated (k * responseBytes bytes; empty when none). */
  tryReceiveBatch(max = this.capacity): Uint8Array {
    const call = "RingKernel.tryReceiveBatch";
    this.#alive(call);
    if (!Number.isInteger(max) || max < 1) invalid(call, `max must be a positive integer, got ${describeGot(max)}`);
    this.#urgent = true;
    this.#tick();
    return this.#take(max);
  }

  /** The next response to a sent message. `timeoutMs`: reject with LAUNCH_TIMEOUT after that long. */
  receive(opts: { timeoutMs?: number } = {}): Promise<Uint8Array> {
    return this.#receive("RingKernel.receive", 0, opts);
  }

  /** At least one and up to `max` responses, concatenated. */
  receiveBatch(max = this.capacity, opts: { timeoutMs?: number } = {}): Promise<Uint8Array> {
    const call = "RingKernel.receiveBatch";
    if (!Number.isInteger(max) || max < 1) invalid(call, `max must be a positive integer, got ${describeGot(max)}`);
    return this.#receive(call, max, opts);
  }

  #receive(call: string, max: number, opts: { timeoutMs?: number }): Promise<Uint8Array> {
    let ms: number | undefined;
    try {
      this.#alive(call);
      ms = options(call, opts, RECEIVE_KEYS).timeoutMs;
    } catch (e) {
      return Promise.reject(e);
    }
    if (ms !== undefined && (typeof ms !== "number" || !(ms >= 0)))
      return Promise.reject(new GpuError(Status.INVALID_VALUE, `${call}: timeoutMs must be a non-negative number`, { backend: "typescript", call }));
    return new Promise<Uint8Array>((resolve, reject) => {
      this.#receivers.push({ max, deadline: ms === undefined ? Infinity : performance.now() + ms, resolve, reject });
      this.#urgent = true;
      this.#tick();
      this.#pump();
    });
  }

  /** Hand ready responses to receive() waiters, in order; time out the late ones. */
  #serveReceivers(): void {
    while (this.#receivers.length) {
      const w = this.#receivers[0]!;
      const r = this.#take(w.max || 1);
      if (r.byteLength === 0) break;
      this.#receivers.shift();
      w.resolve(r);
    }
    if (!this.#receivers.length) return;
    const now = performance.now();
    const nothingLeft = this.#stopped && !this.#inboxCount;
    this.#receivers = this.#receivers.filter((w) => {
      if (nothingLeft) {
        w.reject(new GpuError(Status.NOT_READY, "RingKernel.receive: the ring kernel has stopped and every response was received", { backend: "typescript", call: "RingKernel.receive" }));
        return false;
      }
      if (now < w.deadline) return true;
      w.reject(timeoutError("RingKernel.receive", Math.round(w.deadline - now)));
      return false;
    });
  }

  // ---- the poller ----

  /** One step of progress: push waiting messages, run batches, route responses, serve waiters. */
  #tick(): void {
    if (!this.#live || this.#failure !== undefined) return;
    try {
      if (this.#sendq.length) this.#drainSendq();
      const waiting = this.#pendingRequests > 0 || this.#receivers.length > 0 || this.#stopping;
      this.#t.progress(this.#urgent || waiting);
      this.#urgent = false;
      this.#route();
      this.#serveReceivers();
      if (this.#stopping && !this.#stopped && !this.#sendq.length) {
        this.#t.close();
        if (this.#t.finished()) {
          this.#route();
          this.#finalState = this.#stateBuf.read();
          this.#stopped = true;
          this.#serveReceivers();
          for (const w of this.#stopWaiters.splice(0)) w.resolve();
        }
      }
    } catch (e) {
      this.#failAll(e);
    }
  }

  #busy(): boolean {
    return this.#live && this.#failure === undefined &&
      (this.#sendq.length > 0 || this.#pendingRequests > 0 || this.#receivers.length > 0 || this.#stopWaiters.length > 0);
  }

  /** Responses and messages moved so far: the poller stays on fast turns while this grows. */
  #moved(): number {
    return this.#processedIn + this.#pulled;
  }

  /**
   * Poll while anyone waits: setImmediate turns while work moves, then a backing-off timer
   * (up to 4 ms) once idle for 2 ms, so a stream never stalls on timers and an idle wait is cheap.
   */
  #pump(): void {
    if (this.#pumping || !this.#busy()) return;
    this.#pumping = true;
    let last = this.#moved();
    let activeAt = performance.now();
    let delay = 0;
    const turn = () => {
      this.#tick();
      if (!this.#busy()) {
        this.#pumping = false;
        return;
      }
      const m = this.#moved();
      const now = performance.now();
      if (m !== last) {
        last = m;
        activeAt = now;
        delay = 0;
      }
      if (now - activeAt < IMMEDIATE_MS) setImmediate(turn);
      else if (!this.#sleepOnBell(turn, now)) {
        delay = Math.min(4, delay + 0.5);
        setTimeout(turn, delay);
      }
    };
    setImmediate(turn);
  }

  /**
   * Idle with work outstanding, on a backend whose resident kernel can call host code (the CPU):
   * ring the outbound ring's doorbell instead of polling on timers. The kernel calls back when it
   * next publishes responses (or exits), which wakes the event loop (wake.ts); a receive's
   * deadline, or BELL_MS, wakes it anyway. Returns false where there is no doorbell.
   */
  #sleepOnBell(turn: () => void, now: number): boolean {
    const t = this.#t;
    if (!(t instanceof RingTransport) || !backends[this.device.backend].computesOnHost) return false;
    const w = wakeWaiter(() => t.available() > 0 || !this.#busy());
    if (!w) return false;
    t.outRing.armBell(w.ptr, w.token);
    let gone = false;
    const go = () => {
      if (gone) return;
      gone = true;
      clearTimeout(timer);
      w.cancel(); // woken by the timer or a response seen first: the bell's waiter is done too
      turn();
    };
    let wait = BELL_MS;
    for (const r of this.#receivers) wait = Math.min(wait, Math.max(0, r.deadline - now));
    const timer = setTimeout(go, wait);
    void w.done.then(go);
    // responses published between the last tick and the bell: the kernel may not have seen it
    if (t.available() > 0) setImmediate(go);
    return true;
  }

  #failAll(e: unknown): void {
    this.#failure ??= e;
    const err = this.#failure;
    for (let i = this.#dqHead; i < this.#dq.length; i++) {
      const d = this.#dq[i]!;
      if (typeof d !== "number" && !d.done) {
        d.done = true;
        d.reject(err);
      }
    }
    this.#dq = [];
    this.#dqHead = 0;
    this.#pendingRequests = 0;
    for (const s of this.#sendq.splice(0)) s.fail(err);
    this.#sendqCount = 0;
    for (const w of this.#receivers.splice(0)) w.reject(err);
    for (const w of this.#stopWaiters.splice(0)) w.reject(err);
  }

  /**
   * Stop accepting messages, let the kernel process every accepted one (responses stay readable
   * through receive/tryReceive), wait for it to exit and copy the state out.
   */
  stop(): Promise<void> {
    try {
      this.#alive("RingKernel.stop");
    } catch (e) {
      return Promise.reject(e);
    }
    if (this.#stopped) return Promise.resolve();
    this.#stopping = true;
    return new Promise<void>((resolve, reject) => {
      this.#stopWaiters.push({ resolve, reject });
      this.#tick();
      this.#pump();
    });
  }

  /**
   * Release everything. A running kernel is aborted (messages not yet processed are dropped) and
   * waited for, so no thread is left spinning; pending promises reject with INVALID_HANDLE.
   */
  dispose(): void {
    if (!this.#live) return;
    const err = new GpuError(Status.INVALID_HANDLE, "RingKernel: disposed before this completed", { backend: "typescript", call: "RingKernel.dispose" });
    let first: unknown;
    const attempt = (f: () => void) => {
      try {
        f();
      } catch (e) {
        first ??= e;
      }
    };
    if (this.device.state.open) {
      attempt(() => this.#t.abort());
      attempt(() => {
        if (!this.#finalState) this.#finalState = this.#stateBuf.read();
      });
    }
    this.#failAll(err);
    this.#live = false;
    abandoned.unregister(this);
    this.device.state.dependents.delete(this.#dependent);
    attempt(() => this.#t.dispose());
    attempt(() => this.#stateBuf.dispose());
    attempt(() => this.#stream.dispose());
    attempt(() => this.#module.dispose());
    if (first !== undefined) throw first;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /**
   * `await using rk = RingKernel.launch(…)`: at the end of the block, stop() (every accepted
   * message is processed and its response delivered), then dispose. A kernel that failed, or was
   * already disposed, is disposed at once; stop()'s failure is rethrown after disposing.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    if (!this.#live) return;
    try {
      if (this.#failure === undefined && this.device.state.open) await this.stop();
    } finally {
      this.dispose();
    }
  }

  /**
   * "RingKernel(cpu, ring, 16-byte messages, 16-byte responses, capacity 256, 3 in flight, running)":
   * how it runs ("ring" persistent, "batch", or "relaunch"), its message shape, and where it is
   * in its life (running, stopping, stopped, failed, disposed).
   */
  toString(): string {
    const life = !this.#live || !this.device.state.open ? "disposed" : this.#failure !== undefined ? "failed" : this.#stopped ? "stopped" : this.#stopping ? "stopping" : "running";
    const flight = this.#live && !this.#stopped ? `, ${this.inFlight} in flight` : "";
    return `RingKernel(${this.device.spec}, ${this.mode}, ${plural(this.messageBytes, "byte")} a message, ${plural(this.responseBytes, "byte")} a response, capacity ${this.capacity}${flight}, ${life})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}

const EMPTY = new Uint8Array(0);
