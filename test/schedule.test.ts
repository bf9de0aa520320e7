import { afterAll, describe, expect, test } from "bun:test";
import { Device, Program, Status, type Buffer } from "../src";
import { CaptureMode } from "../src/capture";
import { ExecMode, Schedule, Step, overlaps, planStreams, rangeOf, type Executable } from "../src/schedule";
import { expectGpuError, rng } from "./helpers";

// Kernels that write their own timestamps (CLOCK_MONOTONIC) and integer mixes whose result
// depends on the order of the steps that touch the same bytes.
const cpuSource = `
#define _POSIX_C_SOURCE 199309L
#include <time.h>
#include "bungpu_cpu.h"

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* dst[i] = dst[i] * 3 + (a[i] ^ (b[i] + k)), after about spin_us microseconds of busy work. */
BG_KERNEL(mix) {
  uint32_t* dst = BG_ARG(0, uint32_t*);
  const uint32_t* a = BG_ARG(1, const uint32_t*);
  const uint32_t* b = BG_ARG(2, const uint32_t*);
  int n = BG_ARG(3, int);
  uint32_t k = BG_ARG(4, uint32_t);
  int spin_us = BG_ARG(5, int);
  BG_FOR_BLOCKS {
    if (spin_us > 0) {
      int64_t t0 = now_ns();
      while (now_ns() - t0 < (int64_t)spin_us * 1000) {}
    }
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) dst[i] = dst[i] * 3u + (a[i] ^ (b[i] + k));
    }
  }
}

/* ts[0] = start ns; spin ms; out[0..n) = in[0..n) + 1; ts[1] = end ns. One block. */
BG_KERNEL(stamp) {
  int64_t* ts = BG_ARG(0, int64_t*);
  const uint32_t* in = BG_ARG(1, const uint32_t*);
  uint32_t* out = BG_ARG(2, uint32_t*);
  int n = BG_ARG(3, int);
  int ms = BG_ARG(4, int);
  BG_FOR_BLOCKS {
    int64_t t0 = now_ns();
    ts[0] = t0;
    while (now_ns() - t0 < (int64_t)ms * 1000000) {}
    for (int i = 0; i < n; i++) out[i] = in[i] + 1;
    ts[1] = now_ns();
  }
}

BG_KERNEL(spin_ms) {
  int ms = BG_ARG(0, int);
  BG_FOR_BLOCKS {
    int64_t t0 = now_ns();
    while (now_ns() - t0 < (int64_t)ms * 1000000) {}
  }
}

/* x[i] += v */
BG_KERNEL(add_u32) {
  uint32_t* x = BG_ARG(0, uint32_t*);
  uint32_t v = BG_ARG(1, uint32_t);
  int n = BG_ARG(2, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] += v;
    }
  }
}
`;

const dev = Device.open("cpu");
const mod = Program.compile(dev, { cpu: cpuSource }, { name: "schedule" });
const mix = mod.kernel("mix", ["buffer", "buffer", "buffer", "i32", "u32", "i32"]);
const stamp = mod.kernel("stamp", ["buffer", "buffer", "buffer", "i32", "i32"]);
const spinMs = mod.kernel("spin_ms", ["i32"]);
const addU32 = mod.kernel("add_u32", ["buffer", "u32", "i32"]);
afterAll(() => {
  mod.dispose();
  dev.dispose();
});

const MODES = [ExecMode.Stream, ExecMode.Graph, ExecMode.Eager, ExecMode.MultiStream(2), ExecMode.MultiStream(3)];

/** Run `exec` to completion (Eager disposes itself). */
function finish(exec: Executable): void {
  exec.synchronize();
}

/** True when step a happens before step b in the plan (same stream earlier, or through waits). */
function happensBefore(plan: Executable["plan"], a: number, b: number): boolean {
  const seen = new Set<number>();
  const stack = [b];
  while (stack.length) {
    const x = stack.pop()!;
    if (x === a) return true;
    if (seen.has(x)) continue;
    seen.add(x);
    for (const w of plan.waits[x]!) stack.push(w);
    // the previous step on the same stream
    for (let p = x - 1; p >= 0; p--)
      if (plan.stream[p] === plan.stream[x]) {
        stack.push(p);
        break;
      }
  }
  return false;
}

describe("ExecMode", () => {
  test("tagged values with kind, streams and toString", () => {
    expect(ExecMode.Stream.kind).toBe("Stream");
    expect(ExecMode.default).toBe(ExecMode.Stream);
    expect(String(ExecMode.Graph)).toBe("Graph");
    expect(String(ExecMode.Eager)).toBe("Eager");
    const m = ExecMode.MultiStream(4);
    expect(m.kind).toBe("MultiStream");
    expect(m.streams).toBe(4);
    expect(String(m)).toBe("MultiStream(4)");
    expect(m.equals(ExecMode.MultiStream(4))).toBe(true);
    expect(m.equals(ExecMode.MultiStream(3))).toBe(false);
    expectGpuError(() => ExecMode.MultiStream(0), Status.INVALID_VALUE, /1 to 64/);
    expectGpuError(() => ExecMode.MultiStream(1.5), Status.INVALID_VALUE);
  });
});

describe("Step byte ranges and hazards", () => {
  test("ranges come from allocation base + byteOffset; views that do not overlap are independent", () => {
    using buf = dev.alloc(1024);
    const lo = buf.view(0, 512), hi = buf.view(512, 512), mid = buf.view(256, 512);
    const lo2 = buf.view(0, 512); // same range, another object
    expect(rangeOf(hi)).toEqual({ base: buf.address, offset: 512, bytes: 512 });
    expect(overlaps(rangeOf(lo), rangeOf(hi))).toBe(false);
    expect(overlaps(rangeOf(lo), rangeOf(mid))).toBe(true);
    expect(overlaps(rangeOf(buf.view(0, 0)), rangeOf(lo))).toBe(false);
    const s = new Schedule()
      .addKernel(addU32, { grid: 1, block: 128, args: [lo, 1, 128] }) // 0 writes lo
      .addKernel(addU32, { grid: 1, block: 128, args: [hi, 1, 128] }) // 1 writes hi: independent of 0
      .addKernel(addU32, { grid: 1, block: 128, args: [lo2, 1, 128] }) // 2 WAW with 0 (other object, same bytes)
      .addKernel(addU32, { grid: 1, block: 128, args: [mid, 1, 128] }) // 3: overlaps 1 and 2 (and 0)
      .addFill(buf.view(1000, 8), 0) // 4: WAW with 1 only (mid ends at 768)
      .addCopy(buf.view(768, 8), buf.view(1000, 8)); // 5: RAW on 4, WAW with 1 (hi covers 768)
    expect(s.dependencies()).toEqual([[], [], [0], [0, 1, 2], [1], [1, 4]]);
  });

  test("kernel steps: explicit reads/writes, or every buffer argument read and written", () => {
    using a = dev.alloc(256);
    using b = dev.alloc(256);
    using c = dev.alloc(256);
    const explicit = Step.kernel(mix, { grid: 1, block: 64, args: [c, a, b, 64, 0, 0], reads: [c, a, b], writes: [c] });
    expect(explicit.reads.map((r) => r.base)).toEqual([c.address, a.address, b.address]);
    expect(explicit.writes.map((r) => r.base)).toEqual([c.address]);
    const conservative = Step.kernel(mix, { grid: 1, block: 64, args: [c, a, b, 64, 0, 0] });
    expect(conservative.writes.length).toBe(3);
    const cp = Step.copy(b, a, { bytes: 16, srcOffset: 8, dstOffset: 32 });
    expect(cp.reads).toEqual([{ base: a.address, offset: 8, bytes: 16 }]);
    expect(cp.writes).toEqual([{ base: b.address, offset: 32, bytes: 16 }]);
    const f = Step.fill(c, 7, { type: "u32", offset: 16, bytes: 32 });
    expect(f.reads).toEqual([]);
    expect(f.writes).toEqual([{ base: c.address, offset: 16, bytes: 32 }]);
    // two readers of the same bytes are independent
    const r1 = Step.kernel(mix, { grid: 1, block: 64, args: [b, a, a, 64, 0, 0], reads: [a, b], writes: [b] });
    const r2 = Step.kernel(mix, { grid: 1, block: 64, args: [c, a, a, 64, 0, 0], reads: [a, c], writes: [c] });
    expect(r1.hazardWith(r2)).toBe(false);
    expect(Step.fill(a, 0).hazardWith(r2)).toBe(true); // RAW
    expect(r2.hazardWith(Step.fill(a, 0))).toBe(true); // WAR
  });

  test("bad steps throw GpuError before anything is built", () => {
    using a = dev.alloc(256);
    // @ts-expect-error the types catch it too; JavaScript callers get the GpuError
    expectGpuError(() => Step.kernel(mix, { grid: 1, block: 64, args: [a, a, a, 64, 0] }), Status.INVALID_VALUE, /expected 6 arguments/);
    expectGpuError(() => Step.kernel(mix, { grid: 0, block: 64, args: [a, a, a, 64, 0, 0] }), Status.INVALID_VALUE, /grid/);
    expectGpuError(() => Step.kernel(mix, { grid: 1, block: 1, args: [a, a, a, 1, 0, 0], reads: [a, 3 as never] }), Status.INVALID_VALUE, /reads/);
    expectGpuError(() => Step.copy(a, a.view(8, 64), { bytes: 64 }), Status.INVALID_VALUE, /overlap/);
    expectGpuError(() => Step.copy(a, a, { bytes: 300 }), Status.INVALID_VALUE, /past the end/);
    expectGpuError(() => Step.fill(a, 1, { type: "u32", offset: 2, bytes: 8 }), Status.INVALID_VALUE, /aligned/);
    expectGpuError(() => new Schedule().add({} as never), Status.INVALID_VALUE, /expected a Step/);
    expectGpuError(() => new Schedule().compile(dev, "Graph" as never), Status.INVALID_VALUE, /ExecMode/);
  });
});

// ---- random schedules: every mode equals the sequential reference ---------------------------------

const ALLOCS = 3;
const WORDS = 128; // u32 per allocation

interface RefStep {
  kind: "mix" | "copy" | "fill";
  dst: [number, number]; // allocation, element offset
  a: [number, number];
  b: [number, number];
  n: number;
  k: number;
  spin: number;
}

function randomSchedule(seed: number): RefStep[] {
  const r = rng(seed);
  const pick = (m: number) => r() % m;
  const count = 6 + pick(10);
  const steps: RefStep[] = [];
  const view = (n: number): [number, number] => [pick(ALLOCS), 8 * pick((WORDS - n) / 8 + 1)];
  const disjoint = (x: [number, number], y: [number, number], n: number) => x[0] !== y[0] || x[1] + n <= y[1] || y[1] + n <= x[1];
  while (steps.length < count) {
    const n = 8 * (1 + pick(4));
    const kind = (["mix", "mix", "mix", "copy", "fill"] as const)[pick(5)]!;
    const dst = view(n), a = view(n), b = view(n);
    if (!disjoint(dst, a, n) || (kind === "mix" && !disjoint(dst, b, n))) continue;
    steps.push({ kind, dst, a, b, n, k: r() >>> 0, spin: pick(3) === 0 ? 200 + pick(400) : 0 });
  }
  return steps;
}

function reference(init: Uint32Array[], steps: RefStep[], ks: (s: RefStep, i: number) => number): Uint32Array<ArrayBuffer>[] {
  const m = init.map((x) => Uint32Array.from(x));
  steps.forEach((s, i) => {
    const d = m[s.dst[0]]!, a = m[s.a[0]]!, b = m[s.b[0]]!;
    if (s.kind === "mix") {
      const k = ks(s, i);
      for (let e = 0; e < s.n; e++)
        d[s.dst[1] + e] = (Math.imul(d[s.dst[1] + e]!, 3) + ((a[s.a[1] + e]! ^ ((b[s.b[1] + e]! + k) >>> 0)) >>> 0)) >>> 0;
    } else if (s.kind === "copy") d.set(a.slice(s.a[1], s.a[1] + s.n), s.dst[1]);
    else d.fill(s.k, s.dst[1], s.dst[1] + s.n);
  });
  return m;
}

function build(bufs: Buffer[], steps: RefStep[], seed: number): Schedule {
  const r = rng(seed ^ 0x5bd1e995);
  const v = (x: [number, number], n: number) => bufs[x[0]]!.view(x[1] * 4, n * 4);
  const s = new Schedule();
  for (const st of steps) {
    const d = v(st.dst, st.n), a = v(st.a, st.n), b = v(st.b, st.n);
    if (st.kind === "mix") {
      const explicit = r() % 2 === 0;
      s.addKernel(mix, {
        grid: st.n / 8,
        block: 8,
        args: [d, a, b, st.n, st.k, st.spin],
        ...(explicit ? { reads: [d, a, b], writes: [d] } : {}),
      });
    } else if (st.kind === "copy") s.addCopy(d, a);
    else s.addFill(d, st.k, { type: "u32" });
  }
  return s;
}

describe("random schedules: every ExecMode equals the sequential reference", () => {
  const SCHEDULES = 40;
  test(`${SCHEDULES} seeded schedules x ${MODES.length} modes, two runs each (scalars changed between runs)`, () => {
    const bufs = Array.from({ length: ALLOCS }, () => dev.alloc(WORDS * 4));
    try {
      let checked = 0, crossWaits = 0;
      for (let seed = 1; seed <= SCHEDULES; seed++) {
        const steps = randomSchedule(seed);
        const init = bufs.map((_, i) => {
          const r = rng(seed * 31 + i);
          return Uint32Array.from({ length: WORDS }, () => r());
        });
        const schedule = build(bufs, steps, seed);
        const firstMix = steps.findIndex((s) => s.kind === "mix");
        const run1 = reference(init, steps, (s) => s.k);
        const run2 = reference(run1, steps, (s, i) => (i === firstMix ? (s.k ^ 0xabcdef) >>> 0 : s.k));
        for (const mode of MODES) {
          bufs.forEach((b, i) => b.write(init[i]!));
          const exec = schedule.compile(dev, mode);
          // the plan orders every dependent pair
          const deps = exec.plan.deps;
          for (let i = 0; i < deps.length; i++) for (const j of deps[i]!) expect(happensBefore(exec.plan, j, i)).toBe(true);
          crossWaits += exec.plan.eventCount;
          exec.run();
          if (mode.kind === "Eager") {
            finish(exec);
            expect(exec.disposed).toBe(true);
            bufs.forEach((b, i) => expect(b.read(Uint32Array)).toEqual(run1[i]!));
            checked++;
            continue;
          }
          if (firstMix >= 0) exec.setArg(firstMix, 4, (steps[firstMix]!.k ^ 0xabcdef) >>> 0);
          exec.run();
          finish(exec);
          bufs.forEach((b, i) => expect(b.read(Uint32Array)).toEqual(run2[i]!));
          if (mode.kind === "Graph") {
            expect(exec.stats.captures).toBe(1);
            expect(exec.stats.graphUpdates).toBe(firstMix >= 0 ? 1 : 0);
            expect(exec.stats.replays).toBe(2);
          }
          exec.dispose();
          checked++;
        }
      }
      expect(checked).toBe(SCHEDULES * MODES.length);
      expect(crossWaits).toBeGreaterThan(0); // the multi-stream plans did use cross-stream edges
    } finally {
      for (const b of bufs) b.dispose();
    }
  });

  test("the assignment is deterministic and follows the rules", () => {
    using buf = dev.alloc(WORDS * 4 * ALLOCS);
    const bufs = [0, 1, 2].map((i) => buf.view(i * WORDS * 4, WORDS * 4)); // three views of one allocation
    const steps = randomSchedule(7);
    const a = build(bufs, steps, 7).compile(dev, ExecMode.MultiStream(3));
    const b = build(bufs, steps, 7).compile(dev, ExecMode.MultiStream(3));
    expect(a.plan.stream).toEqual(b.plan.stream);
    expect(a.plan.waits).toEqual(b.plan.waits);
    a.dispose();
    b.dispose();
    // independent steps spread over the pool; a chain stays on one stream with no events
    using x = dev.alloc(4096);
    const indep = new Schedule();
    for (let i = 0; i < 6; i++) indep.addFill(x.view(i * 64, 64), i, { type: "u8" });
    const p1 = planStreams(indep.steps, 3);
    expect(p1.stream).toEqual([0, 1, 2, 0, 1, 2]);
    expect(p1.eventCount).toBe(0);
    const chain = new Schedule();
    for (let i = 0; i < 5; i++) chain.addKernel(addU32, { grid: 1, block: 16, args: [x.view(0, 64), 1, 16] });
    const p2 = planStreams(chain.steps, 3);
    expect(p2.stream).toEqual([0, 0, 0, 0, 0]);
    expect(p2.eventCount).toBe(0);
    // a join waits once per other branch
    const join = new Schedule()
      .addFill(x.view(0, 64), 1, { type: "u8" })
      .addFill(x.view(64, 64), 2, { type: "u8" })
      .addCopy(x.view(128, 128), x.view(0, 128));
    const p3 = planStreams(join.steps, 2);
    expect(p3.stream).toEqual([0, 1, 1]);
    expect(p3.waits).toEqual([[], [], [0]]);
  });
});

// ---- MultiStream concurrency, from timestamps the kernels write ---------------------------------

describe("MultiStream overlaps independent steps, never dependent ones", () => {
  test("kernel-written start/end stamps", () => {
    using ts = dev.alloc(8 * 2 * 4);
    using data = dev.alloc(4 * 64 * 4); // four 64-word views of one allocation
    data.fill(0);
    const q = (i: number) => data.view(i * 256, 256);
    const t = (i: number) => ts.view(i * 16, 16);
    const MS = 100; // long enough that a loaded 2-core machine still starts both streams inside one step
    const s = new Schedule()
      // 0 and 1: independent (distinct views of one allocation)
      .addKernel(stamp, { grid: 1, block: 1, args: [t(0), q(0), q(1), 64, MS], reads: [q(0)], writes: [q(1), t(0)] })
      .addKernel(stamp, { grid: 1, block: 1, args: [t(1), q(2), q(3), 64, MS], reads: [q(2)], writes: [q(3), t(1)] })
      // 2 reads what 0 and 1 wrote (RAW on both)
      .addKernel(stamp, { grid: 1, block: 1, args: [t(2), q(1), q(0), 64, MS], reads: [q(1), q(3)], writes: [q(0), t(2)] })
      // 3 overwrites what 2 reads (WAR)
      .addKernel(stamp, { grid: 1, block: 1, args: [t(3), q(2), q(3), 64, MS], reads: [q(2)], writes: [q(3), t(3)] });
    using exec = s.compile(dev, ExecMode.MultiStream(2));
    expect(exec.plan.stream[0]).not.toBe(exec.plan.stream[1]);
    exec.run();
    exec.synchronize();
    const st = ts.read(BigInt64Array);
    const start = (i: number) => st[2 * i]!, end = (i: number) => st[2 * i + 1]!;
    for (let i = 0; i < 4; i++) expect(end(i) - start(i)).toBeGreaterThanOrEqual(BigInt(MS * 1e6));
    // dependent steps never overlap
    expect(start(2)).toBeGreaterThanOrEqual(end(0));
    expect(start(2)).toBeGreaterThanOrEqual(end(1));
    expect(start(3)).toBeGreaterThanOrEqual(end(2));
    // independent steps overlap
    const overlap = start(0) < end(1) && start(1) < end(0);
    expect(overlap).toBe(true);
    // and the results equal the sequential order
    const d = data.read(Uint32Array);
    expect(d[64]).toBe(1); // q1 = q0 + 1
    expect(d[0]).toBe(2); // q0 = q1 + 1
    expect(d[192]).toBe(1); // q3 = q2 + 1 (twice, from zero)
  });
});

// ---- Graph mode, inputs, Eager, lifetimes ---------------------------------------------------------

describe("Graph mode", () => {
  test("captures once; changed scalars update the graph; results follow every run", () => {
    using x = dev.alloc(256 * 4).fill(0);
    const s = new Schedule()
      .addKernel(addU32, { grid: 2, block: 128, args: [x, 1, 256] })
      .addKernel(addU32, { grid: 2, block: 128, args: [x, 10, 256] })
      .addFill(x.view(0, 4), 0);
    using exec = s.compile(dev, ExecMode.Graph, { captureMode: CaptureMode.ThreadLocal });
    expect(exec.graphExec).toBeNull();
    let want = 0;
    for (let r = 0; r < 20; r++) {
      const v = r % 3 === 0 ? r : 10;
      if (r % 3 === 0) exec.setArg(1, 1, v);
      exec.run();
      want += 1 + (r % 3 === 0 ? r : exec.args(1)[1] as number);
    }
    exec.synchronize();
    const got = x.read(Uint32Array);
    expect(got[0]).toBe(0);
    expect(got[1]).toBe(want);
    expect(exec.stats.captures).toBe(1);
    expect(exec.stats.runs).toBe(20);
    expect(exec.stats.replays).toBe(20);
    expect(exec.graphExec!.replayCount).toBe(20);
    expect(exec.stats.graphUpdates).toBe(6); // runs 3, 6, ..., 18 (run 0 is before the capture)
    // a buffer binding may not change range
    using y = dev.alloc(256 * 4);
    expectGpuError(() => exec.setArgs(0, [y, 1, 256]), Status.INVALID_VALUE, /buffer binding/);
    expectGpuError(() => exec.setArgs(2, []), Status.INVALID_VALUE, /fill, not a kernel/);
    expectGpuError(() => exec.setArg(0, 1, -1), Status.INVALID_VALUE, /u32/);
  });

  test("inputs are copied in outside the captured region, before each launch", async () => {
    using x = dev.alloc(64 * 4);
    using y = dev.alloc(64 * 4).fill(0);
    const s = new Schedule()
      .addKernel(addU32, { grid: 1, block: 64, args: [x, 5, 64] })
      .addCopy(y, x);
    for (const mode of [ExecMode.Stream, ExecMode.Graph, ExecMode.MultiStream(2)]) {
      using exec = s.compile(dev, mode);
      const outs: number[] = [];
      for (let r = 0; r < 6; r++) {
        exec.run({ inputs: [[x, new Uint32Array(64).fill(r * 100)]] });
        await exec.done();
        outs.push(y.read(Uint32Array)[63]!);
      }
      expect(outs).toEqual([5, 105, 205, 305, 405, 505]);
      if (mode.kind === "Graph") {
        expect(exec.stats.captures).toBe(1);
        // runs queued back to back, each with its own inputs
        for (let r = 0; r < 4; r++) exec.run({ inputs: [[x, new Uint32Array(64).fill(r)]] });
        exec.synchronize();
        expect(y.read(Uint32Array)[0]).toBe(3 + 5);
      }
    }
    using exec = s.compile(dev, ExecMode.Stream);
    expectGpuError(() => exec.run({ inputs: [[x, new Uint8Array(1024)]] }), Status.INVALID_VALUE, /does not fit/);
  });
});

describe("Eager and lifetimes", () => {
  test("Eager runs once and disposes itself; Schedule.runEager resolves when done", async () => {
    using x = dev.alloc(64 * 4).fill(0);
    const s = new Schedule().addKernel(addU32, { grid: 1, block: 64, args: [x, 3, 64] });
    const exec = s.compile(dev, ExecMode.Eager);
    exec.run();
    expectGpuError(() => exec.run(), Status.ILLEGAL_STATE, /runs once/);
    await exec.done();
    expect(exec.disposed).toBe(true);
    expect(exec.streams.length).toBe(0);
    expect(x.read(Uint32Array)[0]).toBe(3);
    await Schedule.runEager(dev, s);
    await Schedule.runEager(dev, s.steps, { inputs: [[x, new Uint32Array(64).fill(10)]] });
    expect(x.read(Uint32Array)[5]).toBe(13);
  });

  test("disposing an executable mid-run waits for it and loses nothing", () => {
    for (const mode of [ExecMode.Stream, ExecMode.Graph, ExecMode.MultiStream(2)]) {
      using x = dev.alloc(64 * 4).fill(0);
      using y = dev.alloc(64 * 4).fill(0);
      const s = new Schedule()
        .addKernel(spinMs, { grid: 1, block: 1, args: [20], reads: [], writes: [] })
        .addKernel(addU32, { grid: 1, block: 64, args: [x, 1, 64] })
        .addKernel(addU32, { grid: 1, block: 64, args: [y, 2, 64] });
      const exec = s.compile(dev, mode);
      exec.run().run();
      exec.dispose(); // the runs are still in flight
      expect(exec.disposed).toBe(true);
      expect([...x.read(Uint32Array)].every((v) => v === 2)).toBe(true);
      expect([...y.read(Uint32Array)].every((v) => v === 4)).toBe(true);
      expectGpuError(() => exec.run(), Status.INVALID_HANDLE, /executable was disposed/);
    }
  });

  test("a disposed buffer or module is refused at run time, before anything is issued", () => {
    const x = dev.alloc(64 * 4).fill(0);
    using exec = new Schedule().addKernel(addU32, { grid: 1, block: 64, args: [x, 1, 64] }).compile(dev);
    exec.run().synchronize();
    x.dispose();
    expectGpuError(() => exec.run(), Status.INVALID_HANDLE, /buffer/);
    const m2 = Program.compile(dev, { cpu: cpuSource }, { name: "schedule" });
    using y = dev.alloc(64 * 4);
    using e2 = new Schedule().addKernel(m2.kernel("add_u32", ["buffer", "u32", "i32"]), { grid: 1, block: 64, args: [y, 1, 64] }).compile(dev);
    m2.dispose();
    expectGpuError(() => e2.run(), Status.INVALID_HANDLE, /module/);
  });
});
