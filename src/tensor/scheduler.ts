// The scheduler: decides which nodes of the lazy graph are kept in buffers ("realized"); lower.ts
// then makes each realized node one kernel. Everything else is fused: recomputed inline, at
// coordinates remapped through its views.
//
// Fusion rules
//  1. Inputs (buffer leaves) are buffers; outputs are realized; `contiguous()` realizes.
//  2. Leaves (constants, arange, rand, variable products) are inlined, except as rule 7 says.
//  3. Elementwise nodes are inlined into every consumer (chains become one kernel; a producer
//     chain fuses into the reduction that consumes it).
//     A gather counts as elementwise: its source is inlined at the coordinates its index gives.
//  4. A reduction is fused into its consumer (the consumer becomes its epilogue) when it has
//     exactly one use, reached through views that only relabel its shape (no broadcast,
//     permute or pad), and that use is not another reduction. Otherwise it is realized: a
//     broadcast of a reduction (softmax's max) would recompute the whole loop per element.
//  5. One reduction per kernel: an elementwise node carrying a fused reduction is realized when
//     it has several uses, is broadcast, or feeds another reduction.
//  6. An elementwise value whose expression holds a transcendental (exp, log, sqrt, sin, cos,
//     tanh, sigmoid, gelu, pow, erf and the other libm functions) is realized when it is read through a broadcast into a reduction
//     (say the operand of a matmul): otherwise it would be recomputed for every step of every
//     broadcast copy. (Broadcast into elementwise work is left fused: the recompute is of the
//     order of the consumer's own work, cheaper than a kernel and a buffer.)
//  7. A random leaf (rand, randn) read by a reduction, directly or through inlined elementwise work
//     and views (say an operand of a matmul), is realized: its kernel runs once, at prepare
//     (prepare.ts then holds the values as an input), instead of the generator running inside the
//     reduction loop for every output. Cheap leaves
//     (full, arange, variable products) stay inlined. This holds with fusion off as well.
// With `fusion: false` every non-leaf base node is realized (one kernel per op).
import { invalid } from "../errors";
import type { LazyNode } from "./ast";
import type { KernelIR } from "./ir";
import { Variable, type Dim } from "./variable";
import type { ShapeTracker } from "./view";

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

const EXPENSIVE = new Set<string>([
  "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "gelu",
  "erf", "exp2", "log2", "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh",
]);

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

/**
 * The schedule stage: which nodes are realized, in execution order (ascending id: sources before
 * consumers). `nodes` is toposort(outputs). Every target becomes one kernel (lower.ts).
 */
export function scheduleTargets(nodes: readonly LazyNode[], outputs: readonly LazyNode[], fusion: boolean): LazyNode[] {
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

  // rule 7: a random leaf read by a reduction is computed once into a buffer (a hash, a log, a
  // sqrt and a cos per element, otherwise redone at every step of the loop of every output).
  for (const n of nodes)
    if (n.op === "rand" && !targets.has(n) && uses(n).some((u) => feedsReduce(u.consumer))) targets.add(n);

  return [...targets].sort((a, b) => a.id - b.id);
}

