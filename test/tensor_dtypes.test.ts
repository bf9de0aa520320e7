// The dtypes beside float32 and int32 (float16, bfloat16, int8, uint8, bool, int64) on the CPU
// backend, each against the float64 reference (src/tensor/reference.ts) stored in the op's dtype
// after every op (Ref.as): elementwise ops on contiguous, transposed, broadcast, 0-d and empty
// operands, fused and unfused; reductions over negative axes; the promotion table exhaustively;
// casts and bitcasts (float16 checked against the runtime's own Float16Array rounding); host
// typed arrays in and out; safetensors round trips; bad dtypes as GpuError INVALID_VALUE.
//
// Tolerances: float16 / bfloat16 add, sub, mul of values of the dtype are exact here (float32
// holds such a result's correct rounding: 24 ≥ 2p + 2 significand bits), so elementwise results
// are compared exactly; reductions (accumulated in float32, rounded once) and the half matmul
// (each product rounded to half, then summed) get bounds derived below, next to each test.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GpuError, Status } from "../src";
import { Tensor, interpretSchedule, schedule, type DType, type PrepareOptions } from "../src/tensor";
import { DTYPES, HAS_FLOAT16_ARRAY, ITEMSIZE, bf16Bits, hostFromNumbers, hostToNumbers, type HostArray } from "../src/tensor/dtype";
import { Ref, refCast, seededRandom } from "../src/tensor/reference";
import { expectInvalid } from "./tensor_helpers";

const ALL: readonly DType[] = ["float32", "int32", "float16", "bfloat16", "int8", "uint8", "bool", "int64"];

/** Realize several tensors in one plan; each output as numbers (decoded from its host array). */
function runNum(ts: Tensor[], opts: PrepareOptions = {}): Float64Array[] {
  const plan = Tensor.prepareBatch(ts, opts);
  try {
    plan.execute();
    return ts.map((t, i) => hostToNumbers(t.dtype, plan.readOutput<HostArray>(i)));
  } finally {
    plan.dispose();
  }
}

function same(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  if (got.length !== want.length) throw new Error(`${what}: ${got.length} values, want ${want.length}`);
  for (let i = 0; i < want.length; i++) {
    const g = got[i]!, w = want[i]!;
    if (Number.isNaN(w) ? !Number.isNaN(g) : !Object.is(g + 0, w + 0)) throw new Error(`${what}: [${i}] = ${g}, want ${w}`);
  }
}

/** Test values of dtype `d` (already representable in it). */
function values(d: DType, n: number, seed: number): number[] {
  const r = seededRandom(seed);
  return Array.from({ length: n }, () => {
    switch (d) {
      case "bool": return r() < 0.5 ? 1 : 0;
      case "int8": return Math.floor(r() * 256) - 128;
      case "uint8": return Math.floor(r() * 256);
      case "int32": return Math.floor(r() * 2e5) - 1e5;
      case "int64": return (Math.floor(r() * 6e7) - 3e7) * (r() < 0.5 ? 1 : 97); // past int32, products below 2^53
      default: return refCast(d, (r() - 0.5) * 8);
    }
  });
}

function tensorOf(d: DType, data: number[], shape: number[]): Tensor {
  return Tensor.from(hostFromNumbers(d, data), shape, { dtype: d });
}

describe("promotion", () => {
  // the table of dtype.ts, written out: row dtype with column dtype (order of ALL)
  const TABLE: Record<DType, DType[]> = {
    float32: ["float32", "float32", "float32", "float32", "float32", "float32", "float32", "float32"],
    int32: ["float32", "int32", "float16", "bfloat16", "int32", "int32", "int32", "int64"],
    float16: ["float32", "float16", "float16", "float32", "float16", "float16", "float16", "float16"],
    bfloat16: ["float32", "bfloat16", "float32", "bfloat16", "bfloat16", "bfloat16", "bfloat16", "bfloat16"],
    int8: ["float32", "int32", "float16", "bfloat16", "int8", "int32", "int8", "int64"],
    uint8: ["float32", "int32", "float16", "bfloat16", "int32", "uint8", "uint8", "int64"],
    bool: ["float32", "int32", "float16", "bfloat16", "int8", "uint8", "bool", "int64"],
    int64: ["float32", "int64", "float16", "bfloat16", "int64", "int64", "int64", "int64"],
  };

  test("every pair of dtypes: the result dtype of add, max, a comparison and where, and add's values", () => {
    expect([...DTYPES].sort()).toEqual([...ALL].sort());
    const outs: Tensor[] = [], wants: number[][] = [], names: string[] = [];
    for (const [i, a] of ALL.entries())
      for (const [j, b] of ALL.entries()) {
        const want = TABLE[a][j]!;
        expect(TABLE[b][i]).toBe(want); // symmetric
        const x = tensorOf(a, values(a, 6, 1), [2, 3]), y = tensorOf(b, values(b, 6, 2), [2, 3]);
        const arith = want === "bool" ? "int32" : want; // two bools count in int32
        expect(x.add(y).dtype).toBe(arith);
        expect(x.maximum(y).dtype).toBe(want);
        expect(x.cmplt(y).dtype).toBe("bool");
        expect(x.cmplt(0).where(x, y).dtype).toBe(want);
        outs.push(x.add(y));
        const xv = values(a, 6, 1).map((v) => refCast(arith, v)), yv = values(b, 6, 2).map((v) => refCast(arith, v));
        wants.push(xv.map((v, k) => refCast(arith, v + yv[k]!)));
        names.push(`${a} + ${b}`);
      }
    const got = runNum(outs);
    got.forEach((g, k) => same(g, wants[k]!, names[k]!));
  });

  test("JS numbers are weak scalars", () => {
    const cases: [DType, number, DType][] = [
      ["int8", 3, "int8"], ["int8", 1000, "int32"], ["int8", 2.5, "float32"], ["uint8", 7, "uint8"], ["uint8", -1, "int32"],
      ["int32", 3, "int32"], ["int32", 2 ** 40, "int64"], ["int32", 0.5, "float32"], ["int64", 3, "int64"], ["int64", 0.5, "float32"],
      ["float16", 3, "float16"], ["float16", 0.1, "float16"], ["bfloat16", 1e6, "bfloat16"], ["float32", 2, "float32"],
      ["bool", 1, "int32"], ["bool", 0.5, "float32"],
    ];
    for (const [d, v, want] of cases) expect(`${d} + ${v}: ${Tensor.zeros([2], { dtype: d }).add(v).dtype}`).toBe(`${d} + ${v}: ${want}`);
    // values: int8 + 3 wraps in int8; int8 + 1000 counts in int32; float16 + 0.1 rounds 0.1 to half first
    const x8 = tensorOf("int8", [126, -128], [2]);
    const h = tensorOf("float16", [1, 2], [2]);
    const [a, b, c] = runNum([x8.add(3), x8.add(1000), h.add(0.1)]);
    same(a!, [-127, -125], "int8 + 3");
    same(b!, [1126, 872], "int8 + 1000");
    const tenth = refCast("float16", 0.1);
    same(c!, [refCast("float16", 1 + tenth), refCast("float16", 2 + tenth)], "float16 + 0.1");
  });

  test("bool arithmetic: + counts in int32, maximum / minimum are or / and, sums count", () => {
    const p = tensorOf("bool", [0, 0, 1, 1], [4]), q = tensorOf("bool", [0, 1, 0, 1], [4]);
    expect(p.sum().dtype).toBe("int32");
    expect(tensorOf("int8", [1], [1]).sum().dtype).toBe("int32");
    expect(tensorOf("float16", [1], [1]).sum().dtype).toBe("float16");
    expect(tensorOf("int64", [1], [1]).prod().dtype).toBe("int64");
    expect(p.any().dtype).toBe("bool");
    const [s, mx, mn, sum, mul, any, all] = runNum([p.add(q), p.maximum(q), p.minimum(q), p.sum(), p.mul(q), p.any(), p.all()]);
    same(s!, [0, 1, 1, 2], "bool + bool");
    same(mx!, [0, 1, 1, 1], "max");
    same(mn!, [0, 0, 0, 1], "min");
    same(sum!, [2], "sum");
    same(mul!, [0, 0, 0, 1], "mul");
    same(any!, [1], "any");
    same(all!, [0], "all");
  });
});

describe("elementwise ops in every dtype against float64", () => {
  // op, its reference, and whether bool takes it
  const OPS: [string, (x: Tensor, y: Tensor) => Tensor, (x: number, y: number) => number][] = [
    ["add", (x, y) => x.add(y), (x, y) => x + y],
    ["sub", (x, y) => x.sub(y), (x, y) => x - y],
    ["mul", (x, y) => x.mul(y), (x, y) => x * y],
    ["maximum", (x, y) => x.maximum(y), Math.max],
    ["minimum", (x, y) => x.minimum(y), Math.min],
    ["cmplt", (x, y) => x.cmplt(y), (x, y) => +(x < y)],
    ["cmpeq", (x, y) => x.cmpeq(y), (x, y) => +(x === y)],
    ["where", (x, y) => x.cmpgt(y).where(x, y), (x, y) => (x > y ? x : y)],
    ["(x + y) * x", (x, y) => x.add(y).mul(x), (x, y) => x + y], // the second op is applied below
  ];

  for (const d of ALL) {
    test(`${d}: contiguous, transposed, broadcast, 0-d and empty operands; fused and unfused`, () => {
      const xs = values(d, 15, 10), ys = values(d, 15, 11);
      const X = new Ref([3, 5], xs), Y = new Ref([3, 5], ys);
      const layouts: [string, Tensor, Tensor, Ref, Ref][] = [
        ["contiguous", tensorOf(d, xs, [3, 5]), tensorOf(d, ys, [3, 5]), X, Y],
        ["transposed", tensorOf(d, xs, [5, 3]).permute([1, 0]), tensorOf(d, ys, [3, 5]), new Ref([5, 3], xs).permute([1, 0]), Y],
        ["broadcast", tensorOf(d, xs.slice(0, 3), [3, 1]), tensorOf(d, ys.slice(0, 5), [1, 5]), new Ref([3, 1], xs.slice(0, 3)), new Ref([1, 5], ys.slice(0, 5))],
        ["0-d", tensorOf(d, xs.slice(0, 1), []), tensorOf(d, ys.slice(0, 1), []), new Ref([], xs.slice(0, 1)), new Ref([], ys.slice(0, 1))],
        ["empty", tensorOf(d, [], [0, 3]), tensorOf(d, ys.slice(0, 3), [1, 3]), new Ref([0, 3], []), new Ref([1, 3], ys.slice(0, 3))],
        ["sliced", tensorOf(d, xs, [3, 5]).shrink([[1, 3], [1, 4]]), tensorOf(d, ys, [3, 5]).flip([1]).shrink([[0, 2], [0, 3]]), X.shrink([[1, 3], [1, 4]]), Y.flip([1]).shrink([[0, 2], [0, 3]])],
      ];
      for (const fusion of [true, false]) {
        const outs: Tensor[] = [], wants: Ref[] = [], names: string[] = [];
        for (const [lname, x, y, rx, ry] of layouts)
          for (const [oname, f, rf] of OPS) {
            const out = f(x, y);
            const od = out.dtype;
            const cd = oname.startsWith("cmp") ? d : od; // a comparison compares in the operands' dtype
            let want = rx.as(cd).zip(ry.as(cd), (a, b) => refCast(od, rf(a, b)));
            if (oname === "(x + y) * x") want = want.zip(rx.as(od), (s, a) => refCast(od, s * a));
            outs.push(out);
            wants.push(want);
            names.push(`${d} ${lname} ${oname} (fusion ${fusion})`);
            expect(out.shape).toEqual(want.shape);
          }
        const got = runNum(outs, { fusion });
        got.forEach((g, k) => same(g, wants[k]!.data, names[k]!));
      }
    });
  }

  test("neg, abs, relu, sign keep integer and half dtypes; float math on integers gives float32, on halves the half", () => {
    const i8 = tensorOf("int8", [-128, -5, 0, 7], [4]);
    const h = tensorOf("float16", [-1.5, 0.25, 3, 1000], [4]);
    const b = tensorOf("bfloat16", [-1.5, 0.25, 3, 1000], [4]);
    const outs = [i8.neg(), i8.abs(), i8.relu(), i8.sign(), h.neg(), h.sqrt(), h.exp(), b.mul(b), i8.sqrt(), tensorOf("uint8", [250, 3], [2]).sub(5)];
    expect(outs.map((t) => t.dtype)).toEqual(["int8", "int8", "int8", "int8", "float16", "float16", "float16", "bfloat16", "float32", "uint8"]);
    const got = runNum(outs);
    same(got[0]!, [-128, 5, 0, -7], "int8 neg wraps");
    same(got[1]!, [-128, 5, 0, 7], "int8 abs wraps");
    same(got[2]!, [0, 0, 0, 7], "relu");
    same(got[3]!, [-1, -1, 0, 1], "sign");
    same(got[4]!, [1.5, -0.25, -3, -1000], "half neg");
    // sqrt and exp: float32 math rounded to half; against float64 within half an ulp of half plus float32's error
    const sq = [NaN, 0.5, Math.sqrt(3), Math.sqrt(1000)], ex = [-1.5, 0.25, 3, 1000].map(Math.exp);
    got[5]!.forEach((g, i) => (Number.isNaN(sq[i]!) ? expect(g).toBeNaN() : expect(Math.abs(g - sq[i]!)).toBeLessThanOrEqual(Math.abs(sq[i]!) * 2 ** -11 * 1.01)));
    got[6]!.forEach((g, i) => (ex[i] === Infinity || ex[i]! > 65504 ? expect(g).toBe(Infinity) : expect(Math.abs(g - ex[i]!)).toBeLessThanOrEqual(ex[i]! * 2 ** -11 * 1.01)));
    same(got[7]!, [-1.5, 0.25, 3, 1000].map((v) => refCast("bfloat16", v * v)), "bfloat16 square");
    got[8]!.forEach((g, i) => (i < 2 ? expect(g).toBeNaN() : expect(g).toBe(Math.fround(Math.sqrt([-128, -5, 0, 7][i]!)))));
    same(got[9]!, [245, 254], "uint8 wraps");
  });
});

describe("reductions", () => {
  for (const d of ALL) {
    test(`${d}: sum, max, min over negative axes with keepdim, fused and unfused`, () => {
      const xs = values(d, 24, 20);
      const R = new Ref([2, 3, 4], xs);
      const x = tensorOf(d, xs, [2, 3, 4]);
      const acc: DType = ITEMSIZE[d] === 1 ? "int32" : d;
      for (const fusion of [true, false]) {
        const [s1, s2, mx, mn, pr] = runNum([x.sum(-1), x.sum([0, -2], true), x.max(-3), x.min(-1, true), x.permute([2, 0, 1]).sum(-1)], { fusion });
        const isF = d === "float16" || d === "bfloat16" || d === "float32";
        // integer sums are exact (wrapping); float sums accumulate in float32 (at most n·2^-24·Σ|x|
        // from float64) and float16 / bfloat16 round once at the end (half an ulp of the dtype)
        const sumCheck = (got: Float64Array, axes: number[], keep: boolean, what: string, R0: Ref = R) => {
          const exact = R0.sum(axes, keep);
          if (!isF) return same(got, exact.as(acc).data, what);
          const abs = R0.map(Math.abs).sum(axes, keep);
          const n = axes.reduce((p, a) => p * R0.shape[a]!, 1);
          const u = d === "float16" ? 2 ** -11 : d === "bfloat16" ? 2 ** -8 : 0;
          got.forEach((g, i) => {
            const bound = n * 2 ** -24 * abs.data[i]! * (1 + u) + Math.abs(exact.data[i]!) * u;
            if (!(Math.abs(g - exact.data[i]!) <= bound)) throw new Error(`${what}: [${i}] = ${g}, want ${exact.data[i]} ± ${bound}`);
            expect(g).toBe(refCast(d, g)); // a value of the dtype
          });
        };
        sumCheck(s1!, [2], false, `${d} sum(-1)`);
        sumCheck(s2!, [0, 1], true, `${d} sum([0, -2], keepdim)`);
        same(mx!, R.max([0]).data, `${d} max(-3)`);
        same(mn!, R.min([2], true).data, `${d} min(-1, keepdim)`);
        sumCheck(pr!, [2], false, `${d} sum of a permuted view`, R.permute([2, 0, 1]));
      }
    });
  }

  test("a float16 sum of 4096 values against float64: float32 accumulation, one rounding", () => {
    const r = seededRandom(5);
    const xs = Array.from({ length: 4096 }, () => refCast("float16", r() * 2 - 0.5));
    const [got] = runNum([tensorOf("float16", xs, [4096]).sum()]);
    const exact = xs.reduce((p, q) => p + q, 0), abs = xs.reduce((p, q) => p + Math.abs(q), 0);
    // float32 accumulation: at most n·2^-24·Σ|x| (blocked sums do better); then half an ulp of float16
    const bound = 4096 * 2 ** -24 * abs + Math.abs(exact) * 2 ** -11;
    expect(Math.abs(got![0]! - exact)).toBeLessThanOrEqual(bound);
    expect(got![0]).toBe(refCast("float16", got![0]!)); // a float16 value
  });

  test("a float16 and a bfloat16 matmul against float64", () => {
    for (const d of ["float16", "bfloat16"] as const) {
      const M = 9, K = 40, N = 7;
      const r = seededRandom(d === "float16" ? 7 : 8);
      const a = Array.from({ length: M * K }, () => refCast(d, r() * 2 - 1)), b = Array.from({ length: K * N }, () => refCast(d, r() * 2 - 1));
      const t = tensorOf(d, a, [M, K]).matmul(tensorOf(d, b, [K, N]));
      expect(t.dtype).toBe(d);
      const [got] = runNum([t]);
      const u = d === "float16" ? 2 ** -11 : 2 ** -8; // half an ulp, relative
      for (let i = 0; i < M; i++)
        for (let j = 0; j < N; j++) {
          let exact = 0, abs = 0;
          for (let k = 0; k < K; k++) {
            exact += a[i * K + k]! * b[k * N + j]!;
            abs += Math.abs(a[i * K + k]! * b[k * N + j]!);
          }
          // each product rounded to the dtype (u), summed in float32 (K·2^-24), the result rounded (u)
          const bound = abs * (u + K * 2 ** -24) + Math.abs(exact) * u + 1e-30;
          const g = got![i * N + j]!;
          if (!(Math.abs(g - exact) <= bound)) throw new Error(`${d} matmul [${i},${j}] = ${g}, want ${exact} ± ${bound}`);
        }
    }
  });
});

describe("the interpreter and the plan cache", () => {
  test("the interpreter of the lowered IR gives the device's bits for a program in every dtype", () => {
    const x = Tensor.from(values("float32", 24, 40), [4, 6]);
    const outs = [
      x.half().mul(x.half()).add(1), x.bfloat16().sub(0.3).mul(x.bfloat16()), x.cast("int8").mul(9), x.abs().mul(30).cast("uint8").sub(100),
      x.cmpgt(0).where(x.half(), x.bfloat16()), x.long().mul(2 ** 35).add(x.cast("int32")), x.half().sum(1), x.cast("int8").sum(0), x.bool().any(1),
      x.half().bitcast("bfloat16"), x.cast("int8").bitcast("uint8").max(1),
    ];
    for (const fusion of [true, false]) {
      const sched = schedule(outs.map((t) => t.node), { fusion });
      const arrays = interpretSchedule(sched, new Map());
      const dev = runNum(outs, { fusion });
      outs.forEach((t, i) => same(dev[i]!, hostToNumbers(t.dtype, arrays.get(t.node)! as unknown as HostArray), `interpreted ${i} (${t.dtype}, fusion ${fusion})`));
    }
  });

  test("programs that differ only in dtype get their own kernels and cached plans", () => {
    const run1 = (d: DType) => runNum([Tensor.from([0.1, 1000.7, -3.3]).cast(d).add(1)], { planCache: true })[0]!;
    const h = run1("float16"), b = run1("bfloat16"), i = run1("int8"), h2 = run1("float16");
    same(h, [0.1, 1000.7, -3.3].map((v) => refCast("float16", refCast("float16", Math.fround(v)) + 1)), "float16");
    same(b, [0.1, 1000.7, -3.3].map((v) => refCast("bfloat16", refCast("bfloat16", Math.fround(v)) + 1)), "bfloat16");
    same(i, [0.1, 1000.7, -3.3].map((v) => refCast("int8", refCast("int8", v) + 1)), "int8");
    same(h2, h, "float16 again (from the cache)");
    const name = (d: DType) => schedule([Tensor.from([1, 2]).cast(d).add(1).node]).kernels.map((k) => k.ir.name).join();
    expect(new Set(ALL.map(name)).size).toBe(ALL.length);
  });
});

describe("casts and bitcasts", () => {
  test("float32 → float16 rounds to nearest even as the runtime's Float16Array does; inf, NaN, subnormals", () => {
    const xs = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504, 65519, 65520, -65520, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 2 ** -14 - 2 ** -25, -0, Infinity, -Infinity, NaN, 0.1, -3.14159, 1e-8, 6e4];
    const f = Math.fround;
    const x = Tensor.from(Float32Array.from(xs));
    const [h, back] = runNum([x.half(), x.half().float()]);
    const oracle = (v: number): number => {
      if (!HAS_FLOAT16_ARRAY) return refCast("float16", v);
      const F16 = (globalThis as unknown as { Float16Array: new (a: number[]) => ArrayLike<number> }).Float16Array;
      return new F16([v])[0]!;
    };
    same(h!, xs.map((v) => oracle(f(v))), "float16");
    same(back!, xs.map((v) => oracle(f(v))), "float16 → float32");
    expect(Object.is(h![10], -0)).toBe(true);
  });

  test.skipIf(!HAS_FLOAT16_ARRAY)("float16 → float32 is exact for all 65,536 bit patterns (subnormals, ±0, inf, NaN payloads), fused into a reduction too", () => {
    const bits = Uint16Array.from({ length: 65536 }, (_, i) => i);
    // oracle, written out independently: sign, exponent and mantissa by arithmetic
    const want = new Float32Array(65536);
    const wantBits = new Uint32Array(want.buffer);
    for (let h = 0; h < 65536; h++) {
      const s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
      if (e === 31) wantBits[h] = ((s << 31) | 0x7f800000 | (m << 13)) >>> 0;
      else want[h] = (s ? -1 : 1) * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
    }
    // the bits go in through a Float16Array view (a bitcast from bfloat16 would quiet signalling NaNs)
    const F16 = (globalThis as unknown as { Float16Array: new (b: ArrayBuffer) => ArrayBufferView }).Float16Array;
    const h = Tensor.from(new F16(bits.buffer) as unknown as Float32Array, [65536], { dtype: "float16" });
    const plan = Tensor.prepareBatch([h.float(), h.float().reshape([256, 256]).abs().sum(1)]);
    try {
      plan.execute();
      const got = new Uint32Array(plan.readOutput<Float32Array>(0).slice().buffer);
      let bad = 0;
      for (let i = 0; i < 65536; i++) if (got[i] !== wantBits[i] && bad++ < 3) expect(`${i.toString(16)}: ${got[i]!.toString(16)}`).toBe(`${i.toString(16)}: ${wantBits[i]!.toString(16)}`);
      expect(bad).toBe(0);
      const sums = plan.readOutput<Float32Array>(1);
      for (const r of [0, 1, 100, 119, 120, 255]) {
        let acc = 0;
        for (let c = 0; c < 256; c++) acc += Math.abs(want[r * 256 + c]!);
        if (Number.isFinite(acc)) expect(Math.abs(sums[r]! - acc)).toBeLessThanOrEqual(Math.abs(acc) * 1e-6);
        else expect(Number.isNaN(acc) ? Number.isNaN(sums[r]!) : sums[r] === acc).toBe(true);
      }
    } finally {
      plan.dispose();
    }
  });

  test("float32 → bfloat16 rounds to nearest even on the float32 bits; inf and NaN kept", () => {
    const xs = [1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.4e38, -3.4e38, 1e-40, Infinity, -Infinity, NaN, 0.1, -2.5, 1234567];
    const [b] = runNum([Tensor.from(Float32Array.from(xs)).bfloat16()]);
    // oracle: integer rounding of the float32 bits (ties to even), written out independently
    const bits = new Uint32Array(Float32Array.from(xs).buffer);
    const want = Array.from(bits, (u) => {
      if ((u & 0x7fffffff) > 0x7f800000) return NaN;
      const lo = u & 0xffff, hi = u >>> 16;
      const r = lo > 0x8000 || (lo === 0x8000 && hi & 1) ? hi + 1 : hi;
      return new Float32Array(new Uint32Array([(r << 16) >>> 0]).buffer)[0]!;
    });
    same(b!, want, "bfloat16");
    expect(b![2]).toBe(Infinity); // 3.4e38 rounds past bfloat16's largest finite value
  });

  test("float → integer truncates toward zero; → bool is x != 0; integers wrap; int64 round trips", () => {
    const fl = Tensor.from([1.7, -1.7, 2.5, -0.5, 100.9, 127.99]);
    const u = Tensor.from([3.9, 250.2, 0.5]);
    const z = Tensor.from([0, -0, 0.5, NaN, -Infinity]);
    const i = Tensor.from([200, -200, 127, 128, 0, 5], [6], { dtype: "int32" });
    const big = Tensor.from(BigInt64Array.from([2n ** 32n + 5n, -(2n ** 40n), 7n]));
    const outs = [fl.cast("int8"), fl.cast("int64"), fl.half().cast("int32"), u.cast("uint8"), z.bool(), i.cast("int8"), i.cast("uint8"), i.cast("bool"), big.int(), big.float(), big.long(), i.long().mul(1 << 20).mul(1 << 20), tensorOf("bool", [0, 1], [2]).float()];
    expect(outs.map((t) => t.dtype)).toEqual(["int8", "int64", "int32", "uint8", "bool", "int8", "uint8", "bool", "int32", "float32", "int64", "int64", "float32"]);
    const got = runNum(outs);
    same(got[0]!, [1, -1, 2, 0, 100, 127], "float32 → int8");
    same(got[1]!, [1, -1, 2, 0, 100, 127], "float32 → int64");
    same(got[2]!, [1, -1, 2, 0, 100, 128], "float16 → int32 (127.99 is 128 in half)");
    same(got[3]!, [3, 250, 0], "float32 → uint8");
    same(got[4]!, [0, 0, 1, 1, 1], "float → bool");
    same(got[5]!, [-56, 56, 127, -128, 0, 5], "int32 → int8 wraps");
    same(got[6]!, [200, 56, 127, 128, 0, 5], "int32 → uint8 wraps");
    same(got[7]!, [1, 1, 1, 1, 0, 1], "int32 → bool");
    same(got[8]!, [5, 0, 7], "int64 → int32 wraps");
    same(got[9]!, [2 ** 32 + 5, -(2 ** 40), 7].map(Math.fround), "int64 → float32");
    same(got[10]!, [2 ** 32 + 5, -(2 ** 40), 7], "int64 stays");
    same(got[11]!, [200, -200, 127, 128, 0, 5].map((v) => v * 2 ** 40), "int64 products past 2^32");
    same(got[12]!, [0, 1], "bool → float32");
  });

  test("bitcasts: same bytes in the other dtype, round trips exact; other sizes and bool refuse", () => {
    const f = Float32Array.from([1.5, -0, NaN, 3.4e38, -1e-42]);
    const bits = Array.from(new Int32Array(f.buffer));
    const h = Tensor.from(hostFromNumbers("float16", [1.5, -2, 65504, 2 ** -24]), [4], { dtype: "float16" });
    const hBits = Array.from(new Uint16Array(hostFromNumbers("float16", [1.5, -2, 65504, 2 ** -24]).buffer));
    const plan = Tensor.prepareBatch([Tensor.from(f).bitcast("int32"), Tensor.from(f).bitcast("int32").bitcast("float32"), h.bitcast("bfloat16"), h.bitcast("bfloat16").bitcast("float16"), tensorOf("int8", [-1, -128, 5], [3]).bitcast("uint8"), tensorOf("uint8", [255, 128], [2]).bitcast("int8")]);
    try {
      plan.execute();
      expect(Array.from(plan.readOutput<Int32Array>(0))).toEqual(bits);
      expect(Array.from(new Int32Array(plan.readOutput<Float32Array>(1).buffer))).toEqual(bits);
      expect(Array.from(plan.readOutput<Uint16Array>(2))).toEqual(hBits);
      const back = plan.readOutput<HostArray>(3);
      expect(Array.from(new Uint16Array(back.buffer, back.byteOffset, 4))).toEqual(hBits);
      expect(Array.from(plan.readOutput<Uint8Array>(4))).toEqual([255, 128, 5]);
      expect(Array.from(plan.readOutput<Int8Array>(5))).toEqual([-1, -128]);
    } finally {
      plan.dispose();
    }
    // the interpreter of the lowered IR agrees (bitcasts fold and evaluate on the host too)
    const bc = Tensor.from(f).bitcast("int32");
    expect(Array.from(interpretSchedule(schedule([bc.node]), new Map()).get(bc.node)!)).toEqual(bits);
    for (const [what, fn] of [
      ["float32 → int8", () => Tensor.from([1]).bitcast("int8")],
      ["int64 → float32", () => tensorOf("int64", [1], [1]).bitcast("float32")],
      ["uint8 → bool", () => tensorOf("uint8", [1], [1]).bitcast("bool")],
      ["bool → int8", () => tensorOf("bool", [1], [1]).bitcast("int8")],
      ["float64", () => Tensor.from([1]).bitcast("float64" as DType)],
    ] as const)
      expectInvalid(fn, `bitcast ${what}`);
  });

  test("bf16 bits on the host match the device's rounding", () => {
    const xs = [0.1, -7.3, 1e30, 3e-39];
    const [dev] = runNum([Tensor.from(Float32Array.from(xs)).bfloat16()]);
    same(dev!, xs.map((v) => refCast("bfloat16", Math.fround(v))), "bf16");
    expect(xs.map((v) => bf16Bits(Math.fround(v)))).toEqual(Array.from(new Uint16Array(hostFromNumbers("bfloat16", xs.map(Math.fround)).buffer)));
  });
});

describe("host typed arrays", () => {
  const natural: [DType, () => HostArray][] = [
    ["float32", () => Float32Array.from([1.5, -2])],
    ["int32", () => Int32Array.from([7, -9])],
    ["float16", () => hostFromNumbers("float16", [0.5, -1.25])],
    ["bfloat16", () => hostFromNumbers("bfloat16", [0.5, -1.25])],
    ["int8", () => Int8Array.from([-7, 100])],
    ["uint8", () => Uint8Array.from([200, 3])],
    ["bool", () => Uint8Array.from([1, 0])],
    ["int64", () => BigInt64Array.from([2n ** 50n, -3n])],
  ];

  test("Tensor.from, run, setWeights, readOutput and realize take and give each dtype's array", async () => {
    expect(HAS_FLOAT16_ARRAY).toBe(typeof (globalThis as { Float16Array?: unknown }).Float16Array === "function");
    for (const [d, make] of natural) {
      const data = make();
      const t = Tensor.from(data, [2], { dtype: d, name: "x" });
      expect(t.dtype).toBe(d);
      const arr = t.toArray<HostArray>();
      expect(arr.constructor).toBe(data.constructor);
      expect(Array.from(arr as ArrayLike<number>)).toEqual(Array.from(data as ArrayLike<number>));
      // a computed tensor of the dtype (x · 1 keeps integer and half dtypes; bool counts in int32)
      const y = d === "bool" ? t.maximum(t) : t.mul(1);
      expect(y.dtype).toBe(d);
      const plan = y.prepare();
      try {
        const [out] = (await plan.run([make()])) as HostArray[];
        expect(out!.constructor).toBe(data.constructor);
        expect(Array.from(out as ArrayLike<number>)).toEqual(Array.from(data as ArrayLike<number>));
        plan.setWeights({ x: make() });
        plan.execute();
        expect(Array.from(plan.readOutput<HostArray>(0) as ArrayLike<number>)).toEqual(Array.from(data as ArrayLike<number>));
        // the wrong typed array: INVALID_VALUE, never a silent conversion
        const wrong = d === "int32" ? new Float32Array(2) : new Int32Array(2);
        await expect(plan.run([wrong as unknown as Float32Array])).rejects.toMatchObject({ code: Status.INVALID_VALUE });
        expectInvalid(() => plan.setWeights({ x: wrong as unknown as Float32Array }), `${d} setWeights with a ${wrong.constructor.name}`);
      } finally {
        plan.dispose();
      }
      const r = y.realize();
      expect(r.node.op).toBe("buffer");
      expect(r.toArray<HostArray>().constructor).toBe(data.constructor);
    }
  });

  test("conversions by value from Float32Array, Int32Array, Float64Array and number[]", () => {
    const got = runNum([
      Tensor.from(Float32Array.from([1.7, -1.7]), [2], { dtype: "int8" }),
      Tensor.from([0.1, 65519], [2], { dtype: "float16" }),
      Tensor.from(Float64Array.from([2 ** 40 + 0.5, -3]), [2], { dtype: "int64" }),
      Tensor.from(Int32Array.from([300, -1]), [2], { dtype: "uint8" }),
      Tensor.from([0, 2], [2], { dtype: "bool" }),
      Tensor.full([2], 3.5, { dtype: "bfloat16" }),
      Tensor.arange(0, 4, 1, { dtype: "int64" }).mul(2 ** 33),
      Tensor.arange(0, 3, 1, { dtype: "float16" }).add(0.5),
    ]);
    same(got[0]!, [1, -1], "int8");
    same(got[1]!, [refCast("float16", 0.1), 65504], "float16");
    same(got[2]!, [2 ** 40, -3], "int64");
    same(got[3]!, [44, 255], "uint8");
    same(got[4]!, [0, 1], "bool");
    same(got[5]!, [3.5, 3.5], "bfloat16 full");
    same(got[6]!, [0, 1, 2, 3].map((v) => v * 2 ** 33), "int64 arange");
    same(got[7]!, [0.5, 1.5, 2.5], "float16 arange");
  });

  test("bad dtypes and arrays are GpuError INVALID_VALUE", () => {
    for (const [what, fn] of [
      ["zeros float64", () => Tensor.zeros([2], { dtype: "float64" as DType })],
      ["cast int16", () => Tensor.from([1]).cast("int16" as DType)],
      ["from Uint16Array without a dtype", () => Tensor.from(new Uint16Array(2))],
      ["from Int16Array", () => Tensor.from(new Int16Array(2) as unknown as Int32Array, [2], { dtype: "int8" })],
      ["from Uint8Array as float16", () => Tensor.from(new Uint8Array(2), [2], { dtype: "float16" })],
      ["from BigInt64Array as int32", () => Tensor.from(new BigInt64Array(2), [2], { dtype: "int32" })],
      ["arange uint32", () => Tensor.arange(3, undefined, 1, { dtype: "uint32" as DType })],
    ] as const) {
      let err: unknown;
      try {
        fn();
      } catch (e) {
        err = e;
      }
      if (!(err instanceof GpuError)) throw new Error(`${what}: expected GpuError, got ${String(err)}`);
      expect(err.code).toBe(Status.INVALID_VALUE);
      expect(err.message.length).toBeGreaterThan(10);
    }
  });

  test("where and maskedFill take bool conditions; argmax and oneHot stay int32", () => {
    const x = tensorOf("float16", [1, -2, 3, -4], [4]);
    const m = x.cmplt(0);
    expect(m.dtype).toBe("bool");
    const got = runNum([m.where(x, 0), x.maskedFill(m, 9), x.argmax(), tensorOf("int32", [1, 0], [2]).oneHot(2), m.bool().int()]);
    same(got[0]!, [0, -2, 0, -4], "where");
    same(got[1]!, [1, 9, 3, 9], "maskedFill");
    same(got[2]!, [2], "argmax");
    same(got[3]!, [0, 1, 1, 0], "oneHot");
    same(got[4]!, [0, 1, 0, 1], "bool → int32");
    // topk keeps an integer dtype (its fill is the dtype's own extreme)
    const i8 = tensorOf("int8", [5, -100, 7, 3], [4]);
    const [hi, lo] = [i8.topk(2)[0]!, i8.topk(2, -1, false)[0]!];
    expect([hi.dtype, lo.dtype]).toEqual(["int8", "int8"]);
    const [h, l] = runNum([hi, lo]);
    same(h!, [7, 5], "int8 top 2");
    same(l!, [-100, 3], "int8 bottom 2");
  });
});

describe("safetensors", () => {
  test("every dtype round trips under its own format name", () => {
    const dir = mkdtempSync(join(tmpdir(), "bungpu-dtypes-"));
    try {
      const path = join(dir, "all.safetensors");
      const src: Record<string, Tensor> = {};
      // computed values (a kernel writes each), in their dtypes
      for (const d of ALL) {
        const t = tensorOf(d, values(d, 6, 30), [2, 3]);
        src[d] = d === "bool" ? t.maximum(t) : t.mul(1);
      }
      Tensor.toSafetensors(path, src);
      const bytes = readFileSync(path);
      const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
      const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n))) as Record<string, { dtype: string }>;
      expect(Object.fromEntries(ALL.map((d) => [d, header[d]!.dtype]))).toEqual({ float32: "F32", int32: "I32", float16: "F16", bfloat16: "BF16", int8: "I8", uint8: "U8", bool: "BOOL", int64: "I64" });
      const back = Tensor.fromSafetensors(path);
      for (const d of ALL) {
        expect(back[d]!.dtype).toBe(d);
        expect(back[d]!.shape).toEqual([2, 3]);
        same(hostToNumbers(d, back[d]!.toArray<HostArray>()), values(d, 6, 30), `${d} round trip`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
