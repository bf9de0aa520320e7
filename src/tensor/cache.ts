// The tensor compiler's caches, all in one place, and the one structural key they hang on.
//
// Structural key (structureKey): one walk over the graph reachable from the outputs (op, dtype,
// shape with variable names and bounds, structural constants, view stacks, sources by position)
// and the outputs' positions. Buffer leaves contribute their dtype and shape only: no cache holds
// user data (a plan copies the live tensors' data in, as always).
//
// Caches, one per stage of prepare():
//  - schedules (memory): the lowered kernels of a structure, by fusion and structural key;
//  - generated code (memory): by language and kernel name (the name hashes the lowered kernel);
//  - compiled kernels (memory, per device): by kernel name;
//  - plans (disk, and memory): below.
//
// The plan cache: what prepare() derives from scheduling, lowering and code generation, stored on
// disk under a hash of the program's structure, so a fresh process preparing a program it has seen
// before skips all three (the kernels themselves come from the kernel cache of Program.compile).
//
// Key: sha256 of the structural key, the schedule options, the device (backend, ordinal, name),
// the compiler identity, PLAN_CACHE_VERSION and the size and mtime of the tensor compiler's own
// modules.
//
// Value: per kernel, in execution order, the node positions of its target and inputs, its name,
// generated body, argument signature, variable names, launch geometry and its lowered IR (as a
// JSON string, decoded only when someone reads PreparedKernel.ir). Buffers, their roles and sizes
// and the memory plan follow from these and the live nodes (well under a millisecond) and are
// recomputed, as are the variables (from the live graph) and the inputs' data (never stored).
//
// File: `<cacheRoot>/plans/<key>.json`: the key on the first line, the sha256 of the content on
// the second, the content (JSON) after. Written atomically (temporary file, rename); on load the
// key and checksum are verified, and an entry that fails (or whose content does not fit the
// program) is counted, removed and rebuilt: never trusted. A folder that cannot be written moves the
// process to its private folder (ffi/load.ts cacheWrite).
import { readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { cacheMkdir, cacheRename, cacheRoot, cacheWrite, cacheWriteFile, clearFolderAt, tempName } from "../../ffi/load";
import { backends } from "../backends";
import type { Device } from "../device";
import { compilerIdentity, type Kernel } from "../kernel";
import type { LazyNode } from "./ast";
import { generate, launcher, prelude, type GeneratedKernel, type LaunchGeometry, type Lang } from "./codegen";
import { decodeIR, encodeIR, type KernelIR } from "./ir";
import type { Scheduled, ScheduledKernel, ScheduleOptions } from "./scheduler";
import type { Dim } from "./variable";

/** Bump when the scheduler, the lowering, the IR or the code generators change their output. */
// 2: dtypes (float16, bfloat16, int8, uint8, bool, int64; comparisons give bool); the key holds
// every node's dtype (structureKey) and the kernels' buffer dtypes (their lowered text)
// 3: kernels named after what they compute (names.ts), not k_<hash>
export const PLAN_CACHE_VERSION = 4;

// The modules whose behaviour a cached plan records. Their size and mtime are part of every key,
// so an edited compiler (a forgotten version bump) misses instead of serving stale kernels.
const COMPILER_MODULES = ["ast.ts", "dtype.ts", "ir.ts", "symbolic.ts", "view.ts", "scheduler.ts", "lower.ts", "names.ts", "codegen.ts", "cache.ts", "../backends/dialect.ts"];
let modulesStamp: string | undefined;
function compilerModulesStamp(): string {
  if (modulesStamp !== undefined) return modulesStamp;
  let s = "";
  try {
    for (const f of COMPILER_MODULES) {
      const st = statSync(join(import.meta.dir, f));
      s += `${f}:${st.size}:${st.mtimeMs};`;
    }
  } catch {
    s = "unstamped"; // bundled or moved: PLAN_CACHE_VERSION alone tells versions apart
  }
  return (modulesStamp = s);
}

export interface CachedPlanKernel {
  readonly target: number;
  readonly inputs: readonly number[];
  readonly name: string;
  readonly body: string;
  readonly signature: readonly ("buffer" | "i32")[];
  readonly vars: readonly string[];
  readonly geometry: LaunchGeometry;
  /** JSON text of encodeIR(ir). */
  readonly ir: string;
}

export interface CachedPlan {
  readonly lang: Lang;
  /** Number of nodes in the program (a sanity check of the positions). */
  readonly nodes: number;
  readonly kernels: readonly CachedPlanKernel[];
}

/** What the plan cache did in this process. */
export const planCacheCounters = { hits: 0, misses: 0, rebuilt: 0 };

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

function dimKey(d: Dim): string {
  return typeof d === "number" ? String(d) : `${d.name}:${d.min}:${d.max}`;
}

function shapeKey(s: readonly Dim[]): string {
  let out = "";
  for (let i = 0; i < s.length; i++) out += (i ? "," : "") + dimKey(s[i]!);
  return out;
}

function argKey(n: LazyNode): string {
  const a = n.arg;
  switch (a.op) {
    case "buffer": return "buf"; // data is never part of the key
    case "const": return `c${Object.is(a.value, -0) ? "-0" : String(a.value)}`;
    case "arange": return `ar${a.start},${a.step}`;
    case "rand": return `rn${a.seed},${a.normal ? 1 : 0}`;
    case "varconst": return `vc${shapeKey(a.dims)}`;
    case "unary": case "binary": return a.fn;
    case "reduce": return `${a.fn}${a.axes.join(",")}`;
    case "view":
      return a.st.views
        .map((v) => `[${shapeKey(v.shape)}]s${v.strides.join(",")}o${v.offset}m${v.mask ? JSON.stringify(v.mask) : ""}`)
        .join("|");
    case "where": case "cast": case "bitcast": case "contiguous": return "";
    case "gather": return `g${a.axis}`;
  }
}

/**
 * The structural key of a program: `nodes` in topological order (toposort), `outputs` among them,
 * `pos` each node's position in `nodes`. One walk; every cache of the tensor compiler keys on it.
 */
export function structureKey(nodes: readonly LazyNode[], pos: ReadonlyMap<LazyNode, number>, outputs: readonly LazyNode[]): string {
  let out = `outs=${outputs.map((o) => pos.get(o)).join(",")}\n`;
  for (const n of nodes) {
    let srcs = "";
    for (let i = 0; i < n.srcs.length; i++) srcs += (i ? "," : "") + pos.get(n.srcs[i]!);
    out += `${n.op}:${n.dtype}:${shapeKey(n.shape)}:${argKey(n)}(${srcs});`;
  }
  return out;
}

/**
 * What besides the structure a plan-cache entry depends on: the schedule options that change the
 * kernels (fusion; memory planning is recomputed from the live options), the device by backend and
 * ordinal, by name too where its backend's code depends on the model, and the compiler.
 */
export function planCacheContext(dev: Device, opts: ScheduleOptions = {}): string {
  return `${(opts.fusion ?? true) ? "F" : "U"}|${dev.spec}|${backends[dev.backend].codeDependsOnModel ? dev.name : ""}|${compilerIdentity(dev)}`;
}

/** The plan-cache key: a hash of the structural key, `context` (planCacheContext) and the version. */
export function planKey(structure: string, context: string): string {
  const h = new Bun.CryptoHasher("sha256");
  h.update(`v${PLAN_CACHE_VERSION}|${compilerModulesStamp()}|${context}|`);
  h.update(structure);
  return h.digest("hex");
}

// ---- schedules, generated code and compiled kernels (memory) -----------------------------------

/** A schedule by position: kernel targets and inputs as positions in the program's nodes. */
interface CachedSchedule {
  kernels: { ir: KernelIR; target: number; inputs: number[] }[];
}
const schedules = new Map<string, CachedSchedule>();
const SCHEDULES_MAX = 512;

/** The kernels of a structure scheduled and lowered before (`fusion` and structural key), bound to `nodes`. */
export function cachedSchedule(fusion: boolean, structure: string, nodes: readonly LazyNode[]): ScheduledKernel[] | null {
  const hit = schedules.get(`${fusion ? "F" : "U"}|${structure}`);
  return hit ? hit.kernels.map((k) => ({ ir: k.ir, target: nodes[k.target]!, inputs: k.inputs.map((i) => nodes[i]!) })) : null;
}

export function rememberSchedule(fusion: boolean, structure: string, kernels: readonly ScheduledKernel[], pos: ReadonlyMap<LazyNode, number>): void {
  if (schedules.size >= SCHEDULES_MAX) schedules.delete(schedules.keys().next().value!);
  schedules.set(`${fusion ? "F" : "U"}|${structure}`, { kernels: kernels.map((k) => ({ ir: k.ir, target: pos.get(k.target)!, inputs: k.inputs.map((n) => pos.get(n)!) })) });
}

const generated = new Map<string, GeneratedKernel>();

/** The generated code of a lowered kernel in `lang` (generated once per kernel name). */
export function generateCached(ir: KernelIR, lang: Lang): GeneratedKernel {
  const key = `${lang}:${ir.name}`;
  let g = generated.get(key);
  if (!g) {
    g = generate(ir, lang);
    if (generated.size > 4096) generated.clear();
    generated.set(key, g);
  }
  return g;
}

const kernels = new WeakMap<Device, Map<string, Kernel>>();

/** The compiled kernels of `dev`, by kernel name (an entry whose module was disposed is stale). */
export function kernelCache(dev: Device): Map<string, Kernel> {
  let cache = kernels.get(dev);
  if (!cache) kernels.set(dev, (cache = new Map()));
  return cache;
}

// Entries this process has read or written, so that a program prepared again in the same process
// does not go back to disk.
const memory = new Map<string, CachedPlan>();
const MEMORY_MAX = 256;

function remember(key: string, plan: CachedPlan): void {
  if (memory.size >= MEMORY_MAX) memory.delete(memory.keys().next().value!);
  memory.set(key, plan);
}

/** Forget the entries held in memory (tests use it to make the next prepare read the disk). */
export function forgetPlanCacheMemory(): void {
  memory.clear();
}

function planDir(): string {
  return join(cacheRoot(), "plans");
}

function sha256(s: string): string {
  const h = new Bun.CryptoHasher("sha256");
  h.update(s);
  return h.digest("hex");
}

/** The cached plan for `key` (verified), or null: absent, or corrupt (then counted and removed). */
export function loadPlan(key: string): CachedPlan | null {
  const m = memory.get(key);
  if (m) return m;
  const file = join(planDir(), `${key}.json`);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    if ((e as { code?: string }).code === "ENOENT") return null;
    discardPlan(key); // a folder where the entry belongs, say: removed, rebuilt
    return null;
  }
  try {
    const a = text.indexOf("\n");
    const b = a < 0 ? -1 : text.indexOf("\n", a + 1);
    if (b < 0) throw new Error("truncated");
    if (text.slice(0, a) !== key) throw new Error("key mismatch");
    const content = text.slice(b + 1);
    if (sha256(content) !== text.slice(a + 1, b)) throw new Error("checksum mismatch");
    const plan = JSON.parse(content) as CachedPlan;
    if (!plan || typeof plan !== "object" || !Array.isArray(plan.kernels)) throw new Error("bad content");
    remember(key, plan);
    return plan;
  } catch {
    discardPlan(key);
    return null;
  }
}

/** Count and remove a bad entry (unreadable, or not fitting the program it is keyed by). */
export function discardPlan(key: string): void {
  planCacheCounters.rebuilt++;
  memory.delete(key);
  try {
    rmSync(join(planDir(), `${key}.json`), { recursive: true, force: true }); // a folder in its place included
  } catch {
    /* storePlan replaces it, or falls back */
  }
}

/**
 * Store `plan` under `key`, atomically. A write fault (read-only, full, something in the way)
 * moves the process to its private folder and the plan is stored there (cacheWrite); where even
 * that fails, the plan is still prepared, only not cached.
 */
export function storePlan(key: string, plan: CachedPlan): void {
  remember(key, plan);
  const content = JSON.stringify(plan);
  try {
    cacheWrite(() => {
      const dir = planDir();
      const file = join(dir, `${key}.json`);
      const tmp = tempName(file);
      try {
        cacheMkdir(dir);
        clearFolderAt(file);
        cacheWriteFile(tmp, `${key}\n${sha256(content)}\n${content}`);
        cacheRename(tmp, file);
      } finally {
        rmSync(tmp, { force: true });
      }
    }, "prepare");
  } catch {
    /* not even the private folder: not cached */
  }
}

// ---- to and from a prepared plan ---------------------------------------------------------------

/** The cached description of a freshly scheduled and generated plan. */
export function planToCache(sched: Scheduled, gens: readonly GeneratedKernel[], nodes: readonly LazyNode[], lang: Lang): CachedPlan {
  const pos = new Map<LazyNode, number>();
  for (let i = 0; i < nodes.length; i++) pos.set(nodes[i]!, i);
  return {
    lang,
    nodes: nodes.length,
    kernels: sched.kernels.map((k, i) => {
      const g = gens[i]!;
      return {
        target: pos.get(k.target)!,
        inputs: k.inputs.map((n) => pos.get(n)!),
        name: g.name,
        body: g.body,
        signature: g.signature,
        vars: k.ir.vars,
        geometry: g.geometry,
        ir: JSON.stringify(encodeIR(k.ir)),
      };
    }),
  };
}

function fail(what: string): never {
  throw new Error(`plan cache entry does not fit the program: ${what}`);
}

/**
 * The schedule and generated kernels of a cached plan, bound to this program's live nodes. Checks
 * that the entry fits the program (throws otherwise: the caller discards it and rebuilds). Each
 * kernel's IR is decoded only when read.
 */
export function planFromCache(
  c: CachedPlan,
  nodes: readonly LazyNode[],
  outputs: readonly LazyNode[],
  vars: Scheduled["vars"],
  lang: Lang,
): { sched: Scheduled; gens: GeneratedKernel[]; kvars: (readonly string[])[] } {
  if (c.lang !== lang) fail("language");
  if (c.nodes !== nodes.length) fail("node count");
  const realized = new Set<LazyNode>();
  const inputs: LazyNode[] = [];
  for (const n of nodes) if (n.op === "buffer") {
    inputs.push(n);
    realized.add(n);
  }
  const at = (p: unknown): LazyNode => {
    if (typeof p !== "number" || !Number.isInteger(p) || p < 0 || p >= nodes.length) fail(`position ${String(p)}`);
    return nodes[p]!;
  };
  const pre = prelude(lang);
  const kernels: ScheduledKernel[] = [];
  const gens: GeneratedKernel[] = [];
  const kvars: (readonly string[])[] = [];
  for (const k of c.kernels) {
    const target = at(k.target);
    if (target.op === "buffer" || realized.has(target)) fail("kernel target");
    if (!Array.isArray(k.inputs) || !Array.isArray(k.signature) || !Array.isArray(k.vars)) fail("kernel fields");
    const kin = k.inputs.map(at);
    for (const n of kin) if (!realized.has(n)) fail("a kernel reads a value not yet computed");
    for (const v of k.vars) if (!vars.has(v)) fail(`variable ${v}`);
    if (k.signature.length !== 1 + kin.length + k.vars.length) fail("signature");
    if (typeof k.name !== "string" || typeof k.body !== "string" || typeof k.ir !== "string" || !k.geometry || !Array.isArray(k.geometry.dims))
      fail("kernel fields");
    realized.add(target);
    let ir: KernelIR | undefined;
    const irText = k.ir;
    kernels.push({
      get ir(): KernelIR {
        return (ir ??= decodeIR(JSON.parse(irText)));
      },
      target,
      inputs: kin,
    });
    gens.push({ lang, name: k.name, source: pre + k.body, body: k.body, signature: k.signature, geometry: k.geometry, launch: launcher(k.geometry) });
    kvars.push(k.vars);
  }
  for (const o of outputs) if (!realized.has(o)) fail("an output is not computed");
  return { sched: { kernels, outputs: [...outputs], inputs, realized: [...inputs, ...kernels.map((k) => k.target)], vars }, gens, kvars };
}
