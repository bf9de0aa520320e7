// Where a RingKernel's messages go and its responses come from: a persistent kernel fed through
// two rings (RingTransport), or a launch of the batch kernel per batch of staged messages
// (BatchTransport); and the safety net for a RingKernel forgotten while its kernel runs.
import type { Api } from "../../ffi/result";
import { Buffer } from "../buffer";
import type { Device } from "../device";
import { Event } from "../event";
import type { Kernel } from "../kernel";
import type { Stream } from "../stream";
import { CLOSED_W, Ring, popChecked, pushChecked } from "./ring";
import { afterStream } from "../wake";
import { settled } from "../poll";

/** Where responses come from, and where messages go. */
export interface Transport {
  /** Accept up to n messages of `u8` now; returns how many. */
  push(u8: Uint8Array, n: number): number;
  /** Responses ready to pull. */
  available(): number;
  /** Pull up to n responses (k * responseBytes bytes). */
  pull(n: number): Uint8Array;
  /** Make progress (Batch: complete and launch batches). `urgent`: flush staged messages now. */
  progress(urgent: boolean): void;
  /** Block until every accepted message's response is available (requestSync). */
  flushSync(): void;
  /** Ask the kernel to finish once drained. */
  close(): void;
  /** True once closed and every response is available and the device work has finished. */
  finished(): boolean;
  /** Stop at once and wait (dispose). */
  abort(): void;
  dispose(): void;
}

export class RingTransport implements Transport {
  readonly inRing: Ring;
  readonly outRing: Ring;
  readonly #inH: number;
  readonly #outH: number;
  readonly #rb: number;
  readonly #stream: Stream;
  readonly #api: Api;
  #launched = false;
  #resident: Set<number> | null = null;
  #residentHandle = 0;

  constructor(device: Device, kernel: Kernel, stream: Stream, state: Buffer, mb: number, rb: number, cap: number) {
    this.#stream = stream;
    this.#rb = rb;
    this.#api = device.state.api;
    this.inRing = Ring.create(device, { messageBytes: mb, capacity: cap });
    try {
      this.outRing = Ring.create(device, { messageBytes: rb, capacity: cap });
    } catch (e) {
      this.inRing.dispose();
      throw e;
    }
    this.#inH = this.inRing.handle;
    this.#outH = this.outRing.handle;
    try {
      kernel.launch(stream, { grid: 1, block: 1, args: [this.inRing.deviceAddress, this.outRing.deviceAddress, state] });
      this.#launched = true;
      // resident until it exits: device-wide waits leave its stream out
      this.#resident = device.state.residentStreams;
      this.#residentHandle = stream.handle;
      this.#resident.add(this.#residentHandle);
    } catch (e) {
      this.inRing.dispose();
      this.outRing.dispose();
      throw e;
    }
  }

  push(u8: Uint8Array, n: number): number {
    return pushChecked(this.#api, this.#inH, u8, n);
  }

  available(): number {
    return this.outRing.countFast();
  }

  pull(n: number): Uint8Array {
    const k = Math.min(n, this.outRing.countFast());
    const out = new Uint8Array(k * this.#rb);
    if (k === 0) return out;
    const got = popChecked(this.#api, this.#outH, out, k);
    return got === k ? out : out.subarray(0, got * this.#rb);
  }

  progress(): void {}

  flushSync(): void {}

  close(): void {
    if (this.inRing.closedFast() === 0) this.inRing.closed = 1;
  }

  finished(): boolean {
    const done = this.outRing.closedFast() === 1 && this.#stream.query();
    if (done) this.#notResident();
    return done;
  }

  #notResident(): void {
    this.#resident?.delete(this.#residentHandle);
    this.#resident = null;
  }

  abort(): void {
    if (this.#launched && !this.inRing.disposed) {
      this.inRing.closed = 2;
      this.#stream.synchronize();
    }
    this.#notResident();
  }

  dispose(): void {
    this.#notResident();
    this.inRing.dispose();
    this.outRing.dispose();
  }
}

export class BatchTransport implements Transport {
  readonly #kernel: Kernel;
  readonly #stream: Stream;
  readonly #state: Buffer;
  readonly #mb: number;
  readonly #rb: number;
  readonly #cap: number;
  readonly #stage: Uint8Array;
  #staged = 0;
  readonly #inBuf: Buffer;
  readonly #outBuf: Buffer;
  readonly #event: Event;
  #inFlight = 0;
  /** Completed responses: chunks and the read offset in the first, in responses. */
  #ready: Uint8Array[] = [];
  #readyOff = 0;
  #readyCount = 0;
  #closed = false;
  /** Called when a batch's launch has finished (the stream's callback, wake.ts), so responses move without the poller's timers. */
  readonly #onDone: (() => void) | undefined;

  constructor(device: Device, kernel: Kernel, stream: Stream, state: Buffer, mb: number, rb: number, cap: number, onDone?: () => void) {
    this.#onDone = onDone;
    this.#kernel = kernel;
    this.#stream = stream;
    this.#state = state;
    this.#mb = mb;
    this.#rb = rb;
    this.#cap = cap;
    this.#stage = new Uint8Array(cap * mb);
    this.#inBuf = Buffer.alloc(device, cap * mb);
    this.#outBuf = Buffer.alloc(device, cap * rb);
    this.#event = Event.create(device, { timing: false });
  }

  push(u8: Uint8Array, n: number): number {
    const k = Math.min(n, this.#cap - this.#staged);
    if (k > 0) {
      this.#stage.set(u8.subarray(0, k * this.#mb), this.#staged * this.#mb);
      this.#staged += k;
    }
    return k;
  }

  available(): number {
    return this.#readyCount;
  }

  pull(n: number): Uint8Array {
    const rb = this.#rb;
    const k = Math.min(n, this.#readyCount);
    const first = this.#ready[0];
    // The common case: all of it from the first chunk, without a copy.
    if (first && this.#readyOff * rb + k * rb <= first.byteLength) {
      const out = first.subarray(this.#readyOff * rb, (this.#readyOff + k) * rb);
      this.#consume(k);
      return out;
    }
    const out = new Uint8Array(k * rb);
    let got = 0;
    while (got < k) {
      const c = this.#ready[0]!;
      const left = c.byteLength / rb - this.#readyOff;
      const take = Math.min(left, k - got);
      out.set(c.subarray(this.#readyOff * rb, (this.#readyOff + take) * rb), got * rb);
      this.#consume(take);
      got += take;
    }
    return out;
  }

  #consume(k: number): void {
    this.#readyOff += k;
    this.#readyCount -= k;
    const c = this.#ready[0];
    if (c && this.#readyOff * this.#rb >= c.byteLength) {
      this.#ready.shift();
      this.#readyOff = 0;
    }
  }

  #complete(): void {
    const out = this.#outBuf.read(new Uint8Array(this.#inFlight * this.#rb));
    this.#ready.push(out);
    this.#readyCount += this.#inFlight;
    this.#inFlight = 0;
  }

  #launch(): void {
    const n = this.#staged;
    this.#inBuf.write(this.#stage.subarray(0, n * this.#mb));
    this.#kernel.launch(this.#stream, { grid: 1, block: 1, args: [this.#inBuf, this.#outBuf, n, this.#state] });
    this.#event.record(this.#stream);
    this.#inFlight = n;
    this.#staged = 0;
    const onDone = this.#onDone;
    if (onDone) {
      const api = this.#stream.device.state.api;
      const ev = this.#event;
      const h = ev.handle;
      afterStream(api, this.#stream.handle, () => settled(() => api.event_query(h)))?.then(onDone, onDone);
    }
  }

  progress(urgent: boolean): void {
    if (this.#inFlight && this.#event.query()) this.#complete();
    if (!this.#inFlight && this.#staged && (urgent || this.#closed || this.#staged === this.#cap)) this.#launch();
  }

  flushSync(): void {
    for (;;) {
      if (this.#inFlight) {
        this.#stream.synchronize();
        this.#complete();
      }
      if (!this.#staged) return;
      this.#launch();
    }
  }

  close(): void {
    this.#closed = true;
  }

  finished(): boolean {
    this.progress(true);
    return this.#closed && !this.#inFlight && !this.#staged;
  }

  abort(): void {
    if (this.#inFlight) this.#stream.synchronize();
    this.#inFlight = 0;
    this.#staged = 0;
  }

  dispose(): void {
    this.#event.dispose();
    this.#inBuf.dispose();
    this.#outBuf.dispose();
  }
}

/** What a RingKernel forgotten while running leaves behind: released once its kernel has exited. */
export interface Abandoned {
  hdr: Uint32Array;
  device: Device;
  stream: Stream;
  /** Its transport (rings), state buffer, stream and module, in that order. */
  parts: { dispose(): void }[];
}

/** Abandoned kernels being aborted: their parts stay referenced until the kernel has exited. */
const draining = new Set<Abandoned>();

/**
 * Safety net: a RingKernel forgotten while running aborts its kernel rather than spin forever.
 * The registry holds its parts strongly, so none of their own finalisers runs while the kernel
 * may still use them (a stream's would wait for the kernel on this thread: a deadlock in the
 * collector; a buffer's would free memory the kernel writes). They are disposed once the stream
 * is seen idle, polled without blocking.
 */
export const abandoned = new FinalizationRegistry<Abandoned>((h) => {
  try {
    Atomics.store(h.hdr, CLOSED_W, 2);
  } catch {
    /* memory already gone */
  }
  draining.add(h);
  const settle = () => {
    let exited: boolean;
    try {
      exited = !h.device.state.open || h.stream.disposed || h.stream.query();
    } catch {
      exited = true; // a failed stream has no kernel left to wait for
    }
    if (!exited) {
      setTimeout(settle, 2).unref();
      return;
    }
    draining.delete(h);
    if (!h.device.state.open) return; // closing the device released them
    for (const p of h.parts) {
      try {
        p.dispose();
      } catch {
        /* a finaliser has no caller to report to */
      }
    }
  };
  settle();
});
