// Event: a point in a stream's work. Other streams can wait on it; the host can query, block
// on it or await it; two timing events give the milliseconds between them.
import { N, check, slot, readPtr, readF32 } from "../ffi/native";
import { Status } from "../ffi/sys";
import { Device, factories } from "./device";
import { describeValue, invalid, disposed, options } from "./errors";
import { beforeBlockingWait } from "./hostfn";
import { track, untrack } from "./lifetime";
import { pollUntil } from "./poll";
import type { Stream } from "./stream";

export interface EventOptions {
  /** Record timestamps for elapsed() (default true). */
  timing?: boolean;
  /** Block with a sleep instead of spinning in synchronize() (CU_EVENT_BLOCKING_SYNC). */
  blockingSync?: boolean;
}

export class Event {
  readonly device: Device;
  readonly timing: boolean;
  #handle: number;
  #live = true;
  /** The native stream of the latest record (0: never recorded), for the host-function guard. */
  #recordedOn = 0;

  private constructor(device: Device, handle: number, timing: boolean) {
    this.device = device;
    this.#handle = handle;
    this.timing = timing;
    track(this, device.state, handle, "event");
  }

  static create(device: Device, opts: EventOptions = {}): Event {
    if (!(device instanceof Device)) invalid("Event.create", `device must be a Device, got ${describeValue(device)}`);
    opts = options("Event.create", opts);
    const timing = opts.timing ?? true;
    const flags = (timing ? 0 : 2) | (opts.blockingSync ? 1 : 0);
    check(N.bg_event_create(device.handle, flags, slot(0)), "bg_event_create", device.backend);
    return new Event(device, readPtr(0), timing);
  }

  get handle(): number {
    if (!this.device.state.open) disposed("Event", "device of this event");
    if (!this.#live) disposed("Event", "event");
    return this.#handle;
  }

  get disposed(): boolean {
    return !this.#live || !this.device.state.open;
  }

  /** Capture the work queued on `stream` so far (default: the device's default stream). */
  record(stream?: Stream): this {
    const s = stream ?? this.device.defaultStream;
    if (typeof s !== "object" || !(s.device instanceof Device)) invalid("Event.record", `stream must be a Stream, got ${describeValue(s)}`);
    if (s.device.handle !== this.device.handle) invalid("Event.record", "stream of another device");
    check(N.bg_event_record(this.handle, s.handle), "bg_event_record", this.device.backend);
    this.#recordedOn = s.handle;
    return this;
  }

  /** True when the recorded work has finished (an event never recorded counts as finished). */
  query(): boolean {
    const rc = N.bg_event_query(this.handle);
    if (rc === Status.NOT_READY) return false;
    check(rc, "bg_event_query", this.device.backend);
    return true;
  }

  synchronize(): void {
    const h = this.handle;
    // Inside a host function: refused only if the record is on that function's stream and not
    // yet reached (a record before the function has completed already and is fine to wait on).
    const reached = () => N.bg_event_query(h) !== Status.NOT_READY;
    beforeBlockingWait("Event.synchronize", (s) => s === this.#recordedOn && !reached(), reached);
    check(N.bg_event_synchronize(h), "bg_event_synchronize", this.device.backend);
  }

  /** Resolves when the recorded work has finished; never blocks the event loop. */
  done(): Promise<void> {
    return pollUntil(() => this.query());
  }

  /** Milliseconds from `start` to `end` (both recorded with timing and finished). */
  static elapsed(start: Event, end: Event): number {
    if (!(start instanceof Event) || !(end instanceof Event)) invalid("Event.elapsed", "expected two Events");
    check(N.bg_event_elapsed(slot(0), start.handle, end.handle), "bg_event_elapsed", start.device.backend);
    return readF32(0);
  }

  /** Milliseconds from `start` to this event. */
  elapsedSince(start: Event): number {
    return Event.elapsed(start, this);
  }

  dispose(): void {
    if (!this.#live) return;
    this.#live = false;
    untrack(this);
    if (this.device.state.open) check(N.bg_event_destroy(this.#handle), "bg_event_destroy", this.device.backend);
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

factories.event = (d, o) => Event.create(d, o);
