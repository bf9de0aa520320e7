// The README's examples, run as written (with the elisions filled in), so they cannot rot.
import { expect, test } from "bun:test";
import { CaptureMode, Device, ExecMode, Graph, GraphExecutor, Program, Schedule, Step } from "../src";

test("the quick start, the capture and schedule example, and the encoder example", async () => {
  const dev = Device.open("cpu");
  const n = 1 << 20;
  using a = dev.alloc(n * 4).write(new Float32Array(n).fill(1));
  using b = dev.alloc(n * 4).write(new Float32Array(n).fill(2));
  using c = dev.alloc(n * 4);
  const mod = Program.compile(dev, {
    cpu: `#include "bungpu_cpu.h"
        BG_KERNEL(vadd) {
          const float* a = BG_ARG(0, const float*); const float* b = BG_ARG(1, const float*);
          float* c = BG_ARG(2, float*); int n = BG_ARG(3, int);
          BG_FOR_BLOCKS { BG_FOR_THREADS {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) c[i] = a[i] + b[i];
          } }
        }
        BG_KERNEL(add_scalar) {
          float* x = BG_ARG(0, float*); float v = BG_ARG(1, float); int n = BG_ARG(2, int);
          BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += v; } }
        }`,
  });
  const vadd = mod.kernel("vadd", ["buffer", "buffer", "buffer", "i32"]);
  const s = dev.createStream();
  vadd.launch(s, { grid: Math.ceil(n / 256), block: 256, args: [a, b, c, n] });
  await s.done();
  expect(c.read(Float32Array)[0]).toBe(3);

  // capture and graphs
  c.fill(0);
  const graph = Graph.capture(s, () => {
    vadd.launch(s, { grid: 64, block: 256, args: [a, b, c, n] });
  }, { mode: CaptureMode.Global });
  using exec = graph.instantiate();
  exec.launch(s);
  s.synchronize();
  const first = c.read(Float32Array);
  expect(first[64 * 256 - 1]).toBe(3);
  expect(first[64 * 256]).toBe(0);
  b.fill(5, { type: "f32" });
  exec.setKernelArgs(0, vadd, [a, b, c, n / 2]);
  exec.launch(s);
  s.synchronize();
  expect(c.read(Float32Array)[0]).toBe(6);

  // schedules
  c.fill(0);
  const sched = new Schedule([Step.kernel(vadd, { grid: 4096, block: 256, args: [a, b, c, n], reads: [a, b], writes: [c] })]);
  using run = sched.compile(dev, ExecMode.MultiStream(2));
  run.run();
  await run.done();
  expect(c.read(Float32Array)[n - 1]).toBe(6);

  // command encoders
  const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
  using buf = dev.alloc(4).fill(0, { type: "f32" });
  const gx = new GraphExecutor(dev);
  using session = gx.begin();
  for (let i = 0; i < 1000; i++) session.dispatch(addScalar, { grid: 1, block: 1, args: [buf, 1, 1] });
  session.finish();
  expect(session.stats).toMatchObject({ dispatches: 1000, commits: 1, ffiCrossings: 1 });
  expect(buf.read(Float32Array)[0]).toBe(1000);
  s.dispose();
  mod.dispose();
});

test("the ring kernel and tensor examples", async () => {
  const { KernelMode, RingKernel, ExecMode, Tensor, Variable } = await import("../src");
  const dev = Device.open("cpu");
  {
    using rk = RingKernel.launch(dev, {
      handler: `BG_RING_HANDLER(msg, resp, state) {      /* one handler, in the backend's language */
    *(uint32_t*)resp = *(const uint32_t*)msg * 2;
    *(uint64_t*)state += *(const uint32_t*)msg;      /* state persists across messages */
  }`,
      messageBytes: 4, responseBytes: 4, capacity: 1024, state: 8,
      mode: KernelMode.Ring,
    });
    const answer = await rk.request(new Uint8Array(new Uint32Array([21]).buffer));
    expect(new Uint32Array(answer.buffer, answer.byteOffset, 1)[0]).toBe(42);
    await rk.stop();
    expect(Number(new BigUint64Array(rk.stateAs(Uint8Array).slice().buffer)[0])).toBe(21);
  }
  const S = new Variable("S", 1, 128).bind(32);
  const x = Tensor.randn([128, 64], { seed: 1 }).shrink([[0, S], null]);
  const w = Tensor.randn([64, 64], { seed: 2 });
  const y = x.matmul(w).gelu().softmax(-1);
  using plan = y.prepare();
  plan.execute({ mode: ExecMode.Graph });
  plan.executeWithVars({ S: 100 });
  const out = plan.readOutput(0);
  expect(out.length).toBe(100 * 64);
  for (let r = 0; r < 100; r++) {
    let sum = 0;
    for (let c = 0; c < 64; c++) sum += out[r * 64 + c]!;
    expect(Math.abs(sum - 1)).toBeLessThan(1e-4); // each softmax row sums to 1
  }
});

test("the trace example writes a timeline with the plan's kernels", async () => {
  const { mkdtempSync, readFileSync, rmSync } = await import("node:fs");
  const { join } = await import("node:path");
  const { tmpdir } = await import("node:os");
  const { Tensor, trace } = await import("../src");
  const dir = mkdtempSync(join(tmpdir(), "bungpu-readme-trace-"));
  try {
    const y = Tensor.randn([256, 256], { seed: 1 }).matmul(Tensor.randn([256, 256], { seed: 2 })).relu();
    using plan = y.prepare();
    trace.start();
    plan.execute();                       // any work, on any streams
    const t = trace.stop();               // waits (up to 2 s) for the traced work to finish
    trace.write(join(dir, "run.json"), t); // README: "run.json"
    const back = JSON.parse(readFileSync(join(dir, "run.json"), "utf8")) as { traceEvents: { ph: string; name: string; dur?: number }[] };
    const spans = back.traceEvents.filter((e) => e.ph === "X");
    expect(spans.length).toBeGreaterThan(0);
    expect(spans.every((e) => typeof e.dur === "number" && e.dur >= 0)).toBe(true);
    const names = spans.map((e) => e.name).join(" ");
    for (const k of plan.preparedKernels()) expect(names).toContain(k.entryPoint);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the memory pool example: same-stream reuse, stats, threshold and trim", async () => {
  const { Device, MemoryPool } = await import("../src");
  const dev = Device.open("cpu");
  using s = dev.createStream();
  using pool = new MemoryPool(dev, { releaseThreshold: 64 << 20 }); // keep up to 64 MiB warm
  const a = s.alloc(1 << 20, { pool });
  const where = a.address;
  a.free(s);                                   // back to the pool at this point of s
  const b = s.alloc(1 << 20, { pool });        // the same stream reuses it at once
  expect(b.address === where).toBe(true);
  expect({ ...pool.stats }).toEqual({ reserved: 1048576, used: 1048576, reservedPeak: 1048576, usedPeak: 1048576 });
  b.free(s);
  s.synchronize();                             // under the threshold: the memory stays warm
  expect([pool.stats.reserved, pool.stats.used]).toEqual([1048576, 0]);
  pool.trim(0);
  expect(pool.stats.reserved).toBe(0);
});

test("the objects-explain-themselves example prints what README shows", async () => {
  const { Device, Tensor } = await import("../src");
  const dev = Device.open("cpu");
  const buf = dev.alloc(65536);
  const x = Tensor.from(new Float32Array(64 * 256), [64, 256], { name: "x" });
  using plan = x.matmul(Tensor.randn([256, 16], { seed: 1 })).relu().prepare();
  expect(String(dev)).toMatch(/^Device\(cpu, ".*", backend cpu, index 0\)$/); // the name is the machine's
  expect(String(buf)).toBe("GpuBuffer(64 KiB on cpu)");
  // the hash suffix is of the generated text, which may differ with the host's vector width
  expect(String(plan).replace(/_[0-9a-f]{16}\b/, "_<hash>")).toBe("ExecutionPlan(cpu, 1 kernel: matmul_64x16_max_<hash>, peak 84 KiB; inputs x [64, 256] float32, input1 [256, 16] float32; outputs output0 [64, 16] float32)");
  buf.dispose();
  expect(String(buf)).toBe("GpuBuffer(64 KiB on cpu, disposed)");
});

test("the several-devices example, as pasted, with BUNGPU_CPU_DEVICES=2", async () => {
  const { readFileSync, mkdtempSync, writeFileSync, rmSync } = await import("node:fs");
  const { join } = await import("node:path");
  const { tmpdir } = await import("node:os");
  const readme = readFileSync(join(import.meta.dir, "..", "README.md"), "utf8");
  const block = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes("s.copyPeer(y, x)"));
  expect(block).toBeDefined();
  const dir = mkdtempSync(join(tmpdir(), "bungpu-readme-peer-"));
  try {
    const file = join(dir, "peer.ts");
    writeFileSync(file, block!.replace(`from "bungpu"`, `from ${JSON.stringify(join(import.meta.dir, "..", "src"))}`));
    const r = Bun.spawnSync([process.execPath, file], { env: { ...process.env, BUNGPU_CPU_DEVICES: "2" }, stdout: "pipe", stderr: "pipe", timeout: 60_000 });
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString()).toBe("staged\npeer\nFloat32Array(4) [ 1, 2, 3, 4 ]\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the README's IPC block is examples/ipc.ts (which test/ipc.test.ts runs), line for line but the import", async () => {
  const { readFileSync } = await import("node:fs");
  const { join } = await import("node:path");
  const readme = readFileSync(join(import.meta.dir, "..", "README.md"), "utf8");
  const block = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes("openSharedBuffer"));
  expect(block).toBeDefined();
  const file = readFileSync(join(import.meta.dir, "..", "examples", "ipc.ts"), "utf8");
  const code = file.split("\n").filter((l) => !l.startsWith("//")).join("\n").replace(`from "../src/index"`, `from "bungpu"`);
  expect(block!.trim()).toBe(code.trim());
});
