// One suite for every backend present: it runs on the CPU everywhere, and unchanged on CUDA and
// Metal wherever their drivers are found (describe.skipIf-style: a backend that is absent gives
// no describe block). The other suites exercise the CPU backend in depth; this one checks that
// each real device computes the same results through every layer.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { CaptureMode, Device, ExecMode, Graph, GraphExecutor, Program, Schedule, Status, Tensor, type Module, type Stream } from "../src";
import { KernelMode, RingKernel } from "../src/ring";
import { expectGpuError, randomBytes, randomFloats } from "./helpers";
import { allKernelSources } from "./kernels";

const specs = Device.backends()
  .filter((b) => b.available && b.devices > 0)
  .map((b) => (b.backend === "cpu" ? "cpu" : `${b.backend}:0`));

const close = (got: ArrayLike<number>, want: ArrayLike<number>, tol: number) => {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < got.length; i++)
    if (!(Math.abs(got[i]! - want[i]!) <= tol * Math.max(1, Math.abs(want[i]!)))) throw new Error(`element ${i}: got ${got[i]}, want ${want[i]}`);
};

for (const spec of specs) {
  describe(`on ${spec}`, () => {
    let dev: Device;
    let mod: Module;
    let s: Stream;
    const metal = spec.startsWith("metal");
    beforeAll(() => {
      dev = Device.open(spec);
      mod = Program.compile(dev, allKernelSources, { name: "backends" });
      s = dev.createStream();
    });
    afterAll(() => {
      s.dispose();
      mod.dispose();
      dev.dispose();
    });

    test("buffers round-trip and fill", () => {
      const data = randomBytes(1 << 20, 3);
      using b = dev.alloc(data.byteLength).write(data);
      expect(Buffer.compare(b.read(), data)).toBe(0);
      b.fill(0x5a, { type: "u8", offset: 100, bytes: 1000 });
      const back = b.read();
      expect(back.subarray(100, 1100).every((x) => x === 0x5a)).toBe(true);
      expect(Buffer.compare(back.subarray(0, 100), data.subarray(0, 100))).toBe(0);
    });

    test("vadd and saxpy against a reference, at a size the block does not divide", () => {
      const n = 10007;
      const a = randomFloats(n, 1), b = randomFloats(n, 2);
      using A = dev.alloc(n * 4).write(a);
      using B = dev.alloc(n * 4).write(b);
      using C = dev.alloc(n * 4);
      const grid = Math.ceil(n / 128);
      mod.kernel("vadd", ["buffer", "buffer", "buffer", "i32"]).launch(s, { grid, block: 128, args: [A, B, C, n] });
      mod.kernel("saxpy", ["f32", "buffer", "buffer", "i32"]).launch(s, { grid, block: 128, args: [2, A, B, n] });
      s.synchronize();
      close(C.read(Float32Array), Array.from(a, (x, i) => x + b[i]!), 1e-6);
      close(B.read(Float32Array), Array.from(a, (x, i) => 2 * x + b[i]!), 1e-5);
    });

    test.skipIf(metal)("tree reduction and tiled matmul against references", () => {
      const n = 5000, block = 256, grid = Math.ceil(n / block);
      const x = randomFloats(n, 5);
      using X = dev.alloc(n * 4).write(x);
      using P = dev.alloc(grid * 4);
      mod.kernel("reduce_sum", ["buffer", "buffer", "i32"]).launch(s, { grid, block, args: [X, P, n], sharedBytes: block * 4 });
      const [M, N, K] = [45, 33, 70];
      const ma = randomFloats(M * K, 6), mb = randomFloats(K * N, 7);
      using MA = dev.alloc(ma.byteLength).write(ma);
      using MB = dev.alloc(mb.byteLength).write(mb);
      using MC = dev.alloc(M * N * 4);
      mod.kernel("matmul_tiled", ["buffer", "buffer", "buffer", "i32", "i32", "i32"]).launch(s, {
        grid: [Math.ceil(N / 16), Math.ceil(M / 16)],
        block: [16, 16],
        args: [MA, MB, MC, M, N, K],
        sharedBytes: 2048,
      });
      s.synchronize();
      const partial = new Float64Array(grid);
      for (let i = 0; i < n; i++) partial[Math.floor(i / block)]! += x[i]!;
      close(P.read(Float32Array), partial, 1e-4);
      const ref = new Float64Array(M * N);
      for (let i = 0; i < M; i++) for (let j = 0; j < N; j++) for (let k = 0; k < K; k++) ref[i * N + j]! += ma[i * K + k]! * mb[k * N + j]!;
      close(MC.read(Float32Array), ref, 1e-4);
    });

    test("two streams ordered by an event", () => {
      using producer = dev.createStream();
      using ev = dev.createEvent({ timing: false });
      const n = 1 << 16;
      using buf = dev.alloc(n * 4).fill(0, { type: "f32" });
      const add = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
      for (let r = 0; r < 20; r++) {
        add.launch(producer, { grid: n / 256, block: 256, args: [buf, 1, n] });
        ev.record(producer);
        s.wait(ev);
        add.launch(s, { grid: n / 256, block: 256, args: [buf, 2, n] });
        ev.record(s);
        producer.wait(ev);
      }
      s.synchronize();
      producer.synchronize();
      expect(buf.read(Float32Array).every((v) => v === 60)).toBe(true);
    });

    test.skipIf(metal)("capture, replay and a kernel-argument update", () => {
      const n = 4096;
      using buf = dev.alloc(n * 4).fill(0, { type: "f32" });
      const add = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
      const graph = Graph.capture(s, () => {
        add.launch(s, { grid: n / 256, block: 256, args: [buf, 1, n] });
        add.launch(s, { grid: n / 256, block: 256, args: [buf, 10, n] });
      }, { mode: CaptureMode.Global });
      expect(graph.kernelNodeCount).toBe(2);
      using exec = graph.instantiate();
      graph.dispose();
      for (let i = 0; i < 5; i++) exec.launch(s);
      exec.setKernelArgs(1, add, [buf, 100, n]);
      exec.launch(s);
      s.synchronize();
      expect(exec.replayCount).toBe(6);
      expect(buf.read(Float32Array).every((v) => v === 5 * 11 + 101)).toBe(true);
    });

    test("a command-encoder session: many dispatches, one commit", () => {
      using buf = dev.alloc(64 * 4).fill(0, { type: "f32" });
      const add = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
      using session = new GraphExecutor(dev, { stream: s }).begin();
      for (let i = 0; i < 200; i++) session.dispatch(add, { grid: 1, block: 64, args: [buf, 0.5, 64] });
      session.finish();
      expect(session.stats.ffiCrossings).toBe(1);
      expect(buf.read(Float32Array).every((v) => v === 100)).toBe(true);
    });

    test("a ring kernel answers requests in order", async () => {
      using rk = RingKernel.launch(dev, {
        handler: {
          cpu: "BG_RING_HANDLER(msg, resp, state) { *(uint32_t*)resp = *(const uint32_t*)msg * 3u; *(uint32_t*)state += 1u; }",
          cuda: "BG_RING_HANDLER(msg, resp, state) { *(uint32_t*)resp = *(const uint32_t*)msg * 3u; *(uint32_t*)state += 1u; }",
          metal: "BG_RING_HANDLER(msg, resp, state) { *(device uint*)resp = *(device const uint*)msg * 3u; *(device uint*)state += 1u; }",
        },
        messageBytes: 4,
        responseBytes: 4,
        capacity: 64,
        state: 4,
        mode: KernelMode.Ring,
      });
      const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => rk.request(new Uint8Array(new Uint32Array([i]).buffer))));
      answers.forEach((a, i) => expect(new Uint32Array(a.buffer, a.byteOffset, 1)[0]).toBe(3 * i));
      await rk.stop();
      expect(new Uint32Array(rk.stateAs(Uint8Array).slice().buffer)[0]).toBe(100);
    });

    test("a module load beside a resident ring kernel: CUDA refuses it (the driver can wait for a drain that never comes); after stop() it loads", async () => {
      // the handler of the test above (the simulator keys a ring kernel's host twin by its name)
      const handler = "BG_RING_HANDLER(msg, resp, state) { *(uint32_t*)resp = *(const uint32_t*)msg * 3u; *(uint32_t*)state += 1u; }";
      const rk = RingKernel.launch(dev, {
        handler: { cpu: handler, cuda: handler, metal: "BG_RING_HANDLER(msg, resp, state) { *(device uint*)resp = *(device const uint*)msg * 3u; *(device uint*)state += 1u; }" },
        messageBytes: 4, responseBytes: 4, capacity: 8, state: 4, mode: KernelMode.Ring,
      });
      try {
        expect(new Uint32Array((await rk.request(new Uint32Array([41]))).slice().buffer)[0]).toBe(123); // resident and answering
        if (dev.backend === "cuda") expectGpuError(() => Program.compile(dev, allKernelSources, { name: "beside_ring" }), Status.ILLEGAL_STATE, "persistent ring kernel is resident");
        else Program.compile(dev, allKernelSources, { name: "beside_ring" }).dispose();
      } finally {
        await rk.stop();
      }
      Program.compile(dev, allKernelSources, { name: "after_ring" }).dispose();
    });

    test("copies in a Graph-mode schedule (memcpy nodes on CUDA) move the bytes", () => {
      const n = 4096;
      const src = randomBytes(n, 31);
      using a = dev.alloc(n).write(src), b = dev.alloc(n), c = dev.alloc(n);
      const sched = new Schedule().addCopy(b, a).addCopy(c, b);
      using exec = sched.compile(dev, ExecMode.Graph);
      exec.run();
      exec.synchronize();
      expect(Buffer.from(c.read()).equals(Buffer.from(src))).toBe(true);
    });

    test("a tensor program prepared for this device matches its reference in every ExecMode", () => {
      const a = randomFloats(24 * 40, 11), w = randomFloats(40 * 16, 12);
      const y = Tensor.from(a, [24, 40]).matmul(Tensor.from(w, [40, 16])).relu().sum(1);
      using plan = y.prepare({ device: dev });
      const ref = new Float64Array(24);
      for (let i = 0; i < 24; i++)
        for (let j = 0; j < 16; j++) {
          let acc = 0;
          for (let k = 0; k < 40; k++) acc += a[i * 40 + k]! * w[k * 16 + j]!;
          ref[i]! += Math.max(0, acc);
        }
      for (const mode of [ExecMode.Stream, ExecMode.Graph, ExecMode.Eager, ExecMode.MultiStream(2)]) {
        plan.execute({ mode });
        close(plan.readOutput(0), ref, 1e-4);
      }
    });
  });
}

test("at least the CPU backend is covered", () => {
  expect(specs).toContain("cpu");
});
