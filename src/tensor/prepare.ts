// The prepare() pipeline: a tensor program from its outputs to compiled kernels bound to device
// buffers, in five named stages:
//   schedule  which nodes are realized (scheduler.ts)
//   lower     each realized node as one kernel IR (lower.ts)
//   render    each kernel as source in the device's language (codegen.ts)
//   compile   every kernel not compiled before, in one module (Program.compile); on a backend
//             with tiers (the CPU) a quick build at once, the optimized one swapped in later
//   allocate  the plan's buffers and the memory plan of its intermediates (memory.ts)
// Every cache on the way (cache.ts) hangs on one structural key computed once per prepare: a plan
// seen before (this process or an earlier one) skips schedule, lower and render.
import type { TieredImage } from "../compile/types";
import type { HostArray } from "./dtype";
import { backends, type BackendRecord } from "../backends";
import type { Buffer } from "../buffer";
import type { Device } from "../device";
import { GpuError, Status } from "../errors";
import { Program, loadModule, type Kernel, type Module } from "../kernel";
import { Stream } from "../stream";
import { constantData, toposort, type LazyNode } from "./ast";
import {
  cachedSchedule,
  discardPlan,
  generateCached,
  kernelCache,
  loadPlan,
  planCacheContext,
  planCacheCounters,
  planFromCache,
  planKey,
  planToCache,
  rememberSchedule,
  storePlan,
  structureKey,
  tensorCompileStats,
} from "./cache";
import { prelude, type GeneratedKernel, type Lang } from "./codegen";
import type { KernelIR } from "./ir";
import { lowerAll } from "./lower";
import { allocateBuffers, layoutBuffers, releaseBuffer, type BufferLayout } from "./memory";
import { collectVars, scheduleTargets, type Scheduled, type ScheduleOptions } from "./scheduler";

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

/** The kernel language of a device: its backend's dialect. */
export function langOf(dev: Device): Lang {
  return backends[dev.backend].dialect.lang;
}

// ---- the stages ------------------------------------------------------------------------------------

/** A program's nodes in topological order, each node's position, its variables and structural key. */
interface Graph {
  readonly outputs: readonly LazyNode[];
  readonly nodes: LazyNode[];
  readonly pos: Map<LazyNode, number>;
  readonly vars: Scheduled["vars"];
  readonly structure: string;
}

function program(outputs: readonly LazyNode[], call: string): Graph {
  const nodes = toposort(outputs);
  const vars = collectVars(nodes, call);
  const pos = new Map<LazyNode, number>();
  for (let i = 0; i < nodes.length; i++) pos.set(nodes[i]!, i);
  return { outputs, nodes, pos, vars, structure: structureKey(nodes, pos, outputs) };
}

/** Stages schedule and lower, through the schedule cache. */
function scheduleAndLower(p: Graph, fusion: boolean): Scheduled {
  const inputs = p.nodes.filter((n) => n.op === "buffer");
  let kernels = cachedSchedule(fusion, p.structure, p.nodes);
  if (!kernels) {
    const targets = scheduleTargets(p.nodes, p.outputs, fusion); // schedule
    kernels = lowerAll(targets, p.vars); // lower
    rememberSchedule(fusion, p.structure, kernels, p.pos);
  }
  return { kernels, outputs: [...p.outputs], inputs, realized: [...inputs, ...kernels.map((k) => k.target)], vars: p.vars };
}

/** Stage render: each kernel's source in `lang`. */
function render(sched: Scheduled, lang: Lang): GeneratedKernel[] {
  return sched.kernels.map((k) => generateCached(k.ir, lang));
}

/** Stage compile: the kernels of `gens` on `dev`, those not compiled before in one module. */
function compile(dev: Device, gens: readonly GeneratedKernel[]): Kernel[] {
  const cache = kernelCache(dev);
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
    const backend: BackendRecord = backends[dev.backend];
    const opts = { name: list.length === 1 ? list[0]!.name : `tensor_${list.length}k`, options: [...backend.tensorCompileOptions] };
    const tiered = backend.compileTiered?.(dev, source, opts) ?? null;
    const mod: Module = tiered ? loadModule(dev, tiered.image, source) : Program.compile(dev, source, opts);
    for (const g of list) cache.set(g.name, mod.kernel(g.name, g.signature));
    if (tiered?.whenOptimized) {
      tierStats.quickModules++;
      upgradeWhenBuilt(dev, mod, list, tiered.whenOptimized);
    }
  }
  return gens.map((g) => cache.get(g.name)!);
}

// ---- tiers ---------------------------------------------------------------------------------------

/** What tiered compilation did in this process (tests and benches read it). */
export const tierStats = { quickModules: 0, upgraded: 0, upgradeFailures: 0 };

/** Each quick kernel's upgrade: settles once it runs its optimized build (with the error where that build failed). */
const upgrades = new WeakMap<Kernel, Promise<Error | null>>();

/**
 * When the optimized build of `mod` arrives, its kernels run it from their next launch on
 * (Kernel.retarget: queued work, captured graphs and executables included; the two builds give
 * the same bits). Done where the build is noticed finished, at once: a turn of the event loop, or
 * a plan's run polling (pollCompiles), so a program that never yields is upgraded too. A module
 * or device disposed meanwhile is left alone; a failed build leaves the quick kernels in place.
 */
function upgradeWhenBuilt(dev: Device, mod: Module, list: readonly GeneratedKernel[], whenOptimized: NonNullable<TieredImage["whenOptimized"]>): void {
  let settle!: (e: Error | null) => void;
  const done = new Promise<Error | null>((resolve) => (settle = resolve));
  for (const g of list) upgrades.set(mod.kernel(g.name, g.signature), done);
  whenOptimized((img) => {
    if (img instanceof Error) {
      tierStats.upgradeFailures++;
      return settle(img);
    }
    if (mod.disposed) return settle(null);
    try {
      const fast = loadModule(dev, img, mod.source);
      try {
        for (const g of list) mod.kernel(g.name, g.signature).retarget(fast.kernel(g.name, g.signature));
      } finally {
        fast.dispose(); // its code stays loaded while `mod` is (bg_kernel_retarget holds it)
      }
      tierStats.upgraded++;
      settle(null);
    } catch (e) {
      tierStats.upgradeFailures++;
      settle(e instanceof Error ? e : new GpuError(Status.COMPILE, `the optimized build failed: ${String(e)}`, { call: "prepare" }));
    }
  });
}

/** Settles once every kernel of `kernels` runs its optimized build; rejects with the build's error where one failed. */
export async function kernelsOptimized(kernels: readonly Kernel[]): Promise<void> {
  for (const e of await Promise.all(kernels.map((k) => upgrades.get(k) ?? null))) if (e) throw e;
}

/**
 * The schedule of a program (stages schedule and lower): its kernels in execution order, the
 * buffers they read and write. Cached by structure: a program built again reuses its lowering.
 */
export function schedule(outputs: readonly LazyNode[], opts: ScheduleOptions = {}, call = "prepare"): Scheduled {
  return scheduleAndLower(program(outputs, call), opts.fusion ?? true);
}

// ---- constants computed once ---------------------------------------------------------------------

/** Values of the random sources constantsOnce computed, by node (a node's value never changes). */
const computedData = new WeakMap<LazyNode, HostArray>();

/**
 * The kernels that compute a random source on its own (the scheduler realizes one read by a
 * reduction: rule 7 of scheduler.ts), run once here, at prepare, on `device`; their nodes become
 * constants (buffers of the plan, not inputs of its runs) holding the values they computed, so an
 * execute reads them instead of generating them again. A source whose shape holds a variable, or that is an output, stays a kernel.
 */
function constantsOnce(device: Device, sched: Scheduled, gens: GeneratedKernel[], compiled: Kernel[], kvars: (readonly string[])[]): { sched: Scheduled; gens: GeneratedKernel[]; compiled: Kernel[]; kvars: (readonly string[])[] } {
  const outs = new Set(sched.outputs);
  const once = sched.kernels.map((k, i) => k.target.op === "rand" && k.inputs.length === 0 && !outs.has(k.target) && kvars[i]!.length === 0 && k.target.shape.every((d) => typeof d === "number"));
  if (!once.includes(true)) return { sched, gens, compiled, kvars };
  const todo = sched.kernels.filter((k, i) => once[i] && !computedData.has(k.target));
  if (todo.length) {
    const stream = Stream.create(device);
    const bufs: [LazyNode, Buffer, number][] = [];
    try {
      sched.kernels.forEach((k, i) => {
        if (!once[i] || computedData.has(k.target)) return;
        const n = k.target.shape.reduce<number>((p, d) => p * (d as number), 1);
        const buf = device.alloc(Math.max(n * 4, 4));
        bufs.push([k.target, buf, n]);
        const { grid, block } = gens[i]!.launch(new Map());
        if (grid > 0) compiled[i]!.launch(stream, { grid: [grid], block: [block], args: [buf] });
      });
      stream.synchronize();
      for (const [node, buf, n] of bufs) computedData.set(node, buf.read(node.dtype === "int32" ? new Int32Array(n) : new Float32Array(n)));
    } finally {
      for (const [, buf] of bufs) buf.dispose();
      stream.dispose();
    }
  }
  const keep = (_: unknown, i: number) => !once[i];
  const kernels = sched.kernels.filter(keep);
  const inputs = [...sched.inputs, ...sched.kernels.filter((_, i) => once[i]).map((k) => k.target)];
  return {
    sched: { kernels, outputs: sched.outputs, inputs, realized: [...inputs, ...kernels.map((k) => k.target)], vars: sched.vars },
    gens: gens.filter(keep),
    compiled: compiled.filter(keep),
    kvars: kvars.filter(keep),
  };
}

// ---- the pipeline ------------------------------------------------------------------------------

export interface PipelineOptions extends ScheduleOptions {
  /** Use the plan cache (default true). */
  planCache?: boolean;
  /** Disable the memory planner: every intermediate gets its own allocation. */
  noMemoryPlanning?: boolean;
  /** Nodes of data tensors whose values never change: shared between plans (constants.ts). */
  constantNodes?: ReadonlySet<LazyNode>;
}

/** Everything prepare() makes: the schedule, the kernels, the buffers (allocated, inputs uploaded). */
export interface Prepared {
  readonly sched: Scheduled;
  readonly gens: GeneratedKernel[];
  readonly compiled: Kernel[];
  readonly kernels: PreparedKernel[];
  readonly layout: BufferLayout;
  /** Per buffer index: its allocation (intermediates: views of `arena` with memory planning). */
  readonly mem: (Buffer | null)[];
  readonly arena: Buffer | null;
  /** Prepare-time data of each input (buffers 0..n-1). */
  readonly inputData: HostArray[];
  /** Per input: a constant (its buffer shared between plans, never written by a run). */
  readonly constant: boolean[];
}

/**
 * Prepare `outputs` on `device`: schedule → lower → render (or all three from the plan cache) →
 * compile → allocate. Throws GpuError naming `call`; nothing stays allocated when it throws.
 */
export function prepare(outputs: readonly LazyNode[], device: Device, opts: PipelineOptions, call: string): Prepared {
  const lang = langOf(device);
  const p = program(outputs, call);
  const fusion = opts.fusion ?? true;
  let sched: Scheduled | null = null;
  let gens: GeneratedKernel[] = [];
  let compiled: Kernel[];
  let kvars: (readonly string[])[] = [];
  let cacheKey: string | null = null;
  if (opts.planCache ?? true) {
    cacheKey = planKey(p.structure, planCacheContext(device, opts));
    const hit = loadPlan(cacheKey);
    if (hit) {
      try {
        ({ sched, gens, kvars } = planFromCache(hit, p.nodes, outputs, p.vars, lang));
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
    sched = scheduleAndLower(p, fusion);
    gens = render(sched, lang);
    kvars = sched.kernels.map((k) => k.ir.vars);
  }
  compiled = compile(device, gens);
  if (cacheKey && !fromPlanCache) storePlan(cacheKey, planToCache(sched, gens, p.nodes, lang));
  // random sources computed once, now, and held as constant buffers from here on
  ({ sched, gens, compiled, kvars } = constantsOnce(device, sched, gens, compiled, kvars));
  const inputData = sched.inputs.map((n) => (n.arg as { data?: HostArray }).data ?? computedData.get(n)!);
  // allocate
  const noPlanning = opts.noMemoryPlanning ?? false;
  const layout = layoutBuffers(sched, noPlanning);
  const devName = device.spec;
  const s = sched;
  const kernels: PreparedKernel[] = s.kernels.map((k, i) => {
    const g = gens[i]!;
    return {
      entryPoint: g.name,
      source: g.source,
      lang,
      device: devName,
      ir: k.ir, // not the scheduled kernel: its input nodes hold their data, which constants may let go
      signature: g.signature,
      bufferIndices: [layout.nodeToBuf.get(k.target)!, ...k.inputs.map((n) => layout.nodeToBuf.get(n)!)],
      vars: kvars[i]!,
      astId: k.target.id,
    };
  });
  const mem: (Buffer | null)[] = layout.bufs.map(() => null);
  // constants: data given or made constant, and random sources computed once (their values never change)
  const constant = sched.inputs.map((n) => opts.constantNodes?.has(n) === true || constantData.has(n) || (n.op === "rand" && computedData.has(n)));
  let arena: Buffer | null = null;
  try {
    arena = allocateBuffers(device, layout, inputData, mem, noPlanning, constant);
  } catch (e) {
    for (let i = 0; i < mem.length; i++) releaseBuffer(mem, i, constant);
    throw e;
  }
  return { sched: s, gens, compiled, kernels, layout, mem, arena, inputData, constant };
}
