// A float64 reference for the tensor ops: plain row-major arrays, eager, obviously correct.
// Tests compare every op against it; the demo checks whole models with it. Ref.as(dtype) models a
// store in a dtype (rounding to nearest even for the floats, truncation toward zero and
// wrap-around for the integers, x != 0 for bool), so a dtype's result is the float64 result of
// each op stored in its dtype.
import { isFloat, roundTo, type DType } from "./dtype";

/** x stored as dtype `d` (a cast's semantics): floats rounded, integers truncated and wrapped, bool x != 0. */
export function refCast(d: DType, x: number): number {
  if (isFloat(d)) return roundTo(d, x);
  if (d === "bool") return x !== 0 ? 1 : 0;
  if (!Number.isFinite(x)) return 0;
  const t = Math.trunc(x);
  return d === "int64" ? Number(BigInt.asIntN(64, BigInt(t))) : roundTo(d, t);
}

export class Ref {
  readonly shape: number[];
  readonly data: Float64Array;

  constructor(shape: readonly number[], data: ArrayLike<number>) {
    this.shape = [...shape];
    this.data = Float64Array.from(data);
    if (this.data.length !== Ref.numel(shape)) throw new Error(`Ref: ${this.data.length} values for shape [${shape}]`);
  }

  static numel(shape: readonly number[]): number {
    return shape.reduce((p, q) => p * q, 1);
  }

  static strides(shape: readonly number[]): number[] {
    const s = new Array<number>(shape.length);
    let acc = 1;
    for (let i = shape.length - 1; i >= 0; i--) {
      s[i] = acc;
      acc *= shape[i]!;
    }
    return s;
  }

  static fill(shape: readonly number[], f: (idx: number[], lin: number) => number): Ref {
    const n = Ref.numel(shape);
    const out = new Float64Array(n);
    const idx = new Array<number>(shape.length).fill(0);
    for (let i = 0; i < n; i++) {
      let rem = i;
      for (let d = shape.length - 1; d >= 0; d--) {
        idx[d] = rem % shape[d]!;
        rem = Math.floor(rem / shape[d]!);
      }
      out[i] = f(idx, i);
    }
    return new Ref(shape, out);
  }

  at(idx: readonly number[]): number {
    const st = Ref.strides(this.shape);
    let off = 0;
    for (let i = 0; i < idx.length; i++) off += idx[i]! * st[i]!;
    return this.data[off]!;
  }

  map(f: (x: number) => number): Ref {
    return new Ref(this.shape, this.data.map(f));
  }

  /** The values as dtype `d` stores them (refCast). */
  as(d: DType): Ref {
    return this.map((x) => refCast(d, x));
  }

  static broadcastShape(a: readonly number[], b: readonly number[]): number[] {
    const nd = Math.max(a.length, b.length);
    const out: number[] = [];
    for (let i = 0; i < nd; i++) {
      const x = a[a.length - nd + i] ?? 1, y = b[b.length - nd + i] ?? 1;
      if (x !== y && x !== 1 && y !== 1) throw new Error(`Ref: cannot broadcast [${a}] and [${b}]`);
      out.push(x === 1 ? y : x);
    }
    return out;
  }

  broadcastTo(shape: readonly number[]): Ref {
    const lead = shape.length - this.shape.length;
    return Ref.fill(shape, (idx) => this.at(this.shape.map((d, i) => (d === 1 ? 0 : idx[i + lead]!))));
  }

  zip(o: Ref | number, f: (a: number, b: number) => number): Ref {
    const other = typeof o === "number" ? new Ref([], [o]) : o;
    const shape = Ref.broadcastShape(this.shape, other.shape);
    const a = this.broadcastTo(shape), b = other.broadcastTo(shape);
    return new Ref(shape, a.data.map((x, i) => f(x, b.data[i]!)));
  }

  static where(c: Ref, a: Ref, b: Ref): Ref {
    const shape = Ref.broadcastShape(Ref.broadcastShape(c.shape, a.shape), b.shape);
    const cc = c.broadcastTo(shape), aa = a.broadcastTo(shape), bb = b.broadcastTo(shape);
    return new Ref(shape, cc.data.map((x, i) => (x !== 0 ? aa.data[i]! : bb.data[i]!)));
  }

  reshape(shape: readonly number[]): Ref {
    return new Ref(shape, this.data);
  }

  permute(order: readonly number[]): Ref {
    const shape = order.map((i) => this.shape[i]!);
    return Ref.fill(shape, (idx) => {
      const src = new Array<number>(order.length);
      order.forEach((o, i) => (src[o] = idx[i]!));
      return this.at(src);
    });
  }

  shrink(arg: readonly (readonly [number, number])[]): Ref {
    return Ref.fill(
      arg.map(([lo, hi]) => hi - lo),
      (idx) => this.at(idx.map((x, i) => x + arg[i]![0])),
    );
  }

  pad(arg: readonly (readonly [number, number])[], value = 0): Ref {
    return Ref.fill(
      this.shape.map((d, i) => d + arg[i]![0] + arg[i]![1]),
      (idx) => {
        const src = idx.map((x, i) => x - arg[i]![0]);
        return src.every((x, i) => x >= 0 && x < this.shape[i]!) ? this.at(src) : value;
      },
    );
  }

  flip(axes: readonly number[]): Ref {
    return Ref.fill(this.shape, (idx) => this.at(idx.map((x, i) => (axes.includes(i) ? this.shape[i]! - 1 - x : x))));
  }

  reduce(axes: readonly number[], keepdim: boolean, init: number, f: (acc: number, x: number) => number): Ref {
    const kshape = this.shape.map((d, i) => (axes.includes(i) ? 1 : d));
    const out = new Float64Array(Ref.numel(kshape)).fill(init);
    const kst = Ref.strides(kshape);
    Ref.fill(this.shape, (idx, lin) => {
      let o = 0;
      idx.forEach((x, i) => (o += axes.includes(i) ? 0 : x * kst[i]!));
      out[o] = f(out[o]!, this.data[lin]!);
      return 0;
    });
    const r = new Ref(kshape, out);
    return keepdim ? r : r.reshape(this.shape.filter((_, i) => !axes.includes(i)));
  }

  sum(axes: readonly number[], keepdim = false): Ref {
    return this.reduce(axes, keepdim, 0, (a, x) => a + x);
  }
  max(axes: readonly number[], keepdim = false): Ref {
    return this.reduce(axes, keepdim, -Infinity, (a, x) => Math.max(a, x));
  }
  min(axes: readonly number[], keepdim = false): Ref {
    return this.reduce(axes, keepdim, Infinity, (a, x) => Math.min(a, x));
  }
  prod(axes: readonly number[], keepdim = false): Ref {
    return this.reduce(axes, keepdim, 1, (a, x) => a * x);
  }
  mean(axes: readonly number[], keepdim = false): Ref {
    const n = axes.reduce((p, a) => p * this.shape[a]!, 1);
    return this.sum(axes, keepdim).map((x) => x / n);
  }

  matmul(o: Ref): Ref {
    const [M, K] = this.shape as [number, number];
    const N = o.shape[1]!;
    if (o.shape[0] !== K) throw new Error("Ref.matmul: shapes");
    const out = new Float64Array(M * N);
    for (let i = 0; i < M; i++)
      for (let k = 0; k < K; k++) {
        const a = this.data[i * K + k]!;
        for (let j = 0; j < N; j++) out[i * N + j]! += a * o.data[k * N + j]!;
      }
    return new Ref([M, N], out);
  }

  softmax(axis: number): Ref {
    const m = this.max([axis], true);
    const e = this.zip(m, (x, y) => Math.exp(x - y));
    return e.zip(e.sum([axis], true), (x, y) => x / y);
  }

  logSoftmax(axis: number): Ref {
    const m = this.max([axis], true);
    const s = this.zip(m, (x, y) => x - y);
    const l = s.map(Math.exp).sum([axis], true).map(Math.log);
    return s.zip(l, (x, y) => x - y);
  }

  /** out[…, j, …] = this[…, index[…, j, …], …] along `axis`; an index outside the axis gives 0. */
  gather(axis: number, index: Ref): Ref {
    return Ref.fill(index.shape, (idx, lin) => {
      const j = index.data[lin]!;
      return j >= 0 && j < this.shape[axis]! ? this.at(idx.map((x, i) => (i === axis ? j : x))) : 0;
    });
  }

  layerNorm(axis: number, eps: number): Ref {
    const mean = this.mean([axis], true);
    const xc = this.zip(mean, (x, y) => x - y);
    const v = xc.map((x) => x * x).mean([axis], true);
    return xc.zip(v, (x, y) => x / Math.sqrt(y + eps));
  }
}

export const refUnary: Record<string, (x: number) => number> = {
  neg: (x) => -x,
  exp: Math.exp,
  log: Math.log,
  sqrt: Math.sqrt,
  sin: Math.sin,
  cos: Math.cos,
  abs: Math.abs,
  recip: (x) => 1 / x,
  relu: (x) => Math.max(x, 0),
  sigmoid: (x) => 1 / (1 + Math.exp(-x)),
  tanh: Math.tanh,
  gelu: (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))),
  erf: erf64,
  floor: Math.floor,
  ceil: Math.ceil,
  trunc: Math.trunc,
  round: roundHalfEven,
  exp2: (x) => Math.pow(2, x),
  log2: Math.log2,
  tan: Math.tan,
  atan: Math.atan,
  asin: Math.asin,
  acos: Math.acos,
  sinh: Math.sinh,
  cosh: Math.cosh,
  asinh: Math.asinh,
  acosh: Math.acosh,
  atanh: Math.atanh,
};

/** Round to nearest, ties to even (numpy's round, C's rint); -0 stays -0, as does a negative that rounds to 0. */
export function roundHalfEven(x: number): number {
  if (!Number.isFinite(x)) return x;
  const f = Math.floor(x), d = x - f;
  const r = d < 0.5 ? f : d > 0.5 ? f + 1 : f % 2 === 0 ? f : f + 1;
  return r === 0 && (x < 0 || Object.is(x, -0)) ? -0 : r;
}

/**
 * erf in float64: its Maclaurin series below |x| = 3 (terms to 1e-17; at most e^9 of cancellation,
 * so about 1e-12 absolute), and 1 - erfc by erfc's continued fraction (Laplace) above.
 */
export function erf64(x: number): number {
  if (Number.isNaN(x)) return NaN;
  const a = Math.abs(x);
  if (a < 3) {
    let term = x, sum = x;
    for (let n = 1; n < 200; n++) {
      term *= (-x * x) / n;
      const t = term / (2 * n + 1);
      sum += t;
      if (Math.abs(t) < 1e-17 * Math.abs(sum)) break;
    }
    return (2 / Math.sqrt(Math.PI)) * sum;
  }
  // erfc(a) = e^(-a²)/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + ...)))))
  let f = a;
  for (let k = 200; k >= 1; k--) f = a + k / 2 / f;
  const erfc = Math.exp(-a * a) / Math.sqrt(Math.PI) / f;
  return x < 0 ? erfc - 1 : 1 - erfc;
}

/** A deterministic uniform generator for test inputs (mulberry32). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
