import { afterAll, describe, expect, test } from "bun:test";
import { Device, GpuError, Program, Status, loadInfo, type Stream } from "../src";
import { CaptureMode, Graph, GraphExec } from "../src/capture";
import { expectGpuError, expectGpuErrorAsync } from "./helpers";
import { kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "capture" });
const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
const saxpy = mod.kernel("saxpy", ["f32", "buffer", "buffer", "i32"]);
const spin = mod.kernel("spin_ms", ["i32"]);
afterAll(() => {
  mod.dispose();
  dev.dispose();
});

const N_EL = 1024;
const add = (st: Stream, buf: ReturnType<typeof dev.alloc>, v: number) =>
  addScalar.launch(st, { grid: N_EL / 128, block: 128, args: [buf, v, N_EL] });
const all = (b: ReturnType<typeof dev.alloc>, v: number) => [...b.read(Float32Array)].every((x) => x === v);

/** Ask a Worker thread to allocate on `dev` while the caller's capture is open. */
function allocFromWorker(): Promise<{ rc: number; msg: string; freeRc: number; path: string }> {
  // The worker must open the very library this thread opened (handles are process-global only
  // within one library), even if shim/ changes meanwhile.
  const w = new Worker(new URL("./capture.worker.ts", import.meta.url).href, {
    env: { ...process.env, BUNGPU_LIB: loadInfo.path },
  });
  return new Promise((resolve, reject) => {
    w.onmessage = (e) => {
      w.terminate();
      resolve(e.data);
    };
    w.onerror = (e) => {
      w.terminate();
      reject(e);
    };
    w.postMessage({ device: dev.handle, bytes: 64 });
  });
}

describe("CaptureMode", () => {
  test("values equal CUstreamCaptureMode; Global is the default", () => {
    expect(CaptureMode.Global.toCuda()).toBe(0);
    expect(CaptureMode.ThreadLocal.toCuda()).toBe(1);
    expect(CaptureMode.Relaxed.toCuda()).toBe(2);
    expect(CaptureMode.default).toBe(CaptureMode.Global);
    expect(String(CaptureMode.ThreadLocal)).toBe("ThreadLocal");
    expect(CaptureMode.values().map((m) => m.name)).toEqual(["Global", "ThreadLocal", "Relaxed"]);
    expect(Object.isFrozen(CaptureMode.Global)).toBe(true);
  });
});

describe("capture and replay", () => {
  test("captured work does not run; the graph replays it; replay count is right", () => {
    using st = dev.createStream();
    using buf = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    expect(st.captureStatus()).toBe("None");
    st.beginCapture();
    expect(st.captureStatus()).toBe("Active");
    add(st, buf, 1);
    add(st, buf, 2);
    st.fill(buf, 0, { type: "f32", offset: 0, bytes: 4 });
    const graph = st.endCapture();
    expect(st.captureStatus()).toBe("None");
    st.synchronize();
    expect(all(buf, 0)).toBe(true); // nothing ran during capture
    expect(graph.nodeCount).toBe(3);
    expect(graph.kernelNodeCount).toBe(2);
    using exec = graph.instantiate();
    graph.dispose();
    expect(exec.replayCount).toBe(0);
    exec.upload(st);
    for (let i = 0; i < 5; i++) exec.launch(st);
    expect(exec.replayCount).toBe(5);
    st.synchronize();
    const got = buf.read(Float32Array);
    expect(got[0]).toBe(0); // the fill ends every replay
    expect(got[1]).toBe(15);
    expect(got[N_EL - 1]).toBe(15);
    // another stream of the same device can launch it too
    using other = dev.createStream();
    exec.launch(other);
    other.synchronize();
    expect(buf.read(Float32Array)[1]).toBe(18);
    expect(buf.read(Float32Array)[0]).toBe(0);
    expect(exec.replayCount).toBe(6);
  });

  test("capture refuses the device's default stream with a clear error", () => {
    const g = expectGpuError(() => dev.defaultStream.beginCapture(), Status.STREAM_CAPTURE_UNSUPPORTED, /default stream cannot be captured/);
    expect(g.message).toMatch(/createStream/);
    expect(dev.defaultStream.captureStatus()).toBe("None");
  });

  test("a TypeScript host function is refused during capture; the capture goes on", () => {
    using st = dev.createStream();
    using buf = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    st.beginCapture();
    add(st, buf, 1);
    expectGpuError(() => st.hostFn(() => {}), Status.STREAM_CAPTURE_UNSUPPORTED, /cannot be captured/);
    add(st, buf, 2);
    using exec = st.endCapture().instantiate();
    exec.launch(st);
    exec.launch(st);
    st.synchronize();
    expect(all(buf, 6)).toBe(true);
  });

  test("bad arguments throw before the FFI and change nothing", () => {
    using st = dev.createStream();
    expectGpuError(() => st.beginCapture(1 as never), Status.INVALID_VALUE, /CaptureMode/);
    expect(st.captureStatus()).toBe("None");
    expectGpuError(() => st.endCapture(), Status.ILLEGAL_STATE, /not capturing/);
    st.beginCapture(CaptureMode.Relaxed);
    expectGpuError(() => st.beginCapture(), Status.ILLEGAL_STATE, /already capturing/);
    expect(st.captureStatus()).toBe("Active");
    st.endCapture().dispose();
    const s2 = dev.createStream();
    s2.dispose();
    expectGpuError(() => s2.beginCapture(), Status.INVALID_HANDLE, /disposed/);
  });

  test("a disposed graph or exec refuses use; dispose is idempotent", () => {
    using st = dev.createStream();
    using buf = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    const graph = Graph.capture(st, (s) => add(s, buf, 1));
    const exec = graph.instantiate();
    graph.dispose();
    graph.dispose();
    expectGpuError(() => graph.instantiate(), Status.INVALID_HANDLE, /graph was disposed/);
    expectGpuError(() => graph.nodeCount, Status.INVALID_HANDLE);
    exec.launch(st);
    exec.dispose(); // a launch in flight still completes
    exec.dispose();
    expectGpuError(() => exec.launch(st), Status.INVALID_HANDLE, /graph exec was disposed/);
    st.synchronize();
    expect(all(buf, 1)).toBe(true);
  });
});

describe("illegal calls during capture, by mode", () => {
  test("same thread: an allocation invalidates Global and ThreadLocal, not Relaxed; the stream stays usable", () => {
    for (const mode of CaptureMode.values()) {
      using st = dev.createStream();
      using buf = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
      st.beginCapture(mode);
      add(st, buf, 1);
      if (mode === CaptureMode.Relaxed) {
        using extra = dev.alloc(64); // allowed
        expect(st.captureStatus()).toBe("Active");
        expect(extra.byteLength).toBe(64);
        st.endCapture().dispose();
      } else {
        const e = expectGpuError(() => dev.alloc(64), Status.STREAM_CAPTURE_UNSUPPORTED, /bg_mem_alloc/);
        expect(e.message).toContain(mode.name);
        expect(st.captureStatus()).toBe("Invalidated");
        const end = expectGpuError(() => st.endCapture(), Status.STREAM_CAPTURE_INVALIDATED, /bg_mem_alloc/);
        expect(end.message).toContain(`mode ${mode.name}`);
      }
      // the stream is out of capture and runs real work
      expect(st.captureStatus()).toBe("None");
      add(st, buf, 5);
      st.synchronize();
      expect(all(buf, 5)).toBe(true);
    }
  });

  test("synchronizing or querying the capturing stream invalidates in every mode", () => {
    for (const mode of CaptureMode.values()) {
      using st = dev.createStream();
      st.beginCapture(mode);
      expectGpuError(() => st.query(), Status.STREAM_CAPTURE_UNSUPPORTED, /bg_stream_query/);
      expectGpuError(() => st.endCapture(), Status.STREAM_CAPTURE_INVALIDATED, /bg_stream_query/);
      st.synchronize(); // usable again
    }
  });

  for (const mode of CaptureMode.values()) {
    const invalidates = mode === CaptureMode.Global;
    test(`from a Worker: another thread's allocation ${invalidates ? "invalidates" : "does not invalidate"} a ${mode} capture`, async () => {
      using st = dev.createStream();
      using buf = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
      st.beginCapture(mode);
      add(st, buf, 2);
      const r = await allocFromWorker();
      expect(r.path).toBe(loadInfo.path); // the same library, so the same device handle
      if (invalidates) {
        expect(r.rc).toBe(Status.STREAM_CAPTURE_UNSUPPORTED);
        expect(r.msg).toMatch(/bg_mem_alloc.*Global.*another thread/);
        expect(st.captureStatus()).toBe("Invalidated");
        const e = expectGpuError(() => st.endCapture(), Status.STREAM_CAPTURE_INVALIDATED, /bg_mem_alloc/);
        expect(e.message).toContain("mode Global");
        add(st, buf, 7); // usable after the failed capture
        st.synchronize();
        expect(all(buf, 7)).toBe(true);
      } else {
        expect(r.rc).toBe(0);
        expect(r.freeRc).toBe(0);
        expect(st.captureStatus()).toBe("Active");
        using g = st.endCapture();
        using x = g.instantiate();
        x.launch(st).launch(st);
        st.synchronize();
        expect(all(buf, 4)).toBe(true);
      }
    });
  }

  test("ThreadLocal: the capturing thread's own illegal call still invalidates", () => {
    using st = dev.createStream();
    st.beginCapture(CaptureMode.ThreadLocal);
    expectGpuError(() => dev.synchronize(), Status.STREAM_CAPTURE_UNSUPPORTED, /bg_device_synchronize.*ThreadLocal/);
    expectGpuError(() => st.endCapture(), Status.STREAM_CAPTURE_INVALIDATED, /bg_device_synchronize \(mode ThreadLocal/);
  });
});

describe("Graph.capture (scoped)", () => {
  test("ends and discards the capture when fn throws, rethrowing fn's own error", () => {
    using st = dev.createStream();
    using buf = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    const mine = new Error("boom");
    let caught: unknown;
    try {
      Graph.capture(st, (s) => {
        add(s, buf, 1);
        throw mine;
      });
    } catch (e) {
      caught = e;
    }
    expect(caught).toBe(mine);
    expect(st.captureStatus()).toBe("None");
    add(st, buf, 3);
    st.synchronize();
    expect(all(buf, 3)).toBe(true); // the discarded capture never ran
  });

  test("an invalidated capture inside fn: fn's error wins, the stream is usable", () => {
    using st = dev.createStream();
    const e = expectGpuError(
      () =>
        Graph.capture(st, () => {
          dev.alloc(16);
        }),
      Status.STREAM_CAPTURE_UNSUPPORTED,
      /bg_mem_alloc/,
    );
    expect(e).toBeInstanceOf(GpuError);
    expect(st.captureStatus()).toBe("None");
    st.synchronize();
  });

  test("async fn: resolves to the graph, or discards on rejection", async () => {
    using st = dev.createStream();
    using buf = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    const g = await Graph.capture(
      st,
      async (s) => {
        add(s, buf, 1);
        await Promise.resolve();
        add(s, buf, 1);
      },
      { mode: CaptureMode.ThreadLocal },
    );
    expect(g.kernelNodeCount).toBe(2);
    g.dispose();
    await expectGpuErrorAsync(
      () =>
        Graph.capture(st, async () => {
          throw new GpuError(Status.UNKNOWN, "mine");
        }),
      Status.UNKNOWN,
      /mine/,
    );
    expect(st.captureStatus()).toBe("None");
  });
});

describe("fork and join through events", () => {
  test("fork/join results equal the sequential order of the dependencies", () => {
    using s0 = dev.createStream();
    using s1 = dev.createStream();
    using x = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    using y = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    using fork = dev.createEvent({ timing: false });
    using join = dev.createEvent({ timing: false });
    const graph = Graph.capture(s0, () => {
      add(s0, x, 1); // x = 1
      fork.record(s0);
      s1.wait(fork);
      add(s1, y, 2); // y = 2
      saxpy.launch(s1, { grid: N_EL / 128, block: 128, args: [10, x, y, N_EL] }); // y = 12 (reads x after fork)
      join.record(s1);
      s0.wait(join);
      add(s0, x, 100); // x = 101, after the join
      expect(s1.captureStatus()).toBe("Active");
    });
    expect(s1.captureStatus()).toBe("None");
    expect(graph.kernelNodeCount).toBe(4);
    using exec = graph.instantiate();
    graph.dispose();
    exec.launch(s0);
    exec.launch(s0);
    s0.synchronize();
    expect(all(x, 202)).toBe(true);
    expect(all(y, 12 + 2 + 10 * 102)).toBe(true); // second replay: y = 12 + 2, then + 10 * 102
  });

  test("an unjoined fork fails endCapture; the streams stay usable", () => {
    using s0 = dev.createStream();
    using s1 = dev.createStream();
    using x = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    using fork = dev.createEvent({ timing: false });
    s0.beginCapture();
    fork.record(s0);
    s1.wait(fork);
    add(s1, x, 1);
    expectGpuError(() => s0.endCapture(), Status.STREAM_CAPTURE_UNJOINED, /not joined/);
    expect(s0.captureStatus()).toBe("None");
    expect(s1.captureStatus()).toBe("None");
    add(s1, x, 4);
    add(s0, x, 0);
    s1.synchronize();
    s0.synchronize();
    expect(all(x, 4)).toBe(true);
  });
});

describe("graph update without re-capture", () => {
  test("setKernelArgs changes scalars and buffer bindings; one capture only", () => {
    using st = dev.createStream();
    using a = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    using b = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    let captures = 0;
    const graph = Graph.capture(st, (s) => {
      captures++;
      add(s, a, 1);
      add(s, a, 10);
    });
    using exec = graph.instantiate();
    graph.dispose();
    exec.launch(st); // a = 11
    exec.setKernelArgs(1, addScalar, [a, 20, N_EL]);
    exec.launch(st); // a = 32: the launch before kept its arguments
    exec.setKernelArgs(0, addScalar, [b, 5, N_EL]); // rebind node 0 to b
    exec.launch(st); // a = 52, b = 5
    st.synchronize();
    expect(all(a, 52)).toBe(true);
    expect(all(b, 5)).toBe(true);
    expect(captures).toBe(1);
    expect(exec.replayCount).toBe(3);
    // bad updates throw and change nothing
    expectGpuError(() => exec.setKernelArgs(2, addScalar, [a, 1, N_EL]), Status.INVALID_VALUE, /out of range/);
    expectGpuError(() => exec.setKernelArgs(0, addScalar, [a, "x" as never, N_EL]), Status.INVALID_VALUE, /f32/);
    expectGpuError(() => exec.setKernelArgs(0, spin, [1]), Status.INVALID_VALUE, /arguments/);
    exec.launch(st);
    st.synchronize();
    expect(all(a, 72)).toBe(true);
    expect(all(b, 10)).toBe(true);
  });
});

describe("lifetimes", () => {
  test("disposing an exec mid-replay loses nothing", () => {
    using st = dev.createStream();
    using buf = dev.alloc(N_EL * 4).fill(0, { type: "f32" });
    const graph = Graph.capture(st, (s) => {
      spin.launch(s, { grid: 1, block: 1, args: [5] });
      add(s, buf, 1);
    });
    const exec: GraphExec = graph.instantiate();
    graph.dispose();
    for (let i = 0; i < 4; i++) exec.launch(st);
    exec.dispose();
    st.synchronize();
    expect(all(buf, 4)).toBe(true);
  });
});
