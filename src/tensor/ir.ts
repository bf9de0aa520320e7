// The lowered kernel form, shared by the three code generators and the interpreter.
//
// A kernel is: a global index space `dims` (each a number or a variable), an optional reduce
// loop over `reduce.dims` accumulating `reduce.body` with `reduce.fn`, and a `value` expression
// (which may read the accumulator `acc`, the reduce's epilogue) stored at `store` in buffer 0.
// Buffers 1.. are inputs; variables follow the buffers as i32 arguments.
//
// Expressions are a hash-consed DAG (`ExprBuilder` interns every node by its key), so equal
// sub-expressions are one node: code generators emit each node once, and the kernel's name is a
// hash of the printed DAG.
import type { DType, ReduceOp } from "./ast";
import { bitcastValue, isFloat, roundTo } from "./dtype";

export type AluOp =
  // value ops (any dtype; float16 / bfloat16 compute in float32 and round to their dtype after
  // every op, integers wrap to their width, bool is 0 / 1)
  | "add" | "sub" | "mul" | "div" | "max" | "min" | "pow" | "neg"
  | "exp" | "log" | "sqrt" | "sin" | "cos" | "abs" | "tanh"
  | "lt" | "le" | "eq" | "ne" // result 0/1 (int32 in index arithmetic, bool for tensor comparisons)
  | "where" // srcs [cond, a, b]; cond != 0
  | "cast" // srcs [x] → dtype (float → integer truncates toward zero; → bool is x != 0)
  | "bitcast" // srcs [x] → dtype, the same bytes (equal element sizes)
  // index ops (int32; operands of idiv/mod are known non-negative)
  | "idiv" | "mod" | "floordiv" | "floormod" | "and"
  // more value ops: float32 math (libm's names through the dialect); fmod also int32 (C's %, x % 0 and x % -1 give 0)
  | "exp2" | "log2" | "tan" | "atan" | "asin" | "acos" | "sinh" | "cosh" | "floor" | "ceil" | "trunc" | "rint" | "fmod"
  | "asinh" | "acosh" | "atanh";

export type ExprOp = "const" | "gidx" | "ridx" | "var" | "acc" | "load" | "rand" | "randn" | AluOp;

export interface Expr {
  readonly id: number;
  readonly op: ExprOp;
  readonly dtype: DType;
  readonly srcs: readonly Expr[];
  /** const: value; gidx/ridx: axis; var: name; load: buffer index; rand/randn: seed mix. */
  readonly arg: number | string | null;
  readonly key: string;
}

export type KDim = number | { readonly var: string; readonly max: number };

export interface KernelIR {
  readonly name: string;
  readonly dims: readonly KDim[];
  readonly reduce: { readonly fn: ReduceOp; readonly dims: readonly KDim[]; readonly body: Expr } | null;
  readonly value: Expr;
  readonly store: Expr;
  readonly outDtype: DType;
  /** Buffer arguments; [0] is the output. */
  readonly bufs: readonly { readonly dtype: DType }[];
  /** Variable names, passed as i32 arguments after the buffers. */
  readonly vars: readonly string[];
  /** Canonical text of the kernel (what its name hashes). */
  readonly text: string;
}

// ---- scalar semantics (the interpreter, constant folding and the TS reference share them) ----

const f32 = Math.fround;

export function lowbias32(x: number): number {
  x >>>= 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d) >>> 0;
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b) >>> 0;
  x ^= x >>> 16;
  return x >>> 0;
}

/** Host-side seed mixing: the kernel receives this constant. */
export function seedMix(seed: number): number {
  return lowbias32((seed >>> 0) ^ 0x9e3779b9);
}

/** Random bits for counter `c` (u32) under `mix`. */
export function randBits(mix: number, c: number): number {
  return lowbias32(lowbias32(c >>> 0) ^ mix);
}

/** Uniform [0, 1) float32 for element `i`: the top 24 bits of the hash. */
export function randUniform(mix: number, i: number): number {
  return (randBits(mix, i) >>> 8) * 5.960464477539063e-8;
}

/** Standard normal float32 for element `i` (Box-Muller over counters 2i and 2i+1). */
export function randNormal(mix: number, i: number): number {
  const u1 = f32(((randBits(mix, 2 * i) >>> 8) + 1) * 5.960464477539063e-8);
  const u2 = f32((randBits(mix, 2 * i + 1) >>> 8) * 5.960464477539063e-8);
  const r = f32(Math.sqrt(f32(-2 * f32(Math.log(u1)))));
  return f32(r * f32(Math.cos(f32(6.2831855 * u2))));
}

/** Round to the nearest integer, ties to even (C's rint in the default rounding mode); keeps -0. */
export function rintHalfEven(x: number): number {
  if (!Number.isFinite(x)) return x;
  const f = Math.floor(x), d = x - f;
  const r = d < 0.5 ? f : d > 0.5 ? f + 1 : f % 2 === 0 ? f : f + 1;
  return r === 0 && (x < 0 || Object.is(x, -0)) ? -0 : r;
}

function idivTrunc(a: number, b: number): number {
  if (b === 0) return 0;
  return (a / b) | 0;
}

function ipow(a: number, b: number): number {
  if (b < 0) return a === 1 ? 1 : a === -1 ? (b & 1 ? -1 : 1) : 0;
  let r = 1, base = a | 0, e = b;
  while (e > 0) {
    if (e & 1) r = Math.imul(r, base);
    base = Math.imul(base, base);
    e >>>= 1;
  }
  return r | 0;
}

/** Evaluate one ALU op on already-evaluated operands, in the semantics of the generated code. */
export function evalAlu(op: AluOp, dtype: DType, s: readonly number[], srcTypes: readonly DType[]): number {
  if (op === "bitcast") return bitcastValue(srcTypes[0]!, dtype, s[0]!);
  if (isFloat(dtype)) {
    const v = evalFloat(op, s, srcTypes);
    return dtype === "float32" ? v : roundTo(dtype, v);
  }
  if (dtype === "int64") return evalInt64(op, s, srcTypes);
  if (dtype === "bool") {
    if (op === "cast") return s[0] !== 0 ? 1 : 0;
    return roundTo("bool", evalInt32(op, s, srcTypes));
  }
  if (op === "cast" && srcTypes[0] !== "int64" && isFloat(srcTypes[0]!)) {
    const a = s[0]!;
    return Number.isFinite(a) ? roundTo(dtype, Math.trunc(a)) : 0;
  }
  const v = evalInt32(op, s, srcTypes);
  return dtype === "int32" ? v : roundTo(dtype, v);
}

function evalInt32(op: AluOp, s: readonly number[], srcTypes: readonly DType[]): number {
  const a = s[0]!, b = s[1]!;
  switch (op) {
    case "add": return (a + b) | 0;
    case "sub": return (a - b) | 0;
    case "mul": return Math.imul(a, b);
    case "div": return b === -1 ? -a | 0 : idivTrunc(a, b);
    case "max": return a > b ? a : b;
    case "min": return a < b ? a : b;
    case "pow": return ipow(a, b);
    case "neg": return -a | 0;
    case "abs": return Math.abs(a) | 0;
    case "lt": return a < b ? 1 : 0;
    case "le": return a <= b ? 1 : 0;
    case "eq": return a === b ? 1 : 0;
    case "ne": return a !== b ? 1 : 0;
    case "where": return a !== 0 ? b : s[2]!;
    case "cast": {
      if (!isFloat(srcTypes[0]!)) return srcTypes[0] === "int64" ? Number(BigInt.asIntN(32, BigInt(a))) : a;
      if (!Number.isFinite(a)) return 0;
      return Math.trunc(a) | 0;
    }
    case "idiv": return Math.trunc(a / b);
    case "mod": return a % b;
    case "floordiv": return Math.floor(a / b);
    case "floormod": return ((a % b) + b) % b;
    case "and": return a !== 0 && b !== 0 ? 1 : 0;
    case "fmod": return b === 0 || b === -1 ? 0 : (a % b) | 0;
    default:
      throw new Error(`int32 ${op}`);
  }
}

const w64 = (x: bigint): number => Number(BigInt.asIntN(64, x));

/** int64 on JS numbers: exact while values stay within ±2^53 (the host side's limit; kernels compute in 64 bits). */
function evalInt64(op: AluOp, s: readonly number[], srcTypes: readonly DType[]): number {
  const a = s[0]!, b = s[1]!;
  const A = () => BigInt(a), B = () => BigInt(b);
  switch (op) {
    case "add": return w64(A() + B());
    case "sub": return w64(A() - B());
    case "mul": return w64(A() * B());
    case "div": return b === 0 ? 0 : w64(A() / B());
    case "max": return a > b ? a : b;
    case "min": return a < b ? a : b;
    case "pow": {
      if (b < 0) return a === 1 ? 1 : a === -1 ? (b % 2 ? -1 : 1) : 0;
      let r = 1n, x = A(), e = b;
      while (e > 0) {
        if (e % 2) r = BigInt.asIntN(64, r * x);
        x = BigInt.asIntN(64, x * x);
        e = Math.floor(e / 2);
      }
      return w64(r);
    }
    case "neg": return w64(-A());
    case "abs": return w64(a < 0 ? -A() : A());
    case "lt": return a < b ? 1 : 0;
    case "le": return a <= b ? 1 : 0;
    case "eq": return a === b ? 1 : 0;
    case "ne": return a !== b ? 1 : 0;
    case "where": return a !== 0 ? b : s[2]!;
    case "cast": return isFloat(srcTypes[0]!) ? (Number.isFinite(a) ? Math.trunc(a) : 0) : a;
    case "fmod": return b === 0 || b === -1 ? 0 : w64(A() % B());
    case "and": return a !== 0 && b !== 0 ? 1 : 0;
    default:
      throw new Error(`int64 ${op}`);
  }
}

function evalFloat(op: AluOp, s: readonly number[], srcTypes: readonly DType[]): number {
  const a = s[0]!, b = s[1]!;
  void srcTypes;
  switch (op) {
    case "add": return f32(a + b);
    case "sub": return f32(a - b);
    case "mul": return f32(a * b);
    case "div": return f32(a / b);
    case "max": return a > b ? a : b;
    case "min": return a < b ? a : b;
    case "pow": return f32(Math.pow(a, b));
    case "neg": return -a;
    case "exp": return f32(Math.exp(a));
    case "log": return f32(Math.log(a));
    case "sqrt": return f32(Math.sqrt(a));
    case "sin": return f32(Math.sin(a));
    case "cos": return f32(Math.cos(a));
    case "abs": return Math.abs(a);
    case "tanh": return f32(Math.tanh(a));
    case "where": return a !== 0 ? b : s[2]!;
    case "cast": return f32(a);
    case "exp2": return f32(Math.pow(2, a));
    case "log2": return f32(Math.log2(a));
    case "tan": return f32(Math.tan(a));
    case "atan": return f32(Math.atan(a));
    case "asin": return f32(Math.asin(a));
    case "acos": return f32(Math.acos(a));
    case "sinh": return f32(Math.sinh(a));
    case "cosh": return f32(Math.cosh(a));
    case "asinh": return f32(Math.asinh(a));
    case "acosh": return f32(Math.acosh(a));
    case "atanh": return f32(Math.atanh(a));
    case "floor": return Math.floor(a);
    case "ceil": return Math.ceil(a);
    case "trunc": return Math.trunc(a);
    case "rint": return rintHalfEven(a);
    case "fmod": return a % b; // exact, as C's fmodf
    default:
      throw new Error(`float ${op}`);
  }
}

// ---- the builder ----------------------------------------------------------------------------

const INDEX_FOLD = new Set<AluOp>(["idiv", "mod", "floordiv", "floormod", "and"]);

export class ExprBuilder {
  readonly nodes: Expr[] = [];
  #map = new Map<string, Expr>();

  #make(op: ExprOp, dtype: DType, srcs: readonly Expr[], arg: number | string | null): Expr {
    const key = `${op}:${dtype}:${arg === null ? "" : String(arg)}(${srcs.map((s) => s.id).join(",")})`;
    let e = this.#map.get(key);
    if (!e) {
      e = { id: this.nodes.length, op, dtype, srcs, arg, key };
      this.nodes.push(e);
      this.#map.set(key, e);
    }
    return e;
  }

  c(value: number, dtype: DType = "int32"): Expr {
    const v = isFloat(dtype) ? roundTo(dtype, value) : dtype === "int64" ? (Number.isFinite(value) ? Number(BigInt.asIntN(64, BigInt(Math.trunc(value)))) : 0) : roundTo(dtype, Math.trunc(value));
    return this.#make("const", dtype, [], Object.is(v, -0) ? "-0" : v);
  }
  gidx(axis: number): Expr {
    return this.#make("gidx", "int32", [], axis);
  }
  ridx(axis: number): Expr {
    return this.#make("ridx", "int32", [], axis);
  }
  v(name: string): Expr {
    return this.#make("var", "int32", [], name);
  }
  acc(dtype: DType): Expr {
    return this.#make("acc", dtype, [], null);
  }
  rand(mix: number, normal: boolean, idx: Expr): Expr {
    return this.#make(normal ? "randn" : "rand", "float32", [idx], mix);
  }
  load(buf: number, dtype: DType, idx: Expr, valid: Expr | null): Expr {
    if (valid && isConst(valid)) {
      if (constVal(valid) === 0) return this.c(0, dtype);
      valid = null;
    }
    return this.#make("load", dtype, valid ? [idx, valid] : [idx], buf);
  }

  alu(op: AluOp, dtype: DType, ...srcs: Expr[]): Expr {
    // constant folding
    if (srcs.every(isConst)) {
      if (!(INDEX_FOLD.has(op) && op !== "and" && constVal(srcs[1]!) === 0))
        return this.c(evalAlu(op, dtype, srcs.map(constVal), srcs.map((s) => s.dtype)), dtype);
    }
    const [a, b] = srcs;
    switch (op) {
      case "add":
        if (isConst(b!) && constVal(b!) === 0) return a!;
        if (isConst(a!) && constVal(a!) === 0) return b!;
        break;
      case "sub":
        if (isConst(b!) && constVal(b!) === 0) return a!;
        break;
      case "mul":
        if (isConst(b!) && constVal(b!) === 1) return a!;
        if (isConst(a!) && constVal(a!) === 1) return b!;
        if (!isFloat(dtype) && ((isConst(a!) && constVal(a!) === 0) || (isConst(b!) && constVal(b!) === 0))) return this.c(0, dtype);
        break;
      case "and":
        if (isConst(a!)) return constVal(a!) ? b! : this.c(0);
        if (isConst(b!)) return constVal(b!) ? a! : this.c(0);
        if (a === b) return a!;
        break;
      case "where":
        if (isConst(a!)) return constVal(a!) !== 0 ? b! : srcs[2]!;
        if (b === srcs[2]) return b!;
        break;
      case "cast":
        if (a!.dtype === dtype) return a!;
        break;
    }
    return this.#make(op, dtype, srcs, null);
  }
}

export function isConst(e: Expr): boolean {
  return e.op === "const";
}
export function constVal(e: Expr): number {
  return e.arg === "-0" ? -0 : (e.arg as number);
}

/** The canonical text of a kernel's expression DAG (reachable nodes only, in id order). */
export function dagText(roots: readonly Expr[]): { nodes: Expr[]; text: string } {
  const seen = new Set<Expr>();
  const stack = [...roots];
  while (stack.length) {
    const e = stack.pop()!;
    if (seen.has(e)) continue;
    seen.add(e);
    stack.push(...e.srcs);
  }
  const nodes = [...seen].sort((a, b) => a.id - b.id);
  const ren = new Map<Expr, number>();
  nodes.forEach((e, i) => ren.set(e, i));
  const text =
    nodes.map((e) => `${e.op}:${e.dtype}:${e.arg === null ? "" : String(e.arg)}(${e.srcs.map((s) => ren.get(s)).join(",")})`).join(";") +
    `|roots=${roots.map((r) => ren.get(r)).join(",")}`;
  return { nodes, text };
}

export function kdimStr(d: KDim): string {
  return typeof d === "number" ? String(d) : `${d.var}<=${d.max}`;
}

export function kdimMax(d: KDim): number {
  return typeof d === "number" ? d : d.max;
}

export function kdimValue(d: KDim, vals: ReadonlyMap<string, number>): number {
  if (typeof d === "number") return d;
  const v = vals.get(d.var);
  if (v === undefined) throw new Error(`variable ${d.var} has no value`);
  return v;
}

// ---- serialisation (the plan cache stores lowered kernels as JSON) ----------------------------

type EncArg = number | string | null;
/** A number JSON cannot hold (NaN, ±Infinity) becomes "n:<text>"; a string "s:<text>". */
function encArg(a: number | string | null): EncArg {
  if (a === null) return null;
  if (typeof a === "string") return `s:${a}`;
  return Number.isFinite(a) ? a : `n:${String(a)}`;
}
function decArg(a: EncArg): number | string | null {
  if (a === null || typeof a === "number") return a;
  if (a.startsWith("s:")) return a.slice(2);
  if (a.startsWith("n:")) return Number(a.slice(2));
  throw new Error(`bad encoded argument ${a}`);
}

/** A kernel IR as plain JSON data: its reachable expression nodes (with their ids) and fields. */
export function encodeIR(ir: KernelIR): unknown {
  const roots = [ir.value, ir.store, ...(ir.reduce ? [ir.reduce.body] : [])];
  const seen = new Set<Expr>();
  const stack = [...roots];
  while (stack.length) {
    const e = stack.pop()!;
    if (seen.has(e)) continue;
    seen.add(e);
    for (const s of e.srcs) stack.push(s);
  }
  const nodes = [...seen].sort((a, b) => a.id - b.id).map((e) => [e.id, e.op, e.dtype, encArg(e.arg), e.srcs.map((s) => s.id)]);
  return {
    name: ir.name,
    dims: ir.dims,
    reduce: ir.reduce ? { fn: ir.reduce.fn, dims: ir.reduce.dims, body: ir.reduce.body.id } : null,
    value: ir.value.id,
    store: ir.store.id,
    outDtype: ir.outDtype,
    bufs: ir.bufs,
    vars: ir.vars,
    text: ir.text,
    nodes,
  };
}

/** The inverse of encodeIR: equal expression nodes (ids, keys) and fields. Throws on bad data. */
export function decodeIR(data: unknown): KernelIR {
  const d = data as {
    name: string; dims: KDim[]; reduce: { fn: ReduceOp; dims: KDim[]; body: number } | null; value: number; store: number;
    outDtype: DType; bufs: { dtype: DType }[]; vars: string[]; text: string; nodes: [number, ExprOp, DType, EncArg, number[]][];
  };
  const byId = new Map<number, Expr>();
  for (const [id, op, dtype, a, srcIds] of d.nodes) {
    const srcs = srcIds.map((i) => {
      const s = byId.get(i);
      if (!s) throw new Error(`expression ${id} reads unknown node ${i}`);
      return s;
    });
    const arg = decArg(a);
    const key = `${op}:${dtype}:${arg === null ? "" : String(arg)}(${srcIds.join(",")})`;
    byId.set(id, { id, op, dtype, srcs, arg, key });
  }
  const get = (i: number) => {
    const e = byId.get(i);
    if (!e) throw new Error(`unknown expression node ${i}`);
    return e;
  };
  return {
    name: d.name,
    dims: d.dims,
    reduce: d.reduce ? { fn: d.reduce.fn, dims: d.reduce.dims, body: get(d.reduce.body) } : null,
    value: get(d.value),
    store: get(d.store),
    outDtype: d.outDtype,
    bufs: d.bufs,
    vars: d.vars,
    text: d.text,
  };
}
