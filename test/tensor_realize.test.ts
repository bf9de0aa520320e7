// Constants realized once: a random source read by a reduction is computed into a buffer by a
// kernel of its own, not regenerated inside the reduction loop; cheap constants stay fused; and
// Tensor.realize() turns any tensor into data explicitly.
import { afterAll, describe, expect, test } from "bun:test";
import { Device, GpuError, Status, Tensor, Variable } from "../src";
import { interpretSchedule } from "../src/tensor/interp";
import { schedule } from "../src/tensor/prepare";

const dev = Device.open("cpu");
afterAll(() => dev.dispose());

const M = 24, K = 40, N = 16;

/** float64 matmul of row-major a[M,K] · b[K,N]. */
function matmul64(a: ArrayLike<number>, b: ArrayLike<number>, m: number, k: number, n: number): Float64Array {
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let p = 0; p < k; p++) s += a[i * k + p]! * b[p * n + j]!;
      out[i * n + j] = s;
    }
  return out;
}

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, tol: number): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs(got[i]! - want[i]!);
    if (d > tol * (1 + Math.abs(want[i]!))) throw new Error(`element ${i}: got ${got[i]}, want ${want[i]}`);
  }
}

/** Calls of the normal generator in a kernel's source (calls pass the seed as a literal; the prelude's definition does not count). */
const randnCount = (src: string): number => (src.match(/bg_randn\(\d+u/g) ?? []).length;

describe("random sources read by a reduction are realized once", () => {
  for (const fusion of [true, false])
    test(`matmul of two randn matrices (fusion ${fusion ? "on" : "off"}): same values, generator outside the reduction`, () => {
      const a = Tensor.randn([M, K], { seed: 11 });
      const b = Tensor.randn([K, N], { seed: 12 });
      // the random values themselves, each realized alone (element i depends only on seed and i)
      const av = a.toArray({ device: dev });
      const bv = b.toArray({ device: dev });
      expect(av.length).toBe(M * K);
      const plan = a.matmul(b).prepare({ device: dev, fusion });
      try {
        plan.execute();
        expectClose(plan.readOutput(0), matmul64(av, bv, M, K, N), 1e-5);
        const ks = plan.preparedKernels();
        // the reduction reads its operands from buffers: no generator inside its loop
        const red = ks.filter((k) => k.ir.reduce);
        expect(red.length).toBe(1);
        expect(randnCount(red[0]!.source)).toBe(0);
        if (fusion) {
          // the random sources were computed once at prepare and are the plan's constants (its own
          // buffers 0 and 1, not inputs a run takes): its only kernel is the matmul reading both
          expect(ks.length).toBe(1);
          expect(red[0]!.signature.filter((s) => s === "buffer").length).toBe(3);
          expect(plan.inputNames).toEqual([]);
          expect(Array.from(plan.bufferAt(0)!.read(new Float32Array(M * K)))).toEqual(Array.from(av));
          expect(Array.from(plan.bufferAt(1)!.read(new Float32Array(K * N)))).toEqual(Array.from(bv));
          // executing again gives the same values (nothing is regenerated or lost)
          plan.execute();
          expectClose(plan.readOutput(0), matmul64(av, bv, M, K, N), 1e-5);
        }
      } finally {
        plan.dispose();
      }
    });

  test("a program of the same structure prepared again (the plan cache) computes its own random values", () => {
    for (const seed of [31, 32, 31]) {
      const a = Tensor.randn([M, K], { seed });
      const b = Tensor.rand([K, N], { seed: seed + 100 });
      const plan = a.matmul(b).prepare({ device: dev });
      try {
        plan.execute();
        expect(plan.preparedKernels().length).toBe(1);
        expectClose(plan.readOutput(0), matmul64(a.toArray({ device: dev }), b.toArray({ device: dev }), M, K, N), 1e-5);
      } finally {
        plan.dispose();
      }
    }
  });

  test("a random source that is also an output stays a kernel of the plan", () => {
    const a = Tensor.randn([M, K], { seed: 41 });
    const plan = Tensor.prepareBatch([a, a.sum(1)], { device: dev });
    try {
      plan.execute();
      const av = plan.readOutput(0);
      expect(Array.from(av)).toEqual(Array.from(Tensor.randn([M, K], { seed: 41 }).toArray({ device: dev })));
      const sums = Array.from({ length: M }, (_, i) => Array.from(av.slice(i * K, (i + 1) * K)).reduce((p, q) => p + q, 0));
      expectClose(plan.readOutput(1), sums, 1e-5);
    } finally {
      plan.dispose();
    }
  });

  test("the interpreter agrees with the device on the realized schedule", () => {
    const a = Tensor.randn([M, K], { seed: 21 });
    const b = Tensor.rand([K, N], { seed: 22 });
    const out = a.matmul(b);
    const sched = schedule([out.node]);
    expect(sched.kernels.length).toBe(3);
    const ref = interpretSchedule(sched, new Map()).get(out.node)!;
    expectClose(out.toArray({ device: dev }), ref, 1e-5);
    expectClose(out.toArray({ device: dev }), matmul64(a.toArray({ device: dev }), b.toArray({ device: dev }), M, K, N), 1e-5);
  });

  test("a random source feeding a reduction through elementwise work and a view is realized too", () => {
    const r = Tensor.rand([K, M], { seed: 5 });
    const out = r.mul(2).sub(1).transpose().matmul(Tensor.ones([K, N]));
    const ks = schedule([out.node]).kernels;
    expect(ks.length).toBe(2);
    expect(ks[0]!.target.op).toBe("rand");
    const rv = r.toArray({ device: dev });
    const t = new Float64Array(M * K);
    for (let i = 0; i < M; i++) for (let p = 0; p < K; p++) t[i * K + p] = 2 * rv[p * M + i]! - 1;
    expectClose(out.toArray({ device: dev }), matmul64(t, new Float64Array(K * N).fill(1), M, K, N), 1e-5);
  });

  test("coarse work count: the generator runs once per element, not once per multiply-add", () => {
    // per execute the generated random values are M·K + K·N (two kernels over those elements),
    // where inlined they were 2·M·N·K: count the elements each kernel's grid covers
    const a = Tensor.randn([M, K], { seed: 1 });
    const b = Tensor.randn([K, N], { seed: 2 });
    const ks = schedule([a.matmul(b).node]).kernels;
    const gens = ks.filter((k) => k.target.op === "rand");
    const elems = gens.reduce((s, k) => s + k.target.shape.reduce<number>((p, d) => p * (d as number), 1), 0);
    expect(elems).toBe(M * K + K * N);
    expect(elems).toBeLessThan(2 * M * N * K);
  });

  test("random values read only elementwise stay fused; cheap constants (full, arange) stay inlined in reductions", () => {
    expect(schedule([Tensor.randn([8, 8], { seed: 3 }).add(1).node]).kernels.length).toBe(1);
    const x = Tensor.from(new Float32Array(K * N).fill(0.5), [K, N]);
    expect(schedule([Tensor.ones([M, K]).matmul(x).node]).kernels.length).toBe(1);
    expect(schedule([Tensor.arange(M * K).reshape([M, K]).cast("float32").matmul(x).node]).kernels.length).toBe(1);
    expect(schedule([Tensor.full([M, K], 2).matmul(x).node]).kernels.length).toBe(1);
  });
});

describe("Tensor.realize", () => {
  test("gives a tensor backed by data with the same values; prepared plans read it as an input", () => {
    const r = Tensor.randn([M, K], { seed: 9 });
    const d = r.realize({ device: dev });
    expect(d).toBeInstanceOf(Tensor);
    expect(d.node.op).toBe("buffer");
    expect(d.shape).toEqual([M, K]);
    expect(d.dtype).toBe("float32");
    expect(Array.from(d.toArray({ device: dev }))).toEqual(Array.from(r.toArray({ device: dev })));
    const w = Tensor.from(new Float32Array(K * N).fill(1), [K, N]);
    const plan = d.matmul(w).prepare({ device: dev });
    try {
      expect(plan.preparedKernels().length).toBe(1);
      expect(randnCount(plan.preparedKernels()[0]!.source)).toBe(0);
      expect(plan.inputNames.length).toBe(2);
    } finally {
      plan.dispose();
    }
  });

  test("int32 and computed tensors; data is returned as it is", () => {
    const i = Tensor.arange(6).reshape([2, 3]).mul(3).realize();
    expect(i.dtype).toBe("int32");
    expect(i.node.op).toBe("buffer");
    expect(i.toList()).toEqual([0, 3, 6, 9, 12, 15]);
    expect(i.realize()).toBe(i);
    const z = Tensor.full([], 4).realize();
    expect(z.shape).toEqual([]);
    expect(z.toList()).toEqual([4]);
  });

  test("a symbolic shape is refused with INVALID_VALUE", () => {
    const v = new Variable("n", 1, 8).bind(3);
    let err: unknown;
    try {
      Tensor.arange(v).realize();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(GpuError);
    expect((err as GpuError).code).toBe(Status.INVALID_VALUE);
  });
});
