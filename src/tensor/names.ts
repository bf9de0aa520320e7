// Kernel names after what they compute: "matmul_64x512_max_c410ab8c9c4eaf94" (a sum of products
// into a [64, 512] output, then a max), "add_mul_4x16_…" (elementwise: its ops, then the shape),
// "sum_exp_8x1_…" (a sum of exponentials). The descriptive part comes
// from the kernel's expression DAG and output shape; the suffix is the hash of its canonical text,
// as the whole name was before, so two kernels share a name only when they share that text (the
// kernel memo and the disk caches key on it).
import type { ReduceOp } from "./ast";
import type { Expr } from "./ir";
import type { Dim } from "./variable";

/** Ops worth naming (value arithmetic, not index arithmetic, loads, constants or casts). */
const NAMED = new Set([
  "add", "sub", "mul", "div", "max", "min", "pow", "neg", "exp", "log", "sqrt", "sin", "cos", "abs", "tanh",
  "lt", "le", "eq", "ne", "where", "exp2", "log2", "tan", "atan", "asin", "acos", "sinh", "cosh", "floor",
  "ceil", "trunc", "rint", "fmod", "rand", "randn",
]);
/** Functions that say more than arithmetic does: named first when there are many ops. */
const FUNCTIONS = new Set(["exp", "log", "sqrt", "sin", "cos", "tanh", "pow", "exp2", "log2", "tan", "atan", "asin", "acos", "sinh", "cosh", "floor", "ceil", "trunc", "rint", "fmod", "rand", "randn", "where"]);
const MOST = 3;

/** The named ops of `root`'s DAG, outermost first, each once; loads' index arithmetic left out. */
function opsOf(root: Expr): string[] {
  const seen = new Set<Expr>();
  const out: string[] = [];
  const visit = (e: Expr) => {
    if (seen.has(e)) return;
    seen.add(e);
    if (NAMED.has(e.op) && !out.includes(e.op)) out.push(e.op);
    if (e.op === "load") return; // its sources are the index arithmetic, not what is computed
    for (const s of e.srcs) visit(s);
  };
  visit(root);
  if (out.length <= MOST) return out;
  const fns = out.filter((o) => FUNCTIONS.has(o));
  return [...fns, ...out.filter((o) => !FUNCTIONS.has(o))].slice(0, MOST);
}

/**
 * The name of a kernel writing an output of `shape` with `value` (after its reduce, if any) and
 * canonical text `text`: what it reduces ("matmul" for a sum of products), the output shape and
 * the ops applied after; or, with no reduce, its ops and the output shape ("copy" with none); then
 * the hash of the text.
 */
export function kernelName(shape: readonly Dim[], reduce: { readonly fn: ReduceOp; readonly body: Expr } | null, value: Expr, text: string): string {
  const dims = shape.length ? shape.map((d) => (typeof d === "number" ? String(d) : d.name)).join("x") : "scalar";
  const after = opsOf(value);
  // Always an op first: a C identifier cannot start with the shape's digits.
  const parts = !reduce
    ? [...(after.length ? after : ["copy"]), dims]
    : [...(reduce.fn === "sum" && reduce.body.op === "mul" ? ["matmul"] : [reduce.fn, ...opsOf(reduce.body).slice(0, 1)]), dims, ...after];
  const h = new Bun.CryptoHasher("sha256");
  h.update(text);
  return `${parts.join("_")}_${h.digest("hex").slice(0, 16)}`;
}
