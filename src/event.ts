// Event: a point in a stream's work. Other streams can wait on it; the host can query, block
// on it or await it; two timing events give the milliseconds between them.
import { eventElapsed } from "../ffi/result";
import { EventFlag } from "../ffi/constants";
import { isDevice, type DeviceRef, type StreamRef } from "./device_state";
import { describeGot, invalid, options, type OptionKeys } from "./errors";
import { decodeHandle, encodeHandle, handleBytes } from "./ipc";
import { beforeBlockingWait } from "./hostfn";
import { pollUntil, settled } from "./poll";
import { afterEvent } from "./wake";
import { RELEASE, Resource } from "./resource";

// The keys each options argument may have (errors.ts `options` refuses any other).
const EVENT_KEYS: OptionKeys<EventOptions> = { timing: true, blockingSync: true, interprocess: true };

export interface EventOptions {
  /** Record timestamps for elapsed() (default true). */
  timing?: boolean;
  /** Block with a sleep instead of spinning in synchronize() (CU_EVENT_BLOCKING_SYNC). */
  blockingSync?: boolean;
  /**
   * Shareable with other processes through exportHandle() (CU_EVENT_INTERPROCESS). Such an
   * event keeps no time: `timing` must not be true.
   */
  interprocess?: boolean;
}

/**
 * A point in a stream's work. Named beside the DOM `Event` global Bun also has, never over it:
 * `import { GpuEvent } from "bungpu"`.
 */
export class GpuEvent extends Resource {
  readonly device: DeviceRef;
  readonly timing: boolean;
  /** The native stream of the latest record (0: never recorded), for the host-function guard. */
  #recordedOn = 0;
  #interprocess = false;

  private constructor(device: DeviceRef, handle: number, timing: boolean) {
    super(device.state, handle, "event");
    this.device = device;
    this.timing = timing;
    this.track("event");
  }

  static create(device: DeviceRef, opts: EventOptions = {}): GpuEvent {
    if (!isDevice(device)) invalid("Event.create", `device must be a Device, got ${describeGot(device)}`);
    opts = options("Event.create", opts, EVENT_KEYS);
    const interprocess = opts.interprocess === true;
    if (interprocess && opts.timing === true)
      invalid("Event.create", "an interprocess event keeps no time (CUDA needs CU_EVENT_DISABLE_TIMING with CU_EVENT_INTERPROCESS)");
    const timing = interprocess ? false : (opts.timing ?? true);
    const flags =
      (timing ? 0 : EventFlag.DISABLE_TIMING) | (opts.blockingSync ? EventFlag.BLOCKING_SYNC : 0) | (interprocess ? EventFlag.INTERPROCESS : 0);
    const e = new GpuEvent(device, device.state.api.event_create(device.handle, flags), timing);
    e.#interprocess = interprocess;
    return e;
  }

  get handle(): number {
    return this.liveHandle;
  }

  /** Capture the work queued on `stream` so far (default: the device's default stream). */
  record(stream?: StreamRef): this {
    const s = stream ?? this.device.defaultStream;
    if (typeof s !== "object" || s === null || !isDevice(s.device)) invalid("Event.record", `stream must be a Stream, got ${describeGot(s)}`);
    if (s.device.handle !== this.device.handle) invalid("Event.record", "stream of another device");
    const sh = s.handle;
    this.dev.api.event_record(this.handle, sh);
    this.#recordedOn = sh;
    return this;
  }

  /** True when the recorded work has finished (an event never recorded counts as finished). */
  query(): boolean {
    return this.dev.api.event_query(this.handle);
  }

  synchronize(): void {
    const h = this.handle;
    const api = this.dev.api;
    // Inside a host function: refused only if the record is on that function's stream and not
    // yet reached (a record before the function has completed already and is fine to wait on).
    const reached = () => settled(() => api.event_query(h));
    beforeBlockingWait("Event.synchronize", (s) => s === this.#recordedOn && !reached(), reached);
    api.event_synchronize(h);
  }

  /**
   * Resolves when the recorded work has finished; never blocks the event loop. A stream of the
   * device's own waits on the event and wakes the loop (wake.ts); while a capture is open on the
   * device, or where no callback can be made, the event is polled.
   */
  done(): Promise<void> {
    if (this.#recordedOn !== 0 && this.dev.captures === 0 && !this.query()) {
      const api = this.dev.api;
      const h = this.handle;
      const woken = afterEvent(this.dev, h, () => settled(() => api.event_query(h)));
      if (woken)
        return woken.then(() => {
          api.event_query(h); // a failure of the recorded work throws, as the poll's query did
        });
    }
    return pollUntil(() => this.query());
  }

  /** Milliseconds from `start` to `end` (both recorded with timing and finished). */
  static elapsed(start: GpuEvent, end: GpuEvent): number {
    if (!(start instanceof GpuEvent) || !(end instanceof GpuEvent)) invalid("Event.elapsed", "expected two Events");
    return eventElapsed(start.handle, end.handle, start.device.backend);
  }

  /** Milliseconds from `start` to this event. */
  elapsedSince(start: GpuEvent): number {
    return GpuEvent.elapsed(start, this);
  }

  protected [RELEASE](): void {
    const handle = this.rawHandle;
    if (this.dev.open) this.dev.api.event_destroy(handle);
  }

  // ---- sharing between processes (src/ipc.ts holds the handle format) ----------------------------

  /** True for an event created with `{ interprocess: true }` or opened from a handle. */
  get interprocess(): boolean {
    return this.#interprocess;
  }

  /**
   * A handle another process opens with `Device.openSharedEvent` (cuIpcGetEventHandle). Both
   * sides may record it and wait on it; a wait waits for the latest record issued before it, in
   * either process. Keep this event alive while importers use theirs.
   */
  exportHandle(): string {
    const h = this.handle;
    if (!this.#interprocess) invalid("Event.exportHandle", "the event was not created with { interprocess: true }");
    const out = handleBytes();
    this.dev.api.ipc_event_export(h, out);
    return encodeHandle(out);
  }

  /** @internal Device.openSharedEvent: the event another process exported (no timing). */
  static openShared(device: DeviceRef, handle: unknown): GpuEvent {
    const call = "Device.openSharedEvent";
    if (!isDevice(device)) invalid(call, `device must be a Device, got ${describeGot(device)}`);
    const bytes = decodeHandle(call, handle);
    const e = new GpuEvent(device, device.state.api.ipc_event_open(device.handle, bytes), false);
    e.#interprocess = true;
    return e;
  }

  /** "GpuEvent(cpu, timing, recorded)": its device, whether it keeps time, whether it was ever recorded. */
  override toString(): string {
    const parts = [this.device.spec, this.timing ? "timing" : "no timing", this.#recordedOn ? "recorded" : "never recorded"];
    if (this.disposed) parts.push("disposed");
    return `GpuEvent(${parts.join(", ")})`;
  }
}

// The package's own modules still call the class Event; users get GpuEvent (src/index.ts).
export { GpuEvent as Event };
