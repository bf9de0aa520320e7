// Schedules: an ordered list of Steps (kernel launches, copies, memsets), each with the byte
// ranges it reads and writes, written once and run in any ExecMode:
//   Stream          every step issued on one stream, every run
//   Graph           captured on the first run, replayed after; changed scalars update the graph
//   Eager           one run, then the executable disposes itself
//   MultiStream(n)  steps spread over n streams by hazards on overlapping byte ranges
//                   (read-after-write, write-after-read, write-after-write), events only at
//                   cross-stream edges
// Every mode gives the results of running the steps one by one, in order.
import { describeGot, invalid, options, type OptionKeys } from "./errors";
import type { Device } from "./device";
import type { Buffer, FillType, FillOptionsFor } from "./buffer";
import { dependencies } from "./hazards";
import { INSPECT, plural } from "./inspect";
import type { Kernel, Signature } from "./kernel";
import { Step, type CopyStepOptions, type FillStepOptions, type KernelStepConfig } from "./step";
import { ExecMode, Executable, type RunOptions, type ScheduleCompileOptions } from "./executable";

// The keys each options argument may have (errors.ts `options` refuses any other).
const COMPILE_KEYS: OptionKeys<ScheduleCompileOptions> = { captureMode: true };
const RUN_KEYS: OptionKeys<RunOptions> = { inputs: true };

export { overlaps, planStreams, rangeOf, type ByteRange, type StreamPlan } from "./hazards";
export { Step, type KernelStepConfig, type CopyStepOptions, type FillStepOptions } from "./step";
export {
  ExecMode,
  Executable,
  type ExecKind,
  type ScheduleCompileOptions,
  type RunOptions,
  type ExecStats,
  type InputPair,
} from "./executable";

/** An ordered list of steps. Results of every ExecMode equal running them one by one. */
export class Schedule {
  #steps: Step[] = [];

  constructor(steps: Iterable<Step> = []) {
    if (steps === null || typeof steps !== "object" || typeof (steps as Iterable<Step>)[Symbol.iterator] !== "function")
      invalid("new Schedule", `steps must be an iterable of Steps, got ${describeGot(steps)}`);
    for (const s of steps) this.add(s);
  }

  add(...steps: Step[]): this {
    for (const s of steps) if (!(s instanceof Step)) invalid("Schedule.add", `expected a Step, got ${describeGot(s)}`);
    this.#steps.push(...steps);
    return this;
  }

  addKernel<S extends Signature>(kernel: Kernel<S>, cfg: KernelStepConfig<NoInfer<S>>): this {
    return this.add(Step.kernel(kernel, cfg, "Schedule.addKernel"));
  }

  addCopy(dst: Buffer, src: Buffer, opts?: CopyStepOptions): this {
    return this.add(Step.copy(dst, src, opts));
  }

  addFill<B extends Buffer, V extends number>(buffer: B, value: V, ...optsWithType: FillOptionsFor<B, V, FillStepOptions, FillStepOptions & { type: FillType }>): this;
  addFill(buffer: Buffer, value: number, opts?: FillStepOptions): this {
    return this.add(Step.fill(buffer, value, opts as FillStepOptions & { type: FillType })); // the type rule holds at run time (fillTypeOf)
  }

  get steps(): readonly Step[] {
    return this.#steps;
  }

  get length(): number {
    return this.#steps.length;
  }

  /** For each step, the earlier steps it has a hazard with (RAW, WAR, WAW on overlapping bytes), ascending. */
  dependencies(): number[][] {
    return dependencies(this.#steps);
  }

  /** Prepare the schedule to run on `device` in `mode`. */
  compile(device: Device, mode: ExecMode = ExecMode.Stream, opts: ScheduleCompileOptions = {}): Executable {
    opts = options("Schedule.compile", opts, COMPILE_KEYS);
    return new Executable(device, [...this.#steps], mode, opts);
  }

  /** "Schedule(3 steps: vadd, saxpy, copy)": its steps by label, in order. */
  toString(): string {
    const labels = this.#steps.map((s) => s.label);
    const shown = labels.length > 8 ? `${labels.slice(0, 8).join(", ")} and ${labels.length - 8} more` : labels.join(", ");
    return `Schedule(${plural(labels.length, "step")}${shown ? `: ${shown}` : ""})`;
  }

  [INSPECT](): string {
    return this.toString();
  }

  /** Compile in Eager mode, run once, and resolve when the run is done and everything is freed. */
  static async runEager(device: Device, steps: Schedule | Iterable<Step>, opts: RunOptions = {}): Promise<void> {
    opts = options("Schedule.runEager", opts, RUN_KEYS);
    const s = steps instanceof Schedule ? steps : new Schedule(steps);
    const exec = s.compile(device, ExecMode.Eager);
    exec.run(opts);
    await exec.done();
  }
}

