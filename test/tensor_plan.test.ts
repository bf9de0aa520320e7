// ExecutionPlan: prepare once, execute many times; variables without recompiling; buffers,
// memory planning and release; profiling; the inspection surface.
import { describe, expect, test } from "bun:test";
import { Device, GpuError, Status, compileStats, memoryStats } from "../src";
import { ExecMode } from "../src/schedule";
import { Ref, seededRandom } from "../src/tensor/reference";
import { Tensor, Variable, tensorCompileStats } from "../src/tensor";

function randRef(shape: number[], seed: number, lo = -1, hi = 1): Ref {
  const r = seededRandom(seed);
  return Ref.fill(shape, () => Math.fround(lo + (hi - lo) * r()));
}
const toTensor = (r: Ref) => Tensor.from(Float32Array.from(r.data), r.shape);

function expectClose(got: ArrayLike<number>, want: Ref | ArrayLike<number>, tol = 1e-4, what = ""): void {
  const w = want instanceof Ref ? want.data : want;
  expect(got.length).toBe(w.length);
  for (let i = 0; i < got.length; i++)
    if (!(Math.abs(got[i]! - w[i]!) <= tol * (1 + Math.abs(w[i]!)))) throw new Error(`${what}: element ${i}: got ${got[i]}, want ${w[i]}`);
}

function expectGpuError(f: () => unknown, fragment?: string | RegExp): GpuError {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(GpuError);
  if (fragment) expect((err as GpuError).message).toMatch(fragment);
  return err as GpuError;
}

describe("variables", () => {
  const MAX = 16, D = 4;
  const xr = randRef([MAX, D], 1);
  const wq = randRef([D, D], 2), wk = randRef([D, D], 3), wv = randRef([D, D], 4);

  /** Self-attention over the first `s` rows, in float64. */
  function reference(s: number) {
    const x = xr.shrink([[0, s], [0, D]]);
    const q = x.matmul(wq), k = x.matmul(wk), v = x.matmul(wv);
    const att = q.matmul(k.permute([1, 0])).map((a) => a / Math.sqrt(D)).softmax(1);
    return { att, out: att.matmul(v), colMean: x.mean([0]), rowSum: x.sum([1]) };
  }

  test("attention over a Variable sequence length: executeWithVars gives right results with zero recompiles", () => {
    const S = new Variable("S", 1, MAX).bind(8);
    const x = toTensor(xr).shrink([[0, S], null]);
    expect(x.shape).toEqual([S, D]);
    const q = x.matmul(toTensor(wq)), k = x.matmul(toTensor(wk)), v = x.matmul(toTensor(wv));
    const att = q.matmul(k.T).mul(1 / Math.sqrt(D)).softmax(-1);
    const out = att.matmul(v);
    const plan = Tensor.prepareBatch([out, att, x.mean(0), x.sum(1)]);
    try {
      const compiles = tensorCompileStats.compiles, runs = compileStats.compilerRuns;
      for (const s of [8, 1, 5, 16, 3]) {
        if (s === 8) plan.execute();
        else plan.executeWithVars({ S: s });
        expect(plan.outputShape(0)).toEqual([s, D]);
        expect(plan.outputShape(1)).toEqual([s, s]);
        const ref = reference(s);
        expectClose(plan.readOutput(0), ref.out, 1e-4, `out S=${s}`);
        expectClose(plan.readOutput(1), ref.att, 1e-4, `att S=${s}`);
        expectClose(plan.readOutput(2), ref.colMean, 1e-4, `mean S=${s}`);
        expectClose(plan.readOutput(3), ref.rowSum, 1e-4, `sum S=${s}`);
      }
      expect(tensorCompileStats.compiles).toBe(compiles);
      expect(compileStats.compilerRuns).toBe(runs);
      const profiles = plan.executeWithVarsProfiled({ S: 12 });
      expect(profiles.length).toBe(plan.preparedKernels().length);
      expectClose(plan.readOutput(0), reference(12).out, 1e-4, "profiled");
      expect(tensorCompileStats.compiles).toBe(compiles);
    } finally {
      plan.dispose();
    }
  });

  test("out-of-bounds and unknown variables throw before anything runs and change nothing", () => {
    const S = new Variable("S", 2, MAX).bind(6);
    const x = toTensor(xr).shrink([[0, S], null]);
    const plan = x.exp().sum(0).prepare();
    try {
      plan.execute();
      const before = plan.readOutput(0);
      // make the output buffer differ from what any execution would write
      plan.outputBuffer()!.write(new Float32Array(D).fill(-123));
      for (const bad of [0, 1, 17, 2.5, Number.NaN]) {
        const e = expectGpuError(() => plan.executeWithVars({ S: bad }), /bounds/);
        expect(e.code).toBe(Status.INVALID_VALUE);
      }
      expectGpuError(() => plan.executeWithVars({ T: 3 }), /no variable T/);
      expectGpuError(() => plan.executeWithVars({ S: 4, T: 3 }), /no variable T/);
      expect(plan.varValues.get("S")).toBe(6);
      expect([...plan.readOutput(0)]).toEqual(new Array(D).fill(-123)); // nothing ran
      plan.execute();
      expect([...plan.readOutput(0)]).toEqual([...before]);
    } finally {
      plan.dispose();
    }
  });

  test("a variable as a value and as an arange length", () => {
    const S = new Variable("S", 1, 10).bind(4);
    const r = Tensor.arange(S).float().mul(Tensor.fromDims([S], "float32"));
    const plan = r.prepare();
    try {
      plan.execute();
      expect([...plan.readOutput(0)]).toEqual([0, 4, 8, 12]);
      plan.executeWithVars({ S: 7 });
      expect([...plan.readOutput(0)]).toEqual([0, 7, 14, 21, 28, 35, 42]);
    } finally {
      plan.dispose();
    }
  });
});

describe("ExecutionPlan", () => {
  test("batch outputs, buffers by AST id, new inputs through bufferMutById", () => {
    const ar = randRef([5, 6], 10), br = randRef([6], 11);
    const a = toTensor(ar), b = toTensor(br);
    const y = a.add(b).relu();
    const z = a.sum(1);
    const plan = Tensor.prepareBatch([y, z, y]);
    try {
      expect(plan.numOutputs).toBe(3);
      plan.execute();
      expectClose(plan.readOutput(0), ar.zip(br, (p, q) => Math.max(p + q, 0)));
      expectClose(plan.readOutput(1), ar.sum([1]));
      expect(plan.outputBufferAt(2)).toBe(plan.outputBufferAt(0)!);
      expect(plan.outputBufferAt(3)).toBeUndefined();
      expect(plan.outputBuffers().length).toBe(3);
      expect(plan.outputBuffer()).toBe(plan.outputBufferAt(0)!);
      const map = plan.astToBufferMap();
      expect(map.has(a.id)).toBe(true);
      expect(map.has(b.id)).toBe(true);
      expect(map.get(y.id)).toBe(plan.outputBufferIdx);
      expect(plan.bufferAt(plan.outputBufferIdx)).toBe(plan.outputBuffer()!);
      expect(plan.buffer(y.id)).toBe(plan.outputBuffer()!);
      expect(plan.buffer(987654321)).toBeUndefined();
      expect(plan.buffers().length).toBe(plan.bufferInfo.length);
      expect(plan.device).toBe(Device.default());
      // new input data, no new prepare
      const br2 = randRef([6], 12);
      plan.bufferMutById(b.id)!.write(Float32Array.from(br2.data));
      plan.execute();
      expectClose(plan.readOutput(0), ar.zip(br2, (p, q) => Math.max(p + q, 0)));
    } finally {
      plan.dispose();
    }
  });

  test("kernels(), preparedKernels(), preparedOps() and executeProfiled()", () => {
    const x = toTensor(randRef([8, 8], 20));
    const plan = x.softmax(-1).prepare();
    try {
      const ks = plan.kernels();
      expect(ks.length).toBe(3);
      for (const k of ks) {
        expect(k.source).toContain(k.entryPoint);
        expect(k.entryPoint).toMatch(/^[a-z][a-z0-9]*(_[A-Za-z0-9]+)*_[0-9a-f]{16}$/); // what it computes, then its text hash
        if (plan.device.backend === "cpu") expect(k.source).toContain(`BG_KERNEL(${k.entryPoint})`);
        if (plan.device.backend === "cuda") expect(k.source).toContain(`extern "C" __global__ void ${k.entryPoint}(`);
      }
      const pk = plan.preparedKernels();
      expect(pk.map((k) => k.entryPoint)).toEqual(ks.map((k) => k.entryPoint));
      const ops = plan.preparedOps();
      expect(ops.length).toBe(3);
      expect(ops[2]!.writes).toEqual([plan.outputBufferIdx]);
      expect(ops[2]!.reads).toEqual(expect.arrayContaining([ops[0]!.writes[0]!, ops[1]!.writes[0]!]));
      const prof = plan.executeProfiled();
      expect(prof.length).toBe(3);
      for (const [i, p] of prof.entries()) {
        expect(p.entryPoint).toBe(ks[i]!.entryPoint);
        expect(p.source).toBe(ks[i]!.source);
        expect(p.device).toBe(plan.device.spec);
        expect(p.numBuffers).toBe(pk[i]!.bufferIndices.length);
        expect(p.elapsedMs).toBeGreaterThanOrEqual(0);
      }
    } finally {
      plan.dispose();
    }
  });

  test("memory planner: intermediates with disjoint lifetimes share memory; results unchanged", () => {
    const xr = randRef([64, 64], 30);
    const build = () => {
      let t = toTensor(xr);
      for (let i = 0; i < 8; i++) t = t.mul(1.01).add(0.01).tanh();
      return t;
    };
    const planned = build().prepare({ fusion: false });
    const unplanned = build().prepare({ fusion: false, noMemoryPlanning: true });
    try {
      expect(planned.preparedKernels().length).toBe(24);
      // 23 intermediates of 16 KiB each; at most two are live at once
      expect(planned.intermediateBytesUnplanned).toBe(23 * 64 * 64 * 4);
      expect(planned.intermediateBytes).toBeLessThanOrEqual(2 * 64 * 64 * 4);
      expect(unplanned.intermediateBytes).toBe(23 * 64 * 64 * 4);
      expect(planned.peakBytes).toBeLessThan(unplanned.peakBytes);
      planned.execute();
      unplanned.execute();
      expect([...planned.readOutput(0)]).toEqual([...unplanned.readOutput(0)]);
      let want = xr;
      for (let i = 0; i < 8; i++) want = want.map((v) => Math.tanh(v * 1.01 + 0.01));
      expectClose(planned.readOutput(0), want, 1e-5);
    } finally {
      planned.dispose();
      unplanned.dispose();
    }
  });

  test("releaseIntermediateBuffers frees the arena; releaseAllBuffers frees all and the plan then throws", () => {
    const xr = randRef([128, 128], 40);
    const base = memoryStats.liveBytes;
    const x = toTensor(xr);
    const y = x.exp().sum(1, true);
    const plan = x.sub(y).mul(2).prepare({ fusion: false });
    const held = memoryStats.liveBytes - base;
    expect(held).toBeGreaterThanOrEqual(plan.peakBytes);
    plan.execute();
    const first = plan.readOutput(0);
    plan.releaseIntermediateBuffers();
    expect(memoryStats.liveBytes - base).toBe(held - plan.intermediateBytes);
    expect([...plan.readOutput(0)]).toEqual([...first]); // outputs survive
    plan.execute(); // intermediates come back
    expect(memoryStats.liveBytes - base).toBe(held);
    expect([...plan.readOutput(0)]).toEqual([...first]);
    plan.releaseAllBuffers();
    expect(memoryStats.liveBytes).toBe(base);
    for (const f of [() => plan.execute(), () => plan.outputBuffer(), () => plan.readOutput(0), () => plan.buffer(x.id), () => plan.executeWithVars({}), () => plan.executeProfiled()]) {
      const e = expectGpuError(f, /released/);
      expect(e.code).toBe(Status.ILLEGAL_STATE);
    }
    plan.releaseAllBuffers(); // idempotent
    plan.dispose();
    plan.dispose();
    expectGpuError(() => plan.execute(), /disposed/);
  });

  test("using disposes the plan and frees its buffers", () => {
    const base = memoryStats.liveBytes;
    {
      using plan = Tensor.ones([32, 32]).add(1).prepare();
      plan.execute();
      expect([...plan.readOutput(0).slice(0, 3)]).toEqual([2, 2, 2]);
      expect(memoryStats.liveBytes).toBeGreaterThan(base);
    }
    expect(memoryStats.liveBytes).toBe(base);
  });

  test("toArray realizes and caches; a warm prepare hits the in-process kernel cache", () => {
    const xr = randRef([10, 3], 50);
    const t = toTensor(xr).mul(3).sum(0);
    expectClose(t.toArray(), xr.sum([0]).map((v) => 3 * v));
    const compiles = tensorCompileStats.compiles;
    const again = toTensor(xr).mul(3).sum(0).prepare();
    expect(tensorCompileStats.compiles).toBe(compiles);
    again.dispose();
    expect(t.toList().length).toBe(3);
  });

  test("executeAsync resolves with the results", async () => {
    const plan = Tensor.arange(6).float().sqrt().prepare();
    try {
      await plan.executeAsync();
      expectClose(plan.readOutput(0), [0, 1, Math.SQRT2, Math.sqrt(3), 2, Math.sqrt(5)], 1e-6);
    } finally {
      plan.dispose();
    }
  });
});

describe("ExecMode", () => {
  test("every mode gives the same results, also across variable changes, with zero recompiles", async () => {
    const S = new Variable("S", 1, 24).bind(24);
    const xr = randRef([24, 8], 80), wr = randRef([8, 8], 81);
    const x = toTensor(xr).shrink([[0, S], null]);
    const h = x.matmul(toTensor(wr)).gelu();
    const att = h.matmul(h.T).softmax(-1).matmul(h); // [S, 8]
    const side = h.sum(0).add(x.max(0)); // independent branch: MultiStream can overlap it
    const plan = Tensor.prepareBatch([att, side]);
    const reference = (s: number) => {
      const hx = xr.shrink([[0, s], [0, 8]]).matmul(wr).map((v) => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3))));
      return [hx.matmul(hx.permute([1, 0])).softmax(1).matmul(hx), hx.sum([0]).zip(xr.shrink([[0, s], [0, 8]]).max([0]), (a, b) => a + b)];
    };
    try {
      const compiles = tensorCompileStats.compiles, runs = compileStats.compilerRuns;
      const modes = [ExecMode.Stream, ExecMode.Graph, ExecMode.Eager, ExecMode.MultiStream(2), ExecMode.MultiStream(3)];
      for (const s of [24, 7, 1, 16]) {
        plan.executeWithVars({ S: s }, { mode: ExecMode.Stream });
        const [want0, want1] = reference(s);
        for (const mode of modes) {
          // poison the outputs so that a mode that skipped work would be caught
          plan.outputBufferAt(0)!.fill(0);
          plan.outputBufferAt(1)!.fill(0);
          plan.execute({ mode });
          expectClose(plan.readOutput(0), want0!, 1e-4, `att ${mode} S=${s}`);
          expectClose(plan.readOutput(1), want1!, 1e-4, `side ${mode} S=${s}`);
        }
        plan.outputBufferAt(0)!.fill(0);
        await plan.executeAsync({ mode: ExecMode.Graph });
        expectClose(plan.readOutput(0), want0!, 1e-4, `async graph S=${s}`);
        plan.outputBufferAt(0)!.fill(0);
        plan.execute({ stream: plan.device.defaultStream });
        expectClose(plan.readOutput(0), want0!, 1e-4, `direct S=${s}`);
      }
      expect(tensorCompileStats.compiles).toBe(compiles);
      expect(compileStats.compilerRuns).toBe(runs);
      expect(() => plan.execute({ mode: "Graph" as unknown as ExecMode })).toThrow(GpuError);
      // the schedule: one Step per kernel, reads and writes as byte ranges of the plan buffers
      const { schedule } = plan.schedule();
      expect(schedule.length).toBe(plan.preparedKernels().length);
      const deps = schedule.dependencies();
      expect(deps[deps.length - 1]!.length).toBeGreaterThan(0);
    } finally {
      plan.dispose();
    }
  });
});

describe("names from users are bounded where they become file names (issue 23 item 5)", () => {
  test("a 240-character Variable name and a rank-120 tensor compile and run (no ENAMETOOLONG)", () => {
    const dev = Device.open("cpu");
    try {
      const V = new Variable(`n${"x".repeat(239)}`, 1, 8).bind(5);
      const x = Tensor.from(Float32Array.from({ length: 8 }, (_, i) => i), [8]).shrink([[0, V]]);
      using plan = x.mul(2).prepare({ device: dev });
      plan.execute();
      expect([...plan.readOutput(0)]).toEqual([0, 2, 4, 6, 8]);
      const shape = new Array<number>(120).fill(1);
      shape[119] = 3;
      using deep = Tensor.from(new Float32Array([1, 2, 3]), shape).add(1).sum().prepare({ device: dev });
      deep.execute();
      expect([...deep.readOutput(0)]).toEqual([9]);
    } finally {
      dev.dispose();
    }
  }, 120_000);
});
