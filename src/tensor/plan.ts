// ExecutionPlan: a tensor program scheduled, lowered, compiled and given its buffers once, then
// executed many times. The plan owns its buffers: inputs (uploaded at prepare; overwrite them
// through bufferMutById), outputs, and intermediates placed in one arena by a memory planner so
// that intermediates whose lifetimes do not overlap share memory.
import { Device } from "../device";
// side effects: these modules register the device factories (alloc, streams)
import "../buffer";
import "../stream";
import { GpuError, describeValue, hostArray, illegalState, invalid, options } from "../errors";
import { Status } from "../../ffi/sys";
import { Event } from "../event";
import { Program, compilerIdentity, type Kernel, type Module } from "../kernel";
import { ExecMode, Schedule, Step, type Executable } from "../schedule";
import type { Buffer } from "../buffer";
import { Stream } from "../stream";
import { toposort, type DType, type LazyNode } from "./ast";
import { generate, prelude, type GeneratedKernel, type Lang } from "./codegen";
import type { KernelIR } from "./ir";
import { discardPlan, loadPlan, planCacheCounters, planFromCache, planKey, planToCache, storePlan } from "./plancache";
import { collectVars, schedule, type Scheduled, type ScheduleOptions } from "./scheduler";
import type { Tensor } from "./tensor";
import { dimValue, shapeStr, type Variable } from "./variable";
import { maxNumel, maxStrides } from "./view";

/** Names given to input tensors (Tensor.from(..., { name })), for ExecutionPlan.run by name. */
export const inputNames = new WeakMap<LazyNode, string>();

/** What ExecutionPlan.run takes for one input: its elements, in the input's dtype. */
export type RunInput = Float32Array | Int32Array;
/** What ExecutionPlan.run gives back for one output: a fresh array the caller owns. */
export type RunOutput = Float32Array | Int32Array;

export interface PlanRunOptions {
  /** Variable values for this run (unlisted variables take their prepare-time values). */
  vars?: Readonly<Record<string, number>>;
  /** How to run (default ExecMode.Stream). */
  mode?: ExecMode;
}

export interface PrepareOptions extends ScheduleOptions {
  /** Names of the outputs, in order, for ExecutionPlan.run by name (default output0, output1, …). */
  outputNames?: readonly string[];
  /** Device to run on (default Device.default()). */
  device?: Device;
  /** Disable the memory planner: every intermediate gets its own allocation. */
  noMemoryPlanning?: boolean;
  /**
   * Use the plan cache (default true): a program whose structure was prepared before (in this
   * process or an earlier one) skips scheduling, lowering and code generation.
   */
  planCache?: boolean;
}

export interface ExecuteOptions {
  /**
   * How to run (default ExecMode.Stream). The plan's kernels form a Schedule (one Step per
   * kernel, with the byte ranges it reads and writes) compiled once per mode and cached; Eager
   * compiles, runs and drops it. Grids are sized for the variables' maxima so a compiled
   * schedule (or a captured graph) stays valid for every value: kernels skip the blocks past
   * the current extent, and a new value only updates the kernels' i32 arguments.
   */
  mode?: ExecMode;
  /**
   * Launch the kernels directly on this stream instead (no Schedule; grids sized for the current
   * variable values). Ignored when `mode` is given.
   */
  stream?: Stream;
  /** Return after enqueueing, without waiting (default false: execute() waits). */
  async?: boolean;
}

/** A compiled kernel: the generated source and its entry point. */
export interface CachedKernel {
  readonly entryPoint: string;
  readonly source: string;
  readonly lang: Lang;
  readonly device: string;
}

/** A kernel of the plan with its arguments bound to plan buffers. */
export interface PreparedKernel extends CachedKernel {
  readonly ir: KernelIR;
  readonly signature: readonly ("buffer" | "i32")[];
  /** Plan buffer index of each buffer argument, in argument order ([0] is written). */
  readonly bufferIndices: readonly number[];
  /** Variable names passed after the buffers. */
  readonly vars: readonly string[];
  /** AST id of the node this kernel computes. */
  readonly astId: number;
}

export type PreparedOp =
  | { readonly kind: "kernel"; readonly kernel: PreparedKernel; readonly reads: readonly number[]; readonly writes: readonly number[] };

export interface KernelProfile {
  readonly entryPoint: string;
  readonly source: string;
  readonly device: string;
  readonly numBuffers: number;
  readonly elapsedMs: number;
}

export interface PlanBuffer {
  readonly index: number;
  readonly kind: "input" | "output" | "intermediate";
  readonly dtype: DType;
  readonly astId: number;
  readonly elements: number;
  readonly bytes: number;
  /** Arena offset (intermediates). */
  readonly offset: number;
  /** Kernel index range [first, last] during which the buffer holds a live value. */
  readonly lifetime: readonly [number, number];
}

/** What the tensor compiler did in this process (tests count compiles with it). */
export const tensorCompileStats = {
  compiles: 0,
  kernelsCompiled: 0,
  cacheHits: 0,
  /** Plans built from the plan cache (scheduling, lowering and codegen skipped). */
  get planCacheHits(): number {
    return planCacheCounters.hits;
  },
  /** Plans scheduled, lowered and generated (then stored in the plan cache). */
  get planCacheMisses(): number {
    return planCacheCounters.misses;
  },
  /** Plan-cache entries found corrupt or not fitting their program: removed and rebuilt. */
  get planCacheRebuilt(): number {
    return planCacheCounters.rebuilt;
  },
};

const ALIGN = 256;

/**
 * What besides the graph a plan-cache entry depends on: the schedule options that change the
 * kernels (fusion; memory planning is recomputed from the live options), the device by backend and
 * ordinal, a GPU by name too (the C for the CPU does not depend on its model), and the compiler.
 */
export function planCacheContext(dev: Device, opts: ScheduleOptions = {}): string {
  return `${(opts.fusion ?? true) ? "F" : "U"}|${dev.spec}|${dev.backend === "cpu" ? "" : dev.name}|${compilerIdentity(dev)}`;
}

export function langOf(dev: Device): Lang {
  return dev.backend === "cpu" ? "c" : dev.backend === "cuda" ? "cuda" : "metal";
}

// Generated code by language and kernel name (the name hashes the lowered kernel).
const genCache = new Map<string, GeneratedKernel>();
function generateCached(ir: KernelIR, lang: Lang): GeneratedKernel {
  const key = `${lang}:${ir.name}`;
  let g = genCache.get(key);
  if (!g) {
    g = generate(ir, lang);
    if (genCache.size > 4096) genCache.clear();
    genCache.set(key, g);
  }
  return g;
}

// In-process kernel cache: per device, by kernel name (a hash of the lowered kernel).
const kernelCache = new WeakMap<Device, Map<string, Kernel>>();

function compileAll(dev: Device, gens: readonly GeneratedKernel[]): Kernel[] {
  let cache = kernelCache.get(dev);
  if (!cache) kernelCache.set(dev, (cache = new Map()));
  const missing = new Map<string, GeneratedKernel>();
  for (const g of gens) {
    const k = cache.get(g.name);
    if (k && !k.module.disposed) tensorCompileStats.cacheHits++;
    else missing.set(g.name, g);
  }
  if (missing.size) {
    const lang = langOf(dev);
    const list = [...missing.values()];
    const source = prelude(lang) + list.map((g) => g.body).join("\n");
    tensorCompileStats.compiles++;
    tensorCompileStats.kernelsCompiled += list.length;
    // CPU: let the compiler contract a*b+c into FMA (one rounding instead of two).
    const options = dev.backend === "cpu" ? ["-ffp-contract=fast"] : [];
    const mod: Module = Program.compile(dev, source, { name: list.length === 1 ? list[0]!.name : `tensor_${list.length}k`, options });
    for (const g of list) cache.set(g.name, mod.kernel(g.name, g.signature));
  }
  return gens.map((g) => cache.get(g.name)!);
}

/** Greedy offset assignment: largest first, lowest offset free over its lifetime. */
function planArena(items: { bytes: number; life: readonly [number, number] }[]): { offsets: number[]; size: number } {
  const order = items.map((_, i) => i).sort((a, b) => items[b]!.bytes - items[a]!.bytes || a - b);
  const placed: { off: number; end: number; life: readonly [number, number] }[] = [];
  const offsets = new Array<number>(items.length).fill(0);
  let size = 0;
  for (const i of order) {
    const it = items[i]!;
    const conflicts = placed
      .filter((p) => p.life[0] <= it.life[1] && it.life[0] <= p.life[1])
      .sort((a, b) => a.off - b.off);
    let off = 0;
    for (const c of conflicts) {
      if (off + it.bytes <= c.off) break;
      off = Math.max(off, Math.ceil(c.end / ALIGN) * ALIGN);
    }
    offsets[i] = off;
    placed.push({ off, end: off + it.bytes, life: it.life });
    size = Math.max(size, off + it.bytes);
  }
  return { offsets, size: Math.ceil(size / ALIGN) * ALIGN };
}

export class ExecutionPlan {
  readonly #device: Device;
  readonly #kernels: PreparedKernel[];
  readonly #compiled: Kernel[];
  readonly #gens: GeneratedKernel[];
  readonly #bufs: PlanBuffer[];
  readonly #mem: (Buffer | null)[];
  readonly #nodeToBuf = new Map<LazyNode, number>();
  readonly #astToBuf = new Map<number, number>();
  readonly #outputs: number[];
  readonly #outputNodes: LazyNode[];
  readonly #vars = new Map<string, Variable>();
  readonly #vals = new Map<string, number>();
  #arena: Buffer | null = null;
  readonly #arenaBytes: number;
  readonly #noPlanning: boolean;
  #released = false;
  #disposed = false;
  /** Prepare-time data of each input (buffers 0..n-1), its name, and whether a run changed it. */
  readonly #inputData: (Float32Array | Int32Array)[];
  readonly #inputNames: string[];
  readonly #inputChanged: boolean[];
  readonly #outputNames: string[];
  /** Variable values at prepare time: what run() uses for variables it is not given. */
  readonly #defaultVals: Map<string, number>;
  /** run() calls, one after another: the tail of the queue. */
  #queue: Promise<unknown> = Promise.resolve();
  /** The execution in flight (executeAsync or run), if any: others refuse or wait for it. */
  #flight: Promise<unknown> | null = null;
  #flightCall = "";
  /** dispose() was called while an execution was in flight: release when it ends. */
  #releasePending = false;
  /** Compiled schedules by mode, and the variable values their arguments hold. */
  readonly #execs = new Map<string, { exec: Executable; steps: number[]; vals: string }>();

  constructor(tensors: readonly Tensor[], opts: PrepareOptions = {}) {
    const call = "Tensor.prepare";
    if (!Array.isArray(tensors) || tensors.length === 0) invalid(call, "give at least one tensor");
    opts = options(call, opts);
    for (const t of tensors)
      if (!t || typeof t !== "object" || !((t as { node?: unknown }).node instanceof Object)) invalid(call, `not a Tensor: ${describeValue(t)}`);
    if (opts.device !== undefined && !(opts.device instanceof Device)) invalid(call, `device must be a Device, got ${describeValue(opts.device)}`);
    this.#device = opts.device ?? Device.default();
    this.#noPlanning = opts.noMemoryPlanning ?? false;
    const outNodes = tensors.map((t) => t.node);
    const lang = langOf(this.#device);
    let sched: Scheduled | null = null;
    let gens: GeneratedKernel[] = [];
    let kvars: (readonly string[])[] = [];
    let cacheKey: string | null = null;
    let nodes: LazyNode[] = [];
    if (opts.planCache ?? true) {
      nodes = toposort(outNodes);
      const vars = collectVars(nodes, call);
      const pos = new Map<LazyNode, number>();
      for (let i = 0; i < nodes.length; i++) pos.set(nodes[i]!, i);
      cacheKey = planKey(nodes, pos, outNodes, planCacheContext(this.#device, opts));
      const hit = loadPlan(cacheKey);
      if (hit) {
        try {
          ({ sched, gens, kvars } = planFromCache(hit, nodes, outNodes, vars, lang));
          planCacheCounters.hits++;
        } catch {
          discardPlan(cacheKey);
          sched = null;
        }
      }
    }
    const fromPlanCache = sched !== null;
    if (!sched) {
      if (cacheKey) planCacheCounters.misses++;
      sched = schedule(outNodes, opts, call);
      gens = sched.kernels.map((k) => generateCached(k.ir, lang));
      kvars = sched.kernels.map((k) => k.ir.vars);
    }
    for (const [name, v] of sched.vars) {
      this.#vars.set(name, v);
      this.#vals.set(name, v.bound ? v.value : v.max);
    }
    this.#defaultVals = new Map(this.#vals);
    this.#inputData = sched.inputs.map((n) => (n.arg as { data: Float32Array | Int32Array }).data);
    this.#inputNames = sched.inputs.map((n, i) => inputNames.get(n) ?? `input${i}`);
    this.#inputChanged = sched.inputs.map(() => false);
    const outNames = opts.outputNames;
    if (outNames !== undefined) {
      if (!Array.isArray(outNames) || outNames.length !== tensors.length || outNames.some((x) => typeof x !== "string" || !x) || new Set(outNames).size !== outNames.length)
        invalid(call, `outputNames must be ${tensors.length} distinct non-empty strings, one per tensor`);
    }
    this.#outputNames = sched.outputs.map((_, i) => outNames?.[i] ?? `output${i}`);
    // buffers: inputs, then kernel targets in order
    const bufs: PlanBuffer[] = [];
    const outSet = new Set(sched.outputs);
    const lastUse = new Map<LazyNode, number>();
    sched.kernels.forEach((k, ki) => k.inputs.forEach((n) => lastUse.set(n, ki)));
    const addBuf = (n: LazyNode, kind: PlanBuffer["kind"], first: number) => {
      const elements = maxNumel(n.shape);
      const b: PlanBuffer = {
        index: bufs.length,
        kind,
        dtype: n.dtype,
        astId: n.id,
        elements,
        bytes: elements * 4,
        offset: 0,
        lifetime: [first, Math.max(first, lastUse.get(n) ?? first)],
      };
      this.#nodeToBuf.set(n, b.index);
      this.#astToBuf.set(n.id, b.index);
      bufs.push(b);
    };
    for (const n of sched.inputs) addBuf(n, "input", 0);
    sched.kernels.forEach((k, ki) => addBuf(k.target, outSet.has(k.target) ? "output" : "intermediate", ki));
    // memory planning of intermediates
    const inter = bufs.filter((b) => b.kind === "intermediate");
    let arenaBytes = 0;
    if (!this.#noPlanning && inter.length) {
      const { offsets, size } = planArena(inter.map((b) => ({ bytes: b.bytes, life: b.lifetime })));
      inter.forEach((b, i) => ((b as { offset: number }).offset = offsets[i]!));
      arenaBytes = size;
    }
    this.#arenaBytes = arenaBytes;
    this.#bufs = bufs;
    this.#outputNodes = [...sched.outputs];
    this.#outputs = sched.outputs.map((n) => this.#nodeToBuf.get(n)!);
    // compile (codegen happened above, or came from the plan cache)
    this.#gens = gens;
    this.#compiled = compileAll(this.#device, this.#gens);
    if (cacheKey && !fromPlanCache) storePlan(cacheKey, planToCache(sched, gens, nodes, lang));
    const devName = this.#device.spec;
    this.#kernels = sched.kernels.map((k, i) => {
      const g = gens[i]!;
      return {
        entryPoint: g.name,
        source: g.source,
        lang,
        device: devName,
        get ir(): KernelIR {
          return k.ir;
        },
        signature: g.signature,
        bufferIndices: [this.#nodeToBuf.get(k.target)!, ...k.inputs.map((n) => this.#nodeToBuf.get(n)!)],
        vars: kvars[i]!,
        astId: k.target.id,
      };
    });
    // allocate and upload
    this.#mem = bufs.map(() => null);
    try {
      for (const b of bufs) {
        if (b.kind === "intermediate") continue;
        const buf = this.#device.alloc(Math.max(b.bytes, 4));
        this.#mem[b.index] = buf;
        if (b.kind === "input") {
          const n = sched.inputs[b.index]!;
          buf.write((n.arg as { data: Float32Array | Int32Array }).data);
        }
      }
      this.#allocIntermediates();
    } catch (e) {
      this.releaseAllBuffers();
      throw e;
    }
  }

  #allocIntermediates(): void {
    const inter = this.#bufs.filter((b) => b.kind === "intermediate");
    if (!inter.length) return;
    if (this.#noPlanning) {
      for (const b of inter) this.#mem[b.index] = this.#device.alloc(Math.max(b.bytes, 4));
      return;
    }
    this.#arena = this.#device.alloc(Math.max(this.#arenaBytes, 4));
    for (const b of inter) this.#mem[b.index] = this.#arena.view(b.offset, Math.max(b.bytes, 0));
  }

  /** An index argument: a non-negative integer (out of range is the caller's undefined). */
  #index(call: string, what: string, i: unknown): void {
    if (typeof i !== "number" || !Number.isSafeInteger(i) || i < 0) invalid(call, `${what} must be a non-negative integer, got ${describeValue(i)}`);
  }

  /** ExecuteOptions: an object; its stream a Stream of the plan's device, its mode checked later. */
  #execOpts<T extends ExecuteOptions>(call: string, opts: T | undefined): T {
    const o = options(call, opts);
    if (o.stream !== undefined && !(o.stream instanceof Stream)) invalid(call, `stream must be a Stream, got ${describeValue(o.stream)}`);
    if (o.mode !== undefined && !(o.mode instanceof ExecMode)) invalid(call, `mode must be an ExecMode, got ${describeValue(o.mode)}`);
    return o;
  }

  /** Refuse while an execution of this plan is in flight: its inputs and outputs are in use. */
  #idle(call: string): void {
    if (this.#flight)
      illegalState(
        call,
        `plan busy: ${this.#flightCall} is in flight. Concurrent callers use plan.run(inputs), which queues; ` +
          "execute/executeAsync never overlap on one plan",
      );
  }

  #live(call: string): void {
    if (this.#disposed || this.#releasePending) illegalState(call, "the plan was disposed");
    if (this.#released) illegalState(call, "the plan's buffers were released (releaseAllBuffers)");
  }

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
  /** The buffer of AST node `astId`, to write new input data into. */
  bufferMutById(astId: number): Buffer | undefined {
    this.#idle("ExecutionPlan.bufferMutById");
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
  kernels(): readonly CachedKernel[] {
    return this.#kernels.map((k) => ({ entryPoint: k.entryPoint, source: k.source, lang: k.lang, device: k.device }));
  }

  // ---- execution ----------------------------------------------------------------------------------

  #ensureBuffers(call: string): void {
    this.#live(call);
    if (this.#bufs.some((b) => b.kind === "intermediate") && this.#mem[this.#bufs.find((b) => b.kind === "intermediate")!.index] === null)
      this.#allocIntermediates();
  }

  #launchAll(stream: Stream, profile: boolean): KernelProfile[] {
    const profiles: KernelProfile[] = [];
    const events: [Event, Event][] = [];
    try {
      for (let i = 0; i < this.#kernels.length; i++) {
        const pk = this.#kernels[i]!;
        const { grid, block } = this.#gens[i]!.launch(this.#vals);
        let ev: [Event, Event] | undefined;
        if (profile) {
          ev = [Event.create(this.#device), Event.create(this.#device)];
          events.push(ev);
          ev[0].record(stream);
        }
        if (grid > 0) {
          const args: (Buffer | number)[] = pk.bufferIndices.map((b) => this.#mem[b]!);
          for (const v of pk.vars) args.push(this.#vals.get(v)!);
          this.#compiled[i]!.launch(stream, { grid: [grid], block: [block], args });
        }
        if (ev) ev[1].record(stream);
      }
      if (profile) {
        stream.synchronize();
        this.#kernels.forEach((k, i) => {
          const [a, b] = events[i]!;
          profiles.push({
            entryPoint: k.entryPoint,
            source: k.source,
            device: k.device,
            numBuffers: k.bufferIndices.length,
            elapsedMs: Event.elapsed(a, b),
          });
        });
      }
    } finally {
      for (const [a, b] of events) {
        a.dispose();
        b.dispose();
      }
    }
    return profiles;
  }

  /** The variable values as a string, to know when compiled schedules need new arguments. */
  #valsKey(): string {
    return [...this.#vals.values()].join(",");
  }

  #argsOf(i: number): (Buffer | number)[] {
    const pk = this.#kernels[i]!;
    const args: (Buffer | number)[] = pk.bufferIndices.map((b) => this.#mem[b]!);
    for (const v of pk.vars) args.push(this.#vals.get(v)!);
    return args;
  }

  /** The plan as a Schedule: one Step per kernel (kernels with no work at the maxima are left out). */
  schedule(): { schedule: Schedule; kernelOfStep: number[] } {
    this.#ensureBuffers("ExecutionPlan.schedule");
    const maxVals = new Map([...this.#vars].map(([k, v]) => [k, v.max]));
    const sched = new Schedule();
    const kernelOfStep: number[] = [];
    this.#kernels.forEach((pk, i) => {
      const { grid, block } = this.#gens[i]!.launch(maxVals);
      if (grid === 0) return;
      const bufs = pk.bufferIndices.map((b) => this.#mem[b]!);
      sched.add(
        Step.kernel(this.#compiled[i]!, {
          grid: [grid],
          block: [block],
          args: this.#argsOf(i),
          reads: bufs.slice(1),
          writes: [bufs[0]!],
          label: pk.entryPoint,
        }),
      );
      kernelOfStep.push(i);
    });
    return { schedule: sched, kernelOfStep };
  }

  #dropExecs(): void {
    for (const e of this.#execs.values()) e.exec.dispose();
    this.#execs.clear();
  }

  /** The executable for `mode` with its arguments in step with the variable values. */
  #execFor(call: string, mode: ExecMode): Executable {
    if (!(mode instanceof ExecMode)) invalid(call, `mode must be an ExecMode, got ${String(mode)}`);
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

  /** Run every kernel in order and wait for them (opts.async: only enqueue). */
  execute(opts: ExecuteOptions = {}): void {
    const call = "ExecutionPlan.execute";
    opts = this.#execOpts(call, opts);
    this.#ensureBuffers(call);
    this.#idle(call);
    if (opts.mode === undefined && opts.stream) {
      this.#launchAll(opts.stream, false);
      if (!opts.async) opts.stream.synchronize();
      return;
    }
    const exec = this.#execFor(call, opts.mode ?? ExecMode.Stream);
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
    if (opts.mode === undefined && opts.stream) {
      this.#launchAll(opts.stream, false);
      done = opts.stream.done();
    } else {
      const exec = this.#execFor(call, opts.mode ?? ExecMode.Stream);
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
      if (this.#releasePending) {
        this.#releasePending = false;
        this.releaseAllBuffers();
        this.#disposed = true;
      }
    }
  }

  get inputNames(): readonly string[] {
    return [...this.#inputNames];
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
  run(feeds: Readonly<Record<string, RunInput | number>>, opts?: PlanRunOptions): Promise<Record<string, RunOutput>>;
  run(feeds?: readonly RunInput[] | Readonly<Record<string, RunInput | number>>, opts?: PlanRunOptions): Promise<RunOutput[] | Record<string, RunOutput>> {
    const call = "ExecutionPlan.run";
    let job: Promise<RunOutput[] | Record<string, RunOutput>>;
    try {
      this.#live(call);
      const { inputs, vals, mode, byName } = this.#runArgs(call, feeds, opts);
      job = this.#queue.then(() => this.#runNow(call, inputs, vals, mode, byName));
    } catch (e) {
      return Promise.reject(e);
    }
    this.#queue = job.catch(() => undefined);
    return job;
  }

  /** Check run()'s arguments and copy the inputs; throws GpuError before anything is queued. */
  #runArgs(
    call: string,
    feeds: unknown,
    opts: PlanRunOptions | undefined,
  ): { inputs: Map<number, RunInput>; vals: Map<string, number>; mode: ExecMode; byName: boolean } {
    const o = options(call, opts);
    if (o.mode !== undefined && !(o.mode instanceof ExecMode)) invalid(call, `mode must be an ExecMode, got ${describeValue(o.mode)}`);
    const inputs = new Map<number, RunInput>();
    const vals = new Map<string, number>();
    const setVar = (name: string, v: unknown) => {
      const vr = this.#vars.get(name);
      if (!vr) invalid(call, `the plan has no variable ${name} (it has ${[...this.#vars.keys()].join(", ") || "none"})`);
      vals.set(name, vr.check(v, call));
    };
    const setInput = (i: number, what: string, data: unknown) => {
      const b = this.#bufs[i]!;
      const C = b.dtype === "float32" ? Float32Array : Int32Array;
      if (!(data instanceof C)) invalid(call, `${what} must be a ${C.name} (the input is ${b.dtype}), got ${describeValue(data)}`);
      if (data.length !== b.elements) invalid(call, `${what} has ${data.length} elements, the input holds ${b.elements}`);
      inputs.set(i, data.slice() as RunInput);
    };
    let byName = false;
    if (feeds === undefined || feeds === null) {
      if (feeds === null) invalid(call, "inputs must be an array or an object, got null");
    } else if (Array.isArray(feeds)) {
      if (feeds.length > this.#inputNames.length) invalid(call, `${feeds.length} inputs given, the plan has ${this.#inputNames.length}`);
      feeds.forEach((d, i) => {
        if (d !== undefined && d !== null) setInput(i, `input ${i} (${this.#inputNames[i]})`, d);
      });
    } else if (typeof feeds === "object" && !ArrayBuffer.isView(feeds)) {
      byName = true;
      for (const [name, d] of Object.entries(feeds)) {
        if (this.#vars.has(name) && typeof d === "number") {
          setVar(name, d);
          continue;
        }
        const at = this.#inputNames.flatMap((n, i) => (n === name ? [i] : []));
        if (at.length === 0)
          invalid(call, `no input or variable named ${JSON.stringify(name)} (inputs: ${this.#inputNames.join(", ") || "none"}; variables: ${[...this.#vars.keys()].join(", ") || "none"})`);
        if (at.length > 1) invalid(call, `${at.length} inputs are named ${JSON.stringify(name)}; give them by position`);
        setInput(at[0]!, `input ${JSON.stringify(name)}`, d);
      }
    } else invalid(call, `inputs must be an array or an object, got ${describeValue(feeds)}`);
    if (o.vars !== undefined) {
      if (o.vars === null || typeof o.vars !== "object" || Array.isArray(o.vars)) invalid(call, `vars must be an object, got ${describeValue(o.vars)}`);
      for (const [name, v] of Object.entries(o.vars)) setVar(name, v);
    }
    return { inputs, vals, mode: o.mode ?? ExecMode.Stream, byName };
  }

  async #runNow(call: string, inputs: Map<number, RunInput>, vals: Map<string, number>, mode: ExecMode, byName: boolean): Promise<RunOutput[] | Record<string, RunOutput>> {
    // An executeAsync begun outside the queue finishes first.
    while (this.#flight) await this.#flight.catch(() => undefined);
    this.#ensureBuffers(call);
    for (let i = 0; i < this.#inputData.length; i++) {
      const d = inputs.get(i);
      if (d) {
        this.#mem[i]!.write(d);
        this.#inputChanged[i] = true;
      } else if (this.#inputChanged[i]) {
        this.#mem[i]!.write(this.#inputData[i]!);
        this.#inputChanged[i] = false;
      }
    }
    for (const [name, v] of this.#defaultVals) this.#vals.set(name, vals.get(name) ?? v);
    const exec = this.#execFor(call, mode);
    exec.run();
    const outs = await this.#inFlight(call, exec.done().then(() => this.#outputNames.map((_, i) => this.#readOutputNow(i))));
    if (!byName) return outs;
    const rec: Record<string, RunOutput> = {};
    this.#outputNames.forEach((n, i) => (rec[n] = outs[i]!));
    return rec;
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
    if (vals === null || typeof vals !== "object") invalid(call, `variable values must be an object or [name, value] pairs, got ${describeValue(vals)}`);
    const entries: [string, number][] = [];
    if (Array.isArray(vals)) {
      vals.forEach((pair, i) => {
        if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== "string")
          invalid(call, `variable value ${i} must be a [name, value] pair, got ${describeValue(pair)}`);
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

  /** Read output `position` in its actual shape (the buffer holds the max layout). */
  readOutput(position = 0): Float32Array | Int32Array {
    this.#live("ExecutionPlan.readOutput");
    this.#index("ExecutionPlan.readOutput", "position", position);
    if (!this.#outputNodes[position]) invalid("ExecutionPlan.readOutput", `no output ${position} (the plan has ${this.numOutputs})`);
    return this.#readOutputNow(position);
  }

  #readOutputNow(position: number): Float32Array | Int32Array {
    const n = this.#outputNodes[position]!;
    const buf = this.#mem[this.#outputs[position]!]!;
    const C = n.dtype === "float32" ? Float32Array : Int32Array;
    const shape = n.shape.map((d) => dimValue(d, this.#vals));
    const numel = shape.reduce((p, q) => p * q, 1);
    const max = maxNumel(n.shape);
    const call = "ExecutionPlan.readOutput";
    if (numel === max) return buf.read(hostArray(call, numel * 4, () => new C(numel)));
    const all = buf.read(hostArray(call, max * 4, () => new C(max)));
    const out = hostArray(call, numel * 4, () => new C(numel));
    const st = maxStrides(n.shape);
    const idx = new Array<number>(shape.length).fill(0);
    for (let i = 0; i < numel; i++) {
      let rem = i, off = 0;
      for (let d = shape.length - 1; d >= 0; d--) {
        idx[d] = rem % shape[d]!;
        rem = Math.floor(rem / shape[d]!);
        off += idx[d]! * st[d]!;
      }
      out[i] = all[off]!;
    }
    return out;
  }

  // ---- release ----------------------------------------------------------------------------------------

  /** Free the intermediates (outputs and inputs stay); the next execute allocates them again. */
  releaseIntermediateBuffers(): void {
    if (this.#disposed || this.#released) return;
    this.#idle("ExecutionPlan.releaseIntermediateBuffers");
    this.#dropExecs();
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
    for (let i = 0; i < this.#mem.length; i++) {
      const m = this.#mem[i];
      if (m && !m.isView) m.dispose();
      this.#mem[i] = null;
    }
    this.#released = true;
  }

  dispose(): void {
    if (this.#disposed || this.#releasePending) return;
    // Kernels in flight still use the buffers: release them when that execution ends.
    if (this.#flight) this.#releasePending = true;
    else {
      this.releaseAllBuffers();
      this.#disposed = true;
    }
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  toString(): string {
    return `ExecutionPlan(${this.#kernels.length} kernels, ${this.#bufs.length} buffers, outputs ${this.#outputNodes.map((n) => shapeStr(n.shape)).join(", ")})`;
  }
}

void GpuError;
void Status;
