// Movement and construction ops (cat, stack, split, chunk, repeat, roll, tril/triu, eye,
// linspace, the *Like family, negative and moded pads, stepped slices, oneHot, maskedFill,
// gather, indexSelect) against plain index-mapping references: every output element is looked up
// in the float64 input by coordinates computed here, independently of the view machinery.
// Each case runs on contiguous, permuted and sliced inputs, in float32 and int32, fused and
// unfused; bad arguments are GpuError INVALID_VALUE.
import { describe, expect, test } from "bun:test";
import { Ref, seededRandom } from "../src/tensor/reference";
import { Tensor, Variable, interpretSchedule, schedule, type PrepareOptions } from "../src/tensor";
import { run, toTensor, expectInvalid } from "./tensor_helpers";

type DT = "float32" | "int32";

function randRef(shape: number[], seed: number, dtype: DT): Ref {
  const r = seededRandom(seed);
  return Ref.fill(shape, () => (dtype === "int32" ? Math.floor(-50 + 100 * r()) : Math.fround(-2 + 4 * r())));
}

function expectSame(got: ArrayLike<number>, want: Ref, what: string, tol = 0): void {
  if (got.length !== want.data.length) throw new Error(`${what}: length ${got.length}, want ${want.data.length}`);
  for (let i = 0; i < got.length; i++) {
    const a = got[i]!, b = want.data[i]!;
    if (a === b || (Number.isNaN(a) && Number.isNaN(b))) continue;
    if (!(Math.abs(a - b) <= tol * (1 + Math.abs(b)))) throw new Error(`${what}: element ${i}: got ${a}, want ${b}`);
  }
}

/** Python's slice(start, stop, step).indices(n) as the list of indices it selects. */
function pySlice(n: number, start: number | null, stop: number | null, step: number): number[] {
  let s: number, e: number;
  const norm = (x: number, lo: number, hi: number) => Math.min(Math.max(x < 0 ? x + n : x, lo), hi);
  if (step > 0) {
    s = start === null ? 0 : norm(start, 0, n);
    e = stop === null ? n : norm(stop, 0, n);
  } else {
    s = start === null ? n - 1 : norm(start, -1, n - 1);
    e = stop === null ? -1 : norm(stop, -1, n - 1);
  }
  const out: number[] = [];
  for (let i = s; step > 0 ? i < e : i > e; i += step) out.push(i);
  return out;
}

// ---- references: output coordinates → input coordinates ----

const ref = {
  cat(rs: Ref[], d: number): Ref {
    const shape = [...rs[0]!.shape];
    shape[d] = rs.reduce((p, r) => p + r.shape[d]!, 0);
    return Ref.fill(shape, (idx) => {
      let k = idx[d]!;
      for (const r of rs) {
        if (k < r.shape[d]!) return r.at(idx.map((x, i) => (i === d ? k : x)));
        k -= r.shape[d]!;
      }
      throw new Error("cat ref");
    });
  },
  stack(rs: Ref[], d: number): Ref {
    const shape = [...rs[0]!.shape];
    shape.splice(d, 0, rs.length);
    return Ref.fill(shape, (idx) => rs[idx[d]!]!.at(idx.filter((_, i) => i !== d)));
  },
  slice(r: Ref, ranges: ([number | null, number | null, number] | null)[]): Ref {
    const lists = r.shape.map((n, i) => {
      const s = ranges[i];
      return s ? pySlice(n, s[0], s[1], s[2]) : [...Array(n).keys()];
    });
    return Ref.fill(lists.map((l) => l.length), (idx) => r.at(idx.map((x, i) => lists[i]![x]!)));
  },
  pad(r: Ref, p: [number, number][], mode: string, value = 0): Ref {
    const shape = r.shape.map((n, i) => n + p[i]![0] + p[i]![1]);
    return Ref.fill(shape, (idx) => {
      const src: number[] = [];
      for (let i = 0; i < idx.length; i++) {
        const n = r.shape[i]!;
        let x = idx[i]! - p[i]![0];
        if (x < 0 || x >= n) {
          if (mode === "constant") return value;
          if (mode === "reflect") x = x < 0 ? -x : 2 * (n - 1) - x;
          else if (mode === "replicate") x = x < 0 ? 0 : n - 1;
          else x = ((x % n) + n) % n;
        }
        src.push(x);
      }
      return r.at(src);
    });
  },
  repeat(r: Ref, reps: number[]): Ref {
    const base = [...Array(reps.length - r.shape.length).fill(1), ...r.shape];
    const rb = r.reshape(base);
    return Ref.fill(base.map((b, i) => b * reps[i]!), (idx) => rb.at(idx.map((x, i) => x % base[i]!)));
  },
  roll(r: Ref, shifts: number[], dims: number[]): Ref {
    return Ref.fill(r.shape, (idx) =>
      r.at(idx.map((x, i) => {
        const n = r.shape[i]!;
        let s = 0;
        dims.forEach((d, k) => (s += d === i ? shifts[k]! : 0));
        return (((x - s) % n) + n) % n;
      })),
    );
  },
  tri(r: Ref, k: number, upper: boolean): Ref {
    const nd = r.shape.length;
    return Ref.fill(r.shape, (idx, lin) => {
      const c = idx[nd - 1]! - idx[nd - 2]!;
      return (upper ? c >= k : c <= k) ? r.data[lin]! : 0;
    });
  },
  gather(r: Ref, d: number, ix: Ref): Ref {
    return r.gather(d, ix);
  },
  /** torch scatter written out: each index position j writes (or adds, multiplies) src[j] at j with j[d] = ix[j], in order. */
  scatter(r: Ref, d: number, ix: Ref, src: Ref | number, reduce?: "add" | "multiply", int = false): Ref {
    const out = Array.from(r.data);
    const at = (idx: number[]) => idx.reduce((l, x, i) => l * r.shape[i]! + x, 0);
    const round = (v: number) => (int ? v | 0 : Math.fround(v));
    Ref.fill(ix.shape, (idx, lin) => {
      const j = ix.data[lin]!;
      if (j < 0 || j >= r.shape[d]!) return 0;
      const k = at(idx.map((x, i) => (i === d ? j : x)));
      const v = typeof src === "number" ? src : src.at(idx);
      out[k] = round(reduce === "add" ? out[k]! + v : reduce === "multiply" ? out[k]! * v : v);
      return 0;
    });
    return new Ref(r.shape, Float64Array.from(out));
  },
  indexSelect(r: Ref, d: number, ix: number[]): Ref {
    const shape = r.shape.map((n, i) => (i === d ? ix.length : n));
    return Ref.fill(shape, (idx) => {
      const j = ix[idx[d]!]!;
      return j >= 0 && j < r.shape[d]! ? r.at(idx.map((x, i) => (i === d ? j : x))) : 0;
    });
  },
};

/** The same [3, 4, 5] values as a contiguous buffer, a permuted view and a sliced view of a larger one. */
function inputs(dtype: DT, seed: number): { name: string; t: Tensor; r: Ref }[] {
  const r = randRef([3, 4, 5], seed, dtype);
  const big = Ref.fill([5, 6, 7], (idx) => (idx[0]! >= 1 && idx[0]! < 4 && idx[1]! >= 2 && idx[2]! >= 1 && idx[2]! < 6 ? r.at([idx[0]! - 1, idx[1]! - 2, idx[2]! - 1]) : 999));
  return [
    { name: "contiguous", t: toTensor(r, dtype), r },
    { name: "permuted", t: toTensor(r.permute([2, 0, 1]), dtype).permute([1, 2, 0]), r },
    { name: "sliced", t: toTensor(big, dtype).shrink([[1, 4], [2, 6], [1, 6]]), r },
  ];
}

/** name, op, reference, and a relative tolerance for cases that compute (0: exact). */
type Case = [string, (x: Tensor, y: Tensor) => Tensor, (x: Ref, y: Ref) => Ref, number?];

/** Run every case on every input variant, dtype and fusion setting, in one plan per combination. */
function checkCases(cases: Case[]): void {
  for (const dtype of ["float32", "int32"] as const)
    for (const fusion of [true, false]) {
      const xs = inputs(dtype, 11), ys = inputs(dtype, 12);
      xs.forEach((x, vi) => {
        const y = ys[vi]!;
        const ts = cases.map(([, f]) => f(x.t, y.t));
        const got = run(ts, { fusion });
        cases.forEach(([name, , rf, tol], i) => {
          const want = rf(x.r, y.r);
          const what = `${name} (${x.name}, ${dtype}, fusion ${fusion})`;
          expect(ts[i]!.shape, what).toEqual(want.shape);
          expectSame(got[i]!, want, what, tol ?? 0);
        });
      });
    }
}

describe("cat, stack, split, chunk", () => {
  test("against the reference on contiguous, permuted and sliced inputs", () => {
    checkCases([
      ["cat 0", (x, y) => Tensor.cat([x, y], 0), (x, y) => ref.cat([x, y], 0)],
      ["cat -1 three", (x, y) => x.cat([y, x.mul(2)], -1), (x, y) => ref.cat([x, y, x.map((v) => 2 * v)], 2)],
      ["cat 1 sliced parts", (x, y) => Tensor.cat([x.shrink([null, [1, 3], null]), y, x.shrink([null, [0, 1], null])], 1), (x, y) => ref.cat([x.shrink([[0, 3], [1, 3], [0, 5]]), y, x.shrink([[0, 3], [0, 1], [0, 5]])], 1)],
      ["cat one", (x) => Tensor.cat([x], 1), (x) => x],
      ["cat then compute", (x, y) => x.cat(y, 2).add(1), (x, y) => ref.cat([x, y], 2).map((v) => v + 1), 1e-6],
      ["stack 0", (x, y) => Tensor.stack([x, y], 0), (x, y) => ref.stack([x, y], 0)],
      ["stack -1", (x, y) => x.stack(y, -1), (x, y) => ref.stack([x, y], 3)],
      ["stack 2", (x, y) => Tensor.stack([x, y, x], 2), (x, y) => ref.stack([x, y, x], 2)],
      ["split 2 along 1, second piece", (x) => x.split(3, 1)[1]!, (x) => x.shrink([[0, 3], [3, 4], [0, 5]])],
      ["split list, -1", (x) => x.split([1, 0, 4], -1)[2]!, (x) => x.shrink([[0, 3], [0, 4], [1, 5]])],
      ["split pieces rejoin", (x) => Tensor.cat(x.split(2, 2), 2), (x) => x],
      ["chunk 3 along 2", (x) => x.chunk(3, 2)[2]!, (x) => x.shrink([[0, 3], [0, 4], [4, 5]])],
      ["chunk rejoin", (x) => Tensor.cat(x.chunk(2, 0).reverse(), 0), (x) => ref.cat([x.shrink([[2, 3], [0, 4], [0, 5]]), x.shrink([[0, 2], [0, 4], [0, 5]])], 0)],
    ]);
  });

  test("piece counts and shapes follow tinygrad", () => {
    const x = Tensor.zeros([7, 2]);
    expect(x.split(3).map((t) => t.shape[0])).toEqual([3, 3, 1]);
    expect(x.chunk(3).map((t) => t.shape[0])).toEqual([3, 3, 1]);
    expect(x.chunk(4).map((t) => t.shape[0])).toEqual([2, 2, 2, 1]);
    expect(x.chunk(7).length).toBe(7);
    expect(Tensor.zeros([6]).chunk(4).map((t) => t.shape[0])).toEqual([2, 2, 2]);
    expect(Tensor.zeros([0, 2]).chunk(3).map((t) => t.shape)).toEqual([[0, 2], [0, 2], [0, 2]]);
    expect(Tensor.zeros([0, 2]).split(2).map((t) => t.shape)).toEqual([[0, 2]]);
  });

  test("mixed dtypes promote, zero-size pieces, a 0-d stack", () => {
    const a = Tensor.from([1, 2], [2], { dtype: "int32" }), b = Tensor.from([0.5], [1]);
    const c = Tensor.cat([a, b]);
    expect(c.dtype).toBe("float32");
    expect(c.toList()).toEqual([1, 2, 0.5]);
    const e = Tensor.zeros([0, 3]);
    const m = Tensor.from([1, 2, 3, 4, 5, 6], [2, 3]);
    for (const fusion of [true, false]) {
      const [r1, r2, r3, r4] = run([Tensor.cat([e, m, e], 0), Tensor.cat([e, e], 0), Tensor.stack([Tensor.full([], 3), Tensor.full([], 4)]), Tensor.cat([m.shrink([null, [0, 0]]), m], 1)], { fusion });
      expect(Array.from(r1!)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(r2!.length).toBe(0);
      expect(Array.from(r3!)).toEqual([3, 4]);
      expect(Array.from(r4!)).toEqual([1, 2, 3, 4, 5, 6]);
    }
    expect(Tensor.cat([e, e], 0).shape).toEqual([0, 3]);
  });

  test("cat is one fused kernel; a variable dim beside the axis is kept", () => {
    const x = Tensor.from(new Float32Array(12), [3, 4]), y = Tensor.from(new Float32Array(8), [2, 4]);
    expect(schedule([Tensor.cat([x, y, x]).exp().node]).kernels.length).toBe(1);
    const S = new Variable("S", 1, 8).bind(3);
    const v = Tensor.arange(S).float().reshape([1, S]);
    const w = Tensor.cat([v, v.mul(2)], 0);
    expect(w.shape[1]).toBe(S);
    expect(w.toList()).toEqual([0, 1, 2, 0, 2, 4]);
  });
});

describe("repeat, roll, tril/triu", () => {
  test("against the reference on contiguous, permuted and sliced inputs", () => {
    checkCases([
      ["repeat", (x) => x.repeat([2, 1, 3]), (x) => ref.repeat(x, [2, 1, 3])],
      ["repeat lead", (x) => x.repeat(2, 1, 2, 1), (x) => ref.repeat(x, [2, 1, 2, 1])],
      ["repeat 0", (x) => x.repeat([1, 0, 1]), (x) => ref.repeat(x, [1, 0, 1])],
      ["repeat then add", (x, y) => x.repeat([1, 1, 2]).add(y.repeat([1, 1, 2]).flip(2)), (x, y) => ref.repeat(x, [1, 1, 2]).zip(ref.repeat(y, [1, 1, 2]).flip([2]), (a, b) => a + b), 1e-6],
      ["roll 1 on -1", (x) => x.roll(1, -1), (x) => ref.roll(x, [1], [2])],
      ["roll neg big", (x) => x.roll(-7, 1), (x) => ref.roll(x, [-7], [1])],
      ["roll two dims", (x) => x.roll([2, -1], [0, 2]), (x) => ref.roll(x, [2, -1], [0, 2])],
      ["roll same dim twice", (x) => x.roll([2, 1], [1, 1]), (x) => ref.roll(x, [3], [1])],
      ["roll flat", (x) => x.roll(7), (x) => ref.roll(x.reshape([60]), [7], [0]).reshape([3, 4, 5])],
      ["triu", (x) => x.triu(), (x) => ref.tri(x, 0, true)],
      ["triu 2", (x) => x.triu(2), (x) => ref.tri(x, 2, true)],
      ["triu -1", (x) => x.triu(-1), (x) => ref.tri(x, -1, true)],
      ["tril", (x) => x.tril(), (x) => ref.tri(x, 0, false)],
      ["tril 1", (x) => x.tril(1), (x) => ref.tri(x, 1, false)],
      ["tril -2", (x) => x.tril(-2), (x) => ref.tri(x, -2, false)],
    ]);
  });

  test("0-d and zero-size", () => {
    const s = Tensor.full([], 5);
    expect(s.roll(3).toList()).toEqual([5]);
    expect(s.repeat([2, 2]).toList()).toEqual([5, 5, 5, 5]);
    expect(Tensor.zeros([0, 3]).roll(2, 0).shape).toEqual([0, 3]);
    expect(Tensor.zeros([0, 3]).triu().toList()).toEqual([]);
    expect(Tensor.zeros([2, 3]).repeat([0, 2]).shape).toEqual([0, 6]);
  });
});

describe("variable dims", () => {
  test("tril/triu over a variable square (a causal mask), repeat keeping a variable dim", () => {
    const S = new Variable("S", 1, 8);
    const m = Tensor.arange(S).float().reshape([S, 1]).expand([S, S]);
    const cases: [Tensor, (i: number, j: number) => number][] = [
      [m.triu(), (i, j) => (j >= i ? i : 0)],
      [m.tril(-1), (i, j) => (j <= i - 1 ? i : 0)],
      [m.T.tril(1), (i, j) => (j <= i + 1 ? j : 0)],
    ];
    for (const n of [1, 3, 8]) {
      S.bind(n);
      for (const [t, f] of cases) expect(t.toList()).toEqual(Array.from(Ref.fill([n, n], (idx) => f(idx[0]!, idx[1]!)).data));
      expect(Tensor.arange(S).reshape([1, S]).repeat([2, 1]).toList()).toEqual([...Array(2)].flatMap(() => [...Array(n).keys()]));
    }
  });
});

describe("pad: negative amounts and modes", () => {
  const P: [number, number][] = [[1, 2], [0, 3], [2, 1]];
  test("against the reference on contiguous, permuted and sliced inputs", () => {
    checkCases([
      ["constant", (x) => x.pad(P), (x) => ref.pad(x, P, "constant")],
      ["constant value", (x) => x.pad(P, "constant", 7), (x) => ref.pad(x, P, "constant", 7)],
      ["legacy value", (x) => x.pad(P, -3), (x) => ref.pad(x, P, "constant", -3)],
      ["reflect", (x) => x.pad(P, "reflect"), (x) => ref.pad(x, P, "reflect")],
      ["replicate", (x) => x.pad([[2, 4], [0, 5], [1, 1]], "replicate"), (x) => ref.pad(x, [[2, 4], [0, 5], [1, 1]], "replicate")],
      ["circular", (x) => x.pad([[3, 2], [4, 0], [1, 5]], "circular"), (x) => ref.pad(x, [[3, 2], [4, 0], [1, 5]], "circular")],
      ["negative crops", (x) => x.pad([[-1, 0], [1, -2], [-1, -1]]), (x) => x.shrink([[1, 3], [0, 2], [1, 4]]).pad([[0, 0], [1, 0], [0, 0]])],
      ["negative with value", (x) => x.pad([[0, -1], [2, -3], null], 4), (x) => ref.pad(x.shrink([[0, 2], [0, 1], [0, 5]]), [[0, 0], [2, 0], [0, 0]], "constant", 4)],
      ["reflect with crop", (x) => x.pad([[2, -1], null, [-2, 3]], "reflect"), (x) => ref.pad(x, [[2, 0], [0, 0], [0, 3]], "reflect").shrink([[0, 4], [0, 4], [2, 8]])],
      ["replicate with crop", (x) => x.pad([[-1, 2], [1, -1], null], "replicate"), (x) => ref.pad(x, [[0, 2], [1, 0], [0, 0]], "replicate").shrink([[1, 5], [0, 4], [0, 5]])],
      ["flat (torch order)", (x) => x.pad([1, 2, -1, 1]), (x) => ref.pad(x.shrink([[0, 3], [1, 4], [0, 5]]), [[0, 0], [0, 1], [1, 2]], "constant")],
      ["flat reflect", (x) => x.pad([2, 2], "reflect"), (x) => ref.pad(x, [[0, 0], [0, 0], [2, 2]], "reflect")],
      ["reflect of computed", (x) => x.mul(2).pad([[0, 0], [3, 3], [0, 0]], "reflect").add(1), (x) => ref.pad(x.map((v) => 2 * v), [[0, 0], [3, 3], [0, 0]], "reflect").map((v) => v + 1), 1e-6],
    ]);
  });

  test("moded pads fuse into one kernel; 0-d and empty pads", () => {
    const x = Tensor.from(new Float32Array(20), [4, 5]);
    expect(schedule([x.pad([[1, 1], [2, 2]], "reflect").exp().node]).kernels.length).toBe(1);
    expect(schedule([x.pad([[3, 1], [0, 4]], "circular").node]).kernels.length).toBe(1);
    const s = Tensor.full([], 2);
    expect(s.pad([]).toList()).toEqual([2]);
    expect(s.pad([], "reflect").toList()).toEqual([2]);
    expect(Tensor.zeros([0, 2]).pad([[1, 1], [0, 0]], "constant", 9).toList()).toEqual([9, 9, 9, 9]);
    expect(Tensor.from([1, 2, 3]).pad([[-3, 0]]).shape).toEqual([0]);
  });
});

describe("stepped and negative-step slices", () => {
  const S: ([number | null, number | null, number] | null)[][] = [
    [null, [null, null, -1], null],
    [[null, null, 2], [1, null, 2], [null, null, 3]],
    [[null, null, -1], [null, null, -2], [4, 0, -3]],
    [[-1, -4, -1], [-2, null, 1], [10, -10, -2]],
    [[0, 3, 5], [3, 3, 1], null],
    [[2, 0, 1], null, [100, null, -100]],
    [[-100, 100, 2], [null, 1, -1], [1, 5, 4]],
  ];
  test("Python slice semantics on contiguous, permuted and sliced inputs", () => {
    checkCases(
      S.map((s, k): Case => [`slice ${JSON.stringify(s)}`, (x) => x.slice(s.map((r) => (r ? [r[0], r[1], r[2]] : null))), (x) => ref.slice(x, s)]),
    );
  });

  test("exhaustively against Python on one dim, chained with other views", () => {
    const r = Ref.fill([6], (idx) => idx[0]! * 10 + 1);
    const x = Tensor.from(Float32Array.from(r.data), [6]);
    const cases: Case[] = [];
    const vals = [null, -8, -6, -3, -1, 0, 1, 2, 5, 6, 9];
    for (const step of [1, 2, 3, 7, -1, -2, -4])
      for (const a of vals)
        for (const b of [null, -7, -2, 0, 3, 6, 8])
          cases.push([`[${a}:${b}:${step}]`, () => x.slice([[a, b, step]]), () => ref.slice(r, [[a, b, step]])]);
    const ts = cases.map(([, f]) => f(x, x));
    for (const fusion of [true, false]) {
      const got = run(ts, { fusion });
      cases.forEach(([name, , rf], i) => expectSame(got[i]!, rf(r, r), name));
    }
    // stepped views stack with pad, reshape, flip and permute
    const m = Ref.fill([6, 8], (idx) => idx[0]! * 8 + idx[1]!);
    const mt = Tensor.from(Float32Array.from(m.data), [6, 8]);
    const chain = mt.pad([[1, 1], [0, 0]]).slice([[null, null, 3], [7, null, -2]]).T.reshape([-1]);
    const want = ref.slice(m.pad([[1, 1], [0, 0]]), [[null, null, 3], [7, null, -2]]).permute([1, 0]).reshape([12]);
    expect(chain.toList()).toEqual(Array.from(want.data));
    expect(interpretSchedule(schedule([chain.node]), new Map()).get(chain.node)).toEqual(Float32Array.from(want.data));
    const back = mt.slice([[null, null, 2], [null, null, -3]]).slice([[null, null, -1], [1, null, 2]]);
    expect(back.toList()).toEqual(Array.from(ref.slice(ref.slice(m, [[null, null, 2], [null, null, -3]]), [[null, null, -1], [1, null, 2]]).data));
  });

  test("old forms still work: an index keeps the dim, [start, end) and negative ends", () => {
    const x = Tensor.arange(12).reshape([3, 4]);
    expect(x.slice([1]).toList()).toEqual([4, 5, 6, 7]);
    expect(x.slice([1]).shape).toEqual([1, 4]);
    expect(x.slice([[-2], [1, -1]]).toList()).toEqual([5, 6, 9, 10]);
    expect(x.slice([null, [3, 1]]).shape).toEqual([3, 0]);
    expect(Tensor.zeros([0, 2]).slice([[null, null, -1]]).shape).toEqual([0, 2]);
  });
});

describe("construction: eye, linspace, *Like", () => {
  test("eye", () => {
    for (const [n, m] of [[0, undefined], [1, undefined], [4, undefined], [3, 5], [5, 2], [3, 0], [0, 2]] as [number, number | undefined][])
      for (const fusion of [true, false]) {
        const want = Ref.fill([n, m ?? n], (idx) => (idx[0] === idx[1] ? 1 : 0));
        const t = Tensor.eye(n, m);
        expect(t.shape).toEqual(want.shape);
        expectSame(run([t, Tensor.eye(n, m, { dtype: "int32" })], { fusion })[0]!, want, `eye ${n} ${m}`);
      }
    const e = Tensor.eye(3, undefined, { dtype: "int32" });
    expect(e.dtype).toBe("int32");
    expect(e.toList()).toEqual([1, 0, 0, 0, 1, 0, 0, 0, 1]);
  });

  test("linspace", () => {
    const cases: [number, number, number][] = [[0, 1, 5], [-3, 7, 11], [2, -2, 4], [1.5, 1.5, 3], [0, 10, 1], [0, 10, 0], [0, 1, 100]];
    for (const [a, b, n] of cases)
      for (const fusion of [true, false]) {
        const want = Ref.fill([n], (idx) => (n === 1 ? a : a + ((b - a) * idx[0]!) / (n - 1)));
        expectSame(run([Tensor.linspace(a, b, n)], { fusion })[0]!, want, `linspace ${a} ${b} ${n}`, 1e-6);
      }
    const li = Tensor.linspace(0, 9, 4, { dtype: "int32" });
    expect(li.dtype).toBe("int32");
    expect(li.toList()).toEqual([0, 3, 6, 9]);
  });

  test("zerosLike onesLike fullLike randLike randnLike", () => {
    const x = Tensor.from([1, 2, 3, 4, 5, 6], [2, 3], { dtype: "int32" }).T;
    expect(x.zerosLike().shape).toEqual([3, 2]);
    expect(x.zerosLike().dtype).toBe("int32");
    expect(x.zerosLike().toList()).toEqual([0, 0, 0, 0, 0, 0]);
    expect(x.onesLike({ dtype: "float32" }).dtype).toBe("float32");
    expect(x.onesLike().toList()).toEqual([1, 1, 1, 1, 1, 1]);
    expect(x.fullLike(2.5).toList()).toEqual([2, 2, 2, 2, 2, 2]); // int32 truncates
    expect(x.fullLike(2.5, { dtype: "float32" }).toList()).toEqual([2.5, 2.5, 2.5, 2.5, 2.5, 2.5]);
    expect(Tensor.full([], 1).zerosLike().shape).toEqual([]);
    expect(Tensor.zeros([0, 4]).onesLike().toList()).toEqual([]);
    const r = x.randLike({ seed: 7 });
    expect(r.dtype).toBe("float32");
    expect(r.toList()).toEqual(Tensor.rand([3, 2], { seed: 7 }).toList());
    expect(x.randnLike({ seed: 3 }).toList()).toEqual(Tensor.randn([3, 2], { seed: 3 }).toList());
    const S = new Variable("L", 1, 6).bind(4);
    const v = Tensor.arange(S).zerosLike();
    expect(v.shape[0]).toBe(S);
    expect(v.toList()).toEqual([0, 0, 0, 0]);
  });
});

describe("indexing: oneHot, maskedFill, gather, indexSelect", () => {
  test("oneHot", () => {
    const ix = Tensor.from([2, 0, 3, 1, 5, -1], [2, 3], { dtype: "int32" });
    const want = Ref.fill([2, 3, 4], (idx) => ([2, 0, 3, 1, 5, -1][idx[0]! * 3 + idx[1]!] === idx[2] ? 1 : 0));
    for (const fusion of [true, false]) {
      const [a, b] = run([ix.oneHot(4), ix.T.oneHot(4)], { fusion });
      expectSame(a!, want, "oneHot");
      expectSame(b!, want.permute([1, 0, 2]), "oneHot of transposed");
    }
    expect(ix.oneHot(4).dtype).toBe("int32");
    expect(Tensor.from([0, 2], [2], { dtype: "int32" }).oneHot().toList()).toEqual([1, 0, 0, 0, 0, 1]);
    expect(Tensor.full([], 1, { dtype: "int32" }).oneHot(3).toList()).toEqual([0, 1, 0]);
    expect(Tensor.zeros([0], { dtype: "int32" }).oneHot(3).shape).toEqual([0, 3]);
  });

  test("maskedFill with a scalar and a tensor, broadcasting the mask", () => {
    checkCases([
      ["scalar", (x) => x.maskedFill(x.cmpgt(0), -1), (x) => x.map((v) => (v > 0 ? -1 : v))],
      ["float scalar promotes", (x) => x.maskedFill(x.cmplt(0), 0.5), (x) => x.map((v) => (v < 0 ? 0.5 : v))],
      ["broadcast mask", (x) => x.maskedFill(Tensor.from([1, 0, 0, 1, 0], [5], { dtype: "int32" }), 9), (x) => Ref.fill(x.shape, (idx, l) => ([1, 0, 0, 1, 0][idx[2]!] ? 9 : x.data[l]!))],
      ["tensor value", (x, y) => x.maskedFill(y.cmpge(0), y.mul(3)), (x, y) => x.zip(y, (a, b) => (b >= 0 ? 3 * b : a)), 1e-6],
    ]);
    expect(Tensor.from([1, 2], [2], { dtype: "int32" }).maskedFill(Tensor.from([0, 1], [2], { dtype: "int32" }), 0.5).dtype).toBe("float32");
  });

  test("gather and indexSelect against the reference", () => {
    const r = seededRandom(5);
    const ix0 = Ref.fill([2, 4, 5], () => Math.floor(r() * 3));
    const ix1 = Ref.fill([3, 6, 2], () => Math.floor(r() * 4));
    const ix2 = Ref.fill([3, 3, 7], () => Math.floor(r() * 7) - 1); // -1 and 5 are out of range: 0
    const i32 = (x: Ref) => Tensor.from(Int32Array.from(x.data), x.shape, { dtype: "int32" });
    checkCases([
      ["gather 0", (x) => x.gather(0, i32(ix0)), (x) => ref.gather(x, 0, ix0)],
      ["gather 1 (index wider than input on dim)", (x) => x.gather(1, i32(ix1)), (x) => ref.gather(x, 1, ix1)],
      ["gather -1 out of range", (x) => x.gather(-1, i32(ix2)), (x) => ref.gather(x, 2, ix2)],
      ["gather transposed index", (x) => x.gather(2, i32(ix0.permute([0, 2, 1])).permute([0, 2, 1]).shrink([null, null, [0, 3]]).add(1)), (x) => ref.gather(x, 2, ix0.shrink([[0, 2], [0, 4], [0, 3]]).map((v) => v + 1))],
      // scatter: duplicate indices (the last writes), out-of-range ones (nothing), an index narrower than x off dim
      ["scatter 0", (x, y) => x.scatter(0, i32(ix0), y.shrink([[0, 2], null, null])), (x, y) => ref.scatter(x, 0, ix0.shrink([[0, 2], [0, 4], [0, 5]]), y)],
      ["scatter -1 out of range, narrower index", (x, y) => x.scatter(-1, i32(ix2.shrink([[0, 3], [0, 2], [0, 4]])), y), (x, y) => ref.scatter(x, 2, ix2.shrink([[0, 3], [0, 2], [0, 4]]), y)],
      ["scatter 1 a constant", (x) => x.scatter(1, i32(ix1.shrink([[0, 3], [0, 3], [0, 2]])), 7), (x) => ref.scatter(x, 1, ix1.shrink([[0, 3], [0, 3], [0, 2]]), 7)],
      ["scatter 1 add", (x, y) => x.scatter(1, i32(ix1.shrink([[0, 3], [0, 5], [0, 2]])), y.cat([y], 1), "add"), (x, y) => ref.scatter(x, 1, ix1.shrink([[0, 3], [0, 5], [0, 2]]), ref.cat([y, y], 1), "add"), 1e-6],
      ["scatter 0 multiply, transposed index", (x, y) => x.scatter(0, i32(ix0.permute([0, 2, 1])).permute([0, 2, 1]), y.shrink([[0, 2], null, null]), "multiply"), (x, y) => ref.scatter(x, 0, ix0, y.shrink([[0, 2], [0, 4], [0, 5]]), "multiply"), 1e-6],
      ["indexSelect 1", (x) => x.indexSelect(1, Tensor.from([3, 0, 0, 2, 1], [5], { dtype: "int32" })), (x) => ref.indexSelect(x, 1, [3, 0, 0, 2, 1])],
      ["indexSelect -1", (x) => x.indexSelect(-1, Tensor.from([4, 9, -1], [3], { dtype: "int32" })), (x) => ref.indexSelect(x, 2, [4, 9, -1])],
      ["indexSelect 0 empty", (x) => x.indexSelect(0, Tensor.zeros([0], { dtype: "int32" })), (x) => ref.indexSelect(x, 0, [])],
      ["embedding rows", (x) => x.reshape([12, 5]).indexSelect(0, Tensor.from([11, 0, 5], [3], { dtype: "int32" })).sum(1), (x) => ref.indexSelect(x.reshape([12, 5]), 0, [11, 0, 5]).sum([1]), 1e-6],
    ]);
  });
});

describe("scatter", () => {
  test("zero-size, float16 and bool, and bad arguments as GpuErrors", () => {
    const x = Tensor.from([1, 2, 3, 4, 5, 6], [2, 3]);
    const ix = Tensor.from([2, 2, 0], [1, 3], { dtype: "int32" });
    expect(x.scatter(0, Tensor.zeros([0, 3], { dtype: "int32" }), 9).toList()).toEqual([1, 2, 3, 4, 5, 6]);
    expect(Tensor.zeros([0, 3]).scatter(1, Tensor.zeros([0, 2], { dtype: "int32" }), 1).shape).toEqual([0, 3]);
    // row 0: index [2, 2, 0] along dim 1 writes src 10, 20 (last wins at 2), then 30 at 0
    expect(x.scatter(1, ix, Tensor.from([10, 20, 30], [1, 3])).toList()).toEqual([30, 2, 20, 4, 5, 6]);
    expect(x.half().scatter(1, ix, Tensor.from([10, 20, 30.3], [1, 3]), "add").float().toList()).toEqual([31.296875, 2, 33, 4, 5, 6]);
    const b = x.cmpgt(3).scatter(1, ix, 1);
    expect(b.dtype).toBe("bool");
    expect(b.int().toList()).toEqual([1, 0, 1, 1, 1, 1]);
    expectInvalid(() => x.scatter(0, Tensor.from([0.5], [1, 1]), 1), "float index");
    expectInvalid(() => x.scatter(2, ix, 1), "dim out of range");
    expectInvalid(() => x.scatter(0, Tensor.from([0], [1], { dtype: "int32" }), 1), "index rank");
    expectInvalid(() => x.scatter(0, Tensor.zeros([1, 4], { dtype: "int32" }), 1), "index wider than x off dim");
    expectInvalid(() => x.scatter(1, ix, Tensor.from([1, 2], [1, 2])), "src narrower than index");
    expectInvalid(() => x.scatter(1, ix, 1, "max" as never), "unknown reduce");
    expectInvalid(() => x.scatter(1, ix, "1" as never), "string src");
  });
});

describe("gather is a direct indexed read", () => {
  test("one kernel, no reduction loop; producers and views of the source are read at the gathered coordinates", () => {
    const w = Tensor.rand([1000, 16], { seed: 4 });
    const ix = Tensor.from([999, 0, 17, 17, -1, 1000], [6], { dtype: "int32" });
    const e = w.mul(2).T.indexSelect(1, ix);
    const s = schedule([e.node]);
    expect(s.kernels.length).toBe(1);
    expect(s.kernels[0]!.ir.reduce).toBeNull();
    const wv = Array.from(w.toArray());
    const want = Ref.fill([16, 6], (idx) => {
      const j = [999, 0, 17, 17, -1, 1000][idx[1]!]!;
      return j >= 0 && j < 1000 ? 2 * wv[j * 16 + idx[0]!]! : 0;
    });
    for (const fusion of [true, false]) expectSame(run([e], { fusion })[0]!, want, `indexSelect of computed, fusion ${fusion}`);
    expectSame(interpretSchedule(s, new Map()).get(e.node)!, want, "interpreted");
  });

  test("a computed index, a reduction as the source, a variable-length index", () => {
    const xr = randRef([4, 6], 21, "float32");
    const x = toTensor(xr, "float32");
    const ir = Ref.fill([3, 6], (idx) => (idx[0]! * 5 + idx[1]!) % 4);
    const ix = Tensor.from(Int32Array.from(ir.data), [3, 6], { dtype: "int32" });
    const rowsum = xr.sum([1], true); // [4, 1]
    const cases: Case[] = [
      ["computed index", () => x.gather(0, ix.add(1).sub(1)), () => ref.gather(xr, 0, ir)],
      ["gather of a sum", () => x.sum(1, true).expand([4, 6]).gather(0, ix), () => ref.gather(rowsum.broadcastTo([4, 6]), 0, ir), 1e-6],
      ["sum of a gather", () => x.gather(0, ix).sum(0), () => ref.gather(xr, 0, ir).sum([0]), 1e-6],
      ["gather of gather", () => x.gather(0, ix).gather(1, ix.shrink([null, [0, 2]]).add(3)), () => ref.gather(ref.gather(xr, 0, ir), 1, ir.shrink([[0, 3], [0, 2]]).map((v) => v + 3))],
      ["int32 gather", () => x.mul(100).int().gather(1, ix.shrink([[0, 3], [0, 2]])), () => ref.gather(xr.map((v) => Math.trunc(Math.fround(v * 100))), 1, ir.shrink([[0, 3], [0, 2]]))],
    ];
    for (const fusion of [true, false]) {
      const got = run(cases.map(([, f]) => f(x, x)), { fusion });
      cases.forEach(([name, , rf, tol], i) => expectSame(got[i]!, rf(xr, xr), `${name}, fusion ${fusion}`, tol ?? 0));
    }
    const S = new Variable("T", 1, 8).bind(3);
    const tok = Tensor.arange(S).mul(2); // [T]: 0, 2, 4
    const emb = x.indexSelect(0, tok); // rows 0, 2 and 4 (out of range: zeros)
    expect(emb.shape[0]).toBe(S);
    const want = [...xr.data.slice(0, 6), ...xr.data.slice(12, 18), 0, 0, 0, 0, 0, 0].map(Math.fround);
    expect(emb.toList()).toEqual(want);
  });
});

describe("bad arguments are GpuError INVALID_VALUE", () => {
  test("every new op", () => {
    const x = Tensor.zeros([2, 3]);
    const i = Tensor.zeros([2, 3], { dtype: "int32" });
    const bad: [string, () => unknown][] = [
      ["cat empty", () => Tensor.cat([])],
      ["cat not array", () => Tensor.cat(x as never)],
      ["cat non-tensor", () => Tensor.cat([x, 3 as never])],
      ["cat shapes", () => Tensor.cat([x, Tensor.zeros([2, 4])], 0)],
      ["cat ndim", () => x.cat(Tensor.zeros([3]))],
      ["cat axis", () => x.cat(x, 2)],
      ["cat 0-d", () => Tensor.cat([Tensor.full([], 1), Tensor.full([], 1)])],
      ["cat variable axis", () => { const S = new Variable("S", 1, 4); return Tensor.cat([Tensor.arange(S), Tensor.arange(S)]); }],
      ["stack shapes", () => Tensor.stack([x, Tensor.zeros([3, 2])])],
      ["stack axis", () => x.stack(x, 3)],
      ["split sizes sum", () => x.split([1, 1], 1)],
      ["split zero", () => x.split(0)],
      ["split negative", () => x.split([4, -1], 1)],
      ["split fraction", () => x.split(1.5)],
      ["split 0-d", () => Tensor.full([], 1).split(1)],
      ["chunk 0", () => x.chunk(0)],
      ["chunk axis", () => x.chunk(2, 5)],
      ["repeat short", () => x.repeat([2])],
      ["repeat negative", () => x.repeat([1, -1])],
      ["repeat string", () => x.repeat("2" as never)],
      ["roll mismatch", () => x.roll([1, 2], 0)],
      ["roll axis", () => x.roll(1, 2)],
      ["roll fraction", () => x.roll(0.5, 0)],
      ["roll flat pairs", () => x.roll([1, 2])],
      ["triu 1-d", () => Tensor.zeros([3]).triu()],
      ["tril diagonal", () => x.tril(0.5)],
      ["eye negative", () => Tensor.eye(-1)],
      ["eye fraction", () => Tensor.eye(2, 1.5)],
      ["eye dtype", () => Tensor.eye(2, 2, { dtype: "float64" as never })],
      ["linspace steps", () => Tensor.linspace(0, 1, -1)],
      ["linspace NaN", () => Tensor.linspace(NaN, 1, 3)],
      ["linspace string", () => Tensor.linspace(0, "1" as never, 3)],
      ["fullLike dtype", () => x.fullLike(1, { dtype: "int16" as never })],
      ["randLike dtype", () => x.randLike({ dtype: "int32" })],
      ["randnLike options", () => x.randnLike(3 as never)],
      ["pad mode", () => x.pad([null, null], "edge" as never)],
      ["pad crop too much", () => x.pad([[-1, -2], null])],
      ["pad fraction", () => x.pad([[0.5, 0], null])],
      ["pad flat odd", () => x.pad([1, 2, 3])],
      ["pad flat too long", () => x.pad([1, 1, 1, 1, 1, 1])],
      ["pad count", () => x.pad([[1, 1]])],
      ["reflect too wide", () => x.pad([[2, 0], null], "reflect")],
      ["circular too wide", () => x.pad([null, [0, 4]], "circular")],
      ["circular negative", () => x.pad([null, [-1, 1]], "circular")],
      ["replicate empty", () => Tensor.zeros([0, 2]).pad([[1, 0], null], "replicate")],
      ["pad value", () => x.pad([null, null], "constant", "1" as never)],
      ["slice step 0", () => x.slice([[0, 2, 0]])],
      ["slice step fraction", () => x.slice([[0, 2, 1.5]])],
      ["slice too long", () => x.slice([[0, 1, 1, 1] as never])],
      ["slice variable", () => { const S = new Variable("S", 1, 4); return Tensor.arange(S).slice([[null, null, 2]]); }],
      ["oneHot float", () => x.oneHot(3)],
      ["oneHot classes", () => i.oneHot(-2)],
      ["oneHot empty infer", () => Tensor.zeros([0], { dtype: "int32" }).oneHot()],
      ["maskedFill mask", () => x.maskedFill(1 as never, 0)],
      ["maskedFill value", () => x.maskedFill(i, "a" as never)],
      ["maskedFill shapes", () => x.maskedFill(Tensor.zeros([4], { dtype: "int32" }), 0)],
      ["gather float index", () => x.gather(0, x)],
      ["gather ndim", () => x.gather(0, Tensor.zeros([2], { dtype: "int32" }))],
      ["gather too wide", () => x.gather(0, Tensor.zeros([2, 4], { dtype: "int32" }))],
      ["gather axis", () => x.gather(2, i)],
      ["gather 0-d", () => Tensor.full([], 1).gather(0, Tensor.full([], 0, { dtype: "int32" }))],
      ["gather not tensor", () => x.gather(0, [0] as never)],
      ["indexSelect 2-d", () => x.indexSelect(0, i)],
      ["indexSelect axis", () => x.indexSelect(-3, Tensor.zeros([1], { dtype: "int32" }))],
      // missing and wrong-typed arguments from untyped callers
      ["cat null", () => x.cat(null as never)],
      ["split undefined", () => x.split(undefined as never)],
      ["split string size", () => x.split([1, "2"] as never, 1)],
      ["chunk string dim", () => x.chunk(2, "0" as never)],
      ["repeat nothing", () => (x.repeat as () => Tensor)()],
      ["roll undefined", () => x.roll(undefined as never)],
      ["roll string dim", () => x.roll([1, 1], [0, "1"] as never)],
      ["pad null", () => x.pad(null as never)],
      ["pad null mode", () => x.pad([null, null], null as never)],
      ["slice strings", () => x.slice([["0"]] as never)],
      ["eye undefined", () => Tensor.eye(undefined as never)],
      ["linspace null options", () => Tensor.linspace(0, 1, 3, null as never)],
      ["fullLike string", () => x.fullLike("1" as never)],
      ["maskedFill no value", () => x.maskedFill(i, undefined as never)],
      ["oneHot null", () => i.oneHot(null as never)],
      ["gather undefined dim", () => x.gather(undefined as never, i)],
      ["indexSelect 0-d index", () => x.indexSelect(0, Tensor.full([], 0, { dtype: "int32" }))],
    ];
    for (const [what, f] of bad) expectInvalid(f, what);
  });
});
