// The tinygrad functions of src/tensor/ops_more.ts and their neighbours in tensor.ts (issue 25,
// item 6), against float64 references computed here with plain loops: elementwise (log10,
// logicalNot, copysign, logaddexp, isclose), the integer ops (bitwise and / or / xor / not,
// shifts: negative values, int32 wrap, shifts past the width, int8 / uint8 / int64), scans
// (cummin, logcumsumexp), reductions (stdMean, argsort, softmin, normalize), movement (unfold,
// meshgrid, repeatInterleave, unflatten, diag, diagonal, empty), losses against hand-computed
// values, scatterReduce, and the data-dependent maskedSelect / nonzero. Bad arguments are
// GpuErrors naming the call.
//
// Tolerances: integer and movement results are exact; float32 math 1e-5 + 1e-5·|want|.
import { describe, expect, test } from "bun:test";
import { GpuError } from "../src";
import { seededRandom } from "../src/tensor/reference";
import { Tensor } from "../src/tensor";
import { expectInvalid, run } from "./tensor_helpers";

function close(got: ArrayLike<number>, want: ArrayLike<number>, what: string, tol = 1e-5): void {
  expect({ what, n: got.length }).toEqual({ what, n: want.length });
  for (let i = 0; i < got.length; i++) {
    const a = got[i]!, b = want[i]!;
    if ((Number.isNaN(a) && Number.isNaN(b)) || a === b) continue;
    if (!(Math.abs(a - b) <= tol + tol * Math.abs(b))) throw new Error(`${what}: element ${i}: got ${a}, want ${b}`);
  }
}
const exact = (got: ArrayLike<number>, want: ArrayLike<number>, what: string) => expect({ what, v: Array.from(got) }).toEqual({ what, v: Array.from(want) });
const f32 = (a: number[]) => Array.from(Float32Array.from(a));
const rnd = (n: number, seed: number, lo = -2, hi = 2): number[] => {
  const r = seededRandom(seed);
  return f32(Array.from({ length: n }, () => lo + (hi - lo) * r()));
};

describe("elementwise", () => {
  test("log10, logicalNot, copysign, logaddexp, isclose", () => {
    const xs = [1, 10, 100, 0.5, 3, 1e-3];
    const x = Tensor.from(xs);
    const s = Tensor.from([0, 1, -1, 2.5, 0, -0]);
    const [l10, ln, cs, lae] = run([x.log10(), s.logicalNot().int(), Tensor.from([1, -2, 3, -4, 5, 6]).copysign(s), x.logaddexp(s)]);
    close(l10!, xs.map(Math.log10), "log10");
    exact(ln!, [1, 0, 0, 0, 1, 1], "logicalNot");
    exact(cs!, [1, 2, -3, 4, 5, -6], "copysign (-0 counts as negative)");
    close(lae!, xs.map((v, i) => Math.log(Math.exp(v) + Math.exp(f32([0, 1, -1, 2.5, 0, -0])[i]!))), "logaddexp");
    expect(s.logicalNot().dtype).toBe("bool");
    const a = Tensor.from([1, 1, NaN, Infinity, -Infinity, 1]);
    const b = Tensor.from([1.000001, 1.1, NaN, Infinity, Infinity, NaN]);
    exact(run([a.isclose(b).int(), a.isclose(b, { equalNan: true }).int(), a.isclose(b, { rtol: 0.2 }).int()]).flatMap((r) => Array.from(r)), [1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0], "isclose");
    expectInvalid(() => x.copysign("a" as never), "copysign string");
    expectInvalid(() => a.isclose(b, { rtol: NaN }), "isclose rtol");
    expectInvalid(() => a.isclose(b, { eqNan: true } as never), "isclose unknown option");
  });
});

describe("integer ops", () => {
  const vals = [0, 1, -1, 5, -5, 7, -8, 2147483647, -2147483648, 123456789, -987654321, 0x55555555 | 0];
  const wrap = (v: number) => v | 0;
  test("bitwise and / or / xor / not on int32, with negatives and the extremes", () => {
    const a = Tensor.from(Int32Array.from(vals));
    const bv = [...vals].reverse();
    const b = Tensor.from(Int32Array.from(bv));
    const [and, or, xor, x2, not, andS] = run([a.bitwiseAnd(b), a.bitwiseOr(b), a.bitwiseXor(b), a.xor(b), a.bitwiseNot(), a.bitwiseAnd(-4)]);
    exact(and!, vals.map((v, i) => v & bv[i]!), "and");
    exact(or!, vals.map((v, i) => v | bv[i]!), "or");
    exact(xor!, vals.map((v, i) => v ^ bv[i]!), "xor");
    exact(x2!, vals.map((v, i) => v ^ bv[i]!), "xor (tinygrad's name)");
    exact(not!, vals.map((v) => ~v), "not");
    exact(andS!, vals.map((v) => v & -4), "and with a scalar");
  });
  test("int8, uint8, int64 and bool", () => {
    const i8 = [-128, -1, 0, 1, 127, -77];
    const u8 = [0, 1, 128, 255, 170, 15];
    const a8 = Tensor.from(Int8Array.from(i8)), b8 = Tensor.from(Int8Array.from([...i8].reverse()));
    const au = Tensor.from(Uint8Array.from(u8), undefined, { dtype: "uint8" }), bu = Tensor.from(Uint8Array.from([...u8].reverse()), undefined, { dtype: "uint8" });
    expect(a8.bitwiseAnd(b8).toList()).toEqual(i8.map((v, i) => v & [...i8].reverse()[i]!));
    expect(a8.bitwiseOr(b8).toList()).toEqual(i8.map((v, i) => v | [...i8].reverse()[i]!));
    expect(a8.bitwiseNot().toList()).toEqual(i8.map((v) => ~v));
    expect(au.bitwiseXor(bu).toList()).toEqual(u8.map((v, i) => v ^ [...u8].reverse()[i]!));
    expect(au.bitwiseNot().toList()).toEqual(u8.map((v) => ~v & 255));
    expect(au.bitwiseNot().dtype).toBe("uint8");
    const big = [0n, -1n, 1n << 62n, -(1n << 63n), 0x123456789abcdefn, -0x7edcba987654321n];
    const a64 = Tensor.from(BigInt64Array.from(big)), b64 = Tensor.from(BigInt64Array.from([...big].reverse()));
    expect(Array.from(a64.bitwiseAnd(b64).toArray("int64"))).toEqual(big.map((v, i) => v & [...big].reverse()[i]!));
    expect(Array.from(a64.bitwiseXor(b64).toArray("int64"))).toEqual(big.map((v, i) => v ^ [...big].reverse()[i]!));
    const t = Tensor.from(Uint8Array.from([0, 0, 1, 1]), undefined, { dtype: "bool" }), u = Tensor.from(Uint8Array.from([0, 1, 0, 1]), undefined, { dtype: "bool" });
    exact(run([t.bitwiseAnd(u).int(), t.bitwiseOr(u).int(), t.xor(u).int(), t.bitwiseNot().int()]).flatMap((r) => Array.from(r)), [0, 0, 0, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0], "bool");
    expect(t.xor(u).dtype).toBe("bool");
  });
  test("shifts: negative values, int32 wrap, shifts past the width", () => {
    const a = Tensor.from(Int32Array.from(vals));
    const ks = [0, 1, 3, 17, 30, 31, 32, 40];
    const got = run(ks.flatMap((k) => [a.lshift(k), a.rshift(k)]));
    ks.forEach((k, j) => {
      exact(got[2 * j]!, vals.map((v) => (k >= 32 ? 0 : wrap(v << k))), `lshift ${k}`);
      exact(got[2 * j + 1]!, vals.map((v) => (k >= 32 ? (v < 0 ? -1 : 0) : v >> k)), `rshift ${k}`);
    });
    const u = Tensor.from(Uint8Array.from([0, 1, 128, 255, 77]), undefined, { dtype: "uint8" });
    expect(u.lshift(3).toList()).toEqual([0, 8, 0, 248, (77 << 3) & 255]);
    expect(u.rshift(3).toList()).toEqual([0, 0, 16, 31, 9]);
    const i8 = Tensor.from(Int8Array.from([-128, -3, 5, 127]));
    expect(i8.lshift(1).toList()).toEqual([0, -6, 10, -2]);
    expect(i8.rshift(7).toList()).toEqual([-1, -1, 0, 0]);
    const l = Tensor.from(BigInt64Array.from([-5n, 3n, 1n]));
    expect(Array.from(l.lshift(62).toArray("int64"))).toEqual([BigInt.asIntN(64, -5n << 62n), BigInt.asIntN(64, 3n << 62n), 1n << 62n]);
    expect(Array.from(l.rshift(1).toArray("int64"))).toEqual([-3n, 1n, 0n]);
    expectInvalid(() => a.lshift(-1), "negative shift");
    expectInvalid(() => a.rshift(-2), "negative rshift");
    expectInvalid(() => a.lshift(1.5), "fractional shift");
    expectInvalid(() => Tensor.from([1.5]).rshift(1), "float rshift");
    expectInvalid(() => Tensor.from([1.5]).bitwiseAnd(1), "float and");
    expectInvalid(() => a.bitwiseOr(1.5), "fractional operand");
    expectInvalid(() => a.bitwiseXor(Tensor.from([1])), "float operand");
  });
});

describe("scans and reductions", () => {
  test("cummin and logcumsumexp along each axis, long rows included", () => {
    for (const [shape, axis] of [[[5], 0], [[3, 4], 1], [[3, 4], 0], [[2, 40], 1]] as const) {
      const n = shape.reduce((p, q) => p * q, 1);
      const xs = rnd(n, n + axis, -30, 30);
      const x = Tensor.from(xs, [...shape]);
      const [cm, lc] = run([x.cummin(axis), x.logcumsumexp(axis)]);
      const inner = shape.slice(axis + 1).reduce((p, q) => p * q, 1), len = shape[axis]!;
      const wantM: number[] = [], wantL: number[] = [];
      for (let i = 0; i < n; i++) {
        const o = Math.floor(i / (len * inner)), k = i % inner, j = Math.floor(i / inner) % len;
        const row = Array.from({ length: j + 1 }, (_, q) => xs[(o * len + q) * inner + k]!);
        wantM.push(Math.min(...row));
        const m = Math.max(...row);
        wantL.push(m + Math.log(row.reduce((p, v) => p + Math.exp(v - m), 0)));
      }
      exact(cm!, wantM, `cummin ${shape} axis ${axis}`);
      close(lc!, wantL, `logcumsumexp ${shape} axis ${axis}`);
    }
    const ints = [5, -2147483648, 3, 2147483647, -7];
    expect(Tensor.from(Int32Array.from(ints)).cummin().toList()).toEqual([5, -2147483648, -2147483648, -2147483648, -2147483648]);
    close(Tensor.from([-Infinity, -Infinity, 0, Infinity]).logcumsumexp().toArray(), [-Infinity, -Infinity, 0, Infinity], "logcumsumexp infinities");
  });
  test("stdMean, argsort, softmin, normalize", () => {
    const xs = rnd(12, 3);
    const x = Tensor.from(xs, [3, 4]);
    const [sd, mn] = x.stdMean(1);
    const rows = [0, 1, 2].map((r) => xs.slice(4 * r, 4 * r + 4));
    const [s, m, as, sm, nz, n1, ninf] = run([sd!, mn!, x.argsort(1, true), x.softmin(1), x.normalize(), x.normalize(1, 0), x.normalize(Infinity, 1)]);
    const mean = rows.map((r) => r.reduce((p, v) => p + v, 0) / 4);
    close(m!, mean, "mean");
    close(s!, rows.map((r, i) => Math.sqrt(r.reduce((p, v) => p + (v - mean[i]!) ** 2, 0) / 3)), "std");
    exact(as!, rows.flatMap((r) => [0, 1, 2, 3].sort((a, b) => r[b]! - r[a]! || a - b)), "argsort descending");
    close(sm!, rows.flatMap((r) => { const e = r.map((v) => Math.exp(-v)); const t = e.reduce((p, v) => p + v, 0); return e.map((v) => v / t); }), "softmin");
    close(nz!, rows.flatMap((r) => { const q = Math.hypot(...r); return r.map((v) => v / q); }), "normalize p=2 dim 1");
    close(n1!, xs.map((v, i) => { const c = i % 4; const q = Math.abs(xs[c]!) + Math.abs(xs[4 + c]!) + Math.abs(xs[8 + c]!); return v / q; }), "normalize p=1 dim 0");
    close(ninf!, rows.flatMap((r) => { const q = Math.max(...r.map(Math.abs)); return r.map((v) => v / q); }), "normalize p=inf");
    close(Tensor.zeros([2, 2]).normalize().toArray(), [0, 0, 0, 0], "normalize of zeros (eps)");
    expectInvalid(() => x.normalize(0), "p 0");
    expectInvalid(() => x.softmin(5), "softmin axis");
    expectInvalid(() => x.argsort(2), "argsort dim");
    expectInvalid(() => x.stdMean(3), "stdMean axis");
  });
});

describe("movement and construction", () => {
  test("unfold against loops", () => {
    for (const [shape, dim, size, step] of [[[7], 0, 3, 2], [[2, 6, 3], 1, 2, 1], [[4, 5], -1, 5, 3], [[4, 5], 0, 1, 4]] as const) {
      const n = shape.reduce((p, q) => p * q, 1);
      const xs = Array.from({ length: n }, (_, i) => i);
      const t = Tensor.from(Int32Array.from(xs), [...shape]).unfold(dim, size, step);
      const d = dim < 0 ? dim + shape.length : dim, len = shape[d]!, W = Math.floor((len - size) / step) + 1;
      const pre = shape.slice(0, d).reduce((p, q) => p * q, 1), post = shape.slice(d + 1).reduce((p, q) => p * q, 1);
      expect(t.shape).toEqual([...shape.slice(0, d), W, ...shape.slice(d + 1), size]);
      const want: number[] = [];
      for (let a = 0; a < pre; a++) for (let w = 0; w < W; w++) for (let c = 0; c < post; c++) for (let j = 0; j < size; j++) want.push(xs[(a * len + w * step + j) * post + c]!);
      exact(t.toList(), want, `unfold ${shape} ${dim} ${size} ${step}`);
    }
    expect(Tensor.zeros([3]).unfold(0, 0, 1).shape).toEqual([4, 0]);
    expectInvalid(() => Tensor.zeros([3]).unfold(0, 4, 1), "size too big");
    expectInvalid(() => Tensor.zeros([3]).unfold(0, 2, 0), "step 0");
    expectInvalid(() => Tensor.zeros([3]).unfold(1, 2, 1), "dim");
  });
  test("meshgrid, repeatInterleave, unflatten, diag, diagonal, empty", () => {
    const a = Tensor.from([1, 2, 3]), b = Tensor.from([10, 20]);
    const [ij0, ij1] = Tensor.meshgrid([a, b]);
    const [xy0, xy1] = Tensor.meshgrid([a, b], "xy");
    expect([ij0!.shape, xy0!.shape]).toEqual([[3, 2], [2, 3]]);
    exact(run([ij0!, ij1!, xy0!, xy1!]).flatMap((r) => Array.from(r)), [1, 1, 2, 2, 3, 3, 10, 20, 10, 20, 10, 20, 1, 2, 3, 1, 2, 3, 10, 10, 10, 20, 20, 20], "meshgrid");
    expectInvalid(() => Tensor.meshgrid([a], "yx" as never), "indexing");
    expectInvalid(() => Tensor.meshgrid([a, 3 as never]), "not a tensor");
    const x = Tensor.from(Int32Array.from([1, 2, 3, 4, 5, 6]), [2, 3]);
    exact(x.repeatInterleave(2, 1).toList(), [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6], "repeatInterleave dim 1");
    exact(x.repeatInterleave(2, 0).toList(), [1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6], "repeatInterleave dim 0");
    exact(x.repeatInterleave(3).toList(), [1, 2, 3, 4, 5, 6].flatMap((v) => [v, v, v]), "repeatInterleave flat");
    expectInvalid(() => x.repeatInterleave(-1), "negative repeats");
    expect(Tensor.zeros([2, 12]).unflatten(1, [3, -1, 2]).shape).toEqual([2, 3, 2, 2]);
    expect(Tensor.zeros([2, 12]).unflatten(-1, [4, 3]).shape).toEqual([2, 4, 3]);
    expectInvalid(() => Tensor.zeros([2, 12]).unflatten(1, [5, -1]), "unflatten misfit");
    expectInvalid(() => Tensor.zeros([2, 12]).unflatten(1, [-1, -1]), "two -1");
    exact(Tensor.from([1, 2, 3]).diag().toList(), [1, 0, 0, 0, 2, 0, 0, 0, 3], "diag");
    expectInvalid(() => x.diag(), "diag of 2-D");
    const m = Tensor.from(Int32Array.from(Array.from({ length: 24 }, (_, i) => i)), [2, 3, 4]);
    const ref = (off: number, d1: number, d2: number): number[] => {
      const sh = [2, 3, 4], rest = [0, 1, 2].filter((i) => i !== d1 && i !== d2)[0]!;
      const out: number[] = [];
      for (let r = 0; r < sh[rest]!; r++)
        for (let i = 0; ; i++) {
          const p = off >= 0 ? i : i - off, q = off >= 0 ? i + off : i;
          if (p >= sh[d1]! || q >= sh[d2]!) break;
          const idx = [0, 0, 0];
          idx[rest] = r; idx[d1] = p; idx[d2] = q;
          out.push(idx[0]! * 12 + idx[1]! * 4 + idx[2]!);
        }
      return out;
    };
    for (const [off, d1, d2] of [[0, 0, 1], [1, 1, 2], [-1, 1, 2], [2, 2, 0], [0, -1, -2]] as const)
      exact(m.diagonal(off, d1, d2).toList(), ref(off, (d1 + 3) % 3, (d2 + 3) % 3), `diagonal ${off} ${d1} ${d2}`);
    expect(m.diagonal(5, 1, 2).shape).toEqual([2, 0]);
    expectInvalid(() => m.diagonal(0, 1, 1), "same dims");
    expectInvalid(() => Tensor.from([1]).diagonal(), "1-D diagonal");
    const e = Tensor.empty([2, 3], { dtype: "int32" });
    expect([e.shape, e.dtype, e.toList().length]).toEqual([[2, 3], "int32", 6]);
    expectInvalid(() => Tensor.empty([-1]), "empty negative");
  });
});

describe("losses, against hand-computed values", () => {
  test("binaryCrossentropy", () => {
    const p = Tensor.from([0.9, 0.2, 0.5]), y = Tensor.from([1, 0, 1]);
    const each = [-Math.log(0.9), -Math.log(0.8), -Math.log(0.5)];
    const [n, s, m] = run([p.binaryCrossentropy(y, "none"), p.binaryCrossentropy(y, "sum"), p.binaryCrossentropy(y)]);
    close(n!, each, "none");
    close(s!, [each[0]! + each[1]! + each[2]!], "sum");
    close(m!, [(each[0]! + each[1]! + each[2]!) / 3], "mean");
    expectInvalid(() => p.binaryCrossentropy(y, "avg" as never), "reduction");
    expectInvalid(() => p.binaryCrossentropy([1] as never), "Y not a tensor");
  });
  test("sparseCategoricalCrossentropy and nllLoss", () => {
    const logits = [[1, 2, 3], [0, 0, 0], [2, -1, 0.5]];
    const lsm = logits.map((r) => { const l = Math.log(r.reduce((p, v) => p + Math.exp(v), 0)); return r.map((v) => v - l); });
    const x = Tensor.from(logits.flat(), [3, 3]);
    const y = Tensor.from(Int32Array.from([2, -1, 0]));
    const [m, s, n, sm] = run([x.sparseCategoricalCrossentropy(y), x.sparseCategoricalCrossentropy(y, { reduction: "sum" }), x.sparseCategoricalCrossentropy(y, { reduction: "none" }), x.sparseCategoricalCrossentropy(y, { labelSmoothing: 0.1 })]);
    const e0 = -lsm[0]![2]!, e2 = -lsm[2]![0]!;
    close(n!, [e0, 0, e2], "none (the ignored row 0)");
    close(s!, [e0 + e2], "sum");
    close(m!, [(e0 + e2) / 2], "mean over the counted rows");
    const smooth = (r: number[], c: number) => -(0.9 * r[c]! + 0.1 * (r[0]! + r[1]! + r[2]!) / 3);
    close(sm!, [(smooth(lsm[0]!, 2) + smooth(lsm[2]!, 0)) / 2], "label smoothing");
    const lp = Tensor.from(lsm.flat(), [3, 3]);
    const yy = Tensor.from(Int32Array.from([2, 1, 0]));
    const w = Tensor.from([0.5, 2, 1]);
    const [a, b, c, d] = run([lp.nllLoss(yy), lp.nllLoss(yy, { weight: w }), lp.nllLoss(yy, { weight: w, ignoreIndex: 1, reduction: "none" }), lp.nllLoss(yy, { reduction: "sum", ignoreIndex: 0 })]);
    const v = [-lsm[0]![2]!, -lsm[1]![1]!, -lsm[2]![0]!];
    close(a!, [(v[0]! + v[1]! + v[2]!) / 3], "nll mean");
    close(b!, [(v[0]! * 1 + v[1]! * 2 + v[2]! * 0.5) / 3.5], "nll weighted mean");
    close(c!, [v[0]!, 0, v[2]! * 0.5], "nll none with ignoreIndex");
    close(d!, [v[0]! + v[1]!], "nll sum with ignoreIndex");
    close(Tensor.from(lsm[0]!).nllLoss(Tensor.from(Int32Array.from([1]), []), {}).toArray(), [-lsm[0]![1]!], "nll of a 1-D input");
    expectInvalid(() => x.sparseCategoricalCrossentropy(Tensor.from([1, 2, 0])), "float classes");
    expectInvalid(() => x.sparseCategoricalCrossentropy(y, { labelSmoothing: 2 }), "smoothing");
    expectInvalid(() => lp.nllLoss(yy, { weight: Tensor.from([1, 2]) }), "weight shape");
    expectInvalid(() => lp.nllLoss(yy, { ignoreIndex: 0.5 }), "ignoreIndex");
  });
});

describe("scatterReduce", () => {
  const ref = (self: number[], idx: number[], src: number[], reduce: string, incl: boolean): number[] => {
    const groups = self.map((v) => (incl ? [v] : []));
    idx.forEach((p, j) => groups[p]!.push(src[j]!));
    return groups.map((g, i) => {
      if (!g.length || (!incl && g.length === 0)) return self[i]!;
      if (reduce === "sum") return g.reduce((p, v) => p + v, 0);
      if (reduce === "prod") return g.reduce((p, v) => p * v, 1);
      if (reduce === "mean") return g.reduce((p, v) => p + v, 0) / g.length;
      return reduce === "amax" ? Math.max(...g) : Math.min(...g);
    });
  };
  test("every reduce, with and without self, 1-D and along dim 1 of 2-D", () => {
    const self = [1, -2, 3, 4], idx = [0, 2, 0, 3, 0], src = [5, -1, 2, 7, -3];
    for (const reduce of ["sum", "prod", "mean", "amax", "amin"] as const)
      for (const incl of [true, false]) {
        const t = Tensor.from(self).scatterReduce(0, Tensor.from(Int32Array.from(idx)), Tensor.from(src), reduce, incl);
        close(t.toArray(), ref(self, idx, src, reduce, incl), `${reduce} includeSelf ${incl}`);
      }
    const s2 = Tensor.from(Int32Array.from([1, 2, 3, 4, 5, 6]), [2, 3]);
    const i2 = Tensor.from(Int32Array.from([2, 2, 0, 1]), [2, 2]);
    const v2 = Tensor.from(Int32Array.from([10, 20, 30, 40]), [2, 2]);
    exact(s2.scatterReduce(1, i2, v2, "amax").toList(), [...ref([1, 2, 3], [2, 2], [10, 20], "amax", true), ...ref([4, 5, 6], [0, 1], [30, 40], "amax", true)], "2-D amax");
    exact(s2.scatterReduce(1, i2, v2, "mean", false).toList(), [1, 2, 15, 30, 40, 6], "2-D int mean");
    expectInvalid(() => s2.scatterReduce(1, i2, v2, "max" as never), "reduce name");
    expectInvalid(() => s2.scatterReduce(1, i2, 3 as never, "sum"), "src number");
    expectInvalid(() => s2.scatterReduce(1, i2, v2, "sum", 1 as never), "includeSelf");
  });
});

describe("data-dependent shapes: the count is realized, the values stay lazy", () => {
  test("maskedSelect and nonzero against loops", () => {
    const xs = rnd(24, 9);
    const x = Tensor.from(xs, [2, 3, 4]);
    const mask = x.cmpgt(0.3);
    const want = xs.filter((v) => v > 0.3);
    const sel = x.maskedSelect(mask);
    expect(sel.shape).toEqual([want.length]);
    exact(sel.toArray(), want, "maskedSelect");
    const rowMask = Tensor.from(Uint8Array.from([1, 0, 0, 1]), [4], { dtype: "bool" });
    exact(x.maskedSelect(rowMask).toArray(), xs.filter((_, i) => i % 4 === 0 || i % 4 === 3), "broadcast mask");
    const nz = x.cmpgt(0.3).nonzero();
    const coords: number[] = [];
    xs.forEach((v, i) => { if (v > 0.3) coords.push(Math.floor(i / 12), Math.floor(i / 4) % 3, i % 4); });
    expect(nz.shape).toEqual([want.length, 3]);
    exact(nz.toList(), coords, "nonzero");
    exact(Tensor.from([0, NaN, 2, 0]).nonzero().toList(), [1, 2], "NaN counts as non-zero");
    expect(Tensor.zeros([3]).nonzero().shape).toEqual([0, 1]);
    expect(x.maskedSelect(x.cmpgt(10)).shape).toEqual([0]);
    expectInvalid(() => x.maskedSelect(Tensor.zeros([3])), "mask shape");
    expectInvalid(() => x.maskedSelect(1 as never), "mask not a tensor");
  });
  test("errors are GpuErrors, never TypeErrors", () => {
    for (const f of [() => Tensor.from([1]).unfold("a" as never, 1, 1), () => Tensor.from([1]).diagonal(), () => Tensor.meshgrid(null as never)]) {
      try {
        f();
        throw new Error("no error");
      } catch (e) {
        expect(e).toBeInstanceOf(GpuError);
      }
    }
  });
});
