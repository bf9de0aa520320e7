// A write never silently changes in-flight work (issue 23, item 7). A synchronous host write into a
// buffer (write, fill, copyTo into it, ExecutionPlan.setWeights) that work queued on a non-blocking
// stream uses is ordered after that work; where the wait could never end (inside a host function
// of that stream) it is refused with a GpuError naming the work. A slow kernel queued first keeps
// the window open: the earlier work must see A, never the B written after it was queued.
import { afterAll, describe, expect, test } from "bun:test";
import { Device, GpuError, Graph, Program, Status, Tensor } from "../src";
import { kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "basic" });
const sumInto = mod.kernel("sum_into", ["buffer", "buffer", "i32"]);
const spin = mod.kernel("spin_ms", ["i32"]);
afterAll(() => {
  mod.dispose();
  dev.dispose();
});

const N = 64;
const A = new Float32Array(N).fill(1); // sums to 64
const B = new Float32Array(N).fill(3); // sums to 192

describe("a host write waits for queued work on a non-blocking stream that uses the buffer", () => {
  test("Kernel.launch reads x, then x.write(B): the launch sums A", () => {
    using s = dev.createStream({ nonBlocking: true });
    using x = dev.alloc(N * 4).write(A);
    using out = dev.alloc(4);
    spin.launch(s, { grid: 1, block: 1, args: [150] });
    sumInto.launch(s, { grid: 1, block: 1, args: [x, out, N] });
    expect(s.query()).toBe(false); // still in flight
    x.write(B);
    s.synchronize();
    expect(out.read(Float32Array)[0]).toBe(64);
    expect(x.read(Float32Array)[0]).toBe(3); // and the write happened
  });

  test("fill and copyTo into a buffer in use are ordered the same way (a view of it too)", () => {
    using s = dev.createStream({ nonBlocking: true });
    using x = dev.alloc(N * 4).write(A);
    using src = dev.alloc(N * 4).write(B);
    using out = dev.alloc(8);
    spin.launch(s, { grid: 1, block: 1, args: [100] });
    sumInto.launch(s, { grid: 1, block: 1, args: [x, out.view(0, 4), N] });
    x.view(0, N * 2).fill(5, { type: "f32" });
    spin.launch(s, { grid: 1, block: 1, args: [100] });
    sumInto.launch(s, { grid: 1, block: 1, args: [x, out.view(4, 4), N] });
    src.copyTo(x);
    s.synchronize();
    expect([...out.read(Float32Array)]).toEqual([64, 5 * (N / 2) + N / 2]);
    expect(x.read(Float32Array)[0]).toBe(3);
  });

  test("in a host function of that stream the write lands at that point; from another stream's, it is refused naming the work", async () => {
    using s = dev.createStream({ nonBlocking: true });
    using x = dev.alloc(N * 4).write(A);
    using out = dev.alloc(8);
    spin.launch(s, { grid: 1, block: 1, args: [50] });
    sumInto.launch(s, { grid: 1, block: 1, args: [x, out.view(0, 4), N] });
    s.hostFn(() => void x.write(B)); // after the first sum, before the second
    sumInto.launch(s, { grid: 1, block: 1, args: [x, out.view(4, 4), N] });
    await s.done();
    expect([...out.read(Float32Array)]).toEqual([64, 192]);

    using other = dev.createStream({ nonBlocking: true });
    x.write(A);
    spin.launch(s, { grid: 1, block: 1, args: [150] });
    sumInto.launch(s, { grid: 1, block: 1, args: [x, out.view(0, 4), N] });
    let err: unknown = null;
    other.hostFn(() => {
      try {
        x.write(B);
      } catch (e) {
        err = e;
      }
    });
    await other.done();
    await s.done();
    expect(err).toBeInstanceOf(GpuError);
    expect((err as GpuError).message).toMatch(/in use by Kernel\.launch\(sum_into\)/);
    expect(out.read(Float32Array)[0]).toBe(64);
  });
});

describe("stream copies, fills and graph replays count as work that uses the buffer, as launches do", () => {
  test("Stream.copy into x queued behind a slow kernel, then x.write(B): the write lands after the copy, B stays", () => {
    using s = dev.createStream({ nonBlocking: true });
    using x = dev.alloc(N * 4).write(B);
    using src = dev.alloc(N * 4).write(A);
    spin.launch(s, { grid: 1, block: 1, args: [150] });
    s.copy(x, src); // x = A, once the spin is done
    expect(s.query()).toBe(false);
    x.write(B); // must wait: else the queued copy would overwrite it with A
    s.synchronize();
    expect(x.read(Float32Array)[0]).toBe(3);
  });

  test("Stream.fill of x queued behind a slow kernel, then x.write(B): B stays; a copy reading x sees x before the write", () => {
    using s = dev.createStream({ nonBlocking: true });
    using x = dev.alloc(N * 4).write(A);
    using snap = dev.alloc(N * 4);
    spin.launch(s, { grid: 1, block: 1, args: [100] });
    s.copy(snap, x); // reads A
    s.fill(x, 7, { type: "f32" });
    x.write(B);
    s.synchronize();
    expect(snap.read(Float32Array)[0]).toBe(1);
    expect(x.read(Float32Array)[0]).toBe(3);
  });

  test("GraphExec.launch of a captured sum over x, then x.write(B): the replay sums A", () => {
    using s = dev.createStream({ nonBlocking: true });
    using cs = dev.createStream({ nonBlocking: true }); // captured on another stream than it replays on
    using x = dev.alloc(N * 4).write(A);
    using out = dev.alloc(4);
    const g = Graph.capture(cs, (c) => void sumInto.launch(c, { grid: 1, block: 1, args: [x, out, N] }));
    using exec = g.instantiate();
    g.dispose();
    spin.launch(s, { grid: 1, block: 1, args: [150] });
    exec.launch(s);
    expect(s.query()).toBe(false);
    x.write(B);
    s.synchronize();
    expect(out.read(Float32Array)[0]).toBe(64);
    expect(x.read(Float32Array)[0]).toBe(3);
  });
});

describe("plans: the earlier caller gets its own answer", () => {
  function makePlan() {
    const x = Tensor.from(new Float32Array(N), [N], { name: "x" });
    const plan = x.mul(2).sum().prepare({ device: dev });
    return { plan, xId: x.id };
  }

  test("executeAsync with A, then a write of B into the plan's input before it completes: A's answer", async () => {
    const { plan, xId } = makePlan();
    using s = dev.createStream({ nonBlocking: true });
    try {
      const xb = plan.bufferMutById(xId)!;
      xb.write(A);
      spin.launch(s, { grid: 1, block: 1, args: [150] });
      const p = plan.executeAsync({ stream: s });
      xb.write(B);
      await p;
      expect(plan.readOutput(0)[0]).toBe(128);
      await plan.executeAsync({ stream: s });
      expect(plan.readOutput(0)[0]).toBe(384);
    } finally {
      plan.dispose();
    }
  });

  test("execute({ async: true }) with A, then a write of B: A's answer", () => {
    const { plan, xId } = makePlan();
    using s = dev.createStream({ nonBlocking: true });
    try {
      const xb = plan.bufferMutById(xId)!;
      xb.write(A);
      spin.launch(s, { grid: 1, block: 1, args: [150] });
      plan.execute({ async: true, stream: s });
      xb.write(B);
      s.synchronize();
      expect(plan.readOutput(0)[0]).toBe(128);
    } finally {
      plan.dispose();
    }
  });

  test("setWeights during an in-flight execute({ async: true }) is ordered after it; during executeAsync it is refused, naming it", async () => {
    const { plan } = makePlan();
    using s = dev.createStream({ nonBlocking: true });
    try {
      plan.setWeights({ x: A });
      spin.launch(s, { grid: 1, block: 1, args: [150] });
      plan.execute({ async: true, stream: s });
      plan.setWeights({ x: B });
      s.synchronize();
      expect(plan.readOutput(0)[0]).toBe(128);
      spin.launch(s, { grid: 1, block: 1, args: [150] });
      const p = plan.executeAsync({ stream: s });
      let err: unknown = null;
      try {
        plan.setWeights({ x: A });
      } catch (e) {
        err = e;
      }
      await p;
      expect(err).toBeInstanceOf(GpuError);
      expect((err as GpuError).code).toBe(Status.ILLEGAL_STATE);
      expect((err as GpuError).message).toMatch(/ExecutionPlan\.executeAsync is in flight/);
      expect(plan.readOutput(0)[0]).toBe(384);
    } finally {
      plan.dispose();
    }
  });
});
