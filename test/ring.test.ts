// KernelMode, Ring and RingKernel on the CPU backend; the CUDA persistent kernel is compiled with
// nvcc --ptx where nvcc exists. No timing assertions: only order, counts, contents and errors.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, GpuError, Status } from "../src";
import { KernelMode, Ring, RingKernel, ringKernelSource } from "../src/ring";
import { expectGpuError, expectGpuErrorAsync } from "./helpers";
import { RING_HANDLERS } from "./shipped_sources";

const dev = Device.open("cpu");
afterAll(() => dev.dispose());

// Message: { seq u32, val u32 }. Response: { seq, ok (seq was the one expected), count, sum lo }.
// State: { next u32, errors u32, count u32, pad u32, sum u64 }. The same text is compiled by real
// NVRTC in test/nvrtc.test.ts, so one definition serves both.
const SEQ_HANDLER = RING_HANDLERS.seq!;

function seqMessages(from: number, n: number, val: (i: number) => number = (i) => i & 0xffff): Uint8Array {
  const u = new Uint32Array(n * 2);
  for (let i = 0; i < n; i++) {
    u[2 * i] = from + i;
    u[2 * i + 1] = val(from + i);
  }
  return new Uint8Array(u.buffer);
}

function u32(b: Uint8Array): Uint32Array {
  return new Uint32Array(b.buffer, b.byteOffset, b.byteLength >>> 2);
}

function readState(rk: RingKernel): { next: number; errors: number; count: number; sum: bigint } {
  const s = rk.stateAs(Uint8Array);
  const dv = new DataView(s.buffer, s.byteOffset, s.byteLength);
  return { next: dv.getUint32(0, true), errors: dv.getUint32(4, true), count: dv.getUint32(8, true), sum: dv.getBigUint64(16, true) };
}

function seqKernel(mode: KernelMode, capacity = 4096): RingKernel {
  return RingKernel.launch(dev, { handler: SEQ_HANDLER, messageBytes: 8, responseBytes: 16, capacity, state: 24, mode });
}

describe("KernelMode", () => {
  test("names, predicates, string and JSON round trip", () => {
    expect(KernelMode.Batch.isBatch()).toBe(true);
    expect(KernelMode.Batch.isRing()).toBe(false);
    expect(KernelMode.Ring.isRing()).toBe(true);
    expect(KernelMode.Ring.asStr()).toBe("ring");
    expect(KernelMode.Batch.asStr()).toBe("batch");
    expect(String(KernelMode.Ring)).toBe("ring");
    expect(`${KernelMode.Batch}`).toBe("batch");
    for (const m of KernelMode.values()) {
      expect(KernelMode.parse(JSON.stringify(m))).toBe(m);
      expect(KernelMode.parse(m.asStr())).toBe(m);
      expect(KernelMode.parse(m)).toBe(m);
    }
    expect(JSON.stringify({ mode: KernelMode.Ring })).toBe('{"mode":"ring"}');
    expect(KernelMode.parse("Batch")).toBe(KernelMode.Batch);
    expect(KernelMode.parse(" RING ")).toBe(KernelMode.Ring);
  });

  test("typical overheads are documented per backend; Ring is below Batch where kernels persist", () => {
    for (const b of ["cpu", "cuda", "metal"] as const)
      for (const m of KernelMode.values()) expect(m.typicalOverheadUs(b)).toBeGreaterThan(0);
    expect(KernelMode.Ring.typicalOverheadUs("cpu")).toBeLessThan(KernelMode.Batch.typicalOverheadUs("cpu"));
    expect(KernelMode.Ring.typicalOverheadUs()).toBeLessThan(KernelMode.Batch.typicalOverheadUs());
    expect(KernelMode.Ring.typicalOverheadUs(dev)).toBe(KernelMode.Ring.typicalOverheadUs("cpu"));
  });

  test("unknown names are refused with INVALID_VALUE", () => {
    for (const bad of ["", "rings", "persistent", '"nope"', "{}", 1, null, undefined, {}])
      expectGpuError(() => KernelMode.parse(bad), Status.INVALID_VALUE);
    expectGpuError(() => KernelMode.Ring.typicalOverheadUs("vulkan" as never), Status.INVALID_VALUE);
  });
});

describe("Ring", () => {
  test("push accepts what fits, never overwrites; pop returns FIFO order", () => {
    using r = Ring.create(dev, { messageBytes: 8, capacity: 4 });
    expect(r.count()).toBe(0);
    expect(r.push(seqMessages(0, 6))).toBe(4);
    expect(r.count()).toBe(4);
    expect(r.push(seqMessages(100, 1))).toBe(0);
    expect(u32(r.pop(2))[0]).toBe(0);
    expect(r.push(seqMessages(4, 3))).toBe(2);
    const all = u32(r.pop());
    expect([...all].filter((_, i) => i % 2 === 0)).toEqual([2, 3, 4, 5]);
    expect(r.count()).toBe(0);
    expect(r.pop().byteLength).toBe(0);
    expect(r.deviceAddress).toBe(r.hostAddress); // CPU: one memory
  });

  test("bad shapes and sizes throw before the FFI", () => {
    expectGpuError(() => Ring.create(dev, { messageBytes: 6, capacity: 4 }), Status.INVALID_VALUE, /multiple of 4/);
    expectGpuError(() => Ring.create(dev, { messageBytes: 8, capacity: 6 }), Status.INVALID_VALUE, /power of two/);
    expectGpuError(() => Ring.create(dev, { messageBytes: 8, capacity: 1 }), Status.INVALID_VALUE);
    using r = Ring.create(dev, { messageBytes: 8, capacity: 4 });
    expectGpuError(() => r.push(new Uint8Array(12)), Status.INVALID_VALUE, /whole number/);
    expect(r.count()).toBe(0);
    r.dispose();
    expectGpuError(() => r.push(new Uint8Array(8)), Status.INVALID_HANDLE);
  });

  test("no unchecked push or pop is reachable from a Ring (a wrong count there crashed the process)", () => {
    using r = Ring.create(dev, { messageBytes: 8, capacity: 4 });
    const any = r as unknown as Record<string, unknown>;
    expect(any.pushUnchecked).toBeUndefined();
    expect(any.popUnchecked).toBeUndefined();
    expectGpuError(() => r.push(new Uint8Array(8), 5), Status.INVALID_VALUE);
    expectGpuError(() => r.pop(2, new Uint8Array(8)), Status.INVALID_VALUE);
  });
});

describe("RingKernel (CPU)", () => {
  test("one million messages are each processed exactly once and in order; state persists", async () => {
    using rk = seqKernel(KernelMode.Ring);
    expect(rk.mode).toBe("ring");
    expect(rk.kernelMode).toBe(KernelMode.Ring);
    const N = 1_000_000;
    const chunk = 65536;
    let sent = 0;
    let got = 0;
    let bad = 0;
    let expectedSum = 0n;
    // Keep at most a few chunks in flight: sends resolve as the kernel makes room.
    while (got < N) {
      while (sent < N && sent - got < 4 * chunk) {
        const n = Math.min(chunk, N - sent);
        void rk.sendBatch(seqMessages(sent, n));
        sent += n;
      }
      const r = u32(await rk.receiveBatch(chunk, { timeoutMs: 20000 }));
      for (let i = 0; i < r.length; i += 4) {
        if (r[i] !== got || r[i + 1] !== 1 || r[i + 2] !== got + 1) bad++;
        got++;
      }
    }
    for (let i = 0; i < N; i++) expectedSum += BigInt(i & 0xffff);
    expect(bad).toBe(0);
    expect(got).toBe(N);
    expect(rk.tryReceive()).toBeNull();
    await rk.stop();
    const s = readState(rk);
    expect(s).toEqual({ next: N, errors: 0, count: N, sum: expectedSum });
  }, 30000);

  test("a stop in the middle of a stream loses nothing", async () => {
    using rk = seqKernel(KernelMode.Ring, 1024);
    const N = 200_000;
    const accepted = rk.sendBatch(seqMessages(0, N)); // far more than fits: most wait for room
    const early = u32(await rk.receiveBatch(1000));
    expect(early[0]).toBe(0);
    await rk.stop(); // drains: every accepted message processed, its response kept
    await accepted;
    expect(rk.stopped).toBe(true);
    let next = early.length / 4;
    for (let i = 0; i < early.length; i += 4) expect(early[i]).toBe(i / 4);
    for (;;) {
      const r = u32(rk.tryReceiveBatch());
      if (r.length === 0) break;
      for (let i = 0; i < r.length; i += 4) if (r[i] !== next++ || r[i + 1] !== 1) throw new Error(`bad response at ${next - 1}`);
    }
    expect(next).toBe(N);
    expect(readState(rk).count).toBe(N);
    expect(readState(rk).errors).toBe(0);
    await expectGpuErrorAsync(() => rk.receive(), Status.NOT_READY);
    await expectGpuErrorAsync(() => rk.receive({ timeout: 10 } as never), Status.INVALID_VALUE, 'RingKernel.receive: unknown option "timeout" (did you mean timeoutMs?)');
    expectGpuError(() => rk.trySend(seqMessages(0, 1)), Status.ILLEGAL_STATE);
  }, 20000);

  test("a full ring pushes back and later accepts; nothing is overwritten", async () => {
    using rk = seqKernel(KernelMode.Ring, 8);
    let accepted = 0;
    // Nobody reads responses: the kernel fills the outbound ring (8), then waits; the inbound
    // ring fills (8). Until then trySend may refuse only while the kernel catches up.
    for (let tries = 0; accepted < 16 && tries < 5000; ) {
      if (rk.trySend(seqMessages(accepted, 1))) accepted++;
      else {
        tries++;
        await Bun.sleep(1);
      }
    }
    expect(accepted).toBe(16);
    for (let i = 0; i < 3; i++) {
      expect(rk.trySend(seqMessages(accepted, 1))).toBe(false); // full: refused, not overwritten
      await Bun.sleep(1);
    }
    let sendDone = false;
    const pending = rk.send(seqMessages(accepted, 1)).then(() => (sendDone = true));
    await Bun.sleep(5);
    expect(sendDone).toBe(false); // still full: waits, never overwrites
    const total = accepted + 1;
    const seen: number[] = [];
    while (seen.length < total) {
      const r = u32(await rk.receiveBatch(4, { timeoutMs: 10000 }));
      for (let i = 0; i < r.length; i += 4) seen.push(r[i]!);
    }
    await pending;
    expect(sendDone).toBe(true);
    expect(seen).toEqual([...Array(total).keys()]);
    expect(rk.trySend(seqMessages(total, 1))).toBe(true);
    expect(u32(await rk.receive({ timeoutMs: 10000 }))[0]).toBe(total);
    await rk.stop();
    expect(readState(rk).errors).toBe(0);
  });

  const MIX_HANDLER = `
BG_RING_HANDLER(msg, resp, state) {
  const uint32_t* m = (const uint32_t*)msg;
  uint32_t* r = (uint32_t*)resp;
  uint64_t* s = (uint64_t*)state;
  s[0] += m[0];
  r[0] = m[0] * 2654435761u;
  r[1] = m[1] ^ 0xA5A5A5A5u;
  r[2] = (uint32_t)s[0];
  r[3] = m[0] + m[1];
}
`;

  for (const mode of [KernelMode.Ring, KernelMode.Batch]) {
    test(`request pairs responses with requests (${mode})`, async () => {
      using rk = RingKernel.launch(dev, { handler: MIX_HANDLER, messageBytes: 8, responseBytes: 16, capacity: 64, state: new BigUint64Array(1), mode });
      const n = 2000; // more than the capacity: some requests wait for room
      const ps: Promise<Uint8Array>[] = [];
      for (let i = 0; i < n; i++) ps.push(rk.request(new Uint32Array([i + 1, (i * 7919) >>> 0])));
      const rs = await Promise.all(ps);
      for (let i = 0; i < n; i++) {
        const r = u32(rs[i]!);
        expect(r[0]).toBe(Math.imul(i + 1, 2654435761) >>> 0);
        expect(r[1]).toBe(((i * 7919) ^ 0xa5a5a5a5) >>> 0);
        expect(r[3]).toBe(i + 1 + i * 7919);
      }
      // Mixed: sends go to receive(), requests to their promise, whatever the order.
      await rk.send(new Uint32Array([10, 0]));
      const q = rk.request(new Uint32Array([20, 0]));
      await rk.send(new Uint32Array([30, 0]));
      expect(u32(rk.requestSync(new Uint32Array([40, 0])))[3]).toBe(40);
      expect(u32(await q)[3]).toBe(20);
      expect(u32(await rk.receive({ timeoutMs: 10000 }))[3]).toBe(10);
      expect(u32(await rk.receive({ timeoutMs: 10000 }))[3]).toBe(30);
      await expectGpuErrorAsync(() => rk.receive({ timeoutMs: 5 }), Status.LAUNCH_TIMEOUT);
      await rk.stop();
      expect((rk.state as BigUint64Array)[0]).toBe(BigInt((n * (n + 1)) / 2 + 100));
    }, 20000);
  }

  test("both modes give identical responses and state", async () => {
    const msgs = seqMessages(0, 5000, (i) => (i * 2654435761) >>> 16);
    const run = async (mode: KernelMode) => {
      using rk = seqKernel(mode, 256);
      expect(rk.mode).toBe(mode.isRing() ? "ring" : "batch");
      const half = msgs.subarray(0, 2500 * 8);
      const sending = rk.sendBatch(half); // more than both rings hold: accepted as responses are read
      const out: Uint8Array[] = [];
      let n = 0;
      while (n < 2500) {
        const r = await rk.receiveBatch(512, { timeoutMs: 10000 });
        out.push(r.slice());
        n += r.byteLength / 16;
      }
      await sending;
      for (let i = 2500; i < 5000; i++) out.push((await rk.request(msgs.subarray(i * 8, i * 8 + 8))).slice());
      await rk.stop();
      return { out: Buffer.concat(out), state: Buffer.from(rk.stateAs(Uint8Array)) };
    };
    const ring = await run(KernelMode.Ring);
    const batch = await run(KernelMode.Batch);
    expect(ring.out.byteLength).toBe(5000 * 16);
    expect(ring.out.equals(batch.out)).toBe(true);
    expect(ring.state.equals(batch.state)).toBe(true);
  }, 20000);

  test("bad messages and options throw GpuError and change nothing", async () => {
    using rk = seqKernel(KernelMode.Ring, 16);
    expectGpuError(() => rk.trySend(new Uint8Array(4)), Status.INVALID_VALUE, /8 bytes/);
    expectGpuError(() => rk.trySend(new Uint8Array(12)), Status.INVALID_VALUE);
    expectGpuError(() => rk.trySend("hello" as never), Status.INVALID_VALUE);
    expectGpuError(() => rk.request(new Uint32Array(3)), Status.INVALID_VALUE);
    expectGpuError(() => rk.sendBatch(new Uint8Array(20)), Status.INVALID_VALUE, /whole number/);
    expectGpuError(() => rk.sendBatch([new Uint8Array(8), new Uint8Array(9)]), Status.INVALID_VALUE);
    expectGpuError(() => rk.state, Status.ILLEGAL_STATE);
    expect(rk.inFlight).toBe(0);
    expect(u32(await rk.request(seqMessages(0, 1)))[0]).toBe(0);
    await rk.stop();
    expect(readState(rk).count).toBe(1);

    const base = { handler: SEQ_HANDLER, messageBytes: 8, capacity: 16 };
    expectGpuError(() => RingKernel.launch(dev, { ...base, messageBytes: 10 }), Status.INVALID_VALUE);
    expectGpuError(() => RingKernel.launch(dev, { ...base, capacity: 100 }), Status.INVALID_VALUE);
    expectGpuError(() => RingKernel.launch(dev, { ...base, responseBytes: 3 }), Status.INVALID_VALUE);
    expectGpuError(() => RingKernel.launch(dev, { ...base, mode: "turbo" as never }), Status.INVALID_VALUE, /unknown kernel mode/);
    expectGpuError(() => RingKernel.launch(dev, { ...base, handler: "void f(void) {}" }), Status.INVALID_VALUE, /BG_RING_HANDLER/);
    expectGpuError(() => RingKernel.launch(dev, { ...base, state: new Uint8Array(8), stateBytes: 16 }), Status.INVALID_VALUE);
    expectGpuError(() => RingKernel.launch(dev, { ...base, handler: { cuda: "x" } }), Status.INVALID_VALUE, /no cpu handler/);
  });

  test("a named handler function works through `entry`", async () => {
    const handler = `static void double_it(const void* m, void* r, void* s) { (void)s; ((uint32_t*)r)[0] = ((const uint32_t*)m)[0] * 2; }`;
    using rk = RingKernel.launch(dev, { handler, entry: "double_it", messageBytes: 4, capacity: 8 });
    expect(u32(rk.requestSync(new Uint32Array([21])))[0]).toBe(42);
    await rk.stop();
  });

  test("dispose while running aborts the kernel, waits for it, and rejects what is pending", async () => {
    const rk = seqKernel(KernelMode.Ring, 4);
    // Fill both rings so the kernel is blocked on a full outbound ring, then dispose.
    const sending = rk.sendBatch(seqMessages(0, 100));
    const waiting = rk.request(seqMessages(100, 1));
    rk.dispose();
    expect(rk.disposed).toBe(true);
    await expectGpuErrorAsync(() => sending, Status.INVALID_HANDLE);
    await expectGpuErrorAsync(() => waiting, Status.INVALID_HANDLE);
    expectGpuError(() => rk.trySend(seqMessages(0, 1)), Status.INVALID_HANDLE);
    rk.dispose(); // idempotent
    // The device is free again: a new ring kernel runs.
    using again = seqKernel(KernelMode.Ring, 4);
    expect(u32(await again.request(seqMessages(0, 1)))[2]).toBe(1);
    await again.stop();
  });
});

describe("device lifetime", () => {
  test("disposing a device stops its running ring kernels first instead of hanging", () => {
    const r = Bun.spawnSync(["bun", "run", join(import.meta.dir, "fixtures", "dispose_device_with_ring.ts")], {
      cwd: join(import.meta.dir, ".."),
      timeout: 30_000,
    });
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString()).toBe("answer 42\ndisposed: device true, ring true\n");
    expect(r.exitCode).toBe(0);
  }, 40_000);
});

describe("generated sources for other backends", () => {
  const nvcc = "/usr/local/cuda/bin/nvcc";
  const opts = { handler: SEQ_HANDLER, messageBytes: 8, responseBytes: 16, stateBytes: 24 };

  test.skipIf(!existsSync(nvcc))("the CUDA persistent kernel and batch kernel compile with nvcc --ptx", () => {
    const src = ringKernelSource("cuda", opts);
    // The same C handler as the CPU tests: the CUDA prelude provides the <stdint.h> names.
    const full = src;
    const dir = mkdtempSync(join(tmpdir(), "bungpu-ring-"));
    try {
      writeFileSync(join(dir, "ring.cu"), full);
      const r = Bun.spawnSync([nvcc, "--ptx", "-arch=sm_80", "-o", join(dir, "ring.ptx"), join(dir, "ring.cu")], { stdout: "pipe", stderr: "pipe" });
      if (r.exitCode !== 0) throw new Error(new TextDecoder().decode(r.stderr));
      const ptx = readFileSync(join(dir, "ring.ptx"), "utf8");
      expect(ptx).toContain(".entry bg_ring_persistent");
      expect(ptx).toContain(".entry bg_ring_batch");
      expect(ptx).toContain("membar.sys"); // system-scope fences around the mapped rings
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("Metal gets a relaunch-per-batch MSL kernel (not compilable here: no Metal)", () => {
    const src = ringKernelSource("metal", { ...opts, handler: { metal: "BG_RING_HANDLER(m, r, s) { r[0] = m[0]; }" } });
    expect(src).toContain("kernel void bg_ring_batch");
    expect(src).toContain("#include <metal_stdlib>");
    expect(src).not.toContain("bg_ring_persistent");
  });
});

void GpuError;
