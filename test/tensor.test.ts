// Tensor ops against a float64 TypeScript reference (src/tensor/reference.ts), on random inputs,
// with broadcasting and non-contiguous views; fused vs unfused plans; kernel counts of
// hand-checked programs; shape errors.
//
// Tolerances: results are float32 computed in a different order than the float64 reference.
//  - elementwise: |got - want| <= 2e-6 + 2e-6·|want| (a few ulps; transcendental functions of
//    libm / CUDA are within 2 ulps)
//  - reductions and composites: 1e-5 + 1e-5·|want|·(1 + log2 n) (summation order differs)
//  - randn: 1e-5 (float32 log/cos vs the TS mirror of the same computation)
import { describe, expect, test } from "bun:test";
import { GpuError, Status } from "../src";
import { Ref, refUnary, seededRandom } from "../src/tensor/reference";
import { Tensor, Variable, schedule, interpretSchedule, type PrepareOptions } from "../src/tensor";
import { randNormal, randUniform, seedMix } from "../src/tensor/ir";
import { run, toTensor } from "./tensor_helpers";

function randRef(shape: number[], seed: number, lo = -1, hi = 1): Ref {
  const r = seededRandom(seed);
  return Ref.fill(shape, () => Math.fround(lo + (hi - lo) * r()));
}

function expectClose(got: ArrayLike<number>, want: Ref | ArrayLike<number>, atol: number, rtol: number, what = ""): void {
  const w = want instanceof Ref ? want.data : want;
  if (got.length !== w.length) throw new Error(`${what}: length ${got.length}, want ${w.length}`);
  for (let i = 0; i < got.length; i++) {
    const a = got[i]!, b = w[i]!;
    if (Number.isNaN(b) && Number.isNaN(a)) continue;
    if (a === b) continue;
    if (!(Math.abs(a - b) <= atol + rtol * Math.abs(b))) throw new Error(`${what}: element ${i}: got ${a}, want ${b}`);
  }
}

function kernelCount(t: Tensor | Tensor[], fusion = true): number {
  return schedule((Array.isArray(t) ? t : [t]).map((x) => x.node), { fusion }).kernels.length;
}

const EW = [2e-6, 2e-6] as const;
const RED = [1e-5, 1e-4] as const;

describe("elementwise ops", () => {
  test("unary ops on contiguous and transposed inputs", () => {
    const pos = new Set(["log", "sqrt", "recip"]);
    const names = Object.keys(refUnary);
    const xr = randRef([5, 7], 1, -2, 2);
    const pr = randRef([5, 7], 2, 0.1, 3);
    const x = toTensor(xr), p = toTensor(pr);
    const outs: Tensor[] = [];
    const refs: Ref[] = [];
    for (const n of names) {
      const src = pos.has(n) ? p : x, sr = pos.has(n) ? pr : xr;
      const f = (t: Tensor) => (t as unknown as Record<string, () => Tensor>)[n]!.call(t);
      outs.push(f(src), f(src.T));
      refs.push(sr.map(refUnary[n]!), sr.permute([1, 0]).map(refUnary[n]!));
    }
    const got = run(outs);
    got.forEach((g, i) => expectClose(g, refs[i]!, ...EW, `${names[i >> 1]}${i & 1 ? " (transposed)" : ""}`));
  });

  test("binary ops with numpy broadcasting", () => {
    const cases: [number[], number[]][] = [
      [[4, 1, 5], [3, 1]],
      [[2, 3], [3]],
      [[1], [4, 4]],
      [[3, 4], []],
      [[2, 1, 3], [2, 4, 1]],
    ];
    const ops: [string, (a: Tensor, b: Tensor) => Tensor, (a: number, b: number) => number][] = [
      ["add", (a, b) => a.add(b), (a, b) => a + b],
      ["sub", (a, b) => a.sub(b), (a, b) => a - b],
      ["mul", (a, b) => a.mul(b), (a, b) => a * b],
      ["div", (a, b) => a.div(b), (a, b) => a / b],
      ["maximum", (a, b) => a.maximum(b), Math.max],
      ["minimum", (a, b) => a.minimum(b), Math.min],
      ["pow", (a, b) => a.abs().add(0.5).pow(b), (a, b) => Math.pow(Math.abs(a) + 0.5, b)],
      ["cmplt", (a, b) => a.cmplt(b), (a, b) => +(a < b)],
      ["cmple", (a, b) => a.cmple(b), (a, b) => +(a <= b)],
      ["cmpgt", (a, b) => a.cmpgt(b), (a, b) => +(a > b)],
      ["cmpge", (a, b) => a.cmpge(b), (a, b) => +(a >= b)],
      ["cmpeq", (a, b) => a.cmpeq(b), (a, b) => +(a === b)],
      ["cmpne", (a, b) => a.cmpne(b), (a, b) => +(a !== b)],
    ];
    const outs: Tensor[] = [];
    const refs: Ref[] = [];
    const labels: string[] = [];
    cases.forEach(([sa, sb], ci) => {
      const ar = randRef(sa, 10 + ci), br = randRef(sb, 20 + ci).map((v) => (Math.abs(v) < 0.05 ? 0.5 : v));
      // equal values for the equality comparisons
      const a = toTensor(ar), b = toTensor(br);
      for (const [n, f, g] of ops) {
        outs.push(f(a, b));
        refs.push(ar.zip(br, g));
        labels.push(`${n} [${sa}]x[${sb}]`);
      }
    });
    const got = run(outs);
    got.forEach((g, i) => {
      expect(outs[i]!.shape).toEqual(refs[i]!.shape);
      expectClose(g, refs[i]!, 1e-5, 1e-5, labels[i]);
    });
    expect(outs.find((t) => labels[outs.indexOf(t)]!.startsWith("cmplt"))!.dtype).toBe("bool");
  });

  test("scalars, reversed scalar ops, where, cast", () => {
    const xr = randRef([3, 4], 5, -3, 3);
    const x = toTensor(xr);
    const c = x.cmpgt(0);
    const outs = [x.add(2), x.mul(-1.5), x.rsub(1), x.rdiv(2), c.where(x, x.neg()), Tensor.where(x.cmplt(-1), 7, x), x.cast("int32"), c.cast("float32").mul(x), x.square()];
    const refs = [
      xr.map((v) => v + 2),
      xr.map((v) => v * -1.5),
      xr.map((v) => 1 - v),
      xr.map((v) => 2 / v),
      xr.map(Math.abs),
      xr.map((v) => (v < -1 ? 7 : v)),
      xr.map(Math.trunc),
      xr.map((v) => (v > 0 ? v : 0)),
      xr.map((v) => v * v),
    ];
    const got = run(outs);
    got.forEach((g, i) => expectClose(g, refs[i]!, ...EW, `case ${i}`));
    expect(outs[6]!.dtype).toBe("int32");
    expect(got[6]).toBeInstanceOf(Int32Array);
  });

  test("int32 arithmetic: wrapping, truncating division, division by zero gives 0", () => {
    const a = Tensor.from(new Int32Array([7, -7, 7, -7, 5, 2147483647, -2147483648, 3]), [8]);
    const b = Tensor.from(new Int32Array([2, 2, -2, -2, 0, 1, -1, 4]), [8]);
    const [q, s, m, p, mx] = run([a.div(b), a.add(b), a.mul(b), b.pow(Tensor.from(new Int32Array([3, 2, 1, 0, 2, 5, 3, -1]), [8])), a.maximum(b)]);
    expect([...q!]).toEqual([3, -3, -3, 3, 0, 2147483647, -2147483648, 0]);
    expect([...s!]).toEqual([9, -5, 5, -9, 5, -2147483648, 2147483647, 7]);
    expect([...m!]).toEqual([14, -14, -14, 14, 0, 2147483647, -2147483648, 12]);
    expect([...p!]).toEqual([8, 4, -2, 1, 0, 1, -1, 0]);
    expect([...mx!]).toEqual([7, 2, 7, -2, 5, 2147483647, -1, 4]);
    expect(a.add(1.5).dtype).toBe("float32");
    expect(a.add(b).dtype).toBe("int32");
  });

  test("shape errors throw GpuError naming both shapes", () => {
    const a = Tensor.zeros([2, 3]), b = Tensor.zeros([4]);
    for (const f of [() => a.add(b), () => a.matmul(Tensor.zeros([4, 2])), () => a.where(b, 0)]) {
      let err: unknown;
      try {
        f();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(GpuError);
      expect((err as GpuError).code).toBe(Status.INVALID_VALUE);
      expect((err as GpuError).message).toContain("[2, 3]");
      expect((err as GpuError).message).toMatch(/\[4\]|\[4, 2\]/);
    }
    expect(() => a.reshape([4, 2])).toThrow(GpuError);
    expect(() => a.reshape([7])).toThrow(/\[2, 3\].*\[7\]/);
    expect(() => a.permute([0, 0])).toThrow(GpuError);
    expect(() => a.expand([2, 4])).toThrow(GpuError);
    expect(() => a.shrink([[0, 3], [0, 1]])).toThrow(GpuError);
    expect(() => a.sum(2)).toThrow(GpuError);
    expect(() => Tensor.from(new Float32Array(5), [2, 3])).toThrow(GpuError);
  });
});

describe("movement ops are views", () => {
  test("reshape permute transpose expand shrink slice pad flip, alone and chained", () => {
    const xr = randRef([4, 6], 30);
    const x = toTensor(xr);
    const yr = randRef([2, 3, 4], 31);
    const y = toTensor(yr);
    const cases: [string, Tensor, Ref][] = [
      ["reshape", x.reshape([2, 12]), xr.reshape([2, 12])],
      ["reshape -1", x.reshape([3, -1, 2]), xr.reshape([3, 4, 2])],
      ["permute", y.permute([2, 0, 1]), yr.permute([2, 0, 1])],
      ["transpose", y.transpose(0, 2), yr.permute([2, 1, 0])],
      ["T", x.T, xr.permute([1, 0])],
      ["expand", x.reshape([4, 1, 6]).expand([4, 3, 6]), xr.reshape([4, 1, 6]).broadcastTo([4, 3, 6])],
      ["shrink", x.shrink([[1, 3], [2, 6]]), xr.shrink([[1, 3], [2, 6]])],
      ["slice", x.slice([[-3], [1, -1]]), xr.shrink([[1, 4], [1, 5]])],
      ["pad", x.pad([[1, 2], [0, 3]]), xr.pad([[1, 2], [0, 3]])],
      ["pad value", x.pad([[2, 0], [1, 1]], -5), xr.pad([[2, 0], [1, 1]], -5)],
      ["flip", x.flip([0, 1]), xr.flip([0, 1])],
      ["flip 1", y.flip(1), yr.flip([1])],
      // chains that cannot stay on one view (a new view is stacked)
      ["permute+reshape", x.T.reshape([3, 8]), xr.permute([1, 0]).reshape([3, 8])],
      ["pad+reshape", x.pad([[1, 1], [0, 0]]).reshape([3, 12]), xr.pad([[1, 1], [0, 0]]).reshape([3, 12])],
      ["flip+shrink+permute", y.flip([0, 2]).shrink([[0, 2], [1, 3], [1, 4]]).permute([1, 2, 0]), yr.flip([0, 2]).shrink([[0, 2], [1, 3], [1, 4]]).permute([1, 2, 0])],
      ["shrink+pad+flip", x.shrink([[1, 4], [0, 5]]).pad([[2, 1], [1, 0]]).flip(0), xr.shrink([[1, 4], [0, 5]]).pad([[2, 1], [1, 0]]).flip([0])],
      ["reshape of permuted 3d", y.permute([1, 0, 2]).reshape([6, 4]).T, yr.permute([1, 0, 2]).reshape([6, 4]).permute([1, 0])],
      // views of computed (fused) values
      ["exp then permute+reshape", x.exp().T.reshape([2, 12]), xr.map(Math.exp).permute([1, 0]).reshape([2, 12])],
      ["pad of computed", x.mul(3).pad([[1, 0], [2, 2]]).add(1), xr.map((v) => 3 * v).pad([[1, 0], [2, 2]]).map((v) => v + 1)],
      ["unsqueeze/squeeze", x.unsqueeze(1).squeeze(1).flatten(), xr.reshape([24])],
    ];
    const got = run(cases.map((c) => c[1]));
    got.forEach((g, i) => {
      expect(cases[i]![1].shape).toEqual(cases[i]![2].shape);
      expectClose(g, cases[i]![2], ...EW, cases[i]![0]);
    });
  });

  test("movement ops alone schedule no copies; a view only costs a kernel at an output", () => {
    const x = Tensor.from(new Float32Array(24), [4, 6]);
    const v = x.T.reshape([3, 8]).pad([[1, 1], [0, 0]]).flip(0);
    expect(kernelCount(v.exp())).toBe(1); // the view is index arithmetic inside the one kernel
    expect(kernelCount(v.exp().add(1).T)).toBe(1);
    expect(kernelCount(x.reshape([24]))).toBe(1); // an output must be its own buffer
  });
});

describe("reductions", () => {
  test("sum max mean over axes with keepdim, on contiguous and transposed inputs", () => {
    const xr = randRef([3, 5, 7], 40, -2, 2);
    const x = toTensor(xr);
    const xt = x.permute([2, 0, 1]);
    const xtr = xr.permute([2, 0, 1]);
    const cases: [string, Tensor, Ref][] = [];
    const axesList: number[][] = [[0], [1], [2], [0, 2], [1, 2], [0, 1, 2]];
    for (const axes of axesList)
      for (const keep of [false, true]) {
        cases.push([`sum ${axes} ${keep}`, x.sum(axes, keep), xr.sum(axes, keep)]);
        cases.push([`max ${axes} ${keep}`, x.max(axes, keep), xr.max(axes, keep)]);
        cases.push([`mean ${axes} ${keep}`, x.mean(axes, keep), xr.mean(axes, keep)]);
        cases.push([`sum T ${axes} ${keep}`, xt.sum(axes, keep), xtr.sum(axes, keep)]);
      }
    cases.push(["sum all", x.sum(), xr.sum([0, 1, 2])]);
    cases.push(["min", x.min(1), xr.map((v) => -v).max([1]).map((v) => -v)]);
    cases.push(["sum of expr", x.mul(x).add(1).sum(-1), xr.map((v) => v * v + 1).sum([2])]);
    cases.push(["epilogue", x.sum(1).sqrt().mul(2), xr.sum([1]).map((v) => 2 * Math.sqrt(Math.abs(v)) * (v < 0 ? NaN : 1))]);
    cases.push(["sum of padded", x.pad([[1, 1], [0, 0], [2, 0]]).sum(2), xr.pad([[1, 1], [0, 0], [2, 0]]).sum([2])]);
    cases.push(["sum over flipped", x.flip(2).sum(2), xr.sum([2])]);
    const got = run(cases.map((c) => c[1]));
    got.forEach((g, i) => {
      expect(cases[i]![1].shape).toEqual(cases[i]![2].shape);
      expectClose(g, cases[i]![2], ...RED, cases[i]![0]);
    });
  });

  test("wide reductions (vector tiles): column sums, max, sums of products, through pads and flips", () => {
    const xr = randRef([40, 50], 42, -3, 3), yr = randRef([40, 50], 43);
    const x = toTensor(xr), y = toTensor(yr);
    const cases: [string, Tensor, Ref][] = [
      ["sum 0", x.sum(0), xr.sum([0])],
      ["max 0", x.max(0), xr.max([0])],
      ["min 0", x.min(0), xr.map((v) => -v).max([0]).map((v) => -v)],
      ["sum x*y - y", x.mul(y).sub(y).sum(0), xr.zip(yr, (a, b) => a * b - b).sum([0])],
      ["max(x, y)/2 sum", x.maximum(y).div(2).sum(0), xr.zip(yr, (a, b) => Math.max(a, b) / 2).sum([0])],
      ["mean 0 of pad", x.pad([[3, 0], [0, 14]]).mean(0), xr.pad([[3, 0], [0, 14]]).mean([0])],
      ["sum 0 flipped cols", x.flip(1).sum(0), xr.flip([1]).sum([0])],
      ["sum 0 of exp (scalar path)", x.exp().sum(0), xr.map(Math.exp).sum([0])],
      ["max 0 of int", x.mul(10).int().max(0), xr.map((v) => Math.trunc(v * 10)).max([0])],
    ];
    const got = run(cases.map((c) => c[1]));
    got.forEach((g, i) => expectClose(g, cases[i]![2], ...RED, cases[i]![0]));
  });

  test("large reductions (lanes over the inner axis, merged axes) and int32 sums", () => {
    const xr = randRef([3, 1000], 41);
    const x = toTensor(xr);
    const ir = Ref.fill([37, 50], (_, i) => (i % 13) - 6);
    const xi = toTensor(ir, "int32");
    const got = run([x.sum(1), x.max(1), x.sum(), x.reshape([3, 10, 100]).sum([1, 2]), xi.sum(0), xi.max(1)]);
    expectClose(got[0]!, xr.sum([1]), ...RED, "row sums");
    expectClose(got[1]!, xr.max([1]), ...RED, "row max");
    expectClose(got[2]!, xr.sum([0, 1]), ...RED, "all");
    expectClose(got[3]!, xr.sum([1]), ...RED, "merged");
    expect([...got[4]!]).toEqual([...ir.sum([0]).data]);
    expect([...got[5]!]).toEqual([...ir.max([1]).data]);
    expect(got[4]).toBeInstanceOf(Int32Array);
  });
});

describe("matmul and composites", () => {
  test("matmul: odd sizes, tile remainders, transposed operands, batches, 1-D", () => {
    const cases: [string, Tensor, Ref][] = [];
    for (const [M, K, N] of [[7, 13, 5], [33, 40, 17], [1, 64, 70], [64, 1, 3]] as const) {
      const ar = randRef([M, K], M * 100 + K), br = randRef([K, N], N * 7 + 3);
      cases.push([`${M}x${K}x${N}`, toTensor(ar).matmul(toTensor(br)), ar.matmul(br)]);
      cases.push([`${M}x${K}x${N} (B^T view)`, toTensor(ar).matmul(toTensor(br.permute([1, 0])).T), ar.matmul(br)]);
    }
    const ar = randRef([2, 3, 5, 6], 1), br = randRef([3, 6, 4], 2);
    const bt = toTensor(ar).matmul(toTensor(br));
    const bref = Ref.fill([2, 3, 5, 4], ([b, h, i, j]) => {
      let s = 0;
      for (let k = 0; k < 6; k++) s += ar.at([b!, h!, i!, k]) * br.at([h!, k, j!]);
      return s;
    });
    cases.push(["batched broadcast", bt, bref]);
    const v = randRef([6], 3), m = randRef([6, 4], 4);
    cases.push(["vec@mat", toTensor(v).matmul(toTensor(m)), v.reshape([1, 6]).matmul(m).reshape([4])]);
    cases.push(["mat@vec", toTensor(m.permute([1, 0])).matmul(toTensor(v)), m.permute([1, 0]).matmul(v.reshape([6, 1])).reshape([4])]);
    const got = run(cases.map((c) => c[1]));
    got.forEach((g, i) => {
      expect(cases[i]![1].shape).toEqual(cases[i]![2].shape);
      expectClose(g, cases[i]![2], ...RED, cases[i]![0]);
    });
  });

  test("matmul of a 128x96 by 96x80 product with bias and relu is one kernel and right", () => {
    const ar = randRef([128, 96], 5), br = randRef([96, 80], 6), cr = randRef([80], 7);
    const y = toTensor(ar).matmul(toTensor(br)).add(toTensor(cr)).relu();
    expect(kernelCount(y)).toBe(1);
    const [g] = run([y]);
    expectClose(g!, ar.matmul(br).zip(cr, (a, b) => Math.max(a + b, 0)), ...RED, "mlp layer");
  });

  test("softmax, logSoftmax, layerNorm on several axes", () => {
    const xr = randRef([4, 5, 9], 50, -4, 4);
    const x = toTensor(xr);
    const wr = randRef([9], 51), br = randRef([9], 52);
    const cases: [string, Tensor, Ref][] = [
      ["softmax -1", x.softmax(-1), xr.softmax(2)],
      ["softmax 1", x.softmax(1), xr.softmax(1)],
      ["softmax 0 (transposed)", x.T.softmax(0), xr.permute([2, 1, 0]).softmax(0)],
      ["logSoftmax", x.logSoftmax(-1), xr.logSoftmax(2)],
      ["layerNorm", x.layerNorm(), xr.layerNorm(2, 1e-5)],
      ["layerNorm affine", x.layerNorm({ weight: toTensor(wr), bias: toTensor(br) }), xr.layerNorm(2, 1e-5).zip(wr, (a, b) => a * b).zip(br, (a, b) => a + b)],
    ];
    const got = run(cases.map((c) => c[1]));
    got.forEach((g, i) => expectClose(g, cases[i]![2], ...RED, cases[i]![0]));
  });
});

describe("creation", () => {
  test("zeros ones full arange", () => {
    const got = run([Tensor.zeros([2, 3]), Tensor.ones([4], { dtype: "int32" }), Tensor.full([2, 2], 3.5), Tensor.arange(5), Tensor.arange(1, 2, 0.25), Tensor.arange(10, 0, -3), Tensor.arange(6).reshape([2, 3]).T.add(1)]);
    expect([...got[0]!]).toEqual([0, 0, 0, 0, 0, 0]);
    expect([...got[1]!]).toEqual([1, 1, 1, 1]);
    expect(got[1]).toBeInstanceOf(Int32Array);
    expect([...got[2]!]).toEqual([3.5, 3.5, 3.5, 3.5]);
    expect([...got[3]!]).toEqual([0, 1, 2, 3, 4]);
    expect([...got[4]!]).toEqual([1, 1.25, 1.5, 1.75]);
    expect([...got[5]!]).toEqual([10, 7, 4, 1]);
    expect([...got[6]!]).toEqual([1, 4, 2, 5, 3, 6]);
  });

  test("rand/randn: counter-based, seeded, identical across fusion and equal to the TS mirror", () => {
    const r = Tensor.rand([64, 32], { seed: 42 });
    const n = Tensor.randn([64, 32], { seed: 7 });
    const [a, b, c] = run([r, n, r.mul(2).sum(1)]);
    const mix = seedMix(42), mixn = seedMix(7);
    for (let i = 0; i < a!.length; i++) expect(a![i]).toBe(randUniform(mix, i));
    expectClose(b!, Array.from({ length: b!.length }, (_, i) => randNormal(mixn, i)), 1e-5, 1e-5, "randn");
    const sumOf = (x: ArrayLike<number>, f: (v: number) => number = (v) => v) => Array.from(x).reduce((p, q) => p + f(q), 0);
    const mean = sumOf(a!) / a!.length;
    expect(Math.abs(mean - 0.5)).toBeLessThan(0.03);
    const nm = sumOf(b!) / b!.length;
    const nv = sumOf(b!, (q) => (q - nm) ** 2) / b!.length;
    expect(Math.abs(nm)).toBeLessThan(0.06);
    expect(Math.abs(nv - 1)).toBeLessThan(0.1);
    const [again] = run([Tensor.rand([64, 32], { seed: 42 })], { fusion: false });
    expect([...again!]).toEqual([...a!]);
    const rowSums = Ref.fill([64], ([i]) => {
      let s = 0;
      for (let j = 0; j < 32; j++) s += 2 * a![i! * 32 + j]!;
      return s;
    });
    expectClose(c!, rowSums, ...RED, "fused rand");
    expect([...run([Tensor.rand([8], { seed: 1 })])[0]!]).not.toEqual([...run([Tensor.rand([8], { seed: 2 })])[0]!]);
  });
});

describe("scheduler", () => {
  const x = Tensor.from(new Float32Array(64).map((_, i) => Math.sin(i)), [8, 8]);

  test("kernel counts of hand-checked programs", () => {
    let chain = x;
    const fns: ((t: Tensor) => Tensor)[] = [(t) => t.add(1), (t) => t.mul(0.5), (t) => t.exp(), (t) => t.sub(x), (t) => t.tanh(), (t) => t.abs(), (t) => t.sqrt(), (t) => t.maximum(0.1), (t) => t.div(3), (t) => t.sigmoid()];
    for (const f of fns) chain = f(chain);
    expect(kernelCount(chain)).toBe(1); // ten elementwise ops: one kernel
    expect(kernelCount(chain, false)).toBe(10); // one per op without fusion
    expect(kernelCount(x.softmax())).toBe(3); // max, sum(exp(x - max)), exp(x - max) / sum
    expect(kernelCount(x.logSoftmax())).toBe(3);
    expect(kernelCount(x.layerNorm())).toBe(3); // mean, variance, normalize
    expect(kernelCount(x.sum(1))).toBe(1);
    expect(kernelCount(x.mean(1).sqrt().add(1))).toBe(1); // producers and epilogue fused into the reduction
    expect(kernelCount(x.exp().sum(0).mul(x.sum(0)))).toBe(2); // one reduction per kernel
    const s = x.sum(1, true);
    expect(kernelCount(x.sub(s))).toBe(2); // a broadcast reduction is realized
    expect(kernelCount([s.add(1), s.mul(2)])).toBe(3); // a reduction used twice is realized
    expect(kernelCount(x.matmul(x).relu())).toBe(1);
    expect(kernelCount(x.matmul(x).matmul(x))).toBe(2);
    expect(kernelCount(x.exp().contiguous().add(1))).toBe(2);
    // an expensive value broadcast into a reduction is computed once (rule 6) ...
    expect(kernelCount(x.exp().matmul(x))).toBe(2);
    expect(kernelCount(x.mul(2).matmul(x))).toBe(1); // ... a cheap one stays fused
    expect(kernelCount(x.slice([[0, 1]]).exp().add(x))).toBe(1); // broadcast into elementwise work: fused
  });

  test("fused and unfused plans agree on a mixed program", () => {
    const ar = randRef([16, 24], 60), wr = randRef([24, 12], 61), br = randRef([12], 62);
    const build = () => {
      const a = toTensor(ar), w = toTensor(wr), b = toTensor(br);
      const h = a.matmul(w).add(b).gelu();
      const n = h.layerNorm();
      const p = n.softmax(-1).mul(h.T.flip(0).T).pad([[1, 1], [0, 0]]);
      return [p.sum(0), h.max(1, true).sub(h.mean(1, true)).exp(), p.reshape([18 * 12]).shrink([[5, 200]])];
    };
    const fused = run(build());
    const unfused = run(build(), { fusion: false });
    fused.forEach((f, i) => expectClose(f, unfused[i]!, 1e-5, 1e-5, `output ${i}`));
    expect(kernelCount(build(), false)).toBeGreaterThan(kernelCount(build(), true));
  });

  test("the interpreter of the lowered IR agrees with the device", () => {
    const ar = randRef([6, 10], 70);
    const a = toTensor(ar);
    const outs = [a.softmax(-1), a.T.matmul(a).sqrt(), a.pad([[1, 2], [3, 0]]).flip(1).sum(0), Tensor.rand([5, 3], { seed: 3 }).add(a.shrink([[0, 5], [0, 3]]))];
    const s = schedule(outs.map((t) => t.node));
    const arrays = interpretSchedule(s, new Map());
    const dev = run(outs);
    outs.forEach((t, i) => expectClose(dev[i]!, arrays.get(t.node)!, 1e-5, 1e-5, `output ${i}`));
  });

  test("variables are kernel arguments: the lowered kernel names them", () => {
    const S = new Variable("S", 1, 32).bind(4);
    const x2 = Tensor.from(new Float32Array(32 * 8), [32, 8]).shrink([[0, S], null]);
    const s = schedule([x2.exp().sum(0).node]);
    expect(s.kernels[0]!.ir.vars).toEqual(["S"]);
    expect(() => new Variable("S", 5, 2)).toThrow(GpuError);
    expect(() => S.bind(33)).toThrow(GpuError);
  });
});
