// ExecutionPlan: a tensor program scheduled, lowered, compiled and given its buffers once
// (prepare.ts), then executed many times: by default as one prebuilt command list (cmdlist.ts),
// one crossing per execute(); in an explicit mode as a compiled Schedule (issue.ts). The plan
// owns its buffers: inputs (uploaded at prepare; overwrite them through bufferMutById), outputs,
// and intermediates placed in one arena by a memory planner (memory.ts) so that intermediates
// whose lifetimes do not overlap share memory.
// It stays one class in one file (over 600 lines): the buffers, the run queue and the in-flight
// state are private fields that every way of executing (execute, executeAsync, run, runSync, the
// modes) reads and writes; the checks and helpers that need none of them live in the modules above.
import { hostArray, hostArrayName, hostCopy, hostView, type DType, type DefaultHostArray, type HostArray, type HostArrayOf } from "./dtype";
import { Device } from "../device";
import { describeGot, disposed, illegalState, invalid, options, type OptionKeys } from "../errors";
import type { Kernel } from "../kernel";
import { ExecMode, type Executable, type Schedule } from "../schedule";
import type { Buffer } from "../buffer";
import { Stream } from "../stream";
import { hostFnsPending } from "../hostfn";
import { CommandList } from "../commands";
import { pollUntil, settled } from "../poll";
import { afterStream } from "../wake";
import { RunSlot, slotLimit } from "./staging";
import { RunBatcher, type BatchOptions } from "./batcher";
import { backends, type BackendRecord } from "../backends";
import { nativeView } from "../../ffi/result";
import { INSPECT, bytesText, plural } from "../inspect";
import { inputNames, type HasNode, type LazyNode, type ValueShape } from "./ast";
import { PlanCommands } from "./cmdlist";
import type { GeneratedKernel } from "./codegen";
import { allocateIntermediates, readValue, releaseBuffer, valueBytes, type BufferLayout, type PlanBuffer } from "./memory";
import { kernelsOptimized, prepare, type CachedKernel, type PreparedKernel } from "./prepare";
import { inputCopy, inputIndex, runArgs, type RunFeeds, type ExecuteOptions, type RunPlan, type PlanRunOptions, type PrepareOptions, type PreparedOp, type RunInput, type RunOutput } from "./options";
import { Variable, dimValue, shapeStr } from "./variable";
import { asSchedule, launchEach, type BoundKernels, type KernelProfile } from "./issue";
import { expectDType, outputTargets, readOutputInto, type PlanRunSyncOptions } from "./io";

// The keys each options argument may have (errors.ts `options` refuses any other).
const PREPARE_KEYS: OptionKeys<PrepareOptions> = { fusion: true, outputNames: true, inputNames: true, device: true, noMemoryPlanning: true, constants: true, planCache: true };
const EXEC_KEYS: OptionKeys<ExecuteOptions> = { mode: true, stream: true, async: true, launch: true };
const BATCH_KEYS: OptionKeys<BatchOptions> = { variable: true, maxBatch: true, maxDelayMs: true, inputs: true };
const RUN_SYNC_KEYS: OptionKeys<PlanRunSyncOptions> = { vars: true, mode: true, outputs: true };

export { inputNames } from "./ast";
export { planCacheContext, tensorCompileStats } from "./cache";
export type { PlanBuffer } from "./memory";
export type { KernelProfile } from "./issue";
export { langOf, type CachedKernel, type PreparedKernel } from "./prepare";
export type { ExecuteOptions, PlanRunOptions, PrepareOptions, PreparedOp, RunFeeds, RunInput, RunOutput } from "./options";
export type { PlanRunSyncOptions } from "./io";
export { RunBatcher, type BatchOptions } from "./batcher";

/** Runs that lately took at most this long run inline where the backend computes on the host. */
const INLINE_MS = 0.5;
/** An inline turn runs queued runs for at most this long before yielding to the event loop. */
const TURN_MS = 2;
/** Inline runs this short run on the calling thread alone, without waking the backend's pool. */
const SERIAL_MS = 0.05;

/** A run() call waiting to be issued. */
export interface RunJob {
  inputs: Map<number, RunInput>;
  vals: Map<string, number>;
  mode: ExecMode | undefined;
  byName: boolean;
  resolve(v: RunOutput[] | Record<string, RunOutput>): void;
  reject(e: unknown): void;
}

/**
 * Where a run() meets the tracer (src/trace): `queued` when run() queues it, `begin`/`end` around
 * the synchronous issue of its work (the staged copies and list, an inline run, a run with a
 * mode). No-ops the tracer swaps while it records and puts back at stop, like the native table's
 * entries: no flag is checked.
 */
export const runHooks = {
  queued(_job: RunJob): void {},
  begin(_job: RunJob): void {},
  end(_job: RunJob): void {},
};

/**
 * A prepared program; `O` names its outputs (from literal `outputNames`), `I` its inputs (from
 * literal `inputNames`); `string` otherwise.
 */
export class ExecutionPlan<O extends string = string, I extends string = string> {
  readonly #device: Device;
  readonly #kernels: PreparedKernel[];
  readonly #compiled: Kernel[];
  readonly #gens: GeneratedKernel[];
  readonly #bufs: PlanBuffer[];
  readonly #mem: (Buffer | null)[];
  readonly #astToBuf = new Map<number, number>();
  readonly #outputs: number[];
  /** The outputs' shapes and dtypes (not their nodes: those reach every input's data). */
  readonly #outputNodes: ValueShape[];
  readonly #vars = new Map<string, Variable>();
  readonly #vals = new Map<string, number>();
  #arena: Buffer | null = null;
  readonly #arenaBytes: number;
  readonly #layout: BufferLayout;
  readonly #noPlanning: boolean;
  #released = false;
  #disposed = false;
  /** Prepare-time data of each input (buffers 0..n-1, constants among them), its name, and whether a run changed it. */
  readonly #inputData: HostArray[];
  readonly #inputNames: string[];
  readonly #inputChanged: boolean[];
  readonly #inputShapes: (readonly number[])[];
  readonly #outputNames: string[];
  /** What runArgs checks a run's feeds against. */
  readonly #runPlan: RunPlan;
  /** Per input: a constant (PrepareOptions.constants): shared with other plans, never written. */
  readonly #constant: boolean[];
  /** The buffer indices of the inputs a run takes, in inputNames order: every input but the constants. */
  readonly #runInputs: number[];
  /** Variable values at prepare time: what run() uses for variables it is not given. */
  readonly #defaultVals: Map<string, number>;
  /** run() calls not yet issued, in order (waiting for a slot, a mode run or an executeAsync). */
  readonly #jobs: RunJob[] = [];
  /** Runs issued to the stream and not yet finished; each holds a slot. */
  #running = 0;
  /** Staging slots not in use, and how many exist and may exist. */
  readonly #freeSlots: RunSlot[] = [];
  #slots = 0;
  #slotMax = 0;
  /** The copies of a run into and out of its slot (reused, emptied by each submit). */
  #io: CommandList | null = null;
  /** Resolved each time the run queue empties (asyncDispose waits on them). */
  #drainWaiters: (() => void)[] = [];
  /** A turn is booked to run queued runs on this thread (backends that compute on the host). */
  #turnBooked = false;
  /** How long a run took lately (ms; NaN before the first): short runs go inline on such backends. */
  #runMs = NaN;
  /** The execution in flight (executeAsync or run), if any: others refuse or wait for it. */
  #flight: Promise<unknown> | null = null;
  #flightCall = "";
  /** dispose() was called while an execution was in flight: release when it ends. */
  #releasePending = false;
  /** Compiled schedules by mode, and the variable values their arguments hold. */
  readonly #execs = new Map<string, { exec: Executable; steps: number[]; vals: string }>();
  /** The stream default executions run on (created on first use, freed with the buffers). */
  #stream: Stream | null = null;
  /** Every launch of the plan as one command list (built on first use, again after a reallocation). */
  readonly #list: PlanCommands;

  constructor(tensors: readonly HasNode[], opts: PrepareOptions = {}) {
    const call = "Tensor.prepare";
    if (!Array.isArray(tensors) || tensors.length === 0) invalid(call, "give at least one tensor");
    opts = options(call, opts, PREPARE_KEYS);
    for (const t of tensors)
      if (!t || typeof t !== "object" || !((t as { node?: unknown }).node instanceof Object)) invalid(call, `every item must be a Tensor, got ${describeGot(t)}`);
    if (opts.device !== undefined && !(opts.device instanceof Device)) invalid(call, `device must be a Device, got ${describeGot(opts.device)}`);
    this.#device = opts.device ?? Device.default();
    this.#noPlanning = opts.noMemoryPlanning ?? false;
    const outNames = opts.outputNames;
    if (outNames !== undefined) {
      if (!Array.isArray(outNames) || outNames.length !== tensors.length || outNames.some((x) => typeof x !== "string" || !x) || new Set(outNames).size !== outNames.length)
        invalid(call, `outputNames must be ${tensors.length} distinct non-empty strings, one per tensor`);
    }
    const outNodes = tensors.map((t) => t.node);
    let constantNodes: Set<LazyNode> | undefined;
    if (opts.constants !== undefined) {
      if (!Array.isArray(opts.constants)) invalid(call, `constants must be an array of Tensors, got ${describeGot(opts.constants)}`);
      constantNodes = new Set();
      for (const c of opts.constants as readonly unknown[]) {
        const node = (c as HasNode | null)?.node;
        if (!(node instanceof Object) || !("op" in node)) invalid(call, `constants must hold Tensors, got ${describeGot(c)}`);
        if (node.op !== "buffer") invalid(call, "a constant must be a tensor of data (Tensor.from, fromSafetensors, or realize() first)");
        constantNodes.add(node);
      }
    }
    const p = prepare(outNodes, this.#device, constantNodes ? { ...opts, constantNodes } : opts, call);
    const sched = p.sched;
    for (const [name, v] of sched.vars) {
      this.#vars.set(name, v);
      this.#vals.set(name, v.bound ? v.value : v.max);
    }
    this.#defaultVals = new Map(this.#vals);
    this.#inputData = p.inputData;
    // unnamed inputs are input0, input1, … by their place among the run's inputs; constants are none of them
    this.#runInputs = sched.inputs.flatMap((_, i) => (p.constant[i] ? [] : [i]));
    this.#inputNames = sched.inputs.map((n, i) => inputNames.get(n) ?? (p.constant[i] ? `constant${i}` : `input${this.#runInputs.indexOf(i)}`));
    this.#inputChanged = sched.inputs.map(() => false);
    this.#inputShapes = sched.inputs.map((n) => n.shape.map((d) => dimValue(d)));
    this.#outputNames = sched.outputs.map((_, i) => outNames?.[i] ?? `output${i}`);
    this.#constant = p.constant;
    // A constant's data is on the device and shared; the plan keeps no host copy of it, so the
    // caller's arrays (a checkpoint's weights) can be collected once the plans are made.
    for (let i = 0; i < this.#inputData.length; i++) if (p.constant[i]) this.#inputData[i] = hostArray(p.layout.bufs[i]!.dtype, 0);
    const runNames = this.#runInputs.map((i) => this.#inputNames[i]!);
    const want = opts.inputNames;
    if (want !== undefined) {
      if (!Array.isArray(want) || want.some((x) => typeof x !== "string")) invalid(call, `inputNames must be an array of strings, got ${describeGot(want)}`);
      if (want.length !== runNames.length || want.some((n, i) => n !== runNames[i])) {
        const consts = this.#inputNames.filter((_, i) => p.constant[i]);
        for (let i = 0; i < p.mem.length; i++) releaseBuffer(p.mem, i, p.constant); // nothing stays allocated
        p.arena?.dispose();
        invalid(
          call,
          `inputNames says [${want.join(", ")}], the plan's inputs are [${runNames.join(", ")}]${consts.length ? ` (constants: ${consts.join(", ")})` : ""}` +
            "; weights that never change can be made constant (Tensor.from(data, shape, { constant: true }) or prepare({ constants }))",
        );
      }
    }
    this.#runPlan = {
      bufs: p.layout.bufs,
      inputNames: runNames,
      inputs: this.#runInputs,
      vars: this.#vars,
      inputIndex: inputIndex(runNames, this.#runInputs),
      constantNames: new Set(this.#inputNames.filter((_, i) => p.constant[i])),
    };
    this.#bufs = p.layout.bufs;
    for (const [n, i] of p.layout.nodeToBuf) this.#astToBuf.set(n.id, i);
    this.#layout = { ...p.layout, nodeToBuf: new Map() }; // by id from here on (#astToBuf): the nodes hold data
    this.#arenaBytes = p.layout.arenaBytes;
    this.#outputNodes = sched.outputs.map((n) => ({ shape: n.shape, dtype: n.dtype }));
    this.#outputs = sched.outputs.map((n) => p.layout.nodeToBuf.get(n)!);
    this.#gens = p.gens;
    this.#compiled = p.compiled;
    this.#pollCompiles = (backends[this.#device.backend] as BackendRecord).pollCompiles;
    this.#kernels = p.kernels;
    this.#mem = p.mem;
    this.#arena = p.arena;
    this.#list = new PlanCommands(this.#device, this.#gens, this.#compiled, this.#kernels.map((k) => k.vars));
  }

  #allocIntermediates(): void {
    this.#arena = allocateIntermediates(this.#device, this.#layout, this.#mem, this.#noPlanning);
  }

  /** An index argument: a non-negative integer (out of range is the caller's undefined). */
  #index(call: string, what: string, i: unknown): void {
    if (typeof i !== "number" || !Number.isSafeInteger(i) || i < 0) invalid(call, `${what} must be a non-negative integer, got ${describeGot(i)}`);
  }

  /** ExecuteOptions: an object; its stream a Stream of the plan's device, its mode checked later. */
  #execOpts<T extends ExecuteOptions>(call: string, opts: T | undefined): T {
    const o = options(call, opts, EXEC_KEYS as OptionKeys<T>);
    if (o.stream !== undefined && !(o.stream instanceof Stream)) invalid(call, `stream must be a Stream, got ${describeGot(o.stream)}`);
    if (o.mode !== undefined && !(o.mode instanceof ExecMode)) invalid(call, `mode must be an ExecMode, got ${describeGot(o.mode)}`);
    if (o.launch !== undefined && o.launch !== "list" && o.launch !== "each") invalid(call, `launch must be "list" or "each", got ${describeGot(o.launch)}`);
    if (o.stream !== undefined && o.stream.device.state !== this.#device.state) invalid(call, `stream is of another device (${o.stream.device.spec}; the plan runs on ${this.#device.spec})`);
    return o;
  }

  /** Refuse while an execution of this plan is in flight: its inputs and outputs are in use. */
  #idle(call: string): void {
    if (this.#flight || this.#running > 0 || this.#jobs.length > 0)
      illegalState(
        call,
        `plan busy: ${this.#flight ? this.#flightCall : "ExecutionPlan.run"} is in flight. Concurrent callers use plan.run(inputs), which queues; ` +
          "execute/executeAsync never overlap on one plan",
      );
  }

  #live(call: string): void {
    if (this.#disposed || this.#releasePending) illegalState(call, "the plan was disposed");
    if (this.#released) illegalState(call, "the plan's buffers were released (releaseAllBuffers)");
    this.#pollCompiles?.(); // an optimized build finished: swapped in before this run
  }
  readonly #pollCompiles: (() => void) | undefined;

  // ---- inspection -------------------------------------------------------------------------------

  get device(): Device {
    return this.#device;
  }
  get numOutputs(): number {
    return this.#outputs.length;
  }
  /** Index in buffers() of the first output. */
  get outputBufferIdx(): number {
    return this.#outputs[0]!;
  }
  /** Bytes of device memory the plan holds: inputs, outputs and the intermediate arena. */
  get peakBytes(): number {
    let n = this.#noPlanning ? 0 : this.#arenaBytes;
    for (const b of this.#bufs) if (b.kind !== "intermediate" || this.#noPlanning) n += b.bytes;
    return n;
  }
  /** Bytes the intermediates would take without sharing. */
  get intermediateBytesUnplanned(): number {
    return this.#bufs.filter((b) => b.kind === "intermediate").reduce((p, b) => p + b.bytes, 0);
  }
  /** Bytes of the arena the intermediates share. */
  get intermediateBytes(): number {
    return this.#noPlanning ? this.intermediateBytesUnplanned : this.#arenaBytes;
  }
  /** Buffer descriptions, by index. */
  get bufferInfo(): readonly PlanBuffer[] {
    return this.#bufs;
  }
  /** Current variable values. */
  get varValues(): ReadonlyMap<string, number> {
    return this.#vals;
  }

  outputBuffer(): Buffer | undefined {
    return this.outputBufferAt(0);
  }
  outputBufferAt(position: number): Buffer | undefined {
    this.#index("ExecutionPlan.outputBufferAt", "position", position);
    this.#live("ExecutionPlan.outputBufferAt");
    const i = this.#outputs[position];
    return i === undefined ? undefined : this.#mem[i] ?? undefined;
  }
  outputBuffers(): Buffer[] {
    this.#live("ExecutionPlan.outputBuffers");
    return this.#outputs.map((i) => this.#mem[i]!);
  }
  /** The buffer holding AST node `astId` (an input, an output or a live intermediate). */
  buffer(astId: number): Buffer | undefined {
    this.#live("ExecutionPlan.buffer");
    const i = this.#astToBuf.get(astId);
    return i === undefined ? undefined : this.#mem[i] ?? undefined;
  }
  /**
   * The buffer of AST node `astId`, to write new input data into. A constant's is refused
   * (INVALID_VALUE): the plans prepared with it share it, and none expects it to change.
   */
  bufferMutById(astId: number): Buffer | undefined {
    const call = "ExecutionPlan.bufferMutById";
    this.#idle(call);
    const i = this.#astToBuf.get(astId);
    if (i !== undefined && this.#constant[i]) invalid(call, `node ${astId} is ${this.#inputNames[i]}, a constant of the plan (shared by the plans prepared with it): prepare without it as a constant to write it`);
    return this.buffer(astId);
  }
  buffers(): Buffer[] {
    this.#live("ExecutionPlan.buffers");
    return this.#mem.filter((b): b is Buffer => b !== null);
  }
  bufferAt(index: number): Buffer | undefined {
    this.#index("ExecutionPlan.bufferAt", "index", index);
    this.#live("ExecutionPlan.bufferAt");
    return this.#mem[index] ?? undefined;
  }
  astToBufferMap(): ReadonlyMap<number, number> {
    return this.#astToBuf;
  }
  preparedKernels(): readonly PreparedKernel[] {
    return this.#kernels;
  }
  preparedOps(): readonly PreparedOp[] {
    return this.#kernels.map((k) => ({ kind: "kernel" as const, kernel: k, reads: k.bufferIndices.slice(1), writes: [k.bufferIndices[0]!] }));
  }
  /**
   * Settles once every kernel of the plan runs its optimized build. On the CPU a plan whose
   * kernels were not compiled before starts on a quick build (ready in a tenth of the time) while
   * the optimized one compiles in the background; the two give the same bits, so this only tells
   * when runs reach full speed (a benchmark waits for it). Rejects with the COMPILE error where
   * the optimized build failed (the plan goes on with the quick one).
   */
  optimized(): Promise<void> {
    return kernelsOptimized(this.#compiled);
  }
  kernels(): readonly CachedKernel[] {
    return this.#kernels.map((k) => ({ entryPoint: k.entryPoint, source: k.source, lang: k.lang, device: k.device }));
  }

  // ---- execution ----------------------------------------------------------------------------------

  #ensureBuffers(call: string): void {
    this.#live(call);
    const first = this.#layout.firstIntermediate;
    if (first >= 0 && this.#mem[first] === null) this.#allocIntermediates();
  }

  /** Launch every kernel on `stream`, one call each (profile: timed by a pair of events each). */
  #launchAll(stream: Stream, profile: boolean): KernelProfile[] {
    return launchEach(this.#device, stream, this.#bound(), this.#vals, profile);
  }

  /** The plan's kernels with their compiled forms and arguments. */
  #bound(): BoundKernels {
    return { kernels: this.#kernels, gens: this.#gens, compiled: this.#compiled, argsOf: (i, vals) => this.#argsOf(i, vals) };
  }

  /** The variable values as a string, to know when compiled schedules need new arguments. */
  #valsKey(): string {
    if (this.#vals.size === 0) return "";
    let k = "";
    for (const v of this.#vals.values()) k += `${v},`;
    return k;
  }

  #argsOf(i: number, vals: ReadonlyMap<string, number> = this.#vals): (Buffer | number)[] {
    const pk = this.#kernels[i]!;
    const args: (Buffer | number)[] = pk.bufferIndices.map((b) => this.#mem[b]!);
    for (const v of pk.vars) args.push(vals.get(v)!);
    return args;
  }

  /** The plan as a Schedule: one Step per kernel (kernels with no work at the maxima are left out). */
  schedule(): { schedule: Schedule; kernelOfStep: number[] } {
    this.#ensureBuffers("ExecutionPlan.schedule");
    return asSchedule(this.#bound(), new Map([...this.#vars].map(([k, v]) => [k, v.max])), this.#vals, (b) => this.#mem[b]!);
  }

  #dropExecs(): void {
    for (const e of this.#execs.values()) e.exec.dispose();
    this.#execs.clear();
  }

  /** The executable for `mode` with its arguments in step with the variable values. */
  #execFor(call: string, mode: ExecMode): Executable {
    if (!(mode instanceof ExecMode)) invalid(call, `mode must be an ExecMode, got ${describeGot(mode)}`);
    if (mode.kind === "Eager") return this.schedule().schedule.compile(this.#device, mode);
    const key = mode.toString();
    let e = this.#execs.get(key);
    if (!e) {
      const { schedule, kernelOfStep } = this.schedule();
      e = { exec: schedule.compile(this.#device, mode), steps: kernelOfStep, vals: this.#valsKey() };
      this.#execs.set(key, e);
    }
    const vk = this.#valsKey();
    if (e.vals !== vk) {
      const ent = e;
      ent.steps.forEach((ki, si) => {
        if (this.#kernels[ki]!.vars.length) ent.exec.setArgs(si, this.#argsOf(ki));
      });
      ent.vals = vk;
    }
    return e.exec;
  }

  // ---- the command list: every launch in one submit ----------------------------------------------

  /** The stream default executions run on (the plan's own; nothing else queues work on it). */
  #ownStream(): Stream {
    return (this.#stream ??= this.#device.createStream({ nonBlocking: true }));
  }

  /**
   * Submit the command list on `stream` (the plan's own unless given). With `wait`, on the plan's
   * own stream and no TypeScript host function pending anywhere, submit and wait are one crossing;
   * otherwise the wait is Stream.synchronize (which runs pending host functions while it waits, and
   * reports their failures).
   */
  #submit(call: string, stream: Stream | undefined, wait: boolean, serial = false): Stream {
    if (!this.#device.state.open) disposed(call, "device of this plan");
    const list = this.#list.get(call, this.#vals, this.#valsKey(), (i) => this.#argsOf(i));
    const s = stream ?? this.#ownStream();
    // The list checks that what it uses is still there (buffers, modules: GpuError naming `call`);
    // a refusal of the shim is the list's CommandError, naming the command at fault.
    if (wait && !stream && hostFnsPending() === 0) {
      list.submit(s, { keep: true, wait: true, serial }, call);
      return s;
    }
    list.submit(s, { keep: true }, call);
    if (wait) s.synchronize();
    return s;
  }

  /** Whether a run without `mode` goes kernel by kernel rather than through the command list. */
  #eachKernel(opts: ExecuteOptions): boolean {
    // Work issued into a capture must be kept alive by the graph: the launch path notes it.
    return opts.launch === "each" || (opts.stream !== undefined && this.#device.state.captures > 0);
  }

  /**
   * Run every kernel in order and wait for them (opts.async: only enqueue). Without `mode`, the
   * whole plan is one prebuilt command list: one crossing submits it and waits for it.
   */
  execute(opts: ExecuteOptions = {}): void {
    const call = "ExecutionPlan.execute";
    opts = this.#execOpts(call, opts);
    this.#ensureBuffers(call);
    this.#idle(call);
    if (opts.mode === undefined) {
      if (this.#eachKernel(opts)) {
        const s = opts.stream ?? this.#ownStream();
        this.#launchAll(s, false);
        if (!opts.async) s.synchronize();
      } else this.#submit(call, opts.stream, !opts.async);
      return;
    }
    const exec = this.#execFor(call, opts.mode);
    exec.run();
    if (!opts.async) exec.synchronize();
  }

  /** execute() and resolve when done, without blocking the event loop. */
  async executeAsync(opts: Omit<ExecuteOptions, "async"> = {}): Promise<void> {
    const call = "ExecutionPlan.executeAsync";
    opts = this.#execOpts(call, opts);
    this.#ensureBuffers(call);
    this.#idle(call);
    let done: Promise<void>;
    if (opts.mode === undefined) {
      let s: Stream;
      if (this.#eachKernel(opts)) this.#launchAll((s = opts.stream ?? this.#ownStream()), false);
      else s = this.#submit(call, opts.stream, false);
      done = s.done();
    } else {
      const exec = this.#execFor(call, opts.mode);
      exec.run();
      done = exec.done();
    }
    await this.#inFlight(call, done);
  }

  /** Mark the plan busy until `done` settles; a dispose() meanwhile releases afterwards. */
  async #inFlight<T>(call: string, done: Promise<T>): Promise<T> {
    this.#flight = done;
    this.#flightCall = call;
    try {
      return await done;
    } finally {
      this.#flight = null;
      if (this.#jobs.length) this.#pump();
      else this.#maybeDrained();
    }
  }

  /**
   * The names of the inputs a run takes, in the order run() takes them by position: a name given
   * with `Tensor.from(data, shape, { name })` (or a safetensors key), else input0, input1, … by
   * place. Constants (PrepareOptions.constants, `Tensor.from(…, { constant: true })`, random
   * sources computed once at prepare) are none of them: their data is the plan's own.
   */
  get inputNames(): readonly string[] {
    return this.#runInputs.map((i) => this.#inputNames[i]!);
  }
  get outputNames(): readonly string[] {
    return [...this.#outputNames];
  }

  /**
   * Run the plan on these inputs and resolve with its outputs, in the manner of onnxruntime's
   * session.run: inputs by position (an array, one TypedArray per input in inputNames order)
   * or by name (an object; a number under a variable's name sets that variable), outputs the
   * same way (an array, or an object keyed by outputNames). Inputs are copied when run() is
   * called; outputs are fresh arrays the caller owns. Inputs not given hold the data the plan
   * was prepared with, variables not given their prepare-time values.
   *
   * Safe under any number of concurrent callers: runs of one plan go through its own FIFO
   * queue, one at a time, each writing its inputs, executing and reading its outputs before
   * the next begins. (execute/executeAsync refuse with "plan busy" while a run is in flight.)
   */
  run(feeds?: readonly RunInput[], opts?: PlanRunOptions): Promise<RunOutput[]>;
  run(feeds: RunFeeds<I>, opts?: PlanRunOptions): Promise<Record<O, RunOutput>>;
  run(feeds?: readonly RunInput[] | RunFeeds<I> | Readonly<Record<string, RunInput | number>>, opts?: PlanRunOptions): Promise<RunOutput[] | Record<string, RunOutput>> {
    const call = "ExecutionPlan.run";
    try {
      this.#live(call);
      const { inputs, vals, mode, byName } = runArgs(call, feeds, opts, this.#runPlan);
      return new Promise((resolve, reject) => {
        const job: RunJob = { inputs, vals, mode, byName, resolve, reject };
        runHooks.queued(job);
        this.#jobs.push(job);
        this.#pump();
      });
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Merge concurrent requests into runs of this plan (dynamic batching): the plan is prepared over
   * a batch Variable (`opts.variable`), the leading dimension of its batched inputs (at its
   * maximum: the rows a run may hold) and of every output. `batcher.run({ x })` takes a request's
   * rows and resolves with its rows of each output. Each row's result must depend on that row's
   * inputs only (a per-row model: an MLP, a per-row softmax); a plan that mixes rows (a norm over
   * the batch) gives requests each other's data. See RunBatcher.
   */
  batched(opts: BatchOptions): RunBatcher {
    const call = "ExecutionPlan.batched";
    this.#live(call);
    const o = options(call, opts, BATCH_KEYS);
    if (typeof o.variable !== "string") invalid(call, `variable must be the name of the plan's batch Variable, got ${describeGot(o.variable)}`);
    const v = this.#vars.get(o.variable);
    if (!v) invalid(call, `the plan has no variable ${o.variable} (it has ${[...this.#vars.keys()].join(", ") || "none"})`);
    const outputs = this.#outputNodes.map((n, j) => {
      const name = this.#outputNames[j]!;
      const [lead, ...rest] = n.shape;
      if (!(lead instanceof Variable) || lead.name !== v.name)
        invalid(call, `output ${JSON.stringify(name)} has shape ${shapeStr(n.shape)}: its leading dimension must be ${v.name}`);
      if (rest.some((d) => typeof d !== "number")) invalid(call, `output ${JSON.stringify(name)} has shape ${shapeStr(n.shape)}: only its leading dimension may vary`);
      return { name, rowElements: (rest as number[]).reduce((p, q) => p * q, 1) };
    });
    return new RunBatcher(
      {
        variable: v.name,
        min: v.min,
        max: v.max,
        inputs: this.#runInputs.map((i) => ({ name: this.#inputNames[i]!, dtype: this.#bufs[i]!.dtype, shape: this.#inputShapes[i]! })),
        outputs,
        run: (feeds) => (this as ExecutionPlan).run(feeds),
      },
      o,
    );
  }

  // ---- the run queue: every queued run that has a slot is issued at once -------------------------

  /**
   * Issue queued runs in order while they can go: a run without `mode` needs a free staging slot
   * (its inputs are staged, and its copies in, the plan's command list and its copies out are
   * queued on the plan's stream behind the runs before it); a run with `mode` waits until nothing
   * else is in flight; an executeAsync in flight goes first. Called by run() and whenever a run
   * finishes, so a turn of the event loop issues every run that was queued during it.
   */
  #pump(): void {
    const jobs = this.#jobs;
    while (jobs.length > 0) {
      if (this.#disposed || this.#releasePending || this.#released) {
        const why = this.#released && !this.#disposed && !this.#releasePending ? "the plan's buffers were released (releaseAllBuffers)" : "the plan was disposed";
        for (const j of jobs.splice(0)) {
          try {
            illegalState("ExecutionPlan.run", why);
          } catch (e) {
            j.reject(e);
          }
        }
        break;
      }
      if (this.#flight) return; // #inFlight pumps when it settles
      const job = jobs[0]!;
      if (job.mode !== undefined) {
        if (this.#running > 0) return; // issued when the pipeline has drained
        jobs.shift();
        this.#runMode(job);
        return; // #flight is set: the next pump waits for it
      }
      if (this.#inline()) {
        // short runs on a host backend: inline once the runs handed to the stream have finished
        if (this.#running === 0) this.#bookTurn();
        return;
      }
      const slot = this.#takeSlot(job);
      if (!slot) return; // a finishing run frees one and pumps again
      jobs.shift();
      this.#issue(job, slot);
    }
    this.#maybeDrained();
  }

  /**
   * Whether runs go inline: the backend computes on the host (the CPU), no host function waits to
   * be serviced, and runs have lately been short (INLINE_MS), so a turn of the event loop is not
   * held long. The first run goes to the stream, which times it (a pair of events).
   */
  #inline(): boolean {
    return backends[this.#device.backend].computesOnHost && this.#runMs <= INLINE_MS && hostFnsPending() === 0;
  }

  /** Run the queued runs in the next turn (setImmediate, as onnxruntime-node's session.run does). */
  #bookTurn(): void {
    if (this.#turnBooked) return;
    this.#turnBooked = true;
    setImmediate(() => {
      this.#turnBooked = false;
      this.#runInline();
    });
  }

  /**
   * Run the runs queued before this turn began, one after another on this thread: inputs written
   * into the plan's buffers, the command list submitted and waited for in one crossing (the
   * calling thread computes with the backend's pool), outputs read. Runs queued meanwhile (a
   * caller's next run) wait for the next turn, and a turn stops after TURN_MS, so other work of
   * the event loop (I/O, timers) gets its turns.
   */
  #runInline(): void {
    const call = "ExecutionPlan.run";
    const start = performance.now();
    let n = this.#jobs.length;
    while (n-- > 0 && this.#jobs.length > 0) {
      const job = this.#jobs[0]!;
      if (job.mode !== undefined || this.#flight || this.#disposed || this.#releasePending || this.#released || this.#running > 0 || !this.#inline()) break;
      this.#jobs.shift();
      let result: RunOutput[] | Record<string, RunOutput>;
      runHooks.begin(job);
      try {
        result = this.#outputsOf(job.byName, this.#runHere(call, job.inputs, job.vals, undefined));
      } catch (e) {
        job.reject(e);
        continue;
      } finally {
        runHooks.end(job);
      }
      job.resolve(result);
      if (performance.now() - start > TURN_MS) break;
    }
    this.#pump();
  }

  /**
   * Note how long a run's device work took: the median of the last five, so one slow run (the OS
   * took the core away) does not decide alone. Runs of at most SERIAL_MS go serial (the calling
   * thread alone: waking the pool costs more than it saves), and back to the pool above twice that.
   */
  #timeRun(ms: number): void {
    const t = this.#runTimes;
    if (this.#runTimeAt === 0) t.fill(ms); // the first run stands for all five until others come
    t[this.#runTimeAt++ % 5] = ms;
    // the median of five: an insertion sort into scratch (no allocation on this path)
    const s = this.#runSorted;
    for (let i = 0; i < 5; i++) {
      let j = i;
      const v = t[i]!;
      while (j > 0 && s[j - 1]! > v) {
        s[j] = s[j - 1]!;
        j--;
      }
      s[j] = v;
    }
    this.#runMs = s[2]!;
    if (this.#runMs <= SERIAL_MS) this.#serial = true;
    else if (this.#runMs > 2 * SERIAL_MS) this.#serial = false;
  }
  #serial = false;
  readonly #runTimes = new Float64Array(5);
  readonly #runSorted = new Float64Array(5);
  #runTimeAt = 0;

  /** The outputs as run() gives them: an array by position, or an object by output name. */
  #outputsOf(byName: boolean, outs: RunOutput[]): RunOutput[] | Record<string, RunOutput> {
    if (!byName) return outs;
    const rec: Record<string, RunOutput> = {};
    const names = this.#outputNames;
    for (let j = 0; j < names.length; j++) rec[names[j]!] = outs[j]!;
    return rec;
  }

  #maybeDrained(): void {
    if (this.#jobs.length > 0 || this.#running > 0 || this.#flight) return;
    if (this.#releasePending) {
      this.#releasePending = false;
      this.releaseAllBuffers();
      this.#disposed = true;
    }
    const w = this.#drainWaiters;
    if (w.length) {
      this.#drainWaiters = [];
      for (const r of w) r();
    }
  }

  /** A free staging slot (made on demand, up to the plan's limit), or null. A failure rejects `job`. */
  #takeSlot(job: RunJob): RunSlot | null {
    const free = this.#freeSlots.pop();
    if (free) return free;
    const inBytes = this.#inputData.map((_, i) => (this.#constant[i] ? 0 : this.#bufs[i]!.bytes)); // a run never stages a constant
    const outBytes = this.#outputs.map((b) => this.#bufs[b]!.bytes);
    if (this.#slotMax === 0) this.#slotMax = slotLimit(inBytes, outBytes);
    if (this.#slots >= this.#slotMax) return null;
    try {
      const slot = new RunSlot(this.#device, inBytes, outBytes, backends[this.#device.backend].computesOnHost);
      this.#slots++;
      return slot;
    } catch (e) {
      if (this.#slots > 0) return null; // out of pinned memory with runs in flight: wait for one
      this.#jobs.shift();
      job.reject(e);
      return this.#jobs.length ? this.#takeSlot(this.#jobs[0]!) : null;
    }
  }

  #dropSlots(): void {
    for (const s of this.#freeSlots.splice(0)) s.dispose();
    this.#slots = 0;
    this.#io?.reset();
  }

  /**
   * Stage `job`'s inputs in `slot` and queue the run on the plan's stream: copies in (the inputs
   * given, and the prepared data of inputs an earlier run overwrote), the plan's command list at
   * the run's variable values, copies out, the slot's event; then a host function wakes the event
   * loop when the stream gets there (wake.ts; polling the event where that is unavailable).
   */
  #issue(job: RunJob, slot: RunSlot): void {
    const call = "ExecutionPlan.run";
    let vals: ReadonlyMap<string, number>;
    let outBytes: number[];
    runHooks.begin(job);
    try {
      this.#ensureBuffers(call);
      if (!this.#device.state.open) disposed(call, "device of this plan");
      const s = this.#ownStream();
      const io = (this.#io ??= new CommandList(this.#device, {}, call));
      io.reset();
      if (slot.start) io.eventRecord(slot.start, call);
      this.#setInputs(job.inputs, job.vals, (i, d) => {
        if (d.byteLength === 0) return;
        slot.stage(i, d);
        io.copyHtoD(this.#mem[i]!, slot.inHost!, { srcOffset: slot.inAt[i]!, bytes: d.byteLength }, call);
      });
      vals = this.#vals.size === 0 ? this.#vals : new Map(this.#vals);
      if (io.counts.commands > 0) io.submit(s, {}, call);
      this.#list.get(call, this.#vals, this.#valsKey(), (i) => this.#argsOf(i)).submit(s, { keep: true }, call);
      outBytes = this.#outputNodes.map((node) => valueBytes(node, vals));
      this.#outputs.forEach((b, j) => {
        if (outBytes[j]! > 0) io.copyDtoH(slot.outHost!, this.#mem[b]!, { dstOffset: slot.outAt[j]!, bytes: outBytes[j]! }, call);
      });
      io.eventRecord(slot.done, call);
      io.submit(s, {}, call);
    } catch (e) {
      this.#freeSlots.push(slot);
      job.reject(e);
      return;
    } finally {
      runHooks.end(job);
    }
    this.#running++;
    const api = this.#device.state.api;
    const ev = slot.done;
    const evh = ev.handle;
    const finished = afterStream(api, this.#stream!.handle, () => settled(() => api.event_query(evh))) ?? pollUntil(() => ev.query());
    // The slot and the plan are free again before the caller's continuation runs: a caller that
    // awaited its run may execute() at once.
    const settle = (ok: boolean, v: unknown) => {
      this.#running--;
      this.#freeSlots.push(slot);
      if (ok) job.resolve(v as RunOutput[]);
      else job.reject(v);
      this.#pump();
    };
    finished.then(
      () => {
        let result: RunOutput[] | Record<string, RunOutput>;
        try {
          ev.query(); // a failure of the run's work (CUDA's sticky errors) rejects this run
          const ms = slot.elapsedMs();
          if (!Number.isNaN(ms)) this.#timeRun(ms);
          const nodes = this.#outputNodes;
          result = this.#outputsOf(
            job.byName,
            nodes.map((node, j) => readValue(call, slot.output(j, outBytes[j]!), node, vals) as RunOutput),
          );
        } catch (e) {
          return settle(false, e);
        }
        settle(true, result);
      },
      (e: unknown) => settle(false, e),
    );
  }

  /** A run with an explicit mode: alone on the plan, the way execute() runs that mode. */
  #runMode(job: RunJob): void {
    const call = "ExecutionPlan.run";
    let done: Promise<RunOutput[]>;
    runHooks.begin(job);
    try {
      this.#ensureBuffers(call);
      this.#writeInputs(job.inputs, job.vals);
      const exec = this.#execFor(call, job.mode!);
      exec.run();
      done = exec.done().then(() => this.#outputNames.map((_, i) => this.#readOutputNow(i) as RunOutput));
    } catch (e) {
      job.reject(e);
      queueMicrotask(() => this.#pump());
      return;
    } finally {
      runHooks.end(job);
    }
    this.#inFlight(call, done).then(
      (outs) => job.resolve(this.#outputsOf(job.byName, outs)),
      (e: unknown) => job.reject(e),
    );
  }

  /**
   * New values for named inputs (the weights), without preparing again: each key an input name
   * (inputNames; a tensor from Tensor.fromSafetensors is named by its key), each value a Tensor of
   * the input's shape and dtype (realized first when it is not data) or the typed array of the
   * input's dtype (dtype.ts HostArray: Float32Array, Int32Array, Float16Array, Uint16Array, Int8Array,
   * Uint8Array, BigInt64Array) and element count. Every entry is checked before anything is written; a
   * name the plan lacks, a name shared by several inputs, or a shape / dtype / length mismatch is
   * INVALID_VALUE. The values are copied and stay the plan's inputs for every later execute and
   * run (a run given other data for an input overrides it for that run only). Refused while an
   * execution is in flight.
   */
  setWeights(weights: Readonly<Record<string, HasNode | RunInput>>): void {
    const call = "ExecutionPlan.setWeights";
    this.#live(call);
    this.#idle(call);
    if (weights === null || typeof weights !== "object" || Array.isArray(weights) || ArrayBuffer.isView(weights))
      invalid(call, `weights must be an object of Tensors or typed arrays by input name, got ${describeGot(weights)}`);
    const writes: [number, RunInput][] = [];
    for (const [name, w] of Object.entries(weights)) {
      const at = this.#inputNames.flatMap((n, i) => (n === name ? [i] : []));
      if (at.length === 0) invalid(call, `the plan has no input named ${JSON.stringify(name)} (inputs: ${this.inputNames.join(", ") || "none"})`);
      if (at.length > 1) invalid(call, `${at.length} inputs are named ${JSON.stringify(name)}`);
      const i = at[0]!;
      if (this.#constant[i]) invalid(call, `${JSON.stringify(name)} was prepared as a constant (shared with other plans): prepare again to change it`);
      const b = this.#bufs[i]!;
      const shape = this.#inputShapes[i]!;
      let data: RunInput;
      if (ArrayBuffer.isView(w)) data = inputCopy(call, JSON.stringify(name), b, w);
      else if (w && typeof w === "object" && (w as HasNode).node instanceof Object && "dtype" in (w as object)) {
        const node = (w as HasNode).node;
        if (node.dtype !== b.dtype) invalid(call, `${JSON.stringify(name)} is ${node.dtype}, the input is ${b.dtype}`);
        if (node.shape.length !== shape.length || node.shape.some((d, k) => d !== shape[k]))
          invalid(call, `${JSON.stringify(name)} has shape ${shapeStr(node.shape)}, the input has ${shapeStr(shape)}`);
        if (node.op === "buffer") data = hostCopy((node.arg as { data: RunInput }).data);
        else {
          const t = w as HasNode & { toArray(o: PrepareOptions): RunInput };
          if (typeof t.toArray !== "function") invalid(call, `${JSON.stringify(name)} is not a Tensor`);
          data = t.toArray({ device: this.#device });
        }
      } else invalid(call, `${JSON.stringify(name)} must be a Tensor or a ${hostArrayName(b.dtype)}, got ${describeGot(w)}`);
      writes.push([i, data]);
    }
    for (const [i, data] of writes) {
      this.#inputData[i] = data;
      this.#mem[i]!.write(data);
      this.#inputChanged[i] = false;
    }
  }

  /**
   * run() without the promise and the queue: write the inputs, run the plan and wait for it, read
   * the outputs, all before returning. Without `mode` the plan's command list is submitted and
   * waited for in one crossing (on the CPU backend the calling thread runs the kernels with the
   * pool, rather than waiting for the stream's worker). Inputs and variables as run() takes them;
   * inputs are written straight from the caller's arrays (no copy). Outputs go into
   * `opts.outputs` where given (by position or name: each of its output's dtype and element
   * count), else into fresh arrays. Everything is checked before anything is written. Refused
   * with "plan busy" while an execution or a run is in flight.
   */
  runSync(feeds?: readonly RunInput[], opts?: PlanRunSyncOptions): RunOutput[];
  runSync(feeds: RunFeeds<I>, opts?: PlanRunSyncOptions): Record<O, RunOutput>;
  runSync(feeds?: readonly RunInput[] | RunFeeds<I> | Readonly<Record<string, RunInput | number>>, opts?: PlanRunSyncOptions): RunOutput[] | Record<string, RunOutput> {
    const call = "ExecutionPlan.runSync";
    this.#live(call);
    this.#idle(call);
    const o = options(call, opts, RUN_SYNC_KEYS);
    const { inputs, vals, mode, byName } = runArgs(call, feeds, { vars: o.vars, mode: o.mode }, this.#runPlan, false);
    const runVals = new Map(this.#defaultVals);
    for (const [name, v] of vals) runVals.set(name, v);
    const into = outputTargets(call, o.outputs, this.#outputNames, this.#outputNodes, runVals);
    return this.#outputsOf(byName, this.#runHere(call, inputs, vals, mode, into));
  }

  /**
   * Write the inputs, run and wait, read the outputs (into `into[i]` where given): runSync's body
   * and an inline run's. Only while nothing of the plan is in flight. Times the device's part
   * (no collection runs inside a native call) for the inline and serial decisions.
   */
  #runHere(call: string, inputs: ReadonlyMap<number, RunInput>, vals: ReadonlyMap<string, number>, mode: ExecMode | undefined, into?: readonly (RunOutput | undefined)[]): RunOutput[] {
    this.#ensureBuffers(call);
    this.#writeInputs(inputs, vals);
    if (mode === undefined) {
      const t0 = performance.now();
      this.#submit(call, undefined, true, this.#serial);
      this.#timeRun(performance.now() - t0);
    } else {
      const exec = this.#execFor(call, mode);
      exec.run();
      exec.synchronize();
    }
    const outs: RunOutput[] = [];
    for (let i = 0; i < this.#outputs.length; i++) {
      const b = this.#outputs[i]!;
      outs.push(readOutputInto(call, this.#hostView(b) ?? this.#mem[b]!, this.#outputNodes[i]!, this.#vals, into?.[i]));
    }
    return outs;
  }

  /**
   * Where device memory is host memory (a backend that computes on the host): a view of buffer
   * `i` (an input or an output), so runs write and read it without a crossing. Used only while
   * nothing of the plan is in flight; dropped with the buffers. Null elsewhere.
   */
  #hostView(i: number): Uint8Array | null {
    if (this.#views === undefined) this.#views = backends[this.#device.backend].computesOnHost ? [] : null;
    if (this.#views === null) return null;
    const bytes = this.#bufs[i]!.bytes;
    if (bytes === 0) return null;
    return (this.#views[i] ??= new Uint8Array(nativeView(this.#mem[i]!.address, bytes)));
  }
  #views: (Uint8Array | undefined)[] | null | undefined;

  /**
   * A run's inputs and variables: `write(i, data)` for each input the run gives and each an earlier
   * run overwrote (its prepared data back), in the order they reach the device; then the run's
   * variable values (unlisted ones at their prepare-time values).
   */
  #setInputs(inputs: ReadonlyMap<number, RunInput>, vals: ReadonlyMap<string, number>, write: (i: number, d: RunInput) => void): void {
    for (let i = 0; i < this.#inputData.length; i++) {
      const given = inputs.get(i);
      const d = given ?? (this.#inputChanged[i] ? this.#inputData[i]! : null);
      if (!d) continue;
      write(i, d);
      this.#inputChanged[i] = given !== undefined;
    }
    for (const [name, v] of this.#defaultVals) this.#vals.set(name, vals.get(name) ?? v);
  }

  /** Write a run's inputs into the plan's buffers now (nothing of the plan in flight), and set its variable values. */
  #writeInputs(inputs: ReadonlyMap<number, RunInput>, vals: ReadonlyMap<string, number>): void {
    this.#setInputs(inputs, vals, (i, d) => {
      const v = this.#hostView(i);
      // a view of the buffer's own type: set() copies without asking d for its .buffer
      if (v && d.byteLength <= v.byteLength) (hostView(this.#bufs[i]!.dtype, v.buffer as ArrayBuffer, v.byteOffset, d.length) as Float32Array).set(d as Float32Array);
      else this.#mem[i]!.write(d);
    });
  }

  /** Run with a timing pair of events around each kernel; one KernelProfile per kernel. */
  executeProfiled(opts: Omit<ExecuteOptions, "async"> = {}): KernelProfile[] {
    opts = this.#execOpts("ExecutionPlan.executeProfiled", opts);
    this.#ensureBuffers("ExecutionPlan.executeProfiled");
    this.#idle("ExecutionPlan.executeProfiled");
    return this.#launchAll(opts.stream ?? this.#device.defaultStream, true);
  }

  /** Check and apply variable values; throws GpuError before changing anything. */
  #setVars(call: string, vals: Readonly<Record<string, number>> | readonly (readonly [string, number])[]): void {
    if (vals === null || typeof vals !== "object") invalid(call, `variable values must be an object or [name, value] pairs, got ${describeGot(vals)}`);
    const entries: [string, number][] = [];
    if (Array.isArray(vals)) {
      vals.forEach((pair, i) => {
        if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== "string")
          invalid(call, `variable value ${i} must be a [name, value] pair, got ${describeGot(pair)}`);
        entries.push([pair[0], pair[1]]);
      });
    } else entries.push(...Object.entries(vals));
    for (const [name, v] of entries) {
      const vr = this.#vars.get(name);
      if (!vr) invalid(call, `the plan has no variable ${name} (it has ${[...this.#vars.keys()].join(", ") || "none"})`);
      vr.check(v, call);
    }
    for (const [name, v] of entries) this.#vals.set(name, v);
  }

  /** Re-run with new variable values (unlisted ones keep theirs); no recompilation. */
  executeWithVars(vals: Readonly<Record<string, number>> | readonly (readonly [string, number])[], opts: ExecuteOptions = {}): void {
    this.#live("ExecutionPlan.executeWithVars");
    opts = this.#execOpts("ExecutionPlan.executeWithVars", opts);
    this.#idle("ExecutionPlan.executeWithVars");
    this.#setVars("ExecutionPlan.executeWithVars", vals);
    this.execute(opts);
  }

  executeWithVarsProfiled(vals: Readonly<Record<string, number>> | readonly (readonly [string, number])[], opts: Omit<ExecuteOptions, "async"> = {}): KernelProfile[] {
    this.#live("ExecutionPlan.executeWithVarsProfiled");
    opts = this.#execOpts("ExecutionPlan.executeWithVarsProfiled", opts);
    this.#idle("ExecutionPlan.executeWithVarsProfiled");
    this.#setVars("ExecutionPlan.executeWithVarsProfiled", vals);
    return this.executeProfiled(opts);
  }

  /** Shape of output `position` under the current variable values. */
  outputShape(position = 0): number[] {
    this.#index("ExecutionPlan.outputShape", "position", position);
    const n = this.#outputNodes[position];
    if (!n) invalid("ExecutionPlan.outputShape", `no output ${position} (the plan has ${this.numOutputs})`);
    return n.shape.map((d) => dimValue(d, this.#vals));
  }

  /**
   * Read output `position` in its actual shape (the buffer holds the max layout): a fresh array of
   * the output dtype's HostArray. Name the dtype (`readOutput(0, "float16")`) and the result is
   * typed as that dtype's array, and the read checks that the output has that dtype
   * (INVALID_VALUE otherwise); without it the result is typed as the float32 / int32 arrays, or T.
   */
  readOutput(position?: number): DefaultHostArray;
  readOutput<T extends HostArray>(position?: number): T;
  readOutput<D extends DType>(position: number, dtype: D): HostArrayOf<D>;
  readOutput(position = 0, dtype?: DType): HostArray {
    const call = "ExecutionPlan.readOutput";
    this.#live(call);
    this.#index(call, "position", position);
    const node = this.#outputNodes[position];
    if (!node) invalid(call, `no output ${position} (the plan has ${this.numOutputs})`);
    if (dtype !== undefined) expectDType(call, `output ${position}`, node.dtype, dtype);
    return this.#readOutputNow(position);
  }

  #readOutputNow(position: number): HostArray {
    return readValue("ExecutionPlan.readOutput", this.#mem[this.#outputs[position]!]!, this.#outputNodes[position]!, this.#vals);
  }

  // ---- release ----------------------------------------------------------------------------------------

  /** Free the intermediates (outputs and inputs stay); the next execute allocates them again. */
  releaseIntermediateBuffers(): void {
    if (this.#disposed || this.#released) return;
    this.#idle("ExecutionPlan.releaseIntermediateBuffers");
    this.#dropExecs();
    this.#list.drop();
    for (const b of this.#bufs) {
      if (b.kind !== "intermediate") continue;
      const m = this.#mem[b.index];
      if (m && !m.isView) m.dispose();
      this.#mem[b.index] = null;
    }
    this.#arena?.dispose();
    this.#arena = null;
  }

  /** Free every buffer; the plan throws GpuError when used afterwards. */
  releaseAllBuffers(): void {
    if (this.#released) return;
    this.#idle("ExecutionPlan.releaseAllBuffers");
    this.releaseIntermediateBuffers();
    this.#dropSlots();
    this.#views = undefined;
    for (let i = 0; i < this.#mem.length; i++) releaseBuffer(this.#mem, i, this.#constant);
    try {
      this.#stream?.dispose();
    } catch {
      /* a failure of its last work was the last execution's to report */
    }
    this.#stream = null;
    this.#released = true;
  }

  dispose(): void {
    if (this.#disposed || this.#releasePending) return;
    // Kernels in flight still use the buffers: release them when that execution ends. Runs still
    // queued reject (ILLEGAL_STATE); those issued finish.
    if (this.#flight || this.#running > 0) {
      this.#releasePending = true;
      this.#pump();
    } else {
      this.releaseAllBuffers();
      this.#disposed = true;
    }
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /**
   * `await using plan = t.prepare()`: at the end of the block, wait for the runs queued and the
   * execution in flight (their failures are their own callers'), then dispose.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    while (this.#jobs.length > 0 || this.#running > 0 || this.#flight) await new Promise<void>((r) => this.#drainWaiters.push(r));
    this.dispose();
  }

  /**
   * "ExecutionPlan(cpu, 2 kernels: …, peak 4.2 KiB; inputs x [4, 8] float32; outputs output0 [4, 16] float32)":
   * its device, its kernels by name, the device memory it holds at most, and its inputs and
   * outputs by name with their shapes and types.
   */
  toString(): string {
    const names = this.#kernels.map((k) => k.entryPoint);
    const kernels = `${plural(names.length, "kernel")}${names.length ? `: ${names.length > 6 ? `${names.slice(0, 6).join(", ")} and ${names.length - 6} more` : names.join(", ")}` : ""}`;
    const ins = this.#runInputs.map((i) => `${this.#inputNames[i]} [${this.#inputShapes[i]!.join(", ")}] ${this.#bufs[i]!.dtype}`);
    const outs = this.#outputNames.map((n, i) => `${n} ${shapeStr(this.#outputNodes[i]!.shape)} ${this.#outputNodes[i]!.dtype}`);
    const state = this.#disposed || this.#releasePending ? "; disposed" : this.#released ? "; buffers released" : "";
    return `ExecutionPlan(${this.#device.spec}, ${kernels}, peak ${bytesText(this.peakBytes)}; inputs ${ins.join(", ") || "none"}; outputs ${outs.join(", ")}${state})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}

