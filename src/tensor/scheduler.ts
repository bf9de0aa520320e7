// The scheduler: decides which nodes of the lazy graph are kept in buffers ("realized") and
// lowers each realized node into one kernel. Everything else is fused: recomputed inline, at
// coordinates remapped through its views.
//
// Fusion rules
//  1. Inputs (buffer leaves) are buffers; outputs are realized; `contiguous()` realizes.
//  2. Leaves (constants, arange, rand, variable products) are always inlined.
//  3. Elementwise nodes are inlined into every consumer (chains become one kernel; a producer
//     chain fuses into the reduction that consumes it).
//  4. A reduction is fused into its consumer (the consumer becomes its epilogue) when it has
//     exactly one use, reached through views that only relabel its shape (no broadcast,
//     permute or pad), and that use is not another reduction. Otherwise it is realized: a
//     broadcast of a reduction (softmax's max) would recompute the whole loop per element.
//  5. One reduction per kernel: an elementwise node carrying a fused reduction is realized when
//     it has several uses, is broadcast, or feeds another reduction.
//  6. An elementwise value whose expression holds a transcendental (exp, log, sqrt, sin, cos,
//     tanh, sigmoid, gelu, pow) is realized when it is read through a broadcast into a reduction
//     (say the operand of a matmul): otherwise it would be recomputed for every step of every
//     broadcast copy. (Broadcast into elementwise work is left fused: the recompute is of the
//     order of the consumer's own work, cheaper than a kernel and a buffer.)
// With `fusion: false` every non-leaf base node is realized (one kernel per op).
import { invalid } from "../errors";
import { LazyNode, toposort, type DType } from "./ast";
import { ExprBuilder, dagText, type Expr, type KDim, type KernelIR } from "./ir";
import { Sym, Valid } from "./symbolic";
import { Variable, type Dim } from "./variable";
import { decodeIndex, linearIndex, type ShapeTracker } from "./view";

export interface ScheduleOptions {
  /** Fuse (default true). false: one kernel per operation, for testing and debugging. */
  fusion?: boolean;
}

export interface ScheduledKernel {
  readonly ir: KernelIR;
  /** The node this kernel realizes (its buffer is argument 0). */
  readonly target: LazyNode;
  /** Realized nodes read by the kernel: argument i + 1. */
  readonly inputs: readonly LazyNode[];
}

export interface Scheduled {
  readonly kernels: readonly ScheduledKernel[];
  /** Outputs in the order given (a repeated tensor appears twice). */
  readonly outputs: readonly LazyNode[];
  /** Buffer leaves reached. */
  readonly inputs: readonly LazyNode[];
  /** Every realized node: inputs first, then kernel targets in execution order. */
  readonly realized: readonly LazyNode[];
  readonly vars: ReadonlyMap<string, Variable>;
}

const EXPENSIVE = new Set<string>(["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "gelu"]);

/** Some view of the tracker broadcasts a dimension (stride 0, size > 1). */
function broadcasts(st: ShapeTracker): boolean {
  return st.views.some((v) => v.strides.some((s, i) => s === 0 && v.shape[i] !== 1));
}

export function collectVars(nodes: readonly LazyNode[], call: string): Map<string, Variable> {
  const vars = new Map<string, Variable>();
  const add = (d: Dim) => {
    if (!(d instanceof Variable)) return;
    const prev = vars.get(d.name);
    if (prev && prev !== d && (prev.min !== d.min || prev.max !== d.max))
      invalid(call, `two variables named ${d.name} with different bounds`);
    if (!prev) vars.set(d.name, d);
  };
  for (const n of nodes) {
    n.shape.forEach(add);
    if (n.arg.op === "varconst") n.arg.dims.forEach(add);
  }
  return vars;
}

// ---- structural cache: a program built again (new nodes, same structure) reuses its lowering ----

function argKey(n: LazyNode): string {
  const a = n.arg;
  switch (a.op) {
    case "buffer": return "buf";
    case "const": return `c${Object.is(a.value, -0) ? "-0" : a.value}`;
    case "arange": return `ar${a.start},${a.step}`;
    case "rand": return `rn${a.seed},${a.normal ? 1 : 0}`;
    case "varconst": return `vc${shapeKey(a.dims)}`;
    case "unary": case "binary": return a.fn;
    case "reduce": return `${a.fn}${a.axes.join(",")}`;
    case "view": return a.st.key;
    default: return "";
  }
}

function shapeKey(shape: readonly Dim[]): string {
  return shape.map((d) => (typeof d === "number" ? d : `${d.name}:${d.min}:${d.max}`)).join(",");
}

interface CachedSchedule {
  kernels: { ir: KernelIR; target: number; inputs: number[] }[];
}
const scheduleCache = new Map<string, CachedSchedule>();
const SCHEDULE_CACHE_MAX = 512;

export function schedule(outputs: readonly LazyNode[], opts: ScheduleOptions = {}, call = "prepare"): Scheduled {
  const fusion = opts.fusion ?? true;
  const nodes = toposort(outputs);
  const vars = collectVars(nodes, call);
  const pos = new Map<LazyNode, number>();
  nodes.forEach((n, i) => pos.set(n, i));
  const key =
    `${fusion ? "F" : "U"}|${outputs.map((o) => pos.get(o)).join(",")}|` +
    nodes.map((n) => `${n.op}:${n.dtype}:${shapeKey(n.shape)}:${argKey(n)}(${n.srcs.map((x) => pos.get(x)).join(",")})`).join(";");
  const inputs = nodes.filter((n) => n.op === "buffer");
  const hit = scheduleCache.get(key);
  if (hit) {
    const kernels = hit.kernels.map((k) => ({ ir: k.ir, target: nodes[k.target]!, inputs: k.inputs.map((i) => nodes[i]!) }));
    return { kernels, outputs: [...outputs], inputs, realized: [...inputs, ...kernels.map((k) => k.target)], vars };
  }
  const s = scheduleUncached(nodes, outputs, fusion, vars);
  if (scheduleCache.size >= SCHEDULE_CACHE_MAX) scheduleCache.delete(scheduleCache.keys().next().value!);
  scheduleCache.set(key, { kernels: s.kernels.map((k) => ({ ir: k.ir, target: pos.get(k.target)!, inputs: k.inputs.map((n) => pos.get(n)!) })) });
  return s;
}

function scheduleUncached(nodes: LazyNode[], outputs: readonly LazyNode[], fusion: boolean, vars: Map<string, Variable>): Scheduled {
  const consumers = new Map<LazyNode, LazyNode[]>();
  for (const n of nodes) for (const s of n.srcs) {
    let l = consumers.get(s);
    if (!l) consumers.set(s, (l = []));
    l.push(n);
  }
  const targets = new Set<LazyNode>();
  for (const o of outputs) if (o.op !== "buffer") targets.add(o);
  for (const n of nodes) {
    if (n.op === "contiguous") targets.add(n);
    if (!fusion && !n.isLeaf && !n.isView) targets.add(n);
  }

  /** Uses of base `b`, following views that are not realized themselves. `plain`: only
   * relabelling views on the way; `expands`: some view on the way broadcasts. */
  const uses = (b: LazyNode): { consumer: LazyNode; plain: boolean; expands: boolean }[] => {
    const out: { consumer: LazyNode; plain: boolean; expands: boolean }[] = [];
    const walk = (n: LazyNode, plain: boolean, expands: boolean) => {
      for (const c of consumers.get(n) ?? []) {
        if (c.isView) {
          const st = (c.arg as { st: ShapeTracker }).st;
          const p = plain && st.contiguous, x = expands || broadcasts(st);
          if (targets.has(c)) out.push({ consumer: c, plain: p, expands: x });
          else walk(c, p, x);
        } else out.push({ consumer: c, plain, expands });
      }
    };
    walk(b, true, false);
    return out;
  };

  /** `c` is (or flows, inlined, into) a reduction: a value it reads is evaluated per loop step. */
  const feeds = new Map<LazyNode, boolean>();
  const feedsReduce = (c: LazyNode): boolean => {
    if (c.op === "reduce") return true;
    if (targets.has(c)) return false;
    let f = feeds.get(c);
    if (f === undefined) {
      feeds.set(c, false);
      f = uses(c.base).some((u) => feedsReduce(u.consumer));
      feeds.set(c, f);
    }
    return f;
  };

  /** Expensive to recompute: a transcendental somewhere in the inlined expression. */
  const costly = new Map<LazyNode, boolean>();
  const isCostly = (n: LazyNode): boolean => {
    if (n.isLeaf || targets.has(n)) return false;
    if (n.isView) return isCostly(n.srcs[0]!);
    let c = costly.get(n);
    if (c === undefined) {
      const a = n.arg;
      c = (a.op === "unary" && EXPENSIVE.has(a.fn)) || (a.op === "binary" && a.fn === "pow") || n.srcs.some(isCostly);
      costly.set(n, c);
    }
    return c;
  };

  const cr = new Map<LazyNode, boolean>();
  const crOf = (n: LazyNode): boolean => {
    if (targets.has(n) || n.isLeaf) return false;
    if (n.isView) return crOf(n.srcs[0]!);
    return cr.get(n) ?? false;
  };

  for (const n of nodes) {
    if (n.isLeaf || n.isView) continue;
    if (n.op === "reduce") {
      if (!targets.has(n)) {
        const u = uses(n);
        const fusable = u.length === 1 && u[0]!.plain && u[0]!.consumer.op !== "reduce";
        if (!fusable) targets.add(n);
      }
      if (crOf(n.srcs[0]!)) targets.add(n.srcs[0]!.base);
      cr.set(n, !targets.has(n));
      continue;
    }
    const carrying = n.srcs.filter(crOf);
    for (const s of carrying.slice(1)) targets.add(s.base);
    const c = carrying.length > 0;
    cr.set(n, c);
    if (c && !targets.has(n)) {
      const u = uses(n);
      if (u.length > 1 || u.some((x) => !x.plain || x.consumer.op === "reduce")) targets.add(n);
    }
    // rule 6: an expensive value read through a broadcast is computed once, not once per copy
    if (fusion && !targets.has(n) && isCostly(n) && uses(n).some((x) => x.expands && feedsReduce(x.consumer))) targets.add(n);
  }

  const order = [...targets].sort((a, b) => a.id - b.id);
  const kernels = order.map((t) => lowerKernel(t, targets, vars));
  const inputs = nodes.filter((n) => n.op === "buffer");
  return { kernels, outputs: [...outputs], inputs, realized: [...inputs, ...order], vars };
}

// ---- lowering ---------------------------------------------------------------------------------

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

function symToExpr(eb: ExprBuilder, s: Sym): Expr {
  let e: Expr = eb.c(s.c);
  const terms = [...s.terms.values()].sort((a, b) => (a.atom.key < b.atom.key ? -1 : a.atom.key > b.atom.key ? 1 : 0));
  for (const { atom, coef } of terms) {
    let ae: Expr;
    if (atom.kind === "coord") {
      const axis = Number(atom.name.slice(1));
      ae = atom.name[0] === "g" ? eb.gidx(axis) : eb.ridx(axis);
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
  return a === "float32" || b === "float32" ? "float32" : "int32";
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
      if (n.dtype === "int32") return eb.alu("add", "int32", eb.c(a.start), eb.alu("mul", "int32", ie, eb.c(a.step)));
      return eb.alu("add", "float32", eb.c(a.start, "float32"), eb.alu("mul", "float32", eb.alu("cast", "float32", ie), eb.c(a.step, "float32")));
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
        const e = f === "gt" ? eb.alu("lt", "int32", y, x) : f === "ge" ? eb.alu("le", "int32", y, x) : eb.alu(f, "int32", x, y);
        return castTo(eb, e, n.dtype);
      }
      const dt = n.dtype;
      return eb.alu(a.fn as "add", dt, castTo(eb, l, dt), castTo(eb, r, dt));
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
      ctx.reduce.body = castTo(eb, body, n.dtype);
      return eb.acc(n.dtype);
    }
  }
  throw new Error(`cannot lower ${n.op}`);
}

function maxOf(d: Dim): number {
  return typeof d === "number" ? d : d.max;
}

function hashName(text: string): string {
  const h = new Bun.CryptoHasher("sha256");
  h.update(text);
  return `k_${h.digest("hex").slice(0, 16)}`;
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
    name: hashName(text),
    dims,
    reduce: red ? { fn: (red.node.arg as { fn: "sum" | "max" }).fn, dims: red.dims, body: red.body } : null,
    value,
    store,
    outDtype: root.dtype,
    bufs,
    vars: varNames,
    text,
  };
  return { ir, target: root, inputs: ctx.inputs };
}
