// The lowering stage: each realized node (a kernel target the scheduler chose) becomes one kernel
// IR. Everything between the target and the realized values it reads is inlined, at coordinates
// remapped through its views; adjacent output (and reduce) axes are merged while the index
// arithmetic does not grow. The kernel's name hashes its lowered text, so equal kernels share it.
import type { DType, LazyNode, ReduceOp } from "./ast";
import { isFloat, isHalf, promoteTypes } from "./dtype";
import { ExprBuilder, dagText, type Expr, type KDim, type KernelIR } from "./ir";
import { kernelName } from "./names";
import type { ScheduledKernel } from "./scheduler";
import { Sym, Valid } from "./symbolic";
import type { Dim, Variable } from "./variable";
import { decodeIndex, linearIndex } from "./view";

/** Lower every target, in order (targets in execution order; `targets` is also the set of realized nodes besides the inputs). */
export function lowerAll(order: readonly LazyNode[], vars: ReadonlyMap<string, Variable>): ScheduledKernel[] {
  const targets = new Set(order);
  return order.map((t) => lowerKernel(t, targets, vars));
}

interface LowerCtx {
  eb: ExprBuilder;
  root: LazyNode;
  targets: ReadonlySet<LazyNode>;
  inputs: LazyNode[];
  bufIndex: Map<LazyNode, number>;
  reduce: { node: LazyNode; dims: KDim[]; body: Expr } | null;
  /** Merge groups for the reduce axes (positions into the reduced-axes list). */
  redGroups: number[][] | null;
  redAxesSeen: number[] | null;
  vars: ReadonlyMap<string, Variable>;
}

function kdim(d: Dim): KDim {
  return typeof d === "number" ? d : { var: d.name, max: d.max };
}

/** Per builder: coordinates read from data (a gather's index), by the name of their coordinate atom. */
const dataCoords = new WeakMap<ExprBuilder, Map<string, Expr>>();

function symToExpr(eb: ExprBuilder, s: Sym): Expr {
  let e: Expr = eb.c(s.c);
  const terms = [...s.terms.values()].sort((a, b) => (a.atom.key < b.atom.key ? -1 : a.atom.key > b.atom.key ? 1 : 0));
  for (const { atom, coef } of terms) {
    let ae: Expr;
    if (atom.kind === "coord") {
      const axis = Number(atom.name.slice(1));
      ae = atom.name[0] === "x" ? dataCoords.get(eb)!.get(atom.name)! : atom.name[0] === "g" ? eb.gidx(axis) : eb.ridx(axis);
    } else {
      const x = symToExpr(eb, atom.x);
      const nonneg = atom.x.lo >= 0;
      ae = eb.alu(atom.kind === "div" ? (nonneg ? "idiv" : "floordiv") : nonneg ? "mod" : "floormod", "int32", x, eb.c(atom.d));
    }
    e = eb.alu("add", "int32", e, coef === 1 ? ae : eb.alu("mul", "int32", ae, eb.c(coef)));
  }
  return e;
}

function validToExpr(eb: ExprBuilder, v: Valid): Expr | null {
  if (v.never) return eb.c(0);
  let out: Expr | null = null;
  for (const { s, lo, hi } of v.conds) {
    const e = symToExpr(eb, s);
    const parts: Expr[] = [];
    if (s.lo < lo) parts.push(eb.alu("le", "int32", eb.c(lo), e));
    if (s.hi >= hi) parts.push(eb.alu("lt", "int32", e, eb.c(hi)));
    for (const p of parts) out = out ? eb.alu("and", "int32", out, p) : p;
  }
  return out;
}

function bufOf(ctx: LowerCtx, n: LazyNode): number {
  let i = ctx.bufIndex.get(n);
  if (i === undefined) {
    ctx.inputs.push(n);
    i = ctx.inputs.length;
    ctx.bufIndex.set(n, i);
  }
  return i;
}

function promote(a: DType, b: DType): DType {
  return promoteTypes(a, b);
}

function castTo(eb: ExprBuilder, e: Expr, dtype: DType): Expr {
  return e.dtype === dtype ? e : eb.alu("cast", dtype, e);
}

function andE(eb: ExprBuilder, a: Expr | null, b: Expr | null): Expr | null {
  if (!a) return b;
  if (!b) return a;
  return eb.alu("and", "int32", a, b);
}

/** The value of node `n` at coordinates `cs`; `guard` is the validity under which it is read
 * (loads are guarded by it, so an inlined producer behind a pad never reads out of bounds). */
function lowerNode(ctx: LowerCtx, n: LazyNode, cs: readonly Sym[], guard: Expr | null = null): Expr {
  const { eb } = ctx;
  if (n !== ctx.root && (ctx.targets.has(n) || n.op === "buffer"))
    return eb.load(bufOf(ctx, n), n.dtype, symToExpr(eb, linearIndex(cs, n.shape)), guard);
  const a = n.arg;
  switch (a.op) {
    case "view": {
      const base = n.srcs[0]!;
      const { idx, valid } = a.st.expr(cs);
      if (valid.never) return eb.c(0, n.dtype);
      const vexpr = validToExpr(eb, valid);
      if (base !== ctx.root && (ctx.targets.has(base) || base.op === "buffer"))
        return eb.load(bufOf(ctx, base), base.dtype, symToExpr(eb, idx), andE(eb, guard, vexpr));
      const inner = lowerNode(ctx, base, decodeIndex(idx, base.shape), andE(eb, guard, vexpr));
      return vexpr ? eb.alu("where", n.dtype, vexpr, inner, eb.c(0, n.dtype)) : inner;
    }
    case "buffer":
      // the root is an input only when an output is an input: copy it
      return eb.load(bufOf(ctx, n), n.dtype, symToExpr(eb, linearIndex(cs, n.shape)), guard);
    case "const":
      return eb.c(a.value, n.dtype);
    case "arange": {
      const i = cs[0] ?? Sym.const(0);
      const ie = symToExpr(eb, i);
      // integer dtypes count in int32 (int64: in int64), floats in float32, then cast
      if (!isFloat(n.dtype)) {
        const it = n.dtype === "int64" ? "int64" : "int32";
        return castTo(eb, eb.alu("add", it, eb.c(a.start, it), eb.alu("mul", it, castTo(eb, ie, it), eb.c(a.step, it))), n.dtype);
      }
      return castTo(eb, eb.alu("add", "float32", eb.c(a.start, "float32"), eb.alu("mul", "float32", eb.alu("cast", "float32", ie), eb.c(a.step, "float32"))), n.dtype);
    }
    case "rand": {
      const e = eb.rand(a.seed, a.normal, symToExpr(eb, linearIndex(cs, n.shape)));
      return castTo(eb, e, n.dtype);
    }
    case "varconst": {
      let e = eb.c(1);
      for (const d of a.dims) e = eb.alu("mul", "int32", e, typeof d === "number" ? eb.c(d) : eb.v(d.name));
      return castTo(eb, e, n.dtype);
    }
    case "contiguous":
      return lowerNode(ctx, n.srcs[0]!, cs, guard);
    case "cast":
      return castTo(eb, lowerNode(ctx, n.srcs[0]!, cs, guard), n.dtype);
    case "bitcast": {
      const x = lowerNode(ctx, n.srcs[0]!, cs, guard);
      return x.dtype === n.dtype ? x : eb.alu("bitcast", n.dtype, x);
    }
    case "where": {
      const c = lowerNode(ctx, n.srcs[0]!, cs, guard);
      const x = castTo(eb, lowerNode(ctx, n.srcs[1]!, cs, guard), n.dtype);
      const y = castTo(eb, lowerNode(ctx, n.srcs[2]!, cs, guard), n.dtype);
      return eb.alu("where", n.dtype, c, x, y);
    }
    case "unary": {
      const dt = n.dtype;
      const x = castTo(eb, lowerNode(ctx, n.srcs[0]!, cs, guard), dt);
      const one = eb.c(1, dt);
      switch (a.fn) {
        case "neg": case "exp": case "log": case "sqrt": case "sin": case "cos": case "abs": case "tanh":
          return eb.alu(a.fn, dt, x);
        case "recip":
          return eb.alu("div", dt, one, x);
        case "relu":
          return eb.alu("max", dt, x, eb.c(0, dt));
        case "sigmoid":
          return eb.alu("div", dt, one, eb.alu("add", dt, one, eb.alu("exp", dt, eb.alu("neg", dt, x))));
        case "gelu": {
          // tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
          const x3 = eb.alu("mul", dt, eb.alu("mul", dt, x, x), x);
          const inner = eb.alu("mul", dt, eb.c(0.7978845608028654, dt), eb.alu("add", dt, x, eb.alu("mul", dt, eb.c(0.044715, dt), x3)));
          return eb.alu("mul", dt, eb.alu("mul", dt, eb.c(0.5, dt), x), eb.alu("add", dt, one, eb.alu("tanh", dt, inner)));
        }
        case "erf":
          return castTo(eb, erfExpr(eb, castTo(eb, x, "float32")), dt);
        case "round":
          return eb.alu("rint", dt, x);
        case "exp2": case "log2": case "tan": case "atan": case "asin": case "acos": case "sinh": case "cosh":
        case "floor": case "ceil": case "trunc": case "asinh": case "acosh": case "atanh":
          return eb.alu(a.fn, dt, x);
      }
      break;
    }
    case "binary": {
      const l = lowerNode(ctx, n.srcs[0]!, cs, guard);
      const r = lowerNode(ctx, n.srcs[1]!, cs, guard);
      const cmp = { cmplt: "lt", cmple: "le", cmpeq: "eq", cmpne: "ne", cmpgt: "gt", cmpge: "ge" } as const;
      if (a.fn in cmp) {
        const dt = promote(l.dtype, r.dtype);
        const x = castTo(eb, l, dt), y = castTo(eb, r, dt);
        const f = cmp[a.fn as keyof typeof cmp];
        // the comparison's own dtype (bool for tensor comparisons)
        const rt = n.dtype;
        return f === "gt" ? eb.alu("lt", rt, y, x) : f === "ge" ? eb.alu("le", rt, y, x) : eb.alu(f, rt, x, y);
      }
      const dt = n.dtype;
      const x = castTo(eb, l, dt), y = castTo(eb, r, dt);
      if (a.fn === "fmod") return eb.alu("fmod", dt, x, y);
      if (a.fn === "mod") return modExpr(eb, dt, x, y);
      return eb.alu(a.fn as "add", dt, x, y);
    }
    case "gather": {
      // the index, clamped into [0, n), is a coordinate atom of its own: views and inlined
      // producers of x map it like a loop coordinate; outside [0, n) the value is 0
      const [x, index] = n.srcs as [LazyNode, LazyNode];
      const size = x.shape[a.axis] as number;
      if (!size) return eb.c(0, n.dtype);
      const ie = castTo(eb, lowerNode(ctx, index, cs, guard), "int32");
      const inRange = eb.alu("and", "int32", eb.alu("le", "int32", eb.c(0), ie), eb.alu("lt", "int32", ie, eb.c(size)));
      let coords = dataCoords.get(eb);
      if (!coords) dataCoords.set(eb, (coords = new Map()));
      const name = `x${coords.size}`;
      coords.set(name, eb.alu("max", "int32", eb.alu("min", "int32", ie, eb.c(size - 1)), eb.c(0)));
      const xcs = cs.map((c, i) => (i === a.axis ? Sym.coord(name, size - 1) : c));
      const v = castTo(eb, lowerNode(ctx, x, xcs, andE(eb, guard, inRange)), n.dtype);
      return eb.alu("where", n.dtype, inRange, v, eb.c(0, n.dtype));
    }
    case "reduce": {
      if (ctx.reduce) throw new Error(`scheduler bug: two reductions in kernel of node ${ctx.root.id}`);
      const src = n.srcs[0]!;
      const axes = [...a.axes].sort((x, y) => x - y);
      // reduce coordinates, possibly merged into groups of adjacent numeric axes
      const groups = ctx.redGroups ?? axes.map((_, i) => [i]);
      ctx.redAxesSeen = axes;
      const rcs = new Map<number, Sym>();
      const dims: KDim[] = [];
      groups.forEach((g, gi) => {
        const sizes = g.map((i) => src.shape[axes[i]!]!);
        if (g.length === 1) {
          dims.push(kdim(sizes[0]!));
          rcs.set(axes[g[0]!]!, Sym.coord(`r${gi}`, maxOf(sizes[0]!) - 1));
          return;
        }
        const ns = sizes as number[];
        const total = ns.reduce((p, q) => p * q, 1);
        dims.push(total);
        const m = Sym.coord(`r${gi}`, total - 1);
        let inner = 1;
        for (let k = g.length - 1; k >= 0; k--) {
          rcs.set(axes[g[k]!]!, m.div(inner).mod(ns[k]!));
          inner *= ns[k]!;
        }
      });
      const scs = src.shape.map((_, i) => rcs.get(i) ?? cs[i]!);
      ctx.reduce = { node: n, dims, body: null as unknown as Expr };
      const body = lowerNode(ctx, src, scs, guard);
      // float16 / bfloat16 accumulate in float32, rounded once at the end
      const accDt = isHalf(n.dtype) ? "float32" : n.dtype;
      ctx.reduce.body = castTo(eb, body, accDt);
      return castTo(eb, eb.acc(accDt), n.dtype);
    }
  }
  throw new Error(`cannot lower ${n.op}`);
}

// erf in float32 from the ALU's own ops, so every dialect and the interpreter compute it alike
// (Metal has no erf). |x| < 1: its Maclaurin series to the x²¹ term (truncation below 2e-9);
// |x| >= 1: 1 - erfc(|x|) with erfc from the Chebyshev fit of Numerical Recipes (fractional
// error below 1.2e-7, and erfc(1) < 0.16, so below 2e-8 on erf). Odd; NaN stays NaN; ±inf give ±1.
const ERF_SERIES = Array.from({ length: 11 }, (_, n) => {
  let f = 1;
  for (let k = 2; k <= n; k++) f *= k;
  return ((n % 2 ? -1 : 1) * 2) / Math.sqrt(Math.PI) / (f * (2 * n + 1));
});
const ERFC_FIT = [-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277];

function erfExpr(eb: ExprBuilder, x: Expr): Expr {
  const f = "float32";
  const ax = eb.alu("abs", f, x);
  const s = eb.alu("mul", f, x, x);
  let p = eb.c(ERF_SERIES[ERF_SERIES.length - 1]!, f);
  for (let i = ERF_SERIES.length - 2; i >= 0; i--) p = eb.alu("add", f, eb.alu("mul", f, p, s), eb.c(ERF_SERIES[i]!, f));
  const small = eb.alu("mul", f, x, p);
  const t = eb.alu("div", f, eb.c(1, f), eb.alu("add", f, eb.c(1, f), eb.alu("mul", f, eb.c(0.5, f), ax)));
  let q = eb.c(ERFC_FIT[ERFC_FIT.length - 1]!, f);
  for (let i = ERFC_FIT.length - 2; i >= 0; i--) q = eb.alu("add", f, eb.alu("mul", f, q, t), eb.c(ERFC_FIT[i]!, f));
  const erfc = eb.alu("mul", f, t, eb.alu("exp", f, eb.alu("sub", f, q, s)));
  const big = eb.alu("sub", f, eb.c(1, f), erfc);
  const signed = eb.alu("where", f, eb.alu("lt", "int32", x, eb.c(0, f)), eb.alu("neg", f, big), big);
  return eb.alu("where", f, eb.alu("lt", "int32", ax, eb.c(1, f)), small, signed);
}

// x mod y with the divisor's sign (Python, numpy): r = fmod(x, y), plus y when r is non-zero and
// of the other sign; a float zero takes y's sign (numpy's divmod). fmod is exact, so is r + y's
// single rounding.
function modExpr(eb: ExprBuilder, dt: DType, x: Expr, y: Expr): Expr {
  const r = eb.alu("fmod", dt, x, y);
  const zero = eb.c(0, dt);
  const flip = eb.alu("and", "int32", eb.alu("ne", "int32", r, zero), eb.alu("ne", "int32", eb.alu("lt", "int32", r, zero), eb.alu("lt", "int32", y, zero)));
  const m = eb.alu("where", dt, flip, eb.alu("add", dt, r, y), r);
  if (!isFloat(dt)) return m;
  const signedZero = eb.alu("where", dt, eb.alu("lt", "int32", y, zero), eb.c(-0, dt), zero);
  return eb.alu("where", dt, eb.alu("eq", "int32", r, zero), signedZero, m);
}

function maxOf(d: Dim): number {
  return typeof d === "number" ? d : d.max;
}

/** Lower with output axes merged by `outGroups` and reduce axes by `redGroups`. */
function lowerWith(root: LazyNode, targets: ReadonlySet<LazyNode>, vars: ReadonlyMap<string, Variable>, outGroups: number[][], redGroups: number[][] | null) {
  const eb = new ExprBuilder();
  const ctx: LowerCtx = { eb, root, targets, inputs: [], bufIndex: new Map(), reduce: null, redGroups, redAxesSeen: null, vars };
  const dims: KDim[] = [];
  const cs = new Array<Sym>(root.shape.length);
  outGroups.forEach((g, gi) => {
    const sizes = g.map((i) => root.shape[i]!);
    if (g.length === 1) {
      dims.push(kdim(sizes[0]!));
      cs[g[0]!] = Sym.coord(`g${gi}`, maxOf(sizes[0]!) - 1);
      return;
    }
    const ns = sizes as number[];
    const total = ns.reduce((p, q) => p * q, 1);
    dims.push(total);
    const m = Sym.coord(`g${gi}`, total - 1);
    let inner = 1;
    for (let k = g.length - 1; k >= 0; k--) {
      cs[g[k]!] = m.div(inner).mod(ns[k]!);
      inner *= ns[k]!;
    }
  });
  const value = castTo(eb, lowerNode(ctx, root, cs), root.dtype);
  const store = symToExpr(eb, linearIndex(cs, root.shape));
  const roots = [value, store, ...(ctx.reduce ? [ctx.reduce.body] : [])];
  const { nodes, text } = dagText(roots);
  let cost = 0;
  for (const e of nodes) if (e.op === "idiv" || e.op === "mod" || e.op === "floordiv" || e.op === "floormod") cost++;
  return { ctx, dims, value, store, text, cost };
}

function lowerKernel(root: LazyNode, targets: ReadonlySet<LazyNode>, vars: ReadonlyMap<string, Variable>): ScheduledKernel {
  const nd = root.shape.length;
  let outGroups = root.shape.map((_, i) => [i]);
  let best = lowerWith(root, targets, vars, outGroups, null);
  // merge adjacent numeric output axes, innermost first, while the index cost does not grow
  const tryMerge = (groups: number[][], at: number): number[][] | null => {
    const a = groups[at]!, b = groups[at + 1]!;
    if ([...a, ...b].some((i) => typeof root.shape[i] !== "number")) return null;
    return [...groups.slice(0, at), [...a, ...b], ...groups.slice(at + 2)];
  };
  for (let at = outGroups.length - 2; at >= 0 && nd > 1; at--) {
    const g = tryMerge(outGroups, at);
    if (!g) continue;
    const r = lowerWith(root, targets, vars, g, null);
    if (r.cost <= best.cost) {
      best = r;
      outGroups = g;
    }
  }
  if (best.ctx.reduce && best.ctx.redAxesSeen && best.ctx.redAxesSeen.length > 1) {
    const axes = best.ctx.redAxesSeen;
    const src = best.ctx.reduce.node.srcs[0]!;
    let rg = axes.map((_, i) => [i]);
    for (let at = rg.length - 2; at >= 0; at--) {
      const a = rg[at]!, b = rg[at + 1]!;
      const ax = [...a, ...b].map((i) => axes[i]!);
      if (ax.some((i) => typeof src.shape[i] !== "number")) continue;
      if (axes[a[a.length - 1]!]! + 1 !== axes[b[0]!]!) continue;
      const g = [...rg.slice(0, at), [...a, ...b], ...rg.slice(at + 2)];
      const r = lowerWith(root, targets, vars, outGroups, g);
      if (r.cost <= best.cost) {
        best = r;
        rg = g;
      }
    }
  }
  const { ctx, dims, value, store } = best;
  const red = ctx.reduce;
  const bufs = [{ dtype: root.dtype }, ...ctx.inputs.map((n) => ({ dtype: n.dtype }))];
  const used = new Set<string>();
  const { nodes } = dagText([value, store, ...(red ? [red.body] : [])]);
  for (const e of nodes) if (e.op === "var") used.add(e.arg as string);
  for (const d of [...dims, ...(red?.dims ?? [])]) if (typeof d !== "number") used.add(d.var);
  const varNames = [...used].sort();
  const header =
    `dims=${dims.map((d) => (typeof d === "number" ? d : `${d.var}<=${d.max}`)).join(",")};` +
    `reduce=${red ? `${(red.node.arg as { fn: string }).fn}:${red.dims.map((d) => (typeof d === "number" ? d : `${d.var}<=${d.max}`)).join(",")}` : "-"};` +
    `bufs=${bufs.map((b) => b.dtype).join(",")};vars=${varNames.join(",")};`;
  const text = header + best.text;
  const ir: KernelIR = {
    name: kernelName(root.shape, red ? { fn: (red.node.arg as { fn: ReduceOp }).fn, body: red.body } : null, value, text),
    dims,
    reduce: red ? { fn: (red.node.arg as { fn: ReduceOp }).fn, dims: red.dims, body: red.body } : null,
    value,
    store,
    outDtype: root.dtype,
    bufs,
    vars: varNames,
    text,
  };
  return { ir, target: root, inputs: ctx.inputs };
}
