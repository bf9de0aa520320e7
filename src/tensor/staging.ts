// A plan run's host memory: where plan.run stages one run's inputs before the stream copies them
// into the plan's input buffers, and where the stream copies its outputs for the JavaScript thread
// to read once the run has finished. Pinned host memory (HostBuffer: page-locked on CUDA, so the
// copies are true DMA in stream order), one block for the inputs and one for the outputs, each
// value at a 256-byte boundary; an event marks the run's end (and one its start, where the plan
// times its runs). Runs in flight each hold a slot, so
// later runs are staged and issued while earlier ones still compute, and nothing a run reads or
// writes on the host is touched by another until it has finished.
import { HostBuffer } from "../buffer";
import type { Device } from "../device";
import { Event, type GpuEvent } from "../event";
import type { HostArray } from "./dtype";

const ALIGN = 256;
/** Runs in flight at most per plan, and the host memory their slots may take together. */
export const MAX_SLOTS = 32;
const SLOT_BUDGET_BYTES = 64 << 20;

function layout(bytes: readonly number[]): { at: number[]; total: number } {
  const at: number[] = [];
  let total = 0;
  for (const b of bytes) {
    at.push(total);
    total += Math.ceil(b / ALIGN) * ALIGN;
  }
  return { at, total };
}

/** How many slots a plan whose inputs and outputs take these bytes may hold. */
export function slotLimit(inBytes: readonly number[], outBytes: readonly number[]): number {
  const per = layout(inBytes).total + layout(outBytes).total;
  return Math.max(1, Math.min(MAX_SLOTS, Math.floor(SLOT_BUDGET_BYTES / Math.max(per, 1))));
}

export class RunSlot {
  readonly inHost: HostBuffer | null;
  readonly outHost: HostBuffer | null;
  readonly inAt: readonly number[];
  readonly outAt: readonly number[];
  /** Recorded after the run's output copies: its query is the run's completion. */
  readonly done: GpuEvent;
  /** With `timed`: recorded before the run's input copies, so start → done is the run's own time. */
  readonly start: GpuEvent | null;
  readonly #inBytes: Uint8Array | null;
  readonly #outBytes: Uint8Array | null;

  constructor(device: Device, inBytes: readonly number[], outBytes: readonly number[], timed = false) {
    const i = layout(inBytes);
    const o = layout(outBytes);
    this.inAt = i.at;
    this.outAt = o.at;
    this.inHost = i.total > 0 ? HostBuffer.alloc(device, i.total) : null;
    let outHost: HostBuffer | null = null;
    try {
      this.outHost = outHost = o.total > 0 ? HostBuffer.alloc(device, o.total) : null;
      this.done = Event.create(device, { timing: timed });
      this.start = timed ? Event.create(device, { timing: true }) : null;
    } catch (e) {
      this.inHost?.dispose();
      outHost?.dispose();
      throw e;
    }
    this.#inBytes = this.inHost ? this.inHost.bytes : null;
    this.#outBytes = this.outHost ? this.outHost.bytes : null;
  }

  /** Copy `data` into input `i`'s place. */
  stage(i: number, data: HostArray): void {
    this.#inBytes!.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), this.inAt[i]!);
  }

  /** Output `j`'s staged bytes (valid once the run has finished). */
  output(j: number, bytes: number): Uint8Array {
    const at = this.outAt[j]!;
    return this.#outBytes!.subarray(at, at + bytes);
  }

  dispose(): void {
    this.inHost?.dispose();
    this.outHost?.dispose();
    this.done.dispose();
    this.start?.dispose();
  }

  /** The run's own time in ms (timed slots, once done), else NaN. */
  elapsedMs(): number {
    return this.start ? Event.elapsed(this.start, this.done) : NaN;
  }
}
