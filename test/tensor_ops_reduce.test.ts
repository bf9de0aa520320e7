// The reductions and scans past sum/max/min/mean: prod, any, all, argmax, argmin, cumsum,
// cumprod, cummax, var, std, logsumexp, crossEntropy and topk, against float64 references
// computed here, on contiguous, permuted and sliced inputs, float32 and int32, fused and unfused,
// with negative axes, keepdim, 0-d and zero-size inputs, ties and NaN.
//
// Tolerances (|got - want| <= atol + rtol·|want|, NaN matching NaN): indices, any/all, int32
// results, cummax and max-based values are exact; float32 sums, products and their composites
// (cumsum, cumprod, prod, var, std, logsumexp, crossEntropy) 1e-5 + 2e-5·|want| (float32
// rounding over at most a few hundred terms, relative to the terms' magnitude).
//
// NaN, as the methods state: argmax/argmin give the first NaN's index (numpy); sum, prod, var and
// logsumexp propagate NaN; where a NaN goes in max, min, cummax and topk is not defined (tested
// only without NaN).
import { describe, expect, test } from "bun:test";
import { GpuError } from "../src";
import { Ref, seededRandom } from "../src/tensor/reference";
import { Tensor, interpretSchedule, schedule, type DType, type PrepareOptions } from "../src/tensor";
import { expectInvalid, run, type Arr } from "./tensor_helpers";

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, atol: number, rtol: number, what: string): void {
  if (got.length !== want.length) throw new Error(`${what}: length ${got.length}, want ${want.length}`);
  for (let i = 0; i < got.length; i++) {
    const a = got[i]!, b = want[i]!;
    if (Number.isNaN(b) && Number.isNaN(a)) continue;
    if (a === b) continue;
    if (!(Math.abs(a - b) <= atol + rtol * Math.abs(b))) throw new Error(`${what}: element ${i}: got ${a}, want ${b}`);
  }
}

const EXACT = [0, 0] as const;
const SUMS = [1e-5, 2e-5] as const;

/** Apply `f` to every row along `axis` of row-major `data`; f's result replaces the row. */
function alongAxis(data: ArrayLike<number>, shape: readonly number[], axis: number, f: (row: number[]) => number[]): { data: number[]; shape: number[] } {
  const n = shape[axis]!;
  const outer = shape.slice(0, axis).reduce((p, q) => p * q, 1);
  const inner = shape.slice(axis + 1).reduce((p, q) => p * q, 1);
  let m = -1;
  const out: number[] = [];
  for (let o = 0; o < outer; o++)
    for (let k = 0; k < inner; k++) {
      const res = f(Array.from({ length: n }, (_, j) => data[(o * n + j) * inner + k]!));
      if (m < 0) m = res.length;
      res.forEach((v, j) => (out[(o * m + j) * inner + k] = v));
    }
  if (m < 0) m = f([]).length;
  return { data: Array.from({ length: outer * m * inner }, (_, i) => out[i]!), shape: shape.map((d, i) => (i === axis ? m : d)) };
}

const firstIndex = (row: number[], better: (a: number, b: number) => boolean): number => {
  const nan = row.findIndex(Number.isNaN);
  if (nan >= 0) return nan;
  let best = 0;
  for (let j = 1; j < row.length; j++) if (better(row[j]!, row[best]!)) best = j;
  return best;
};
const scan = (row: number[], f: (a: number, b: number) => number): number[] => {
  const out: number[] = [];
  row.forEach((v, j) => out.push(j ? f(out[j - 1]!, v) : v));
  return out;
};
const variance = (row: number[], corr: number): number => {
  const mean = row.reduce((p, q) => p + q, 0) / row.length;
  return row.reduce((p, q) => p + (q - mean) ** 2, 0) / Math.max(0, row.length - corr);
};
const lse = (row: number[]): number => {
  const m = Math.max(...row);
  const s = Number.isFinite(m) ? m : 0;
  return Math.log(row.reduce((p, q) => p + Math.exp(q - s), 0)) + s;
};

const SHAPE = [3, 5, 7];
const N = 105;

/** Logical [3, 5, 7] values; float32: random in [lo, hi) with ties planted; int32: integers in [-4, 4]. */
function values(dtype: "float32" | "int32", seed: number, lo = -2, hi = 2): number[] {
  const r = seededRandom(seed);
  if (dtype === "int32") return Array.from({ length: N }, () => Math.floor(r() * 9) - 4);
  const d = Array.from({ length: N }, () => Math.fround(lo + (hi - lo) * r()));
  for (let i = 0; i < N; i += 5) d[i + 3] = d[i]!; // equal values in rows along every axis
  return d;
}

/** The same logical values as a contiguous, a permuted and a sliced (padded, then cut) tensor. */
function layouts(data: number[], dtype: "float32" | "int32"): { name: string; t: Tensor }[] {
  const arr = (a: ArrayLike<number>): Arr => (dtype === "int32" ? Int32Array.from(a) : Float32Array.from(a));
  const ref = new Ref(SHAPE, Float64Array.from(data));
  return [
    { name: "contiguous", t: Tensor.from(arr(data), SHAPE) },
    { name: "permuted", t: Tensor.from(arr(ref.permute([2, 0, 1]).data), [7, 3, 5]).permute([1, 2, 0]) },
    { name: "sliced", t: Tensor.from(arr(ref.pad([[1, 1], [0, 2], [3, 0]], 7).data), [5, 7, 10]).slice([[1, 4], [0, 5], [3, 10]]) },
  ];
}

interface Case {
  name: string;
  f: (t: Tensor) => Tensor;
  /** the float64 result over the logical values and its shape */
  want: (d: number[]) => { data: number[]; shape: number[] };
  tol: readonly [number, number];
  dtype?: (input: "float32" | "int32") => DType;
}

const keepAxis = (r: { data: number[]; shape: number[] }, axis: number, keep: boolean): { data: number[]; shape: number[] } =>
  keep ? r : { data: r.data, shape: r.shape.filter((_, i) => i !== axis) };

function cases(dtype: "float32" | "int32"): Case[] {
  const fl = dtype === "float32";
  const sums = fl ? SUMS : EXACT;
  const one = (g: (row: number[]) => number) => (row: number[]) => [g(row)];
  return [
    { name: "argmax(-1)", f: (t) => t.argmax(-1), want: (d) => keepAxis(alongAxis(d, SHAPE, 2, one((r) => firstIndex(r, (a, b) => a > b))), 2, false), tol: EXACT, dtype: () => "int32" },
    { name: "argmax(1, keepdim)", f: (t) => t.argmax(1, true), want: (d) => alongAxis(d, SHAPE, 1, one((r) => firstIndex(r, (a, b) => a > b))), tol: EXACT, dtype: () => "int32" },
    { name: "argmin(-3)", f: (t) => t.argmin(-3), want: (d) => keepAxis(alongAxis(d, SHAPE, 0, one((r) => firstIndex(r, (a, b) => a < b))), 0, false), tol: EXACT, dtype: () => "int32" },
    { name: "argmax()", f: (t) => t.argmax(), want: (d) => ({ data: [firstIndex(d, (a, b) => a > b)], shape: [] }), tol: EXACT, dtype: () => "int32" },
    { name: "argmin(undefined, keepdim)", f: (t) => t.argmin(undefined, true), want: (d) => ({ data: [firstIndex(d, (a, b) => a < b)], shape: [1, 1, 1] }), tol: EXACT, dtype: () => "int32" },
    { name: "cumsum()", f: (t) => t.cumsum(), want: (d) => alongAxis(d, SHAPE, 0, (r) => scan(r, (a, b) => a + b)), tol: sums },
    { name: "cumsum(-1)", f: (t) => t.cumsum(-1), want: (d) => alongAxis(d, SHAPE, 2, (r) => scan(r, (a, b) => a + b)), tol: sums },
    { name: "cumprod(1)", f: (t) => t.cumprod(1), want: (d) => alongAxis(d, SHAPE, 1, (r) => scan(r, (a, b) => a * b)), tol: sums },
    { name: "cummax(-2)", f: (t) => t.cummax(-2), want: (d) => alongAxis(d, SHAPE, 1, (r) => scan(r, Math.max)), tol: EXACT },
    { name: "prod(2)", f: (t) => t.prod(2), want: (d) => keepAxis(alongAxis(d, SHAPE, 2, one((r) => r.reduce((p, q) => p * q, 1))), 2, false), tol: sums },
    { name: "prod([0, -1], keepdim)", f: (t) => t.prod([0, -1], true), want: (d) => {
      const a = alongAxis(d, SHAPE, 2, one((r) => r.reduce((p, q) => p * q, 1)));
      return alongAxis(a.data, a.shape, 0, one((r) => r.reduce((p, q) => p * q, 1)));
    }, tol: sums },
    { name: "any(1)", f: (t) => t.cmpgt(fl ? 1.5 : 3).any(1), want: (d) => keepAxis(alongAxis(d.map((v) => (v > (fl ? 1.5 : 3) ? 1 : 0)), SHAPE, 1, one((r) => (r.some((v) => v) ? 1 : 0))), 1, false), tol: EXACT, dtype: () => "bool" },
    { name: "all(-1, keepdim)", f: (t) => t.all(-1, true), want: (d) => alongAxis(d, SHAPE, 2, one((r) => (r.every((v) => v !== 0) ? 1 : 0))), tol: EXACT, dtype: () => "bool" },
    { name: "any()", f: (t) => t.any(), want: (d) => ({ data: [d.some((v) => v !== 0) ? 1 : 0], shape: [] }), tol: EXACT, dtype: () => "bool" },
    { name: "var(-1)", f: (t) => t.var(-1), want: (d) => keepAxis(alongAxis(d, SHAPE, 2, one((r) => variance(r, 1))), 2, false), tol: SUMS, dtype: () => "float32" },
    { name: "var(1, keepdim, 0)", f: (t) => t.var(1, true, 0), want: (d) => alongAxis(d, SHAPE, 1, one((r) => variance(r, 0))), tol: SUMS, dtype: () => "float32" },
    { name: "std()", f: (t) => t.std(), want: (d) => ({ data: [Math.sqrt(variance(d, 1))], shape: [] }), tol: SUMS, dtype: () => "float32" },
    { name: "std(0, false, 2)", f: (t) => t.std(0, false, 2), want: (d) => keepAxis(alongAxis(d, SHAPE, 0, one((r) => Math.sqrt(variance(r, 2)))), 0, false), tol: SUMS, dtype: () => "float32" },
    { name: "logsumexp(-1)", f: (t) => t.logsumexp(-1), want: (d) => keepAxis(alongAxis(d, SHAPE, 2, one(lse)), 2, false), tol: SUMS, dtype: () => "float32" },
    { name: "logsumexp(0, keepdim)", f: (t) => t.logsumexp(0, true), want: (d) => alongAxis(d, SHAPE, 0, one(lse)), tol: SUMS, dtype: () => "float32" },
    { name: "logsumexp()", f: (t) => t.logsumexp(), want: (d) => ({ data: [lse(d)], shape: [] }), tol: SUMS, dtype: () => "float32" },
  ];
}

describe("reductions and scans against float64", () => {
  for (const dtype of ["float32", "int32"] as const)
    test(`every op on every layout, ${dtype}, fused and unfused`, () => {
      const data = values(dtype, dtype === "float32" ? 11 : 12, 0.5, 1.5);
      for (const fusion of [true, false])
        for (const x of layouts(data, dtype)) {
          const cs = cases(dtype);
          const outs = cs.map((c) => c.f(x.t));
          const got = run(outs, { fusion });
          cs.forEach((c, k) => {
            const what = `${c.name} (${x.name}, ${dtype}, fusion ${fusion})`;
            const w = c.want(data);
            expect(outs[k]!.shape, what).toEqual(w.shape);
            expect(outs[k]!.dtype, what).toBe(c.dtype ? c.dtype(dtype) : dtype);
            expectClose(got[k]!, w.data, c.tol[0], c.tol[1], what);
          });
        }
    });

  test("values of both signs: argmax/argmin, cummax, prod and logsumexp", () => {
    const data = values("float32", 5, -3, 3);
    for (const fusion of [true, false]) {
      const x = layouts(data, "float32")[1]!.t;
      const got = run([x.argmax(0), x.argmin(2), x.cummax(2), x.prod(0), x.logsumexp(1), x.cumsum(1)], { fusion });
      expectClose(got[0]!, alongAxis(data, SHAPE, 0, (r) => [firstIndex(r, (a, b) => a > b)]).data, 0, 0, "argmax");
      expectClose(got[1]!, alongAxis(data, SHAPE, 2, (r) => [firstIndex(r, (a, b) => a < b)]).data, 0, 0, "argmin");
      expectClose(got[2]!, alongAxis(data, SHAPE, 2, (r) => scan(r, Math.max)).data, 0, 0, "cummax");
      expectClose(got[3]!, alongAxis(data, SHAPE, 0, (r) => [r.reduce((p, q) => p * q, 1)]).data, ...SUMS, "prod");
      expectClose(got[4]!, alongAxis(data, SHAPE, 1, (r) => [lse(r)]).data, ...SUMS, "logsumexp");
      expectClose(got[5]!, alongAxis(data, SHAPE, 1, (r) => scan(r, (a, b) => a + b)).data, ...SUMS, "cumsum");
    }
  });

  test("ties give the first index; NaN wins argmax and argmin; sums propagate NaN", () => {
    const t = Tensor.from([1, 3, 3, 2, 0, 0, -1, -1]);
    expect(t.argmax().toList()).toEqual([1]);
    expect(t.argmin().toList()).toEqual([6]);
    expect(t.reshape([2, 4]).argmax(1).toList()).toEqual([1, 0]);
    expect(t.reshape([2, 4]).argmin(-1).toList()).toEqual([0, 2]);
    expect(Tensor.from([7, 7, 7], [3], { dtype: "int32" }).argmin().toList()).toEqual([0]);
    const n = Tensor.from([1, NaN, 5, NaN, -Infinity]);
    expect(n.argmax().toList()).toEqual([1]);
    expect(n.argmin().toList()).toEqual([1]);
    expect(Tensor.from([-Infinity, -Infinity]).argmax().toList()).toEqual([0]);
    expect(Tensor.from([Infinity, 1, Infinity]).argmin(0).toList()).toEqual([1]);
    const [s, p, v, l] = run([n.sum(), n.prod(), n.var(), n.logsumexp()]);
    for (const r of [s, p, v, l]) expect(Number.isNaN(r![0]!)).toBe(true);
    expect(Tensor.from([NaN, 0]).any().toList()).toEqual([1]);
    expect(Tensor.from([NaN, 1]).all().toList()).toEqual([1]);
  });

  test("long rows take the blocked scan: cumsum, cumprod and cummax over 33..1000 elements", () => {
    for (const n of [33, 100, 257, 1000]) {
      const r = seededRandom(n);
      const d = Array.from({ length: 2 * n }, () => Math.fround(r() * 2 - 1));
      const dp = d.map((v) => Math.fround(1 + v / 100));
      const di = d.map((v) => Math.round(v * 50));
      const x = Tensor.from(Float32Array.from(d), [2, n]);
      const xp = Tensor.from(Float32Array.from(new Ref([2, n], Float64Array.from(dp)).permute([1, 0]).data), [n, 2]).transpose(0, 1); // a [2, n] view of the same values
      const xi = Tensor.from(Int32Array.from(di), [2, n]);
      for (const fusion of [true, false]) {
        const got = run([x.cumsum(1), xp.cumprod(-1), x.cummax(1), xi.cumsum(-1), xi.cummax(1), x.T.cumsum(0)], { fusion });
        const rows = (a: number[], f: (row: number[]) => number[]): number[] => alongAxis(a, [2, n], 1, f).data;
        const what = `n ${n}, fusion ${fusion}`;
        // sums of n terms of magnitude <= 1: absolute error grows with the running sum's size
        expectClose(got[0]!, rows(d, (q) => scan(q, (a, b) => a + b)), 1e-6 * n, 0, `cumsum ${what}`);
        expectClose(got[1]!, rows(dp, (q) => scan(q, (a, b) => a * b)), 0, 2e-7 * n, `cumprod ${what}`);
        expectClose(got[2]!, rows(d, (q) => scan(q, Math.max)), 0, 0, `cummax ${what}`);
        expectClose(got[3]!, rows(di, (q) => scan(q, (a, b) => a + b)), 0, 0, `int cumsum ${what}`);
        expectClose(got[4]!, rows(di, (q) => scan(q, Math.max)), 0, 0, `int cummax ${what}`);
        expectClose(got[5]!, new Ref([2, n], Float64Array.from(rows(d, (q) => scan(q, (a, b) => a + b)))).permute([1, 0]).data, 1e-6 * n, 0, `cumsum of a transpose ${what}`);
        expect(run([xi.cumsum(1)], { fusion })[0]).toBeInstanceOf(Int32Array);
      }
    }
  });

  test("prod on the wide paths: vector tiles over 16+ columns, accumulator lanes over long rows, float32 and int32", () => {
    const r = seededRandom(7);
    const d = Array.from({ length: 24 * 48 }, () => Math.fround(0.9 + 0.2 * r()));
    const di = Array.from({ length: 24 * 48 }, () => (r() < 0.1 ? -1 : 1));
    const ref = new Ref([24, 48], Float64Array.from(d)), refi = new Ref([24, 48], Float64Array.from(di));
    const x = Tensor.from(Float32Array.from(d), [24, 48]), xi = Tensor.from(Int32Array.from(di), [24, 48]);
    for (const fusion of [true, false]) {
      const got = run([x.prod(0), x.prod(1), x.mul(x).prod(0, true), xi.prod(0), xi.prod(1), x.T.prod(0)], { fusion });
      expectClose(got[0]!, ref.prod([0]).data, 0, 1e-5, `columns, fusion ${fusion}`);
      expectClose(got[1]!, ref.prod([1]).data, 0, 2e-5, `rows, fusion ${fusion}`);
      expectClose(got[2]!, ref.map((v) => v * v).prod([0]).data, 0, 2e-5, `fused product of squares, fusion ${fusion}`);
      expectClose(got[3]!, refi.prod([0]).data, 0, 0, `int32 columns, fusion ${fusion}`);
      expectClose(got[4]!, refi.prod([1]).data, 0, 0, `int32 rows, fusion ${fusion}`);
      expectClose(got[5]!, ref.prod([1]).data, 0, 2e-5, `transposed, fusion ${fusion}`);
    }
  });

  test("int32: prod, cumprod, argmax and cummax with INT_MIN and INT_MAX", () => {
    const x = Tensor.from([-2147483648, 5, 2147483647, -2147483648], [4], { dtype: "int32" });
    expect(x.argmax().toList()).toEqual([2]);
    expect(x.argmin().toList()).toEqual([0]);
    expect(x.cummax().toList()).toEqual([-2147483648, 5, 2147483647, 2147483647]);
    const y = Tensor.from([3, -2, 7, 1, -1], [5], { dtype: "int32" });
    expect(y.prod().toList()).toEqual([42]);
    expect(y.prod().dtype).toBe("int32");
    expect(y.cumprod().toList()).toEqual([3, -6, -42, -42, 42]);
  });

  test("0-d inputs keep the value; argmax/argmin of a 0-d give 0", () => {
    const z = Tensor.from([2.5], []);
    const outs = [z.argmax(), z.argmin(0), z.argmax(-1, true), z.cumsum(), z.cumprod(-1), z.cummax(0), z.prod(), z.prod(0), z.any(), z.all(-1), z.var(undefined, false, 0), z.var(), z.logsumexp(), z.std(0, true, 0)];
    const got = run(outs).map((a) => Array.from(a));
    expect(outs.map((t) => t.shape.length)).toEqual(outs.map(() => 0));
    expect(got).toEqual([[0], [0], [0], [2.5], [2.5], [2.5], [2.5], [2.5], [1], [1], [0], [NaN], [2.5], [0]]);
    expect(() => z.argmax(1)).toThrow(GpuError);
    expect(() => z.cumsum(1)).toThrow(GpuError);
  });

  test("zero-size inputs: empty product 1, any 0, all 1, logsumexp -inf, var NaN, scans empty; argmax of empty is a GpuError", () => {
    const e = Tensor.from(new Float32Array(0), [0]);
    const e2 = Tensor.from(new Float32Array(0), [2, 0]);
    for (const fusion of [true, false]) {
      const outs = [e.prod(), e.any(), e.all(), e.logsumexp(), e.var(), e2.prod(1), e2.any(-1), e2.all(1, true), e2.logsumexp(1), e2.cumsum(1), e2.cummax(0), e2.argmax(0), e2.T.cumprod(0)];
      const got = run(outs, { fusion }).map((a) => Array.from(a));
      expect(got).toEqual([[1], [0], [1], [-Infinity], [NaN], [1, 1], [0, 0], [1, 1], [-Infinity, -Infinity], [], [], [], []]);
      expect(outs.map((t) => t.shape)).toEqual([[], [], [], [], [], [2], [2], [2, 1], [2], [2, 0], [2, 0], [0], [0, 2]]);
    }
    for (const [k, f] of [() => e.argmax(), () => e.argmin(0), () => e2.argmax(1), () => e2.argmin(), () => e.topk(1)].entries()) expectInvalid(f, `case ${k}`);
  });

  test("logsumexp is stable: large values, -inf rows, +inf", () => {
    const x = Tensor.from([1000, 1000, -Infinity, -Infinity, 3, Infinity, -1000, -1001], [4, 2]);
    const got = Array.from(x.logsumexp(1).toArray());
    expectClose(got, [1000 + Math.LN2, -Infinity, Infinity, -1000 + Math.log1p(Math.exp(-1))], ...SUMS, "logsumexp");
  });

  test("the prod reduction in the interpreter agrees with the device; scans fuse into few kernels", () => {
    const x = Tensor.from(Float32Array.from(values("float32", 3, 0.5, 1.5)), SHAPE);
    const i = Tensor.from(Int32Array.from(values("int32", 4)), SHAPE);
    const outs = [x.prod(1), x.exp().prod([0, 2]), i.prod(-1), x.cumprod(2), x.argmax(1)];
    const s = schedule(outs.map((t) => t.node));
    const arrays = interpretSchedule(s, new Map());
    const dev = run(outs);
    outs.forEach((t, k) => expectClose(dev[k]!, arrays.get(t.node)!, 1e-6, 4e-6, `output ${k}`));
    // a short scan is one masked reduction: one kernel
    expect(schedule([x.cumsum(-1).node]).kernels.length).toBe(1);
    expect(schedule([x.prod(1).mul(2).node]).kernels.length).toBe(1);
  });
});

describe("crossEntropy", () => {
  const logSoftmaxRow = (r: number[]): number[] => {
    const m = Math.max(...r);
    const l = Math.log(r.reduce((p, q) => p + Math.exp(q - m), 0)) + m;
    return r.map((v) => v - l);
  };
  /** per-sample losses for logits [N, C, ...rest] (class axis 1) and a probability target of the same shape */
  function refLoss(logits: number[], shape: number[], probs: number[]): number[] {
    const ls = alongAxis(logits, shape, 1, logSoftmaxRow).data;
    const prod = ls.map((v, i) => -v * probs[i]!);
    return alongAxis(prod, shape, 1, (r) => [r.reduce((p, q) => p + q, 0)]).data;
  }
  function oneHotRef(target: number[], shape: number[], C: number, smoothing: number): number[] {
    // class axis 1 of [N, C, ...rest]; target has shape [N, ...rest]
    const N = shape[0]!, rest = shape.slice(2).reduce((p, q) => p * q, 1);
    const out: number[] = [];
    for (let n = 0; n < N; n++)
      for (let c = 0; c < C; c++)
        for (let k = 0; k < rest; k++) out.push((target[n * rest + k] === c ? 1 : 0) * (1 - smoothing) + smoothing / C);
    return out;
  }

  test("class indices and probabilities, reductions, label smoothing, extra dims, fused and unfused", () => {
    const r = seededRandom(21);
    const logits = Array.from({ length: 4 * 5 }, () => Math.fround(r() * 6 - 3));
    const target = [0, 4, 2, 2];
    const probsRaw = Array.from({ length: 20 }, () => r());
    const probs = alongAxis(probsRaw, [4, 5], 1, (q) => q.map((v) => Math.fround(v / q.reduce((a, b) => a + b, 0)))).data;
    const L = Tensor.from(Float32Array.from(logits), [4, 5]);
    const Lt = Tensor.from(Float32Array.from(new Ref([4, 5], Float64Array.from(logits)).permute([1, 0]).data), [5, 4]).T; // non-contiguous logits
    const T = Tensor.from(Int32Array.from(target), [4], { dtype: "int32" });
    const P = Tensor.from(Float32Array.from(probs), [4, 5]);
    // [2, 3, 4] logits (class axis 1) with [2, 4] targets
    const l3 = Array.from({ length: 24 }, () => Math.fround(r() * 4 - 2));
    const t3 = [0, 1, 2, 1, 2, 2, 0, 1];
    const L3 = Tensor.from(Float32Array.from(l3), [2, 3, 4]);
    const T3 = Tensor.from(Int32Array.from(t3), [2, 4], { dtype: "int32" });
    for (const fusion of [true, false]) {
      const outs = [
        L.crossEntropy(T),
        Lt.crossEntropy(T, { reduction: "none" }),
        L.crossEntropy(T, { reduction: "sum", labelSmoothing: 0.1 }),
        L.crossEntropy(P, { reduction: "none" }),
        L3.crossEntropy(T3, { reduction: "none" }),
        L3.crossEntropy(T3, { labelSmoothing: 0.25 }),
        L.shrink([[1, 2], null]).reshape([5]).crossEntropy(Tensor.from([3], [], { dtype: "int32" })),
      ];
      const got = run(outs, { fusion });
      const per = refLoss(logits, [4, 5], oneHotRef(target, [4, 5], 5, 0));
      const mean = (a: number[]) => a.reduce((p, q) => p + q, 0) / a.length;
      const sum = (a: number[]) => a.reduce((p, q) => p + q, 0);
      const what = `fusion ${fusion}`;
      expectClose(got[0]!, [mean(per)], ...SUMS, `mean ${what}`);
      expectClose(got[1]!, per, ...SUMS, `none, transposed logits ${what}`);
      expectClose(got[2]!, [sum(refLoss(logits, [4, 5], oneHotRef(target, [4, 5], 5, 0.1)))], ...SUMS, `sum, smoothing ${what}`);
      expectClose(got[3]!, refLoss(logits, [4, 5], probs), ...SUMS, `probabilities ${what}`);
      expectClose(got[4]!, refLoss(l3, [2, 3, 4], oneHotRef(t3, [2, 3, 4], 3, 0)), ...SUMS, `[N, C, d] ${what}`);
      expectClose(got[5]!, [mean(refLoss(l3, [2, 3, 4], oneHotRef(t3, [2, 3, 4], 3, 0.25)))], ...SUMS, `[N, C, d] smoothing ${what}`);
      expectClose(got[6]!, [-logSoftmaxRow(logits.slice(5, 10))[3]!], ...SUMS, `unbatched ${what}`);
      expect(outs.map((t) => t.shape)).toEqual([[], [4], [], [4], [2, 4], [], []]);
    }
  });

  test("bad arguments are GpuError INVALID_VALUE", () => {
    const L = Tensor.zeros([4, 5]);
    const T = Tensor.zeros([4], { dtype: "int32" });
    const bad: (() => unknown)[] = [
      () => L.crossEntropy(T, { reduction: "avg" as "mean" }),
      () => L.crossEntropy(T, { labelSmoothing: 1.5 }),
      () => L.crossEntropy(T, { labelSmoothing: NaN }),
      () => L.crossEntropy(Tensor.zeros([5], { dtype: "int32" })),
      () => L.crossEntropy(Tensor.zeros([4])),
      () => L.crossEntropy(5 as unknown as Tensor),
      () => Tensor.from([1], []).crossEntropy(T),
    ];
    for (const [k, f] of bad.entries()) expectInvalid(f, `case ${k}`);
  });
});

describe("topk", () => {
  test("largest and smallest along any axis, ties in index order, int32, fused and unfused", () => {
    const data = [5, 1, 5, 3, 9, 9, 0, 2, 2, 8, -1, 2, 7, 2];
    const x = Tensor.from(Float32Array.from(data), [2, 7]);
    const xi = Tensor.from(Int32Array.from(data), [7, 2]).T; // a transposed int32 view of other values
    const xiRows = new Ref([7, 2], Float64Array.from(data)).permute([1, 0]).data;
    const refTop = (row: number[], k: number, largest: boolean): [number[], number[]] => {
      const idx = row.map((_, j) => j).sort((a, b) => (largest ? row[b]! - row[a]! : row[a]! - row[b]!) || a - b).slice(0, k);
      return [idx.map((j) => row[j]!), idx];
    };
    for (const fusion of [true, false]) {
      const [v1, i1] = x.topk(3);
      const [v2, i2] = x.topk(2, 1, false);
      const [v3, i3] = x.topk(2, 0);
      const [v4, i4] = xi.topk(4, -1);
      const got = run([v1, i1, v2, i2, v3, i3, v4, i4], { fusion });
      const rowsOf = (d: ArrayLike<number>, shape: number[], axis: number, k: number, largest: boolean, which: 0 | 1) =>
        alongAxis(d, shape, axis, (r) => refTop(r, k, largest)[which]).data;
      expectClose(got[0]!, rowsOf(data, [2, 7], 1, 3, true, 0), 0, 0, `values ${fusion}`);
      expectClose(got[1]!, rowsOf(data, [2, 7], 1, 3, true, 1), 0, 0, `indices ${fusion}`);
      expectClose(got[2]!, rowsOf(data, [2, 7], 1, 2, false, 0), 0, 0, `smallest values ${fusion}`);
      expectClose(got[3]!, rowsOf(data, [2, 7], 1, 2, false, 1), 0, 0, `smallest indices ${fusion}`);
      expectClose(got[4]!, rowsOf(data, [2, 7], 0, 2, true, 0), 0, 0, `dim 0 values ${fusion}`);
      expectClose(got[5]!, rowsOf(data, [2, 7], 0, 2, true, 1), 0, 0, `dim 0 indices ${fusion}`);
      expectClose(got[6]!, rowsOf(xiRows, [2, 7], 1, 4, true, 0), 0, 0, `int32 values ${fusion}`);
      expectClose(got[7]!, rowsOf(xiRows, [2, 7], 1, 4, true, 1), 0, 0, `int32 indices ${fusion}`);
      expect(got[6]).toBeInstanceOf(Int32Array);
      expect(got[1]).toBeInstanceOf(Int32Array);
      expect([v1.shape, v3.shape, i4.shape]).toEqual([[2, 3], [2, 7], [2, 4]]);
    }
    const [v0, i0] = x.topk(0);
    expect([v0.shape, i0.shape, i0.dtype]).toEqual([[2, 0], [2, 0], "int32"]);
    const inf = Tensor.from([-Infinity, 1, -Infinity]);
    const [vi, ii] = inf.topk(3);
    expect([vi.toList(), ii.toList()]).toEqual([[1, -Infinity, -Infinity], [1, 0, 2]]);
  });

  test("bad arguments are GpuError INVALID_VALUE", () => {
    const x = Tensor.zeros([2, 3]);
    for (const [k, f] of [() => x.topk(4), () => x.topk(-1), () => x.topk(1.5), () => x.topk(1, 2), () => Tensor.from([1], []).topk(1), () => x.topk(1, -1, "yes" as unknown as boolean)].entries()) expectInvalid(f, `case ${k}`);
  });
});

describe("bad arguments", () => {
  test("axes out of range, repeated, non-boolean keepdim, non-number axis or correction are GpuError INVALID_VALUE", () => {
    const x = Tensor.zeros([2, 3]);
    const bad: (() => unknown)[] = [
      () => x.argmax(2), () => x.argmin(-3), () => x.argmax(0.5), () => x.argmax("0" as unknown as number), () => x.argmax(0, 1 as unknown as boolean),
      () => x.cumsum(2), () => x.cumprod(-3), () => x.cummax(1.5),
      () => x.prod(2), () => x.prod([0, 0]), () => x.any(5), () => x.all([1, -1]), () => x.any(0, "no" as unknown as boolean),
      () => x.var(3), () => x.var(0, false, NaN), () => x.std(0, 0 as unknown as boolean), () => x.logsumexp(-3), () => x.logsumexp(0, 1 as unknown as boolean),
    ];
    bad.forEach((f, k) => expectInvalid(f, `case ${k}`));
  });
});
