// Products and reductions whose rows are a Variable (a prompt's length) on the CPU backend: values
// at bound values around the 6-row tile and the 32-column panel (1, 5, 31, 32, 33, the maximum)
// against the float64 reference, fusion on and off; the generated C keeps the vector tile for
// them, and a transposed weight (x·Wᵀ) is gathered into the packed panel instead of gathered per
// row tile; attention's tiles lie within one head; readOutput of an output short in an inner dimension.
import { describe, expect, test } from "bun:test";
import { Device } from "../src";
import { Ref, seededRandom } from "../src/tensor/reference";
import { Tensor, Variable, generate, schedule, type ExecutionPlan } from "../src/tensor";

// 6-row tiles: one of them (T <= 6) reads the weight in place, more share a packed panel
const MAX = 64, K = 48, N = 64;
// the CPU backend's kernels are what these tests look at, whatever the default device is
const cpu = Device.open("cpu");
const VALUES = [1, 5, 31, 32, 33, 49, MAX];

function randRef(shape: number[], seed: number): Ref {
  const r = seededRandom(seed);
  return Ref.fill(shape, () => r() * 2 - 1);
}
const toTensor = (r: Ref) => Tensor.from(Float32Array.from(r.data), r.shape);

function expectClose(got: ArrayLike<number>, want: Ref, tol: number, what: string): void {
  expect({ what, n: got.length }).toEqual({ what, n: want.data.length });
  let worst = 0, at = -1;
  for (let i = 0; i < got.length; i++) {
    const d = Math.abs(got[i]! - want.data[i]!) / (1 + Math.abs(want.data[i]!));
    if (!(d <= worst)) [worst, at] = [d, i];
  }
  expect({ what, at, worst: worst <= tol ? "ok" : worst }).toEqual({ what, at, worst: "ok" });
}

const gelu = (v: number) => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)));

describe("variable-row products and reductions (CPU)", () => {
  const xr = randRef([MAX, K], 1), wr = randRef([K, N], 2), wtr = randRef([N, K], 3), br = randRef([N], 4);
  const gr = randRef([K], 5), hr = randRef([K], 6);

  for (const fusion of [true, false]) {
    test(`x·W + b (gelu), x·Wᵀ, layerNorm, row sums and an inner-variable output at T = ${VALUES.join(", ")}, fusion ${fusion ? "on" : "off"}`, () => {
      const T = new Variable("T", 1, MAX).bind(MAX);
      const x = toTensor(xr).shrink([[0, T], null]);
      const outs = [
        x.matmul(toTensor(wr)).add(toTensor(br)).gelu("tanh"),
        x.matmul(toTensor(wtr).transpose(0, 1)),
        x.layerNorm({ weight: toTensor(gr), bias: toTensor(hr), eps: 1e-5 }),
        x.mul(x).sum(1),
        x.matmul(toTensor(wtr).transpose(0, 1)).transpose(0, 1).contiguous(), // [N, T]: short in its last dimension
      ];
      const plan: ExecutionPlan = Tensor.prepareBatch(outs, { fusion, planCache: false, device: cpu });
      try {
        // with fusion, x·Wᵀ's weight is gathered into the packed panel (the path these values check)
        expect(plan.kernels().some((k) => k.source.includes("for (int rb = 0; rb < R0; rb += 16)"))).toBe(fusion);
        for (const t of VALUES) {
          plan.executeWithVars({ T: t });
          const xs = xr.shrink([[0, t], [0, K]]);
          const wT = wtr.permute([1, 0]);
          const ln = xs.layerNorm(1, 1e-5).zip(gr.broadcastTo([t, K]), (a, b) => a * b).zip(hr.broadcastTo([t, K]), (a, b) => a + b);
          const want = [
            xs.matmul(wr).zip(br.broadcastTo([t, N]), (a, b) => a + b).map(gelu),
            xs.matmul(wT),
            ln,
            xs.zip(xs, (a, b) => a * b).sum([1]),
            xs.matmul(wT).permute([1, 0]),
          ];
          want.forEach((w, i) => {
            expect({ t, i, shape: plan.outputShape(i) }).toEqual({ t, i, shape: w.shape });
            expectClose(plan.readOutput(i) as Float32Array, w, 2e-5, `T=${t} output ${i} fusion ${fusion}`);
          });
        }
      } finally {
        plan.dispose();
      }
    });
  }

  for (const fusion of [true, false]) {
    test(`causal multi-head attention over T = ${VALUES.join(", ")} rows (tiles split per head), fusion ${fusion ? "on" : "off"}`, () => {
      const H = 2, D = 32, C = H * D; // K = 48 inputs -> [T, 3C]
      const wqkv = randRef([K, 3 * C], 7);
      const T = new Variable("T", 1, MAX).bind(MAX);
      const qkv = toTensor(xr).shrink([[0, T], null]).matmul(toTensor(wqkv)); // [T, 3C]
      const part = (j: number) => qkv.shrink([null, [j * C, (j + 1) * C]]).reshape([T, H, D]).permute([1, 0, 2]); // [H, T, D]
      const scores = part(0).matmul(part(1).transpose(1, 2)); // [H, T, T]: keys depend on the head and the column
      const att = part(0).scaledDotProductAttention(part(1), part(2), { isCausal: true }); // [H, T, D]
      const plan = Tensor.prepareBatch([scores, att], { fusion, planCache: false, device: cpu });
      try {
        if (fusion) expect(plan.kernels().some((k) => k.source.includes("const int NT1 = (D1 + 5) / 6;"))).toBe(true);
        for (const t of VALUES) {
          plan.executeWithVars({ T: t });
          const q3 = xr.shrink([[0, t], [0, K]]).matmul(wqkv);
          const head = (j: number, h: number) => q3.shrink([[0, t], [j * C + h * D, j * C + (h + 1) * D]]);
          const sc: number[] = [], at: number[] = [];
          for (let h = 0; h < H; h++) {
            const s = head(0, h).matmul(head(1, h).permute([1, 0]));
            sc.push(...s.data);
            const masked = Ref.fill([t, t], ([i, j]) => (j! <= i! ? s.at([i!, j!]) / Math.sqrt(D) : -Infinity));
            at.push(...masked.softmax(1).matmul(head(2, h)).data);
          }
          expectClose(plan.readOutput(0) as Float32Array, new Ref([H, t, t], sc), 2e-5, `T=${t} scores fusion ${fusion}`);
          expectClose(plan.readOutput(1) as Float32Array, new Ref([H, t, D], at), 2e-5, `T=${t} attention fusion ${fusion}`);
        }
      } finally {
        plan.dispose();
      }
    });
  }

  for (const fusion of [true, false]) {
    test(`the vector tile serves a variable-row product, and a transposed weight is packed by a gather (fusion ${fusion ? "on" : "off"})`, () => {
      const T = new Variable("T", 1, 256).bind(32);
      const x = Tensor.from(new Float32Array(256 * 256), [256, 256]).shrink([[0, T], null]);
      const w = Tensor.from(new Float32Array(256 * 1024), [256, 1024]);
      const wt = Tensor.from(new Float32Array(2048 * 256), [2048, 256]).transpose(0, 1);
      const gen = (t: Tensor) => {
        const ks = schedule([t.node], { fusion }).kernels.filter((k) => k.ir.reduce);
        expect(ks.length).toBe(1);
        return generate(ks[0]!.ir, "c");
      };
      for (const g of [gen(x.matmul(w)), gen(x.matmul(wt))]) {
        const b = g.body;
        expect(g.geometry).toMatchObject({ TR: 6, TC: 32, L: 1 });
        // the 6×32 register tile (16-lane accumulators where AVX-512 is there, else 8-lane), rows a Variable
        const has = (s: string | RegExp) => (typeof s === "string" ? b.includes(s) : s.test(b));
        expect({ var: has("const int D0 = v_T;"), vec16: has("#if BG_VEC16"), tile: has("bg_f16 a5_0 = bg_bc16(0.0f), a5_1 = bg_bc16(0.0f);") }).toEqual({ var: true, vec16: true, tile: true });
        // with fusion, the product reads W from a packed panel; without, the sum reads the realized products
        expect({ fusion, packed: has(/bg_ld16\(&bg_pk\[r0 \* 32 \+ 16\]\)/) }).toEqual({ fusion, packed: fusion });
        // the launch covers the bound rows, not the maximum
        expect(g.launch(new Map([["T", 32]])).grid).toBe(Math.ceil(32 / 6) * Math.ceil((g.geometry.dims.at(-1) as number) / 32));
      }
      if (fusion) {
        const t = gen(x.matmul(wt)).body;
        // Wᵀ's columns lie 256 floats apart: with several row tiles gathered once per panel,
        // with one read in place (16 scalar loads a vector)
        const packedAt = t.indexOf("if (NRT > 1) {"), inPlaceAt = t.indexOf("} else { /* one row tile");
        expect({ branch: packedAt >= 0, gatherPack: t.indexOf("for (int rb = 0; rb < R0; rb += 16)") > packedAt, laneGatherAfter: t.indexOf("(bg_f16){b2[", inPlaceAt) > inPlaceAt }).toEqual({
          branch: true,
          gatherPack: true,
          laneGatherAfter: true,
        });
      }
    });
  }
});

describe("CPU exp (softmax's exponentials)", () => {
  test("elementwise exp is the vectorizable bg_expf: within 1 ulp of float64 over [-110, 95], subnormal results, 0 and inf past the ends, NaN kept", () => {
    const n = 1 << 16;
    const special = [Infinity, -Infinity, NaN, 0, -0, 88.72283, 88.7229, 89, 100, -87.33, -88, -100, -103.2, -103.98, -104, -110, 1e-8, -1e-8, 1e-30];
    const xs = new Float32Array(n + special.length);
    for (let i = 0; i < n; i++) xs[i] = -110 + (205 * i) / n;
    xs.set(special, n);
    const y = Tensor.from(xs, [xs.length]).exp();
    const plan = y.prepare({ planCache: false, device: cpu });
    try {
      expect(plan.kernels()[0]!.source).toContain("bg_expf(");
      plan.execute();
      const got = plan.readOutput(0) as Float32Array;
      const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
      const ulpOf = (w: number) => {
        f32[0] = w;
        u32[0]! += 1;
        return f32[0]! - Math.fround(w) || 1.401298464324817e-45;
      };
      let worst = 0, at = NaN;
      const bad: string[] = [];
      for (let i = 0; i < xs.length; i++) {
        const want = Math.exp(xs[i]!), w32 = Math.fround(want), g = got[i]!;
        if (Number.isNaN(want) || !Number.isFinite(w32) || w32 === 0) {
          // NaN stays NaN; past float32's range exactly inf or 0
          if (!Object.is(g, w32)) bad.push(`exp(${xs[i]}) = ${g}, want ${w32}`);
          continue;
        }
        const e = Math.abs(g - want) / ulpOf(want);
        if (e > worst) [worst, at] = [e, xs[i]!];
      }
      expect(bad).toEqual([]);
      expect({ worst: worst <= 1 ? "within 1 ulp" : worst, at: worst <= 1 ? null : at }).toEqual({ worst: "within 1 ulp", at: null });
    } finally {
      plan.dispose();
    }
  });

  test("softmax: the reduce body keeps libm's expf, the elementwise part uses bg_expf; values against float64", () => {
    const xr = randRef([24, 40], 9).map((v) => v * 30);
    const plan = toTensor(xr).softmax(-1).prepare({ planCache: false, device: cpu });
    try {
      const srcs = plan.kernels().map((k) => k.source.slice(k.source.indexOf("BG_KERNEL")));
      const sum = srcs.find((s) => s.startsWith("BG_KERNEL(sum_"))!, div = srcs.find((s) => s.includes("= bg_expf("))!;
      expect({ sumLibm: sum.includes("= expf("), sumPoly: sum.includes("bg_expf("), elementwise: !!div }).toEqual({ sumLibm: true, sumPoly: false, elementwise: true });
      plan.execute();
      expectClose(plan.readOutput(0) as Float32Array, xr.softmax(1), 1e-6, "softmax");
    } finally {
      plan.dispose();
    }
  });
});
