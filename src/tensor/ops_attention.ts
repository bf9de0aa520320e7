// Attention, einsum and sort as composites of existing ops: scaled dot-product attention is two matmuls
// around a masked softmax; an einsum is a permute/reshape/expand of each operand to one shared
// label order, a product, and a sum over the labels that the output drops; a sort counts ranks.
//
// The functions take the tensor through the small structural interface below (the Tensor class
// passes itself), so this module does not import tensor.ts and tensor.ts imports it plainly.
import { describeGot, invalid } from "../errors";
import type { DType } from "./ast";
import { type Dim, Variable, dimStr, shapeStr } from "./variable";

/** A Tensor's shape and movement ops, as the composite modules (this one, ops_more.ts) see it. */
export interface ShapedTensor<T> {
  readonly shape: readonly Dim[];
  readonly ndim: number;
  readonly dtype: DType;
  reshape(shape: readonly Dim[]): T;
  expand(shape: readonly Dim[]): T;
  permute(order: readonly number[]): T;
  pad(arg: readonly (readonly [number, number] | null)[]): T;
  shrink(arg: readonly (readonly [number, Dim] | null)[]): T;
  transpose(a?: number, b?: number): T;
}

/** What these ops use of a Tensor. */
export interface AttentionTensor<T> extends ShapedTensor<T> {
  matmul(o: T): T;
  mul(o: T | number): T;
  add(o: T | number): T;
  where(a: T | number, b: T | number): T;
  sum(axis?: number | readonly number[], keepdim?: boolean): T;
  softmax(axis?: number): T;
  triu(diagonal?: number): T;
}

/** Makes a constant tensor of a shape (the Tensor class passes Tensor.full). */
export type FullOf<T> = (shape: readonly Dim[], value: number, dtype: DType) => T;

export interface AttentionOptions<T> {
  /** bool or an integer dtype (non-zero = attend) or float32 (added to the scores), broadcast to [..., L, S]. */
  attnMask?: T;
  /** Query i attends keys j <= i (torch: the mask is the top-left lower triangle). */
  isCausal?: boolean;
  /** Default 1 / sqrt(E). */
  scale?: number;
}

function sameDim(a: Dim, b: Dim): boolean {
  return a === b || (a instanceof Variable && b instanceof Variable && a.name === b.name);
}

function isTensorLike(v: unknown): boolean {
  return v !== null && typeof v === "object" && "shape" in v && "dtype" in v && typeof (v as { matmul?: unknown }).matmul === "function";
}

/**
 * torch's scaled_dot_product_attention: softmax(q·kᵀ·scale + mask)·v over q [..., L, E],
 * k [..., S, E], v [..., S, Ev]; batch dims broadcast. S may be a Variable (a KV cache read
 * through a shrink); the causal mask is then built over the Variable too.
 */
export function scaledDotProductAttention<T extends AttentionTensor<T>>(call: string, q: T, k: T, v: T, opts: AttentionOptions<T>, full: FullOf<T>): T {
  for (const [what, t] of [["query", q], ["key", k], ["value", v]] as const)
    if (t.ndim < 2) invalid(call, `${what} must have at least 2 dims [..., len, features], got ${shapeStr(t.shape)}`);
  const L = q.shape[q.ndim - 2]!, E = q.shape[q.ndim - 1]!, S = k.shape[k.ndim - 2]!;
  if (!sameDim(E, k.shape[k.ndim - 1]!)) invalid(call, `query ${shapeStr(q.shape)} and key ${shapeStr(k.shape)} differ in their last dim`);
  if (!sameDim(S, v.shape[v.ndim - 2]!)) invalid(call, `key ${shapeStr(k.shape)} and value ${shapeStr(v.shape)} differ in their sequence dim`);
  if (q.dtype !== "float32" || k.dtype !== "float32" || v.dtype !== "float32") invalid(call, `query, key and value must be float32, got ${q.dtype}, ${k.dtype}, ${v.dtype}`);
  const { attnMask, isCausal = false, scale } = opts;
  if (typeof isCausal !== "boolean") invalid(call, `isCausal must be a boolean, got ${describeGot(isCausal)}`);
  if (scale !== undefined && (typeof scale !== "number" || !Number.isFinite(scale))) invalid(call, `scale must be a finite number, got ${describeGot(scale)}`);
  if (scale === undefined && typeof E !== "number") invalid(call, `the default scale needs a numeric feature dim, got ${dimStr(E)}; pass scale`);
  if (attnMask !== undefined && !isTensorLike(attnMask)) invalid(call, `attnMask must be a Tensor, got ${describeGot(attnMask)}`);
  if (attnMask !== undefined && isCausal) invalid(call, "attnMask and isCausal cannot both be given");
  let s = q.matmul(k.transpose(-2, -1)).mul(scale ?? 1 / Math.sqrt(E as number)); // [..., L, S]
  if (isCausal) s = full([L, S], 1, "int32").triu(1).where(-Infinity, s);
  if (attnMask !== undefined) {
    const m = attnMask.shape, n = s.shape;
    const fits = m.length <= n.length && m.every((d, i) => d === 1 || sameDim(d, n[n.length - m.length + i]!));
    if (!fits) invalid(call, `attnMask ${shapeStr(m)} does not broadcast to the scores ${shapeStr(n)}`);
    s = attnMask.dtype !== "float32" ? attnMask.where(s, -Infinity) : s.add(attnMask);
  }
  return s.softmax(-1).matmul(v);
}

const ELL = "...";

/** One operand's labels: letters, and "." + i for the i-th of the formula's ellipsis dims. */
function parseTerm(call: string, term: string, ndim: number | undefined): { labels: string[]; ell: boolean } {
  const at = term.indexOf(ELL);
  if (at >= 0 && term.indexOf(ELL, at + 1) >= 0) invalid(call, `more than one "..." in "${term}"`);
  const letters = at >= 0 ? term.slice(0, at) + term.slice(at + ELL.length) : term;
  if (!/^[A-Za-z]*$/.test(letters)) invalid(call, `subscripts must be letters (and one "..."), got "${term}"`);
  if (at < 0) return { labels: [...letters], ell: false };
  const nEll = ndim === undefined ? 0 : ndim - letters.length;
  if (nEll < 0) invalid(call, `"${term}" has more subscripts than the operand has dims (${ndim})`);
  return { labels: [...term.slice(0, at), ...Array.from({ length: nEll }, (_, i) => `.${nEll - 1 - i}`), ...term.slice(at + ELL.length)], ell: true };
}

/** The diagonal of axes a < b (equal numeric sizes n): b is dropped. Views only. */
function diagonal<T extends AttentionTensor<T>>(x: T, a: number, b: number): T {
  const nd = x.ndim, n = x.shape[a] as number;
  const rest = [...Array(nd).keys()].filter((i) => i !== a && i !== b);
  const lead = rest.map((i) => x.shape[i]!);
  const y = x.permute([...rest, a, b]).reshape([...lead, n * n]).pad([...lead.map(() => null), [0, n]]);
  const d = y.reshape([...lead, n, n + 1]).shrink([...lead.map(() => null), null, [0, 1]]).reshape([...lead, n]);
  // d's axes are rest..., a; put them back in the original order without b
  const order = [...Array(nd - 1).keys()].map((i) => {
    const orig = i < b ? i : i + 1;
    return orig === a ? rest.length : rest.indexOf(orig);
  });
  return d.permute(order);
}

/**
 * numpy/torch einsum: "ij,jk->ik" (explicit output) or "ij,jk" (implicit: the labels seen once,
 * in alphabetical order). "..." stands for broadcast leading dims; a label repeated in one
 * operand takes its diagonal; labels the output drops are summed.
 */
export function einsum<T extends AttentionTensor<T>>(call: string, formula: string, operands: readonly T[]): T {
  if (typeof formula !== "string") invalid(call, `formula must be a string, got ${describeGot(formula)}`);
  if (operands.length === 0) invalid(call, "needs at least one operand");
  operands.forEach((t, i) => {
    if (!isTensorLike(t)) invalid(call, `operand ${i} must be a Tensor, got ${describeGot(t)}`);
  });
  const f = formula.replace(/\s+/g, "");
  const arrow = f.indexOf("->");
  if (arrow >= 0 && f.indexOf("->", arrow + 1) >= 0) invalid(call, `more than one "->" in "${formula}"`);
  const lhs = arrow >= 0 ? f.slice(0, arrow) : f;
  const terms = lhs.split(",");
  if (terms.length !== operands.length) invalid(call, `"${formula}" names ${terms.length} operands, got ${operands.length}`);
  const parsed = terms.map((t, i) => parseTerm(call, t, operands[i]!.ndim));
  parsed.forEach((p, i) => {
    if (p.labels.length !== operands[i]!.ndim) invalid(call, `"${terms[i]}" has ${p.labels.length} subscripts for operand ${i} of shape ${shapeStr(operands[i]!.shape)}`);
  });
  const nEll = Math.max(0, ...parsed.map((p) => p.labels.filter((l) => l.startsWith(".")).length));
  const ellLabels = Array.from({ length: nEll }, (_, i) => `.${nEll - 1 - i}`);

  // each operand with unique labels: diagonals taken for repeated ones
  const xs: T[] = [], labs: string[][] = [];
  operands.forEach((t0, i) => {
    let t = t0, l = [...parsed[i]!.labels];
    for (let a = 0; a < l.length; a++)
      for (let b = l.length - 1; b > a; b--)
        if (l[a] === l[b]) {
          const na = t.shape[a]!, nb = t.shape[b]!;
          if (typeof na !== "number" || na !== nb) invalid(call, `label ${l[a]} repeated in operand ${i} over dims of sizes ${dimStr(na)} and ${dimStr(nb)}`);
          t = diagonal(t, a, b);
          l = l.filter((_, j) => j !== b);
        }
    xs.push(t);
    labs.push(l);
  });

  // the size of each label: equal, or 1 (broadcast)
  const size = new Map<string, Dim>();
  xs.forEach((t, i) =>
    labs[i]!.forEach((l, a) => {
      const d = t.shape[a]!, have = size.get(l);
      if (have === undefined || have === 1) size.set(l, d);
      else if (d !== 1 && !sameDim(have, d)) invalid(call, `label ${l.startsWith(".") ? "..." : l} has sizes ${dimStr(have)} and ${dimStr(d)}`);
    }),
  );

  let out: string[];
  if (arrow >= 0) {
    const rhs = f.slice(arrow + 2);
    const p = parseTerm(call, rhs, undefined);
    const at = rhs.indexOf(ELL);
    out = p.ell ? [...rhs.slice(0, at), ...ellLabels, ...rhs.slice(at + ELL.length)] : p.labels;
    if (new Set(out).size !== out.length) invalid(call, `output "${rhs}" repeats a label`);
    for (const l of out) if (!size.has(l)) invalid(call, `output label ${l} is in no operand of "${formula}"`);
    if (!p.ell && nEll > 0) invalid(call, `"${formula}" has "..." dims in an operand but not in the output`);
  } else {
    const count = new Map<string, number>();
    for (const l of parsed.flatMap((p) => p.labels)) if (!l.startsWith(".")) count.set(l, (count.get(l) ?? 0) + 1);
    out = [...ellLabels, ...[...count].filter(([, c]) => c === 1).map(([l]) => l).sort()];
  }
  const summed = [...size.keys()].filter((l) => !out.includes(l));
  const all = [...out, ...summed];
  const fullShape = all.map((l) => size.get(l)!);

  let prod: T | undefined;
  xs.forEach((t, i) => {
    const l = labs[i]!;
    const mine = all.filter((x) => l.includes(x));
    const p = t.permute(mine.map((x) => l.indexOf(x)));
    const r = p.reshape(all.map((x) => (l.includes(x) ? p.shape[mine.indexOf(x)]! : 1))).expand(fullShape);
    prod = prod === undefined ? r : prod.mul(r);
  });
  const res = prod!;
  return summed.length ? res.sum(summed.map((_, i) => out.length + i)) : res;
}

/** What sort uses of a Tensor. */
export interface SortTensor<T> {
  readonly shape: readonly Dim[];
  readonly ndim: number;
  readonly dtype: DType;
  permute(order: readonly number[]): T;
  unsqueeze(axis: number): T;
  cmplt(o: T | number): T;
  cmpgt(o: T | number): T;
  cmpeq(o: T | number): T;
  isnan(): T;
  mul(o: T | number): T;
  maximum(o: T | number): T;
  rsub(o: T | number): T;
  where(a: T | number, b: T | number): T;
  sum(axis?: number | readonly number[], keepdim?: boolean): T;
  gather(dim: number, index: T): T;
}

/**
 * A stable sort along `dim` by counting ranks: element i goes to place r_i = #{j: x_j before x_i}
 * + #{j < i: x_j equal to x_i}, and the indices are read back by one comparison of r against each
 * place. Two [..., n, n] reductions and a gather: meant for short rows. NaN sorts as the largest
 * (torch): last ascending, first descending. Returns [values, int32 indices].
 */
export function sort<T extends SortTensor<T>>(call: string, x: T, d: number, descending: boolean, arange: (n: number) => T, zerosInt: (shape: readonly Dim[]) => T): [T, T] {
  if (x.ndim === 0) return [x, zerosInt([])];
  const n = x.shape[d]!;
  if (typeof n !== "number") invalid(call, `cannot sort variable dimension ${d} of ${shapeStr(x.shape)}`);
  const nd = x.ndim;
  const order = [...[...Array(nd).keys()].filter((i) => i !== d), d];
  const back = [...Array(nd).keys()].map((i) => order.indexOf(i));
  const xl = x.permute(order); // [..., n]
  const xi = xl.unsqueeze(-1), xj = xl.unsqueeze(-2); // [..., n, 1], [..., 1, n]
  let before = descending ? xj.cmpgt(xi) : xj.cmplt(xi);
  let equal = xj.cmpeq(xi);
  if (x.dtype === "float32") {
    const ni = xi.isnan(), nj = xj.isnan();
    before = before.maximum(descending ? nj.mul(ni.rsub(1)) : ni.mul(nj.rsub(1)));
    equal = equal.maximum(ni.mul(nj));
  }
  const ar = arange(n);
  const jBeforeI = ar.cmplt(ar.unsqueeze(-1)); // [n(i), n(j)]: j < i
  const rank = before.maximum(equal.mul(jBeforeI)).sum(-1); // [..., n]: the place of each i
  const idx = rank.unsqueeze(-2).cmpeq(ar.unsqueeze(-1)).where(ar, 0).sum(-1); // [..., n(place)]
  return [xl.gather(-1, idx).permute(back), idx.permute(back)];
}
