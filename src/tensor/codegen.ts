// Code generation from the lowered kernel form (ir.ts) to C for the CPU backend, CUDA C and
// the Metal Shading Language. The expression DAG is emitted once per scope, every node a named
// local (common sub-expressions are shared by construction).
//
// CPU: the output index space is seen as ROWS (all dims but the last) × COLS (the last dim) and
//   cut into tiles; a tile is one CPU "block", so the shim spreads tiles over its thread pool.
//   Elementwise tiles run a plain inner loop over columns that the C compiler vectorizes.
//   Reduce tiles keep a TR×TC block of accumulators (6×16 when the output is wide: the shape
//   of a register-blocked matmul micro-kernel) or, when the output is narrow, 8 accumulator
//   lanes split over the innermost reduce axis, and run the reduce loop around them.
// GPU (CUDA, Metal): one thread per output element, the reduce loop in the thread; a reduce that
//   is long against its number of outputs (a full sum, a softmax's or a layer norm's rows) gets a
//   block per output instead, its threads splitting the reduce and combining in shared memory.
//
// One file for a reason, though over 600 lines: the three dialects share every emitter here and
// differ only through the dialect record (src/backends/dialect.ts); splitting by backend would
// bring back the per-backend copies the record removed.
import type { DType } from "./ast";
import { dialects, type DTypeHelper, type Lang } from "../backends/dialect";
import { isFloat, isHalf } from "./dtype";
import { constVal, kdimMax, kdimValue, type Expr, type KDim, type KernelIR } from "./ir";

export type { Lang };

export interface GeneratedKernel {
  readonly lang: Lang;
  readonly name: string;
  /** Standalone source (prelude + kernel). */
  readonly source: string;
  /** The kernel alone, to join with others after one prelude(lang) in a module. */
  readonly body: string;
  /** Argument types for Module.kernel. */
  readonly signature: readonly ("buffer" | "i32")[];
  /** What launch() computes grids from (plain data: the plan cache stores it). */
  readonly geometry: LaunchGeometry;
  /** Grid and block for given variable values. */
  launch(vals: ReadonlyMap<string, number>): { grid: number; block: number; elements: number };
}

/** The inputs of a kernel's grid computation: its index space and, on the CPU, its tiles. */
export interface LaunchGeometry {
  readonly lang: Lang;
  readonly dims: readonly KDim[];
  readonly reduce: boolean;
  /** CPU tiles (TR rows × TC columns; L accumulator lanes); 1 on GPUs. */
  readonly TR: number;
  readonly TC: number;
  readonly L: number;
  /** GPUs: threads per block of a block-tree reduction (one block per output); absent or 0: one thread per output. */
  readonly tree?: number;
  /** CPU reduce tiles: row tiles lie within the innermost row dimension (each index of the outer ones has its own). */
  readonly split?: boolean;
}

/** The launch function of a kernel with geometry `g` (generate() uses it; so does the plan cache). */
export function launcher(g: LaunchGeometry): (vals: ReadonlyMap<string, number>) => { grid: number; block: number; elements: number } {
  const dims = g.dims, nd = dims.length;
  if (dialects[g.lang].shape === "tiles") {
    const colTile = g.reduce && g.L === 1 ? g.TC : g.reduce ? 1 : g.TC;
    return (vals) => {
      const cols = nd ? kdimValue(dims[nd - 1]!, vals) : 1;
      let rows = 1;
      for (let i = 0; i < nd - 1; i++) rows *= kdimValue(dims[i]!, vals);
      const elements = rows * cols;
      const inner = g.split ? kdimValue(dims[nd - 2]!, vals) : 0;
      const rowTiles = g.split ? (rows / inner) * Math.ceil(inner / g.TR) : Math.ceil(rows / g.TR);
      const grid = elements === 0 ? 0 : rowTiles * Math.ceil(cols / colTile);
      return { grid, block: 1, elements };
    };
  }
  const tree = g.tree ?? 0;
  if (tree > 0)
    return (vals) => {
      const elements = elementsOf(dims, vals);
      return { grid: elements, block: tree, elements };
    };
  return (vals) => {
    const elements = elementsOf(dims, vals);
    return { grid: Math.ceil(elements / GPU_BLOCK), block: GPU_BLOCK, elements };
  };
}

const CPU_ELEMS_PER_TILE = 4096;

/** The type of a local computing dtype `d` (float16 / bfloat16 compute in float). */
function ctype(d: DType, lang: Lang): string {
  return dialects[lang].types[d].compute;
}

/** The element type of a buffer of dtype `d`. */
function stype(d: DType, lang: Lang): string {
  return dialects[lang].types[d].store;
}

const HALF_TAG: Partial<Record<DType, string>> = { float16: "f16", bfloat16: "bf16" };

/** A computed value `v` of dtype `d` as the buffer stores it. */
function storeValue(d: DType, v: string): string {
  const t = HALF_TAG[d];
  return t ? `bg_st_${t}(${v})` : v;
}

// ops whose float16 / bfloat16 result is exact on rounded operands (no rounding after them)
const HALF_EXACT = new Set(["load", "where", "max", "min", "neg", "abs", "floor", "ceil", "trunc", "rint"]);

/** The dtype helpers (dialect.ts) kernel `ir` calls, each once per module behind an include guard. */
function dtypeHelpers(ir: KernelIR, lang: Lang): string {
  const need = new Set<DTypeHelper>();
  const seen = new Set<Expr>();
  const visit = (e: Expr) => {
    if (seen.has(e)) return;
    seen.add(e);
    if (e.dtype === "float16") need.add("f16");
    if (e.dtype === "bfloat16") need.add("bf16");
    if (e.dtype === "int64") need.add("i64");
    if (e.op === "bitcast") {
      const a = e.srcs[0]!.dtype;
      if (a === "float32" || e.dtype === "float32") need.add("bc32");
      if (isHalf(a) && isHalf(e.dtype)) need.add("bc16").add("f16").add("bf16");
    }
    e.srcs.forEach(visit);
  };
  [ir.value, ir.store, ...(ir.reduce ? [ir.reduce.body] : [])].forEach(visit);
  for (const b of ir.bufs) if (HALF_TAG[b.dtype]) need.add(HALF_TAG[b.dtype] as DTypeHelper);
  const order: DTypeHelper[] = ["f16", "bf16", "i64", "bc32", "bc16"];
  const d = dialects[lang];
  return order.filter((h) => need.has(h)).map((h) => `#ifndef BG_DT_${h.toUpperCase()}\n#define BG_DT_${h.toUpperCase()}\n${d.dtypeHelpers[h]}\n#endif\n`).join("");
}

function floatLit(v: number, lang: Lang): string {
  if (Number.isNaN(v)) return dialects[lang].nan;
  if (v === Infinity) return dialects[lang].inf;
  if (v === -Infinity) return dialects[lang].negInf;
  if (Object.is(v, -0)) return "(-0.0f)";
  let s = v.toPrecision(9);
  if (!/[.e]/.test(s)) s += ".0";
  return `${s}f`;
}

function intLit(v: number): string {
  return v === -2147483648 ? "(-2147483647-1)" : v < 0 ? `(${v})` : String(v);
}

function exprConst(e: Expr, lang: Lang): string {
  const v = constVal(e);
  if (isFloat(e.dtype)) return floatLit(v, lang);
  if (e.dtype === "int64") {
    // exact digits (a JS number past 2^53 prints rounded), the minimum as an expression
    const b = BigInt.asIntN(64, BigInt(v));
    const lit = b === -(2n ** 63n) ? "(-9223372036854775807LL-1)" : b < 0n ? `(${b}LL)` : `${b}LL`;
    return `((${dialects[lang].int64})${lit})`;
  }
  return intLit(v);
}

interface Names {
  gidx(axis: number): string;
  ridx(axis: number): string;
  acc: string;
}

/** Emits the nodes of a DAG as locals; `known` maps already-emitted nodes to their names. */
class Emitter {
  readonly lines: string[] = [];
  readonly known: Map<Expr, string>;
  readonly lang: Lang;
  readonly names: Names;
  readonly prefix: string;
  /** Integer nodes computed in 64 bits (index arithmetic of a kernel whose indices can pass 2³¹-1). */
  readonly wide: ReadonlySet<Expr>;
  /** Math names that replace the dialect's (a CPU reduce body calls libm's expf; see LIBM_EXP). */
  math: Partial<Record<string, string>> = {};
  constructor(lang: Lang, names: Names, known: Map<Expr, string>, prefix: string, wide: ReadonlySet<Expr> = NO_WIDE) {
    this.lang = lang;
    this.names = names;
    this.known = known;
    this.prefix = prefix;
    this.wide = wide;
  }

  ref(e: Expr): string {
    const k = this.known.get(e);
    if (k !== undefined) return k;
    switch (e.op) {
      case "const": return exprConst(e, this.lang);
      case "gidx": return this.names.gidx(e.arg as number);
      case "ridx": return this.names.ridx(e.arg as number);
      case "var": return `v_${e.arg as string}`;
      case "acc": return this.names.acc;
    }
    const s = e.srcs.map((x) => this.ref(x));
    let code = this.code(e, s);
    if (isHalf(e.dtype) && !HALF_EXACT.has(e.op) && !this.wide.has(e)) code = `bg_rnd_${HALF_TAG[e.dtype]!}(${code})`;
    const name = `${this.prefix}${e.id}`;
    const type = this.wide.has(e) ? indexType(this.lang) : ctype(e.dtype, this.lang);
    this.lines.push(`const ${type} ${name} = ${code};`);
    this.known.set(e, name);
    return name;
  }

  code(e: Expr, s: string[]): string {
    const lang = this.lang;
    const d = dialects[lang];
    const [a, b, c] = s;
    const isF = isFloat(e.dtype);
    const bool = d.bool;
    if (e.dtype === "int64" && !this.wide.has(e)) {
      // 64-bit forms of the int helpers
      switch (e.op) {
        case "div": return `bg_ldiv(${a}, ${b})`;
        case "neg": return `bg_lneg(${a})`;
        case "abs": return `(${a} < 0 ? bg_lneg(${a}) : ${a})`;
        case "pow": return `bg_lpow(${a}, ${b})`;
        case "fmod": return `bg_lmod(${a}, ${b})`;
      }
    }
    if (this.wide.has(e)) {
      // 64-bit forms of the int helpers (the int32 ones would truncate an index)
      switch (e.op) {
        case "div": return `bg_idiv64(${a}, ${b})`;
        case "neg": return `(-${a})`;
        case "abs": return `(${a} < 0 ? -${a} : ${a})`;
        case "floordiv": return `bg_floordiv64(${a}, ${b})`;
        case "floormod": return `bg_floormod64(${a}, ${b})`;
      }
    }
    switch (e.op) {
      case "load": {
        const ht = HALF_TAG[e.dtype];
        const ld = ht ? `bg_ld_${ht}(b${e.arg as number}[${a}])` : `b${e.arg as number}[${a}]`;
        return s.length > 1 ? `(${b} ? ${ld} : ${isF ? "0.0f" : "0"})` : ld;
      }
      case "rand": return `bg_rand(${e.arg as number}u, ${a})`;
      case "randn": return `bg_randn(${e.arg as number}u, ${a})`;
      case "add": return `(${a} + ${b})`;
      case "sub": return `(${a} - ${b})`;
      case "mul": return `(${a} * ${b})`;
      case "div": return isF ? `(${a} / ${b})` : `bg_idiv(${a}, ${b})`;
      // C, float: a branch-free select (same result as the ternary, NaN and -0 included), so
      // that GCC does not turn a max against a constant into control flow and give up vectorizing
      case "max": return e.dtype === "float32" && d.fmax ? `${d.fmax}(${a}, ${b})` : `(${a} > ${b} ? ${a} : ${b})`;
      case "min": return e.dtype === "float32" && d.fmin ? `${d.fmin}(${a}, ${b})` : `(${a} < ${b} ? ${a} : ${b})`;
      case "neg": return isF ? `(-${a})` : `bg_ineg(${a})`;
      case "abs": return isF ? `${d.math.abs}(${a})` : `(${a} < 0 ? bg_ineg(${a}) : ${a})`;
      case "pow": return isF ? `${d.math.pow}(${a}, ${b})` : `bg_ipow(${a}, ${b})`;
      case "tanh": case "exp": case "log": case "sqrt": case "sin": case "cos":
      case "exp2": case "log2": case "tan": case "atan": case "asin": case "acos": case "sinh": case "cosh":
      case "floor": case "ceil": case "trunc": case "rint": case "asinh": case "acosh": case "atanh":
        return `${this.math[e.op] ?? d.math[e.op]}(${a})`;
      case "fmod": return isF ? `${d.math.fmod}(${a}, ${b})` : `bg_imod(${a}, ${b})`;
      case "lt": return bool(`${a} < ${b}`);
      case "le": return bool(`${a} <= ${b}`);
      case "eq": return bool(`${a} == ${b}`);
      case "ne": return bool(`${a} != ${b}`);
      case "and": return bool(`${a} && ${b}`);
      case "where": return `(${a} != 0 ? ${b} : ${c})`;
      case "cast": return e.dtype === "bool" ? `((${ctype(e.dtype, lang)})(${a} != 0))` : `((${ctype(e.dtype, lang)})${a})`;
      case "bitcast": {
        const from = e.srcs[0]!.dtype;
        if (!isFloat(from) && !isFloat(e.dtype)) return `((${ctype(e.dtype, lang)})${a})`; // int8 ↔ uint8: two's complement
        const tag = (t: DType) => (t === "float32" ? "f32" : t === "int32" ? "i32" : HALF_TAG[t]!);
        return `bg_bc_${tag(from)}_${tag(e.dtype)}(${a})`;
      }
      case "idiv": return `(${a} / ${b})`;
      case "mod": return `(${a} % ${b})`;
      case "floordiv": return `bg_floordiv(${a}, ${b})`;
      case "floormod": return `bg_floormod(${a}, ${b})`;
    }
    throw new Error(`codegen: ${e.op}`);
  }
}

function dependsOn(e: Expr, ops: ReadonlySet<string>, memo: Map<Expr, boolean>): boolean {
  let r = memo.get(e);
  if (r !== undefined) return r;
  r = ops.has(e.op) || e.srcs.some((s) => dependsOn(s, ops, memo));
  memo.set(e, r);
  return r;
}

/** Nodes of `roots` not depending on any op in `ops`, emitted in `em` first (hoisting). */
function hoist(em: Emitter, roots: readonly Expr[], ops: ReadonlySet<string>): void {
  const memo = new Map<Expr, boolean>();
  const visit = (e: Expr, seen: Set<Expr>) => {
    if (seen.has(e)) return;
    seen.add(e);
    if (!dependsOn(e, ops, memo)) {
      if (e.srcs.length) em.ref(e);
      return;
    }
    for (const s of e.srcs) visit(s, seen);
  };
  const seen = new Set<Expr>();
  for (const r of roots) visit(r, seen);
}

function dimExpr(d: KDim): string {
  return typeof d === "number" ? String(d) : `v_${d.var}`;
}

// ---- 64-bit indexing on GPUs ---------------------------------------------------------------------
// A GPU kernel indexes with int unless an element count or an index can reach 2³¹: then the thread
// id, the index space (D, total, rem, g, r) and every integer node of the index arithmetic (what
// feeds a load's or the store's index) are 64-bit. Bounds come from interval arithmetic over the
// index expressions, with dims and variables at their maxima; a loaded value counts as any int32.

const NO_WIDE: ReadonlySet<Expr> = new Set();
const INT32_MAX = 2 ** 31 - 1;

function indexType(lang: Lang): string {
  return dialects[lang].int64;
}

type Interval = readonly [number, number];

/** The integer nodes of `ir`'s index arithmetic, and whether any can leave the int32 range. */
function indexNodes(ir: KernelIR): { nodes: Set<Expr>; overflow: boolean } {
  const varMax = new Map<string, number>();
  for (const d of [...ir.dims, ...(ir.reduce?.dims ?? [])]) if (typeof d !== "number") varMax.set(d.var, Math.max(varMax.get(d.var) ?? 0, d.max));
  const range = new Map<Expr, Interval>();
  const full: Interval = [-(2 ** 31), INT32_MAX];
  const bound = (e: Expr): Interval => {
    let r = range.get(e);
    if (r) return r;
    const s = e.srcs.map(bound);
    const [a, b] = [s[0] ?? full, s[1] ?? full];
    const corners = (f: (x: number, y: number) => number): Interval => {
      const v = [f(a[0], b[0]), f(a[0], b[1]), f(a[1], b[0]), f(a[1], b[1])];
      return [Math.min(...v), Math.max(...v)];
    };
    switch (e.op) {
      case "const": r = [constVal(e), constVal(e)]; break;
      case "gidx": r = [0, Math.max(0, kdimMax(ir.dims[e.arg as number]!) - 1)]; break;
      case "ridx": r = [0, Math.max(0, kdimMax(ir.reduce!.dims[e.arg as number]!) - 1)]; break;
      case "var": r = [0, varMax.get(e.arg as string) ?? INT32_MAX]; break;
      case "add": r = [a[0] + b[0], a[1] + b[1]]; break;
      case "sub": r = [a[0] - b[1], a[1] - b[0]]; break;
      case "mul": r = corners((x, y) => x * y); break;
      case "idiv": case "floordiv": case "div": r = [Math.min(a[0], 0, -a[1]), Math.max(a[1], 0, -a[0])]; break;
      case "mod": case "floormod": { const m = Math.max(Math.abs(b[0]), Math.abs(b[1])); r = [-m, m]; break; }
      case "max": r = [Math.max(a[0], b[0]), Math.max(a[1], b[1])]; break;
      case "min": r = [Math.min(a[0], b[0]), Math.min(a[1], b[1])]; break;
      case "neg": r = [-a[1], -a[0]]; break;
      case "abs": r = [0, Math.max(Math.abs(a[0]), Math.abs(a[1]))]; break;
      case "where": r = [Math.min(s[1]![0], s[2]![0]), Math.max(s[1]![1], s[2]![1])]; break;
      case "lt": case "le": case "eq": case "ne": case "and": r = [0, 1]; break;
      default: r = full; // load, cast, pow, acc: any int32
    }
    range.set(e, r);
    return r;
  };
  const nodes = new Set<Expr>();
  let overflow = false;
  const visit = (e: Expr) => {
    if (e.dtype !== "int32" || nodes.has(e)) return;
    nodes.add(e);
    const [lo, hi] = bound(e);
    if (lo < -(2 ** 31) || hi > INT32_MAX) overflow = true;
    if (e.op === "load") return; // its own index is a root of its own
    for (const x of e.srcs) visit(x);
  };
  const roots: Expr[] = [ir.store];
  const seen = new Set<Expr>();
  const findLoads = (e: Expr) => {
    if (seen.has(e)) return;
    seen.add(e);
    if (e.op === "load") roots.push(e.srcs[0]!);
    e.srcs.forEach(findLoads);
  };
  findLoads(ir.value);
  findLoads(ir.store);
  if (ir.reduce) findLoads(ir.reduce.body);
  roots.forEach(visit);
  return { nodes, overflow };
}

/** The nodes to compute in 64 bits for `lang` (none on the CPU, none when int32 cannot overflow). */
export function wideIndexNodes(ir: KernelIR, lang: Lang): ReadonlySet<Expr> | null {
  if (!dialects[lang].index64) return null;
  let elements = 1;
  for (const d of [...ir.dims, ...(ir.reduce?.dims ?? [])]) elements *= kdimMax(d);
  const { nodes, overflow } = indexNodes(ir);
  return overflow || elements > INT32_MAX ? nodes : null;
}

// ---- preludes ----------------------------------------------------------------------------------

const HASH_BODY = `x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16; return x;`;

const preludes = new Map<Lang, string>();
export function prelude(lang: Lang): string {
  let p = preludes.get(lang);
  if (p === undefined) preludes.set(lang, (p = makePrelude(lang)));
  return p;
}

function makePrelude(lang: Lang): string {
  const d = dialects[lang];
  const u = d.u32;
  const fn = d.helperQualifiers;
  const m = d.math;
  const lines = [
    `${fn} int bg_ineg(int a) { return (int)(0u - (${u})a); }`,
    `${fn} int bg_idiv(int a, int b) { return b == 0 ? 0 : b == -1 ? bg_ineg(a) : a / b; }`,
    `${fn} int bg_floordiv(int a, int b) { int q = a / b; return ((a % b) != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }`,
    `${fn} int bg_floormod(int a, int b) { int m = a % b; return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }`,
    // C's remainder without its traps: x % 0 and x % -1 (INT_MIN % -1 overflows) give 0
    `${fn} int bg_imod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }`,
    `${fn} int bg_ipow(int a, int b) { if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0; ${u} r = 1u, x = (${u})a; while (b > 0) { if (b & 1) r *= x; x *= x; b >>= 1; } return (int)r; }`,
    `${fn} ${u} bg_hash(${u} x) { ${HASH_BODY} }`,
    `${fn} float bg_rand(${u} mix, int i) { return (float)(bg_hash(bg_hash((${u})i) ^ mix) >> 8) * 5.9604644775390625e-8f; }`,
    `${fn} float bg_randn(${u} mix, int i) { ${u} c = (${u})i * 2u; float u1 = ((float)(bg_hash(bg_hash(c) ^ mix) >> 8) + 1.0f) * 5.9604644775390625e-8f; float u2 = (float)(bg_hash(bg_hash(c + 1u) ^ mix) >> 8) * 5.9604644775390625e-8f; return ${m.sqrt}(-2.0f * ${m.log}(u1)) * ${m.cos}(6.2831855f * u2); }`,
  ];
  if (d.index64) {
    const L = indexType(lang);
    lines.push(
      `${fn} ${L} bg_idiv64(${L} a, ${L} b) { return b == 0 ? 0 : a / b; }`,
      `${fn} ${L} bg_floordiv64(${L} a, ${L} b) { ${L} q = a / b; return ((a % b) != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }`,
      `${fn} ${L} bg_floormod64(${L} a, ${L} b) { ${L} m = a % b; return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }`,
    );
  }
  return `${d.preludeHead}${lines.join("\n")}\n${d.hostVectorHelpers ? C_MATH_PRELUDE + VEC_PRELUDE : ""}`;
}

// the identity of max / min for each integer dtype
const INT_MIN_OF: Partial<Record<DType, string>> = { int32: "(-2147483647-1)", int8: "(-128)", uint8: "0", bool: "0" };
const INT_MAX_OF: Partial<Record<DType, string>> = { int32: "2147483647", int8: "127", uint8: "255", bool: "1" };

function reduceInit(ir: KernelIR, lang: Lang): string {
  const dt = ir.reduce!.body.dtype;
  const f = isFloat(dt);
  const L = dialects[lang].int64;
  if (ir.reduce!.fn === "sum") return f ? "0.0f" : "0";
  if (ir.reduce!.fn === "min") return f ? floatLit(Infinity, lang) : dt === "int64" ? `((${L})9223372036854775807LL)` : INT_MAX_OF[dt]!;
  if (ir.reduce!.fn === "prod") return f ? "1.0f" : "1";
  return f ? floatLit(-Infinity, lang) : dt === "int64" ? `((${L})(-9223372036854775807LL-1))` : INT_MIN_OF[dt]!;
}

function combine(ir: KernelIR, acc: string, v: string): string {
  const fn = ir.reduce!.fn;
  if (fn === "prod") return `${acc} * ${v}`;
  return fn === "sum" ? `${acc} + ${v}` : fn === "min" ? `(${acc} < ${v} ? ${acc} : ${v})` : `(${acc} > ${v} ? ${acc} : ${v})`;
}

/**
 * A float32 sum of products (a matmul's, a dot product's): on the CPU the product is accumulated
 * with one fused multiply-add (bg_fmaf, bg_vfma8/16) where the machine has one. CPU kernels are
 * compiled with -ffp-contract=off, so this is the only fusion, and it is in the source: every
 * optimization level, and every compiler, gives the same bits (tiered compilation swaps a kernel
 * built at -O0 for its -O3 build without changing a result).
 */
function fusedProduct(red: NonNullable<KernelIR["reduce"]>): boolean {
  return red.fn === "sum" && red.body.dtype === "float32" && red.body.op === "mul" && red.body.srcs.length === 2;
}

// Float32 sums are blocked: the accumulators take at most SUM_BLOCK values each (per lane), then
// are added into running totals and restart from zero, so the rounding error grows with
// SUM_BLOCK + n/SUM_BLOCK rather than with n (a float32 sum of 2^25 ones is exact: every partial
// and every total is an integer below 2^24 times a power of two). The innermost reduce loop is
// cut where the count since the last flush reaches the block, whatever the nesting above it.
const SUM_BLOCK = 4096;

function blockedSum(ir: KernelIR): boolean {
  return ir.reduce!.fn === "sum" && ir.reduce!.body.dtype === "float32";
}

/**
 * The innermost reduce loop over `v` in [0, extent) stepping `step`, cut into runs so that the
 * counter `bg_n` (elements since the last flush, declared by the caller) never passes
 * SUM_BLOCK·step; `flush` moves the accumulators into the totals. With `declare`, `v` is the
 * loop's own; otherwise the caller's, left at the first index not taken (fewer than `step` from
 * the end).
 */
function blockedLoop(v: string, extent: string, step: number, it: string, body: string[], flush: string[], pad: string, declare: boolean, unrolled?: { by: number; body: string[] }): string[] {
  const cap = SUM_BLOCK * step;
  const cond = step === 1 ? `${v} < bg_re` : `${v} + ${step} <= bg_re`;
  const more = step === 1 ? `${v} < ${extent}` : `${v} + ${step} <= ${extent}`;
  // `unrolled`: `by` indices a pass first (its body does `by` indices from v in order), the rest
  // of the run one `step` a pass; the runs, and so the flushes, are the same
  const wide = unrolled ? [`${pad}  for (; ${v} + ${unrolled.by} <= bg_re; ${v} += ${unrolled.by}) {`, ...unrolled.body.map((l) => `${pad}    ${l}`), `${pad}  }`] : [];
  return [
    ...(declare ? [`${pad}for (${it} ${v} = 0; ${more};) {`] : [`${pad}${v} = 0;`, `${pad}while (${more}) {`]),
    `${pad}  ${it} bg_re = ${v} + (${cap} - bg_n); if (bg_re > ${extent}) bg_re = ${extent};`,
    `${pad}  const ${it} bg_rb = ${v};`,
    ...wide,
    `${pad}  for (; ${cond}; ${v} += ${step}) {`,
    ...body.map((l) => `${pad}    ${l}`),
    `${pad}  }`,
    `${pad}  bg_n += ${v} - bg_rb;`,
    `${pad}  if (bg_n > ${cap - step}) {`,
    ...flush.map((l) => `${pad}    ${l}`),
    `${pad}    bg_n = 0;`,
    `${pad}  }`,
    `${pad}}`,
  ];
}

function signatureOf(ir: KernelIR): ("buffer" | "i32")[] {
  return [...ir.bufs.map(() => "buffer" as const), ...ir.vars.map(() => "i32" as const)];
}

function elementsOf(dims: readonly KDim[], vals: ReadonlyMap<string, number>): number {
  let n = 1;
  for (const d of dims) n *= kdimValue(d, vals);
  return n;
}

// ---- GPU ------------------------------------------------------------------------------------------

const GPU_BLOCK = 256;

// Block-tree reductions: a reduce of at least TREE_MIN_REDUCE elements with at most
// TREE_OUTPUTS_PER_REDUCE outputs per reduce element (at the dims' maxima) runs one block of
// TREE_BLOCK threads per output: thread t accumulates reduce elements t, t + TREE_BLOCK, ... (a
// float32 sum blocked as SUM_BLOCK says, per thread), then the block combines its partials in
// shared memory by halving, partial t with partial t + s for s = TREE_BLOCK/2, ..., 1: a fixed
// order, so results do not vary from run to run. Thread 0 applies the epilogue and stores. Many
// outputs over a short reduce (a matmul, a convolution) keep one thread per output, whose
// neighbours read neighbouring addresses. 256 threads a block, as GPU_BLOCK: on CUDA they fit the
// register file at any kernel's register count (255 at most), and Metal launches check the
// pipeline's threadgroup limit as for every kernel.
const TREE_BLOCK = 256;
const TREE_MIN_REDUCE = 256;
const TREE_OUTPUTS_PER_REDUCE = 16;

/** Threads per block of `ir`'s block-tree reduction on a GPU, or 0 for one thread per output. */
function gpuTree(ir: KernelIR, wide: boolean): number {
  if (!ir.reduce || ir.reduce.dims.length === 0) return 0;
  let outs = 1, red = 1;
  for (const d of ir.dims) outs *= kdimMax(d);
  for (const d of ir.reduce.dims) red *= kdimMax(d);
  if (red < TREE_MIN_REDUCE || outs > red * TREE_OUTPUTS_PER_REDUCE) return 0;
  // the grid is one block per output; a 32-bit reduce counter steps TREE_BLOCK past its last index
  if (outs > INT32_MAX || (!wide && red > INT32_MAX - TREE_BLOCK)) return 0;
  return TREE_BLOCK;
}

/** The output dims D<i>, their product `total`, the bounds check and the output index g<i> of `gid`. */
function gpuOutputIndex(ir: KernelIR, it: string, out: string[], check: string): void {
  const nd = ir.dims.length;
  ir.dims.forEach((d, i) => out.push(`const ${it} D${i} = ${dimExpr(d)};`));
  out.push(`const ${it} total = ${nd ? ir.dims.map((_, i) => `D${i}`).join(" * ") : "1"};`);
  out.push(check);
  out.push(`${it} rem = gid;`);
  for (let i = nd - 1; i >= 0; i--) {
    if (i === 0) out.push(`const ${it} g0 = rem;`);
    else out.push(`const ${it} g${i} = rem % D${i}; rem /= D${i};`);
  }
}

function gpuBody(ir: KernelIR, lang: Lang, wide: ReadonlySet<Expr> | null): string[] {
  const out: string[] = [];
  const it = wide ? indexType(lang) : "int";
  gpuOutputIndex(ir, it, out, `if (gid >= total) return;`);
  const known = new Map<Expr, string>();
  const names: Names = { gidx: (i) => `g${i}`, ridx: (i) => `r${i}`, acc: "acc" };
  const w = wide ?? NO_WIDE;
  if (ir.reduce) {
    const pre = new Emitter(lang, names, known, "p", w);
    hoist(pre, [ir.reduce.body], new Set(["ridx", "acc"]));
    out.push(...pre.lines);
    const t = ctype(ir.reduce.body.dtype, lang);
    out.push(`${t} acc = ${reduceInit(ir, lang)};`);
    const nr = ir.reduce.dims.length;
    const blocked = blockedSum(ir) && nr > 0;
    if (blocked) out.push(`${t} bg_tot = 0.0f;`, `int bg_n = 0;`);
    let indent = "";
    ir.reduce.dims.forEach((d, i) => {
      if (blocked && i === nr - 1) return;
      out.push(`${indent}for (${it} r${i} = 0; r${i} < ${dimExpr(d)}; ++r${i}) {`);
      indent += "  ";
    });
    const inner = new Emitter(lang, names, new Map(known), "t", w);
    const v = inner.ref(ir.reduce.body);
    const step = [...inner.lines, `acc = ${combine(ir, "acc", v)};`];
    if (blocked) {
      out.push(...blockedLoop(`r${nr - 1}`, dimExpr(ir.reduce.dims[nr - 1]!), 1, it, step, ["bg_tot += acc; acc = 0.0f;"], indent, true));
      for (let i = nr - 2; i >= 0; i--) out.push(`${"  ".repeat(i)}}`);
      out.push(`acc += bg_tot;`);
    } else {
      out.push(...step.map((l) => indent + l));
      for (let i = nr - 1; i >= 0; i--) out.push(`${"  ".repeat(i)}}`);
    }
  }
  const post = new Emitter(lang, names, known, "e", w);
  const v = post.ref(ir.value);
  const st = post.ref(ir.store);
  out.push(...post.lines);
  out.push(`b0[${st}] = ${storeValue(ir.outDtype, v)};`);
  return out;
}

/**
 * The body of a block-tree reduction of `tb` threads a block (gpuTree): `gid` is the block's
 * output, `bg_t` the thread. The reduce dims are walked as one flat range bg_f = bg_t, bg_t + tb,
 * ...; with several dims, the indices r<i> are decoded once and then carried along as bg_f
 * steps (a division only where an index wraps).
 */
function treeBody(ir: KernelIR, lang: Lang, wide: ReadonlySet<Expr> | null, tb: number): string[] {
  const g = dialects[lang].gpu!;
  const red = ir.reduce!;
  const nr = red.dims.length;
  const t = ctype(red.body.dtype, lang);
  const it = wide ? indexType(lang) : "int";
  const out: string[] = [g.shared(t, "bg_sh", tb)];
  // every thread of a block takes this branch alike: no thread leaves before a barrier alone
  gpuOutputIndex(ir, it, out, `if (gid >= total) return; /* the whole block (grids are sized for the variables' maxima) */`);
  red.dims.forEach((d, i) => out.push(`const ${it} R${i} = ${dimExpr(d)};`));
  out.push(`const ${it} bg_R = ${red.dims.map((_, i) => `R${i}`).join(" * ")};`);
  const known = new Map<Expr, string>();
  const names: Names = { gidx: (i) => `g${i}`, ridx: (i) => (nr === 1 ? "bg_f" : `r${i}`), acc: "acc" };
  const w = wide ?? NO_WIDE;
  const pre = new Emitter(lang, names, known, "p", w);
  hoist(pre, [red.body], new Set(["ridx", "acc"]));
  out.push(...pre.lines);
  out.push(`${t} acc = ${reduceInit(ir, lang)};`);
  const blocked = blockedSum(ir);
  if (blocked) out.push(`${t} bg_tot = 0.0f;`);
  const inner = new Emitter(lang, names, new Map(known), "t", w);
  const v = inner.ref(red.body);
  const step = [...inner.lines, `acc = ${combine(ir, "acc", v)};`];
  const k = nr - 1;
  if (nr > 1) {
    // carry the step into the indices, innermost first (r0 is never wrapped: bg_f ends the loop)
    const wrap = (i: number): string => {
      if (i === 0) return "";
      return ` if (r${i} >= R${i}) { const ${it} bg_c${i} = r${i} / R${i}; r${i} -= bg_c${i} * R${i}; r${i - 1} += bg_c${i};${wrap(i - 1)} }`;
    };
    step.push(`r${k} += ${tb};${wrap(k)}`);
  }
  out.push(`if (bg_t < bg_R) {`);
  if (nr > 1) {
    out.push(`  ${it} ${red.dims.map((_, i) => `r${i}`).join(", ")};`);
    const dec = [`${it} bg_q = bg_t;`];
    for (let i = k; i >= 1; i--) dec.push(`r${i} = bg_q % R${i}; bg_q /= R${i};`);
    dec.push(`r0 = bg_q;`);
    out.push(`  { ${dec.join(" ")} }`);
  }
  out.push(`  ${it} bg_f = bg_t;`);
  if (blocked) {
    // runs of at most SUM_BLOCK of this thread's elements, each flushed into the total
    const cap = SUM_BLOCK * tb;
    out.push(`  while (bg_f < bg_R) {`);
    out.push(`    const ${it} bg_re = bg_R - bg_f > ${cap} ? bg_f + ${cap} : bg_R;`);
    out.push(`    for (; bg_f < bg_re; bg_f += ${tb}) {`);
    out.push(...step.map((l) => `      ${l}`));
    out.push(`    }`);
    out.push(`    bg_tot += acc; acc = 0.0f;`);
    out.push(`  }`);
  } else {
    out.push(`  for (; bg_f < bg_R; bg_f += ${tb}) {`);
    out.push(...step.map((l) => `    ${l}`));
    out.push(`  }`);
  }
  out.push(`}`);
  if (blocked) out.push(`acc += bg_tot;`);
  // the tree: at step s, threads t < s combine partial t + s into their own (reads [s, 2s), writes [0, s))
  out.push(`bg_sh[bg_t] = acc;`);
  out.push(g.barrier);
  for (let s = tb >> 1; s >= 1; s >>= 1) {
    const last = s === 1;
    out.push(`if (bg_t < ${s}) { const ${t} bg_o = bg_sh[bg_t + ${s}]; acc = ${combine(ir, "acc", "bg_o")};${last ? "" : " bg_sh[bg_t] = acc;"} }`);
    if (!last) out.push(g.barrier);
  }
  out.push(`if (bg_t != 0) return;`);
  const post = new Emitter(lang, names, known, "e", w);
  const val = post.ref(ir.value);
  const st = post.ref(ir.store);
  out.push(...post.lines);
  out.push(`b0[${st}] = ${storeValue(ir.outDtype, val)};`);
  return out;
}

/** A GPU kernel in `lang` (a dialect with a GPU declaration): one thread per element, or a block-tree reduction. */
function genGpu(ir: KernelIR, lang: Lang): { body: string; tree: number } {
  const g = dialects[lang].gpu!;
  const params = [
    ...ir.bufs.map((b, i) => g.buffer(i, stype(b.dtype, lang), i === 0)),
    ...ir.vars.map((v, i) => g.variable(v, ir.bufs.length + i)),
    ...g.builtins,
  ];
  const wide = wideIndexNodes(ir, lang);
  const tree = gpuTree(ir, wide !== null);
  const head = tree ? [g.blockGid(wide !== null), g.lane] : [g.gid(wide !== null)];
  const body = [...head, ...(tree ? treeBody(ir, lang, wide, tree) : gpuBody(ir, lang, wide))];
  return { body: `${dtypeHelpers(ir, lang)}${g.head(ir.name)}(${params.join(g.paramSep)}) {\n${body.map((l) => `  ${l}`).join("\n")}\n}\n`, tree };
}

// ---- CPU ------------------------------------------------------------------------------------------

interface CpuTiles {
  TR: number;
  TC: number;
  /** Accumulator lanes over the innermost reduce axis (narrow reductions). */
  L: number;
}

/** The most output rows (all dimensions but the last) a kernel has. */
function rowsMaxOf(ir: KernelIR): number {
  let rows = 1;
  for (let i = 0; i < ir.dims.length - 1; i++) rows *= kdimMax(ir.dims[i]!);
  return rows;
}

// A vector times a matrix laid out [reduce, column] (a decode step's x·W: one output row, each
// reduce index a row of W) is bound by reading W once: a tile of STREAM_COLS columns walks W row
// by row, each row's STREAM_COLS floats contiguous (512 bytes), accumulating in a column array the
// compiler keeps in vector registers and L1, and prefetches the rows STREAM_AHEAD ahead. The same
// products in the same order as the 32-column register tile (the same bits), but a 32-column tile
// read W as 128-byte pieces 3-12 KiB apart: GPT-2 small's decode matrices ran at 12.5-16 GB/s
// that way and at 19-23 GB/s this way (2 threads, AVX-512; x[3072]·W[3072,768]: 13.5 -> 21).
const STREAM_COLS = 128;
const STREAM_ROWS = 4;
const STREAM_AHEAD = 8;

/** The load of W in a row-streaming matrix-vector product (see STREAM_COLS), or null when `ir` is not one. */
function streamedLoad(ir: KernelIR): Expr | null {
  const red = ir.reduce;
  const nd = ir.dims.length;
  if (!red || red.dims.length !== 1 || !fusedProduct(red) || nd === 0 || rowsMaxOf(ir) !== 1) return null;
  if (kdimMax(ir.dims[nd - 1]!) < 2 * STREAM_COLS) return null;
  const last = nd - 1;
  const memo = new Map<Expr, number | null>();
  const colOf = (e: Expr) => colStride(e, last, memo);
  const [a, b] = red.body.srcs as [Expr, Expr];
  const isW = (e: Expr) => e.op === "load" && !e.srcs[1] && e.dtype === "float32" && colOf(e.srcs[0]!) === 1;
  const w = isW(a) ? a : isW(b) ? b : null;
  if (!w) return null;
  const x = w === a ? b : a;
  return strideIn(x, (l) => (l.op === "gidx" && (l.arg as number) === last ? 1 : 0), new Map()) === 0 ? w : null;
}

function streamsRows(ir: KernelIR): boolean {
  return streamedLoad(ir) !== null;
}

/**
 * The reduce loop of a full row-streaming tile (one output row, STREAM_COLS columns, one reduce
 * axis r0, a blocked float32 sum): STREAM_ROWS rows of W per step, their products fused into the
 * column accumulators in row order (the same operations in the same order as one row a step, so
 * the same bits), each step prefetching its rows STREAM_AHEAD ahead; the last rows of a block one
 * at a time (blockedLoop with an unrolled pass, flushing every SUM_BLOCK rows).
 */
function streamNest(ir: KernelIR, flush: string[]): string[] {
  const red = ir.reduce!;
  const w = streamedLoad(ir)!;
  const last = ir.dims.length - 1;
  const wIdx = red.body.srcs[0] === w ? 0 : 1;
  const rowNames = (row: string): Names => ({ gidx: (i) => (i === last ? "(c0 + c)" : `g${i}_[0]`), ridx: () => row, acc: "acc[0][c]" });
  // the products of `rows` reduce rows from r0, accumulated in order
  const step = (rows: number): string[] => {
    const lines: string[] = [];
    let expr = "acc[0][c]";
    for (let j = 0; j < rows; j++) {
      const em = new Emitter("c", rowNames(j ? `(r0 + ${j})` : "r0"), new Map(), `s${j}_`);
      em.math = LIBM_EXP;
      const wv = em.ref(red.body.srcs[wIdx]!), xv = em.ref(red.body.srcs[1 - wIdx]!);
      lines.push(...em.lines);
      expr = `bg_fmaf(${xv}, ${wv}, ${expr})`;
    }
    return [`for (int c = 0; c < ${STREAM_COLS}; ++c) {`, ...lines.map((l) => `  ${l}`), `  acc[0][c] = ${expr};`, `}`];
  };
  const pf = new Emitter("c", { gidx: (i) => (i === last ? "c0" : `g${i}_[0]`), ridx: () => `(r0 + ${STREAM_AHEAD})`, acc: "acc" }, new Map(), "pf");
  const pfIdx = pf.ref(w.srcs[0]!);
  const rowStride = strideIn(w.srcs[0]!, (l) => (l.op === "ridx" ? 1 : 0), new Map());
  const prefetch = rowStride === null ? [] : [
    "#if (defined(__GNUC__) || defined(__clang__)) && !defined(__TINYC__)",
    `{ ${pf.lines.join(" ")} for (int j = 0; j < ${STREAM_ROWS}; ++j) for (int c = 0; c < ${STREAM_COLS}; c += 16) __builtin_prefetch(&b${w.arg as number}[${pfIdx} + j * ${rowStride} + c]); }`,
    "#endif",
  ];
  return blockedLoop("r0", "R0", 1, "int", step(1), flush, "", true, { by: STREAM_ROWS, body: [...prefetch, ...step(STREAM_ROWS)] });
}

function cpuTiles(ir: KernelIR): CpuTiles {
  const nd = ir.dims.length;
  const colsMax = nd ? kdimMax(ir.dims[nd - 1]!) : 1;
  let rowsMax = 1;
  for (let i = 0; i < nd - 1; i++) rowsMax *= kdimMax(ir.dims[i]!);
  if (!ir.reduce) {
    const TC = Math.max(1, Math.min(colsMax, CPU_ELEMS_PER_TILE));
    const TR = Math.max(1, Math.min(rowsMax, Math.floor(CPU_ELEMS_PER_TILE / TC)));
    return { TR, TC, L: 1 };
  }
  if (streamsRows(ir)) return { TR: 1, TC: STREAM_COLS, L: 1 };
  // 6×32 when the columns come in whole 32s (AVX-512: 12 accumulators of 16 floats; otherwise the
  // two 6×16 halves one after the other), else 6×16
  // (8×32 was tried: as fast with AVX-512, but its 8-lane passes of 4 rows ran at 60–70% of 6×16)
  if (colsMax >= 16) return { TR: Math.max(1, Math.min(6, rowsMax)), TC: colsMax % 32 === 0 ? 32 : 16, L: 1 };
  const TC = Math.max(1, colsMax);
  const rd = ir.reduce.dims;
  const innerMax = rd.length ? kdimMax(rd[rd.length - 1]!) : 1;
  return { TR: Math.max(1, Math.min(4, rowsMax)), TC, L: TC === 1 && innerMax >= 16 ? 8 : 1 };
}

// ---- CPU vector tiles -------------------------------------------------------------------------------
//
// For a full TR×16 reduce tile whose body is plain arithmetic over loads that are either
// independent of the output column or contiguous in it (a matmul, a sum of products), the tile
// is written with GCC/Clang vector extensions: 2·TR accumulators of 8 floats held in registers,
// each column-dependent value computed once per 8 columns, each row-dependent one once per row.
// Anything else (a gather, a transcendental, int32) uses the plain loops.

const VEC_OK = new Set(["add", "sub", "mul", "div", "max", "min", "neg"]);

function colStride(e: Expr, last: number, memo: Map<Expr, number | null>): number | null {
  return strideIn(e, (x) => (x.op === "gidx" && (x.arg as number) === last ? 1 : 0), memo);
}

/** How far an index moves when the index that `unit` gives 1 (every other index and value 0) moves by one; null: not affine in it. */
function strideIn(e: Expr, unit: (leaf: Expr) => number, memo: Map<Expr, number | null>): number | null {
  const m = memo.get(e);
  if (m !== undefined) return m;
  let r: number | null;
  switch (e.op) {
    case "gidx": case "const": case "ridx": case "var": r = unit(e); break;
    case "add": case "sub": {
      const a = strideIn(e.srcs[0]!, unit, memo), b = strideIn(e.srcs[1]!, unit, memo);
      r = a === null || b === null ? null : e.op === "add" ? a + b : a - b;
      break;
    }
    case "mul": {
      const a = strideIn(e.srcs[0]!, unit, memo), b = strideIn(e.srcs[1]!, unit, memo);
      const [x, y] = e.srcs;
      if (a === 0 && b === 0) r = 0;
      else if (a !== null && y!.op === "const" && b === 0) r = a * (y!.arg as number);
      else if (b !== null && x!.op === "const" && a === 0) r = b * (x!.arg as number);
      else r = null;
      break;
    }
    default: {
      // any other node is fine only when it does not depend on the index
      r = e.srcs.every((s) => strideIn(s, unit, memo) === 0) && e.op !== "load" ? 0 : e.op === "load" ? (strideIn(e.srcs[0]!, unit, memo) === 0 && (e.srcs[1] ? strideIn(e.srcs[1], unit, memo) === 0 : true) ? 0 : null) : null;
    }
  }
  memo.set(e, r);
  return r;
}

/** A vector tile's lines, and the size of the column panel it packs (the kernel allocates it per call). */
interface VecTile {
  /** The packing of the panel (empty: none), then the tile. */
  pack: string[];
  lines: string[];
  /** Floats per reduce index in the packed panel (0: no packing). */
  packFloats: number;
}

/**
 * The TR×TC tile (TC = 16 or 32) as H = 2 accumulators of W floats per row over the columns
 * [colOff, colOff + 2·W) of the tile: W = 8 (AVX2 ymm, NEON pairs), or W = 16 (AVX-512 zmm, one
 * pass over a 32-column tile). A 32-column tile without AVX-512 is two 16-column passes.
 */
function vecTile(ir: KernelIR, rows: readonly number[], TC: number, last: number, reduceLoops: (inner: string[], W: number, rows: readonly number[]) => string[], W = 8, colOff = 0, usePack = true, shared = 0, panelKey = "c0"): VecTile | null {
  const H = 2;
  const red = ir.reduce!;
  if (red.body.dtype !== "float32" || last < 0) return null;
  const colMemo = new Map<Expr, boolean>();
  const rowMemo = new Map<Expr, boolean>();
  const dCol = (e: Expr) => dependsOn(e, new Set(), colMemo) || colDep(e);
  const colDep = (e: Expr): boolean => {
    const m = colMemo.get(e);
    if (m !== undefined) return m;
    const r = (e.op === "gidx" && e.arg === last) || e.srcs.some(colDep);
    colMemo.set(e, r);
    return r;
  };
  const rowDep = (e: Expr): boolean => {
    const m = rowMemo.get(e);
    if (m !== undefined) return m;
    // the `shared` outer row dimensions hold one index for the whole tile (split row tiles)
    const r = (e.op === "gidx" && (e.arg as number) < last && (e.arg as number) >= shared) || e.srcs.some(rowDep);
    rowMemo.set(e, r);
    return r;
  };
  void dCol;
  const strideMemo = new Map<Expr, number | null>();
  // check support: every column-dependent node is vector arithmetic or a contiguous load
  let ok = true;
  const seen = new Set<Expr>();
  const check = (e: Expr) => {
    if (seen.has(e) || !ok) return;
    seen.add(e);
    if (!colDep(e)) return;
    if (e.op === "load") {
      if (e.dtype !== "float32") ok = false;
      return; // contiguous: one vector load; otherwise 8 scalar loads (a gather)
    }
    if (e.op === "gidx" || !VEC_OK.has(e.op) || e.dtype !== "float32") {
      ok = false;
      return;
    }
    e.srcs.forEach(check);
  };
  check(red.body);
  if (!ok || !colDep(red.body)) return null;

  // Packing: a contiguous, unmasked load that depends on the column but not on the row (B in
  // A·B) is the same for every row tile of a column panel. With one reduce axis, such loads are
  // copied once per panel into a contiguous scratch panel [R0][loads][TC], which the tile then
  // streams: no large strides (a B row apart is often a multiple of 4 KiB, which aliases in L1),
  // and consecutive blocks of a worker's chunk (row tiles of one panel) reuse the copy. With one
  // row tile (a matrix-vector product) nothing would reuse it: the tile reads B in place. Only a
  // load whose rows lie a multiple of 4 KiB apart (or an unknown distance) is packed: in place,
  // other strides measured faster (64×256×512, one thread, AVX-512: 151 µs in place, 161 packed).
  const packed = new Map<Expr, number>();
  const ridxMemo = new Map<Expr, number | null>();
  const aliases = (idx: Expr) => {
    const st = strideIn(idx, (x) => (x.op === "ridx" && (x.arg as number) === 0 ? 1 : 0), ridxMemo);
    return st === null || (st * 4) % 4096 === 0;
  };
  // A load that is not contiguous in the column (B transposed: x·Wᵀ) would be a gather of W
  // lanes per reduce index in every row tile; it is gathered once into the panel instead.
  const gathered = new Set<Expr>();
  if (red.dims.length === 1 && usePack) {
    const visit = new Set<Expr>();
    const find = (e: Expr) => {
      if (visit.has(e)) return;
      visit.add(e);
      if (e.op === "load") {
        if (colDep(e) && !rowDep(e) && !e.srcs[1]) {
          const cs = colStride(e.srcs[0]!, last, strideMemo);
          if (cs !== 1) gathered.add(e);
          if (cs !== 1 || aliases(e.srcs[0]!)) packed.set(e, packed.size);
        }
        return;
      }
      e.srcs.forEach(find);
    };
    find(red.body);
  }
  const P = packed.size * TC; // floats per reduce index: [R0][slot][TC]

  const lines: string[] = [];
  const names = new Map<string, string>();
  let counter = 0;
  const ref = (e: Expr, r: number, h: number, vec: boolean, lane = 0): string => {
    const rr = rowDep(e) ? r : -1;
    const hh = colDep(e) ? h : -1;
    switch (e.op) {
      case "const": {
        const c = exprConst(e, "c");
        return vec ? `bg_bc${W}(${c})` : c;
      }
      case "var": return `v_${e.arg as string}`;
      case "ridx": return `r${e.arg as number}`;
      case "gidx": return (e.arg as number) === last ? `(c0 + ${colOff + W * h + lane})` : `g${e.arg as number}_[${r}]`;
    }
    const key = `${e.id}:${rr}:${hh}:${vec ? "v" : `s${colDep(e) ? lane : 0}`}`;
    const have = names.get(key);
    if (have) return have;
    let code: string;
    let type: string;
    if (!colDep(e) || !vec) {
      if (vec) {
        const sc = ref(e, r, h, false);
        code = `bg_bc${W}(${sc})`;
        type = `bg_f${W}`;
      } else {
        const em = new Emitter("c", { gidx: (i) => (i === last ? `(c0 + ${colOff + W * h + lane})` : `g${i}_[${r}]`), ridx: (i) => `r${i}`, acc: "acc" }, new Map(), "x");
        const srcs = e.srcs.map((x) => ref(x, r, h, false, lane));
        code = em.code(e, srcs);
        type = ctype(e.dtype, "c");
      }
    } else if (e.op === "load" && packed.has(e)) {
      code = `bg_ld${W}(&bg_pk[r0 * ${P} + ${packed.get(e)! * TC + colOff + W * h}])`;
      type = `bg_f${W}`;
    } else if (e.op === "load") {
      const b = `b${e.arg as number}`;
      if (colStride(e.srcs[0]!, last, strideMemo) === 1 && !(e.srcs[1] && colDep(e.srcs[1]))) {
        const idx = ref(e.srcs[0]!, r, h, false); // the index of the first of 8 lanes
        const ld = `bg_ld${W}(&${b}[${idx}])`;
        code = e.srcs[1] ? `(${ref(e.srcs[1], r, h, false)} ? ${ld} : bg_bc${W}(0.0f))` : ld;
      } else {
        const lanes = Array.from({ length: W }, (_, l) => {
          const idx = ref(e.srcs[0]!, r, h, false, l);
          return e.srcs[1] ? `(${ref(e.srcs[1], r, h, false, l)} ? ${b}[${idx}] : 0.0f)` : `${b}[${idx}]`;
        });
        code = `(bg_f${W}){${lanes.join(", ")}}`;
      }
      type = `bg_f${W}`;
    } else {
      const a = e.srcs[0] ? ref(e.srcs[0], r, h, true) : "";
      const b = e.srcs[1] ? ref(e.srcs[1], r, h, true) : "";
      switch (e.op) {
        case "add": code = `(${a} + ${b})`; break;
        case "sub": code = `(${a} - ${b})`; break;
        case "mul": code = `(${a} * ${b})`; break;
        case "div": code = `(${a} / ${b})`; break;
        case "neg": code = `(-${a})`; break;
        case "max": code = `bg_vmax${W}(${a}, ${b})`; break;
        case "min": code = `bg_vmin${W}(${a}, ${b})`; break;
        default: throw new Error(`vector ${e.op}`);
      }
      type = `bg_f${W}`;
    }
    const name = `v${counter++}`;
    lines.push(`const ${type} ${name} = ${code};`);
    names.set(key, name);
    return name;
  };
  const body: string[] = [];
  for (const r of rows)
    for (let h = 0; h < H; h++) {
      const a = `a${r}_${h}`;
      if (fusedProduct(red)) {
        const x = ref(red.body.srcs[0]!, r, h, true), y = ref(red.body.srcs[1]!, r, h, true);
        body.push(...lines.splice(0));
        body.push(`${a} = bg_vfma${W}(${x}, ${y}, ${a});`);
        continue;
      }
      const v = ref(red.body, r, h, true);
      body.push(...lines.splice(0));
      body.push(red.fn === "sum" || red.fn === "prod" ? `${a} = ${a} ${red.fn === "sum" ? "+" : "*"} ${v};` : `${a} = ${red.fn === "min" ? "bg_vmin" : "bg_vmax"}${W}(${a}, ${v});`);
    }
  const init = red.fn === "sum" ? `bg_bc${W}(0.0f)` : red.fn === "prod" ? `bg_bc${W}(1.0f)` : `bg_bc${W}(${floatLit(red.fn === "min" ? Infinity : -Infinity, "c")})`;
  const pack: string[] = [];
  if (P) {
    pack.push(`if (bg_pk_c0 != ${panelKey}) { /* pack this column panel */`);
    const rowsOpen = pack.length;
    pack.push(`  for (int r0 = 0; r0 < R0; ++r0) {`);
    for (const [e, slot] of packed) {
      if (gathered.has(e)) continue;
      for (let h = 0; h < TC / 8; h++) {
        const em = new Emitter("c", { gidx: (i) => (i === last ? `(c0 + ${8 * h})` : `g${i}_[0]`), ridx: (i) => `r${i}`, acc: "acc" }, new Map(), `p${slot}_${h}_`);
        const idx = em.ref(e.srcs[0]!);
        pack.push(...em.lines.map((l) => `    ${l}`));
        pack.push(`    bg_st8(&bg_pk[r0 * ${P} + ${slot * TC + 8 * h}], bg_ld8(&b${e.arg as number}[${idx}]));`);
      }
    }
    pack.push(`  }`);
    if (packed.size === gathered.size) pack.splice(rowsOpen, 2); // no contiguous loads: no row loop
    // gathers: 16 reduce indices (a cache line of a transposed B row) at a time, column by column
    // (x[T,256]·Wᵀ with W [2048,256], T a Variable bound to 32, 2 threads, a loaded machine: 930 -> 500
    // µs; whole columns at a time 560, rows at a time 550)
    for (const e of gathered) {
      const slot = packed.get(e)!;
      const em = new Emitter("c", { gidx: (i) => (i === last ? "(c0 + c)" : `g${i}_[0]`), ridx: (i) => `r${i}`, acc: "acc" }, new Map(), `q${slot}_`);
      const idx = em.ref(e.srcs[0]!);
      pack.push(`  for (int rb = 0; rb < R0; rb += 16) for (int c = 0; c < ${TC}; ++c) for (int r0 = rb; r0 < (rb + 16 < R0 ? rb + 16 : R0); ++r0) {`);
      pack.push(...em.lines.map((l) => `    ${l}`));
      pack.push(`    bg_pk[r0 * ${P} + ${slot * TC} + c] = b${e.arg as number}[${idx}];`);
      pack.push(`  }`);
    }
    pack.push(`  bg_pk_c0 = ${panelKey};`);
    pack.push(`}`);
  }
  const out: string[] = [];
  for (const r of rows) out.push(`bg_f${W} ${Array.from({ length: H }, (_, h) => `a${r}_${h} = ${init}`).join(", ")};`);
  out.push(...reduceLoops(body, W, rows));
  for (const r of rows) for (let h = 0; h < H; h++) out.push(`bg_st${W}(&acc[${r}][${colOff + W * h}], a${r}_${h});`);
  return { pack, lines: out, packFloats: P };
}

/**
 * The vector tile of a TR×TC reduce tile: for TC = 32, one 16-lane pass where AVX-512 is there
 * (BG_VEC16) and two 8-lane passes otherwise; for TC = 16, one 8-lane pass. Null: not vectorizable.
 */
function vecTiles(ir: KernelIR, TR: number, TC: number, last: number, reduceLoops: (inner: string[], W: number, rows: readonly number[]) => string[], pack: boolean, shared: number, panelKey: string): VecTile | null {
  const rows = Array.from({ length: TR }, (_, r) => r);
  const a = vecTile(ir, rows, TC, last, reduceLoops, 8, 0, pack, shared, panelKey);
  if (!a || TC === 16) return a;
  const b = vecTile(ir, rows, TC, last, reduceLoops, 8, 16, pack, shared, panelKey)!;
  const w = vecTile(ir, rows, TC, last, reduceLoops, 16, 0, pack, shared, panelKey)!;
  const block = (ls: string[]) => ["{", ...ls.map((l) => `  ${l}`), "}"];
  return { pack: a.pack, lines: ["#if BG_VEC16", ...block(w.lines), "#else", ...block(a.lines), ...block(b.lines), "#endif"], packFloats: a.packFloats };
}

// C helpers the compiler can vectorize: a float select written with integer masks (the ternary
// `a > b ? a : b` exactly, NaN and signed zeros included), and tanhf as 1 - 2/(e^2x + 1) with
// e^2x from a Cephes-style expf (range reduction by ln 2, degree-6 polynomial, exponent bits
// set directly) over x clamped to [-10, 10] (tanh(±10) rounds to ±1 in float32), and its
// odd series below |x| = 1/16; NaN stays NaN. Error against float64 tanh: below 2e-7 absolute,
// exact ±1 at the ends. libm's tanhf is a call per element, which no loop vectorizes. expf the
// same way over x clamped to [-104, 89] (beyond: 0 and inf), 2^n applied as two powers of two so
// that subnormal results and the overflow to inf come out of one rounding; NaN stays NaN (softmax
// over 262K floats, 2 threads: libm's expf 2.2 ms).
// Fused multiply-adds are written out (bg_fmaf), never left to the compiler (-ffp-contract=off):
// the same bits at every optimization level. Where the machine has no FMA instruction, a
// multiply and an add (the compiler then has none to contract either).
const C_MATH_PRELUDE = `#if !defined(__TINYC__) && (defined(__FMA__) || defined(__ARM_FEATURE_FMA))
#define BG_FMA 1
#define bg_fmaf(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define bg_fmaf(a, b, c) ((a) * (b) + (c))
#endif
#if defined(__has_builtin)
#if __has_builtin(__builtin_elementwise_fma)
#define BG_VFMA_BUILTIN 1
#endif
#endif
static inline float bg_fsel(int m, float a, float b) { int ia, ib, r; float f; memcpy(&ia, &a, 4); memcpy(&ib, &b, 4); r = (m & ia) | (~m & ib); memcpy(&f, &r, 4); return f; }
static inline float bg_fmaxf(float a, float b) { return bg_fsel(-(a > b), a, b); }
static inline float bg_fminf(float a, float b) { return bg_fsel(-(a < b), a, b); }
static inline float bg_tanhf(float x0) {
  float x = bg_fmaxf(-10.0f, bg_fminf(10.0f, x0));
  float y = 2.0f * x;
  float n = bg_fmaf(y, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = bg_fmaf(n, 2.12194440e-4f, bg_fmaf(-n, 0.693359375f, y));
  float z = r * r;
  float p = bg_fmaf(bg_fmaf(bg_fmaf(bg_fmaf(bg_fmaf(bg_fmaf(1.9875691500e-4f, r, 1.3981999507e-3f), r, 8.3334519073e-3f), r, 4.1665795894e-2f), r, 1.6666665459e-1f), r, 5.0000001201e-1f), z, r) + 1.0f;
  int bits = ((int)n + 127) << 23;
  float scale; memcpy(&scale, &bits, 4);
  float x2 = x * x;
  float small = x * bg_fmaf(x2, bg_fmaf(x2, bg_fmaf(x2, -0.0539682540f, 0.133333333f), -0.333333333f), 1.0f);
  return bg_fsel(-(x2 < 0.00390625f), small, 1.0f - 2.0f / bg_fmaf(p, scale, 1.0f));
}
static inline float bg_expf(float x0) {
  float x = bg_fmaxf(-104.0f, bg_fminf(89.0f, x0));
  float n = bg_fmaf(x, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = bg_fmaf(n, 2.12194440e-4f, bg_fmaf(-n, 0.693359375f, x));
  float z = r * r;
  float p = bg_fmaf(bg_fmaf(bg_fmaf(bg_fmaf(bg_fmaf(bg_fmaf(1.9875691500e-4f, r, 1.3981999507e-3f), r, 8.3334519073e-3f), r, 4.1665795894e-2f), r, 1.6666665459e-1f), r, 5.0000001201e-1f), z, r) + 1.0f;
  int k = (int)n, k1 = k / 2, k2 = k - k1;
  unsigned u1 = (unsigned)(k1 + 127) << 23, u2 = (unsigned)(k2 + 127) << 23;
  float s1, s2; memcpy(&s1, &u1, 4); memcpy(&s2, &u2, 4);
  return bg_fsel(-(x0 != x0), x0, (p * s1) * s2);
}
`;

const VEC_PRELUDE = `#if (defined(__GNUC__) || defined(__clang__)) && !defined(__TINYC__)
#define BG_VEC 1
#include <string.h>
typedef float bg_f8 __attribute__((vector_size(32)));
typedef int bg_i8 __attribute__((vector_size(32)));
static inline bg_f8 bg_ld8(const float* p) { bg_f8 v; memcpy(&v, p, sizeof v); return v; }
static inline void bg_st8(float* p, bg_f8 v) { memcpy(p, &v, sizeof v); }
static inline bg_f8 bg_bc8(float s) { bg_f8 v = {s, s, s, s, s, s, s, s}; return v; }
static inline bg_f8 bg_vmax8(bg_f8 a, bg_f8 b) { bg_i8 m = a > b; return (bg_f8)((m & (bg_i8)a) | (~m & (bg_i8)b)); }
static inline bg_f8 bg_vmin8(bg_f8 a, bg_f8 b) { bg_i8 m = a < b; return (bg_f8)((m & (bg_i8)a) | (~m & (bg_i8)b)); }
#if defined(BG_FMA) && defined(BG_VFMA_BUILTIN)
static inline bg_f8 bg_vfma8(bg_f8 a, bg_f8 b, bg_f8 c) { return __builtin_elementwise_fma(a, b, c); }
#elif defined(BG_FMA)
static inline bg_f8 bg_vfma8(bg_f8 a, bg_f8 b, bg_f8 c) { bg_f8 r; for (int i = 0; i < 8; i++) r[i] = __builtin_fmaf(a[i], b[i], c[i]); return r; }
#else
static inline bg_f8 bg_vfma8(bg_f8 a, bg_f8 b, bg_f8 c) { return a * b + c; }
#endif
#if defined(__AVX512F__)
#define BG_VEC16 1
typedef float bg_f16 __attribute__((vector_size(64)));
typedef int bg_i16 __attribute__((vector_size(64)));
static inline bg_f16 bg_ld16(const float* p) { bg_f16 v; memcpy(&v, p, sizeof v); return v; }
static inline void bg_st16(float* p, bg_f16 v) { memcpy(p, &v, sizeof v); }
static inline bg_f16 bg_bc16(float s) { bg_f16 v = {s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s}; return v; }
static inline bg_f16 bg_vmax16(bg_f16 a, bg_f16 b) { bg_i16 m = a > b; return (bg_f16)((m & (bg_i16)a) | (~m & (bg_i16)b)); }
static inline bg_f16 bg_vmin16(bg_f16 a, bg_f16 b) { bg_i16 m = a < b; return (bg_f16)((m & (bg_i16)a) | (~m & (bg_i16)b)); }
#if defined(BG_VFMA_BUILTIN)
static inline bg_f16 bg_vfma16(bg_f16 a, bg_f16 b, bg_f16 c) { return __builtin_elementwise_fma(a, b, c); }
#else
static inline bg_f16 bg_vfma16(bg_f16 a, bg_f16 b, bg_f16 c) { bg_f16 r; for (int i = 0; i < 16; i++) r[i] = __builtin_fmaf(a[i], b[i], c[i]); return r; }
#endif
#endif
#endif
`;

/**
 * Whether a reduce tile's rows should lie within the innermost row dimension: when an operand
 * depends on the column and on outer row dimensions only (the keys of one attention head: rows
 * (head, query), columns the key positions), a tile inside one head reads it once for all its
 * rows, and packs it once per (head, column panel), instead of once per row (a 6-lane gather each).
 */
function splitRows(ir: KernelIR, { TR, TC, L }: CpuTiles): boolean {
  const red = ir.reduce, last = ir.dims.length - 1;
  if (!red || L !== 1 || (TC !== 16 && TC !== 32) || last < 2 || red.body.dtype !== "float32" || kdimMax(ir.dims[last - 1]!) < TR) return false;
  const memo = new Map<Expr, number>(); // bits: 1 column, 2 inner row, 4 outer row
  const dep = (e: Expr): number => {
    let m = memo.get(e);
    if (m !== undefined) return m;
    m = 0;
    if (e.op === "gidx") m = (e.arg as number) === last ? 1 : (e.arg as number) === last - 1 ? 2 : 4;
    for (const x of e.srcs) m |= dep(x);
    memo.set(e, m);
    return m;
  };
  let found = false;
  const seen = new Set<Expr>();
  const visit = (e: Expr) => {
    if (seen.has(e) || found) return;
    seen.add(e);
    if (e.op === "load" && dep(e) === 5) found = true;
    e.srcs.forEach(visit);
  };
  visit(red.body);
  return found;
}

// A reduce body calls libm's expf: GCC leaves those loops scalar (their loads are strided or
// gathered), and scalar, libm's table-driven expf is faster than the polynomial bg_expf (softmax's
// sum over 1024x256, one thread: 0.93 ms with expf, 2.7 ms with bg_expf inlined). Elementwise
// kernels and reduce epilogues vectorize and keep bg_expf.
const LIBM_EXP = { exp: "expf" };

function genC(ir: KernelIR): { source: string; tiles: CpuTiles; split: boolean } {
  const tiles = cpuTiles(ir);
  const { TR, TC, L } = tiles;
  const nd = ir.dims.length;
  const o: string[] = [];
  ir.bufs.forEach((b, i) => {
    const t = stype(b.dtype, "c");
    o.push(i === 0 ? `${t}* restrict b0 = BG_ARG(0, ${t}*);` : `const ${t}* restrict b${i} = BG_ARG(${i}, const ${t}*);`);
  });
  ir.vars.forEach((v, i) => o.push(`const int v_${v} = BG_ARG(${ir.bufs.length + i}, int);`));
  ir.dims.forEach((d, i) => o.push(`const int D${i} = ${dimExpr(d)};`));
  const rowDims = ir.dims.slice(0, Math.max(0, nd - 1)).map((_, i) => `D${i}`);
  o.push(`const int ROWS = ${rowDims.length ? rowDims.join(" * ") : "1"};`);
  o.push(`const int COLS = ${nd ? `D${nd - 1}` : "1"};`);
  const last = nd - 1;
  const split = splitRows(ir, tiles);
  const decodeRow = (row: string, into: (i: number) => string): string[] => {
    const lines = [`int rem = ${row};`];
    for (let i = last - 1; i >= 0; i--) {
      if (i === 0) lines.push(`${into(0)} = rem;`);
      else lines.push(`${into(i)} = rem % D${i}; rem /= D${i};`);
    }
    return lines;
  };
  const body: string[] = [];
  let packing = false;
  if (!ir.reduce) {
    o.push(`const int NCT = (COLS + ${TC - 1}) / ${TC};`);
    o.push(`const int NBLK = ((ROWS + ${TR - 1}) / ${TR}) * NCT;`);
    body.push(`const int bt = (int)blockIdx.x;`);
    body.push(`if (bt >= NBLK) continue; /* grids are sized for the variables' maxima */`);
    body.push(`const int row0 = (bt / NCT) * ${TR}, c0 = (bt % NCT) * ${TC};`);
    body.push(`const int row1 = row0 + ${TR} < ROWS ? row0 + ${TR} : ROWS;`);
    body.push(`const int c1 = c0 + ${TC} < COLS ? c0 + ${TC} : COLS;`);
    body.push(`for (int row = row0; row < row1; ++row) {`);
    const rowLines: string[] = [];
    if (last > 0) {
      for (let i = 0; i < last; i++) rowLines.push(`int g${i};`);
      rowLines.push(`{ ${decodeRow("row", (i) => `g${i}`).join(" ")} }`);
    }
    const names: Names = { gidx: (i) => (i === last ? "gc" : `g${i}`), ridx: (i) => `r${i}`, acc: "acc" };
    const em = new Emitter("c", names, new Map(), "t");
    const v = em.ref(ir.value);
    const st = em.ref(ir.store);
    body.push(...rowLines.map((l) => `  ${l}`));
    body.push(`  for (int gc = c0; gc < c1; ++gc) {`);
    body.push(...em.lines.map((l) => `    ${l}`));
    body.push(`    b0[${st}] = ${storeValue(ir.outDtype, v)};`);
    body.push(`  }`);
    body.push(`}`);
  } else {
    const red = ir.reduce;
    const t = ctype(red.body.dtype, "c");
    const nr = red.dims.length;
    red.dims.forEach((d, i) => o.push(`const int R${i} = ${dimExpr(d)};`));
    if (split) {
      // row tiles within the innermost row dimension: the outer row indices are the tile's own
      const inn = `D${last - 1}`;
      o.push(`const int NT1 = (${inn} + ${TR - 1}) / ${TR};`);
      o.push(`const int NRT = ${[...rowDims.slice(0, last - 1), "NT1"].join(" * ")};`);
    } else o.push(`const int NRT = (ROWS + ${TR - 1}) / ${TR};`);
    o.push(`const int NBLK = NRT * ((COLS + ${TC - 1}) / ${TC});`);
    body.push(`const int bt = (int)blockIdx.x;`);
    body.push(`if (bt >= NBLK) continue; /* grids are sized for the variables' maxima */`);
    if (split) {
      const inn = `D${last - 1}`;
      body.push(`const int rt = bt % NRT, c0 = (bt / NRT) * ${TC};`);
      body.push(`const int i0 = (rt % NT1) * ${TR}, row0 = (rt / NT1) * ${inn} + i0;`);
      body.push(`const int rn = ${inn} - i0 < ${TR} ? ${inn} - i0 : ${TR};`);
    } else {
      body.push(`const int row0 = (bt % NRT) * ${TR}, c0 = (bt / NRT) * ${TC};`);
      body.push(`const int rn = ROWS - row0 < ${TR} ? ROWS - row0 : ${TR};`);
    }
    body.push(`const int cn = COLS - c0 < ${TC} ? COLS - c0 : ${TC};`);
    for (let i = 0; i < last; i++) body.push(`int g${i}_[${TR}];`);
    if (last > 0) {
      body.push(`for (int r = 0; r < ${TR}; ++r) {`);
      body.push(`  const int row = row0 + (r < rn ? r : rn - 1);`);
      body.push(`  ${decodeRow("row", (i) => `g${i}_[r]`).join(" ")}`);
      body.push(`}`);
    }
    const accDecl = L > 1 ? `${t} acc[${TR}][${L}];` : `${t} acc[${TR}][${TC}];`;
    body.push(accDecl);
    body.push(`for (int r = 0; r < ${TR}; ++r) for (int c = 0; c < ${L > 1 ? L : TC}; ++c) acc[r][c] = ${reduceInit(ir, "c")};`);
    const blocked = blockedSum(ir) && nr > 0;
    const W = L > 1 ? L : TC;
    if (blocked) body.push(`${t} bg_tot[${TR}][${W}] = {{0}};`, `int bg_n = 0;`);
    const flushScalar = [`for (int r = 0; r < ${TR}; ++r) for (int c = 0; c < ${W}; ++c) { bg_tot[r][c] += acc[r][c]; acc[r][c] = 0.0f; }`];
    const unflushScalar = `for (int r = 0; r < ${TR}; ++r) for (int c = 0; c < ${W}; ++c) acc[r][c] += bg_tot[r][c];`;
    const names = (col: string, rIdx: (i: number) => string): Names => ({
      gidx: (i) => (i === last ? col : `g${i}_[r]`),
      ridx: rIdx,
      acc: "acc[r][c]",
    });
    // the reduce loops, all but the innermost
    const loopOpen = (count: number): string[] => {
      const ls: string[] = [];
      for (let i = 0; i < count; i++) ls.push(`${"  ".repeat(i)}for (int r${i} = 0; r${i} < R${i}; ++r${i}) {`);
      return ls;
    };
    const loopClose = (count: number): string[] => {
      const ls: string[] = [];
      for (let i = count - 1; i >= 0; i--) ls.push(`${"  ".repeat(i)}}`);
      return ls;
    };
    const inner = (cols: string, colExpr: string, rIdx: (i: number) => string, accRef: string, pad: string): string[] => {
      const em = new Emitter("c", { ...names(colExpr, rIdx), acc: accRef }, new Map(), "t");
      em.math = LIBM_EXP;
      const step = fusedProduct(red) ? `bg_fmaf(${em.ref(red.body.srcs[0]!)}, ${em.ref(red.body.srcs[1]!)}, ${accRef})` : combine(ir, accRef, em.ref(red.body));
      return [
        `${pad}for (int r = 0; r < ${TR}; ++r) {`,
        `${pad}  for (int c = 0; c < ${cols}; ++c) {`,
        ...em.lines.map((l) => `${pad}    ${l}`),
        `${pad}    ${accRef} = ${step};`,
        `${pad}  }`,
        `${pad}}`,
      ];
    };
    // all reduce loops around `step` (the body of one reduce index); a blocked sum cuts the
    // innermost one into runs and flushes the accumulators (`flush`) between them
    const reduceNest = (step: string[], flush: string[]): string[] => {
      if (!blocked) return [...loopOpen(nr), ...step.map((l) => `${"  ".repeat(nr)}${l}`), ...loopClose(nr)];
      const k = nr - 1;
      return [...loopOpen(k), ...blockedLoop(`r${k}`, `R${k}`, 1, "int", step, flush, "  ".repeat(k), true), ...loopClose(k)];
    };
    if (L > 1) {
      // narrow output: lanes over the innermost reduce axis
      const k = nr - 1;
      const pad = "  ".repeat(k);
      body.push(...loopOpen(k));
      const lanes = inner(String(L), "c0", (i) => (i === k ? "(rk + c)" : `r${i}`), "acc[r][c]", "");
      if (blocked) {
        body.push(`${pad}int rk;`);
        body.push(...blockedLoop("rk", `R${k}`, L, "int", lanes, flushScalar, pad, false));
      } else {
        body.push(`${pad}int rk = 0;`);
        body.push(`${pad}for (; rk + ${L} <= R${k}; rk += ${L}) {`);
        body.push(...lanes.map((l) => `${pad}  ${l}`));
        body.push(`${pad}}`);
      }
      body.push(`${pad}for (; rk < R${k}; ++rk) {`);
      body.push(...inner("1", "c0", (i) => (i === k ? "rk" : `r${i}`), "acc[r][0]", `${pad}  `));
      body.push(`${pad}}`);
      body.push(...loopClose(k));
      if (blocked) body.push(unflushScalar);
      body.push(`for (int r = 0; r < ${TR}; ++r) for (int c = 1; c < ${L}; ++c) acc[r][0] = ${combine(ir, "acc[r][0]", "acc[r][c]")};`);
    } else {
      // the vector tile's accumulators a<r>_<h> flush into totals s<r>_<h>, added back at the end
      const each = (rows: readonly number[], f: (r: number, h: number) => string) => rows.flatMap((r) => [0, 1].map((h) => f(r, h)));
      const vecDecl = (rows: readonly number[], W: number) => each(rows, (r, h) => `bg_f${W} s${r}_${h} = bg_bc${W}(0.0f);`);
      const vecFlush = (rows: readonly number[], W: number) => each(rows, (r, h) => `s${r}_${h} += a${r}_${h}; a${r}_${h} = bg_bc${W}(0.0f);`);
      const vecBack = (rows: readonly number[]) => each(rows, (r, h) => `a${r}_${h} += s${r}_${h};`);
      const loops = (inner: string[], W: number, rows: readonly number[]) => (blocked ? [...vecDecl(rows, W), ...reduceNest(inner, vecFlush(rows, W)), ...vecBack(rows)] : reduceNest(inner, []));
      const shared = split ? last - 1 : 0, panelKey = split ? `(rt / NT1) * COLS + c0` : "c0";
      const vt = TC === 16 || TC === 32 ? vecTiles(ir, TR, TC, last, loops, split ? kdimMax(ir.dims[last - 1]!) > TR : rowsMaxOf(ir) > TR, shared, panelKey) : null;
      // Variable rows whose bound value leaves one row tile per panel: nothing reuses a packed
      // panel, so that case reads B in place, as a fixed row count that small does (x[T,256]·W
      // [256,1024], T bound to 1..6, 2 threads: 67 µs packed, 35 in place). With more row tiles the
      // panel pays (in place was faster in a lone product with B hot in cache, T = 12..48, but the
      // GPT-2 prompt at T = 32 ran 8% slower: its weights come from farther away).
      const rowsVary = ir.dims.slice(0, last).some((d) => typeof d !== "number");
      const vtIn = vt?.packFloats && rowsVary ? vecTiles(ir, TR, TC, last, loops, false, shared, panelKey) : null;
      if (vt?.packFloats) {
        // the panel scratch, per call (a worker's chunk of blocks); without it, the plain loops
        packing = true;
        o.push("#if BG_VEC");
        o.push(`float* bg_pk = (float*)malloc(sizeof(float) * ${vt.packFloats} * (size_t)(R0 > 0 ? R0 : 1));`);
        o.push("int bg_pk_c0 = -1;");
        o.push("#define BG_PK_OK (bg_pk != NULL)");
        o.push("#else");
        o.push("#define BG_PK_OK 1");
        o.push("#endif");
      }
      body.push(`if (cn == ${TC}${vt?.packFloats ? " && BG_PK_OK" : ""}) {`);
      if (vt) {
        body.push("#if BG_VEC");
        if (vtIn) {
          body.push(`  if (${split ? "NT1" : "NRT"} > 1) { /* row tiles share the packed panel */`);
          body.push(...[...vt.pack, ...vt.lines].map((l) => (l.startsWith("#") ? l : `    ${l}`)));
          body.push(`  } else { /* one row tile: B read in place */`);
          body.push(...vtIn.lines.map((l) => (l.startsWith("#") ? l : `    ${l}`)));
          body.push(`  }`);
        } else body.push(...[...vt.pack, ...vt.lines].map((l) => (l.startsWith("#") ? l : `  ${l}`)));
        body.push("#else");
      }
      const full = streamsRows(ir) ? streamNest(ir, flushScalar) : reduceNest(inner(String(TC), "(c0 + c)", (i) => `r${i}`, "acc[r][c]", ""), flushScalar);
      body.push(...full.map((l) => (l.startsWith("#") ? l : `  ${l}`)));
      if (blocked) body.push(`  ${unflushScalar}`);
      if (vt) body.push("#endif");
      body.push(`} else {`);
      body.push(...reduceNest(inner("cn", "(c0 + c)", (i) => `r${i}`, "acc[r][c]", ""), flushScalar).map((l) => `  ${l}`));
      if (blocked) body.push(`  ${unflushScalar}`);
      body.push(`}`);
    }
    // epilogue
    const accRef = L > 1 ? "acc[r][0]" : "acc[r][c]";
    const em = new Emitter("c", { ...names("(c0 + c)", (i) => `r${i}`), acc: accRef }, new Map(), "e");
    const v = em.ref(ir.value);
    const st = em.ref(ir.store);
    body.push(`for (int r = 0; r < rn; ++r) {`);
    body.push(`  for (int c = 0; c < ${L > 1 ? "1" : "cn"}; ++c) {`);
    body.push(...em.lines.map((l) => `    ${l}`));
    body.push(`    b0[${st}] = ${storeValue(ir.outDtype, v)};`);
    body.push(`  }`);
    body.push(`}`);
  }
  const tail = packing ? "#if BG_VEC\n  free(bg_pk);\n#endif\n#undef BG_PK_OK\n" : "";
  const src =
    dtypeHelpers(ir, "c") +
    `BG_KERNEL(${ir.name}) {\n${o.map((l) => (l.startsWith("#") ? l : `  ${l}`)).join("\n")}\n` +
    `  BG_FOR_BLOCKS {\n${body.map((l) => (l.startsWith("#") ? l : `    ${l}`)).join("\n")}\n  }\n${tail}}\n`;
  return { source: src, tiles, split };
}

export function generate(ir: KernelIR, lang: Lang): GeneratedKernel {
  const signature = signatureOf(ir);
  if (dialects[lang].shape === "tiles") {
    const { source: body, tiles, split } = genC(ir);
    const geometry: LaunchGeometry = { lang, dims: ir.dims, reduce: ir.reduce !== null, TR: tiles.TR, TC: tiles.TC, L: tiles.L, ...(split ? { split } : {}) };
    return { lang, name: ir.name, source: prelude(lang) + body, body, signature, geometry, launch: launcher(geometry) };
  }
  const { body, tree } = genGpu(ir, lang);
  const geometry: LaunchGeometry = { lang, dims: ir.dims, reduce: ir.reduce !== null, TR: 1, TC: 1, L: 1, tree };
  return { lang, name: ir.name, source: prelude(lang) + body, body, signature, geometry, launch: launcher(geometry) };
}
