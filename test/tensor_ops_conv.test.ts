// Convolution, pooling and resizing (conv2d, convTranspose2d, maxPool2d, avgPool2d, interpolate) against float64
// direct-loop references written here from torch's definitions (every output element is a sum or
// max over the input positions its window reads), on several shapes and stride / padding /
// dilation / groups combinations, batch > 1, non-contiguous inputs, fusion on and off; kernel
// counts show a conv is one fused multiply-reduce; bad arguments are GpuError INVALID_VALUE.
import { describe, expect, test } from "bun:test";
import { Ref, seededRandom } from "../src/tensor/reference";
import { Tensor, generate, schedule, type PrepareOptions } from "../src/tensor";
import { run, expectInvalid } from "./tensor_helpers";

function randRef(shape: number[], seed: number, int = false): Ref {
  const r = seededRandom(seed);
  return Ref.fill(shape, () => (int ? Math.floor(-9 + 19 * r()) : Math.fround(-2 + 4 * r())));
}

function toTensor(r: Ref, int = false): Tensor {
  return int ? Tensor.from(Int32Array.from(r.data), r.shape, { dtype: "int32" }) : Tensor.from(Float32Array.from(r.data), r.shape);
}

function expectClose(got: ArrayLike<number>, want: Ref, what: string, tol = 1e-5): void {
  if (got.length !== want.data.length) throw new Error(`${what}: length ${got.length}, want ${want.data.length}`);
  for (let i = 0; i < got.length; i++) {
    const a = got[i]!, b = want.data[i]!;
    if (a === b) continue;
    if (!(Math.abs(a - b) <= tol * (1 + Math.abs(b)))) throw new Error(`${what}: element ${i}: got ${a}, want ${b}`);
  }
}

type P2 = [number, number];
interface ConvCase {
  x: number[]; // N, C, H, W
  w: number[]; // O, C/g, kh, kw
  stride?: P2;
  pad?: P2;
  dil?: P2;
  groups?: number;
  bias?: boolean;
}

/** torch conv2d, directly: out[n,o,y,x] = b[o] + Σ_c,i,j in[n, g·Cg + c, y·s - p + i·d, x·s - p + j·d] · w[o,c,i,j]. */
function refConv(x: Ref, w: Ref, b: Ref | null, s: P2, p: P2, d: P2, g: number): Ref {
  const [N, C, H, W] = x.shape as [number, number, number, number];
  const [O, Cg, KH, KW] = w.shape as [number, number, number, number];
  const OH = Math.floor((H + 2 * p[0] - d[0] * (KH - 1) - 1) / s[0]) + 1;
  const OW = Math.floor((W + 2 * p[1] - d[1] * (KW - 1) - 1) / s[1]) + 1;
  expect(Cg * g).toBe(C);
  return Ref.fill([N, O, OH, OW], ([n, o, oy, ox]) => {
    const gi = Math.floor(o! / (O / g));
    let acc = b ? b.data[o!]! : 0;
    for (let c = 0; c < Cg; c++)
      for (let i = 0; i < KH; i++)
        for (let j = 0; j < KW; j++) {
          const iy = oy! * s[0] - p[0] + i * d[0], ix = ox! * s[1] - p[1] + j * d[1];
          if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
          acc += x.at([n!, gi * Cg + c, iy, ix]) * w.at([o!, c, i, j]);
        }
    return acc;
  });
}

/** torch conv_transpose2d, as the scatter it is: in[n,c,y,x] · w[c,o,i,j] lands on (y·s - p + i·d, x·s - p + j·d). */
function refConvT(x: Ref, w: Ref, b: Ref | null, s: P2, p: P2, d: P2, op: P2, g: number): Ref {
  const [N, C, H, W] = x.shape as [number, number, number, number];
  const [, Og, KH, KW] = w.shape as [number, number, number, number];
  const O = Og * g, Cg = C / g;
  const OH = (H - 1) * s[0] - 2 * p[0] + d[0] * (KH - 1) + op[0] + 1;
  const OW = (W - 1) * s[1] - 2 * p[1] + d[1] * (KW - 1) + op[1] + 1;
  const out = new Float64Array(N * O * OH * OW);
  for (let n = 0; n < N; n++)
    for (let o = 0; o < O; o++) for (let k = 0; k < OH * OW; k++) out[(n * O + o) * OH * OW + k] = b ? b.data[o]! : 0;
  for (let n = 0; n < N; n++)
    for (let c = 0; c < C; c++) {
      const gi = Math.floor(c / Cg);
      for (let y = 0; y < H; y++)
        for (let xx = 0; xx < W; xx++)
          for (let oo = 0; oo < Og; oo++)
            for (let i = 0; i < KH; i++)
              for (let j = 0; j < KW; j++) {
                const oy = y * s[0] - p[0] + i * d[0], ox = xx * s[1] - p[1] + j * d[1];
                if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                const at = ((n * O + gi * Og + oo) * OH + oy) * OW + ox;
                out[at] = out[at]! + x.at([n, c, y, xx]) * w.at([c, oo, i, j]);
              }
    }
  return new Ref([N, O, OH, OW], out);
}

/** torch max_pool2d / avg_pool2d over the last two dims, directly. */
function refPool(x: Ref, kind: "max" | "avg", k: P2, s: P2, p: P2, d: P2, countIncludePad = true): Ref {
  const lead = x.shape.slice(0, -2);
  const [H, W] = x.shape.slice(-2) as [number, number];
  const OH = Math.floor((H + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0]) + 1;
  const OW = Math.floor((W + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1]) + 1;
  return Ref.fill([...lead, OH, OW], (idx) => {
    const head = idx.slice(0, -2), oy = idx[idx.length - 2]!, ox = idx[idx.length - 1]!;
    let m = -Infinity, sum = 0, cnt = 0;
    for (let i = 0; i < k[0]; i++)
      for (let j = 0; j < k[1]; j++) {
        const iy = oy * s[0] - p[0] + i * d[0], ix = ox * s[1] - p[1] + j * d[1];
        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
        const v = x.at([...head, iy, ix]);
        m = Math.max(m, v);
        sum += v;
        cnt++;
      }
    return kind === "max" ? m : sum / (countIncludePad ? k[0] * k[1] : cnt);
  });
}

const CASES: ConvCase[] = [
  { x: [1, 1, 5, 5], w: [1, 1, 3, 3] },
  { x: [2, 3, 7, 6], w: [4, 3, 3, 3], pad: [1, 1], bias: true },
  { x: [2, 4, 9, 8], w: [6, 2, 3, 2], stride: [2, 3], pad: [1, 2], groups: 2, bias: true },
  { x: [1, 3, 10, 9], w: [2, 3, 3, 3], dil: [2, 3], pad: [2, 1] },
  { x: [3, 4, 8, 8], w: [4, 1, 3, 3], pad: [1, 1], groups: 4, bias: true }, // depthwise
  { x: [2, 6, 9, 7], w: [6, 1, 5, 3], stride: [2, 1], dil: [1, 2], pad: [2, 2], groups: 6 }, // depthwise, all at once
  { x: [2, 2, 6, 6], w: [3, 2, 1, 1], stride: [2, 2] }, // 1×1, k < s
  { x: [1, 2, 8, 8], w: [2, 2, 2, 2], stride: [2, 2] }, // k = s: the non-overlapping path
  { x: [2, 3, 5, 4], w: [2, 3, 5, 4] }, // kernel = input: one output
  { x: [1, 4, 7, 7], w: [8, 2, 3, 3], stride: [3, 2], pad: [0, 1], dil: [2, 1], groups: 2, bias: true },
];

describe("conv2d", () => {
  for (const fusion of [true, false]) {
    test(`shapes, stride, padding, dilation, groups, bias (fusion ${fusion ? "on" : "off"})`, () => {
      CASES.forEach((c, ci) => {
        const s = c.stride ?? [1, 1], p = c.pad ?? [0, 0], d = c.dil ?? [1, 1], g = c.groups ?? 1;
        const xr = randRef(c.x, 10 + ci), wr = randRef(c.w, 50 + ci), br = c.bias ? randRef([c.w[0]!], 90 + ci) : null;
        const want = refConv(xr, wr, br, s, p, d, g);
        const y = toTensor(xr).conv2d(toTensor(wr), br ? toTensor(br) : undefined, { stride: s, padding: p, dilation: d, groups: g });
        expect(y.shape).toEqual(want.shape);
        const [got] = run([y], { fusion });
        expectClose(got!, want, `case ${ci}`);
      });
    });
  }

  test("scalar arguments, torch's flat padding [left, right, top, bottom] and int32", () => {
    const xr = randRef([2, 2, 6, 5], 3), wr = randRef([3, 2, 3, 3], 4);
    const want = refConv(xr, wr, null, [2, 2], [1, 1], [1, 1], 1);
    expectClose(toTensor(xr).conv2d(toTensor(wr), undefined, { stride: 2, padding: 1 }).toArray(), want, "scalars");
    // asymmetric flat padding: left 2, right 0, top 1, bottom 1 equals an explicit pad then conv
    const flat = toTensor(xr).conv2d(toTensor(wr), undefined, { padding: [2, 0, 1, 1] });
    const explicit = refConv(new Ref([2, 2, 8, 7], Ref.fill([2, 2, 8, 7], ([n, c, y, x]) => (y! >= 1 && y! < 7 && x! >= 2 ? xr.at([n!, c!, y! - 1, x! - 2]) : 0)).data), wr, null, [1, 1], [0, 0], [1, 1], 1);
    expectClose(flat.toArray(), explicit, "flat padding");
    const xi = randRef([1, 2, 5, 5], 5, true), wi = randRef([2, 2, 3, 3], 6, true);
    const yi = toTensor(xi, true).conv2d(toTensor(wi, true), undefined, { padding: 1 });
    expect(yi.dtype).toBe("int32");
    expectClose(yi.toArray(), refConv(xi, wi, null, [1, 1], [1, 1], [1, 1], 1), "int32", 0);
  });

  test("non-contiguous input and weight (permuted, flipped and sliced views)", () => {
    const base = randRef([2, 5, 9, 3], 7); // N, H, W, C: an NHWC buffer read as NCHW
    const xr = Ref.fill([2, 3, 5, 9], ([n, c, h, w]) => base.at([n!, h!, w!, c!]));
    const wbase = randRef([4, 3, 3, 3], 8);
    const wr = Ref.fill([4, 3, 3, 3], ([o, c, i, j]) => wbase.at([o!, c!, 2 - i!, j!])); // flipped kh
    const x = toTensor(base).permute([0, 3, 1, 2]);
    const w = toTensor(wbase).flip(2);
    for (const fusion of [true, false]) {
      const [got] = run([x.conv2d(w, undefined, { padding: 1, stride: [1, 2] })], { fusion });
      expectClose(got!, refConv(xr, wr, null, [1, 2], [1, 1], [1, 1], 1), `permuted (fusion ${fusion})`);
    }
    // a strided slice of a bigger image
    const big = randRef([1, 2, 12, 12], 9);
    const sub = Ref.fill([1, 2, 6, 5], ([n, c, h, w]) => big.at([n!, c!, 1 + 2 * h!, 2 + 2 * w!]));
    const ws = randRef([2, 2, 2, 2], 11);
    const ys = toTensor(big).slice([null, null, [1, null, 2], [2, 11, 2]]).conv2d(toTensor(ws));
    expectClose(ys.toArray(), refConv(sub, ws, null, [1, 1], [0, 0], [1, 1], 1), "strided slice");
  });

  test("a conv is one kernel (a fused multiply-reduce); conv → relu → pool is two", () => {
    // data, not Tensor.rand: a random source a reduction reads is a kernel of its own, run once at prepare()
    const data = (shape: number[]) => Tensor.from(Float32Array.from({ length: shape.reduce((a, c) => a * c, 1) }, (_, i) => (i % 7) / 7), shape);
    const x = data([2, 3, 8, 8]), w = data([4, 3, 3, 3]), b = data([4]);
    const y = x.conv2d(w, b, { padding: 1 });
    expect(schedule([y.node]).kernels.length).toBe(1);
    const z = y.relu().maxPool2d(2);
    expect(schedule([z.node]).kernels.length).toBe(2);
    const depth = x.conv2d(data([3, 1, 3, 3]), undefined, { groups: 3, stride: 2, dilation: 2 });
    expect(schedule([depth.node]).kernels.length).toBe(1);
    expect(schedule([x.avgPool2d(3, { stride: 1, padding: 1 }).node]).kernels.length).toBe(1);
  });

  test("the window views fold into plain index arithmetic: no division or remainder per element", () => {
    // the repeat trick reads (k·(n+d) + o) % n; the index simplifier folds it to k·d + o
    const x = Tensor.from(new Float32Array(2 * 4 * 9 * 9), [2, 4, 9, 9]);
    const divMods = (t: Tensor) =>
      schedule([t.node]).kernels.flatMap((k) => generate(k.ir, "c").body.split("\n").filter((l) => /const int t\d+ = .*[%/]/.test(l)));
    const w = (shape: number[]) => Tensor.from(new Float32Array(shape.reduce((a, b) => a * b, 1)), shape);
    expect(divMods(x.conv2d(w([6, 4, 3, 3]), undefined, { padding: 1 }))).toEqual([]);
    expect(divMods(x.conv2d(w([4, 1, 3, 3]), undefined, { dilation: 2, groups: 4, padding: 2 }))).toEqual([]);
    expect(divMods(x.conv2d(w([6, 4, 2, 2]), undefined, { stride: 2 }))).toEqual([]);
    expect(divMods(x.maxPool2d(3, { stride: 2, padding: 1 }))).toEqual([]);
    expect(divMods(x.avgPool2d(3, { stride: 1, padding: 1 }))).toEqual([]);
  });

  test("conv → relu → maxPool2d → avgPool2d against the reference, fusion on and off", () => {
    const xr = randRef([2, 3, 10, 10], 21), wr = randRef([4, 3, 3, 3], 22), br = randRef([4], 23);
    const c = refConv(xr, wr, br, [1, 1], [1, 1], [1, 1], 1).map((v) => Math.max(v, 0));
    const mp = refPool(c, "max", [2, 2], [2, 2], [0, 0], [1, 1]);
    const ap = refPool(mp, "avg", [3, 3], [2, 2], [1, 1], [1, 1]);
    const y = toTensor(xr).conv2d(toTensor(wr), toTensor(br), { padding: 1 }).relu().maxPool2d(2);
    const z = y.avgPool2d(3, { stride: 2, padding: 1 });
    for (const fusion of [true, false]) {
      const [gy, gz] = run([y, z], { fusion });
      expectClose(gy!, mp, `maxpool (fusion ${fusion})`);
      expectClose(gz!, ap, `avgpool (fusion ${fusion})`);
    }
  });
});

describe("pooling", () => {
  const POOLS: { x: number[]; k: P2; s?: P2; p?: P2; d?: P2 }[] = [
    { x: [1, 1, 4, 4], k: [2, 2] },
    { x: [2, 3, 7, 6], k: [3, 3], s: [2, 2], p: [1, 1] },
    { x: [2, 2, 9, 8], k: [3, 2], s: [1, 2], p: [1, 0] },
    { x: [1, 2, 10, 9], k: [3, 3], s: [2, 1], p: [1, 1], d: [2, 2] },
    { x: [3, 5, 5], k: [2, 3], s: [3, 3] }, // 3-D input (C, H, W), k < s
    { x: [2, 2, 6, 6], k: [6, 6] }, // global pool
  ];
  for (const fusion of [true, false]) {
    test(`maxPool2d and avgPool2d (fusion ${fusion ? "on" : "off"})`, () => {
      POOLS.forEach((c, ci) => {
        const s = c.s ?? c.k, p = c.p ?? [0, 0], d = c.d ?? [1, 1];
        const xr = randRef(c.x, 30 + ci);
        const x = toTensor(xr);
        const outs = [x.maxPool2d(c.k, { stride: c.s, padding: p, dilation: d })];
        const wants = [refPool(xr, "max", c.k, s, p, d)];
        if (d[0] === 1 && d[1] === 1) {
          outs.push(x.avgPool2d(c.k, { stride: c.s, padding: p }), x.avgPool2d(c.k, { stride: c.s, padding: p, countIncludePad: false }));
          wants.push(refPool(xr, "avg", c.k, s, p, d, true), refPool(xr, "avg", c.k, s, p, d, false));
        }
        const got = run(outs, { fusion });
        got.forEach((g, i) => {
          expect(outs[i]!.shape).toEqual(wants[i]!.shape);
          expectClose(g, wants[i]!, `pool case ${ci} output ${i}`);
        });
      });
    });
  }

  test("defaults (kernel 2, stride = kernel), int32 max with padding, non-contiguous input", () => {
    const xr = randRef([2, 3, 6, 8], 41);
    expectClose(toTensor(xr).maxPool2d().toArray(), refPool(xr, "max", [2, 2], [2, 2], [0, 0], [1, 1]), "default max");
    expectClose(toTensor(xr).avgPool2d().toArray(), refPool(xr, "avg", [2, 2], [2, 2], [0, 0], [1, 1]), "default avg");
    const xi = randRef([1, 2, 5, 5], 42, true);
    const mi = toTensor(xi, true).maxPool2d(3, { stride: 2, padding: 1 });
    expect(mi.dtype).toBe("int32");
    expectClose(mi.toArray(), refPool(xi, "max", [3, 3], [2, 2], [1, 1], [1, 1]), "int32 max", 0);
    const base = randRef([2, 8, 6, 3], 43); // NHWC read as NCHW
    const xr2 = Ref.fill([2, 3, 8, 6], ([n, c, h, w]) => base.at([n!, h!, w!, c!]));
    const x2 = toTensor(base).permute([0, 3, 1, 2]);
    for (const fusion of [true, false]) {
      const [a, b] = run([x2.maxPool2d(3, { stride: 2, padding: 1 }), x2.avgPool2d([2, 3], { stride: 1 })], { fusion });
      expectClose(a!, refPool(xr2, "max", [3, 3], [2, 2], [1, 1], [1, 1]), "permuted max");
      expectClose(b!, refPool(xr2, "avg", [2, 3], [1, 1], [0, 0], [1, 1]), "permuted avg");
    }
  });
});

describe("convTranspose2d", () => {
  const CT: { x: number[]; w: number[]; s?: P2; p?: P2; d?: P2; op?: P2; g?: number; bias?: boolean }[] = [
    { x: [1, 1, 3, 3], w: [1, 1, 3, 3] },
    { x: [2, 3, 4, 5], w: [3, 2, 3, 3], s: [2, 2], p: [1, 1], op: [1, 1], bias: true },
    { x: [1, 4, 3, 4], w: [4, 3, 2, 3], s: [3, 2], g: 2, bias: true },
    { x: [2, 2, 4, 3], w: [2, 2, 3, 2], d: [2, 1], p: [2, 0] },
    { x: [1, 2, 5, 5], w: [2, 1, 4, 4], s: [2, 2], p: [1, 1], g: 2 },
  ];
  for (const fusion of [true, false]) {
    test(`stride, padding, dilation, output padding, groups (fusion ${fusion ? "on" : "off"})`, () => {
      CT.forEach((c, ci) => {
        const s = c.s ?? [1, 1], p = c.p ?? [0, 0], d = c.d ?? [1, 1], op = c.op ?? [0, 0], g = c.g ?? 1;
        const xr = randRef(c.x, 60 + ci), wr = randRef(c.w, 70 + ci), br = c.bias ? randRef([c.w[1]! * g], 80 + ci) : null;
        const want = refConvT(xr, wr, br, s, p, d, op, g);
        const y = toTensor(xr).convTranspose2d(toTensor(wr), br ? toTensor(br) : undefined, { stride: s, padding: p, dilation: d, outputPadding: op, groups: g });
        expect(y.shape).toEqual(want.shape);
        const [got] = run([y], { fusion });
        expectClose(got!, want, `case ${ci}`);
      });
    });
  }
});

/** torch interpolate over the last dims, directly: per output position, its source neighbours and weights. */
function refInterp(x: Ref, size: number[], mode: string, align = false): Ref {
  const lead = x.shape.length - size.length;
  const out = [...x.shape.slice(0, lead), ...size];
  // per resized dim: a list of (source index, weight) pairs for each output index
  const taps = size.map((o, j) => {
    const n = x.shape[lead + j]!;
    return [...Array(o).keys()].map((d): [number, number][] => {
      if (mode === "nearest") return [[Math.min(Math.floor((d * n) / o), n - 1), 1]];
      if (mode === "nearest-exact") return [[Math.min(Math.floor(((d + 0.5) * n) / o), n - 1), 1]];
      const src = align ? (o > 1 ? (d * (n - 1)) / (o - 1) : 0) : Math.max(0, ((d + 0.5) * n) / o - 0.5);
      const l = Math.floor(src), h = Math.min(l + 1, n - 1), f = src - l;
      return [[l, 1 - f], [h, f]];
    });
  });
  return Ref.fill(out, (idx) => {
    let acc = 0;
    const walk = (j: number, at: number[], w: number): void => {
      if (j === size.length) {
        acc += w * x.at([...idx.slice(0, lead), ...at]);
        return;
      }
      for (const [s, tw] of taps[j]![idx[lead + j]!]!) walk(j + 1, [...at, s], w * tw);
    };
    walk(0, [], 1);
    return acc;
  });
}

describe("interpolate", () => {
  for (const fusion of [true, false]) {
    test(`nearest, nearest-exact, bilinear (align corners or not), up and down (fusion ${fusion ? "on" : "off"})`, () => {
      const xr = randRef([2, 3, 5, 7], 100);
      const x = toTensor(xr);
      const cases: [number[], "nearest" | "nearest-exact" | "bilinear" | "linear", boolean][] = [
        [[10, 14], "nearest", false],
        [[3, 4], "nearest", false],
        [[8, 5], "nearest-exact", false],
        [[10, 14], "bilinear", false],
        [[3, 9], "bilinear", false],
        [[9, 4], "bilinear", true],
        [[1, 1], "bilinear", true],
        [[11], "linear", false], // the last dim only
        [[4, 6, 9], "linear", false], // channels too
      ];
      const outs = cases.map(([size, mode, align]) => x.interpolate(size, mode, align));
      const got = run(outs, { fusion });
      cases.forEach(([size, mode, align], i) => {
        const want = refInterp(xr, size, mode, align);
        expect(outs[i]!.shape).toEqual(want.shape);
        expectClose(got[i]!, want, `${mode} ${size.join("x")} align ${align}`);
      });
    });
  }

  test("non-contiguous input, int32, default mode nearest, one kernel", () => {
    const base = randRef([2, 6, 5, 3], 101);
    const xr = Ref.fill([2, 3, 6, 5], ([n, c, h, w]) => base.at([n!, h!, w!, c!]));
    const x = toTensor(base).permute([0, 3, 1, 2]);
    expectClose(x.interpolate([12, 7], "bilinear").toArray(), refInterp(xr, [12, 7], "bilinear"), "permuted bilinear");
    expectClose(x.interpolate([4, 10]).toArray(), refInterp(xr, [4, 10], "nearest"), "default nearest");
    const xi = randRef([1, 2, 3, 3], 102, true);
    const yi = toTensor(xi, true).interpolate([6, 6]);
    expect(yi.dtype).toBe("int32");
    expectClose(yi.toArray(), refInterp(xi, [6, 6], "nearest"), "int32 nearest", 0);
    expect(schedule([x.interpolate([12, 7], "bilinear").node]).kernels.length).toBe(1);
  });
});

describe("bad arguments are INVALID_VALUE", () => {
  test("conv2d, convTranspose2d and the pools", () => {
    const x = Tensor.rand([2, 4, 6, 6]), w = Tensor.rand([6, 2, 3, 3]);
    const bad: [string, () => unknown][] = [
      ["channel mismatch", () => x.conv2d(Tensor.rand([6, 3, 3, 3]))],
      ["channel mismatch with groups", () => x.conv2d(w, undefined, { groups: 1 })],
      ["groups not dividing cout", () => x.conv2d(Tensor.rand([5, 2, 3, 3]), undefined, { groups: 2 })],
      ["groups not dividing cin", () => x.conv2d(Tensor.rand([6, 1, 3, 3]), undefined, { groups: 3 })],
      ["groups 0", () => x.conv2d(w, undefined, { groups: 0 })],
      ["groups 1.5", () => x.conv2d(w, undefined, { groups: 1.5 })],
      ["kernel larger than input", () => x.conv2d(Tensor.rand([6, 4, 7, 3]))],
      ["kernel larger than padded input (dilation)", () => x.conv2d(Tensor.rand([6, 4, 3, 3]), undefined, { dilation: 3 })],
      ["3-D input", () => Tensor.rand([4, 6, 6]).conv2d(Tensor.rand([6, 4, 3, 3]))],
      ["3-D weight", () => x.conv2d(Tensor.rand([4, 3, 3]))],
      ["weight not a tensor", () => x.conv2d([1, 2] as unknown as Tensor)],
      ["bias wrong size", () => x.conv2d(w, Tensor.rand([5]), { groups: 2 })],
      ["bias 2-D", () => x.conv2d(w, Tensor.rand([6, 1]), { groups: 2 })],
      ["bias not a tensor", () => x.conv2d(w, 3 as unknown as Tensor, { groups: 2 })],
      ["stride 0", () => x.conv2d(w, undefined, { groups: 2, stride: 0 })],
      ["stride three values", () => x.conv2d(w, undefined, { groups: 2, stride: [1, 1, 1] })],
      ["dilation negative", () => x.conv2d(w, undefined, { groups: 2, dilation: [-1, 1] })],
      ["padding negative", () => x.conv2d(w, undefined, { groups: 2, padding: -1 })],
      ["padding three values", () => x.conv2d(w, undefined, { groups: 2, padding: [1, 1, 1] })],
      ["padding a string", () => x.conv2d(w, undefined, { groups: 2, padding: "same" as unknown as number })],
      ["options not an object", () => x.conv2d(w, undefined, 3 as unknown as object)],
      ["convT channel mismatch", () => x.convTranspose2d(Tensor.rand([3, 2, 3, 3]))],
      ["convT groups not dividing", () => x.convTranspose2d(Tensor.rand([4, 2, 3, 3]), undefined, { groups: 3 })],
      ["convT output padding too large", () => x.convTranspose2d(Tensor.rand([4, 2, 3, 3]), undefined, { stride: 2, outputPadding: 2 })],
      ["convT bias wrong size", () => x.convTranspose2d(Tensor.rand([4, 2, 3, 3]), Tensor.rand([4]))],
      ["pool kernel larger than input", () => x.maxPool2d(7)],
      ["pool kernel larger with dilation", () => x.maxPool2d(3, { dilation: 3 })],
      ["avg pool kernel larger than input", () => x.avgPool2d([2, 7])],
      ["pool kernel 0", () => x.maxPool2d(0)],
      ["pool stride 0", () => x.avgPool2d(2, { stride: 0 })],
      ["pool 1-D input", () => Tensor.rand([6]).maxPool2d(2)],
      ["pool kernel a string", () => x.maxPool2d("2" as unknown as number)],
      ["pool countIncludePad not boolean", () => x.avgPool2d(2, { padding: 1, countIncludePad: 1 as unknown as boolean })],
      ["interpolate size not an array", () => x.interpolate(4 as unknown as number[])],
      ["interpolate size empty", () => x.interpolate([])],
      ["interpolate size too long", () => x.interpolate([1, 2, 3, 4, 5])],
      ["interpolate size 0", () => x.interpolate([0, 4])],
      ["interpolate size fractional", () => x.interpolate([2.5, 4])],
      ["interpolate unknown mode", () => x.interpolate([4, 4], "bicubic" as "nearest")],
      ["interpolate align corners with nearest", () => x.interpolate([4, 4], "nearest", true)],
      ["interpolate align corners not boolean", () => x.interpolate([4, 4], "bilinear", 1 as unknown as boolean)],
      ["interpolate an empty dim", () => Tensor.zeros([2, 0, 3]).interpolate([4, 4])],
    ];
    for (const [what, f] of bad) expectInvalid(f, what);
  });
});
