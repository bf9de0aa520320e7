// Stream: an in-order queue of device work. Enqueueing returns at once; synchronize() blocks,
// done() is its awaitable twin: the stream wakes the event loop when it gets there (wake.ts).
import { CaptureStatusId, CopyPath, StreamFlag } from "../ffi/constants";
import { Buffer, HostBuffer, checkSize, fillPattern, fillTypeOf, type FillRange, type FillType, type FillOptionsFor } from "./buffer";
import { captureEnded, isDevice, noteCaptured, type DeviceRef, type DeviceState } from "./device_state";
import { GpuError, Status, describeGot, invalid, disposed, options, type OptionKeys } from "./errors";
import { HOLD } from "./lifetime";
import { Event } from "./event";
import { abandonFailures, beforeBlockingWait, deferDispose, enqueueHostFn, insideHostFnOf, raiseFailures, recordFailure, type FailureSink } from "./hostfn";
import { CaptureMode, beginCapture as beginCaptureOn, endCapture as endCaptureOn, type CaptureStatus, type Graph } from "./capture";
import { MemoryPool } from "./memory_pool";
import { pollUntil, settled } from "./poll";
import { afterStream } from "./wake";
import { RELEASE, Resource } from "./resource";

// The keys each options argument may have (errors.ts `options` refuses any other).
const ALLOC_KEYS: OptionKeys<{ pool?: MemoryPool }> = { pool: true };
const COPY_KEYS: OptionKeys<CopyOptions> = { bytes: true, dstOffset: true, srcOffset: true };
const FILL_KEYS: OptionKeys<FillRange & { type?: FillType | undefined }> = { offset: true, bytes: true, type: true };
const STREAM_KEYS: OptionKeys<StreamOptions> = { nonBlocking: true, priority: true };

export interface StreamOptions {
  /**
   * Do not synchronise with the device's default stream (CU_STREAM_NON_BLOCKING). By default a
   * created stream is blocking, as in CUDA: its work waits for the work queued before it on the
   * default stream, and work queued on the default stream (including the synchronous Buffer
   * methods) waits for the work queued before it on every blocking stream. A non-blocking stream
   * takes no part either way: order it with events. Persistent kernels belong on one.
   */
  nonBlocking?: boolean;
  /** Lower numbers are higher priority, as in CUDA. Stored; the CPU backend ignores it. */
  priority?: number;
}

const CAPTURE_STATUS: Record<number, CaptureStatus> = {
  [CaptureStatusId.NONE]: "None",
  [CaptureStatusId.ACTIVE]: "Active",
  [CaptureStatusId.INVALIDATED]: "Invalidated",
};

/** How Stream.copyPeer moved the bytes: directly, through host memory, or within one device. */
export type PeerCopyPath = "peer" | "staged" | "device";
const COPY_PATHS: Record<number, PeerCopyPath> = {
  [CopyPath.PEER]: "peer",
  [CopyPath.STAGED]: "staged",
  [CopyPath.DEVICE]: "device",
};

export interface CopyOptions {
  bytes?: number;
  dstOffset?: number;
  srcOffset?: number;
}

export class Stream extends Resource {
  readonly device: DeviceRef;
  readonly isDefault: boolean;
  readonly priority: number;
  /** Created with { nonBlocking: true }: neither waits for the default stream nor is waited for by it. */
  readonly nonBlocking: boolean;
  /** Host memory async work reads or writes, kept referenced until the stream is seen idle. */
  #keep: unknown[] = [];
  /** This stream's entry in its device's stream set (what device.done() waits for). */
  #registered: WeakRef<Stream> | undefined;
  /** Host functions' failures, reported by the next wait (or as unhandled rejections; see hostFn). */
  readonly #failures: FailureSink;

  private constructor(device: DeviceRef, handle: number, isDefault: boolean, priority: number, nonBlocking = false) {
    super(device.state, handle, "stream");
    this.device = device;
    this.nonBlocking = nonBlocking;
    this.isDefault = isDefault;
    this.priority = priority;
    const failures: FailureSink = (this.#failures = { device: device.state.handle, errors: [] });
    if (!isDefault) {
      this.track("stream", () => abandonFailures(failures, "Stream.hostFn"));
      this.#registered = new WeakRef(this);
      device.state.streams.add(this.#registered);
    }
  }

  static create(device: DeviceRef, opts: StreamOptions = {}): Stream {
    if (!isDevice(device)) invalid("Stream.create", `device must be a Device, got ${describeGot(device)}`);
    opts = options("Stream.create", opts, STREAM_KEYS);
    const priority = opts.priority ?? 0;
    if (!Number.isInteger(priority)) invalid("Stream.create", `priority must be an integer, got ${describeGot(priority)}`);
    const flags = opts.nonBlocking ? StreamFlag.NON_BLOCKING : StreamFlag.DEFAULT;
    const handle = device.state.api.stream_create(device.handle, flags, priority);
    return new Stream(device, handle, false, priority, opts.nonBlocking ?? false);
  }

  get handle(): number {
    return this.liveHandle;
  }

  /** @internal */
  static defaultOf(device: DeviceRef): Stream {
    return new Stream(device, device.state.api.stream_default(device.handle), true, 0);
  }

  #raise(call: string): void {
    raiseFailures(call, this.#failures);
  }

  #idle(): void {
    this.#keep.length = 0;
    for (const drop of this.#drops.splice(0)) drop();
    for (const st of this.#peerOf) st.peerStreams.delete(this);
    this.#peerOf.clear();
  }

  /** Devices whose memory copies queued here use (see DeviceState.peerStreams). */
  #peerOf = new Set<DeviceState>();

  /** Holds on other devices' buffers that queued copies use, dropped when the stream is seen idle. */
  #drops: (() => void)[] = [];

  /** Block until every operation queued so far has finished. */
  synchronize(): void {
    const h = this.handle;
    const api = this.dev.api;
    beforeBlockingWait("Stream.synchronize", (s) => s === h, () => settled(() => api.stream_query(h)));
    api.stream_synchronize(h);
    this.#idle();
    this.#raise("Stream.synchronize");
  }

  /**
   * @internal Wait like synchronize(), but leave host functions' failures for the stream's next
   * wait to report (another device's dispose() waits here and has no one to report to).
   */
  drain(): void {
    if (this.disposed) return;
    const h = this.handle;
    const api = this.dev.api;
    beforeBlockingWait("Stream.synchronize", (s) => s === h, () => settled(() => api.stream_query(h)));
    api.stream_synchronize(h);
    this.#idle();
  }

  /**
   * @internal Work queued on this non-blocking stream and not waited for (`work`, as the error
   * names it) uses these objects: the next synchronous host write into any of the buffers among
   * them waits for this stream first (Buffer.write; default and blocking streams are ordered by
   * the driver, so they note nothing).
   */
  usedBy(work: string, uses: Iterable<unknown>): void {
    const ref = this.#registered;
    if (!ref || !this.nonBlocking) return;
    for (const b of uses) if (b instanceof Buffer) Buffer.usedOn(b, ref, work);
  }

  /** True when all queued work has finished. */
  query(): boolean {
    if (!this.dev.api.stream_query(this.handle)) return false;
    this.#idle();
    return true;
  }

  /** Events for done(), reused: creating one per wait would cost a native allocation each time. */
  #spare: Event[] = [];

  /**
   * Resolves when the work queued before this call has finished; never blocks the event loop. The
   * stream itself wakes the loop when it gets there (a host function calling back, wake.ts); while
   * a capture is open on the device, or where no callback can be made, an event is recorded and
   * polled instead.
   */
  async done(): Promise<void> {
    if (this.dev.captures === 0) {
      const h = this.handle;
      const api = this.dev.api;
      if (api.stream_query(h)) {
        this.#idle(); // nothing left to wait for: no host function, no turn
        this.#raise("Stream.done");
        return;
      }
      const woken = afterStream(api, h, () => settled(() => api.stream_query(h)));
      if (woken) {
        await woken;
        // A failure of the work (CUDA's sticky errors) is the query's to throw, as the event's was.
        if (!this.disposed && api.stream_query(h)) this.#idle();
        this.#raise("Stream.done");
        return;
      }
    }
    const ev = this.#spare.pop() ?? Event.create(this.device, { timing: false });
    try {
      ev.record(this);
      await pollUntil(() => ev.query());
    } finally {
      if (!this.disposed) this.#spare.push(ev);
      else ev.dispose();
    }
    this.#raise("Stream.done");
  }

  /**
   * `bytes` of device memory in this stream's order (cuMemAllocFromPoolAsync): work queued on
   * this stream from now on may use it; other streams must be ordered after this point (an
   * event) first. It comes from `opts.pool` or the device's default pool, reusing a block freed
   * earlier where the stream order allows. Free it with `buffer.free(stream)` (or dispose(): a
   * free on this stream). During a capture the memory belongs to the graph: one fixed address
   * for every replay, released with the graph and its execs; free it inside the same capture.
   */
  alloc(bytes: number, opts: { pool?: MemoryPool } = {}): Buffer {
    opts = options("Stream.alloc", opts, ALLOC_KEYS);
    this.live("Stream.alloc");
    const pool = opts.pool;
    if (pool !== undefined) {
      if (!(pool instanceof MemoryPool)) invalid("Stream.alloc", `pool must be a MemoryPool, got ${describeGot(pool)}`);
      if (pool.device.state !== this.dev) invalid("Stream.alloc", "pool of another device");
    }
    const h = this.handle;
    const graph = this.dev.captures > 0 && this.dev.api.stream_capture_status(h) !== CaptureStatusId.NONE;
    return Buffer.allocOrdered(this, pool ? pool.handle : 0, bytes, graph);
  }

  /**
   * Make later work on this stream wait for the event's latest record. The event may belong to
   * another device of the same backend: an event recorded after work on device A, waited for
   * here on device B, orders B's later work after A's.
   */
  wait(event: Event): this {
    if (!(event instanceof Event)) invalid("Stream.wait", "expected an Event");
    // An event of another device of the same backend is fine, as cuStreamWaitEvent across
    // contexts: that is how work on two devices is ordered.
    if (event.device.backend !== this.device.backend)
      invalid("Stream.wait", `event of another backend's device (${event.device.spec}, stream on ${this.device.spec})`);
    this.dev.api.stream_wait_event(this.handle, event.handle);
    return this;
  }

  /** Record a new event (or `event`) here and return it. */
  record(event?: Event): Event {
    const ev = event ?? Event.create(this.device);
    if (!(ev instanceof Event)) invalid("Stream.record", "event must be an Event");
    ev.record(this);
    return ev;
  }

  /** `b` (named `what`: "dst", "src" or "buffer" in messages) is live and of this stream's device. */
  #sameDevice(call: string, b: Buffer | HostBuffer, what: string): void {
    if (b.device.handle !== this.device.handle)
      invalid(call, `${what} is on ${b.device.spec}, stream on ${this.device.spec}`);
    if (b.disposed) disposed(call, what === "buffer" ? "buffer" : `${what} buffer`);
  }

  #range(call: string, what: string, len: number, off: number, bytes: number): void {
    checkSize(call, `${what} offset`, off);
    if (off + bytes > len)
      throw new GpuError(Status.INVALID_VALUE, `${call}: ${what} range [${off}, ${off + bytes}) is past the end (${len} bytes)`, {
        backend: "typescript",
        call,
      });
  }

  /** Validate a copy's devices and ranges; returns [dstOffset, srcOffset, bytes]. */
  #copyRange(call: string, dst: Buffer | HostBuffer, src: Buffer | HostBuffer, opts: CopyOptions): [number, number, number] {
    opts = options(call, opts, COPY_KEYS);
    this.#sameDevice(call, dst, "dst");
    this.#sameDevice(call, src, "src");
    const so = opts.srcOffset ?? 0, dO = opts.dstOffset ?? 0;
    const bytes = checkSize(call, "byte count", opts.bytes ?? src.byteLength - so);
    this.#range(call, "src", src.byteLength, so, bytes);
    this.#range(call, "dst", dst.byteLength, dO, bytes);
    return [dO, so, bytes];
  }

  /**
   * Work (`work`, as an error names it) just enqueued here uses these: if it was captured, its
   * graph keeps them alive; on a non-blocking stream, a later host write into one of the buffers
   * waits for it (usedBy), as after a kernel launch.
   */
  #queued(work: string, ...uses: object[]): void {
    if (this.dev.captures > 0) noteCaptured(this.dev, this.rawHandle, null, uses);
    if (this.nonBlocking) this.usedBy(work, uses);
  }

  /** Device-to-device copy in stream order. */
  copy(dst: Buffer, src: Buffer, opts: CopyOptions = {}): this {
    const call = "Stream.copy";
    this.handle; // a disposed stream is an error even for an empty range
    if (!(dst instanceof Buffer) || !(src instanceof Buffer)) invalid(call, "dst and src must be Buffers");
    const [dO, so, bytes] = this.#copyRange(call, dst, src, opts);
    if (bytes) this.dev.api.memcpy_dtod_async(this.handle, dst.address + dO, src.address + so, bytes);
    this.#queued(call, dst, src);
    return this;
  }

  /**
   * Copy between buffers of two devices (or one) in this stream's order; the stream belongs to
   * either buffer's device (cuMemcpyPeerAsync). The copy starts after the work queued before it
   * here, and later work here sees the data; work on the other device orders itself with an
   * event recorded here after the copy (`other.wait(stream.record())`). It goes directly when
   * this stream's device has peer access to the other device (Device.enablePeerAccess), and is
   * staged through host memory otherwise, never refused for want of access. The result says
   * which: `path` "peer", "staged", or "device" when both buffers are on one device.
   */
  copyPeer(dst: Buffer, src: Buffer, opts: CopyOptions = {}): { path: PeerCopyPath } {
    const call = "Stream.copyPeer";
    const h = this.handle; // a disposed stream is an error even for an empty range
    opts = options(call, opts, COPY_KEYS);
    if (!(dst instanceof Buffer) || !(src instanceof Buffer)) invalid(call, "dst and src must be Buffers");
    if (dst.disposed) disposed(call, "dst buffer");
    if (src.disposed) disposed(call, "src buffer");
    const dd = dst.device, sd = src.device;
    if (dd.handle !== this.device.handle && sd.handle !== this.device.handle)
      invalid(call, `the stream is on ${this.device.spec}, the buffers on ${sd.spec} (src) and ${dd.spec} (dst): it must be on one of their devices`);
    const so = opts.srcOffset ?? 0, dO = opts.dstOffset ?? 0;
    const bytes = checkSize(call, "byte count", opts.bytes ?? src.byteLength - so);
    this.#range(call, "src", src.byteLength, so, bytes);
    this.#range(call, "dst", dst.byteLength, dO, bytes);
    const path = this.dev.api.memcpy_peer_async(h, dst.address + dO, dd.handle, src.address + so, sd.handle, bytes);
    if (bytes) {
      // The other device's buffer is freed by its own device, which does not wait for this
      // stream: hold it until this stream is seen idle.
      const foreign = dd.handle !== this.device.handle ? dst : sd.handle !== this.device.handle ? src : null;
      if (foreign) {
        this.#drops.push(foreign[HOLD]());
        foreign.device.state.peerStreams.add(this);
        this.#peerOf.add(foreign.device.state);
      }
      this.#queued(call, dst, src);
    }
    return { path: COPY_PATHS[path] ?? "staged" };
  }

  /** Host (pinned) to device in stream order, with no staging copy. */
  upload(dst: Buffer, src: HostBuffer, opts: CopyOptions = {}): this {
    const call = "Stream.upload";
    this.handle; // a disposed stream is an error even for an empty range
    if (!(dst instanceof Buffer)) invalid(call, "dst must be a Buffer");
    if (!(src instanceof HostBuffer)) invalid(call, "src must be a HostBuffer (pinned memory); use Buffer.write for a synchronous copy");
    const [dO, so, bytes] = this.#copyRange(call, dst, src, opts);
    if (bytes) {
      this.dev.api.memcpy_htod_async(this.handle, dst.address + dO, src.hostAddress + so, bytes);
      this.#keep.push(src);
      this.#queued(call, dst, src);
    }
    return this;
  }

  /** Device to host (pinned) in stream order. */
  download(dst: HostBuffer, src: Buffer, opts: CopyOptions = {}): this {
    const call = "Stream.download";
    this.handle; // a disposed stream is an error even for an empty range
    if (!(dst instanceof HostBuffer)) invalid(call, "dst must be a HostBuffer (pinned memory); use Buffer.read for a synchronous copy");
    if (!(src instanceof Buffer)) invalid(call, "src must be a Buffer");
    const [dO, so, bytes] = this.#copyRange(call, dst, src, opts);
    if (bytes) {
      this.dev.api.memcpy_dtoh_async(this.handle, dst.hostAddress + dO, src.address + so, bytes);
      this.#keep.push(dst);
      this.#queued(call, dst, src);
    }
    return this;
  }

  /** Fill elements in stream order (see Buffer.fill: `type`, else the buffer's elementType, else only 0). */
  fill<B extends Buffer, V extends number>(buf: B, value: V, ...optsWithType: FillOptionsFor<B, V>): this;
  fill(buf: Buffer, value: number, opts: FillRange & { type?: FillType | undefined } = {}): this {
    const call = "Stream.fill";
    this.handle; // a disposed stream is an error even for an empty range
    if (!(buf instanceof Buffer)) invalid(call, "expected a Buffer");
    opts = options(call, opts, FILL_KEYS);
    this.#sameDevice(call, buf, "buffer");
    const { pattern, size } = fillPattern(call, value, fillTypeOf(call, buf, value, opts.type));
    const off = opts.offset ?? 0;
    const bytes = checkSize(call, "byte count", opts.bytes ?? buf.byteLength - off);
    this.#range(call, "buffer", buf.byteLength, off, bytes);
    if (bytes % size || (buf.address + off) % size) invalid(call, `range is not aligned to ${size}-byte elements`);
    if (bytes) this.dev.api.memset_async(this.handle, buf.address + off, pattern, size, bytes / size);
    this.#queued(call, buf);
    return this;
  }

  /**
   * Run `fn` on the JS thread when the stream reaches this point; the stream waits until it
   * returns (or, for an async function, until its promise settles). A throw (or rejection) is
   * reported as a GpuError (LAUNCH_FAILED, the error as its `cause`) by the next wait on this
   * stream (synchronize(), done()) or on its device; if the stream is disposed or collected first,
   * or the process is about to exit with it unreported, as an unhandled rejection: never dropped.
   * A pending function does not keep the process alive once it is running: an async function
   * whose promise never settles leaves the stream waiting, and the process may still exit.
   */
  hostFn(fn: () => unknown): this {
    if (typeof fn !== "function") invalid("Stream.hostFn", "expected a function");
    // Captured, it would become a graph node replayed with no JS thread waiting to release it.
    if (!this.isDefault && this.captureStatus() !== "None")
      throw new GpuError(
        Status.STREAM_CAPTURE_UNSUPPORTED,
        "Stream.hostFn: a TypeScript host function cannot be captured into a graph (every replay would wait on the JS thread); run it after launching the graph",
        { backend: "typescript", call: "Stream.hostFn" },
      );
    // The callback refers to the stream, so a stream with a pending function is never collected
    // (its finaliser would wait, on this thread, for a function only this thread can run).
    enqueueHostFn(this.handle, fn, (e) => recordFailure(this.#failures, e), this.device.backend, this.device.state);
    return this;
  }

  /**
   * Start recording the work issued to this stream (and to streams that wait on events recorded
   * here) into a graph instead of running it. Refused on the device's default stream. `mode`
   * (default Global) decides which illegal calls invalidate the capture; see CaptureMode.
   */
  beginCapture(mode: CaptureMode = CaptureMode.Global): this {
    beginCaptureOn(this, mode);
    return this;
  }

  /**
   * End the capture begun on this stream and return its Graph. Throws (and leaves the stream out
   * of capture and usable) when the capture was invalidated or a forked stream was not joined
   * back; the error names the call that broke it and the mode.
   */
  endCapture(): Graph {
    return endCaptureOn(this);
  }

  /** Capture status of this stream: "None", "Active" or "Invalidated". */
  captureStatus(): "None" | "Active" | "Invalidated" {
    return CAPTURE_STATUS[this.dev.api.stream_capture_status(this.handle)] ?? "None";
  }

  /** The default stream is owned by its device: disposing it does nothing. */
  protected override get owns(): boolean {
    return !this.isDefault;
  }

  /**
   * Wait for the stream's work, then destroy it. The default stream is owned by its device.
   * Refused (ILLEGAL_STATE) from a host function of this stream, which the wait would deadlock.
   */
  override dispose(): void {
    if (!this.disposed && !this.isDefault) {
      const h = this.rawHandle;
      const api = this.dev.api;
      // Inside one of this stream's own host functions, or while an async one awaits its
      // promise, the stream is held until the function finishes, so waiting for it here could
      // never end: the dispose happens in a later turn (dispose() never throws).
      if (insideHostFnOf((s) => s === h)) {
        deferDispose(() => this.dispose());
        return;
      }
      try {
        beforeBlockingWait("Stream.dispose", (s) => s === h, () => settled(() => api.stream_query(h)));
      } catch {
        // The wait could not be finished here (an async host function awaits its promise, which
        // the blocked JS thread could never settle): destroying now would block on a stream
        // that still needs the JS thread. Try again in a later turn (dispose() never throws).
        deferDispose(() => this.dispose());
        return;
      }
    }
    super.dispose();
  }

  /**
   * `await using s = device.createStream()`: at the end of the block, wait (without blocking
   * the event loop) for the work queued on the stream, then dispose it. A host function's
   * failure is reported after the stream is disposed. The default stream is its device's: nothing.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.disposed || this.isDefault) return;
    try {
      await this.done();
    } finally {
      this.dispose();
    }
  }

  /**
   * 'Stream(cpu, created, non-blocking, priority -1, busy)': its device, whether it is the
   * device's default stream, its flags, and whether its queued work has finished (one query; a
   * capturing stream says so instead, and while any capture of the device is open the query is
   * left out, as it could break that capture); ", disposed" once gone.
   */
  override toString(): string {
    const parts = [this.device.spec, this.isDefault ? "default" : "created"];
    if (this.nonBlocking) parts.push("non-blocking");
    if (this.priority !== 0) parts.push(`priority ${this.priority}`);
    if (this.disposed) parts.push("disposed");
    else
      try {
        const capture = this.captureStatus();
        if (capture === "Active") parts.push("capturing");
        else if (capture === "Invalidated") parts.push("capture invalidated");
        // A query while any capture of the device is open could invalidate it (CUDA's Global mode).
        else if (this.dev.captures === 0) parts.push(this.dev.api.stream_query(this.rawHandle) ? "idle" : "busy");
      } catch {
        /* its state could not be read: the rest still says which stream */
      }
    return `Stream(${parts.join(", ")})`;
  }

  protected [RELEASE](): void {
    const h = this.rawHandle;
    if (!this.dev.open) return;
    const api = this.dev.api;
    // Disposed while capturing: the capture ends with it (the device stops counting it open).
    let capturing = false;
    try {
      capturing = api.stream_capture_status(h) !== 0;
    } catch {
      /* not capturing, as far as anyone can tell */
    }
    if (this.#registered) this.dev.streams.delete(this.#registered);
    for (const ev of this.#spare.splice(0)) ev.dispose();
    try {
      api.stream_destroy(h);
    } finally {
      if (capturing) captureEnded(this.dev);
      this.#idle();
      abandonFailures(this.#failures, "Stream.dispose"); // no later wait can report them now
    }
  }
}
