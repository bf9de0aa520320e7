// Issue 5: CommandEncoder batching, GraphExecutor / GraphSession / ComputeGraph.
import { afterAll, describe, expect, test } from "bun:test";
import { N, readU64, slot } from "../ffi/native";
import { Cmd } from "../ffi/sys";
import { Device, Program, Status, type Buffer, type Kernel } from "../src";
import { CommandEncoder } from "../src/encoder";
import { ComputeGraph, GraphExecutor, type GraphDispatchOptions } from "../src/graph_executor";
import { expectGpuError, expectGpuErrorAsync, randomFloats, rng } from "./helpers";
import { kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "basic" });
const s = dev.createStream();
const vadd = mod.kernel("vadd", ["buffer", "buffer", "buffer", "i32"]);
const saxpy = mod.kernel("saxpy", ["f32", "buffer", "buffer", "i32"]);
const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
const ex = new GraphExecutor(dev, { stream: s });
afterAll(() => {
  s.dispose();
  mod.dispose();
  dev.dispose();
});

const BLOCK = 128;
const grid = (n: number) => Math.ceil(n / BLOCK);

/** What every op sink has: a session, a ComputeGraph, a CommandEncoder, or launches one by one. */
interface Sink {
  dispatch(k: Kernel, cfg: GraphDispatchOptions): unknown;
  copy(dst: Buffer, src: Buffer, opts?: { bytes?: number }): unknown;
  fill(buf: Buffer, value: number, opts: { type: "f32" }): unknown;
  barrier(): unknown;
}

// A launch takes no reads/writes (they are a graph's; Kernel.launch and CommandEncoder.dispatch refuse them).
const launchOnly = ({ reads: _r, writes: _w, ...cfg }: GraphDispatchOptions) => cfg;

const oneByOne: Sink = {
  dispatch: (k, cfg) => k.launch(s, launchOnly(cfg)),
  copy: (dst, src, opts) => s.copy(dst, src, opts),
  fill: (buf, value, opts) => s.fill(buf, value, opts),
  barrier: () => {},
};

// ---- a random chain of dependent and independent ops over several buffers and views ----------

const NF = 1024; // floats per buffer
interface Region {
  buf: number;
  off: number; // in floats
  len: number;
  view: Buffer;
}
type Op =
  | { k: "vadd"; a: Region; b: Region; c: Region; declare: boolean }
  | { k: "saxpy"; alpha: number; x: Region; y: Region; declare: boolean }
  | { k: "add"; x: Region; v: number; declare: boolean }
  | { k: "copy"; dst: Region; src: Region }
  | { k: "fill"; dst: Region; value: number }
  | { k: "barrier" };

const sameOrDisjoint = (p: Region, q: Region) =>
  p.buf !== q.buf || (p.off === q.off && p.len === q.len) || p.off + p.len <= q.off || q.off + q.len <= p.off;
const disjoint = (p: Region, q: Region) => p.buf !== q.buf || p.off + p.len <= q.off || q.off + q.len <= p.off;

function makeChain(bufs: Buffer[], count: number, seed: number): Op[] {
  const r = rng(seed);
  const pick = <T,>(a: T[]): T => a[r() % a.length]!;
  const full: Region[] = [], half: Region[] = [];
  bufs.forEach((b, i) => {
    full.push({ buf: i, off: 0, len: NF, view: b });
    for (const off of [0, NF / 4, NF / 2]) half.push({ buf: i, off, len: NF / 2, view: b.view(off * 4, (NF / 2) * 4) });
  });
  const ops: Op[] = [];
  const value = () => ((r() % 2000) - 1000) / 500;
  while (ops.filter((o) => o.k !== "barrier").length < count) {
    const cls = r() % 3 === 0 ? full : half;
    const kind = r() % 6;
    const declare = r() % 2 === 0;
    if (kind <= 1) {
      const a = pick(cls), b = pick(cls), c = pick(cls);
      if (sameOrDisjoint(c, a) && sameOrDisjoint(c, b)) ops.push({ k: "vadd", a, b, c, declare });
    } else if (kind === 2) {
      const x = pick(cls), y = pick(cls);
      if (sameOrDisjoint(y, x)) ops.push({ k: "saxpy", alpha: value(), x, y, declare });
    } else if (kind === 3) ops.push({ k: "add", x: pick(cls), v: value(), declare });
    else if (kind === 4) {
      const dst = pick(cls), src = pick(cls);
      if (disjoint(dst, src)) ops.push({ k: "copy", dst, src });
    } else ops.push({ k: "fill", dst: pick(cls), value: value() });
    if (r() % 5 === 0) ops.push({ k: "barrier" });
  }
  return ops;
}

function emit(sink: Sink, ops: Op[]): void {
  for (const o of ops) {
    switch (o.k) {
      case "vadd": {
        const cfg: GraphDispatchOptions = { grid: grid(o.c.len), block: BLOCK, args: [o.a.view, o.b.view, o.c.view, o.c.len] };
        if (o.declare) Object.assign(cfg, { reads: [o.a.view, o.b.view], writes: [o.c.view] });
        sink.dispatch(vadd, cfg);
        break;
      }
      case "saxpy": {
        const cfg: GraphDispatchOptions = { grid: [grid(o.y.len), 1], block: [BLOCK], args: [o.alpha, o.x.view, o.y.view, o.y.len] };
        if (o.declare) Object.assign(cfg, { reads: [o.x.view, o.y.view], writes: [{ buffer: o.y.view }] });
        sink.dispatch(saxpy, cfg);
        break;
      }
      case "add": {
        const cfg: GraphDispatchOptions = { grid: grid(o.x.len), block: BLOCK, args: [o.x.view, o.v, o.x.len] };
        if (o.declare) Object.assign(cfg, { reads: [o.x.view], writes: [o.x.view] });
        sink.dispatch(addScalar, cfg);
        break;
      }
      case "copy":
        sink.copy(o.dst.view, o.src.view);
        break;
      case "fill":
        sink.fill(o.dst.view, o.value, { type: "f32" });
        break;
      case "barrier":
        sink.barrier();
    }
  }
}

function reference(init: Float32Array[], ops: Op[]): Float32Array[] {
  const m = init.map((a) => a.slice());
  const at = (g: Region) => m[g.buf]!.subarray(g.off, g.off + g.len);
  const f = Math.fround;
  for (const o of ops) {
    if (o.k === "vadd") {
      const a = at(o.a), b = at(o.b), c = at(o.c);
      const t = new Float32Array(c.length);
      for (let i = 0; i < t.length; i++) t[i] = f(a[i]! + b[i]!);
      c.set(t);
    } else if (o.k === "saxpy") {
      const x = at(o.x), y = at(o.y);
      for (let i = 0; i < y.length; i++) y[i] = f(f(f(o.alpha) * x[i]!) + y[i]!);
    } else if (o.k === "add") {
      const x = at(o.x);
      for (let i = 0; i < x.length; i++) x[i] = f(x[i]! + f(o.v));
    } else if (o.k === "copy") at(o.dst).set(at(o.src).slice());
    else if (o.k === "fill") at(o.dst).fill(o.value);
  }
  return m;
}

function expectClose(got: Float32Array, want: Float32Array, what: string): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < got.length; i++) {
    const w = want[i]!, g = got[i]!;
    if (!(Math.abs(g - w) <= 1e-4 * Math.max(1, Math.abs(w)))) throw new Error(`${what}[${i}]: got ${g}, want ${w}`);
  }
}

function expectIdentical(a: Float32Array[], b: Float32Array[], what: string): void {
  for (let i = 0; i < a.length; i++) {
    const x = new Uint32Array(a[i]!.buffer), y = new Uint32Array(b[i]!.buffer);
    for (let j = 0; j < x.length; j++) if (x[j] !== y[j]) throw new Error(`${what}: buffer ${i} differs at ${j}: ${a[i]![j]} vs ${b[i]![j]}`);
  }
}

/** Check a barrier plan against the hazards directly: every barrier is needed, none is missing. */
function checkPlan(g: ComputeGraph): void {
  const plan = new Set(g.barrierPlan().map((b) => b.before));
  const ov = (p: { address: number; bytes: number }, q: { address: number; bytes: number }) =>
    p.address < q.address + q.bytes && q.address < p.address + p.bytes;
  const hazard = (a: (typeof g.nodes)[number], b: (typeof g.nodes)[number]) =>
    b.reads.some((r) => a.writes.some((w) => ov(r, w))) ||
    b.writes.some((w) => a.reads.some((r) => ov(w, r)) || a.writes.some((x) => ov(w, x)));
  let since: (typeof g.nodes)[number][] = [];
  for (const n of g.nodes) {
    if (n.kind === "barrier") continue;
    const needed = since.some((p) => hazard(p, n));
    expect({ node: n.index, barrier: plan.has(n.index) }).toEqual({ node: n.index, barrier: needed });
    if (needed) since = [];
    since.push(n);
  }
}

describe("a chain of 40 kernels, copies and fills: every path gives the same result", () => {
  const bufs = [0, 1, 2, 3].map(() => dev.alloc(NF * 4));
  const init = bufs.map((_, i) => randomFloats(NF, 100 + i));
  const ops = makeChain(bufs, 40, 7);
  const want = reference(init, ops);
  const load = () => bufs.forEach((b, i) => b.write(init[i]!));
  const readAll = () => bufs.map((b) => b.read(Float32Array));
  let graph: ComputeGraph;
  let results: Float32Array[];

  test("the chain has dependent and independent ops over views", () => {
    const real = ops.filter((o) => o.k !== "barrier");
    expect(real.length).toBe(40);
    expect(real.filter((o) => o.k === "vadd" || o.k === "saxpy" || o.k === "add").length).toBeGreaterThanOrEqual(20);
  });

  test("launched one by one (Kernel.launch, Stream.copy, Stream.fill) matches the TypeScript reference", () => {
    load();
    emit(oneByOne, ops);
    s.synchronize();
    results = readAll();
    results.forEach((got, i) => expectClose(got, want[i]!, `buffer ${i}`));
  });

  test("a direct session: identical, one crossing", () => {
    load();
    const sess = ex.begin();
    emit(sess, ops);
    sess.finish();
    expectIdentical(readAll(), results, "direct session");
    expect(sess.stats.ffiCrossings).toBe(1);
    expect(sess.stats.commits).toBe(1);
    expect(sess.stats.dispatches).toBe(ops.filter((o) => o.k === "vadd" || o.k === "saxpy" || o.k === "add").length);
    expect(sess.stats.barriers).toBe(ops.filter((o) => o.k === "barrier").length);
  });

  test("recorded, then replayed sequentially at finish: identical", () => {
    load();
    const sess = ex.beginRecorded();
    emit(sess, ops);
    expectIdentical(readAll(), init, "while recording"); // recording runs nothing
    sess.finish();
    expectIdentical(readAll(), results, "recorded session");
    graph = sess.graph!;
    expect(graph.nodeCount).toBe(ops.length);
    expect(sess.stats.ffiCrossings).toBe(1);
  });

  test("the recorded graph replayed with computed barriers: identical, barriers only at hazards", () => {
    load();
    ex.replay(graph, { barriers: "computed" });
    expectIdentical(readAll(), results, "computed barriers");
    checkPlan(graph);
    const plan = graph.barrierPlan();
    expect(plan.length).toBeGreaterThan(0);
    expect(plan.length).toBeLessThan(40);
    const enc = graph.encoding("computed");
    expect(enc.counts.barriers).toBe(plan.length);
    expect(enc.counts.dispatches).toBe(graph.dispatchCount);
  });

  test("encodeSequential / encodeWithBarriers into one encoder, committed once: identical", () => {
    for (const mode of ["seq", "computed"] as const) {
      load();
      const enc = new CommandEncoder(dev);
      if (mode === "seq") graph.encodeSequential(enc);
      else graph.encodeWithBarriers(enc);
      expect(enc.commit(s)).toBe(true);
      s.synchronize();
      expectIdentical(readAll(), results, mode);
    }
  });

  test("the same ops appended to a bare CommandEncoder: identical", () => {
    load();
    const enc = new CommandEncoder(dev);
    emit({ dispatch: (k, cfg) => enc.dispatch(k, launchOnly(cfg)), copy: (d, src, o) => enc.copy(d, src, o), fill: (b, v, o) => enc.fill(b, v, o), barrier: () => enc.barrier() }, ops);
    expect(enc.commandCount).toBe(ops.length);
    expect(enc.byteLength).toBe(graph.byteLength);
    expect(enc.bytes()).toEqual(graph.encoding().bytes());
    enc.commit(s);
    expect(enc.byteLength).toBe(0);
    s.synchronize();
    expectIdentical(readAll(), results, "encoder");
  });
});

describe("computed barriers on a hand-checked graph", () => {
  const A = dev.alloc(1024), B = dev.alloc(1024), C = dev.alloc(1024), D = dev.alloc(1024), E = dev.alloc(2048);
  const E0 = E.view(0, 1024), E1 = E.view(1024, 1024), Emid = E.view(512, 1024);
  const g = new ComputeGraph(dev);
  const n = 256;
  g.fill(A, 1, { type: "f32" }); //                                                       0
  g.fill(B, 2, { type: "f32" }); //                                                       1: independent of 0
  g.dispatch(vadd, { grid: 2, block: BLOCK, args: [A, B, C, n], reads: [A, B], writes: [C] }); // 2: RAW on A (0)
  g.dispatch(addScalar, { grid: 2, block: BLOCK, args: [D, 1, n] }); //                   3: D only: none
  g.dispatch(saxpy, { grid: 2, block: BLOCK, args: [2, C, D, n], reads: [C, D], writes: [D] }); // 4: RAW on C (2)
  g.fill(E0, 3, { type: "f32" }); //                                                      5: none
  g.fill(E1, 4, { type: "f32" }); //                                                      6: adjacent to E0: none
  g.dispatch(addScalar, { grid: 2, block: BLOCK, args: [Emid, 1, n] }); //                7: overlaps E0: RAW (5)
  g.copy(B, A); //                                                                        8: reads A, writes B: none
  g.fill(A, 3, { type: "f32" }); //                                                       9: WAR on A (8)
  g.fill(C, 0, { type: "f32" }); //                                                      10: none
  g.fill(C, 5, { type: "f32" }); //                                                      11: WAW on C (10)
  g.dispatch(vadd, { grid: 2, block: BLOCK, args: [E0, E1, B, n], reads: [E0, E1], writes: [B] }); // 12: none
  g.dispatch(vadd, { grid: 2, block: BLOCK, args: [E0, E1, D, n], reads: [E0, E1], writes: [D] }); // 13: read-read: none
  g.barrier(); //                                                                        14: recorded barrier
  g.fill(D, 6, { type: "f32" }); //                                                      15: WAW on D (13)

  test("barriers exactly before nodes 2, 4, 7, 9, 11 and 15, with the right hazards", () => {
    expect(g.barrierPlan()).toEqual([
      { before: 2, hazard: "RAW", against: 0 },
      { before: 4, hazard: "RAW", against: 2 },
      { before: 7, hazard: "RAW", against: 5 },
      { before: 9, hazard: "WAR", against: 8 },
      { before: 11, hazard: "WAW", against: 10 },
      { before: 15, hazard: "WAW", against: 13 },
    ]);
    checkPlan(g);
  });

  test("the encodings hold barrier commands at exactly those places", () => {
    const ops = (mode: "recorded" | "computed") => g.encoding(mode).describe().map((c) => c.op);
    expect(ops("computed")).toEqual([
      "memset", "memset", "barrier", "launch", "launch", "barrier", "launch", "memset", "memset", "barrier", "launch",
      "copy", "barrier", "memset", "memset", "barrier", "memset", "launch", "launch", "barrier", "memset",
    ]);
    expect(ops("recorded")).toEqual([
      "memset", "memset", "launch", "launch", "launch", "memset", "memset", "launch",
      "copy", "memset", "memset", "memset", "launch", "launch", "barrier", "memset",
    ]);
    expect(g.barrierCount("computed")).toBe(6);
    expect(g.barrierCount("recorded")).toBe(1);
  });

  test("both encodings compute the same values", () => {
    const run = (mode: "recorded" | "computed") => {
      for (const b of [A, B, C, D, E]) b.fill(0);
      D.write(randomFloats(256, 5));
      ex.replay(g, { barriers: mode });
      return [A, B, C, D, E].map((b) => b.read(Float32Array));
    };
    const seq = run("recorded"), comp = run("computed");
    expectIdentical(comp, seq, "hand graph");
    expect(seq[0]!.every((v) => v === 3)).toBe(true); // A
    // B = E0 + E1 after node 7 added 1 to Emid (the top half of E0, the bottom half of E1): 3+5 or 4+4
    expect(seq[1]!.every((v) => v === 8)).toBe(true);
    expect(seq[2]!.every((v) => v === 5)).toBe(true); // C
    expect(seq[3]!.every((v) => v === 6)).toBe(true); // D
  });
});

describe("replays with new scalar arguments", () => {
  const n = 1000;
  const X = dev.alloc(n * 4), Y = dev.alloc(n * 4);
  const sess = ex.beginRecorded();
  sess
    .fill(X, 1, { type: "f32" })
    .fill(Y, 0, { type: "f32" })
    .barrier()
    .dispatch(addScalar, { grid: grid(n), block: BLOCK, args: [X, 0, n] })
    .barrier()
    .dispatch(saxpy, { grid: grid(n), block: BLOCK, args: [1, X, Y, n], reads: [X, Y], writes: [Y] });
  sess.finish();
  const g = sess.graph!;
  const ADD = 3, SAXPY = 5;

  test("setArgs rewrites only the node's argument words", () => {
    const before = g.encoding().bytes();
    g.setArgs(ADD, [X, 0.25, 17]);
    const after = g.encoding().bytes();
    const lo = g.argOffset(ADD), hi = lo + 8 * 3;
    const changed: number[] = [];
    for (let i = 0; i < before.length; i++) if (before[i] !== after[i]) changed.push(i);
    expect(changed.length).toBeGreaterThan(0);
    for (const i of changed) expect(i >= lo && i < hi).toBe(true);
  });

  test("100 replays with changing scalars are each right (recorded and computed barriers)", () => {
    const r = rng(42);
    const f = Math.fround;
    const submits0 = g.submits;
    g.barrierPlan(); // build the computed encoding early so setArgs must patch both
    g.encoding("computed");
    for (let k = 0; k < 100; k++) {
      const v = ((r() % 1000) - 500) / 100, alpha = ((r() % 1000) - 500) / 250, m = 1 + (r() % n);
      g.setArgs(ADD, [X, v, m]);
      g.setArg(SAXPY, 0, alpha);
      g.setArg(SAXPY, 3, m);
      ex.replay(g, { barriers: k % 2 ? "computed" : "recorded" });
      const x = X.read(Float32Array), y = Y.read(Float32Array);
      const xv = f(1 + f(v)), yv = f(f(f(alpha) * xv) + 0);
      for (let i = 0; i < n; i++) {
        const wx = i < m ? xv : 1, wy = i < m ? yv : 0;
        if (x[i] !== wx || Math.abs(y[i]! - wy) > 1e-6 * Math.max(1, Math.abs(wy)))
          throw new Error(`replay ${k} (v=${v}, alpha=${alpha}, n=${m}): x[${i}]=${x[i]} want ${wx}, y[${i}]=${y[i]} want ${wy}`);
      }
    }
    expect(g.submits - submits0).toBe(100);
  });

  test("setArgs refuses bad values, other buffers, and non-dispatch nodes, changing nothing", () => {
    const before = g.encoding().bytes();
    const Z = dev.alloc(n * 4);
    expectGpuError(() => g.setArgs(ADD, [X, "1" as unknown as number, n]), Status.INVALID_VALUE, /f32/);
    expectGpuError(() => g.setArgs(ADD, [X, 1]), Status.INVALID_VALUE, /expected 3 arguments/);
    expectGpuError(() => g.setArgs(ADD, [Z, 1, n]), Status.INVALID_VALUE, /buffer range it was recorded with/);
    expectGpuError(() => g.setArgs(0, [X, 1, n]), Status.INVALID_VALUE, /fill, not a dispatch/);
    expectGpuError(() => g.setArgs(99, [X, 1, n]), Status.INVALID_VALUE, /not in/);
    expectGpuError(() => g.setArg(SAXPY, 4, 1), Status.INVALID_VALUE, /argument index/);
    expect(g.encoding().bytes()).toEqual(before);
    g.setArgs(ADD, [X.view(0), 1, n]); // the same bytes through another view is fine
    Z.dispose();
  });
});

describe("sessions: misuse, dropping, counters", () => {
  const X = dev.alloc(4096);

  for (const mode of ["direct", "recorded"] as const) {
    const begin = () => (mode === "direct" ? ex.begin() : ex.beginRecorded());

    test(`${mode}: every op after finish() throws ILLEGAL_STATE`, async () => {
      const sess = begin();
      sess.fill(X, 1, { type: "u8" });
      sess.finish();
      expect(sess.state).toBe("finished");
      expectGpuError(() => sess.dispatch(addScalar, { grid: 1, block: 1, args: [X, 1, 1] }), Status.ILLEGAL_STATE, /finished/);
      expectGpuError(() => sess.copy(X, X.view(0, 16), { dstOffset: 64 }), Status.ILLEGAL_STATE);
      expectGpuError(() => sess.fill(X, 0), Status.ILLEGAL_STATE);
      expectGpuError(() => sess.barrier(), Status.ILLEGAL_STATE);
      expectGpuError(() => sess.commit(), Status.ILLEGAL_STATE);
      expectGpuError(() => sess.finish(), Status.ILLEGAL_STATE);
      await expectGpuErrorAsync(() => sess.finishAsync(), Status.ILLEGAL_STATE);
      sess.dispose(); // harmless
      expect(sess.stats.ffiCrossings).toBe(1);
    });

    test(`${mode}: a session dropped without finish() runs nothing`, () => {
      X.fill(9, { type: "u8" });
      {
        using sess = begin();
        sess.fill(X, 1, { type: "u8" }).barrier().dispatch(addScalar, { grid: 1, block: 16, args: [X, 1, 16] });
      }
      const sess2 = begin();
      sess2.fill(X, 2, { type: "u8" });
      sess2.dispose();
      expect(sess2.state).toBe("disposed");
      expect(sess2.graph).toBe(null);
      expectGpuError(() => sess2.fill(X, 3, { type: "u8" }), Status.ILLEGAL_STATE, /disposed/);
      s.synchronize();
      expect(X.read().every((v) => v === 9)).toBe(true);
      expect(sess2.stats.ffiCrossings).toBe(0);
    });

    test(`${mode}: finishAsync resolves after the work`, async () => {
      const sess = begin();
      sess.fill(X, 0).dispatch(addScalar, { grid: grid(1024), block: BLOCK, args: [X, 2.5, 1024] });
      await sess.finishAsync();
      expect(sess.state).toBe("finished");
      expect(X.read(Float32Array).every((v) => v === 2.5)).toBe(true);
    });

    test(`${mode}: one FFI crossing per commit and none per op`, () => {
      // Count every call into the library while the session works.
      const calls: Record<string, number> = {};
      const saved: [string, unknown][] = [];
      const table = N as unknown as Record<string, (...a: unknown[]) => unknown>;
      for (const name of Object.keys(table)) {
        const fn = table[name]!;
        if (typeof fn !== "function") continue;
        saved.push([name, fn]);
        table[name] = (...a: unknown[]) => {
          calls[name] = (calls[name] ?? 0) + 1;
          return fn(...a);
        };
      }
      let afterOps: Record<string, number>, afterCommit: Record<string, number>;
      const sess = begin();
      try {
        for (let i = 0; i < 10; i++) sess.dispatch(addScalar, { grid: 1, block: 16, args: [X, 1, 16] });
        sess.barrier().fill(X, 0, { bytes: 64 }).copy(X, X.view(0, 64), { dstOffset: 1024 });
        afterOps = { ...calls };
        sess.commit();
        afterCommit = { ...calls };
        sess.commit(); // nothing new: no crossing
        for (let i = 0; i < 5; i++) sess.dispatch(addScalar, { grid: 1, block: 16, args: [X, 1, 16] });
        sess.fill(X, 1, { type: "u8", bytes: 64 });
        sess.finish();
      } finally {
        for (const [name, fn] of saved) table[name] = fn as (...a: unknown[]) => unknown;
      }
      expect(afterOps).toEqual({});
      expect(afterCommit).toEqual({ bg_submit_ex: 1 });
      expect(calls.bg_submit_ex).toBe(2);
      expect(sess.stats).toEqual({ dispatches: 15, barriers: 1, copies: 1, fills: 2, commits: 3, ffiCrossings: 2, waits: 1 });
    });
  }

  test("the executor adds up ended sessions and replays", () => {
    const e2 = new GraphExecutor(dev, { stream: s });
    const a = e2.begin();
    a.fill(X, 1, { type: "u8" }).finish();
    const b = e2.beginRecorded();
    b.dispatch(addScalar, { grid: 1, block: 1, args: [X, 1, 1] }).finish();
    e2.replay(b.graph!);
    e2.begin().dispose();
    expect(e2.stats).toEqual({ dispatches: 2, barriers: 0, copies: 0, fills: 1, commits: 3, ffiCrossings: 3, waits: 3, sessions: 3, replays: 1 });
    expect(e2.device).toBe(dev);
  });
});

describe("sessions that flush by themselves", () => {
  test("flushEvery commits every n dispatches, in order, one crossing each", () => {
    using buf = dev.alloc(256 * 4).fill(0, { type: "f32" });
    using session = ex.begin({ flushEvery: 100 });
    for (let i = 0; i < 1000; i++) session.dispatch(addScalar, { grid: 1, block: 256, args: [buf, i % 2 ? 2 : -1, 256] });
    expect(session.stats.commits).toBe(10); // ten chunks handed over while encoding
    session.finish();
    expect(session.stats.commits).toBe(11); // finish()'s own commit found nothing left…
    expect(session.stats.ffiCrossings).toBe(10); // …so it did not cross
    expect(buf.read(Float32Array).every((v) => v === 500)).toBe(true);
    expectGpuError(() => ex.begin({ flushEvery: -1 }), Status.INVALID_VALUE, /flushEvery/);
    expectGpuError(() => ex.begin({ flushEvery: 1.5 }), Status.INVALID_VALUE, /flushEvery/);
  });
});

describe("CommandEncoder: validation, growth, events, bad offsets", () => {
  const A = dev.alloc(4096), B = dev.alloc(4096);

  test("a bad command throws with its code and leaves the encoder as it was", () => {
    const enc = new CommandEncoder(dev);
    enc.fill(A, 0, { type: "f32" }).dispatch(addScalar, { grid: grid(1024), block: BLOCK, args: [A, 1, 1024] }).barrier();
    const bytes = enc.bytes(), len = enc.byteLength, count = enc.commandCount, counts = enc.counts;
    const dead = dev.alloc(64);
    dead.dispose();
    const deadEvent = dev.createEvent();
    deadEvent.dispose();
    const mod2 = Program.compile(dev, kernelSources, { name: "basic" });
    const deadKernel = mod2.kernel("add_scalar", ["buffer", "f32", "i32"]);
    mod2.dispose();
    const I = Status.INVALID_VALUE, H = Status.INVALID_HANDLE;
    const d = (cfg: Partial<GraphDispatchOptions>, k: Kernel = addScalar) =>
      () => enc.dispatch(k, { grid: 1, block: 1, args: [A, 1, 1], ...cfg } as GraphDispatchOptions);
    expectGpuError(d({ args: [A, 1] }), I, /expected 3 arguments/);
    expectGpuError(d({ args: [A, 1, "x" as unknown as number] }), I, /i32/);
    expectGpuError(d({ args: [A, 1, 2 ** 31] }), I, /i32/);
    expectGpuError(d({ args: [1, 1, 1] }), I, /Buffer/);
    expectGpuError(d({ args: [dead, 1, 1] }), H, /disposed/);
    expectGpuError(d({ grid: 0 }), I, /grid/);
    expectGpuError(d({ grid: [1, 0] }), I, /grid/);
    expectGpuError(d({ block: 1.5 }), I, /block/);
    expectGpuError(d({ block: [1, 2, 3, 4] as unknown as number }), I, /block/);
    expectGpuError(d({ sharedBytes: -1 }), I, /sharedBytes/);
    expectGpuError(d({}, deadKernel), H, /disposed/);
    expectGpuError(() => enc.dispatch("k" as unknown as Kernel, { grid: 1, block: 1, args: [] }), I, /Kernel/);
    expectGpuError(() => enc.copy(A, B, { bytes: 4097 }), I, /past the end/);
    expectGpuError(() => enc.copy(A, B, { srcOffset: 8, bytes: 4090 }), I, /past the end/);
    expectGpuError(() => enc.copy(A, B, { dstOffset: -1 }), I, /offset/);
    expectGpuError(() => enc.copy(A, "b" as unknown as Buffer), I, /Buffer/);
    expectGpuError(() => enc.copy(A, dead), H, /disposed/);
    expectGpuError(() => enc.fill(A, 1, { type: "f32", offset: 2, bytes: 8 }), I, /aligned/);
    expectGpuError(() => enc.fill(A, 256, { type: "u8" }), I, /does not fit u8/);
    expectGpuError(() => enc.fill(A, 1, { type: "u8", bytes: 5000 }), I, /past the end/);
    expectGpuError(() => enc.recordEvent(deadEvent), H, /disposed/);
    expectGpuError(() => enc.waitEvent({} as never), I, /Event/);
    expect(enc.bytes()).toEqual(bytes);
    expect(enc.byteLength).toBe(len);
    expect(enc.commandCount).toBe(count);
    expect(enc.counts).toEqual(counts);
    enc.commit(s);
    s.synchronize();
    expect(A.read(Float32Array).every((v) => v === 1)).toBe(true);
  });

  test("commit refuses a buffer disposed since it was encoded, runs nothing and keeps the commands", () => {
    const C = dev.alloc(256);
    A.fill(7, { type: "u8" });
    const enc = new CommandEncoder(dev);
    enc.fill(A, 1, { type: "u8" }).fill(C, 2, { type: "u8" });
    C.dispose();
    expectGpuError(() => enc.commit(s), Status.INVALID_HANDLE, "CommandEncoder.commit: command 1 (a fill): its destination is a disposed buffer");
    expect(enc.commandCount).toBe(2);
    s.synchronize();
    expect(A.read().every((v) => v === 7)).toBe(true);
    enc.reset();
    expect(enc.byteLength).toBe(0);
    expect(enc.commit(s)).toBe(false); // nothing to send: no crossing
  });

  test("commit refuses a disposed stream and a non-stream, keeping the commands", () => {
    const enc = new CommandEncoder(dev).fill(A, 0);
    const s2 = dev.createStream();
    s2.dispose();
    expectGpuError(() => enc.commit(s2), Status.INVALID_HANDLE, /disposed/);
    expectGpuError(() => enc.commit({} as never), Status.INVALID_VALUE, /Stream/);
    expect(enc.commandCount).toBe(1);
  });

  test("the buffer grows past 64 KiB and stays exact (5000 dispatches)", () => {
    A.fill(0);
    const enc = new CommandEncoder(dev);
    const cfg = { grid: 1, block: 1, args: [A, 1, 1] as const };
    for (let i = 0; i < 5000; i++) enc.dispatch(addScalar, cfg);
    expect(enc.byteLength).toBe(5000 * (48 + 24));
    expect(enc.capacity).toBeGreaterThanOrEqual(enc.byteLength);
    expect(enc.capacity).toBeGreaterThan(65536);
    expect(enc.submits).toBe(0);
    enc.commit(s);
    expect(enc.submits).toBe(1);
    s.synchronize();
    expect(A.read(Float32Array, { offset: 0 })[0]).toBe(5000);
  });

  test("the packed format is the documented one", () => {
    const enc = new CommandEncoder(dev);
    enc.dispatch(saxpy, { grid: [3, 2, 1], block: [4, 5], sharedBytes: 64, args: [1.5, A, B, -7] });
    const ev = dev.createEvent();
    enc.copy(B, A, { srcOffset: 8, dstOffset: 16, bytes: 32 }).fill(A, 0x01020304, { type: "u32", offset: 4, bytes: 8 }).barrier().recordEvent(ev).waitEvent(ev);
    const u8 = enc.bytes();
    const dv = new DataView(u8.buffer);
    const u32 = (o: number) => dv.getUint32(o, true), u64 = (o: number) => Number(dv.getBigUint64(o, true));
    expect([u32(0), u32(4), u64(8)]).toEqual([Cmd.LAUNCH, 48 + 32, saxpy.handle]);
    expect([u32(16), u32(20), u32(24), u32(28), u32(32), u32(36), u32(40), u32(44)]).toEqual([3, 2, 1, 4, 5, 1, 64, 4]);
    expect(dv.getFloat32(48, true)).toBe(1.5);
    expect([u64(56), u64(64), dv.getInt32(72, true), dv.getInt32(76, true)]).toEqual([A.address, B.address, -7, -1]);
    expect([u32(80), u32(84), u64(88), u64(96), u64(104)]).toEqual([Cmd.COPY, 32, B.address + 16, A.address + 8, 32]);
    expect([u32(112), u32(116), u64(120), u32(128), u32(132), u64(136)]).toEqual([Cmd.MEMSET, 32, A.address + 4, 0x01020304, 4, 2]);
    expect([u32(144), u32(148)]).toEqual([Cmd.BARRIER, 8]);
    expect([u32(152), u32(156), u64(160)]).toEqual([Cmd.EVENT_RECORD, 16, ev.handle]);
    expect([u32(168), u32(172), u64(176)]).toEqual([Cmd.EVENT_WAIT, 16, ev.handle]);
    expect(enc.byteLength).toBe(184);
    expect(enc.describe().map((c) => [c.op, c.offset])).toEqual([
      ["launch", 0], ["copy", 80], ["memset", 112], ["barrier", 144], ["eventRecord", 152], ["eventWait", 168],
    ]);
    ev.dispose();
  });

  test("events order two streams through two encoders", () => {
    const s2 = dev.createStream();
    const ev = dev.createEvent({ timing: false });
    A.fill(0);
    B.fill(0);
    const e1 = new CommandEncoder(dev), e2 = new CommandEncoder(dev);
    e1.dispatch(mod.kernel("slow_fill", ["buffer", "i32", "f32"]), { grid: 1, block: 1, args: [A, 1024, 4.5] }).recordEvent(ev);
    e2.waitEvent(ev).copy(B, A);
    e1.commit(s);
    e2.commit(s2);
    s2.synchronize();
    expect(B.read(Float32Array).every((v) => v === 4.5)).toBe(true);
    s.synchronize();
    s2.dispose();
    ev.dispose();
  });

  test("bg_submit_checked names the offset of a hand-corrupted command, and runs none", () => {
    A.fill(5, { type: "u8" });
    B.fill(6, { type: "u8" });
    const enc = new CommandEncoder(dev);
    enc.fill(A, 1, { type: "u8" }).dispatch(addScalar, { grid: 1, block: 16, args: [A, 1, 16] }).fill(B, 2, { type: "u8" });
    const good = enc.bytes();
    expect(enc.describe().map((c) => c.offset)).toEqual([0, 32, 104]);
    const corrupt = (f: (dv: DataView) => void) => {
      const b = good.slice();
      f(new DataView(b.buffer));
      return b;
    };
    const cases: [string, Uint8Array, number, number][] = [
      ["unknown op", corrupt((dv) => dv.setUint32(32, 99, true)), Status.INVALID_VALUE, 32],
      // A live handle of the wrong kind (the shim checks handles by their magic word: an address
      // that is no object at all would be dereferenced, so none is used here).
      ["not a kernel", corrupt((dv) => dv.setBigUint64(40, BigInt(s.handle), true)), Status.INVALID_HANDLE, 32],
      ["zero block", corrupt((dv) => dv.setUint32(60, 0, true)), Status.INVALID_VALUE, 32],
      ["bad size", corrupt((dv) => dv.setUint32(108, 24, true)), Status.INVALID_VALUE, 104],
      ["nargs vs size", corrupt((dv) => dv.setUint32(76, 4, true)), Status.INVALID_VALUE, 32],
      ["truncated", good.slice(0, 100), Status.INVALID_VALUE, 32],
    ];
    for (const [what, bytes, code, at] of cases) {
      const rc = N.bg_submit_checked(s.handle, bytes, bytes.byteLength, slot(0));
      expect({ what, rc, at: readU64(0) }).toEqual({ what, rc: code, at });
      expect({ what, rc: N.bg_submit(s.handle, bytes, bytes.byteLength) }).toEqual({ what, rc: code });
    }
    s.synchronize();
    expect(A.read().every((v) => v === 5)).toBe(true);
    expect(B.read().every((v) => v === 6)).toBe(true);
    const rc = N.bg_submit_checked(s.handle, good, good.byteLength, slot(0));
    expect(rc).toBe(0);
    s.synchronize();
    expect(B.read().every((v) => v === 2)).toBe(true);
  });

  test("a block over the limit is refused by dispatch itself, as by Kernel.launch; the encoder is unchanged", () => {
    // (it used to be appended and refused only by commit; bg_submit_checked's own refusals, with
    // the offset of the bad command, are tested on hand-corrupted bytes above)
    A.fill(5, { type: "u8" });
    const enc = new CommandEncoder(dev);
    enc.fill(A, 1, { type: "u8" });
    expectGpuError(() => enc.dispatch(addScalar, { grid: 1, block: 4096, args: [A, 1, 16] }), Status.INVALID_VALUE, /block 4096x1x1 exceeds the limits/);
    expect(enc.commandCount).toBe(1);
    s.synchronize();
    expect(A.read().every((v) => v === 5)).toBe(true);
    enc.commit(s);
    s.synchronize();
    expect(A.read().every((v) => v === 1)).toBe(true);
  });
});
