// scaledDotProductAttention, einsum and sort against float64 references written here: attention
// as direct loops over (batch, query, key) with torch's masks (causal = top-left lower triangle,
// int32 masks select, float32 masks add); einsum as a brute-force loop over every assignment of
// its labels; sort as a stable JS sort (NaN largest). Batch and head dims, broadcast batches,
// causal on and off, explicit masks, a KV cache whose length is a bound Variable (prepared once,
// run at three lengths), fusion on and off, and bad arguments (GpuError INVALID_VALUE).
// Tolerance: 1e-5 relative to 1 + |want| (sort values: exact).
import { describe, expect, test } from "bun:test";
import { compileStats } from "../src";
import { Ref, seededRandom } from "../src/tensor/reference";
import { Tensor, Variable, tensorCompileStats, type PrepareOptions } from "../src/tensor";
import { run, expectInvalid } from "./tensor_helpers";

function randRef(shape: number[], seed: number, int = false): Ref {
  const r = seededRandom(seed);
  return Ref.fill(shape, () => (int ? Math.floor(-5 + 11 * r()) : Math.fround(-1.5 + 3 * r())));
}
const toTensor = (r: Ref, int = false) =>
  int ? Tensor.from(Int32Array.from(r.data), r.shape, { dtype: "int32" }) : Tensor.from(Float32Array.from(r.data), r.shape);

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, what: string, tol = 1e-5): void {
  if (got.length !== want.length) throw new Error(`${what}: length ${got.length}, want ${want.length}`);
  for (let i = 0; i < got.length; i++) {
    const a = got[i]!, b = want[i]!;
    if (a === b || (Number.isNaN(a) && Number.isNaN(b))) continue;
    if (!(Math.abs(a - b) <= tol * (1 + Math.abs(b)))) throw new Error(`${what}: element ${i}: got ${a}, want ${b}`);
  }
}

const FUSION = [true, false];

// ---- attention reference -------------------------------------------------------------------------

/** The mask's say on (batch b, query i, key j): false = masked out, a number = added. */
type MaskFn = (b: number, i: number, j: number) => boolean | number;

/** softmax(q kᵀ scale + mask) v over q [B, L, E], k [B, S, E], v [B, S, Ev] (batches flattened). */
function refSdpa(q: Ref, k: Ref, v: Ref, mask?: MaskFn, scale?: number): number[] {
  const [B, L, E] = q.shape as [number, number, number], S = k.shape[1]!, Ev = v.shape[2]!;
  const sc = scale ?? 1 / Math.sqrt(E);
  const out: number[] = [];
  for (let b = 0; b < B; b++)
    for (let i = 0; i < L; i++) {
      const s: number[] = [];
      for (let j = 0; j < S; j++) {
        let d = 0;
        for (let e = 0; e < E; e++) d += q.at([b, i, e]) * k.at([b, j, e]);
        const m = mask ? mask(b, i, j) : true;
        s.push(m === false ? -Infinity : d * sc + (typeof m === "number" ? m : 0));
      }
      const mx = Math.max(...s);
      const ex = s.map((x) => Math.exp(x - mx));
      const tot = ex.reduce((a, x) => a + x, 0);
      for (let c = 0; c < Ev; c++) {
        let acc = 0;
        for (let j = 0; j < S; j++) acc += (ex[j]! / tot) * v.at([b, j, c]);
        out.push(acc);
      }
    }
  return out;
}

const flat3 = (r: Ref) => r.reshape([r.shape.slice(0, -2).reduce((a, x) => a * x, 1), r.shape.at(-2)!, r.shape.at(-1)!]);

describe("scaledDotProductAttention", () => {
  const cases: { name: string; q: number[]; k: number[]; v: number[] }[] = [
    { name: "2-D", q: [4, 8], k: [6, 8], v: [6, 5] },
    { name: "batch and heads", q: [2, 3, 5, 4], k: [2, 3, 7, 4], v: [2, 3, 7, 6] },
    { name: "L = S", q: [2, 6, 4], k: [2, 6, 4], v: [2, 6, 4] },
  ];
  for (const fusion of FUSION)
    test(`shapes, causal on and off, scale (fusion ${fusion ? "on" : "off"})`, () => {
      let seed = 1;
      for (const c of cases) {
        const qr = randRef(c.q, seed++), kr = randRef(c.k, seed++), vr = randRef(c.v, seed++);
        const q = toTensor(qr), k = toTensor(kr), v = toTensor(vr);
        const outs = [
          q.scaledDotProductAttention(k, v),
          Tensor.scaledDotProductAttention(q, k, v, { isCausal: true }),
          q.scaledDotProductAttention(k, v, { scale: 0.3 }),
        ];
        const got = run(outs, { fusion });
        const [q3, k3, v3] = [flat3(qr), flat3(kr), flat3(vr)];
        expect(outs[0]!.shape).toEqual([...c.q.slice(0, -1), c.v.at(-1)!]);
        expectClose(got[0]!, refSdpa(q3, k3, v3), `${c.name} plain`);
        expectClose(got[1]!, refSdpa(q3, k3, v3, (_, i, j) => j <= i), `${c.name} causal`);
        expectClose(got[2]!, refSdpa(q3, k3, v3, undefined, 0.3), `${c.name} scale`);
      }
    });

  for (const fusion of FUSION)
    test(`explicit masks: int32 selects, float32 adds, broadcast over batch and heads (fusion ${fusion ? "on" : "off"})`, () => {
      const [B, H, L, S, E] = [2, 2, 3, 5, 4];
      const qr = randRef([B, H, L, E], 11), kr = randRef([B, H, S, E], 12), vr = randRef([B, H, S, E], 13);
      const bool = Ref.fill([L, S], ([i, j]) => ((i! * 3 + j!) % 4 !== 1 ? 1 : 0)); // every row keeps a key
      const add = randRef([B, 1, L, S], 14);
      const q = toTensor(qr), k = toTensor(kr), v = toTensor(vr);
      const got = run([q.scaledDotProductAttention(k, v, { attnMask: toTensor(bool, true) }), q.scaledDotProductAttention(k, v, { attnMask: toTensor(add) })], { fusion });
      const [q3, k3, v3] = [flat3(qr), flat3(kr), flat3(vr)];
      expectClose(got[0]!, refSdpa(q3, k3, v3, (_, i, j) => bool.at([i, j]) !== 0), "int32 mask");
      expectClose(got[1]!, refSdpa(q3, k3, v3, (b, i, j) => add.at([Math.floor(b / H), 0, i, j])), "float32 mask");
    });

  test("batch dims broadcast (one key/value head shared by every query head) and non-contiguous operands", () => {
    const [H, L, S, E] = [3, 4, 5, 4];
    const qr = randRef([H, L, E], 21), kr = randRef([1, S, E], 22), vr = randRef([1, S, 2], 23);
    const kt = randRef([E, S], 24); // k given as a transposed view
    for (const fusion of FUSION) {
      const got = run([toTensor(qr).scaledDotProductAttention(toTensor(kr), toTensor(vr), { isCausal: true }), toTensor(qr).scaledDotProductAttention(toTensor(kt).T, toTensor(vr.reshape([S, 2])))], { fusion });
      const rep = (r: Ref) => Ref.fill([H, ...r.shape.slice(1)], ([, ...rest]) => r.at([0, ...rest]));
      expectClose(got[0]!, refSdpa(qr, rep(kr), rep(vr), (_, i, j) => j <= i), `broadcast (fusion ${fusion})`);
      const ktT = kt.permute([1, 0]).reshape([1, S, E]);
      expectClose(got[1]!, refSdpa(qr, rep(ktT), rep(vr)), `transposed key (fusion ${fusion})`);
    }
  });

  test("a KV cache over a bound Variable: prepared once, run at two lengths, causal self-attention and a decode step", () => {
    const [H, MAX, E] = [2, 9, 4];
    const xr = randRef([H, MAX, E], 31), kc = randRef([H, MAX, E], 32), vc = randRef([H, MAX, 3], 33), q1 = randRef([H, 1, E], 34);
    const S = new Variable("S", 1, MAX).bind(5);
    const x = toTensor(xr).shrink([null, [0, S], null]); // [H, S, E]
    const self = x.scaledDotProductAttention(x, x, { isCausal: true }); // [H, S, E]
    const k = toTensor(kc).shrink([null, [0, S], null]), v = toTensor(vc).shrink([null, [0, S], null]);
    const step = toTensor(q1).scaledDotProductAttention(k, v); // [H, 1, 3]: the new token reads the cache
    expect(self.shape).toEqual([H, S, E]);
    expect(step.shape).toEqual([H, 1, 3]);
    for (const fusion of FUSION) {
      const plan = Tensor.prepareBatch([self, step], { fusion });
      try {
        const compiles = tensorCompileStats.compiles, runs = compileStats.compilerRuns;
        for (const s of [3, 7, 5]) {
          plan.executeWithVars({ S: s });
          expect(plan.outputShape(0)).toEqual([H, s, E]);
          const xs = xr.shrink([[0, H], [0, s], [0, E]]);
          expectClose(plan.readOutput(0), refSdpa(xs, xs, xs, (_, i, j) => j <= i), `self S=${s} (fusion ${fusion})`);
          const ks = kc.shrink([[0, H], [0, s], [0, E]]), vs = vc.shrink([[0, H], [0, s], [0, 3]]);
          expectClose(plan.readOutput(1), refSdpa(q1, ks, vs), `decode S=${s} (fusion ${fusion})`);
        }
        expect(tensorCompileStats.compiles).toBe(compiles);
        expect(compileStats.compilerRuns).toBe(runs);
      } finally {
        plan.dispose();
      }
    }
  });

  test("bad arguments are GpuError INVALID_VALUE", () => {
    const q = Tensor.rand([2, 3, 4]), k = Tensor.rand([2, 5, 4]), v = Tensor.rand([2, 5, 6]);
    const bad: [string, () => unknown][] = [
      ["1-D query", () => Tensor.rand([4]).scaledDotProductAttention(k, v)],
      ["1-D key", () => q.scaledDotProductAttention(Tensor.rand([4]), v)],
      ["feature mismatch", () => q.scaledDotProductAttention(Tensor.rand([2, 5, 3]), v)],
      ["sequence mismatch", () => q.scaledDotProductAttention(k, Tensor.rand([2, 4, 6]))],
      ["batch mismatch", () => q.scaledDotProductAttention(Tensor.rand([3, 5, 4]), Tensor.rand([3, 5, 6]))],
      ["int32 query", () => q.int().scaledDotProductAttention(k, v)],
      ["key not a tensor", () => q.scaledDotProductAttention(3 as unknown as Tensor, v)],
      ["value missing", () => q.scaledDotProductAttention(k, undefined as unknown as Tensor)],
      ["query not a tensor", () => Tensor.scaledDotProductAttention(null as unknown as Tensor, k, v)],
      ["options not an object", () => q.scaledDotProductAttention(k, v, 3 as never)],
      ["isCausal not a boolean", () => q.scaledDotProductAttention(k, v, { isCausal: 1 as unknown as boolean })],
      ["scale NaN", () => q.scaledDotProductAttention(k, v, { scale: Number.NaN })],
      ["scale a string", () => q.scaledDotProductAttention(k, v, { scale: "1" as unknown as number })],
      ["mask not a tensor", () => q.scaledDotProductAttention(k, v, { attnMask: [1] as unknown as Tensor })],
      ["mask and causal", () => q.scaledDotProductAttention(k, v, { attnMask: Tensor.ones([3, 5]), isCausal: true })],
      ["mask shape", () => q.scaledDotProductAttention(k, v, { attnMask: Tensor.ones([3, 4]) })],
      ["mask too many dims", () => q.scaledDotProductAttention(k, v, { attnMask: Tensor.ones([2, 2, 3, 5]) })],
    ];
    for (const [what, f] of bad) expectInvalid(f, what);
  });
});

// ---- einsum reference ----------------------------------------------------------------------------

/** Brute force over every assignment of the labels (letters only, explicit output). */
function refEinsum(formula: string, ops: Ref[]): Ref {
  const [lhs, rhs] = formula.split("->") as [string, string];
  const terms = lhs.split(",");
  const size = new Map<string, number>();
  terms.forEach((t, i) => [...t].forEach((l, a) => size.set(l, ops[i]!.shape[a]!)));
  const labels = [...size.keys()];
  const outShape = [...rhs].map((l) => size.get(l)!);
  const out = Ref.fill(outShape, () => 0);
  const idx = new Map<string, number>();
  const rec = (n: number): void => {
    if (n === labels.length) {
      let p = 1;
      terms.forEach((t, i) => (p *= ops[i]!.at([...t].map((l) => idx.get(l)!))));
      let lin = 0;
      for (const l of rhs) lin = lin * size.get(l)! + idx.get(l)!;
      (out.data as unknown as number[])[lin]! += p;
      return;
    }
    for (let i = 0; i < size.get(labels[n]!)!; i++) {
      idx.set(labels[n]!, i);
      rec(n + 1);
    }
  };
  rec(0);
  return out;
}

describe("einsum", () => {
  const cases: { f: string; shapes: number[][]; implicit?: string }[] = [
    { f: "ij,jk->ik", shapes: [[3, 4], [4, 5]], implicit: "ij,jk" },
    { f: "bij,bjk->bik", shapes: [[2, 3, 4], [2, 4, 5]] },
    { f: "i,j->ij", shapes: [[3], [4]], implicit: "i,j" },
    { f: "ij->ji", shapes: [[3, 5]], implicit: "ji" },
    { f: "ijk->ik", shapes: [[2, 3, 4]] },
    { f: "ij->", shapes: [[3, 4]] },
    { f: "bi,ij,bj->b", shapes: [[2, 3], [3, 4], [2, 4]] },
    { f: "i,i->", shapes: [[6], [6]], implicit: "i,i" },
    { f: "bhqd,bhkd->bhqk", shapes: [[2, 2, 3, 4], [2, 2, 5, 4]] },
    { f: "ij,kj->ikj", shapes: [[2, 3], [4, 3]] },
    { f: "Ab,bA->A", shapes: [[3, 4], [4, 3]] },
    { f: "ij,j->i", shapes: [[0, 3], [3]] },
    { f: "ij,jk->ik", shapes: [[2, 0], [0, 3]] },
  ];
  for (const fusion of FUSION)
    test(`formulas against a brute-force float64 loop, explicit and implicit outputs (fusion ${fusion ? "on" : "off"})`, () => {
      let seed = 100;
      for (const c of cases) {
        const refs = c.shapes.map((s) => randRef(s, seed++));
        const want = refEinsum(c.f, refs);
        const ts = refs.map((r) => toTensor(r));
        const outs = [Tensor.einsum(c.f, ...ts), Tensor.einsum(c.f, ts as unknown as Tensor)];
        if (c.implicit) outs.push(Tensor.einsum(c.implicit, ...ts));
        const got = run(outs, { fusion });
        expect(outs[0]!.shape).toEqual(want.shape);
        got.forEach((g, i) => expectClose(g, want.data, `${c.f} #${i} (fusion ${fusion})`));
      }
    });

  test("int32 operands, non-contiguous views, 0-d results", () => {
    const a = randRef([4, 3], 200, true), b = randRef([4, 5], 201, true);
    const [g] = run([Tensor.einsum("ji,jk->ik", toTensor(a, true), toTensor(b, true))]);
    expect(g).toBeInstanceOf(Int32Array);
    expectClose(g!, refEinsum("ji,jk->ik", [a, b]).data, "int32");
    const x = randRef([5, 4], 202);
    const xt = toTensor(x).T; // [4, 5] view
    const [g2, g3] = run([Tensor.einsum("ij,ij->i", xt, xt), Tensor.einsum("ij->", xt)]);
    const xtr = x.permute([1, 0]);
    expectClose(g2!, refEinsum("ij,ij->i", [xtr, xtr]).data, "permuted view");
    expectClose(g3!, refEinsum("ij->", [xtr]).data, "0-d");
    expect(Tensor.einsum("ij->", xt).shape).toEqual([]);
  });

  test("repeated labels take the diagonal; '...' broadcasts leading dims", () => {
    const sq = randRef([4, 4], 300), cube = randRef([2, 3, 3], 301);
    const want = {
      trace: refEinsum("ii->", [sq]).data,
      diag: refEinsum("ii->i", [sq]).data,
      bdiag: refEinsum("bii->bi", [cube]).data,
      ibi: refEinsum("ibi->bi", [cube.permute([1, 0, 2])]).data,
    };
    for (const fusion of FUSION) {
      const got = run([Tensor.einsum("ii", toTensor(sq)), Tensor.einsum("ii->i", toTensor(sq)), Tensor.einsum("bii->bi", toTensor(cube)), Tensor.einsum("ibi->bi", toTensor(cube).permute([1, 0, 2]))], { fusion });
      expectClose(got[0]!, want.trace, "trace");
      expectClose(got[1]!, want.diag, "diagonal");
      expectClose(got[2]!, want.bdiag, "batched diagonal");
      expectClose(got[3]!, want.ibi, "diagonal of axes 0 and 2");
    }
    // '...': batched matmul with broadcast batch dims, and the implicit form
    const a = randRef([2, 3, 4, 5], 310), b = randRef([3, 5, 2], 311);
    const bb = Ref.fill([2, 3, 5, 2], ([, j, k, l]) => b.at([j!, k!, l!]));
    const want2 = refEinsum("abij,abjk->abik", [a, bb]).data;
    const [e1, e2, e3] = run([Tensor.einsum("...ij,...jk->...ik", toTensor(a), toTensor(b)), Tensor.einsum("...ij,...jk", toTensor(a), toTensor(b)), Tensor.einsum("...ij->...ji", toTensor(a))]);
    expectClose(e1!, want2, "... explicit");
    expectClose(e2!, want2, "... implicit");
    expectClose(e3!, a.permute([0, 1, 3, 2]).data, "... transpose");
  });

  test("labels over a bound Variable: prepared once, run at two lengths; a diagonal over it is refused", () => {
    const xr = randRef([6, 3], 500);
    const S = new Variable("S", 1, 6).bind(4);
    const x = toTensor(xr).shrink([[0, S], null]);
    const gram = Tensor.einsum("sd,td->st", x, x), colSum = Tensor.einsum("sd->d", x);
    expect(gram.shape).toEqual([S, S]);
    const plan = Tensor.prepareBatch([gram, colSum]);
    try {
      for (const s of [2, 5]) {
        plan.executeWithVars({ S: s });
        const xs = xr.shrink([[0, s], [0, 3]]);
        expect(plan.outputShape(0)).toEqual([s, s]);
        expectClose(plan.readOutput(0), refEinsum("sd,td->st", [xs, xs]).data, `gram S=${s}`);
        expectClose(plan.readOutput(1), refEinsum("sd->d", [xs]).data, `column sums S=${s}`);
      }
    } finally {
      plan.dispose();
    }
    expectInvalid(() => Tensor.einsum("ss->s", toTensor(randRef([6, 6], 501)).shrink([[0, S], [0, S]])), "diagonal over a Variable");
  });

  test("bad formulas and operands are GpuError INVALID_VALUE", () => {
    const a = Tensor.rand([2, 3]), b = Tensor.rand([3, 4]), sq = Tensor.rand([3, 3]);
    const bad: [string, () => unknown][] = [
      ["no operands", () => Tensor.einsum("ij->ij")],
      ["formula not a string", () => Tensor.einsum(3 as unknown as string, a)],
      ["operand not a tensor", () => Tensor.einsum("ij->ij", [1, 2] as unknown as Tensor)],
      ["too many terms", () => Tensor.einsum("ij,jk->ik", a)],
      ["too few terms", () => Tensor.einsum("ij->ij", a, b)],
      ["wrong rank", () => Tensor.einsum("ijk->i", a)],
      ["too few subscripts", () => Tensor.einsum("i->i", a)],
      ["bad character", () => Tensor.einsum("i1->i", a)],
      ["size mismatch", () => Tensor.einsum("ij,ij->i", a, b)],
      ["contracted size mismatch", () => Tensor.einsum("ij,jk->ik", a, a)],
      ["unknown output label", () => Tensor.einsum("ij->ik", a)],
      ["repeated output label", () => Tensor.einsum("ij->ii", a)],
      ["two arrows", () => Tensor.einsum("ij->j->i", a)],
      ["two ellipses", () => Tensor.einsum("......->", a)],
      ["ellipsis dropped from the output", () => Tensor.einsum("...j->j", Tensor.rand([2, 3, 4]))],
      ["diagonal of unequal sizes", () => Tensor.einsum("ii->i", a)],
      ["ellipsis more letters than dims", () => Tensor.einsum("...ijk->ijk", a)],
    ];
    for (const [what, f] of bad) expectInvalid(f, what);
    expect(Tensor.einsum("ii->i", sq).shape).toEqual([3]);
  });
});

// ---- sort ----------------------------------------------------------------------------------------

/** A stable sort of every line along `axis` in float64 (NaN as the largest): [values, indices]. */
function refSort(x: Ref, axis: number, descending: boolean): [number[], number[]] {
  const n = x.shape[axis]!;
  const cmp = (a: number, b: number) => {
    if (Number.isNaN(a) || Number.isNaN(b)) return Number(Number.isNaN(a)) - Number(Number.isNaN(b));
    return a < b ? -1 : a > b ? 1 : 0;
  };
  const vals = Ref.fill(x.shape, () => 0), idxs = Ref.fill(x.shape, () => 0);
  const lines = Ref.fill(x.shape.map((d, i) => (i === axis ? 1 : d)), () => 0);
  lines.data.forEach((_, lin) => {
    const base: number[] = [];
    let r = lin;
    for (let i = x.shape.length - 1; i >= 0; i--) {
      const d = i === axis ? 1 : x.shape[i]!;
      base[i] = r % d;
      r = Math.floor(r / d);
    }
    const at = (k: number) => base.map((b, i) => (i === axis ? k : b));
    const order = [...Array(n).keys()].sort((p, q) => (descending ? cmp(x.at(at(q)), x.at(at(p))) : cmp(x.at(at(p)), x.at(at(q)))) || p - q);
    order.forEach((src, k) => {
      const lin2 = at(k).reduce((acc, v, i) => acc * x.shape[i]! + v, 0);
      (vals.data as unknown as number[])[lin2] = x.at(at(src));
      (idxs.data as unknown as number[])[lin2] = src;
    });
  });
  return [[...vals.data], [...idxs.data]];
}

describe("sort", () => {
  for (const fusion of FUSION)
    test(`stable, every axis, ascending and descending, ties, NaN and ±inf, int32, a permuted view (fusion ${fusion ? "on" : "off"})`, () => {
      const r = seededRandom(400);
      const special = [Number.NaN, Infinity, -Infinity, -0];
      const xr = Ref.fill([3, 4, 5], () => (r() < 0.15 ? special[Math.floor(r() * 4)]! : Math.floor(r() * 5) - 2)); // many ties
      const ir = randRef([4, 6], 401, true);
      const pr = randRef([5, 3], 402);
      const cases: [string, Tensor, Ref, number][] = [];
      for (const axis of [0, 1, 2, -1, -3]) cases.push([`float axis ${axis}`, toTensor(xr), xr, axis]);
      cases.push(["int32 axis -1", toTensor(ir, true), ir, -1], ["int32 axis 0", toTensor(ir, true), ir, 0]);
      cases.push(["permuted view", toTensor(pr).T, pr.permute([1, 0]), 1]);
      for (const descending of [false, true]) {
        const outs = cases.flatMap(([, t, , axis]) => t.sort(axis, descending));
        const got = run(outs, { fusion });
        cases.forEach(([what, t, ref, axis], i) => {
          const [wv, wi] = refSort(ref, axis < 0 ? axis + ref.shape.length : axis, descending);
          expect(got[2 * i + 1]).toBeInstanceOf(Int32Array);
          expect(got[2 * i]!.constructor).toBe(t.dtype === "int32" ? Int32Array : Float32Array);
          expect([...got[2 * i + 1]!]).toEqual(wi);
          expectClose(got[2 * i]!, wv, `${what} values (descending ${descending})`, 0);
        });
      }
    });

  test("0-d, zero-size and bad arguments", () => {
    const [v0, i0] = Tensor.from(7).sort();
    expect(v0.shape).toEqual([]);
    expect([...v0.toArray()]).toEqual([7]);
    expect([...i0.toArray()]).toEqual([0]);
    const [ve, ie] = Tensor.zeros([2, 0]).sort();
    expect(ve.shape).toEqual([2, 0]);
    expect(ie.shape).toEqual([2, 0]);
    expect(run([ve, ie]).map((a) => a.length)).toEqual([0, 0]);
    const x = Tensor.rand([3, 4]);
    const S = new Variable("S", 1, 4).bind(2);
    const bad: [string, () => unknown][] = [
      ["axis out of range", () => x.sort(2)],
      ["axis -3", () => x.sort(-3)],
      ["axis not an integer", () => x.sort(0.5)],
      ["descending not a boolean", () => x.sort(-1, 1 as unknown as boolean)],
      ["a variable axis", () => x.shrink([null, [0, S]]).sort(1)],
    ];
    for (const [what, f] of bad) expectInvalid(f, what);
  });
});
