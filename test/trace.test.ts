// Timelines (src/trace): a traced run gives Chrome trace JSON with one lane per stream, each lane
// in stream order with device timestamps; command lists and plan executions show their kernels;
// BUNGPU_TRACE writes the whole process's trace at exit; tracing off leaves every wrapper, table
// entry and method exactly as it was; the JavaScript lane holds the JS thread's time in bungpu's
// calls, its waits and the gaps between; each plan.run's work is one span; trace.toSVG and the
// bungpu-trace command draw it (test/trace_browser.test.ts renders it in a browser).
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { N } from "../ffi/native";
import { SubmitError, api, launch, submit } from "../ffi/result";
import { Device, GpuError, Program, Status, trace, type Trace, type TraceEvent } from "../src";
import { CommandList } from "../src/commands";
import { ExecutionPlan, Tensor } from "../src/tensor";
import { Ring } from "../src/ring";
import { expectGpuError } from "./helpers";
import { kernelSources } from "./kernels";
import { demoTrace } from "./fixtures/demo_trace";

const root = join(import.meta.dir, "..");
const dev = Device.default(); // BUNGPU_DEVICE picks the backend; the CPU one where there is no GPU
const mod = Program.compile(dev, kernelSources);
const spin = mod.kernel("spin_ms", ["i32"]);
const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
const tmp = mkdtempSync(join(tmpdir(), "bungpu-trace-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** The devices' spans (the host's JavaScript lanes are pid 0). */
const spans = (t: Trace) => t.traceEvents.filter((e) => e.ph === "X" && e.pid !== 0);
const jsLane = (t: Trace, tid = 1) => t.traceEvents.filter((e) => e.ph === "X" && e.pid === 0 && e.tid === tid);
const laneOf = (t: Trace, stream: { handle: number }) => t.otherData.lanes.find((l) => l.stream === stream.handle)!;
const onLane = (t: Trace, l: { pid: number; tid: number }) => spans(t).filter((e) => e.pid === l.pid && e.tid === l.tid);

/** Run `f` traced; the trace, round-tripped through JSON as a file would be. */
function traced(f: () => void): Trace {
  trace.start();
  try {
    f();
  } catch (e) {
    trace.stop();
    throw e;
  }
  return JSON.parse(JSON.stringify(trace.stop())) as Trace;
}

describe("a traced run on two streams", () => {
  const n = 1000;
  const buf = dev.alloc(n * 4).write(new Float32Array(n));
  const s1 = dev.createStream(), s2 = dev.createStream({ nonBlocking: true });
  const t = traced(() => {
    // s1: slow, fast, add 1 (a grid of 4); s2: add 2 (a grid of 8), fast, slow
    spin.launch(s1, { grid: 1, block: 1, args: [100] });
    spin.launch(s1, { grid: 1, block: 1, args: [0] });
    addScalar.launch(s1, { grid: 4, block: 256, args: [buf, 1, n] });
    s1.synchronize();
    addScalar.launch(s2, { grid: 8, block: 128, args: [buf, 2, n] });
    spin.launch(s2, { grid: 2, block: 1, args: [0] });
    spin.launch(s2, { grid: 3, block: 1, args: [100] });
    s2.synchronize();
  });

  test("the work itself is unchanged: every element was added 1 then 2", () => {
    const got = buf.read(new Float32Array(n)) as Float32Array;
    for (let i = 0; i < n; i++) if (got[i] !== 3) throw new Error(`element ${i}: ${got[i]}`);
  });

  test("one lane per stream, each named, in one process for the device", () => {
    const l1 = laneOf(t, s1), l2 = laneOf(t, s2);
    expect(l1).toBeDefined();
    expect(l2).toBeDefined();
    expect(l1.pid).toBe(l2.pid);
    expect(l1.tid).not.toBe(l2.tid);
    const names = t.traceEvents.filter((e) => e.ph === "M" && e.name === "thread_name");
    expect(names.find((e) => e.tid === l1.tid)?.args?.name).toBe(l1.name);
    expect(names.find((e) => e.tid === l2.tid)?.args?.name).toBe(l2.name);
    expect(t.traceEvents.some((e) => e.ph === "M" && e.name === "process_name" && e.pid === l1.pid)).toBe(true);
    expect(t.otherData).toMatchObject({ producer: "bungpu", captured: 0, unplaced: 0, unfinished: 0 });
  });

  test("each lane holds its stream's launches in issue order, with geometry, and time never runs backwards", () => {
    const a = onLane(t, laneOf(t, s1)), b = onLane(t, laneOf(t, s2));
    expect(a.map((e) => [e.name, e.args?.grid])).toEqual([["spin_ms", [1, 1, 1]], ["spin_ms", [1, 1, 1]], ["add_scalar", [4, 1, 1]]]);
    expect(b.map((e) => [e.name, e.args?.grid, e.args?.block])).toEqual([["add_scalar", [8, 1, 1], [128, 1, 1]], ["spin_ms", [2, 1, 1], [1, 1, 1]], ["spin_ms", [3, 1, 1], [1, 1, 1]]]);
    for (const lane of [a, b])
      for (let i = 1; i < lane.length; i++) {
        expect(lane[i]!.ts).toBeGreaterThanOrEqual(lane[i - 1]!.ts + lane[i - 1]!.dur! - 1); // 1 µs: float32 ms
        expect(lane[i]!.dur!).toBeGreaterThanOrEqual(0);
      }
    // s2's work was queued after s1 was synchronized: it starts after s1's last ends.
    expect(b[0]!.ts).toBeGreaterThanOrEqual(a[2]!.ts + a[2]!.dur! - 1);
  });

  test("a slow kernel lasts longer than a fast one", () => {
    const a = onLane(t, laneOf(t, s1)), b = onLane(t, laneOf(t, s2));
    expect(a[0]!.dur!).toBeGreaterThan(a[1]!.dur!);
    expect(b[2]!.dur!).toBeGreaterThan(b[1]!.dur!);
    expect(a[0]!.dur!).toBeGreaterThan(5_000); // 30 million spins: milliseconds on any machine
  });
});

describe("command lists, copies, host functions and plans", () => {
  test("a submitted list is one span holding one child per command, kernels named, bytes given", () => {
    const n = 256;
    const a = dev.alloc(n * 4).write(new Float32Array(n).fill(1));
    const b = dev.alloc(n * 4);
    const s = dev.createStream();
    const list = new CommandList(dev);
    list.launch(addScalar, { grid: 1, block: 256, args: [a, 4, n] });
    list.copy(b, a);
    list.memset(a, 0);
    list.launch(spin, { grid: 1, block: 1, args: [5] });
    const t = traced(() => list.submit(s, { wait: true }));
    const lane = onLane(t, laneOf(t, s));
    expect(lane.map((e) => e.name)).toEqual(["command list", "add_scalar", "copy DtoD", "memset", "spin_ms"]);
    const [parent, ...kids] = lane;
    expect(parent!.args).toMatchObject({ commands: 4, kernels: 2 });
    expect(kids[1]!.args?.bytes).toBe(n * 4);
    expect(kids[2]!.args?.bytes).toBe(n * 4);
    for (const k of kids) {
      expect(k.ts).toBeGreaterThanOrEqual(parent!.ts - 1);
      expect(k.ts + k.dur!).toBeLessThanOrEqual(parent!.ts + parent!.dur! + 1);
    }
    expect(kids[3]!.dur!).toBeGreaterThan(kids[0]!.dur!); // 5 ms of spinning
    // the list ran: b is a + 4, a was then zeroed
    expect(Array.from(b.read(new Float32Array(n)) as Float32Array).every((v) => v === 5)).toBe(true);
    expect(Array.from(a.read(new Float32Array(n)) as Float32Array).every((v) => v === 0)).toBe(true);
  });

  test("a refused traced submit still names the bad command's offset in the caller's list", () => {
    const a = dev.alloc(64);
    const list = new CommandList(dev);
    list.memset(a, 0);
    list.launch(addScalar, { grid: 1, block: 1, args: [a, 1, 16] });
    const bytes = list.bytes();
    const second = list.describe()[1]!.offset;
    new DataView(bytes.buffer).setUint32(second + 8, 0, true); // the launch's kernel: NULL
    new DataView(bytes.buffer).setUint32(second + 12, 0, true);
    const s = dev.createStream();
    const refused = () => {
      try {
        submit(s.handle, bytes, bytes.length, 0, dev.backend);
      } catch (e) {
        return e;
      }
      return null;
    };
    const plain = refused();
    let tracedErr: unknown;
    traced(() => (tracedErr = refused()));
    expect(plain).toBeInstanceOf(SubmitError);
    expect(tracedErr).toBeInstanceOf(SubmitError);
    expect((plain as SubmitError).badOffset).toBe(second);
    expect((tracedErr as SubmitError).badOffset).toBe(second);
    expect((tracedErr as SubmitError).code).toBe((plain as SubmitError).code);
  });

  test("async copies, synchronous copies and host functions are spans on their streams", () => {
    const s = dev.createStream();
    const host = dev.allocHost(4096);
    const b = dev.alloc(4096);
    let ran = false;
    const t = traced(() => {
      s.upload(b, host);
      s.hostFn(() => {
        Bun.sleepSync(20);
        ran = true;
      });
      s.download(host, b);
      s.synchronize();
      b.write(new Uint8Array(4096));
    });
    expect(ran).toBe(true);
    const lane = onLane(t, laneOf(t, s));
    expect(lane.map((e) => [e.name, e.args?.bytes])).toEqual([["copy HtoD", 4096], ["host function", undefined], ["copy DtoH", 4096]]);
    expect(lane[1]!.dur!).toBeGreaterThan(15_000); // the stream waited for the 20 ms function
    const def = onLane(t, laneOf(t, dev.defaultStream));
    expect(def.map((e) => e.name)).toContain("copy HtoD (sync)");
  });

  test("a plan's execute is a span named after the call, its kernels inside, named by entry point", () => {
    const x = Tensor.from(Float32Array.from({ length: 33 }, (_, i) => i - 16), [33]);
    const plan = x.add(1).mul(2).relu().prepare({ fusion: false });
    try {
      plan.execute();
      const entries = plan.preparedKernels().map((k) => k.entryPoint);
      expect(entries.length).toBe(3);
      const t = traced(() => {
        plan.execute();
        plan.execute({ launch: "each" });
      });
      const all = spans(t);
      const asList = all.filter((e) => e.name === "ExecutionPlan.execute" && e.cat === "submit");
      expect(asList.length).toBe(1);
      const inList = all.filter((e) => e.pid === asList[0]!.pid && e.tid === asList[0]!.tid && e.args?.list === true);
      expect(inList.map((e) => e.name)).toEqual(entries);
      const each = all.filter((e) => e.name === "ExecutionPlan.execute" && e.cat === "plan");
      expect(each.length).toBe(1);
      const inside = all.filter((e) => e.cat === "kernel" && e.args?.scope === each[0]!.args?.scope && e.args?.list !== true);
      expect(inside.map((e) => e.name)).toEqual(entries);
      for (const k of inside) expect(k.ts).toBeGreaterThanOrEqual(each[0]!.ts);
      const out = plan.outputBuffer()!.read(new Float32Array(33)) as Float32Array;
      for (let i = 0; i < 33; i++) expect(out[i]).toBe(Math.max(0, (i - 16 + 1) * 2));
    } finally {
      plan.dispose?.();
    }
  });

  test("ring pushes and pops are instants on the host, with the messages that moved", () => {
    using r = Ring.create(dev, { messageBytes: 8, capacity: 4 });
    const msgs = new Uint8Array(8 * 6).map((_, i) => i);
    let pushed = 0, popped = 0;
    const t = traced(() => {
      pushed = r.push(msgs); // 4 of 6 fit
      popped = r.pop(3).byteLength / 8;
      r.pop(); // the last one
      r.pop(); // nothing: no instant
    });
    expect([pushed, popped]).toEqual([4, 3]);
    const inst = t.traceEvents.filter((e) => e.ph === "i");
    expect(inst.map((e) => [e.name, e.args?.messages])).toEqual([["ring push", 4], ["ring pop", 3], ["ring pop", 1]]);
    for (const e of inst) expect(e.pid).toBe(0);
    expect(t.traceEvents.some((e) => e.ph === "M" && e.pid === 0 && e.args?.name === "host")).toBe(true);
  });

  test("fromProfile writes executeProfiled's kernels in the same format, back to back", () => {
    const x = Tensor.from(Float32Array.from({ length: 17 }, (_, i) => i), [17]);
    const plan = x.mul(3).sub(1).prepare({ fusion: false });
    try {
      const profile = plan.executeProfiled();
      const t = trace.fromProfile(profile);
      const xs = spans(t);
      expect(xs.map((e) => e.name)).toEqual(profile.map((p) => p.entryPoint));
      xs.forEach((e, i) => {
        expect(e.dur).toBeCloseTo(profile[i]!.elapsedMs * 1000, 6);
        if (i) expect(e.ts).toBeCloseTo(xs[i - 1]!.ts + xs[i - 1]!.dur!, 6);
      });
    } finally {
      plan.dispose?.();
    }
  });
});

describe("off costs nothing; one trace at a time", () => {
  test("start swaps native table entries only; stop puts back the very same functions", () => {
    const table = N as unknown as Record<string, unknown>;
    const before = new Map(Object.entries(table));
    const wrappers = new Map<string, unknown>(Object.entries(api(dev.backend)));
    const proto = ExecutionPlan.prototype as unknown as Record<string, unknown>;
    const methods = ["execute", "executeAsync", "executeWithVars", "executeProfiled", "executeWithVarsProfiled"].map((m) => proto[m]);
    const hand = [launch, submit];
    trace.start();
    try {
      expect(trace.active()).toBe(true);
      expect(table.bg_launch).not.toBe(before.get("bg_launch"));
      expect(table.bg_submit_ex).not.toBe(before.get("bg_submit_ex"));
      expect(table.bg_event_record).toBe(before.get("bg_event_record")); // what the tracer itself uses is untouched
      for (const [k, f] of Object.entries(api(dev.backend) as Record<string, unknown>)) expect(f).toBe(wrappers.get(k)); // the wrappers never change
    } finally {
      trace.stop();
    }
    expect(trace.active()).toBe(false);
    for (const [k, f] of Object.entries(table)) expect(f).toBe(before.get(k));
    expect(Object.keys(table).length).toBe(before.size);
    for (const [k, f] of Object.entries(api(dev.backend) as Record<string, unknown>)) expect(f).toBe(wrappers.get(k));
    expect(["execute", "executeAsync", "executeWithVars", "executeProfiled", "executeWithVarsProfiled"].map((m) => proto[m])).toEqual(methods);
    expect([launch, submit]).toEqual(hand);
  });

  test("start while tracing and stop while not are GpuError ILLEGAL_STATE; the running trace goes on", () => {
    expectGpuError(() => trace.stop(), Status.ILLEGAL_STATE, "no trace is being recorded");
    trace.start();
    try {
      const e = expectGpuError(() => trace.start(), Status.ILLEGAL_STATE, "already being recorded");
      expect(e).toBeInstanceOf(GpuError);
      spin.launch(dev.defaultStream, { grid: 1, block: 1, args: [0] });
      dev.defaultStream.synchronize();
    } finally {
      const t = trace.stop();
      expect(spans(t).map((e) => e.name)).toEqual(["spin_ms"]);
    }
    expectGpuError(() => trace.stop(), Status.ILLEGAL_STATE);
  });

  test("work still running at stop is written up to the stop, marked unfinished", () => {
    const s = dev.createStream();
    trace.start();
    spin.launch(s, { grid: 1, block: 1, args: [1000] });
    Bun.sleepSync(50); // begun, not finished
    const t = trace.stop({ waitMs: 0 });
    s.synchronize();
    const [k] = onLane(t, laneOf(t, s));
    expect(k!.name).toBe("spin_ms");
    expect(k!.args?.unfinished).toBe(true);
    expect(t.otherData.unfinished).toBe(1);
    expect(k!.dur!).toBeGreaterThanOrEqual(0);
    expectGpuError(() => trace.stop(), Status.ILLEGAL_STATE);
  });

  test("a device disposed while tracing: its work is written first, and the trace goes on", () => {
    const other = Device.open(dev.spec);
    const m = Program.compile(other, kernelSources);
    const k = m.kernel("spin_ms", ["i32"]);
    const s = other.createStream();
    trace.start();
    let t: Trace;
    try {
      k.launch(s, { grid: 1, block: 1, args: [5] });
      other.dispose();
      spin.launch(dev.defaultStream, { grid: 1, block: 1, args: [1] });
      dev.defaultStream.synchronize();
    } finally {
      t = trace.stop();
    }
    const names = spans(t).map((e) => e.name);
    expect(names.filter((n) => n === "spin_ms").length).toBe(2);
    expect(t.otherData.unfinished).toBe(0);
  });

  test.skipIf(dev.backend === "metal")("work a capture records is not timed; the graph's replay is (capture: CPU and CUDA)", () => {
    const s = dev.createStream();
    const a = dev.alloc(64).write(new Float32Array(16));
    const t = traced(() => {
      s.beginCapture();
      addScalar.launch(s, { grid: 1, block: 16, args: [a, 1, 16] });
      const g = s.endCapture();
      const x = g.instantiate();
      x.launch(s);
      x.launch(s);
      s.synchronize();
      x.dispose();
      g.dispose();
    });
    expect(t.otherData.captured).toBe(1);
    expect(onLane(t, laneOf(t, s)).map((e) => e.name)).toEqual(["graph replay", "graph replay"]);
    expect(Array.from(a.read(new Float32Array(16)) as Float32Array)).toEqual(new Array(16).fill(2));
  });
});

describe("BUNGPU_TRACE and the SVG timeline", () => {
  let demo: Trace | null = null;

  test("BUNGPU_TRACE=file: the demo, run in a subprocess, writes a trace with one lane per stream it used", async () => {
    const { trace: written, out, err, code } = await demoTrace();
    if (code !== 0) console.error(out.slice(-2000), err.slice(-2000));
    expect(code).toBe(0);
    expect(out).toContain("PASS: all checks");
    expect(written).not.toBeNull();
    demo = written!;
    const t = demo;
    const lanes = t.otherData.lanes;
    const declared = t.traceEvents.filter((e) => e.ph === "M" && e.name === "thread_name" && e.pid !== 0);
    expect(declared.length).toBe(lanes.length);
    expect(t.traceEvents.some((e) => e.ph === "M" && e.name === "thread_name" && e.pid === 0 && e.args?.name === "JavaScript")).toBe(true);
    expect(new Set(lanes.map((l) => `${l.pid}/${l.tid}`)).size).toBe(lanes.length);
    // Every lane has work, every span is on a declared lane, and no two lanes are one stream at one time.
    const byLane = new Map<string, TraceEvent[]>();
    for (const e of spans(t)) byLane.set(`${e.pid}/${e.tid}`, [...(byLane.get(`${e.pid}/${e.tid}`) ?? []), e]);
    expect([...byLane.keys()].sort()).toEqual(lanes.map((l) => `${l.pid}/${l.tid}`).sort());
    const life = (l: (typeof lanes)[number]) => {
      const xs = byLane.get(`${l.pid}/${l.tid}`)!;
      return [Math.min(...xs.map((e) => e.ts)), Math.max(...xs.map((e) => e.ts + e.dur!))] as const;
    };
    for (const a of lanes)
      for (const b of lanes)
        if (a !== b && a.stream === b.stream) {
          const [a0, a1] = life(a), [b0, b1] = life(b);
          expect(a1 <= b0 + 1 || b1 <= a0 + 1).toBe(true);
        }
    // MultiStream runs put work on two streams at once: two lanes overlap in time.
    const ms = lanes.filter((l) => l.stream !== lanes[0]!.stream).map(life);
    expect(ms.some(([a0, a1], i) => ms.some(([b0, b1], j) => i !== j && a0 < b1 && b0 < a1))).toBe(true);
    for (const name of ["matmul", "bias_add", "relu", "add2", "graph replay", "command list", "ExecutionPlan.execute", "copy HtoD (sync)"])
      expect(spans(t).some((e) => e.name === name)).toBe(true);
    expect(t.otherData.unplaced).toBe(0);
    for (const xs of byLane.values())
      for (let i = 1; i < xs.length; i++) expect(xs[i]!.ts).toBeGreaterThanOrEqual(xs[i - 1]!.ts);
  }, 180_000);

  test("trace-svg draws one lane per stream, labelled, kernels named", async () => {
    const n = 64;
    const a = dev.alloc(n * 4).write(new Float32Array(n));
    const s1 = dev.createStream(), s2 = dev.createStream(), s3 = dev.createStream();
    const t = traced(() => {
      spin.launch(s1, { grid: 1, block: 1, args: [20] });
      addScalar.launch(s2, { grid: 1, block: 64, args: [a, 1, n] });
      spin.launch(s3, { grid: 1, block: 1, args: [10] });
      for (const s of [s1, s2, s3]) s.synchronize();
    });
    const svg = trace.toSVG(t, { title: "three streams" });
    expect(svg.startsWith("<svg")).toBe(true);
    expect(svg.trimEnd().endsWith("</svg>")).toBe(true);
    const lanes = [...svg.matchAll(/<g class="lane" data-pid="(\d+)" data-tid="(\d+)"/g)].map((m) => `${m[1]}/${m[2]}`);
    expect(lanes.sort()).toEqual(t.otherData.lanes.map((l) => `${l.pid}/${l.tid}`).sort());
    expect(lanes.length).toBe(3);
    const labels = [...svg.matchAll(/class="lane-label"[^>]*><title>[^<]*<\/title>([^<]*)</g)].map((m) => m[1]);
    expect(labels.sort()).toEqual([...t.otherData.lanes.map((l) => l.name), "JavaScript"].sort());
    expect(svg).toMatch(/class="span-label"[^>]*>spin_ms</);
    expect((svg.match(/<g class="span" data-cat="kernel"/g) ?? []).length).toBe(3);
    expect(svg).toContain('<g class="lane host-lane" data-pid="0" data-tid="1" data-name="JavaScript"');
    expect(svg).toContain('<g class="legend-item" data-cat="kernel">');
    // the events alone draw the same picture
    expect(trace.toSVG(t.traceEvents, { title: "three streams" })).toBe(svg);

    // The command line (bunx bungpu-trace), on the demo's trace when the test above wrote it (else this one).
    const input = join(tmp, "in.json"), output = join(tmp, "out.svg");
    await Bun.write(input, JSON.stringify(demo ?? t));
    const proc = Bun.spawnSync(["bun", "src/trace/cli.ts", input, output], { cwd: root, timeout: 60_000 });
    expect(proc.exitCode).toBe(0);
    const drawn = readFileSync(output, "utf8");
    expect((drawn.match(/<g class="lane"/g) ?? []).length).toBe((demo ?? t).otherData.lanes.length);
    expect((drawn.match(/<g class="lane host-lane" data-pid="0" data-tid="1"/g) ?? []).length).toBe(1);
  }, 90_000);
});

describe("the JavaScript lane and plan.run", () => {
  /** Spin the JS thread for `ms` (the caller's own work, outside bungpu). */
  const busy = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end);
  };

  test("each plan.run's work is one span on the plan's lane; its await and its issue are on the host's lanes; the JS gaps are labelled", async () => {
    const x = Tensor.from(new Float32Array(16 * 32), [16, 32], { name: "x" });
    using plan = x.matmul(Tensor.randn([32, 8], { seed: 3 })).relu().prepare({ outputNames: ["y"] });
    const feed = (v: number) => ({ x: new Float32Array(16 * 32).fill(v) });
    trace.start();
    let t: Trace;
    try {
      await plan.run(feed(1));
      await plan.run(feed(2));
      busy(3); // between run #2's result and run #3's call: no device work, no bungpu call
      await plan.run(feed(3));
      await Promise.all([plan.run(feed(4)), plan.run(feed(5))]);
    } finally {
      t = JSON.parse(JSON.stringify(trace.stop())) as Trace;
    }
    const names = new Map(t.traceEvents.filter((e) => e.ph === "M" && e.name === "thread_name" && e.pid === 0).map((e) => [e.tid, e.args?.name]));
    expect(names.get(1)).toBe("JavaScript");
    expect(names.get(2)).toBe("awaited runs");
    const awaits = jsLane(t, 2).sort((a, b) => a.ts - b.ts);
    expect(awaits.map((e) => [e.name, e.cat, e.args?.ok])).toEqual([1, 2, 3, 4, 5].map((k) => [`await run #${k}`, "js-await", true]));
    const issues = jsLane(t).filter((e) => e.cat === "js-call" && /^ExecutionPlan\.run #\d+$/.test(e.name));
    expect(issues.map((e) => e.name).sort()).toEqual([1, 2, 3, 4, 5].map((k) => `ExecutionPlan.run #${k}`));
    // each run() call itself, numbered by the run it queued
    const calls = jsLane(t).filter((e) => e.cat === "js-call" && e.name.endsWith(" queued"));
    expect(calls.map((e) => [e.name, e.args?.run])).toEqual([1, 2, 3, 4, 5].map((k) => [`ExecutionPlan.run #${k} queued`, k]));
    const dev = spans(t);
    for (const k of [1, 2, 3, 4, 5]) {
      const w = awaits[k - 1]!, issue = issues.find((e) => e.name === `ExecutionPlan.run #${k}`)!;
      // the run was issued while its caller awaited it
      expect(issue.ts).toBeGreaterThanOrEqual(w.ts);
      expect(issue.ts + issue.dur!).toBeLessThanOrEqual(w.ts + w.dur! + 1);
      // one span on the device around the run's work, its kernel inside it on its lane
      const group = dev.filter((e) => e.name === `ExecutionPlan.run #${k}`).sort((a, b) => b.dur! - a.dur!)[0];
      expect(group).toBeDefined();
      const kernels = dev.filter((e) => e.cat === "kernel" && e.pid === group!.pid && e.tid === group!.tid && e.ts >= group!.ts - 1 && e.ts + e.dur! <= group!.ts + group!.dur! + 1);
      expect(kernels.length).toBeGreaterThan(0);
    }
    // the caller's own 3 ms: a gap of the JavaScript lane between run #2's result and run #3's call
    const gaps = jsLane(t).filter((e) => e.cat === "js-idle");
    for (const g of gaps) {
      expect(g.name).toBe("JS outside bungpu");
      const open = awaits.filter((w) => w.ts <= g.ts && w.ts + w.dur! > g.ts).length;
      expect(g.args?.awaited).toBe(open); // the awaited calls open at the gap's start
    }
    const [b0, b1] = [awaits[1]!.ts + awaits[1]!.dur!, awaits[2]!.ts];
    const overlap = gaps.reduce((n, g) => n + Math.max(0, Math.min(b1, g.ts + g.dur!) - Math.max(b0, g.ts)), 0);
    expect(overlap).toBeGreaterThan(2_000);
    // host spans never cover a device span of the same instant twice: a gap holds no device work
    for (const g of gaps) expect(dev.some((e) => e.ts > g.ts + 1 && e.ts + e.dur! < g.ts + g.dur! - 1)).toBe(false);
  }, 60_000);

  test("execute, executeAsync and runSync: the JS thread's call on the JavaScript lane, a wait where it blocked, the async one awaited", async () => {
    const x = Tensor.from(new Float32Array(64).fill(1), [64], { name: "x" });
    using plan = x.mul(2).add(1).prepare();
    plan.execute();
    trace.start();
    let t: Trace;
    try {
      plan.execute();
      await plan.executeAsync();
      plan.runSync({ x: new Float32Array(64).fill(2) });
      dev.defaultStream.synchronize();
    } finally {
      t = JSON.parse(JSON.stringify(trace.stop())) as Trace;
    }
    const js = jsLane(t);
    for (const n of ["ExecutionPlan.execute", "ExecutionPlan.executeAsync", "ExecutionPlan.runSync"]) expect(js.some((e) => e.name === n && e.cat === "js-call")).toBe(true);
    expect(js.some((e) => e.cat === "js-wait" && e.name.startsWith("submit + wait"))).toBe(true);
    expect(js.some((e) => e.cat === "js-wait" && e.name === "stream synchronize")).toBe(true);
    expect(jsLane(t, 2).map((e) => e.name)).toEqual(["ExecutionPlan.executeAsync"]);
    expect(spans(t).some((e) => e.name === "ExecutionPlan.runSync")).toBe(true);
  });
});

describe("trace.toSVG and bungpu-trace", () => {
  const span = (name: string, ts: number, dur: number, tid = 1, cat = "kernel"): TraceEvent => ({ name, ph: "X", ts, dur, pid: 1, tid, cat });
  const meta: TraceEvent[] = [
    { name: "process_name", ph: "M", ts: 0, pid: 1, tid: 0, args: { name: "cpu (device 1)" } },
    { name: "thread_name", ph: "M", ts: 0, pid: 1, tid: 1, args: { name: "stream 1" } },
  ];
  const long = "a_kernel_whose_name_is_far_too_long_for_its_span_0123456789";

  test("a label that does not fit ends in an ellipsis; the full name is in the span's <title>; the legend lists what is drawn", () => {
    const svg = trace.toSVG([...meta, span(long, 0, 100), span("short", 900, 100), span("copy HtoD", 300, 100, 1, "copy")], { width: 1000 });
    const label = /data-name="a_kernel_whose[^"]*"><title>([^<]*)<\/title>\s*<rect[^>]*\/>\s*<text class="span-label"[^>]*>([^<]*)<\/text>/.exec(svg);
    expect(label).not.toBeNull();
    expect(label![1]).toStartWith(`${long}: 100.0 µs`);
    expect(label![2]!.endsWith("…")).toBe(true);
    expect(long.startsWith(label![2]!.slice(0, -1))).toBe(true);
    expect([...svg.matchAll(/<g class="legend-item" data-cat="([^"]+)"/g)].map((m) => m[1])).toEqual(["kernel", "copy"]);
  });

  test("bad input and bad options are GpuError INVALID_VALUE", () => {
    expectGpuError(() => trace.toSVG(null as never), Status.INVALID_VALUE, "trace.toSVG");
    expectGpuError(() => trace.toSVG({ traceEvents: [{ nope: 1 }] } as never), Status.INVALID_VALUE, "traceEvents[0]");
    expectGpuError(() => trace.toSVG([...meta, span("k", 0, 10)], { form: 1 } as never), Status.INVALID_VALUE, "did you mean from");
    expectGpuError(() => trace.toSVG([...meta, span("k", 0, 10)], { startAt: "missing" }), Status.INVALID_VALUE, 'no span is named "missing"');
    expectGpuError(() => trace.toSVG([...meta, span("k", 0, 10)], { from: "1" as never }), Status.INVALID_VALUE, "from");
    expectGpuError(() => trace.toSVG([...meta, span("k", 0, 10)], { from: 2, to: 1 }), Status.INVALID_VALUE, "after from");
    expectGpuError(() => trace.toSVG([...meta, span("k", 0, 10)], { width: 100 }), Status.INVALID_VALUE, "width must be 400 to 100000 px, got 100");
    // an empty trace is an empty timeline, not an error
    expect(trace.toSVG({ traceEvents: [] })).toContain("</svg>");
  });

  test("the command: --start-at/--length and --from/--to windows, stdout without an output file, usage errors exit 2", async () => {
    const input = join(tmp, "cli.json");
    await Bun.write(input, JSON.stringify({ traceEvents: [...meta, span("first", 0, 100), span("later", 8000, 100, 2)] }));
    const run = (...a: string[]) => Bun.spawnSync(["bun", "src/trace/cli.ts", ...a], { cwd: root, timeout: 60_000 });
    const all = run(input);
    expect(all.exitCode).toBe(0);
    expect((all.stdout.toString().match(/<g class="lane"/g) ?? []).length).toBe(2);
    const win = run(input, "--start-at", "first", "--length", "1");
    expect(win.exitCode).toBe(0);
    expect((win.stdout.toString().match(/<g class="lane"/g) ?? []).length).toBe(1);
    const late = run(input, "--from", "7", "--to", "9");
    expect(late.stdout.toString()).toContain('data-name="later"');
    expect(late.stdout.toString()).not.toContain('data-name="first"');
    const bad = run(input, "--from", "soon");
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr.toString()).toContain("--from wants a number");
    expect(run(input, "--colour", "red").exitCode).toBe(2);
    const missing = run(input, "--start-at", "nothing");
    expect(missing.exitCode).toBe(1);
    expect(missing.stderr.toString()).toContain('no span is named "nothing"');
    expect(run(join(tmp, "absent.json")).exitCode).toBe(1);
  }, 60_000);

  test("package.json's bin names the command, which starts with a bun shebang", async () => {
    const pkg = (await Bun.file(join(root, "package.json")).json()) as { bin?: Record<string, string> };
    expect(pkg.bin?.["bungpu-trace"]).toBe("./src/trace/cli.ts");
    expect(readFileSync(join(root, "src/trace/cli.ts"), "utf8").startsWith("#!/usr/bin/env bun\n")).toBe(true);
  });
});

describe("every native entry that queues work on a stream is traced", () => {
  test("ffi/sys.ts's entries taking a stream are each traced or named as untraced with a reason", async () => {
    const { UNTRACED_STREAM_ENTRIES, tracedEntries } = await import("../src/trace");
    const sys = readFileSync(join(root, "ffi/sys.ts"), "utf8");
    // an entry is `bg_name: { args: [...] ...}`, its args possibly over several lines
    const withStream = [...sys.matchAll(/\b(bg_\w+): \{\s*args: \[([^\]]*)\]/g)].filter((m) => m[2]!.includes("/* stream */")).map((m) => m[1]!);
    expect(withStream.length).toBeGreaterThan(20); // the parse found the table
    const traced = new Set(tracedEntries());
    const missing = withStream.filter((n) => !traced.has(n) && !(n in UNTRACED_STREAM_ENTRIES));
    expect(missing).toEqual([]);
    expect(Object.keys(UNTRACED_STREAM_ENTRIES).filter((n) => traced.has(n) || !withStream.includes(n))).toEqual([]);
    for (const n of ["bg_memcpy_peer_async", "bg_comm_collective", "bg_mem_alloc_async", "bg_mem_free_async", "bg_launch", "bg_submit_ex"]) expect(traced.has(n)).toBe(true);
  });

  test("a trace shows peer copies, collectives and stream-ordered allocations (two CPU devices)", () => {
    const code = `
      import { Communicator, Device, trace } from "./src";
      const [a, b] = ["cpu", "cpu:1"].map((s) => Device.open(s));
      trace.start();
      const s = a.createStream();
      const x = s.alloc(4096);
      s.fill(x, 1, { type: "f32" });
      const y = b.alloc(4096);
      s.copyPeer(y, x);
      x.dispose();
      const comms = Communicator.initAll([a, b]);
      const bufs = [a.alloc(64).fill(1, { type: "f32" }), b.alloc(64).fill(2, { type: "f32" })];
      Communicator.group(() => comms.forEach((c, i) => c.allReduce(bufs[i], bufs[i])));
      a.synchronize(); b.synchronize(); s.synchronize();
      const t = trace.stop();
      console.log(JSON.stringify([...new Set(t.traceEvents.filter((e) => e.ph === "X").map((e) => e.name))].sort()));`;
    const r = Bun.spawnSync([process.execPath, "-e", code], { cwd: root, env: { ...process.env, BUNGPU_CPU_DEVICES: "2", BUNGPU_DEVICE: "" }, stdout: "pipe", stderr: "pipe", timeout: 60_000 });
    expect(r.stderr.toString()).toBe("");
    const names = JSON.parse(r.stdout.toString().trim().split("\n").pop()!) as string[];
    for (const n of ["alloc (stream-ordered)", "free (stream-ordered)", "copy peer", "allReduce"]) expect(names).toContain(n);
  }, 60_000);
});
