// The elementwise ops past the basic ones (rounding, remainders, erf and exact GELU, the libm
// functions, NaN/inf tests, clip, lerp and the activations) and the 0-d / int32-min fixes, against
// float64 references computed here or in src/tensor/reference.ts, on contiguous, permuted, sliced,
// broadcast, 0-d and zero-size operands, fused and unfused, float32 and int32.
//
// Tolerances (|got - want| <= atol + rtol·|want|, NaN matching NaN):
//  - floor, ceil, trunc, round, sign, mod, fmod, clip, isnan, isinf, isfinite: exact (0, 0), signed
//    zeros included where stated (fmod is exact in IEEE arithmetic, and mod adds one rounding that
//    the float64 reference rounds the same way);
//  - libm functions (exp2, log2, tan, atan, asin, acos, sinh, cosh, asinh, acosh, atanh): 1e-6 + 4e-6·|want| (CPU libm
//    is within an ulp or two; CUDA documents at most 4 ulp);
//  - erf (a series and a fit over the ALU's own ops): 4e-7 absolute, 4e-6 relative;
//  - composites of several float32 ops (gelu, silu, softplus, elu, mish, hardswish, lerp and the
//    other activations): 2e-6 + 1e-5·|want|.
import { describe, expect, test } from "bun:test";
import { GpuError, Status } from "../src";
import { Ref, erf64, refUnary, roundHalfEven, seededRandom } from "../src/tensor/reference";
import { Tensor, interpretSchedule, schedule, type PrepareOptions } from "../src/tensor";
import { run, type Arr } from "./tensor_helpers";

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, atol: number, rtol: number, what: string, signedZero = false): void {
  if (got.length !== want.length) throw new Error(`${what}: length ${got.length}, want ${want.length}`);
  for (let i = 0; i < got.length; i++) {
    const a = got[i]!, b = want[i]!;
    if (Number.isNaN(b) && Number.isNaN(a)) continue;
    if (a === b) {
      if (signedZero && !Object.is(a, b)) throw new Error(`${what}: element ${i}: got ${Object.is(a, -0) ? "-0" : a}, want ${Object.is(b, -0) ? "-0" : b}`);
      continue;
    }
    if (!(Math.abs(a - b) <= atol + rtol * Math.abs(b))) throw new Error(`${what}: element ${i}: got ${a}, want ${b}`);
  }
}

function randF32(n: number, seed: number, lo: number, hi: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: n }, () => lo + (hi - lo) * r());
}

/** A [4, 6] float32 input: random values in [lo, hi) and the edge values at the front. */
function input(seed: number, lo: number, hi: number, edges: readonly number[]): Float32Array {
  const d = randF32(24, seed, lo, hi);
  edges.forEach((v, i) => (d[i] = v));
  return d;
}

const EDGES = [NaN, Infinity, -Infinity, -0, 0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e-30];
const EXACT = [0, 0] as const;
const LIBM = [1e-6, 4e-6] as const;
const ERF = [4e-7, 4e-6] as const;
const COMPOSITE = [2e-6, 1e-5] as const;

/** The op applied to the same values laid out five ways: contiguous, permuted, sliced, broadcast, 0-d. */
function layouts(data: Float32Array, f: (t: Tensor) => Tensor, g: (x: number) => number): { outs: Tensor[]; want: number[][] } {
  const ref = new Ref([4, 6], data);
  const x = Tensor.from(data, [4, 6]);
  const xt = Tensor.from(Float32Array.from(ref.permute([1, 0]).data), [6, 4]).permute([1, 0]); // a transposed view of the same values
  const sl = Tensor.from(Float32Array.from(ref.pad([[1, 1], [2, 0]], 7).data), [6, 8]).slice([[1, 5], [2, 8]]);
  const bc = Tensor.from(data.slice(0, 6), [1, 6]).expand([4, 6]);
  const z = Tensor.from(data.slice(3, 4), []);
  const outs = [f(x), f(xt), f(sl), f(bc), f(z), f(Tensor.from(new Float32Array(0), [0, 3]))];
  const want = [Array.from(data, g), Array.from(data, g), Array.from(data, g), Array.from({ length: 24 }, (_, i) => g(data[i % 6]!)), [g(data[3]!)], []];
  return { outs, want };
}

function checkLayouts(name: string, data: Float32Array, f: (t: Tensor) => Tensor, g: (x: number) => number, tol: readonly [number, number], signedZero = false): void {
  for (const fusion of [true, false]) {
    const { outs, want } = layouts(data, f, g);
    const got = run(outs, { fusion });
    const labels = ["contiguous", "permuted", "sliced", "broadcast", "0-d", "zero-size"];
    got.forEach((v, i) => expectClose(v, want[i]!, tol[0], tol[1], `${name} ${labels[i]} fusion=${fusion}`, signedZero));
    expect(outs[4]!.shape).toEqual([]);
    expect(outs[5]!.shape).toEqual([0, 3]);
  }
}

describe("0-d tensors and int32 min (the bugs)", () => {
  test("reductions, softmax and squeeze over axis 0 or -1 of a 0-d tensor keep the value; other axes are GpuError", () => {
    const x = Tensor.from(3.5, []);
    const outs = [x.sum(0), x.sum(-1), x.max(0, true), x.min(-1), x.mean(-1), x.mean([0]), x.softmax(), x.softmax(0), x.logSoftmax(-1), x.squeeze(0), x.squeeze(-1), x.flip(0), x.transpose(0, -1)];
    for (const o of outs) expect(o.shape).toEqual([]);
    expect(run(outs).map((a) => a[0])).toEqual([3.5, 3.5, 3.5, 3.5, 3.5, 3.5, 1, 1, 0, 3.5, 3.5, 3.5, 3.5]);
    const i = Tensor.from([7], [], { dtype: "int32" });
    expect(run([i.sum(0), i.max(-1), i.min(0)]).map((a) => [a[0], a instanceof Int32Array])).toEqual([[7, true], [7, true], [7, true]]);
    for (const f of [() => x.sum(1), () => x.max(-2), () => x.softmax(1), () => x.squeeze(2), () => x.transpose(0, 1), () => x.sum(0.5), () => x.min([0, -1])]) {
      try {
        f();
        throw new Error("no error");
      } catch (e) {
        expect(e).toBeInstanceOf(GpuError);
        expect((e as GpuError).code).toBe(Status.INVALID_VALUE);
      }
    }
  });

  test("int32 min is exact at INT_MIN and INT_MAX, over axes, and gives INT_MAX over nothing", () => {
    const MIN = -2147483648, MAX = 2147483647;
    const a = Tensor.from([0, MIN], [2], { dtype: "int32" });
    const m = Tensor.from([MAX, 5, MIN, -1, 0, MAX, 3, MIN + 1, MAX], [3, 3], { dtype: "int32" });
    const empty = Tensor.from(new Int32Array(0), [2, 0], { dtype: "int32" });
    const outs = [a.min(), m.min(0), m.min(1), m.min(-1, true), m.T.min(0), m.minimum(0).min(), empty.min(1), Tensor.from(new Float32Array(0), [0]).min()];
    const got = run(outs).map((g) => Array.from(g));
    expect(got).toEqual([[MIN], [-1, MIN + 1, MIN], [MIN, -1, MIN + 1], [MIN, -1, MIN + 1], [MIN, -1, MIN + 1], [MIN], [MAX, MAX], [Infinity]]);
    expect(outs[0]!.dtype).toBe("int32");
    // float32 min keeps working through the same path, fused and not
    const f = Tensor.from([3, -Infinity, 2, 0.5], [2, 2]);
    for (const fusion of [true, false]) expect(run([f.min(1), f.min()], { fusion }).map((g) => Array.from(g))).toEqual([[-Infinity, 0.5], [-Infinity]]);
  });
});

describe("min reduction", () => {
  test("float32 and int32 min over wide (vector tile), narrow (lanes) and merged axes, permuted and padded, fused and not", () => {
    const a = randF32(40 * 48, 9, -100, 100);
    const ra = new Ref([40, 48], a);
    const ia = Int32Array.from(a, (v) => Math.trunc(v * 2e7));
    const ri = new Ref([40, 48], ia);
    for (const fusion of [true, false]) {
      const x = Tensor.from(a, [40, 48]), xi = Tensor.from(ia, [40, 48], { dtype: "int32" });
      const outs = [x.min(0), x.min(1), x.min(), x.T.min(0, true), x.reshape([40, 6, 8]).min([1, 2]), x.mul(x).min(0), x.pad([[0, 0], [1, 1]], 1000).min(1), xi.min(0), xi.min(1), xi.T.min(-1), x.reshape([4, 10, 48]).min(2)];
      const refs = [ra.min([0]), ra.min([1]), ra.min([0, 1]), ra.permute([1, 0]).min([0], true), ra.reshape([40, 6, 8]).min([1, 2]), ra.map((v) => Math.fround(v * v)).min([0]), ra.min([1]), ri.min([0]), ri.min([1]), ri.min([0]), ra.reshape([4, 10, 48]).min([2])];
      const got = run(outs, { fusion });
      refs.forEach((r, k) => {
        expect(outs[k]!.shape).toEqual(r.shape);
        expectClose(got[k]!, r.data, ...EXACT, `min ${k} fusion=${fusion}`);
      });
      expect(got[7]).toBeInstanceOf(Int32Array);
    }
    // one kernel for a min with its producer and epilogue, like max
    const x = Tensor.from(a, [40, 48]);
    expect(schedule([x.exp().min(1).sqrt().node]).kernels.length).toBe(1);
  });
});

describe("rounding", () => {
  const data = input(1, -8, 8, EDGES);
  for (const name of ["floor", "ceil", "trunc", "round"] as const) {
    test(`${name}: exact, signed zeros and NaN/inf kept, on every layout, fused and not`, () => {
      checkLayouts(name, data, (t) => t[name](), refUnary[name]!, EXACT, true);
    });
  }

  test("round is half to even; int32 operands are their own result (the same tensor, int32)", () => {
    const x = Tensor.from([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 2.4999998, 8388609, -0.2]);
    expect(Array.from(x.round().toArray())).toEqual([0, 2, 2, -0, -2, -2, 4, 2, 8388609, -0]);
    expect(Object.is(x.round().toArray()[3], -0)).toBe(true);
    expect([0.5, 1.5, 2.5, -2.5].map(roundHalfEven)).toEqual([0, 2, 2, -2]);
    const i = Tensor.from([-3, 4], [2], { dtype: "int32" });
    for (const n of ["floor", "ceil", "trunc", "round"] as const) {
      expect(i[n]()).toBe(i);
      expect(i[n]().dtype).toBe("int32");
    }
  });
});

describe("libm functions and erf", () => {
  const cases: [string, number, number, readonly [number, number]][] = [
    ["exp2", -20, 20, LIBM],
    ["log2", 1e-3, 100, LIBM],
    ["tan", -1.5, 1.5, LIBM],
    ["atan", -50, 50, LIBM],
    ["asin", -1, 1, LIBM],
    ["acos", -1, 1, LIBM],
    ["sinh", -10, 10, LIBM],
    ["cosh", -10, 10, LIBM],
    ["asinh", -1000, 1000, LIBM],
    ["acosh", 1, 1000, LIBM],
    ["atanh", -1, 1, LIBM],
    ["erf", -5, 5, ERF],
  ];
  for (const [name, lo, hi, tol] of cases) {
    test(`${name} against float64 on [${lo}, ${hi}) and the edge values, on every layout, fused and not`, () => {
      const data = input(2, lo, hi, EDGES);
      checkLayouts(name, data, (t) => (t as unknown as Record<string, () => Tensor>)[name]!.call(t), refUnary[name]!, tol);
    });
  }

  test("erf: dense sweep of [-6, 6] against float64, odd, ±1 at ±inf, and int32 operands give float32", () => {
    const n = 24001;
    const xs = Float32Array.from({ length: n }, (_, i) => -6 + (12 * i) / (n - 1));
    const got = Tensor.from(xs).erf().toArray();
    let worst = 0;
    for (let i = 0; i < n; i++) worst = Math.max(worst, Math.abs(got[i]! - erf64(xs[i]!)));
    expect(worst).toBeLessThan(ERF[0]);
    for (let i = 0; i < n; i++) expect(got[i]! + got[n - 1 - i]!).toBe(0);
    expect(Array.from(Tensor.from([Infinity, -Infinity, NaN, 0]).erf().toArray())).toEqual([1, -1, NaN, 0]);
    const i = Tensor.from([-2, 0, 1], [3], { dtype: "int32" }).erf();
    expect(i.dtype).toBe("float32");
    expectClose(i.toArray(), [-2, 0, 1].map(erf64), ...ERF, "erf int32");
    // small arguments keep their relative accuracy (the series, not 1 - erfc)
    expectClose(Tensor.from([1e-6, -3e-4, 1e-20]).erf().toArray(), [1e-6, -3e-4, 1e-20].map(erf64), 0, 1e-6, "erf small");
  });

  test("the interpreter of the lowered IR agrees with the device on the new primitives", () => {
    const x = Tensor.from(input(3, -3, 3, EDGES), [4, 6]);
    const i = Tensor.arange(-12, 12).reshape([4, 6]);
    const outs = [x.erf(), x.round(), x.floor(), x.ceil(), x.trunc(), x.mod(0.75), x.fmod(-0.75), x.atan(), x.sinh(), i.mod(5), i.fmod(-5), i.mod(0), x.exp2()];
    const s = schedule(outs.map((t) => t.node));
    const arrays = interpretSchedule(s, new Map());
    const dev = run(outs);
    outs.forEach((t, k) => expectClose(dev[k]!, arrays.get(t.node)!, 1e-6, 4e-6, `output ${k}`, k >= 1 && k <= 6));
  });
});

describe("remainders", () => {
  const pyMod = (a: number, b: number): number => {
    const r = a % b;
    if (Number.isNaN(r)) return NaN;
    if (r === 0) return b < 0 ? -0 : 0;
    return (r < 0) !== (b < 0) ? Math.fround(r + b) : r;
  };
  const cMod = (a: number, b: number): number => a % b;

  test("float32 mod (divisor's sign) and fmod (dividend's sign) with broadcasting, exact, signed zeros", () => {
    const a = input(4, -20, 20, [-4, 7, 5, 4, -7, 8, -0, 0, 3, Infinity, NaN, 1e-8]);
    const b = Float32Array.from([2, -3, 8, -2, 3, 0.75]);
    const special = Float32Array.from([-0, 0, Infinity, -Infinity, NaN, -1]);
    for (const fusion of [true, false]) {
      const ta = Tensor.from(a, [4, 6]), tb = Tensor.from(b, [6]), ts = Tensor.from(special, [6, 1]);
      const outs = [ta.mod(tb), ta.fmod(tb), ta.mod(ts.reshape([1, 6])), ta.fmod(ts.reshape([1, 6])), ta.T.mod(2.5), ta.slice([[1, 3], [0, 6]]).mod(-1.5), Tensor.from(5.5, []).mod(tb), ts.mod(tb).sum(1)];
      const got = run(outs, { fusion });
      const ra = new Ref([4, 6], a), rb = new Ref([6], b), rs = new Ref([1, 6], special);
      const refs = [ra.zip(rb, pyMod), ra.zip(rb, cMod), ra.zip(rs, pyMod), ra.zip(rs, cMod), ra.permute([1, 0]).zip(2.5, pyMod), ra.shrink([[1, 3], [0, 6]]).zip(-1.5, pyMod), new Ref([], [5.5]).zip(rb, pyMod)];
      refs.forEach((r, k) => {
        expect(outs[k]!.shape).toEqual(r.shape);
        expectClose(got[k]!, r.data, ...EXACT, `mod/fmod ${k} fusion=${fusion}`, true);
      });
      expect(Array.from(got[7]!)).toEqual(Array.from(new Ref([6, 1], special).zip(rb, pyMod).sum([1]).data).map(Math.fround));
    }
    expect(Array.from(Tensor.from([-4, 7, 5, 4, -7, 8]).mod(Tensor.from([2, -3, 8, -2, 3, 5])).toArray())).toEqual([0, -2, 5, -0, 2, 3]);
    expect(Array.from(Tensor.from([-4, 7, 5, 4, -7, 8]).fmod(Tensor.from([2, -3, 8, -2, 3, 5])).toArray())).toEqual([-0, 1, 5, 0, -1, 3]);
  });

  test("int32 mod and fmod stay int32; x mod 0 and INT_MIN mod -1 give 0; mixed int/float promotes", () => {
    const MIN = -2147483648;
    const a = Tensor.from([-4, 7, 5, 4, -7, 8, MIN, MIN, 9, -9], [10], { dtype: "int32" });
    const b = Tensor.from([2, -3, 8, -2, 3, 0, -1, 3, -4, 4], [10], { dtype: "int32" });
    for (const fusion of [true, false]) {
      const [m, f, mf, ms] = run([a.mod(b), a.fmod(b), a.mod(b.float()), a.reshape([2, 5]).T.mod(-3)], { fusion });
      expect(m).toBeInstanceOf(Int32Array);
      expect(Array.from(m!)).toEqual([0, -2, 5, 0, 2, 0, 0, 1, -3, 3]);
      expect(Array.from(f!)).toEqual([0, 1, 5, 0, -1, 0, 0, -2, 1, -1]);
      expect(mf).toBeInstanceOf(Float32Array);
      expect(Array.from(mf!).slice(0, 5)).toEqual([0, -2, 5, -0, 2]);
      expect(Number.isNaN(mf![5]!)).toBe(true);
      const t = [[-4, 8], [7, MIN], [5, MIN], [4, 9], [-7, -9]].flat().map((v) => pyMod(v, -3));
      expect(Array.from(ms!)).toEqual(t.map((v) => v | 0));
    }
    expect(a.mod(3).dtype).toBe("int32");
    expect(a.mod(2.5).dtype).toBe("float32");
  });
});

describe("NaN and infinity tests, sign, clip", () => {
  const data = input(5, -3, 3, EDGES);

  test("isnan, isinf (each side), isfinite give bool 0/1 on every layout; int32 operands are never NaN or inf", () => {
    checkLayouts("isnan", data, (t) => t.isnan(), (x) => +Number.isNaN(x), EXACT);
    checkLayouts("isinf", data, (t) => t.isinf(), (x) => +(Math.abs(x) === Infinity), EXACT);
    checkLayouts("isinf+", data, (t) => t.isinf(true, false), (x) => +(x === Infinity), EXACT);
    checkLayouts("isinf-", data, (t) => t.isinf(false, true), (x) => +(x === -Infinity), EXACT);
    checkLayouts("isinf none", data, (t) => t.isinf(false, false), () => 0, EXACT);
    checkLayouts("isfinite", data, (t) => t.isfinite(), (x) => +Number.isFinite(x), EXACT);
    const x = Tensor.from(data);
    for (const t of [x.isnan(), x.isinf(), x.isfinite()]) expect(t.dtype).toBe("bool");
    const i = Tensor.from([-2147483648, 0, 2147483647], [3], { dtype: "int32" });
    expect(run([i.isnan(), i.isinf(), i.isfinite()]).map((a) => Array.from(a))).toEqual([[0, 0, 0], [0, 0, 0], [1, 1, 1]]);
    expect(() => x.isinf("yes" as unknown as boolean)).toThrow(GpuError);
  });

  test("sign: -1/0/1 in the operand's dtype, NaN stays NaN, -0 gives 0", () => {
    checkLayouts("sign", data, (t) => t.sign(), (x) => (Number.isNaN(x) ? NaN : x > 0 ? 1 : x < 0 ? -1 : 0), EXACT, true);
    const i = Tensor.from([-5, 0, 9, -2147483648], [4], { dtype: "int32" }).sign();
    expect(i.dtype).toBe("int32");
    expect(Array.from(i.toArray())).toEqual([-1, 0, 1, -1]);
  });

  test("clip/clamp: scalar and broadcast tensor bounds, one-sided, NaN kept, int32 kept with int bounds", () => {
    const lo = Float32Array.from([-1, -0.5, 0, -2, -3, 0.25]);
    checkLayouts("clip", data, (t) => t.clip(-1, 1.5), (x) => (Number.isNaN(x) ? NaN : Math.min(Math.max(x, -1), 1.5)), EXACT);
    checkLayouts("clip lo", data, (t) => t.clip(0.5), (x) => (x < 0.5 ? 0.5 : x), EXACT);
    checkLayouts("clamp hi", data, (t) => t.clamp(undefined, -0.25), (x) => (x > -0.25 ? -0.25 : x), EXACT);
    const x = Tensor.from(data, [4, 6]);
    const got = x.clip(Tensor.from(lo, [6]), 1).toArray();
    expectClose(got, Array.from(data, (v, k) => (Number.isNaN(v) ? NaN : Math.min(Math.max(v, lo[k % 6]!), 1))), ...EXACT, "clip tensor bound");
    const i = Tensor.from([-7, 0, 3, 9], [4], { dtype: "int32" }).clip(-2, 4);
    expect(i.dtype).toBe("int32");
    expect(Array.from(i.toArray())).toEqual([-2, 0, 3, 4]);
    expect(() => x.clip()).toThrow(GpuError);
    expect(() => x.clip("1" as unknown as number)).toThrow(GpuError);
  });
});

describe("activations and lerp", () => {
  const data = input(6, -6, 6, [NaN, Infinity, -0, 0, 1e-7, -1e-7, 20, -20, 3, -3]);
  const sig = (x: number) => 1 / (1 + Math.exp(-x));
  const softplus = (x: number, beta = 1) => (Math.max(beta * x, 0) + Math.log1p(Math.exp(-Math.abs(beta * x)))) / beta;
  const gelu = (x: number) => 0.5 * x * (1 + erf64(x / Math.SQRT2));
  const cases: [string, (t: Tensor) => Tensor, (x: number) => number][] = [
    ["gelu none", (t) => t.gelu("none"), gelu],
    ["gelu tanh", (t) => t.gelu("tanh"), refUnary.gelu!],
    ["silu", (t) => t.silu(), (x) => x * sig(x)],
    ["swish", (t) => t.swish(), (x) => x * sig(x)],
    ["softplus", (t) => t.softplus(), (x) => softplus(x)],
    ["softplus beta 2.5", (t) => t.softplus(2.5), (x) => softplus(x, 2.5)],
    ["leakyRelu", (t) => t.leakyRelu(), (x) => (x < 0 ? 0.01 * x : x)],
    ["leakyRelu 0.2", (t) => t.leakyRelu(0.2), (x) => (x < 0 ? 0.2 * x : x)],
    ["elu", (t) => t.elu(), (x) => (x > 0 ? x : Math.expm1(x))],
    ["elu 0.5", (t) => t.elu(0.5), (x) => (x > 0 ? x : 0.5 * Math.expm1(x))],
    ["hardswish", (t) => t.hardswish(), (x) => (x * Math.min(Math.max(x + 3, 0), 6)) / 6],
    ["mish", (t) => t.mish(), (x) => x * Math.tanh(softplus(x))],
    ["relu6", (t) => t.relu6(), (x) => (Number.isNaN(x) ? 0 : Math.min(Math.max(x, 0), 6))],
    ["hardsigmoid", (t) => t.hardsigmoid(), (x) => Math.min(Math.max(x / 6 + 0.5, 0), 1)],
    ["hardsigmoid 0.2 0.3", (t) => t.hardsigmoid(0.2, 0.3), (x) => Math.min(Math.max(0.2 * x + 0.3, 0), 1)],
    ["hardtanh", (t) => t.hardtanh(), (x) => Math.min(Math.max(x, -1), 1)],
    ["hardtanh -2 0.5", (t) => t.hardtanh(-2, 0.5), (x) => Math.min(Math.max(x, -2), 0.5)],
    ["softsign", (t) => t.softsign(), (x) => x / (1 + Math.abs(x))],
    ["logsigmoid", (t) => t.logsigmoid(), (x) => -softplus(-x)],
    ["quickGelu", (t) => t.quickGelu(), (x) => x * sig(1.702 * x)],
    ["celu", (t) => t.celu(), (x) => (x > 0 ? x : Math.expm1(x))],
    ["celu 2", (t) => t.celu(2), (x) => (x > 0 ? x : 2 * Math.expm1(x / 2))],
    ["selu", (t) => t.selu(), (x) => 1.0507 * (x >= 0 ? x : 1.67326 * Math.expm1(x))],
  ];
  for (const [name, f, g] of cases) {
    test(`${name} against float64 on every layout, fused and not`, () => {
      checkLayouts(name, data, f, g, COMPOSITE);
    });
  }

  test("exact GELU differs from the tanh form by up to ~5e-4; bad options are GpuError", () => {
    const xs = Float32Array.from({ length: 81 }, (_, i) => -4 + i / 10);
    const t = Tensor.from(xs);
    const [exact, approx] = run([t.gelu("none"), t.gelu()]);
    let diff = 0;
    for (let i = 0; i < xs.length; i++) diff = Math.max(diff, Math.abs(exact![i]! - approx![i]!));
    expect(diff).toBeGreaterThan(1e-4);
    expect(diff).toBeLessThan(1e-3);
    expectClose(exact!, Array.from(xs, gelu), ...COMPOSITE, "gelu exact");
    expect(() => t.gelu("erf" as "none")).toThrow(GpuError);
    expect(() => t.softplus(NaN)).toThrow(GpuError);
    expect(() => t.elu("1" as unknown as number)).toThrow(GpuError);
    expect(() => t.leakyRelu(Infinity)).toThrow(GpuError);
    expect(t.gelu().dtype).toBe("float32");
    expect(Tensor.from([-1, 2], [2], { dtype: "int32" }).silu().dtype).toBe("float32");
  });

  test("lerp with a scalar and a broadcast weight tensor, int32 operands promote", () => {
    const a = Float32Array.from(randF32(24, 7, -2, 2)), b = Float32Array.from(randF32(24, 8, -2, 2)), w = Float32Array.from([0, 0.25, 1, -0.5, 2, 0.5]);
    for (const fusion of [true, false]) {
      const ta = Tensor.from(a, [4, 6]), tb = Tensor.from(b, [6, 4]).T;
      const rb = new Ref([6, 4], b).permute([1, 0]).data;
      const [s, v] = run([ta.lerp(tb, 0.3), ta.lerp(tb, Tensor.from(w, [6]))], { fusion });
      expectClose(s!, Array.from(a, (x, k) => x + (rb[k]! - x) * Math.fround(0.3)), ...COMPOSITE, "lerp scalar");
      expectClose(v!, Array.from(a, (x, k) => x + (rb[k]! - x) * w[k % 6]!), ...COMPOSITE, "lerp tensor");
    }
    const i = Tensor.from([0, 10], [2], { dtype: "int32" }).lerp(Tensor.from([10, 20], [2], { dtype: "int32" }), 0.5);
    expect(i.dtype).toBe("float32");
    expect(Array.from(i.toArray())).toEqual([5, 15]);
    expect(() => Tensor.from([1]).lerp("x" as unknown as number, 1)).toThrow(GpuError);
  });

  test("each new op fuses into one kernel with its neighbours", () => {
    const x = Tensor.from(data, [4, 6]);
    const y = x.erf().add(x.mod(2)).mul(x.round()).add(x.clip(-1, 1)).add(x.mish()).add(x.isnan()).add(x.atan().sinh());
    expect(schedule([y.node]).kernels.length).toBe(1);
    expect(schedule([y.node], { fusion: false }).kernels.length).toBeGreaterThan(10);
  });
});
