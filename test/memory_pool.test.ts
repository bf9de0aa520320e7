// Stream-ordered allocation and memory pools (Stream.alloc, Buffer.free, MemoryPool): reuse in
// stream order observed with a slow kernel, stats, trim and the release threshold, allocation
// inside a capture replayed, and bad input as GpuError codes. On the CPU everywhere and unchanged
// on CUDA where a driver is found (test/sim_suite.sh runs it on the driver simulator). Addresses
// and byte counts are exact where the pool's rules are ours (the CPU backend, the simulator); on a
// real driver, whose reuse is opportunistic and whose granularity is coarser, the checks are the
// guarantees the driver documents.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { MEMPOOL_GRANULE } from "../ffi/constants";
import { api } from "../ffi/result";
import { Device, MemoryPool, Program, Status, Stream, type Kernel, type Module } from "../src";
import { expectGpuError } from "./helpers";
import { kernelSources } from "./kernels";

const specs = Device.backends()
  .filter((b) => (b.backend === "cpu" || b.backend === "cuda") && b.available && b.devices > 0)
  .map((b) => (b.backend === "cpu" ? "cpu" : `${b.backend}:0`));
const KEEP = Number.MAX_SAFE_INTEGER; // a release threshold that keeps everything
const round = (n: number) => Math.ceil(n / MEMPOOL_GRANULE) * MEMPOOL_GRANULE;
const allEqual = (a: Float32Array, v: number) => a.every((x) => x === v);

for (const spec of specs) {
  describe(`on ${spec}`, () => {
    let dev: Device;
    let mod: Module;
    let slowFill: Kernel, spin: Kernel, addScalar: Kernel;
    /** The pool's rules are known exactly (ours or the simulator's), not a real driver's. */
    let exact = true;
    beforeAll(() => {
      dev = Device.open(spec);
      exact = spec === "cpu" || dev.name.includes("cudasim");
      mod = Program.compile(dev, kernelSources, { name: "basic" });
      slowFill = mod.kernel("slow_fill", ["buffer", "i32", "f32"]);
      spin = mod.kernel("spin_ms", ["i32"]);
      addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
    });
    afterAll(() => {
      mod.dispose();
      dev.dispose();
    });

    /** Stats on a real driver: the relations it guarantees, not its granularity. */
    function statsOnDriver(): void {
      using s = Stream.create(dev);
      using pool = new MemoryPool(dev, { releaseThreshold: KEEP });
      const bufs = [1000, 4096, 1].map((n) => s.alloc(n, { pool }));
      const st = pool.stats;
      expect(st.used).toBeGreaterThanOrEqual(5097);
      expect(st.reserved).toBeGreaterThanOrEqual(st.used);
      expect(st.usedPeak).toBeGreaterThanOrEqual(st.used);
      expect(st.reservedPeak).toBeGreaterThanOrEqual(st.reserved);
      for (const b of bufs) b.free(s);
      s.synchronize();
      expect(pool.stats.used).toBe(0);
      pool.resetPeak();
      expect(pool.stats.usedPeak).toBe(0);
    }

    function trimOnDriver(): void {
      using s = Stream.create(dev);
      using pool = new MemoryPool(dev, { releaseThreshold: KEEP });
      const held = s.alloc(512, { pool });
      for (const b of [1024, 4096, 256].map((n) => s.alloc(n, { pool }))) b.free(s);
      s.synchronize();
      pool.trim(0);
      expect(pool.stats.used).toBeGreaterThanOrEqual(512);
      expect(pool.stats.reserved).toBeGreaterThanOrEqual(pool.stats.used);
      held.free(s);
      s.synchronize();
      pool.trim(0);
      expect(pool.stats.reserved).toBe(0);
    }

    describe("stream order", () => {
      test("a block freed on a stream is that stream's again at once, in order", () => {
        using s = Stream.create(dev);
        using pool = new MemoryPool(dev, { releaseThreshold: KEEP });
        const n = 4096;
        spin.launch(s, { grid: 1, block: 1, args: [30] }); // the stream is busy throughout
        const a = s.alloc(n * 4, { pool });
        const addrA = a.address;
        slowFill.launch(s, { grid: 1, block: 1, args: [a, n, 2] });
        using out1 = dev.alloc(n * 4);
        s.copy(out1, a);
        a.free(s);
        const b = s.alloc(n * 4, { pool }); // the same stream: reused before its earlier work ran
        if (exact) expect(b.address).toBe(addrA);
        expect(s.query()).toBe(false); // still spinning: the reuse did not wait
        slowFill.launch(s, { grid: 1, block: 1, args: [b, n, 5] });
        using out2 = dev.alloc(n * 4);
        s.copy(out2, b);
        s.synchronize();
        expect(allEqual(out1.read(Float32Array), 2)).toBe(true); // the first user saw its own values
        expect(allEqual(out2.read(Float32Array), 5)).toBe(true);
        b.free();
        if (exact) expect(pool.stats).toEqual({ reserved: n * 4, used: 0, reservedPeak: n * 4, usedPeak: n * 4 });
        else expect(pool.stats.usedPeak).toBeGreaterThanOrEqual(n * 4);
      });

      test("another stream gets the block only once the freeing stream has run the work before the free", () => {
        using s1 = Stream.create(dev, { nonBlocking: true });
        using s2 = Stream.create(dev, { nonBlocking: true });
        using pool = new MemoryPool(dev, { releaseThreshold: KEEP });
        const n = 8192;
        const a = s1.alloc(n * 4, { pool });
        const addrA = a.address;
        spin.launch(s1, { grid: 1, block: 1, args: [60] });
        slowFill.launch(s1, { grid: 1, block: 1, args: [a, n, 7] }); // runs after the spin
        using keep = dev.alloc(n * 4);
        s1.copy(keep, a);
        a.free(s1);
        // s1 is still spinning: s2 must not get the block it will write
        const b = s2.alloc(n * 4, { pool });
        expect(b.address).not.toBe(addrA);
        slowFill.launch(s2, { grid: 1, block: 1, args: [b, n, 3] });
        using seen = dev.alloc(n * 4);
        s2.copy(seen, b);
        s2.synchronize();
        s1.synchronize();
        expect(allEqual(keep.read(Float32Array), 7)).toBe(true);
        expect(allEqual(seen.read(Float32Array), 3)).toBe(true);
        // s1 has run its free: now s2 may have the block
        const c = s2.alloc(n * 4, { pool });
        if (exact) expect(c.address).toBe(addrA);
        if (exact) expect(pool.stats.reserved).toBe(2 * n * 4);
        b.free();
        c.free();
        s2.synchronize();
      });

      test("dispose() frees on the stream that allocated; the device's default pool serves Stream.alloc", () => {
        using s = Stream.create(dev);
        const before = dev.defaultPool.stats;
        const a = s.alloc(1000);
        expect(a.streamOrdered).toBe(true);
        if (exact) expect(dev.defaultPool.stats.used).toBe(before.used + round(1000));
        else expect(dev.defaultPool.stats.used).toBeGreaterThanOrEqual(before.used + 1000);
        a.dispose();
        s.synchronize();
        if (exact) expect(dev.defaultPool.stats.used).toBe(before.used);
        expect(dev.defaultPool).toBe(dev.defaultPool);
        expect(dev.defaultPool.isDefault).toBe(true);
      });
    });

    describe("stats, trim and the release threshold", () => {
      test("reserved, used and peaks to the byte; resetPeak", () => {
        if (!exact) return statsOnDriver();
        using s = Stream.create(dev);
        using pool = new MemoryPool(dev, { releaseThreshold: KEEP });
        expect(pool.stats).toEqual({ reserved: 0, used: 0, reservedPeak: 0, usedPeak: 0 });
        const a = s.alloc(1000, { pool });
        const b = s.alloc(4096, { pool });
        const c = s.alloc(1, { pool });
        const total = round(1000) + round(4096) + round(1);
        expect(pool.stats).toEqual({ reserved: total, used: total, reservedPeak: total, usedPeak: total });
        b.free(s);
        expect(pool.stats).toEqual({ reserved: total, used: total - 4096, reservedPeak: total, usedPeak: total });
        pool.resetPeak();
        expect(pool.stats).toEqual({ reserved: total, used: total - 4096, reservedPeak: total, usedPeak: total - 4096 });
        const d = s.alloc(3000, { pool }); // best fit: the freed 4096-byte block, no new memory
        expect(pool.stats).toEqual({ reserved: total, used: total, reservedPeak: total, usedPeak: total });
        for (const x of [a, c, d]) x.free(s);
        s.synchronize();
        expect(pool.stats).toEqual({ reserved: total, used: 0, reservedPeak: total, usedPeak: total });
      });

      test("trim gives unused blocks back, largest first, down to keepBytes", () => {
        if (!exact) return trimOnDriver();
        using s = Stream.create(dev);
        using pool = new MemoryPool(dev, { releaseThreshold: KEEP });
        const sizes = [1024, 4096, 256];
        const bufs = sizes.map((n) => s.alloc(n, { pool }));
        const held = s.alloc(512, { pool });
        for (const b of bufs) b.free(s);
        s.synchronize();
        expect(pool.stats.reserved).toBe(1024 + 4096 + 256 + 512);
        pool.trim(2000); // 4096 goes (1792 left <= 2000)
        expect(pool.stats.reserved).toBe(1024 + 256 + 512);
        pool.trim(0); // every unused block; the one in use stays
        expect(pool.stats).toMatchObject({ reserved: 512, used: 512 });
        held.free(s);
        s.synchronize();
        pool.trim();
        expect(pool.stats).toMatchObject({ reserved: 0, used: 0, reservedPeak: 1024 + 4096 + 256 + 512 });
      });

      test("a synchronize releases down to the threshold", () => {
        using s = Stream.create(dev);
        using pool = new MemoryPool(dev, { releaseThreshold: 1024 });
        expect(pool.releaseThreshold).toBe(1024);
        const bufs = [1024, 4096, 256].map((n) => s.alloc(n, { pool }));
        for (const b of bufs) b.free(s);
        if (exact) expect(pool.stats.reserved).toBe(5376); // nothing released before a synchronize
        else expect(pool.stats.reserved).toBeGreaterThanOrEqual(5376);
        s.synchronize();
        if (exact) expect(pool.stats.reserved).toBe(256); // 4096, then 1024, went: 256 <= 1024
        pool.releaseThreshold = 0;
        dev.synchronize();
        expect(pool.stats.reserved).toBe(0);
      });

      test("a block whose free has not yet run on its stream is not released", () => {
        using s = Stream.create(dev);
        using pool = new MemoryPool(dev, { releaseThreshold: KEEP });
        const a = s.alloc(2048, { pool });
        spin.launch(s, { grid: 1, block: 1, args: [40] });
        slowFill.launch(s, { grid: 1, block: 1, args: [a, 512, 1] });
        a.free(s);
        pool.trim(0);
        expect(pool.stats.reserved).toBeGreaterThanOrEqual(2048); // the stream may still write it
        if (exact) expect(pool.stats.reserved).toBe(2048);
        s.synchronize();
        pool.trim(0);
        expect(pool.stats.reserved).toBe(0);
      });
    });

    describe("capture", () => {
      test("an allocation inside a capture: one fixed address, every replay correct", () => {
        using s = Stream.create(dev);
        const n = 1024;
        using out = dev.alloc(n * 4);
        out.fill(0);
        s.beginCapture();
        const tmp = s.alloc(n * 4);
        const addr = tmp.address;
        slowFill.launch(s, { grid: 1, block: 1, args: [tmp, n, 1] });
        addScalar.launch(s, { grid: n / 128, block: 128, args: [tmp, 2, n] });
        addScalar.launch(s, { grid: n / 128, block: 128, args: [out, 1, n] });
        s.copy(out, tmp, { bytes: 16 }); // out[0..4) = 3 each replay
        tmp.free(s);
        using graph = s.endCapture();
        using exec = graph.instantiate();
        // the graph's memory stays reserved: no allocation outside it gets that address
        const other = s.alloc(n * 4);
        expect(other.address).not.toBe(addr);
        other.free();
        for (let r = 1; r <= 25; r++) {
          exec.launch(s);
          s.synchronize();
          const v = out.read(Float32Array);
          expect([v[0], v[3], v[4], v[n - 1]]).toEqual([3, 3, r, r]);
        }
      });

      // The driver's rule for a graph with memory allocation nodes, kept on every backend so they
      // agree: one executable graph of it at a time; another once the first is gone.
      test("a graph that allocated in its capture has one GraphExec at a time: a second is NOT_SUPPORTED until the first is disposed", () => {
        using s = Stream.create(dev);
        const n = 256;
        using out = dev.alloc(n * 4);
        s.beginCapture();
        const tmp = s.alloc(n * 4); // not freed in the capture: the graph's memory
        slowFill.launch(s, { grid: 1, block: 1, args: [tmp, n, 1] });
        s.copy(out, tmp);
        using graph = s.endCapture();
        const first = graph.instantiate();
        for (let r = 0; r < 3; r++) {
          out.fill(0, { type: "f32" });
          first.launch(s);
          s.synchronize();
          expect(out.read(Float32Array).every((v) => v === 1)).toBe(true);
        }
        expectGpuError(() => graph.instantiate(), Status.NOT_SUPPORTED, "one executable graph of such a graph at a time");
        first.dispose();
        using again = graph.instantiate();
        out.fill(0, { type: "f32" });
        again.launch(s);
        s.synchronize();
        expect(out.read(Float32Array).every((v) => v === 1)).toBe(true);
        // a graph without allocations has any number of execs
        s.beginCapture();
        s.copy(out, out);
        using plain = s.endCapture();
        plain.instantiate().dispose();
        using a = plain.instantiate(), b = plain.instantiate();
        expect(a.handle).not.toBe(b.handle);
      });

      test("a graph allocation freed twice inside its capture is INVALID_VALUE", () => {
        using s = Stream.create(dev);
        s.beginCapture();
        const t = s.alloc(256);
        const a = t.address;
        t.free(s);
        const calls = api(dev.backend);
        expectGpuError(() => calls.mem_free_async(s.handle, a), Status.INVALID_VALUE);
        s.endCapture().dispose();
      });
    });

    describe("bad input", () => {
      test("sizes, pools and options", () => {
        using s = Stream.create(dev);
        expectGpuError(() => s.alloc(0), Status.INVALID_VALUE);
        expectGpuError(() => s.alloc(-1), Status.INVALID_VALUE);
        expectGpuError(() => s.alloc(1.5), Status.INVALID_VALUE);
        expectGpuError(() => s.alloc(64, { pool: 5 as never }), Status.INVALID_VALUE, /MemoryPool/);
        expectGpuError(() => s.alloc(64, null as never), Status.INVALID_VALUE);
        expectGpuError(() => new MemoryPool(dev, { releaseThreshold: -1 }), Status.INVALID_VALUE);
        expectGpuError(() => new MemoryPool({} as never), Status.INVALID_VALUE);
        using pool = new MemoryPool(dev);
        expectGpuError(() => pool.trim(-5), Status.INVALID_VALUE);
        expectGpuError(() => (pool.releaseThreshold = Number.NaN), Status.INVALID_VALUE);
      });

      test("free twice, free of plain memory or a view, free on a disposed stream: GpuError", () => {
        using s = Stream.create(dev);
        const a = s.alloc(256);
        const v = a.view(0, 16);
        expectGpuError(() => v.free(s), Status.INVALID_VALUE, /view/);
        a.free(s);
        expectGpuError(() => a.free(s), Status.INVALID_HANDLE);
        a.dispose(); // never throws
        using plain = dev.alloc(64);
        expectGpuError(() => plain.free(s), Status.INVALID_VALUE, /dispose/);
        const b = s.alloc(256);
        const gone = Stream.create(dev);
        gone.dispose();
        expectGpuError(() => b.free(gone), Status.INVALID_HANDLE);
        b.free();
      });

      test("the shim refuses what TypeScript would not send", () => {
        using s = Stream.create(dev);
        const calls = api(dev.backend);
        const h = s.handle;
        const notLive = spec === "cpu" ? /not a live stream-ordered/ : /cuMemFreeAsync: CUDA_ERROR_INVALID_VALUE/;
        expectGpuError(() => calls.mem_free_async(h, 0x1000), Status.INVALID_VALUE, notLive);
        const p = calls.mem_alloc_async(h, null, 100);
        calls.mem_free_async(h, p);
        expectGpuError(() => calls.mem_free_async(h, p), Status.INVALID_VALUE, notLive);
        expectGpuError(() => calls.mem_alloc_async(h, null, 0), Status.INVALID_VALUE);
        expectGpuError(() => calls.mempool_destroy(dev.defaultPool.handle), Status.INVALID_VALUE, /default pool/);
        expectGpuError(() => calls.mempool_stats(h), Status.INVALID_HANDLE);
        const e = expectGpuError(() => calls.mem_free_async(h, 0x2000), Status.INVALID_VALUE);
        expect(e.call).toBe("bg_mem_free_async");
        expect(e.backend).toBe(dev.backend);
      });

      test("a disposed pool refuses calls; its blocks stay valid until freed; dispose twice is quiet", () => {
        using s = Stream.create(dev);
        const pool = new MemoryPool(dev);
        const a = s.alloc(512, { pool });
        a.write(new Float32Array(128).fill(4));
        pool.dispose();
        pool.dispose();
        expectGpuError(() => pool.stats, Status.INVALID_HANDLE);
        expectGpuError(() => s.alloc(64, { pool }), Status.INVALID_HANDLE);
        expect(allEqual(a.read(Float32Array), 4)).toBe(true);
        a.free(s);
        dev.defaultPool.dispose(); // the device's: left alone
        expect(dev.defaultPool.stats.used).toBeGreaterThanOrEqual(0);
      });
    });
  });
}
