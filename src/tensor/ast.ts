// The lazy graph. Every tensor is a node with a stable id (a process-wide counter, so sources
// always have smaller ids than their consumers). Base nodes compute values in their own
// contiguous shape; a "view" node maps coordinates onto its base through a ShapeTracker.
import type { Dim } from "./variable";
import type { ShapeTracker } from "./view";
import type { DType, HostArray } from "./dtype";

export type { DType };

export type UnaryOp =
  | "neg" | "exp" | "log" | "sqrt" | "sin" | "cos" | "abs" | "recip" | "relu" | "sigmoid" | "tanh" | "gelu"
  // float32 only (an int32 operand is cast; floor, ceil, trunc and round of int32 are the int itself)
  | "erf" | "floor" | "ceil" | "trunc" | "round" | "exp2" | "log2" | "tan" | "atan" | "asin" | "acos" | "sinh" | "cosh" | "asinh" | "acosh" | "atanh";
export type BinaryOp =
  | "add" | "sub" | "mul" | "div" | "max" | "min" | "pow"
  | "cmplt" | "cmple" | "cmpgt" | "cmpge" | "cmpeq" | "cmpne"
  // remainders: mod has the divisor's sign (Python, tinygrad), fmod the dividend's (C); x mod 0 is 0 for int32, NaN for float32
  | "mod" | "fmod";
export type ReduceOp = "sum" | "max" | "min"
  // the product: start 1, acc * v (no pairing: a float32 product over- or underflows long before rounding matters)
  | "prod";

export type NodeArg =
  | { op: "buffer"; data: HostArray }
  | { op: "const"; value: number }
  | { op: "arange"; start: number; step: number }
  | { op: "rand"; seed: number; normal: boolean }
  | { op: "varconst"; dims: readonly Dim[] } // the product of dims, as a value
  | { op: "unary"; fn: UnaryOp }
  | { op: "binary"; fn: BinaryOp }
  | { op: "where" }
  | { op: "cast" }
  // the same bytes read as the node's dtype (equal element sizes)
  | { op: "bitcast" }
  | { op: "reduce"; fn: ReduceOp; axes: readonly number[] } // keepdim shape
  | { op: "contiguous" }
  | { op: "view"; st: ShapeTracker }
  // srcs [x, index]: x at the coordinates of the output with coordinate `axis` read from index (int32); outside [0, n) 0
  | { op: "gather"; axis: number };

export type Op = NodeArg["op"];

let nextId = 1;

/** What reading a value needs of its node: its shape and dtype (a plan keeps only these of its outputs). */
export type ValueShape = Pick<LazyNode, "shape" | "dtype">;

export class LazyNode {
  readonly id: number;
  readonly dtype: DType;
  readonly shape: readonly Dim[];
  readonly srcs: readonly LazyNode[];
  readonly arg: NodeArg;

  constructor(arg: NodeArg, dtype: DType, shape: readonly Dim[], srcs: readonly LazyNode[] = []) {
    this.id = nextId++;
    this.arg = arg;
    this.dtype = dtype;
    this.shape = shape;
    this.srcs = srcs;
  }

  get op(): Op {
    return this.arg.op;
  }

  get isView(): boolean {
    return this.arg.op === "view";
  }

  /** The base node under any view. */
  get base(): LazyNode {
    return this.arg.op === "view" ? this.srcs[0]! : this;
  }

  get isLeaf(): boolean {
    const o = this.arg.op;
    return o === "buffer" || o === "const" || o === "arange" || o === "rand" || o === "varconst";
  }
}

/**
 * What a plan is prepared from: anything holding a graph node (a Tensor). Plans see tensors only
 * through this, so the plan modules do not import the Tensor class (which imports them).
 */
export interface HasNode {
  readonly node: LazyNode;
}

/** Names given to input tensors (Tensor.from(..., { name })), for ExecutionPlan.run by name. */
export const inputNames = new WeakMap<LazyNode, string>();

/**
 * Data tensors made constant (Tensor.from(..., { constant: true }), fromSafetensors(path, {
 * constant: true })): every plan holds them as it holds PrepareOptions.constants, never as inputs.
 */
export const constantData = new WeakSet<LazyNode>();

/** Every node reachable from `roots`, sources before consumers (ascending id). */
export function toposort(roots: readonly LazyNode[]): LazyNode[] {
  const seen = new Set<LazyNode>();
  const stack = [...roots];
  while (stack.length) {
    const n = stack.pop()!;
    if (seen.has(n)) continue;
    seen.add(n);
    for (const s of n.srcs) if (!seen.has(s)) stack.push(s);
  }
  return [...seen].sort((a, b) => a.id - b.id);
}
