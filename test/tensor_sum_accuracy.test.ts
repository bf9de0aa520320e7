// Float32 sums are blocked: each accumulator takes at most 4096 values before it is added into a
// running total, so the error grows with 4096 + n/4096 instead of n. Checked here on the CPU:
// a float32 sum of 2^25 ones is exactly 2^25 (a plain running sum stops at 2^24), on the
// full-tensor path, over an axis (narrow and wide outputs) and through matmul, fused and unfused;
// and sums of 2^20..2^24 values uniform in [0, 1) (all positive: the case where a running sum's
// error grows fastest) agree with the float64 sum within |err| <= 1e-6 · Σ|x| per output (a
// plain float32 running sum of 2^24 such values is off by tens of percent).
import { describe, expect, test } from "bun:test";
import { seededRandom } from "../src/tensor/reference";
import { Tensor } from "../src/tensor";
import { run } from "./tensor_helpers";

const TWO25 = 2 ** 25;

describe("float32 sum of 2^25 ones is exact", () => {
  for (const fusion of [true, false]) {
    test(`full tensor, sum and mean, fusion ${fusion}`, () => {
      const x = Tensor.ones([TWO25]);
      const [s, m] = run([x.sum(), x.mean()], { fusion });
      expect(s![0]).toBe(TWO25);
      expect(m![0]).toBe(1);
    });
  }

  test("2^28 ones (the constant fused into the sum; 8 accumulator lanes alone would stop at 2^27)", () => {
    const [s] = run([Tensor.ones([2 ** 28]).sum()]);
    expect(s![0]).toBe(2 ** 28);
  });

  test("a [1, 2^25]·[2^25, 1] matmul of ones", () => {
    const [d] = run([Tensor.ones([1, TWO25]).matmul(Tensor.ones([TWO25, 1]))]);
    expect(d![0]).toBe(TWO25);
  });

  test("over an axis: [2^25, 16] ones summed over axis 0 (a wide output tile)", () => {
    const [s] = run([Tensor.ones([TWO25, 16]).sum(0)]);
    expect(Array.from(s!)).toEqual(new Array(16).fill(TWO25));
  });

  test("over inner and outer reduce axes: [2^13, 2^12] and [2^13, 2^12, 2] ones summed over the first two", () => {
    const [s, t] = run([Tensor.ones([2 ** 13, 2 ** 12]).sum([0, 1]), Tensor.ones([2 ** 13, 2 ** 12, 2]).sum([0, 1])]);
    expect(s![0]).toBe(TWO25);
    expect(Array.from(t!)).toEqual([TWO25, TWO25]);
  });
});

/** Sums of `data` viewed as [outer, n, inner] over the middle axis, in float64, and of |x|. */
function refSums(data: Float32Array, outer: number, n: number, inner: number): { sum: number[]; abs: number[] } {
  const sum = new Array<number>(outer * inner).fill(0);
  const abs = new Array<number>(outer * inner).fill(0);
  for (let o = 0; o < outer; o++)
    for (let k = 0; k < n; k++)
      for (let i = 0; i < inner; i++) {
        const v = data[(o * n + k) * inner + i]!;
        sum[o * inner + i]! += v;
        abs[o * inner + i]! += Math.abs(v);
      }
  return { sum, abs };
}

function expectAccurate(got: ArrayLike<number>, want: { sum: number[]; abs: number[] }, what: string): void {
  expect(got.length).toBe(want.sum.length);
  for (let i = 0; i < got.length; i++) {
    const err = Math.abs(got[i]! - want.sum[i]!);
    if (!(err <= 1e-6 * want.abs[i]!)) throw new Error(`${what}: output ${i}: got ${got[i]}, want ${want.sum[i]} (err ${err}, bound ${1e-6 * want.abs[i]!})`);
  }
}

describe("float32 sums of random values within 1e-6·Σ|x| of the float64 sum", () => {
  const rnd = seededRandom(13);
  const N = 2 ** 24;
  const data = new Float32Array(N);
  for (let i = 0; i < N; i++) data[i] = rnd();

  for (const fusion of [true, false]) {
    test(`full tensor of 2^20 and 2^24, fusion ${fusion}`, () => {
      const small = data.subarray(0, 2 ** 20);
      const [a, b] = run([Tensor.from(small, [2 ** 20]).sum(), Tensor.from(data, [N]).sum()], { fusion });
      expectAccurate(a!, refSums(small, 1, 2 ** 20, 1), "2^20");
      expectAccurate(b!, refSums(data, 1, N, 1), "2^24");
    });

    test(`over an axis: [4, 2^22] over 1, [16, 2^20] over 1 (keepdim), [2^20, 16] over 0, fusion ${fusion}`, () => {
      const t1 = Tensor.from(data, [4, 2 ** 22]);
      const t2 = Tensor.from(data, [16, 2 ** 20]);
      const t3 = Tensor.from(data, [2 ** 20, 16]);
      const [a, b, c, d] = run([t1.sum(1), t2.sum(1, true), t2.sum(1), t3.sum(0)], { fusion });
      expectAccurate(a!, refSums(data, 4, 2 ** 22, 1), "[4, 2^22].sum(1)");
      expectAccurate(b!, refSums(data, 16, 2 ** 20, 1), "[16, 2^20].sum(1, keepdim)");
      expectAccurate(c!, refSums(data, 16, 2 ** 20, 1), "[16, 2^20].sum(1)");
      expectAccurate(d!, refSums(data, 1, 2 ** 20, 16), "[2^20, 16].sum(0)");
    });

    test(`through matmul: [1, 2^22]·[2^22, 1] and [2, 2^20]·[2^20, 16], fusion ${fusion}`, () => {
      const ones = (n: number) => new Float32Array(n).fill(1);
      const K1 = 2 ** 22, K2 = 2 ** 20;
      const [a, b] = run([
        Tensor.from(data.subarray(0, K1), [1, K1]).matmul(Tensor.from(ones(K1), [K1, 1])),
        Tensor.from(ones(2 * K2), [2, K2]).matmul(Tensor.from(data, [K2, 16])),
      ], { fusion });
      expectAccurate(a!, refSums(data.subarray(0, K1), 1, K1, 1), "dot 2^22");
      const r = refSums(data, 1, K2, 16);
      expectAccurate(b!, { sum: [...r.sum, ...r.sum], abs: [...r.abs, ...r.abs] }, "[2, 2^20]·[2^20, 16]");
    });
  }
});
