// What a plan's calls take: prepare, execute and run options; and run()'s arguments (inputs by
// position or by name, variable values, the mode), checked and copied before anything is queued.
import type { Device } from "../device";
import { describeGot, invalid, options, type OptionKeys } from "../errors";
import { ExecMode } from "../schedule";
import type { Stream } from "../stream";
import { hostArrayName, hostCopy, isHostArrayOf, type DefaultHostArray, type HostArray } from "./dtype";
import type { PlanBuffer } from "./memory";
import type { PreparedKernel } from "./prepare";
import type { ScheduleOptions } from "./scheduler";
import type { Variable } from "./variable";

// The keys each options argument may have (errors.ts `options` refuses any other).
const RUN_KEYS: OptionKeys<PlanRunOptions> = { vars: true, mode: true };

export interface PrepareOptions extends ScheduleOptions {
  /** Names of the outputs, in order, for ExecutionPlan.run by name (default output0, output1, …). */
  outputNames?: readonly string[];
  /**
   * The names of the inputs a run takes, in order, as the caller expects them: prepare checks that
   * they are the plan's inputNames (INVALID_VALUE listing the plan's own otherwise, such as weights
   * not marked constant), and literal names type run's inputs by name (`run({ X })` does not
   * compile where the input is `x`; variables then go in `{ vars }`).
   */
  inputNames?: readonly string[];
  /** Device to run on (default Device.default()). */
  device?: Device;
  /** Disable the memory planner: every intermediate gets its own allocation. */
  noMemoryPlanning?: boolean;
  /**
   * Data tensors (weights) whose values never change: uploaded once per device and shared by every
   * plan prepared with the same data (a model's plans hold one copy); not inputs of the plan (not in
   * inputNames, not given to run) and not weights setWeights can change (INVALID_VALUE). A tensor
   * made with `Tensor.from(data, shape, { constant: true })` is one in every plan without being
   * listed here.
   */
  constants?: readonly { readonly node: object }[];
  /**
   * Use the plan cache (default true): a program whose structure was prepared before (in this
   * process or an earlier one) skips scheduling, lowering and code generation.
   */
  planCache?: boolean;
}

export interface ExecuteOptions {
  /**
   * How to run. Default: the plan's kernels as one prebuilt command list on the plan's own stream,
   * submitted (and waited for) in one crossing; grids sized for the current variable values. With
   * a mode, the plan's kernels form a Schedule (one Step per kernel, with the byte ranges it reads
   * and writes) compiled once per mode and cached; Eager compiles, runs and drops it. Grids are sized for the variables' maxima so a compiled
   * schedule (or a captured graph) stays valid for every value: kernels skip the blocks past
   * the current extent, and a new value only updates the kernels' i32 arguments.
   */
  mode?: ExecMode;
  /**
   * Submit the command list on this stream instead (a stream of the plan's device; the wait is
   * Stream.synchronize). Ignored when `mode` is given.
   */
  stream?: Stream;
  /** Return after enqueueing, without waiting (default false: execute() waits). */
  async?: boolean;
  /**
   * @internal How a run without `mode` issues its kernels: "list" (the default: the plan's one
   * prebuilt command list, one crossing) or "each" (one launch call per kernel, the way before
   * command lists; kept for comparison).
   */
  launch?: "list" | "each";
}

export type PreparedOp =
  | { readonly kind: "kernel"; readonly kernel: PreparedKernel; readonly reads: readonly number[]; readonly writes: readonly number[] };

/**
 * What ExecutionPlan.run takes for one input: its elements in the natural typed array of the
 * input's dtype (dtype.ts HostArray: Float32Array, Int32Array, Float16Array or Uint16Array bits,
 * Uint16Array bfloat16 bits, Int8Array, Uint8Array, Uint8Array 0/1 for bool, BigInt64Array).
 */
export type RunInput = HostArray;
/**
 * What ExecutionPlan.run and runSync take by name: any input and variable names where the plan's
 * input names are not known to the types (`I` is string); where they are (prepare's literal
 * `inputNames`), those inputs only, each optional (a run may keep an input's prepared data).
 */
export type RunFeeds<I extends string> = string extends I ? Readonly<Record<string, RunInput | number>> : { readonly [K in I]?: RunInput | undefined };

/**
 * What ExecutionPlan.run gives back for one output: a fresh array of the output's dtype the caller
 * owns (its HostArray), typed as the float32 / int32 arrays (dtype.ts DefaultHostArray).
 */
export type RunOutput = DefaultHostArray;

export interface PlanRunOptions {
  /** Variable values for this run (unlisted variables take their prepare-time values). */
  vars?: Readonly<Record<string, number>> | undefined;
  /** How to run (default: the plan's prebuilt command list, submitted on its own stream). */
  mode?: ExecMode | undefined;
}

/** What runArgs needs of the plan. */
export interface RunPlan {
  readonly bufs: readonly PlanBuffer[];
  /** The run's inputs in order (constants are none of them): their names and buffer indices. */
  readonly inputNames: readonly string[];
  readonly inputs: readonly number[];
  readonly vars: ReadonlyMap<string, Variable>;
  /** Each input name's buffer index, -1 for a name several inputs share (inputIndex builds it). */
  readonly inputIndex: ReadonlyMap<string, number>;
  /** Names of the plan's constants, which a run cannot give. */
  readonly constantNames: ReadonlySet<string>;
}

/** RunPlan.inputIndex for inputs of these names and buffer indices. */
export function inputIndex(names: readonly string[], bufs: readonly number[]): Map<string, number> {
  const m = new Map<string, number>();
  names.forEach((n, i) => m.set(n, m.has(n) ? -1 : bufs[i]!));
  return m;
}

/** A copy of `data` for input buffer `b` (`data` itself unless `copy`), refused unless it is a typed array of the input's dtype and size. */
export function inputCopy(call: string, what: string, b: PlanBuffer, data: unknown, copy = true): RunInput {
  if (!isHostArrayOf(b.dtype, data)) invalid(call, `${what} must be a ${hostArrayName(b.dtype)} (the input is ${b.dtype}), got ${describeGot(data)}`);
  const a = data as HostArray;
  if (a.length !== b.elements) invalid(call, `${what} has ${a.length} elements, the input holds ${b.elements}`);
  return copy ? hostCopy(a) : (a as RunInput);
}

/** Check run()'s arguments and copy the inputs (unless not `copy`); throws GpuError before anything is queued. */
export function runArgs(
  call: string,
  feeds: unknown,
  opts: PlanRunOptions | undefined,
  plan: RunPlan,
  copy = true,
): { inputs: Map<number, RunInput>; vals: Map<string, number>; mode: ExecMode | undefined; byName: boolean } {
  const o = options(call, opts, RUN_KEYS);
  if (o.mode !== undefined && !(o.mode instanceof ExecMode)) invalid(call, `mode must be an ExecMode, got ${describeGot(o.mode)}`);
  const inputs = new Map<number, RunInput>();
  const vals = new Map<string, number>();
  const setVar = (name: string, v: unknown) => {
    const vr = plan.vars.get(name);
    if (!vr) invalid(call, `the plan has no variable ${name} (it has ${[...plan.vars.keys()].join(", ") || "none"})`);
    vals.set(name, vr.check(v, call));
  };
  const setInput = (i: number, what: string, data: unknown) => inputs.set(i, inputCopy(call, what, plan.bufs[i]!, data, copy));
  let byName = false;
  if (feeds === undefined || feeds === null) {
    if (feeds === null) invalid(call, "inputs must be an array or an object, got null");
  } else if (Array.isArray(feeds)) {
    if (feeds.length > plan.inputNames.length) invalid(call, `${feeds.length} inputs given, the plan has ${plan.inputNames.length}`);
    feeds.forEach((d, i) => {
      if (d !== undefined && d !== null) setInput(plan.inputs[i]!, `input ${i} (${plan.inputNames[i]})`, d);
    });
  } else if (typeof feeds === "object" && !ArrayBuffer.isView(feeds)) {
    byName = true;
    for (const [name, d] of Object.entries(feeds)) {
      if (plan.vars.has(name) && typeof d === "number") {
        setVar(name, d);
        continue;
      }
      const at = plan.inputIndex.get(name);
      if (at !== undefined && at >= 0) {
        setInput(at, `input ${JSON.stringify(name)}`, d);
        continue;
      }
      if (at === -1) invalid(call, `${plan.inputNames.filter((n) => n === name).length} inputs are named ${JSON.stringify(name)}; give them by position`);
      if (plan.constantNames.has(name)) invalid(call, `${JSON.stringify(name)} is one of the plan's constants, not an input: a run cannot change it (prepare without it as a constant to feed it)`);
      invalid(call, `no input or variable named ${JSON.stringify(name)} (inputs: ${plan.inputNames.join(", ") || "none"}; variables: ${[...plan.vars.keys()].join(", ") || "none"})`);
    }
  } else invalid(call, `inputs must be an array or an object, got ${describeGot(feeds)}`);
  if (o.vars !== undefined) {
    if (o.vars === null || typeof o.vars !== "object" || Array.isArray(o.vars)) invalid(call, `vars must be an object, got ${describeGot(o.vars)}`);
    for (const [name, v] of Object.entries(o.vars)) setVar(name, v);
  }
  return { inputs, vals, mode: o.mode, byName };
}

