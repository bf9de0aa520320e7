import { afterAll, describe, expect, test } from "bun:test";
import { Device, Event, Program, Status } from "../src";
import { expectGpuError, expectGpuErrorAsync, randomBytes } from "./helpers";
import { kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "basic" });
const slowFill = mod.kernel("slow_fill", ["buffer", "i32", "f32"]);
const sumInto = mod.kernel("sum_into", ["buffer", "buffer", "i32"]);
const spin = mod.kernel("spin_ms", ["i32"]);
const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
afterAll(() => {
  mod.dispose();
  dev.dispose();
});

describe("streams", () => {
  test("two streams ordered by an event: the consumer never sees half-written data", () => {
    using producer = dev.createStream();
    using consumer = dev.createStream({ nonBlocking: true });
    using ev = dev.createEvent({ timing: false });
    using back = dev.createEvent({ timing: false });
    const n = 2000;
    using data = dev.alloc(n * 4);
    const runs = 40;
    using outs = dev.alloc(runs * 4);
    for (let r = 0; r < runs; r++) {
      slowFill.launch(producer, { grid: 1, block: 1, args: [data, n, r + 1] });
      ev.record(producer);
      consumer.wait(ev);
      sumInto.launch(consumer, { grid: 1, block: 1, args: [data, outs.view(r * 4, 4), n] });
      // the next fill must not start before this sum has read the data
      back.record(consumer);
      producer.wait(back);
    }
    consumer.synchronize();
    producer.synchronize();
    const got = outs.read(Float32Array);
    for (let r = 0; r < runs; r++) expect(got[r]).toBe(n * (r + 1));
  });

  test("done() lets a timer fire while it waits", async () => {
    using st = dev.createStream();
    let fired = 0;
    const t = setInterval(() => fired++, 1);
    spin.launch(st, { grid: 1, block: 1, args: [60] });
    expect(st.query()).toBe(false);
    await st.done();
    clearInterval(t);
    expect(fired).toBeGreaterThan(0);
    expect(st.query()).toBe(true);
  });

  test("device.done() waits for every stream of the device without blocking the event loop", async () => {
    using a = dev.createStream();
    using b = dev.createStream();
    using buf = dev.alloc(4).fill(0, { type: "f32" }); // before: a sync fill waits for blocking streams
    // long enough that a loaded machine pausing this thread cannot see both done before the query
    spin.launch(a, { grid: 1, block: 1, args: [300] });
    spin.launch(b, { grid: 1, block: 1, args: [150] });
    addScalar.launch(dev.defaultStream, { grid: 1, block: 1, args: [buf, 1, 1] });
    let fired = 0;
    const t = setInterval(() => fired++, 1);
    expect(a.query() && b.query()).toBe(false);
    await dev.done();
    clearInterval(t);
    expect(a.query()).toBe(true);
    expect(b.query()).toBe(true);
    expect(dev.defaultStream.query()).toBe(true);
    expect(buf.read(Float32Array)[0]).toBe(1);
    expect(fired).toBeGreaterThan(0);
  });

  test("synchronize blocks until the work is done; query reports it", () => {
    using st = dev.createStream();
    using b = dev.alloc(4096 * 4).fill(0, { type: "f32" });
    for (let i = 0; i < 10; i++) addScalar.launch(st, { grid: 32, block: 128, args: [b, 1, 4096] });
    st.synchronize();
    expect(st.query()).toBe(true);
    expect([...b.read(Float32Array)].every((x) => x === 10)).toBe(true);
  });

  test("async copies from pinned memory and memset in stream order", async () => {
    using st = dev.createStream();
    const n = 1 << 20;
    using src = dev.allocHost(n);
    using dst = dev.allocHost(n);
    src.bytes.set(randomBytes(n, 99));
    using a = dev.alloc(n);
    using b = dev.alloc(n);
    st.upload(a, src).copy(b, a).fill(b, 7, { type: "u8", offset: 16, bytes: 16 }).download(dst, b);
    await st.done();
    const want = randomBytes(n, 99);
    want.fill(7, 16, 32);
    expect(Buffer.compare(dst.bytes, want)).toBe(0);
    expectGpuError(() => st.upload(a, src, { bytes: n + 1 }), Status.INVALID_VALUE, /past the end/);
    expectGpuError(() => st.upload(a, new Uint8Array(4) as never), Status.INVALID_VALUE, /HostBuffer/);
  });

  test("a default stream exists and cannot be disposed away", () => {
    const d = dev.defaultStream;
    expect(d.isDefault).toBe(true);
    d.dispose();
    expect(d.disposed).toBe(false);
    using b = dev.alloc(16);
    d.fill(b, 3, { type: "u8" });
    d.synchronize();
    expect(b.read()[0]).toBe(3);
  });

  test("a disposed stream refuses work", () => {
    const st = dev.createStream();
    st.dispose();
    using b = dev.alloc(16);
    expectGpuError(() => st.fill(b, 1, { type: "u8" }), Status.INVALID_HANDLE, /disposed/);
    expectGpuError(() => st.synchronize(), Status.INVALID_HANDLE);
  });
});

describe("events", () => {
  test("elapsed time between events is positive and ordered", () => {
    using st = dev.createStream();
    const [e1, e2, e3] = [dev.createEvent(), dev.createEvent(), dev.createEvent()];
    e1.record(st);
    spin.launch(st, { grid: 1, block: 1, args: [20] });
    e2.record(st);
    spin.launch(st, { grid: 1, block: 1, args: [20] });
    e3.record(st);
    e3.synchronize();
    const a = Event.elapsed(e1, e2), b = Event.elapsed(e1, e3);
    expect(a).toBeGreaterThan(0);
    expect(b).toBeGreaterThan(a);
    expect(e3.elapsedSince(e2)).toBeGreaterThan(0);
    for (const e of [e1, e2, e3]) e.dispose();
  });

  test("query, synchronize and done; never-recorded events are complete", async () => {
    using st = dev.createStream();
    using e = dev.createEvent();
    expect(e.query()).toBe(true);
    spin.launch(st, { grid: 1, block: 1, args: [30] });
    e.record(st);
    expect(e.query()).toBe(false);
    await e.done();
    expect(e.query()).toBe(true);
    using untimed = dev.createEvent({ timing: false });
    untimed.record(st);
    untimed.synchronize();
    expectGpuError(() => Event.elapsed(untimed, e), Status.INVALID_HANDLE);
  });
});

describe("host functions in stream order", () => {
  test("a TypeScript host function runs after the work before it and before the work after it", async () => {
    // non-blocking: a synchronous read or write inside a blocking stream's host function would
    // wait for that stream (the legacy default stream's rule), so it is refused there
    using st = dev.createStream({ nonBlocking: true });
    using b = dev.alloc(4).fill(0, { type: "f32" });
    const seen: number[] = [];
    spin.launch(st, { grid: 1, block: 1, args: [10] });
    addScalar.launch(st, { grid: 1, block: 1, args: [b, 1, 1] });
    st.hostFn(() => {
      seen.push(b.read(Float32Array)[0]!);
      b.write(new Float32Array([100]));
    });
    addScalar.launch(st, { grid: 1, block: 1, args: [b, 1, 1] });
    await st.done();
    expect(seen).toEqual([1]);
    expect(b.read(Float32Array)[0]).toBe(101);
  });

  test("a host function never runs inside the hostFn() call that queued it", async () => {
    using st = dev.createStream();
    let early = 0, ran = 0;
    for (let i = 0; i < 300; i++) {
      let mine = false;
      st.hostFn(() => {
        mine = true;
        ran++;
      });
      if (mine) early++; // the idle stream reaches the signal at once: still not run here
      if (i % 50 === 49) await st.done();
    }
    await st.done();
    expect(early).toBe(0);
    expect(ran).toBe(300);
  });

  test("an async host function holds the stream until it settles", async () => {
    using st = dev.createStream({ nonBlocking: true }); // it writes synchronously: see above
    using b = dev.alloc(4).fill(0, { type: "f32" });
    st.hostFn(async () => {
      await Bun.sleep(20);
      b.write(new Float32Array([5]));
    });
    addScalar.launch(st, { grid: 1, block: 1, args: [b, 1, 1] });
    await st.done();
    expect(b.read(Float32Array)[0]).toBe(6);
  });

  test("synchronize() services pending host functions instead of deadlocking", () => {
    using st = dev.createStream();
    let ran = 0;
    for (let i = 0; i < 5; i++) st.hostFn(() => void ran++);
    st.synchronize();
    expect(ran).toBe(5);
  });

  test("device.synchronize() and dispose() run queued host functions instead of deadlocking (subprocess)", () => {
    const r = Bun.spawnSync(["bun", "run", `${import.meta.dir}/fixtures/device_sync_hostfn.ts`], {
      cwd: `${import.meta.dir}/..`,
      timeout: 20_000,
    });
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString().trim()).toBe('["a","b","before dispose","default"]');
    expect(r.exitCode).toBe(0);
  }, 30_000);

  test("blocking calls and host functions: serviced from outside, refused from inside (subprocess)", () => {
    const r = Bun.spawnSync(["bun", "run", `${import.meta.dir}/fixtures/hostfn_blocking.ts`], {
      cwd: `${import.meta.dir}/..`,
      timeout: 20_000,
    });
    expect(r.stderr.toString()).toBe("");
    expect(JSON.parse(r.stdout.toString())).toEqual({
      order: ["host function", "write returned"], // a sync copy runs the default stream's host function first
      afterWrite: 7,
      reported: "719 true", // a sync read inside a default-stream host function: refused, then reported
      readInOther: 9, // reading inside another stream's host function is fine
      selfSync: "401 true", // synchronising your own stream from its host function: ILLEGAL_STATE
      eventBefore: "returned", // an event recorded on it before the function has completed
      eventAfter: "401 true", // so is waiting for an event recorded on it after the function…
      disposeSelf: "returned", // disposing it, or its device, never throws: it happens once the function has returned
      disposeDevice: "returned",
      stillLive: false, // (a few turns later)
    });
    expect(r.exitCode).toBe(0);
  }, 30_000);

  test("a throwing host function is reported by the next wait, and the stream goes on", async () => {
    using st = dev.createStream();
    using b = dev.alloc(4).fill(0, { type: "f32" });
    st.hostFn(() => {
      throw new Error("boom");
    });
    addScalar.launch(st, { grid: 1, block: 1, args: [b, 1, 1] });
    await expectGpuErrorAsync(() => st.done(), Status.LAUNCH_FAILED, /boom/);
    expect(b.read(Float32Array)[0]).toBe(1);
  });
});
