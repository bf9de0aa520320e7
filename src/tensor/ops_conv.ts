// Convolution and pooling built from views, as tinygrad builds them: the input is padded, then
// pad + shrink + reshape/expand/permute views turn each spatial dim into an (output, window) pair;
// a pool reduces the window axes, a convolution multiplies by the broadcast weight and reduces the
// window and input-channel axes. No im2col buffer exists: a conv is one fused multiply-reduce.
//
// The functions take the tensor through the small structural interface below (the Tensor class
// passes itself), so this module does not import tensor.ts and tensor.ts imports it plainly.
import { describeGot, invalid } from "../errors";
import type { DType } from "./ast";
import { type Dim, shapeStr } from "./variable";

type Pads = readonly (readonly [number, number] | null)[];

/** What these ops use of a Tensor. */
export interface ConvTensor<T> {
  readonly shape: readonly Dim[];
  readonly ndim: number;
  readonly dtype: DType;
  pad(arg: Pads, mode?: "constant", value?: number): T;
  shrink(arg: readonly (readonly [number, Dim] | null)[]): T;
  reshape(shape: readonly Dim[]): T;
  expand(shape: readonly Dim[]): T;
  permute(order: readonly number[]): T;
  repeat(repeats: readonly number[]): T;
  flip(axes: readonly number[]): T;
  mul(o: T | number): T;
  div(o: T | number): T;
  add(o: T | number): T;
  sum(axis?: number | readonly number[], keepdim?: boolean): T;
  max(axis?: number | readonly number[], keepdim?: boolean): T;
  mean(axis?: number | readonly number[], keepdim?: boolean): T;
  onesLike(opts?: { dtype?: DType }): T;
  indexSelect(dim: number, index: T): T;
  lerp(end: T, weight: T): T;
  cast(dtype: DType): T;
}

/** Makes a constant tensor (the Tensor class passes Tensor.from). */
export type ConstantOf<T> = (data: readonly number[], shape: readonly number[], dtype: DType) => T;

export type InterpolateMode = "nearest" | "nearest-exact" | "linear" | "bilinear";
const INTERPOLATE_MODES: readonly InterpolateMode[] = ["nearest", "nearest-exact", "linear", "bilinear"];

export interface Conv2dOptions {
  stride?: number | readonly number[];
  padding?: number | readonly number[];
  dilation?: number | readonly number[];
  groups?: number;
}

export interface ConvTranspose2dOptions extends Conv2dOptions {
  outputPadding?: number | readonly number[];
}

export interface PoolOptions {
  /** Default: the kernel size. */
  stride?: number | readonly number[];
  padding?: number | readonly number[];
  dilation?: number | readonly number[];
}

export interface AvgPoolOptions extends PoolOptions {
  /** Count padded zeros in the divisor (torch's default, true). */
  countIncludePad?: boolean;
}

const ceilDiv = (a: number, b: number) => Math.ceil(a / b);

/** A positive (or, with min 0, non-negative) integer or a tuple of n of them. */
function tuple(call: string, what: string, v: unknown, n: number, min = 1): number[] {
  const list = typeof v === "number" ? new Array<number>(n).fill(v) : Array.isArray(v) ? [...(v as unknown[])] : invalid(call, `${what} must be an integer or an array of ${n} integers, got ${describeGot(v)}`);
  if (list.length !== n || list.some((x) => !Number.isSafeInteger(x) || (x as number) < min))
    invalid(call, `${what} must be ${min ? "positive" : "non-negative"} integers, ${n} of them, got ${describeGot(v)}`);
  return list as number[];
}

/**
 * Padding of the last n dims as [before, after] pairs: an integer (every side), n integers (both
 * sides of each dim) or 2n integers in torch's flat order [left, right, top, bottom] (last dim first).
 */
function pads(call: string, v: unknown, n: number, allowNegative = false): [number, number][] {
  const min = allowNegative ? -Infinity : 0;
  const bad = () => invalid(call, `padding must be an integer or an array of ${n} or ${2 * n} integers${allowNegative ? "" : " (non-negative)"}, got ${describeGot(v)}`);
  const ok = (x: unknown) => Number.isSafeInteger(x) && (x as number) >= min;
  if (typeof v === "number") return ok(v) ? new Array(n).fill(0).map((): [number, number] => [v, v]) : bad();
  if (!Array.isArray(v) || !v.every(ok)) return bad();
  const a = v as number[];
  if (a.length === n) return a.map((p): [number, number] => [p, p]);
  if (a.length === 2 * n) return a.map((_, i): [number, number] => [a[2 * (n - 1 - i)]!, a[2 * (n - 1 - i) + 1]!]).slice(0, n);
  return bad();
}

function numericDims(call: string, what: string, t: { shape: readonly Dim[] }, nd: number): number[] {
  if (t.shape.length !== nd) invalid(call, `${what} must be ${nd}-D, got ${shapeStr(t.shape)}`);
  if (t.shape.some((d) => typeof d !== "number")) invalid(call, `${what} ${shapeStr(t.shape)} has a variable dimension`);
  return t.shape as number[];
}

/**
 * tinygrad's `_pool`: the last k.length dims (i) become (o, k) pairs, ordered
 * [...leading, o..., k...], where o = ceil((i - d·(k-1)) / s) and window element j of output
 * position p reads input p·s + j·d.
 */
export function poolWindows<T extends ConvTensor<T>>(call: string, x: T, k: readonly number[], s: readonly number[], d: readonly number[]): T {
  const nk = k.length, lead = x.ndim - nk;
  const noop: null[] = new Array<null>(lead).fill(null);
  const i = x.shape.slice(lead) as number[];
  i.forEach((n, j) => {
    if (d[j]! * (k[j]! - 1) + 1 > n) invalid(call, `kernel ${k[j]} (dilation ${d[j]}) is larger than the padded input ${n} of ${shapeStr(x.shape)}`);
  });
  const o = i.map((n, j) => ceilDiv(n - d[j]! * (k[j]! - 1), s[j]!));
  const leadShape = x.shape.slice(0, lead);
  const order = [...Array(lead).keys()];
  if (k.some((kk, j) => kk > s[j]!) || d.some((dd) => dd !== 1)) {
    // repeats so that no padding is needed: the window's rows lie side by side, i + d apart
    let y = x.repeat([...new Array<number>(lead).fill(1), ...i.map((n, j) => ceilDiv(k[j]! * (n + d[j]!), n))]);
    y = y.shrink([...noop, ...i.map((n, j): [number, number] => [0, k[j]! * (n + d[j]!)])]).reshape([...leadShape, ...i.flatMap((n, j) => [k[j]!, n + d[j]!])]);
    // stride
    y = y.shrink([...noop, ...i.flatMap((_, j): [number, number][] => [[0, k[j]!], [0, o[j]! * s[j]!]])]).reshape([...leadShape, ...i.flatMap((_, j) => [k[j]!, o[j]!, s[j]!])]);
    y = y.shrink([...noop, ...i.flatMap((_, j): [number, number][] => [[0, k[j]!], [0, o[j]!], [0, 1]])]).reshape([...leadShape, ...i.flatMap((_, j) => [k[j]!, o[j]!])]);
    return y.permute([...order, ...i.map((_, j) => lead + 2 * j + 1), ...i.map((_, j) => lead + 2 * j)]);
  }
  // k <= s and no dilation: the windows do not overlap, a pad + shrink + reshape is enough
  let y = x.pad([...noop, ...i.map((n, j): [number, number] => [0, Math.max(0, o[j]! * s[j]! - n)])]);
  y = y.shrink([...noop, ...i.map((_, j): [number, number] => [0, o[j]! * s[j]!])]);
  y = y.reshape([...leadShape, ...i.flatMap((_, j) => [o[j]!, s[j]!])]);
  y = y.shrink([...noop, ...i.flatMap((_, j): [number, number][] => [[0, o[j]!], [0, k[j]!]])]);
  return y.permute([...order, ...i.map((_, j) => lead + 2 * j), ...i.map((_, j) => lead + 2 * j + 1)]);
}

/** torch/tinygrad conv2d: x [N, Cin, H, W], weight [Cout, Cin/groups, kh, kw], bias [Cout]. */
export function conv2d<T extends ConvTensor<T>>(call: string, x: T, weight: T, bias: T | undefined, opts: Conv2dOptions, negativePadding = false): T {
  const [bs, cinX] = numericDims(call, "input", x, 4);
  const [cout, cin, kh, kw] = numericDims(call, "weight", weight, 4);
  const groups = opts.groups ?? 1;
  if (!Number.isSafeInteger(groups) || groups < 1) invalid(call, `groups must be a positive integer, got ${describeGot(groups)}`);
  if (groups * cin! !== cinX) invalid(call, `input ${shapeStr(x.shape)} has ${cinX} channels; weight ${shapeStr(weight.shape)} with groups ${groups} needs ${groups * cin!}`);
  if (cout! % groups) invalid(call, `groups ${groups} does not divide the ${cout} output channels of weight ${shapeStr(weight.shape)}`);
  if (bias !== undefined && (bias.ndim !== 1 || bias.shape[0] !== cout)) invalid(call, `bias must be [${cout}], got ${shapeStr(bias.shape)}`);
  const stride = tuple(call, "stride", opts.stride ?? 1, 2);
  const dilation = tuple(call, "dilation", opts.dilation ?? 1, 2);
  const p = pads(call, opts.padding ?? 0, 2, negativePadding);
  const HW = [kh!, kw!];
  const xp = p.some(([b, a]) => b || a) ? x.pad([null, null, ...p]) : x;
  const w = poolWindows(call, xp, HW, stride, dilation); // [bs, groups·cin, oy, ox, kh, kw]
  const rcout = cout! / groups, oyx = w.shape.slice(2, 4) as number[];
  const xe = w
    .reshape([bs!, groups, cin!, 1, ...oyx, ...HW])
    .expand([bs!, groups, cin!, rcout, ...oyx, ...HW])
    .permute([0, 1, 3, 4, 5, 2, 6, 7]); // [bs, groups, rcout, oy, ox, cin, kh, kw]
  const ret = xe.mul(weight.reshape([1, groups, rcout, 1, 1, cin!, ...HW])).sum([-1, -2, -3], true).reshape([bs!, cout!, ...oyx]);
  return bias === undefined ? ret : ret.add(bias.reshape([1, cout!, 1, 1]));
}

/**
 * tinygrad's conv_transpose2d: weight [Cin, Cout/groups, kh, kw]; the input is dilated by the
 * stride (zeros between elements, views only) and convolved with the flipped, regrouped weight.
 */
export function convTranspose2d<T extends ConvTensor<T>>(call: string, x: T, weight: T, bias: T | undefined, opts: ConvTranspose2dOptions): T {
  const [, cinX, h, wd] = numericDims(call, "input", x, 4);
  const [cin, rcout, kh, kw] = numericDims(call, "weight", weight, 4);
  const groups = opts.groups ?? 1;
  if (!Number.isSafeInteger(groups) || groups < 1) invalid(call, `groups must be a positive integer, got ${describeGot(groups)}`);
  if (cin !== cinX) invalid(call, `input ${shapeStr(x.shape)} has ${cinX} channels; weight ${shapeStr(weight.shape)} needs ${cin}`);
  if (cin! % groups) invalid(call, `groups ${groups} does not divide the ${cin} input channels of weight ${shapeStr(weight.shape)}`);
  const stride = tuple(call, "stride", opts.stride ?? 1, 2);
  const dilation = tuple(call, "dilation", opts.dilation ?? 1, 2);
  const outPad = tuple(call, "outputPadding", opts.outputPadding ?? 0, 2, 0);
  const p = pads(call, opts.padding ?? 0, 2);
  outPad.forEach((op, j) => {
    if (op >= Math.max(stride[j]!, dilation[j]!)) invalid(call, `outputPadding ${op} must be smaller than the stride or the dilation`);
  });
  const HW = [kh!, kw!];
  const w = weight
    .reshape([groups, cin! / groups, rcout!, kh!, kw!])
    .permute([0, 2, 1, 3, 4])
    .flip([3, 4])
    .reshape([groups * rcout!, cin! / groups, kh!, kw!]);
  let xs = x;
  if (stride.some((s) => s > 1)) {
    const [n, c] = x.shape as number[];
    const sp = [h!, wd!];
    xs = xs.reshape([n!, c!, h!, 1, wd!, 1]).pad([null, null, null, [0, stride[0]! - 1], null, [0, stride[1]! - 1]]);
    xs = xs.reshape([n!, c!, h! * stride[0]!, wd! * stride[1]!]).shrink([null, null, ...sp.map((k, j): [number, number] => [0, k * stride[j]! - (stride[j]! - 1)])]);
  }
  const cp = HW.map((k, j) => [(k - 1) * dilation[j]! - p[j]![0], (k - 1) * dilation[j]! - p[j]![1] + outPad[j]!]);
  return conv2d(call, xs, w, bias, { groups, dilation, padding: [cp[1]![0]!, cp[1]![1]!, cp[0]![0]!, cp[0]![1]!] }, true);
}

function poolArgs(call: string, x: { shape: readonly Dim[]; ndim: number }, kernelSize: unknown, opts: PoolOptions) {
  if (x.ndim < 2) invalid(call, `input must be at least 2-D, got ${shapeStr(x.shape)}`);
  if (x.shape.slice(-2).some((d) => typeof d !== "number")) invalid(call, `input ${shapeStr(x.shape)} has a variable spatial dimension`);
  const k = tuple(call, "kernelSize", kernelSize, 2);
  const s = tuple(call, "stride", opts.stride ?? k, 2);
  const d = tuple(call, "dilation", opts.dilation ?? 1, 2);
  const p = pads(call, opts.padding ?? 0, 2);
  const noop: null[] = new Array<null>(x.ndim - 2).fill(null);
  return { k, s, d, p, noop, padded: p.some(([b, a]) => b || a) };
}

/** Max over windows of the last two dims; padding reads -inf (int32: its minimum). */
export function maxPool2d<T extends ConvTensor<T>>(call: string, x: T, kernelSize: unknown, opts: PoolOptions): T {
  const { k, s, d, p, noop, padded } = poolArgs(call, x, kernelSize, opts);
  const xp = padded ? x.pad([...noop, ...p], "constant", x.dtype === "int32" ? -2147483648 : -Infinity) : x;
  return poolWindows(call, xp, k, s, d).max([-1, -2]);
}

/** Mean over windows of the last two dims (countIncludePad false: over the real elements only). */
export function avgPool2d<T extends ConvTensor<T>>(call: string, x: T, kernelSize: unknown, opts: AvgPoolOptions): T {
  const { k, s, d, p, noop, padded } = poolArgs(call, x, kernelSize, opts);
  const cip = opts.countIncludePad ?? true;
  if (typeof cip !== "boolean") invalid(call, `countIncludePad must be a boolean, got ${describeGot(cip)}`);
  if (!padded || cip) return poolWindows(call, padded ? x.pad([...noop, ...p]) : x, k, s, d).mean([-1, -2]);
  const sum = poolWindows(call, x.pad([...noop, ...p]), k, s, d).sum([-1, -2]);
  const n = poolWindows(call, x.onesLike({ dtype: "float32" }).pad([...noop, ...p]), k, s, d).sum([-1, -2]);
  return sum.div(n);
}

/**
 * Resize the last size.length dims (torch's interpolate on [N, C, ...spatial] with size = the
 * spatial sizes). "nearest": source floor(dst · in/out); "nearest-exact": floor((dst + 0.5) ·
 * in/out); "linear"/"bilinear": the two neighbours of (dst + 0.5) · in/out - 0.5 (alignCorners:
 * dst · (in-1)/(out-1)) mixed by distance. Source positions and weights are computed here in
 * float64 and read as small constants: each dim is one or two gathers (and a lerp), fused.
 */
export function interpolate<T extends ConvTensor<T>>(call: string, x: T, size: unknown, mode: unknown, alignCorners: unknown, constant: ConstantOf<T>): T {
  if (!Array.isArray(size) || size.length === 0 || size.length > x.ndim || !size.every((n) => Number.isSafeInteger(n) && (n as number) > 0))
    invalid(call, `size must be an array of 1 to ${x.ndim} positive integers, got ${describeGot(size)}`);
  if (!INTERPOLATE_MODES.includes(mode as InterpolateMode)) invalid(call, `mode must be one of ${INTERPOLATE_MODES.join(", ")}, got ${describeGot(mode)}`);
  if (typeof alignCorners !== "boolean") invalid(call, `alignCorners must be a boolean, got ${describeGot(alignCorners)}`);
  const linear = mode === "linear" || mode === "bilinear";
  if (alignCorners && !linear) invalid(call, `alignCorners applies to the linear modes only, not ${String(mode)}`);
  const sizes = size as number[];
  const lead = x.ndim - sizes.length;
  x.shape.slice(lead).forEach((d, j) => {
    if (typeof d !== "number" || d === 0) invalid(call, `cannot resize dimension ${lead + j} of ${shapeStr(x.shape)}`);
  });
  let y = x;
  for (let j = sizes.length - 1; j >= 0; j--) {
    const dim = lead + j, n = x.shape[dim] as number, out = sizes[j]!;
    const dst = [...Array(out).keys()];
    if (!linear) {
      const scale = n / out;
      const src = dst.map((o) => Math.min(Math.floor((mode === "nearest-exact" ? o + 0.5 : o) * scale), n - 1));
      y = y.indexSelect(dim, constant(src, [out], "int32"));
      continue;
    }
    const pos = dst.map((o) => {
      if (alignCorners) return out > 1 ? (o * (n - 1)) / (out - 1) : 0;
      return Math.max(0, ((o + 0.5) * n) / out - 0.5);
    });
    const lo = pos.map((p) => Math.min(Math.floor(p), n - 1));
    const hi = lo.map((l) => Math.min(l + 1, n - 1));
    const w = pos.map((p, k) => Math.min(p - lo[k]!, 1));
    const wshape = y.shape.map((_, i) => (i === dim ? out : 1));
    const a = y.indexSelect(dim, constant(lo, [out], "int32"));
    const b = y.indexSelect(dim, constant(hi, [out], "int32"));
    y = a.cast("float32").lerp(b.cast("float32"), constant(w, wshape as number[], "float32"));
  }
  return y.dtype === x.dtype ? y : y.cast(x.dtype);
}
