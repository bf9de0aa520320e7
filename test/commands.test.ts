// The one command list (src/commands.ts) and the one hazard module (src/hazards.ts) on their own:
// host copies, one-crossing submit-and-wait, argument patches in place, a graph made from a list,
// and the planners every batching mode uses.
import { afterAll, describe, expect, test } from "bun:test";
import { Device, Program, Status } from "../src";
import { CommandList } from "../src/commands";
import {
  dependencies,
  hazardBetween,
  overlaps,
  planBarriers,
  planStreams,
  rangeOf,
  segments,
  type Accesses,
} from "../src/hazards";
import { expectGpuError } from "./helpers";
import { kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "basic" });
const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
const s = dev.createStream({ nonBlocking: true });
afterAll(() => {
  s.dispose();
  mod.dispose();
  dev.dispose();
});

const N = 256;

describe("CommandList", () => {
  test("host in, kernel, host out, waited for: one crossing, right values", () => {
    using b = dev.alloc(4 * N);
    using hin = dev.allocHost(4 * N);
    using hout = dev.allocHost(4 * N);
    hin.as(Float32Array).set(Float32Array.from({ length: N }, (_, i) => i));
    const list = new CommandList(dev)
      .copyHtoD(b, hin)
      .launch(addScalar, { grid: 2, block: 128, args: [b, 0.5, N] })
      .copyDtoH(hout, b);
    expect(list.describe().map((c) => c.op)).toEqual(["copyHtoD", "launch", "copyDtoH"]);
    expect(list.submit(s, { wait: true })).toBe(true);
    expect(list.submits).toBe(1);
    expect(list.byteLength).toBe(0); // emptied after the submit
    const out = hout.as(Float32Array);
    for (let i = 0; i < N; i++) if (out[i] !== i + 0.5) throw new Error(`out[${i}] = ${out[i]}`);
  });

  test("patchArgs rewrites a launch's argument words in place; a bad value changes nothing", () => {
    using b = dev.alloc(4 * N).fill(0);
    const list = new CommandList(dev).launch(addScalar, { grid: 2, block: 128, args: [b, 1, N] });
    const at = list.lastArgOffset;
    expect(at).toBe(48);
    list.submit(s, { keep: true, wait: true });
    list.patchArgs("test", at, addScalar, [b, 10, N]);
    list.submit(s, { keep: true, wait: true });
    const before = list.bytes();
    expectGpuError(() => list.patchArgs("test", at, addScalar, [b, "x" as never, N]), Status.INVALID_VALUE, /f32/);
    expect(list.bytes()).toEqual(before);
    list.submit(s, { keep: true, wait: true });
    expect(b.read(Float32Array)[N - 1]).toBe(21);
  });

  test("patchLaunch rewrites a launch's grid, block and scalars in place; a bad one changes nothing", () => {
    using b = dev.alloc(4 * N).fill(0);
    using other = dev.alloc(4 * N);
    const empty = mod.kernel("empty", []);
    const list = new CommandList(dev).launch(addScalar, { grid: 1, block: 64, args: [b, 1, 64] });
    const at = list.lastArgOffset;
    list.submit(s, { keep: true, wait: true });
    let got = b.read(Float32Array);
    expect([got[0], got[63], got[64], got[N - 1]]).toEqual([1, 1, 0, 0]);
    list.patchLaunch("test", at, addScalar, { grid: 2, block: 128, args: [b, 2, N] });
    expect(list.describe().map((c) => c.op)).toEqual(["launch"]);
    const before = list.bytes();
    // each refusal names the call and leaves every byte as it was
    expectGpuError(() => list.patchLaunch("test", at, addScalar, { grid: 1, block: 4096, args: [b, 2, N] }), Status.INVALID_VALUE, /test: .*exceeds the limits/);
    expectGpuError(() => list.patchLaunch("test", at, addScalar, { grid: 0, block: 1, args: [b, 2, N] }), Status.INVALID_VALUE, /grid/);
    expectGpuError(() => list.patchLaunch("test", at, addScalar, { grid: 1, block: 1, args: [b, "x" as never, N] }), Status.INVALID_VALUE, /f32/);
    expectGpuError(() => list.patchLaunch("test", at, addScalar, { grid: 1, block: 1, args: [other, 2, N] }), Status.INVALID_VALUE, /not appended with/);
    expectGpuError(() => list.patchLaunch("test", at + 8, addScalar, { grid: 1, block: 1, args: [b, 2, N] }), Status.INVALID_VALUE, /not where a launch/);
    expectGpuError(() => list.patchLaunch("test", at, empty, { grid: 1, block: 1, args: [] }), Status.INVALID_VALUE, /not where a launch/);
    expectGpuError(() => list.patchArgs("test", at, empty, []), Status.INVALID_VALUE, /not where a launch/);
    expect(list.bytes()).toEqual(before);
    list.submit(s, { keep: true, wait: true });
    got = b.read(Float32Array);
    expect([got[0], got[63], got[64], got[N - 1]]).toEqual([3, 3, 2, 2]);
  });

  test("host copies refuse device buffers where host memory is expected, and ranges past the end", () => {
    using b = dev.alloc(64);
    using h = dev.allocHost(64);
    const list = new CommandList(dev);
    expectGpuError(() => list.copyHtoD(b, b as never), Status.INVALID_VALUE, /HostBuffer/);
    expectGpuError(() => list.copyDtoH(h, b, { bytes: 65 }), Status.INVALID_VALUE, /past the end/);
    expect(list.commandCount).toBe(0);
  });

  test("toGraph: a graph of the list replays it, kernel nodes in launch order", () => {
    using b = dev.alloc(4 * N).fill(0);
    const list = new CommandList(dev)
      .launch(addScalar, { grid: 2, block: 128, args: [b, 1, N] })
      .memset(b, 0, { bytes: 4 })
      .launch(addScalar, { grid: 2, block: 128, args: [b, 2, N] });
    using g = list.toGraph(s);
    expect(g.kernelNodeCount).toBe(2);
    using x = g.instantiate();
    x.launch(s).launch(s);
    s.synchronize();
    const got = b.read(Float32Array);
    expect([got[0], got[1]]).toEqual([2, 6]);
    expect(list.byteLength).toBeGreaterThan(0); // the list is kept
  });
});

describe("hazards", () => {
  const a = dev.alloc(1024);
  afterAll(() => a.dispose());
  const lo = a.view(0, 512), hi = a.view(512, 512), mid = a.view(256, 512);
  const acc = (reads: typeof lo[], writes: typeof lo[]): Accesses => ({ reads: reads.map((b) => rangeOf(b)), writes: writes.map((b) => rangeOf(b)) });

  test("overlap is on bytes of one allocation, never on identity", () => {
    expect(overlaps(rangeOf(lo), rangeOf(hi))).toBe(false);
    expect(overlaps(rangeOf(lo), rangeOf(mid))).toBe(true);
    expect(hazardBetween(acc([], [lo]), acc([mid], []))).toBe("RAW");
    expect(hazardBetween(acc([lo], []), acc([], [mid]))).toBe("WAR");
    expect(hazardBetween(acc([], [lo]), acc([], [mid]))).toBe("WAW");
    expect(hazardBetween(acc([lo], [lo]), acc([hi], [hi]))).toBeNull();
    expect(hazardBetween(acc([lo], []), acc([lo], []))).toBeNull(); // two reads never conflict
  });

  test("independent items on two streams need two lists, not one per item", () => {
    const plan = planStreams(Array.from({ length: 100 }, () => acc([], [])), 2);
    expect(new Set(plan.stream).size).toBe(2);
    const segs = segments(plan).filter((g) => g.items.length);
    expect(segs.length).toBe(2);
  });

  test("dependencies, barriers and stream segments", () => {
    const items = [acc([], [lo]), acc([], [hi]), acc([mid], []), acc([], [lo]), acc([hi], [])];
    expect(dependencies(items)).toEqual([[], [], [0, 1], [0, 2], [1]]);
    expect(planBarriers(items)).toEqual([
      { before: 2, hazard: "RAW", against: 0 },
      { before: 3, hazard: "WAR", against: 2 },
    ]);
    const plan = planStreams(items, 2);
    const segs = segments(plan);
    // every step appears once, in order, and each wait is submitted after the record it waits on
    expect(segs.flatMap((g) => g.items).sort()).toEqual([0, 1, 2, 3, 4]);
    for (const g of segs) expect(g.items).toEqual([...g.items].sort());
    const segOf = (i: number) => segs.findIndex((g) => g.items.includes(i));
    for (let i = 0; i < items.length; i++) {
      for (const j of plan.waits[i]!) expect(segOf(j)).toBeLessThan(segOf(i));
      for (let k = 0; k < i; k++) if (plan.stream[k] === plan.stream[i]) expect(segOf(k)).toBeLessThanOrEqual(segOf(i));
      for (const g of segs) expect(g.items.every((k) => plan.stream[k] === g.stream)).toBe(true);
    }
  });
});
