// What bungpu's objects print (console.log, Bun.inspect, String(x)) and the messages of its
// errors, asserted as exact text. The parts that differ from machine to machine (the device's
// name, which devices exist) are read from the API and put into the expected text, not matched
// loosely; nothing an object prints is a handle or an address.
import { afterAll, describe, expect, test } from "bun:test";
import { CommandEncoder, Device, ExecMode, GpuError, Program, Schedule, Status, Tensor, Variable } from "../src";
import { GraphExecutor } from "../src/graph_executor";
import { KernelMode, RingKernel } from "../src/ring";
import { kernelSources } from "./kernels";
import { RING_HANDLERS } from "./shipped_sources";

const dev = Device.open("cpu");
afterAll(() => dev.dispose());

// A module of its own, so the kernel list it prints is this file's.
const SOURCE = `
#include "bungpu_cpu.h"
BG_KERNEL(scale) {
  float* x = BG_ARG(0, float*);
  float a = BG_ARG(1, float);
  int n = BG_ARG(2, int);
  BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; } }
}
BG_KERNEL(offset) {
  float* x = BG_ARG(0, float*);
  float b = BG_ARG(1, float);
  int n = BG_ARG(2, int);
  BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += b; } }
}
`;
const mod = Program.compile(dev, { cpu: SOURCE }, { name: "inspect" });
const scale = mod.kernel("scale", ["buffer", "f32", "i32"]);
const offset = mod.kernel("offset", ["buffer", "f32", "i32"]);
const slow = Program.compile(dev, kernelSources, { name: "inspect_slow" });
const spin = slow.kernel("spin_ms", ["i32"]);
const slowFill = slow.kernel("slow_fill", ["buffer", "i32", "f32"]);

/** What console.log prints for `x` (it formats with Bun.inspect). */
function shown(x: unknown): string {
  return Bun.inspect(x);
}

function thrown(fn: () => unknown): GpuError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(GpuError);
    return e as GpuError;
  }
  throw new Error("expected a GpuError");
}

describe("objects print a line a person can read", () => {
  test("Device: spec, name, backend, index; disposed", () => {
    expect(shown(dev)).toBe(`Device(cpu, ${JSON.stringify(dev.name)}, backend cpu, index 0)`);
    expect(String(dev)).toBe(shown(dev));
    const d2 = Device.open("cpu");
    d2.dispose();
    expect(shown(d2)).toBe("Device(cpu, backend cpu, index 0, disposed)");
  });

  test("Buffer and HostBuffer: size, device, view, disposed", () => {
    const a = dev.alloc(4096);
    const big = dev.alloc(3 * 1024 * 1024 / 2);
    const v = a.view(64, 256);
    const h = dev.allocHost(4096, { mapped: true });
    const p = dev.allocHost(1);
    expect(shown(a)).toBe("GpuBuffer(4096 bytes on cpu)");
    expect(shown(big)).toBe("GpuBuffer(1.5 MiB on cpu)");
    expect(shown(v)).toBe("GpuBuffer(256 bytes on cpu, view at byte 64 of 4096 bytes)");
    expect(shown(h)).toBe("HostBuffer(4096 bytes pinned on cpu, mapped)");
    expect(shown(p)).toBe("HostBuffer(1 byte pinned on cpu)");
    a.dispose();
    h.dispose();
    big.dispose();
    p.dispose();
    expect(shown(a)).toBe("GpuBuffer(4096 bytes on cpu, disposed)");
    expect(shown(v)).toBe("GpuBuffer(256 bytes on cpu, view at byte 64 of 4096 bytes, disposed)");
    expect(shown(h)).toBe("HostBuffer(4096 bytes pinned on cpu, mapped, disposed)");
  });

  test("Stream: default or created, flags, idle or busy, capturing, disposed", async () => {
    expect(shown(dev.defaultStream)).toBe("Stream(cpu, default, idle)");
    const s = dev.createStream({ nonBlocking: true, priority: -1 });
    expect(shown(s)).toBe("Stream(cpu, created, non-blocking, priority -1, idle)");
    spin.launch(s, { grid: 1, block: 1, args: [300] });
    expect(shown(s)).toBe("Stream(cpu, created, non-blocking, priority -1, busy)");
    await s.done();
    expect(shown(s)).toBe("Stream(cpu, created, non-blocking, priority -1, idle)");
    using x = dev.alloc(64);
    s.beginCapture();
    scale.launch(s, { grid: 1, block: 16, args: [x, 2, 16] });
    expect(shown(s)).toBe("Stream(cpu, created, non-blocking, priority -1, capturing)");
    // Another stream is not queried while a capture is open (a query could invalidate it).
    expect(shown(dev.defaultStream)).toBe("Stream(cpu, default)");
    expect(s.captureStatus()).toBe("Active");
    using g = s.endCapture();
    expect(shown(g)).toBe("Graph(cpu, 1 node, 1 kernel node)");
    s.dispose();
    expect(shown(s)).toBe("Stream(cpu, created, non-blocking, priority -1, disposed)");
  });

  test("Event: timing, recorded, disposed", () => {
    const e = dev.createEvent({ timing: false });
    expect(shown(e)).toBe("GpuEvent(cpu, no timing, never recorded)");
    e.record();
    expect(shown(e)).toBe("GpuEvent(cpu, no timing, recorded)");
    e.dispose();
    expect(shown(e)).toBe("GpuEvent(cpu, no timing, recorded, disposed)");
    using t = dev.createEvent();
    expect(shown(t)).toBe("GpuEvent(cpu, timing, never recorded)");
  });

  test("Graph and GraphExec: node counts, the kernels, launches", () => {
    using s = dev.createStream();
    using x = dev.alloc(64).write(new Float32Array(16).fill(1));
    s.beginCapture();
    scale.launch(s, { grid: 1, block: 16, args: [x, 3, 16] });
    offset.launch(s, { grid: 1, block: 16, args: [x, 1, 16] });
    scale.launch(s, { grid: 1, block: 16, args: [x, 2, 16] });
    const g = s.endCapture();
    expect(shown(g)).toBe("Graph(cpu, 3 nodes, 3 kernel nodes)");
    using exec = g.instantiate();
    g.dispose();
    expect(shown(g)).toBe("Graph(cpu, disposed)");
    expect(shown(exec)).toBe("GraphExec(cpu, 3 kernel nodes: scale, offset; launched 0 times)");
    exec.launch(s);
    expect(shown(exec)).toBe("GraphExec(cpu, 3 kernel nodes: scale, offset; launched once)");
    exec.launch(s);
    s.synchronize();
    expect(shown(exec)).toBe("GraphExec(cpu, 3 kernel nodes: scale, offset; launched 2 times)");
    // ((1*3+1)*2*3+1)*2 = 50: the graph ran twice, in capture order.
    expect([...x.read(Float32Array)]).toEqual(new Array(16).fill(50));
  });

  test("Module and Kernel: the kernels it defines, a kernel's signature", () => {
    expect(shown(mod)).toBe("Module(cpu, 2 kernels: scale, offset)");
    expect(shown(scale)).toBe("Kernel(scale(buffer, f32, i32) on cpu)");
    expect(mod.kernelNames).toEqual(["scale", "offset"]);
    const m2 = Program.compile(dev, { cpu: SOURCE }, { name: "inspect" });
    const k2 = m2.kernel("offset", ["buffer", "f32", "i32"]);
    m2.dispose();
    expect(shown(m2)).toBe("Module(cpu, 2 kernels: scale, offset, disposed)");
    expect(shown(k2)).toBe("Kernel(offset(buffer, f32, i32) on cpu, disposed)");
  });

  test("Schedule and Executable: steps, mode, streams used and why", () => {
    using a = dev.alloc(256);
    const x = a.view(0, 64), y = a.view(64, 64);
    const chain = new Schedule().addFill(x, 1, { type: "f32" }).addKernel(scale, { grid: 1, block: 16, args: [x, 2, 16] }).addCopy(y, x);
    expect(shown(chain)).toBe("Schedule(3 steps: fill, scale, copy)");
    using st = chain.compile(dev, ExecMode.Stream);
    expect(shown(st)).toBe("Executable(Stream on cpu, 3 steps: 1 kernel, 1 copy, 1 fill; 1 stream)");
    using ms = chain.compile(dev, ExecMode.MultiStream(4));
    expect(shown(ms)).toBe("Executable(MultiStream(4) on cpu, 3 steps: 1 kernel, 1 copy, 1 fill; 1 of 4 streams used (no two steps of the schedule are independent), 0 cross-stream waits per run)");
    // Two independent fills, a kernel after the first, then a copy after the kernel (it reads x)
    // and the second fill (it overwrites y): two streams, one wait.
    const fork = new Schedule().addFill(x, 1, { type: "f32" }).addFill(y, 5, { type: "f32" }).addKernel(offset, { grid: 1, block: 16, args: [x, 1, 16] }).addCopy(y, x);
    using wide = fork.compile(dev, ExecMode.MultiStream(4));
    expect(shown(wide)).toBe("Executable(MultiStream(4) on cpu, 4 steps: 1 kernel, 1 copy, 2 fills; 2 of 4 streams used (the schedule's widest level has 2 independent steps), 1 cross-stream wait per run)");
    expect(wide.streamSummary).toBe("2 of 4 streams used (the schedule's widest level has 2 independent steps), 1 cross-stream wait per run");
    using two = fork.compile(dev, ExecMode.MultiStream(2));
    expect(two.streamSummary).toBe("2 streams used, 1 cross-stream wait per run");
    two.run();
    two.synchronize();
    expect([...x.read(Float32Array)]).toEqual(new Array(16).fill(2));
    expect([...y.read(Float32Array)]).toEqual(new Array(16).fill(2));
    const g = chain.compile(dev, ExecMode.Graph);
    expect(shown(g)).toBe("Executable(Graph on cpu, 3 steps: 1 kernel, 1 copy, 1 fill; 1 stream; graph made on the first run)");
    g.run();
    g.synchronize();
    expect(shown(g)).toBe("Executable(Graph on cpu, 3 steps: 1 kernel, 1 copy, 1 fill; 1 stream; graph launched once)");
    g.dispose();
    expect(shown(g)).toBe("Executable(Graph on cpu, 3 steps: 1 kernel, 1 copy, 1 fill; 1 stream; disposed)");
    expect(shown(ExecMode.MultiStream(2))).toBe("ExecMode.MultiStream(2)");
    expect(shown(ExecMode.Graph)).toBe("ExecMode.Graph");
  });

  test("CommandEncoder: its commands by kind, its size, its submissions", () => {
    using s = dev.createStream();
    using a = dev.alloc(128);
    const enc = new CommandEncoder(dev);
    expect(shown(enc)).toBe("CommandEncoder(cpu, 0 commands; 0 bytes)");
    enc.fill(a, 0, { type: "f32" }).dispatch(scale, { grid: 1, block: 32, args: [a, 2, 32] }).barrier().copy(a.view(64, 64), a.view(0, 64));
    expect(shown(enc)).toBe(`CommandEncoder(cpu, 4 commands: 1 dispatch, 1 copy, 1 fill, 1 barrier; ${enc.byteLength} bytes)`);
    enc.commit(s, { keep: true });
    enc.commit(s, { keep: true });
    s.synchronize();
    expect(shown(enc)).toBe(`CommandEncoder(cpu, 4 commands: 1 dispatch, 1 copy, 1 fill, 1 barrier; ${enc.byteLength} bytes, submitted 2 times)`);
  });

  test("GraphExecutor, GraphSession, ComputeGraph: what was encoded and run", () => {
    using a = dev.alloc(256).write(new Float32Array(64).fill(1));
    const ex = new GraphExecutor(dev);
    expect(shown(ex)).toBe("GraphExecutor(cpu, on the default stream; 0 sessions, 0 replays)");
    const direct = ex.begin();
    expect(shown(direct)).toBe("GraphSession(direct on cpu, open)");
    direct.dispatch(scale, { grid: 1, block: 64, args: [a, 2, 64] }).barrier().dispatch(offset, { grid: 1, block: 64, args: [a, 1, 64] });
    direct.finish();
    expect(shown(direct)).toBe("GraphSession(direct on cpu, finished; 2 dispatches, 1 barrier, 1 commit)");
    const rec = ex.beginRecorded();
    rec.dispatch(scale, { grid: 1, block: 64, args: [a, 3, 64] }).copy(a.view(128, 128), a.view(0, 128));
    rec.finish();
    expect(shown(rec.graph)).toBe("ComputeGraph(cpu, 2 nodes: 1 dispatch, 1 copy)");
    expect(shown(ex)).toBe("GraphExecutor(cpu, on the default stream; 2 sessions, 0 replays)");
    ex.replay(rec.graph!);
    dev.synchronize();
    expect(shown(ex)).toBe("GraphExecutor(cpu, on the default stream; 2 sessions, 1 replay)");
    // Direct: 1*2+1 = 3; recorded, run at finish: 3*3 = 9 (the copy moves 9s over 9s); replayed: 27, copied likewise.
    const got = a.read(Float32Array);
    expect([...got.subarray(0, 32)]).toEqual(new Array(32).fill(27));
    expect([...got.subarray(32)]).toEqual(new Array(32).fill(27));
  });

  test("RingKernel: how it runs, its message shape, its life", async () => {
    const rk = RingKernel.launch(dev, { handler: RING_HANDLERS.seq!, messageBytes: 8, responseBytes: 16, capacity: 64, state: 24, mode: "batch" });
    expect(shown(rk)).toBe("RingKernel(cpu, batch, 8 bytes a message, 16 bytes a response, capacity 64, 0 in flight, running)");
    await rk.request(new Uint32Array([0, 5]));
    await rk.stop();
    expect(shown(rk)).toBe("RingKernel(cpu, batch, 8 bytes a message, 16 bytes a response, capacity 64, stopped)");
    rk.dispose();
    expect(shown(rk)).toBe("RingKernel(cpu, batch, 8 bytes a message, 16 bytes a response, capacity 64, disposed)");
    expect(shown(KernelMode.Ring)).toBe("KernelMode.Ring");
  });

  test("Tensor, Variable, ExecutionPlan: shapes, bounds, kernels, peak bytes, inputs and outputs", async () => {
    const T = new Variable("T", 1, 128, 5);
    expect(shown(T)).toBe("Variable(T in [1, 128], bound to 5)");
    expect(shown(new Variable("B", 1, 8))).toBe("Variable(B in [1, 8], unbound)");
    const xs = Float32Array.from({ length: 32 }, (_, i) => (i % 7) - 3);
    const ws = Float32Array.from({ length: 8 * 16 }, (_, i) => ((i * 5) % 11) / 10 - 0.5);
    const x = Tensor.from(xs, [4, 8], { name: "x" });
    const w = Tensor.from(ws, [8, 16], { name: "w" });
    const y = x.matmul(w).relu();
    expect(shown(y)).toBe(`Tensor([4, 16], float32, id ${y.id})`);
    const plan = y.prepare({ device: dev, outputNames: ["y"] });
    const names = plan.kernels().map((k) => k.entryPoint);
    expect(shown(plan)).toBe(`ExecutionPlan(cpu, 1 kernel: ${names[0]}, peak ${plan.peakBytes} bytes; inputs x [4, 8] float32, w [8, 16] float32; outputs y [4, 16] float32)`);
    const out = (await plan.run({})) as Record<string, Float32Array>;
    for (let i = 0; i < 4; i++)
      for (let j = 0; j < 16; j++) {
        let s = 0;
        for (let k = 0; k < 8; k++) s += xs[i * 8 + k]! * ws[k * 16 + j]!;
        expect(out.y![i * 16 + j]!).toBeCloseTo(Math.max(0, s), 5);
      }
    plan.dispose();
    expect(shown(plan).endsWith("; outputs y [4, 16] float32; disposed)")).toBe(true);
  });
});

describe("await using waits for the work, without blocking the event loop, then disposes", () => {
  // The seq handler, slowed down (a spin per message), so messages are still queued when a block ends.
  const SLOW_SEQ = RING_HANDLERS.seq!.replace("r->seq = m->seq;", "for (volatile int spin = 0; spin < 3000000; spin++) {}\n  r->seq = m->seq;");

  test("Stream", async () => {
    using out = dev.alloc(4 * 256).fill(0);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    let kept: { disposed: boolean; toString(): string } | undefined;
    let t0 = 0;
    {
      await using s = dev.createStream();
      kept = s;
      spin.launch(s, { grid: 1, block: 1, args: [250] });
      slowFill.launch(s, { grid: 1, block: 1, args: [out, 256, 7] });
      expect(s.query()).toBe(false); // the work is still running when the block ends
      ticks = 0;
      t0 = performance.now();
    }
    const waited = performance.now() - t0;
    clearInterval(timer);
    expect(kept!.disposed).toBe(true);
    expect(ticks).toBeGreaterThan(0); // timers ran during the wait: the event loop was free
    expect(waited).toBeGreaterThan(20);
    expect([...out.read(Float32Array)]).toEqual(new Array(256).fill(7)); // its work finished first
  });

  test("RingKernel: every accepted message is answered before it goes", async () => {
    const ps: Promise<Uint8Array>[] = [];
    let kept: RingKernel | undefined;
    {
      await using rk = RingKernel.launch(dev, { handler: SLOW_SEQ, messageBytes: 8, responseBytes: 16, capacity: 64, state: 24 });
      kept = rk;
      for (let i = 0; i < 20; i++) ps.push(rk.request(new Uint32Array([i, i * 3])));
      expect(rk.inFlight).toBeGreaterThan(0);
    }
    expect(kept!.disposed).toBe(true);
    const rs = await Promise.all(ps);
    let sum = 0;
    rs.forEach((r, i) => {
      const u = new Uint32Array(r.buffer, r.byteOffset, 4);
      sum += i * 3;
      expect([...u]).toEqual([i, 1, i + 1, sum]);
    });
    // Plain dispose() instead drops what is not yet processed: those promises reject.
    const rk2 = RingKernel.launch(dev, { handler: SLOW_SEQ, messageBytes: 8, responseBytes: 16, capacity: 64, state: 24 });
    const lost = Array.from({ length: 20 }, (_, i) => rk2.request(new Uint32Array([i, 0])));
    rk2.dispose();
    const settled = await Promise.allSettled(lost);
    expect(settled.some((r) => r.status === "rejected" && (r.reason as GpuError).code === Status.INVALID_HANDLE)).toBe(true);
  });

  test("ExecutionPlan: the runs queued finish first", async () => {
    const data = Float32Array.from({ length: 64 }, (_, i) => i - 20);
    const x = Tensor.from(data, [64], { name: "x" });
    let run: Promise<unknown> | undefined;
    let kept: { toString(): string } | undefined;
    {
      await using plan = x.mul(2).add(1).prepare({ device: dev, outputNames: ["y"] });
      kept = plan;
      run = plan.run({ x: data.map((v) => v + 1) });
    }
    expect(String(kept).endsWith("; disposed)")).toBe(true);
    const out = (await run) as Record<string, Float32Array>;
    expect([...out.y!]).toEqual([...data].map((v) => (v + 1) * 2 + 1));
  });
});

describe("errors say what caused them and what would be valid", () => {
  test("a kernel name the module lacks lists the kernels it has", () => {
    const e = thrown(() => mod.kernel("scal", ["buffer", "f32", "i32"]));
    expect(e.code).toBe(Status.NOT_FOUND);
    expect(e.message).toBe('BG_ERR_NOT_FOUND (500): Module.kernel: no kernel named "scal" in the module (its kernels: scale, offset)');
  });

  test("a string where a number belongs is called a string", () => {
    using s = dev.createStream();
    using x = dev.alloc(64);
    const e = thrown(() => scale.launch(s, { grid: 1, block: 16, args: [x, 2, "1024" as never] }));
    expect(e.code).toBe(Status.INVALID_VALUE);
    expect(e.message).toBe('BG_ERR_INVALID_VALUE (1): Kernel.launch: scale: args[2] must be an i32, got the string "1024"');
  });

  test("an unknown device lists the forms and the devices here; a missing ordinal says how many there are", () => {
    const here = `devices here: ${Device.list().join(", ")}`;
    const e = thrown(() => Device.open("vulkan"));
    expect(e.code).toBe(Status.INVALID_VALUE);
    expect(e.message).toBe(`BG_ERR_INVALID_VALUE (1): Device.open: unknown device "vulkan" (want "cpu", "cpu:N", "cuda", "cuda:N", "metal" or "metal:N"; ${here})`);
    const o = thrown(() => Device.open("cpu:3"));
    expect(o.code).toBe(Status.INVALID_DEVICE);
    expect(o.message).toBe(`BG_ERR_INVALID_DEVICE (101): bg_device_open: cpu has 1 device, no ordinal 3; ${here}`);
  });

  test("BUNGPU_DEVICE naming a backend that cannot open is named in the error", () => {
    const script =
      "import { Device } from './src'; const here = Device.list().join(', '); " +
      "try { Device.default(); console.log('opened') } catch (e) { console.log(JSON.stringify({ code: e.code, call: e.call, message: e.message, here })) }";
    const r = Bun.spawnSync(["bun", "-e", script], {
      // A driver path that does not exist: CUDA cannot load here, with or without a GPU.
      env: { ...process.env, BUNGPU_DEVICE: "cuda", BUNGPU_LIBCUDA: "/nonexistent/libcuda.so" },
      cwd: `${import.meta.dir}/..`,
    });
    expect(r.stderr.toString()).toBe("");
    const got = JSON.parse(r.stdout.toString().trim()) as { code: number; call: string; message: string; here: string };
    expect(got.code).toBe(Status.BACKEND_UNAVAILABLE);
    expect(got.call).toBe("Device.default");
    const head = "BG_ERR_BACKEND_UNAVAILABLE (990): BUNGPU_DEVICE=cuda (the environment variable that chooses Device.default()'s device; unset it to try cuda:0, then metal:0, then cpu): bg_device_open: ";
    expect(got.message.slice(0, head.length)).toBe(head);
    expect(got.message.endsWith(`; devices here: ${got.here}`)).toBe(true);
  });
});

describe("tensor kernels are named after what they compute", () => {
  // The descriptive part, without the 16-hex hash of the kernel's text that ends every name.
  const described = (t: Tensor) => {
    const plan = t.prepare({ device: dev });
    try {
      return plan.kernels().map((k) => {
        expect(k.entryPoint).toMatch(/_[0-9a-f]{16}$/);
        return k.entryPoint.slice(0, -17);
      });
    } finally {
      plan.dispose();
    }
  };
  const x = Tensor.from(Float32Array.from({ length: 64 * 32 }, (_, i) => Math.sin(i)), [64, 32]);
  const w = Tensor.from(Float32Array.from({ length: 32 * 16 }, (_, i) => Math.cos(i)), [32, 16]);

  test("reductions by what they reduce, elementwise kernels by their ops, then the output shape", () => {
    expect(described(x.matmul(w).relu())).toEqual(["matmul_64x16_max"]);
    expect(described(x.softmax(-1))).toEqual(["max_64x1", "sum_exp_64x1", "div_exp_sub_64x32"]);
    expect(described(x.add(x.mul(2)))).toEqual(["add_mul_64x32"]);
    expect(described(x.sum())).toEqual(["sum_scalar"]);
    expect(described(x.transpose(0, 1).contiguous())).toEqual(["copy_32x64"]);
    const S = new Variable("S", 1, 64, 8);
    expect(described(Tensor.from(new Float32Array(64 * 4), [64, 4]).shrink([[0, S], null]).exp())).toEqual(["exp_Sx4"]);
  });

  test("names are a function of the kernel's structure: equal programs, equal names; other shapes, other names", () => {
    const name = (t: Tensor) => {
      const plan = t.prepare({ device: dev });
      const n = plan.kernels().map((k) => k.entryPoint);
      plan.dispose();
      return n;
    };
    const a = name(x.matmul(w).relu());
    const b = name(Tensor.from(new Float32Array(64 * 32).fill(1), [64, 32]).matmul(Tensor.from(new Float32Array(32 * 16).fill(2), [32, 16])).relu());
    expect(b).toEqual(a); // data is not structure
    const c = name(Tensor.from(new Float32Array(8 * 32).fill(1), [8, 32]).matmul(w).relu());
    expect(c[0]!.startsWith("matmul_8x16_max_")).toBe(true);
    expect(c[0]).not.toBe(a[0]);
  });
});
