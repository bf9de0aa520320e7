// More of tinygrad's tensor functions, each a composite of existing ops: the bitwise ops and
// shifts as integer arithmetic on the bits (the IR has no bitwise ops; nothing here overflows, so
// C's signed-overflow rule never applies), unfold, meshgrid, logcumsumexp, diag and diagonal,
// normalize, the losses (binary and sparse categorical cross entropy, NLL), and masked selection
// (maskedSelect, nonzero), whose output length depends on the data.
//
// The functions take the tensor through the small structural interface below (the Tensor class
// passes itself), so this module does not import tensor.ts and tensor.ts imports it plainly.
import { describeGot, invalid } from "../errors";
import type { DType } from "./ast";
import type { ShapedTensor } from "./ops_attention";
import { isFloat, promoteTypes } from "./dtype";
import { type Dim, shapeStr } from "./variable";

/** What these ops use of a Tensor. */
export interface MoreTensor<T> extends ShapedTensor<T> {
  flatten(): T;
  broadcastTo(shape: readonly Dim[]): T;
  unsqueeze(axis: number): T;
  squeeze(axis?: number): T;
  cast(dtype: DType): T;
  add(o: T | number): T;
  sub(o: T | number): T;
  rsub(o: T | number): T;
  mul(o: T | number): T;
  div(o: T | number): T;
  mod(o: T | number): T;
  neg(): T;
  abs(): T;
  exp(): T;
  log(): T;
  sqrt(): T;
  pow(o: T | number): T;
  maximum(o: T | number): T;
  minimum(o: T | number): T;
  cmplt(o: T | number): T;
  cmple(o: T | number): T;
  cmpge(o: T | number): T;
  cmpeq(o: T | number): T;
  cmpne(o: T | number): T;
  isinf(): T;
  where(a: T | number, b: T | number): T;
  sum(axis?: number | readonly number[], keepdim?: boolean): T;
  max(axis?: number | readonly number[], keepdim?: boolean): T;
  mean(axis?: number | readonly number[], keepdim?: boolean): T;
  cumsum(axis?: number): T;
  cummax(axis?: number): T;
  logSoftmax(axis?: number): T;
  gather(dim: number, index: T): T;
  indexSelect(dim: number, index: T): T;
  toList(): number[];
}

/** The constructors these ops need (the Tensor class passes its statics). */
export interface MoreMake<T> {
  full(shape: readonly Dim[], value: number, dtype: DType): T;
  /** int32 0 … n-1. */
  arange(n: number): T;
  stack(ts: readonly T[], dim: number): T;
  isTensor(v: unknown): v is T;
}

export type Reduction = "none" | "sum" | "mean";

/** The bit count of an integer dtype (bool and floats have none). */
const BITS: Partial<Record<DType, number>> = { int8: 8, uint8: 8, int32: 32, int64: 64 };

function reduce<T extends MoreTensor<T>>(loss: T, reduction: Reduction): T {
  return reduction === "none" ? loss : reduction === "sum" ? loss.sum() : loss.mean();
}

export function reductionArg(call: string, r: unknown): Reduction {
  if (r === undefined) return "mean";
  if (r !== "none" && r !== "sum" && r !== "mean") invalid(call, `reduction must be "none", "sum" or "mean", got ${describeGot(r)}`);
  return r;
}

/** A numeric dimension of x, else INVALID_VALUE. */
function numDim<T extends MoreTensor<T>>(call: string, x: T, d: number): number {
  const n = x.shape[d]!;
  if (typeof n !== "number") invalid(call, `dimension ${d} of ${shapeStr(x.shape)} cannot be a variable`);
  return n;
}

function numShape(call: string, shape: readonly Dim[]): number[] {
  if (!shape.every((d) => typeof d === "number")) invalid(call, `needs a fixed shape, got ${shapeStr(shape)}`);
  return shape as number[];
}

// ---- bitwise ops and shifts ---------------------------------------------------------------------

/** floor(x / 2^k) of an integer tensor (the arithmetic right shift), 2^k in x's range. */
function floorDiv2k<T extends MoreTensor<T>>(x: T, k: number): T {
  if (k === 0) return x;
  const p = 2 ** k;
  return x.sub(x.mod(p)).div(p); // x - (x mod p) is a multiple of p between INT_MIN and x: exact, no overflow
}

/** The weight of bit k in an n-bit dtype (the top bit of a signed one counts -2^(n-1)). */
function bitWeight(dt: DType, n: number, k: number): number {
  return k === n - 1 && dt !== "uint8" ? -(2 ** k) : 2 ** k;
}

/**
 * Bit k of x (0 or 1, in x's dtype), each computed from x itself (a chain of shifts would nest
 * the expression n deep): (x >> k) mod 2; the sign bit of a signed dtype is x < 0.
 */
function bitOf<T extends MoreTensor<T>>(x: T, dt: DType, n: number, k: number): T {
  if (k === n - 1 && dt !== "uint8") return x.cmplt(0).cast(dt);
  return floorDiv2k(x, k).mod(2);
}

/** The two integer (or bool) operands of a bitwise op in their promoted dtype. */
function intOperands<T extends MoreTensor<T>>(call: string, x: T, y: T | number, make: MoreMake<T>): [T, T, DType] {
  if (x.dtype !== "bool" && BITS[x.dtype] === undefined) invalid(call, `needs an integer or bool tensor, got ${x.dtype}`);
  if (typeof y === "number") {
    if (!Number.isSafeInteger(y)) invalid(call, `other must be an integer or an integer or bool Tensor, got ${describeGot(y)}`);
    const dt = x.add(y).dtype; // the weak-scalar rule of arithmetic (dtype.ts)
    return [x.cast(dt), make.full([], y, dt), dt];
  }
  if (!make.isTensor(y)) invalid(call, `other must be a Tensor or an integer, got ${describeGot(y)}`);
  if (y.dtype !== "bool" && BITS[y.dtype] === undefined) invalid(call, `other must be an integer or bool tensor, got ${y.dtype}`);
  const dt = promoteTypes(x.dtype, y.dtype);
  return [x.cast(dt), y.cast(dt), dt];
}

/**
 * Bitwise and / or / xor: each operand split into its bits (b_k = (x >> k) mod 2, an arithmetic
 * shift by floor division), the bits combined, and the weighted bits summed back (the sign bit
 * weighs -2^(n-1)); no step overflows. bool operands: logical and / or / xor, bool.
 */
export function bitwise<T extends MoreTensor<T>>(call: string, op: "and" | "or" | "xor", x: T, y: T | number, make: MoreMake<T>): T {
  const [a, b, dt] = intOperands(call, x, y, make);
  if (dt === "bool") return op === "and" ? a.minimum(b) : op === "or" ? a.maximum(b) : a.cmpne(b);
  const n = BITS[dt]!;
  let out: T | undefined;
  for (let k = 0; k < n; k++) {
    const ba = bitOf(a, dt, n, k), bb = bitOf(b, dt, n, k);
    const bit = op === "and" ? ba.mul(bb) : op === "or" ? ba.maximum(bb) : ba.cmpne(bb).cast(dt);
    const term = bit.mul(bitWeight(dt, n, k));
    out = out === undefined ? term : out.add(term);
  }
  return out!.cast(dt);
}

/** ~x: -1 - x for signed integers, 255 - x for uint8, logical not for bool. */
export function bitwiseNot<T extends MoreTensor<T>>(call: string, x: T): T {
  if (x.dtype === "bool") return x.cmpeq(0);
  if (BITS[x.dtype] === undefined) invalid(call, `needs an integer or bool tensor, got ${x.dtype}`);
  return x.rsub(x.dtype === "uint8" ? 255 : -1);
}

function shiftArgs<T extends MoreTensor<T>>(call: string, x: T, bits: unknown): number {
  if (BITS[x.dtype] === undefined) invalid(call, `needs an integer tensor (int8, uint8, int32, int64), got ${x.dtype}`);
  if (typeof bits !== "number" || !Number.isSafeInteger(bits) || bits < 0) invalid(call, `bits must be a non-negative integer, got ${describeGot(bits)}`);
  return bits;
}

/**
 * x << bits, wrapping at the dtype's width as C's unsigned shift does (bits >= the width gives 0):
 * the low n-1-bits bits move up, and bit n-1-bits becomes the sign (top) bit.
 */
export function lshift<T extends MoreTensor<T>>(call: string, x: T, bits: number): T {
  const k = shiftArgs(call, x, bits), n = BITS[x.dtype]!;
  if (k === 0) return x;
  if (k >= n) return x.mul(0);
  const j = n - 1 - k; // the bit that lands on the top bit
  const low = j ? x.mod(2 ** j) : x.mul(0);
  const top = floorDiv2k(x, j).mod(2);
  return low.mul(2 ** k).add(top.mul(bitWeight(x.dtype, n, n - 1))).cast(x.dtype);
}

/** x >> bits, arithmetic (floor division by 2^bits: the sign fills in); bits >= the width gives 0 or -1. */
export function rshift<T extends MoreTensor<T>>(call: string, x: T, bits: number): T {
  const k = shiftArgs(call, x, bits), n = BITS[x.dtype]!;
  if (x.dtype === "uint8") return k >= n ? x.mul(0) : floorDiv2k(x, k);
  if (k >= n - 1) return x.cmplt(0).where(-1, 0).cast(x.dtype);
  return floorDiv2k(x, k);
}

// ---- movement and construction ------------------------------------------------------------------

/**
 * tinygrad's unfold: windows of `size` along `dim`, `step` apart; dim becomes the window count
 * (n - size) / step + 1 and a new last axis holds each window. One gather of precomputed indices.
 */
export function unfold<T extends MoreTensor<T>>(call: string, x: T, d: number, size: number, step: number, make: MoreMake<T>): T {
  if (x.ndim === 0) invalid(call, "needs at least a 1-D tensor");
  const n = numDim(call, x, d);
  if (!Number.isSafeInteger(size) || size < 0 || size > n) invalid(call, `size must be an integer in [0, ${n}], got ${describeGot(size)}`);
  if (!Number.isSafeInteger(step) || step <= 0) invalid(call, `step must be a positive integer, got ${describeGot(step)}`);
  const W = Math.floor((n - size) / step) + 1;
  const pre = x.shape.slice(0, d), post = x.shape.slice(d + 1);
  if (size === 0) return make.full([...pre, W, ...post, 0], 0, x.dtype);
  const idx = make.arange(W).mul(step).unsqueeze(-1).add(make.arange(size)).flatten(); // [W * size]
  const y = x.indexSelect(d, idx).reshape([...pre, W, size, ...post]);
  const order = [...Array(x.ndim + 1).keys()].filter((i) => i !== d + 1);
  return y.permute([...order, d + 1]);
}

/** tinygrad's meshgrid: each tensor flattened, reshaped to its own axis and expanded to the grid; "xy" swaps the first two axes. */
export function meshgrid<T extends MoreTensor<T>>(call: string, tensors: readonly T[], indexing: unknown): T[] {
  if (indexing !== "ij" && indexing !== "xy") invalid(call, `indexing must be "ij" or "xy", got ${describeGot(indexing)}`);
  const sizes = tensors.map((t, i) => {
    const s = numShape(`${call} (tensors[${i}])`, t.shape);
    return s.reduce((p, q) => p * q, 1);
  });
  const axis = sizes.map((_, i) => (indexing === "xy" && sizes.length > 1 && i < 2 ? 1 - i : i));
  const out = sizes.map((_, i) => sizes[axis.indexOf(i)]!);
  return tensors.map((t, i) => t.reshape(out.map((s, k) => (k === axis[i] ? s : 1))).expand(out));
}

/** tinygrad's diag: a 1-D tensor as the diagonal of a square matrix (zeros elsewhere). */
export function diag<T extends MoreTensor<T>>(call: string, x: T, make: MoreMake<T>): T {
  if (x.ndim !== 1) invalid(call, `needs a 1-D tensor, got ${shapeStr(x.shape)}`);
  const n = numDim(call, x, 0);
  if (n === 0) return make.full([0, 0], 0, x.dtype);
  return x.unsqueeze(-1).pad([null, [0, n]]).flatten().shrink([[0, n * n]]).reshape([n, n]);
}

/** torch's diagonal: the diagonal `offset` above (below, negative) the main one of axes dim1, dim2, as a new last axis. Views only. */
export function diagonal<T extends MoreTensor<T>>(call: string, x: T, offset: number, a: number, b: number, make: MoreMake<T>): T {
  if (x.ndim < 2) invalid(call, `needs at least 2 dims, got ${shapeStr(x.shape)}`);
  if (!Number.isSafeInteger(offset)) invalid(call, `offset must be an integer, got ${describeGot(offset)}`);
  if (a === b) invalid(call, `dim1 and dim2 name the same axis ${a}`);
  const R = numDim(call, x, a), C = numDim(call, x, b);
  const rest = [...Array(x.ndim).keys()].filter((i) => i !== a && i !== b);
  const lead = rest.map((i) => x.shape[i]!);
  const r0 = offset < 0 ? Math.min(-offset, R) : 0, c0 = offset > 0 ? Math.min(offset, C) : 0;
  const L = Math.min(R - r0, C - c0);
  if (L === 0) return make.full([...lead, 0], 0, x.dtype);
  const nulls = lead.map(() => null);
  const y = x.permute([...rest, a, b]).shrink([...nulls, [r0, r0 + L], [c0, c0 + L]]);
  return y.reshape([...lead, L * L]).pad([...nulls, [0, L]]).reshape([...lead, L, L + 1]).shrink([...nulls, null, [0, 1]]).reshape([...lead, L]);
}

// ---- scans and norms ----------------------------------------------------------------------------

/**
 * log Σ_{j<=i} exp(x_j) along axis d, as tinygrad: each prefix shifted by its running maximum
 * (an infinite maximum shifts by 0), [..., n, n] work per row: meant for short rows.
 */
export function logcumsumexp<T extends MoreTensor<T>>(call: string, x: T, d: number, make: MoreMake<T>): T {
  if (x.ndim === 0) return x;
  const n = numDim(call, x, d);
  const last = x.ndim - 1;
  const xf = isFloat(x.dtype) ? x : x.cast("float32");
  const xt = d === last ? xf : xf.transpose(d, last);
  const cm = xt.cummax(-1);
  const cm0 = cm.isinf().where(0, cm);
  const ar = make.arange(n);
  const mask = ar.unsqueeze(-1).cmpge(ar); // [n(i), n(j)]: j <= i
  const r = mask.where(xt.unsqueeze(-2).sub(cm0.unsqueeze(-1)), -Infinity).exp().sum(-1).log().add(cm0);
  return d === last ? r : r.transpose(d, last);
}

/** torch's normalize: x / max(‖x‖_p over `dim`, eps); p a positive number or Infinity. */
export function normalize<T extends MoreTensor<T>>(call: string, x: T, p: number, d: number, eps: number): T {
  if (typeof p !== "number" || !(p > 0)) invalid(call, `p must be a positive number or Infinity, got ${describeGot(p)}`);
  if (typeof eps !== "number" || !(eps >= 0) || !Number.isFinite(eps)) invalid(call, `eps must be a finite non-negative number, got ${describeGot(eps)}`);
  const xf = isFloat(x.dtype) ? x : x.cast("float32");
  const a = xf.abs();
  const norm = p === Infinity ? a.max(d, true) : p === 1 ? a.sum(d, true) : p === 2 ? a.mul(a).sum(d, true).sqrt() : a.pow(p).sum(d, true).pow(1 / p);
  return xf.div(norm.maximum(eps));
}

// ---- losses -------------------------------------------------------------------------------------

/** tinygrad's binary_crossentropy of probabilities x against targets y: -y·log x - (1-y)·log(1-x) (no clamping). */
export function binaryCrossentropy<T extends MoreTensor<T>>(x: T, y: T, reduction: Reduction): T {
  return reduce(y.neg().mul(x.log()).sub(y.rsub(1).mul(x.rsub(1).log())), reduction);
}

/**
 * tinygrad's sparse_categorical_crossentropy of logits x [..., C] against int32 classes y [...]:
 * entries equal to ignoreIndex count nothing, and "mean" divides by the entries counted.
 */
export function sparseCategoricalCrossentropy<T extends MoreTensor<T>>(call: string, x: T, y: T, ignoreIndex: number, labelSmoothing: number, reduction: Reduction, make: MoreMake<T>): T {
  if (x.ndim === 0) invalid(call, "logits need at least 1 dimension (the classes, last)");
  const C = numDim(call, x, x.ndim - 1);
  const rest = x.shape.slice(0, -1);
  if (y.dtype !== "int32" || y.ndim !== rest.length || !y.shape.every((s, i) => s === rest[i])) invalid(call, `Y must be int32 classes of shape ${shapeStr(rest)}, got ${shapeStr(y.shape)} (${y.dtype})`);
  const logp = x.logSoftmax(-1);
  const keep = y.cmpne(ignoreIndex).cast("float32"); // [...]
  const onehot = y.unsqueeze(-1).cmpeq(make.arange(C)).cast("float32").mul(keep.unsqueeze(-1));
  const smoothing = logp.mean(-1).mul(keep).mul(labelSmoothing);
  const unreduced = logp.mul(onehot).sum(-1).mul(1 - labelSmoothing).add(smoothing);
  return reduction === "mean" ? unreduced.sum().div(keep.sum()).neg() : reduction === "sum" ? unreduced.sum().neg() : unreduced.neg();
}

/**
 * tinygrad's nll_loss of log-probabilities x [N, C, ...] (or [C]) against int32 classes y
 * [N, ...] (or []): -x[n, y_n]·w[y_n]; entries equal to ignoreIndex weigh 0, an index outside
 * [0, C) reads 0; "mean" divides by the summed weights.
 */
export function nllLoss<T extends MoreTensor<T>>(call: string, x: T, y: T, weight: T | undefined, ignoreIndex: number | undefined, reduction: Reduction, make: MoreMake<T>): T {
  if (x.ndim === 0) invalid(call, "input needs at least 1 dimension (the classes)");
  if (x.ndim === 1) return nllLoss(call, x.unsqueeze(0), y.unsqueeze(0), weight, ignoreIndex, reduction, make).reshape([]);
  const C = numDim(call, x, 1);
  const rest = x.shape.filter((_, i) => i !== 1);
  if (y.dtype !== "int32" || y.ndim !== rest.length || !y.shape.every((s, i) => s === rest[i])) invalid(call, `Y must be int32 classes of shape ${shapeStr(rest)}, got ${shapeStr(y.shape)} (${y.dtype})`);
  if (weight !== undefined && (weight.ndim !== 1 || weight.shape[0] !== C)) invalid(call, `weight must have shape [${C}], got ${shapeStr(weight.shape)}`);
  const w = weight === undefined ? make.full(y.shape, 1, "float32") : weight.cast("float32").indexSelect(0, y.flatten()).reshape(y.shape);
  const masked = ignoreIndex === undefined ? w : w.mul(y.cmpne(ignoreIndex));
  const nll = x.gather(1, y.unsqueeze(1)).squeeze(1).neg().mul(masked);
  return reduction === "mean" ? nll.sum().div(masked.sum()) : reduction === "sum" ? nll.sum() : nll;
}

// ---- data-dependent shapes ----------------------------------------------------------------------

/**
 * The flat positions of the non-zero elements of `m` (fixed shape), as tinygrad's masked_select
 * finds them: the count is realized now (the output's static length), the positions stay lazy:
 * position k is the number of elements whose running count is <= k.
 */
function positions<T extends MoreTensor<T>>(m: T, make: MoreMake<T>): T {
  const flat = m.cmpne(0).cast("int32").flatten();
  const count = flat.sum().toList()[0]!;
  if (count === 0) return make.full([0], 0, "int32");
  const cs = flat.cumsum(0);
  return cs.unsqueeze(0).cmple(make.arange(count).unsqueeze(-1)).sum(-1).cast("int32");
}

/** x's elements where mask (broadcast to x) is non-zero, flattened in order. Realizes the count now. */
export function maskedSelect<T extends MoreTensor<T>>(call: string, x: T, mask: T, make: MoreMake<T>): T {
  const shape = numShape(call, x.shape);
  const lead = shape.length - mask.ndim;
  if (lead < 0 || !mask.shape.every((d, i) => d === 1 || d === shape[lead + i])) invalid(call, `mask ${shapeStr(mask.shape)} does not broadcast to ${shapeStr(shape)}`);
  const pos = positions(mask.broadcastTo(shape), make);
  return x.flatten().indexSelect(0, pos);
}

/** int32 [count, ndim]: the coordinates of x's non-zero elements (NaN counts), in row-major order. Realizes the count now. */
export function nonzero<T extends MoreTensor<T>>(call: string, x: T, make: MoreMake<T>): T {
  const shape = numShape(call, x.shape);
  const pos = positions(x, make);
  const count = pos.shape[0] as number;
  if (x.ndim === 0) return make.full([count, 0], 0, "int32");
  const strides = shape.map((_, i) => shape.slice(i + 1).reduce((p, q) => p * q, 1));
  return make.stack(shape.map((s, i) => pos.div(strides[i]!).mod(s)), 1);
}
