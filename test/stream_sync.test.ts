// CUDA's synchronization contract, observed. The device's default stream is the legacy stream:
// its work waits for the prior work of every blocking stream, and blocking streams wait for its
// prior work; non-blocking streams are exempt. The synchronous Buffer methods (write, read,
// fill, copyTo) are default-stream operations that return with the data in place, so work queued
// afterwards on any stream, non-blocking ones included, sees it.
//
// Orders are made observable without timing: a `gate` kernel holds its stream until the test
// sets a word in mapped host memory (or, as a safety net, until a timeout, which it logs), and
// every kernel appends its tag to an order log with an atomic counter. "Has not run yet" is then
// certain (its stream is held), and "ran without waiting" is shown by work that completes while
// the stream it must not wait for is still held. One suite per backend present, unchanged: the
// CPU here, CUDA (a GPU or the driver simulator) where available.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { CaptureMode, Device, Program, Status, type Buffer, type HostBuffer, type Kernel, type Module, type Stream } from "../src";
import { expectGpuError } from "./helpers";

const cpuSource = `
#define _POSIX_C_SOURCE 200809L
#include "bungpu_cpu.h"
#include <sched.h>
#include <time.h>

static long long sync_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Holds its stream until *flag != 0 (then logs tag) or timeout_ms pass (then logs tag | 0x10000). */
BG_KERNEL(gate) {
  volatile unsigned* flag = (volatile unsigned*)(uintptr_t)BG_ARG(0, unsigned long long);
  unsigned* log = BG_ARG(1, unsigned*);
  unsigned tag = BG_ARG(2, unsigned);
  int timeout_ms = BG_ARG(3, int);
  BG_FOR_BLOCKS {
    long long t0 = sync_now_ns();
    unsigned r = tag | 0x10000u;
    for (;;) {
      if (*flag) { r = tag; break; }
      if (sync_now_ns() - t0 > (long long)timeout_ms * 1000000LL) break;
      sched_yield();
    }
    unsigned pos = __atomic_fetch_add(&log[0], 1u, __ATOMIC_ACQ_REL);
    log[1 + pos] = r;
  }
}

/* Appends tag to the order log. */
BG_KERNEL(stamp) {
  unsigned* log = BG_ARG(0, unsigned*);
  unsigned tag = BG_ARG(1, unsigned);
  BG_FOR_BLOCKS {
    unsigned pos = __atomic_fetch_add(&log[0], 1u, __ATOMIC_ACQ_REL);
    log[1 + pos] = tag;
  }
}

/* dst[i] = src[i] + add */
BG_KERNEL(copy_add) {
  unsigned* dst = BG_ARG(0, unsigned*);
  const unsigned* src = BG_ARG(1, const unsigned*);
  unsigned add = BG_ARG(2, unsigned);
  int n = BG_ARG(3, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) dst[i] = src[i] + add;
    }
  }
}
`;

const cudaSource = `
__device__ unsigned long long sync_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void gate(unsigned long long flag_addr, unsigned* log, unsigned tag, int timeout_ms) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  volatile unsigned* flag = (volatile unsigned*)flag_addr;
  unsigned long long t0 = sync_now_ns();
  unsigned r = tag | 0x10000u;
  for (;;) {
    if (*flag) { r = tag; break; }
    if (sync_now_ns() - t0 > (unsigned long long)timeout_ms * 1000000ull) break;
  }
  unsigned pos = atomicAdd(&log[0], 1u);
  log[1 + pos] = r;
}

extern "C" __global__ void stamp(unsigned* log, unsigned tag) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  unsigned pos = atomicAdd(&log[0], 1u);
  log[1 + pos] = tag;
}

extern "C" __global__ void copy_add(unsigned* dst, const unsigned* src, unsigned add, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] + add;
}
`;

const specs = Device.backends()
  .filter((b) => (b.backend === "cpu" || b.backend === "cuda") && b.available && b.devices > 0)
  .map((b) => (b.backend === "cpu" ? "cpu" : `${b.backend}:0`));

/** Released gates log their tag; a gate that timed out logs tag | TIMED_OUT. */
const TIMED_OUT = 0x10000;
/** Long enough never to fire when the rules hold; it only keeps a broken run from hanging. */
const SAFETY_MS = 10_000;
const TEST_MS = 60_000;

for (const spec of specs) {
  describe(`stream synchronization on ${spec}`, () => {
    let dev: Device;
    let mod: Module;
    let gateK: Kernel, stampK: Kernel, copyK: Kernel;
    let flags: HostBuffer; // one word per gate, in mapped host memory the kernels poll
    let flagWords: Uint32Array;
    let log: Buffer; // [count, tag, tag, ...]
    let nextFlag = 0;

    beforeAll(() => {
      dev = Device.open(spec);
      mod = Program.compile(dev, { cpu: cpuSource, cuda: cudaSource }, { name: "stream_sync" });
      gateK = mod.kernel("gate", ["i64", "buffer", "u32", "i32"]);
      stampK = mod.kernel("stamp", ["buffer", "u32"]);
      copyK = mod.kernel("copy_add", ["buffer", "buffer", "u32", "i32"]);
      flags = dev.allocHost(4096, { mapped: true });
      flagWords = flags.as(Uint32Array);
      log = dev.alloc(4 * 256);
    });
    afterAll(() => {
      flagWords?.fill(1); // nothing stays held, whatever failed
      dev?.synchronize();
      log?.dispose();
      flags?.dispose();
      mod?.dispose();
      dev?.dispose();
    });

    /** Hold `st` with a gate; returns its release. */
    const hold = (st: Stream, tag: number, timeoutMs = SAFETY_MS): (() => void) => {
      const i = nextFlag++ % 1024;
      flagWords[i] = 0;
      gateK.launch(st, { grid: 1, block: 1, args: [flags.deviceAddress + 4 * i, log, tag, timeoutMs] });
      return () => {
        flagWords[i] = 1;
      };
    };
    const stamp = (st: Stream, tag: number) => stampK.launch(st, { grid: 1, block: 1, args: [log, tag] });
    const resetLog = () => log.fill(0);
    const readLog = (): number[] => {
      const w = log.read(Uint32Array);
      return [...w.subarray(1, 1 + w[0]!)];
    };
    /** Resolves when `p` does, or fails the test after `ms` (a rule that made it wait). */
    const within = async (p: Promise<void>, ms: number, what: string) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms: it waited for a stream it must not wait for`)), ms);
      });
      try {
        await Promise.race([p, late]);
      } finally {
        clearTimeout(timer);
      }
    };
    /** A stream that is held stays unfinished for a while: proves work behind it has not run. */
    const stillHeld = async (st: Stream, ms = 30) => {
      await Bun.sleep(ms);
      return !st.query();
    };

    test("(a) default-stream work waits for the prior work of a blocking stream", async () => {
      resetLog();
      using b = dev.createStream();
      const release = hold(b, 1);
      try {
        stamp(dev.defaultStream, 2);
        using ev = dev.createEvent({ timing: false }).record(dev.defaultStream);
        expect(await stillHeld(dev.defaultStream)).toBe(true);
        expect(ev.query()).toBe(false); // an event on the default stream covers the blocking stream too
      } finally {
        release();
      }
      dev.defaultStream.synchronize();
      expect(b.query()).toBe(true);
      expect(readLog()).toEqual([1, 2]);
    }, TEST_MS);

    test("(b) blocking-stream work waits for the prior work of the default stream", async () => {
      resetLog();
      using b = dev.createStream();
      const release = hold(dev.defaultStream, 1);
      try {
        stamp(b, 2);
        expect(await stillHeld(b)).toBe(true);
      } finally {
        release();
      }
      b.synchronize();
      expect(readLog()).toEqual([1, 2]);
    }, TEST_MS);

    test("blocking streams do not wait for each other, only through the default stream", async () => {
      resetLog();
      using b1 = dev.createStream();
      using b2 = dev.createStream();
      const release = hold(b1, 1);
      try {
        stamp(b2, 2);
        await within(b2.done(), SAFETY_MS / 2, "b2");
        stamp(dev.defaultStream, 3); // waits for b1
        stamp(b2, 4); // waits for that
        expect(await stillHeld(b2)).toBe(true);
      } finally {
        release();
      }
      b2.synchronize();
      expect(readLog()).toEqual([2, 1, 3, 4]);
    }, TEST_MS);

    test("(c) a non-blocking stream overtakes a held default stream, and the other way round", async () => {
      resetLog();
      using nb = dev.createStream({ nonBlocking: true });
      using b = dev.createStream();
      let release = hold(dev.defaultStream, 1);
      try {
        stamp(nb, 2);
        await within(nb.done(), SAFETY_MS / 2, "the non-blocking stream");
        expect(dev.defaultStream.query()).toBe(false); // still held: nb did not wait for it
      } finally {
        release();
      }
      dev.defaultStream.synchronize();
      release = hold(nb, 3);
      try {
        stamp(dev.defaultStream, 4);
        stamp(b, 5); // behind the default stream, which does not wait for nb
        await within(b.done(), SAFETY_MS / 2, "the blocking stream");
        expect(nb.query()).toBe(false);
      } finally {
        release();
      }
      nb.synchronize();
      expect(readLog()).toEqual([2, 1, 4, 5, 3]);
    }, TEST_MS);

    test("synchronizing the default stream covers the blocking streams, not the non-blocking ones", () => {
      resetLog();
      using b = dev.createStream();
      using nb = dev.createStream({ nonBlocking: true });
      hold(b, 1, 300); // nobody releases it: the synchronize below returns once it timed out
      expect(dev.defaultStream.query()).toBe(false);
      dev.defaultStream.synchronize();
      expect(b.query()).toBe(true);
      expect(readLog()).toEqual([1 | TIMED_OUT]);
      const release = hold(nb, 2);
      try {
        expect(dev.defaultStream.query()).toBe(true);
        dev.defaultStream.synchronize();
        expect(nb.query()).toBe(false);
      } finally {
        release();
      }
      nb.synchronize();
      expect(readLog()).toEqual([1 | TIMED_OUT, 2]);
    }, TEST_MS);

    test("(d) synchronous read and write wait for work queued before them on a blocking stream", () => {
      resetLog();
      const n = 1024;
      using b = dev.createStream();
      using src = dev.alloc(n * 4).write(new Uint32Array(n).fill(7));
      using dst = dev.alloc(n * 4).fill(0);
      // Nobody releases this gate: the read below can only return once it times out (logged),
      // and then the copy behind it has run.
      hold(b, 1, 300);
      copyK.launch(b, { grid: n / 128, block: 128, args: [dst, src, 1, n] });
      expect(dst.read(Uint32Array).every((x) => x === 8)).toBe(true);
      expect(readLog()).toEqual([1 | TIMED_OUT]);
      // A write waits for a kernel still reading what it overwrites (write after read).
      resetLog();
      hold(b, 2, 300);
      copyK.launch(b, { grid: n / 128, block: 128, args: [dst, src, 0, n] });
      src.write(new Uint32Array(n).fill(100));
      expect(dst.read(Uint32Array).every((x) => x === 7)).toBe(true);
      expect(src.read(Uint32Array).every((x) => x === 100)).toBe(true);
      expect(readLog()).toEqual([2 | TIMED_OUT]);
    }, TEST_MS);

    test("synchronous methods do not wait for a non-blocking stream", async () => {
      resetLog();
      using nb = dev.createStream({ nonBlocking: true });
      // allocated (and freed) outside the hold: freeing device memory waits for all work on CUDA
      using buf = dev.alloc(64);
      using other = dev.alloc(64);
      const release = hold(nb, 1);
      try {
        buf.write(new Uint32Array(16).fill(3));
        buf.fill(9, { type: "u32", bytes: 8 });
        buf.copyTo(other);
        expect([...other.read(Uint32Array)]).toEqual([9, 9, ...new Array(14).fill(3)]);
        expect(nb.query()).toBe(false); // all of that ran while nb was held
      } finally {
        release();
      }
      nb.synchronize();
      expect(readLog()).toEqual([1]);
    }, TEST_MS);

    test("(e) write, fill and copyTo are in place for a non-blocking stream queued right after", async () => {
      const n = 1 << 20; // large, so a copy or memset still in flight would show
      using nb = dev.createStream({ nonBlocking: true });
      using a = dev.alloc(n * 4);
      using c = dev.alloc(n * 4);
      using out = dev.alloc(n * 4);
      const grid = n / 256;
      const check = async (want: number, what: string) => {
        copyK.launch(nb, { grid, block: 256, args: [out, c, 1, n] });
        await nb.done();
        const got = out.read(Uint32Array);
        const bad = got.findIndex((x) => x !== want + 1);
        if (bad >= 0) throw new Error(`${what}: element ${bad} is ${got[bad]! - 1}, want ${want}`);
      };
      c.fill(0x11, { type: "u32" });
      await check(0x11, "fill");
      a.fill(0x22, { type: "u32" });
      a.copyTo(c);
      await check(0x22, "copyTo");
      c.write(new Uint32Array(n).fill(0x33));
      await check(0x33, "write");
    }, TEST_MS);

    test("one program interleaving every kind of stream, copies and fills gives one order", async () => {
      resetLog();
      using b1 = dev.createStream();
      using b2 = dev.createStream();
      using nb = dev.createStream({ nonBlocking: true });
      using nb2 = dev.createStream({ nonBlocking: true });
      using data = dev.alloc(256 * 4).fill(0);
      using seen = dev.alloc(256 * 4);
      const r1 = hold(b1, 10); // G1
      const r2 = { release: () => {} };
      try {
        stamp(dev.defaultStream, 11); // waits for G1
        stamp(nb, 12); // free
        await within(nb.done(), SAFETY_MS / 2, "nb");
        r2.release = hold(nb, 13); // G2 holds nb
        stamp(nb, 14);
        stamp(b2, 15); // waits for 11, so for G1
        expect(await stillHeld(b2)).toBe(true);
        r1();
        await within(b2.done(), SAFETY_MS / 2, "b2"); // G1, 11, 15 done; nb still held by G2
        expect(nb.query()).toBe(false);
        data.fill(5, { type: "u32" }); // does not wait for nb
        copyK.launch(nb2, { grid: 2, block: 128, args: [seen, data, 0, 256] }); // sees the fill
        await within(nb2.done(), SAFETY_MS / 2, "nb2");
        expect(nb.query()).toBe(false);
        stamp(b1, 16); // after G1 and after 11 and 15 (default stream), not after G2
        await within(b1.done(), SAFETY_MS / 2, "b1");
      } finally {
        r1();
        r2.release();
      }
      nb.synchronize();
      dev.synchronize();
      expect(seen.read(Uint32Array).every((x) => x === 5)).toBe(true);
      expect(readLog()).toEqual([12, 10, 11, 15, 16, 13, 14]);
    }, TEST_MS);

    test("the default stream is unusable while a blocking stream captures; a non-blocking capture is untouched", () => {
      using b = dev.createStream();
      using nb = dev.createStream({ nonBlocking: true });
      using buf = dev.alloc(64).fill(0);
      for (const mode of CaptureMode.values()) {
        b.beginCapture(mode);
        stamp(b, 1);
        expectGpuError(() => stamp(dev.defaultStream, 2), Status.STREAM_CAPTURE_IMPLICIT);
        expect(b.captureStatus()).toBe("Invalidated");
        expectGpuError(() => b.endCapture(), Status.STREAM_CAPTURE_INVALIDATED);
      }
      // a synchronous read in a Relaxed capture is an implicit dependency too
      b.beginCapture(CaptureMode.Relaxed);
      expectGpuError(() => buf.read(), Status.STREAM_CAPTURE_IMPLICIT);
      expectGpuError(() => b.endCapture(), Status.STREAM_CAPTURE_INVALIDATED);
      resetLog();
      nb.beginCapture(CaptureMode.Relaxed);
      stamp(nb, 3);
      stamp(dev.defaultStream, 4);
      expect(nb.captureStatus()).toBe("Active");
      using graph = nb.endCapture();
      using exec = graph.instantiate();
      exec.launch(b); // a graph launched on a blocking stream follows its rules
      b.synchronize();
      expect(readLog()).toEqual([4, 3]);
    }, TEST_MS);
  });
}
