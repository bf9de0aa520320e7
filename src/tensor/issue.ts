// The ways a plan issues its kernels besides its command list: one launch call per kernel on a
// stream (optionally timed by events, for profiling), or as a Schedule (one Step per kernel) that
// the explicit execution modes compile.
import type { Buffer } from "../buffer";
import type { Device } from "../device";
import { Event } from "../event";
import type { Kernel } from "../kernel";
import { Schedule, Step } from "../schedule";
import type { Stream } from "../stream";
import type { GeneratedKernel } from "./codegen";
import type { PreparedKernel } from "./prepare";

export interface KernelProfile {
  readonly entryPoint: string;
  readonly source: string;
  readonly device: string;
  readonly numBuffers: number;
  readonly elapsedMs: number;
}

/** A plan's kernels, their generated and compiled forms, and their arguments under some variable values. */
export interface BoundKernels {
  readonly kernels: readonly PreparedKernel[];
  readonly gens: readonly GeneratedKernel[];
  readonly compiled: readonly Kernel[];
  argsOf(i: number, vals: ReadonlyMap<string, number>): (Buffer | number)[];
}

/** Launch every kernel in order on `stream`, grids sized for `vals` (profile: timed, then waited for). */
export function launchEach(device: Device, stream: Stream, b: BoundKernels, vals: ReadonlyMap<string, number>, profile: boolean): KernelProfile[] {
  const profiles: KernelProfile[] = [];
  const events: [Event, Event][] = [];
  try {
    for (let i = 0; i < b.kernels.length; i++) {
      const { grid, block } = b.gens[i]!.launch(vals);
      let ev: [Event, Event] | undefined;
      if (profile) {
        ev = [Event.create(device), Event.create(device)];
        events.push(ev);
        ev[0].record(stream);
      }
      if (grid > 0) b.compiled[i]!.launch(stream, { grid: [grid], block: [block], args: b.argsOf(i, vals) });
      if (ev) ev[1].record(stream);
    }
    if (profile) {
      stream.synchronize();
      b.kernels.forEach((k, i) => {
        const [e0, e1] = events[i]!;
        profiles.push({ entryPoint: k.entryPoint, source: k.source, device: k.device, numBuffers: k.bufferIndices.length, elapsedMs: Event.elapsed(e0, e1) });
      });
    }
  } finally {
    for (const [e0, e1] of events) {
      e0.dispose();
      e1.dispose();
    }
  }
  return profiles;
}

/**
 * The kernels as a Schedule: one Step per kernel with the byte ranges it reads and writes, grids
 * sized for the variables' maxima `maxVals` (kernels skip blocks past the current extent; kernels
 * with no work at the maxima are left out), arguments for the current values `vals`.
 */
export function asSchedule(b: BoundKernels, maxVals: ReadonlyMap<string, number>, vals: ReadonlyMap<string, number>, mem: (i: number) => Buffer): { schedule: Schedule; kernelOfStep: number[] } {
  const sched = new Schedule();
  const kernelOfStep: number[] = [];
  b.kernels.forEach((pk, i) => {
    const { grid, block } = b.gens[i]!.launch(maxVals);
    if (grid === 0) return;
    const bufs = pk.bufferIndices.map(mem);
    sched.add(
      Step.kernelArgs(b.compiled[i]!, {
        grid: [grid],
        block: [block],
        args: b.argsOf(i, vals),
        reads: bufs.slice(1),
        writes: [bufs[0]!],
        label: pk.entryPoint,
      }),
    );
    kernelOfStep.push(i);
  });
  return { schedule: sched, kernelOfStep };
}
