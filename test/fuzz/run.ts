// The fuzzer's driver: one batch of random public calls, valid and invalid, with a model of what
// every live buffer (and pinned host buffer, and ring) must hold. Run by test/fuzz.test.ts (and
// test/fuzz/harness.ts) in a subprocess, with BUNGPU_CPU_DEVICES=3 (cpu:2 only for communicators):
//
//   bun test/fuzz/run.ts --seed S --calls N [--exclude a,b] [--record FILE] [--replay FILE] [--print]
//
// A step is [handler index, six random words]; a handler reads the current state and turns the
// words into one or a few public calls, so a recorded list of steps replays the same way with any
// steps removed (the shrinker relies on that). Every call is made through `call`, which knows what
// it expects: "ok", "err" (a GpuError), or "any" (legal or not depending on things the model does
// not track, e.g. a capture mode's rules). A throw that is not a GpuError, an accepted invalid call,
// or a byte that differs from the model is a failure: the driver prints one JSON line
// {ok:false, ...} and exits 1. A crash or a hang is seen by the parent. The last line printed on
// success is {ok:true, calls, ...}.
//
// The model: each allocation has a JS copy of its bytes. Synchronous calls update it at once;
// stream work updates it when queued (streams are joined with synchronize() before one stream
// touches bytes another stream may still be writing, so there are no races to model); captured
// work, encoders and schedules keep their effects as a list applied when the graph/encoder/plan
// runs. The model is compared with the device after every rejected call (deferred to the end of
// a capture, where a read would be a capture-illegal call itself) and every CHECK_EVERY calls.
import {
  Buffer,
  CaptureMode,
  CommandEncoder,
  Device,
  Event,
  ExecMode,
  GpuError,
  Graph,
  GraphExec,
  HostBuffer,
  Module,
  Program,
  Ring,
  Schedule,
  Step,
  Stream,
  Tensor,
  type Executable,
  type Kernel,
} from "../../src";
import { appendFileSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { installSurfaces } from "./surfaces";

// ---- arguments --------------------------------------------------------------------------------
const argv = process.argv.slice(2);
const arg = (name: string, def?: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : def;
};
const SEED = Number(arg("seed", "1"));
const CALLS = Number(arg("calls", "10000"));
const EXCLUDE = new Set((arg("exclude", "") ?? "").split(",").filter(Boolean));
const RECORD = arg("record");
const RECORD_SYNC = argv.includes("--record-sync");
const REPLAY = arg("replay");
const PRINT = argv.includes("--print");
const CHECK_EVERY = Number(arg("check-every", "200"));

// ---- random -----------------------------------------------------------------------------------
let rs = (SEED >>> 0) ^ 0x9e3779b9 || 1;
const rnd = () => {
  rs ^= rs << 13;
  rs >>>= 0;
  rs ^= rs >>> 17;
  rs ^= rs << 5;
  rs >>>= 0;
  return rs;
};

// ---- failures and the call log ----------------------------------------------------------------
class Failure extends Error {
  constructor(readonly kind: string, message: string) {
    super(message);
  }
}
let stepNo = 0;
let nCalls = 0, nRejected = 0, nChecks = 0;
// printed as they happen (synchronously), so a crash still shows the calls that led to it
const L = (f: () => string) => {
  if (PRINT) writeSync(1, f() + "\n");
};

type Expect = "ok" | "err" | "any";
type Res<T> = { ok: true; v: T } | { ok: false; e: GpuError };
function call<T>(src: () => string, expect: Expect, fn: () => T): Res<T> {
  nCalls++;
  L(expect === "err" ? () => `expectGpuError(() => ${src()});` : expect === "any" ? () => `try { ${src()}; } catch {}` : src);
  let v: T;
  try {
    v = fn();
  } catch (e) {
    if (e instanceof Failure) throw e; // (a check inside fn, e.g. in a Communicator.group body)
    if (!(e instanceof GpuError)) {
      throw new Failure("non-GpuError throw", `${src()} threw ${(e as Error)?.constructor?.name}: ${(e as Error)?.message ?? e}`);
    }
    if (expect === "ok") throw new Failure("valid call rejected", `${src()} threw ${e.message}`);
    nRejected++;
    afterReject();
    return { ok: false, e };
  }
  if (expect === "err") throw new Failure("invalid call accepted", `${src()} did not throw`);
  return { ok: true, v };
}

// ---- state ------------------------------------------------------------------------------------
// BUNGPU_CPU_DEVICES=3: two CPU devices for every handler (wrong-device calls); surfaces.ts opens
// the third for a third rank of communicators.
// FUZZ_BACKEND=cuda (test/fuzz/harness.ts sets it with --backend cuda): cuda:0 and cuda:1 instead,
// on the driver simulator (CUDASIM_DEVICES=2) or a GPU, with fz_add written in CUDA C (NVRTC) with
// the same semantics; surfaces.ts leaves out what is the CPU backend's only (it says why).
const BACKEND = process.env.FUZZ_BACKEND === "cuda" ? "cuda" : "cpu";
const devs: Device[] = [Device.open(`${BACKEND}:0`), Device.open(`${BACKEND}:1`)];
const KSRC = BACKEND === "cuda"
  ? `extern "C" __global__ void fz_add(unsigned* p, unsigned v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}
`
  : `#include "bungpu_cpu.h"
BG_KERNEL(fz_add) {
  unsigned* p = BG_ARG(0, unsigned*);
  unsigned v = BG_ARG(1, unsigned);
  int n = BG_ARG(2, int);
  BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += v; } }
}
`;
const SIG = ["buffer", "u32", "i32"] as const;
interface Mod { mod: Module; k: Kernel; dev: number; live: boolean }
const mods: (Mod | null)[] = [null, null];
const deadKernels: Kernel[] = [];
function compile(d: number): void {
  const mod = Program.compile(devs[d]!, KSRC, { name: "fuzz" });
  mods[d] = { mod, k: mod.kernel("fz_add", [...SIG]), dev: d, live: true };
}
compile(0);
compile(1);

/** One allocation's model; views point into their root's. */
interface Alloc { model: Uint8Array; owner: number | null; live: boolean; dev: number; unknown: boolean }
interface Buf { b: Buffer; a: Alloc; off: number; len: number; dev: number; view: boolean; name: string }
const NB = 8;
const bufs: (Buf | null)[] = Array(NB).fill(null);
const allocs = new Set<Alloc>();
let nameNo = 0;
const SIZES = [4, 16, 64, 256, 1000, 1024];

interface SRec { s: Stream; dev: number; idx: number; nonBlocking: boolean; isDefault: boolean; cap: Cap | null; name: string }
interface Eff { apply(): void; bufs: Buf[]; kernelArgs?: { buf: Buf; v: number; n: number; cover?: number }; mod?: Mod }
/** Work whose buffers or module were disposed after it was recorded. */
const goneIn = (effs: Eff[]) => effs.some((e) => e.bufs.some((b) => !b.a.live) || (e.mod && !e.mod.live));
interface Cap { mode: CaptureMode; effs: Eff[]; maybeInvalid: boolean; dev: number }
const streams: (SRec | null)[] = Array(5).fill(null);
interface HRec { h: HostBuffer; model: Uint8Array; owner: number | null; name: string }
const hosts: (HRec | null)[] = [null, null];
const events: ({ e: Event; dev: number; captured: boolean; name: string } | null)[] = Array(4).fill(null);
const graphs: ({ g: Graph; effs: Eff[]; name: string; dev: number } | null)[] = [null, null];
const execs: ({ x: GraphExec; effs: Eff[]; name: string; dev: number } | null)[] = [null, null];
const encs: ({ enc: CommandEncoder; effs: Eff[]; name: string } | null)[] = [null];
const exes: ({ x: Executable; effs: Eff[]; eager: boolean; ran: boolean; name: string } | null)[] = [null, null];
const rings: ({ r: Ring; q: Uint8Array[]; mb: number; cap: number; name: string } | null)[] = [null];
const MODES = [CaptureMode.Global, CaptureMode.ThreadLocal, CaptureMode.Relaxed];

function newStream(i: number): void {
  // 0: dev0's default stream; 1, 2: blocking; 3: non-blocking; 4: a stream of dev1
  const dev = i === 4 ? 1 : 0;
  const name = `s${i}`;
  if (i === 0) {
    streams[0] = { s: devs[0]!.defaultStream, dev: 0, idx: 0, nonBlocking: false, isDefault: true, cap: null, name: "dev0.defaultStream" };
    return;
  }
  const nonBlocking = i === 3;
  const r = call(() => `const ${name} = dev${dev}.createStream(${nonBlocking ? "{ nonBlocking: true }" : ""})`, "any", () => devs[dev]!.createStream({ nonBlocking }));
  streams[i] = r.ok ? { s: r.v, dev, idx: i, nonBlocking, isDefault: false, cap: null, name } : null;
}
for (let i = 0; i < 5; i++) newStream(i);

const anyCapture = () => streams.some((s) => s?.cap);
/** Run after the driver synchronized device d (surfaces.ts models what a synchronize releases). */
const devSyncHooks: ((d: number) => void)[] = [];
let pendingCheck = false;

// ---- ownership: which stream may still be writing an allocation's bytes -----------------------
function syncStream(i: number): void {
  const s = streams[i];
  if (!s) return;
  if (s.cap) return; // a capturing stream runs nothing; it owns nothing
  const r = call(() => `${s.name}.synchronize()`, anyCapture() ? "any" : "ok", () => s.s.synchronize());
  if (r.ok) {
    clearOwner((o) => o === i);
    hostFnsDone(i);
  }
}
function clearOwner(pred: (o: number) => boolean): void {
  for (const a of allocs) if (a.owner !== null && pred(a.owner)) a.owner = null;
  for (const h of hosts) if (h && h.owner !== null && pred(h.owner)) h.owner = null;
}
/** Before stream `si` queues work on these allocations: join with any other stream writing them. */
// Every other join is made on the device instead of the host: stream si waits for an event
// recorded on the owner, so si's next work is ordered after the owner's (and, transitively, a
// later synchronize of si covers it).
const joinEvents: (Event | null)[] = [null, null];
let joinNo = 0;
function joinFor(si: number, as: (Alloc | HRec)[]): void {
  for (const a of as) {
    const o = a.owner;
    if (o === null || o === si) continue;
    const S = streams[si], T = streams[o];
    if (S && T && !S.cap && !T.cap && S.dev === T.dev && joinNo++ % 2 === 0) {
      const d = S.dev;
      if (!joinEvents[d] || joinEvents[d]!.disposed) {
        const r = call(() => `const join${d} = dev${d}.createEvent()`, "any", () => devs[d]!.createEvent());
        joinEvents[d] = r.ok ? r.v : null;
      }
      const ev = joinEvents[d];
      if (ev) {
        const r1 = call(() => `join${d}.record(${T.name})`, "any", () => ev.record(T.s));
        const r2 = r1.ok && call(() => `${S.name}.wait(join${d})`, "any", () => S.s.wait(ev));
        if (r2 && r2.ok) {
          // everything T owned is now ordered before si's next work: si owns it
          for (const b of allocs) if (b.owner === o) b.owner = si;
          for (const h of hosts) if (h && h.owner === o) h.owner = si;
          continue;
        }
      }
    }
    syncStream(o);
  }
}
/** Before a synchronous (legacy default stream) call on these: non-blocking owners are synchronized. */
function joinSync(as: (Alloc | HRec)[]): boolean {
  for (const a of as) if (a.owner !== null && streams[a.owner]?.nonBlocking) syncStream(a.owner);
  return as.every((a) => a.owner === null || !streams[a.owner]?.nonBlocking);
}
/** After a synchronous call: the default stream and blocking streams are done. */
function afterSync(dev: number): void {
  clearOwner((o) => !!streams[o] && !streams[o]!.nonBlocking && streams[o]!.dev === dev);
}

// ---- the check --------------------------------------------------------------------------------
function afterReject(): void {
  if (inCheck) return;
  check("after a rejected call");
}
let inCheck = false;
function check(why: string): void {
  if (anyCapture()) {
    pendingCheck = true;
    return;
  }
  pendingCheck = false;
  inCheck = true;
  try {
    nChecks++;
    for (let d = 0; d < 2; d++) {
      const r = call(() => `dev${d}.synchronize()`, "any", () => devs[d]!.synchronize());
      if (!r.ok) return; // (a sticky or capture error: nothing to compare against)
      for (const f of devSyncHooks) f(d);
      for (let i = 0; i < 5; i++) if (streams[i]?.dev === d) hostFnsDone(i);
    }
    clearOwner(() => true);
    for (const b of bufs) {
      if (!b || !b.a.live || b.view) continue;
      const got = call(() => `${b.name}.read()`, "ok", () => b.b.read() as Uint8Array);
      if (!got.ok) continue;
      if (b.a.unknown) {
        b.a.model.set(got.v);
        b.a.unknown = false;
        continue;
      }
      const m = b.a.model;
      for (let i = 0; i < m.length; i++)
        if (got.v[i] !== m[i])
          throw new Failure("corrupted byte", `${why}: ${b.name} byte ${i} is ${got.v[i]}, the model says ${m[i]}`);
    }
    for (const h of hosts) {
      if (!h) continue;
      const got = h.h.bytes;
      for (let i = 0; i < h.model.length; i++)
        if (got[i] !== h.model[i])
          throw new Failure("corrupted byte", `${why}: host buffer ${h.name} byte ${i} is ${got[i]}, the model says ${h.model[i]}`);
    }
  } finally {
    inCheck = false;
  }
}

// ---- helpers ----------------------------------------------------------------------------------
const pick = <T>(xs: readonly T[], w: number): T => xs[w % xs.length]!;
function liveBuf(w: number, dev = -1): Buf | null {
  for (let k = 0; k < NB; k++) {
    const b = bufs[(w + k) % NB];
    if (b && (dev < 0 || b.dev === dev)) return b;
  }
  return null;
}
const u32add = (m: Uint8Array, v: number, n: number) => {
  const dv = new DataView(m.buffer, m.byteOffset, m.byteLength);
  for (let i = 0; i < n; i++) dv.setUint32(i * 4, (dv.getUint32(i * 4, true) + v) >>> 0, true);
};
const modelOf = (b: Buf) => b.a.model.subarray(b.off, b.off + b.len);
const ok = (b: Buf | null) => !!b && b.a.live;
function fillBytes(m: Uint8Array, value: number, size: number): void {
  const pat = new Uint8Array(4);
  new DataView(pat.buffer).setUint32(0, value >>> 0, true);
  for (let i = 0; i < m.length; i++) m[i] = pat[i % size]!;
}
function dataFor(n: number, w: number): Uint8Array {
  const d = new Uint8Array(n);
  let x = w | 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    d[i] = x & 0xff;
  }
  return d;
}
const dataSrc = (n: number, w: number) => `data(${n}, ${w})`;

/** An effect of queued work, applied to the model when that work is queued (or replayed). */
function effCopy(dst: Buf, dOff: number, src: Buf, sOff: number, n: number): Eff {
  return {
    bufs: [dst, src],
    apply: () => {
      modelOf(dst).set(modelOf(src).slice(sOff, sOff + n), dOff);
      if (src.a.unknown && n > 0) dst.a.unknown = true; // (a new allocation's bytes, not yet learned)
    },
  };
}
function effFill(dst: Buf, off: number, n: number, value: number, size: number): Eff {
  return { bufs: [dst], apply: () => fillBytes(modelOf(dst).subarray(off, off + n), value, size) };
}
/** fz_add over n elements, by a launch of `cover` threads (grid x block): min(n, cover) change. */
function effKernel(buf: Buf, v: number, n: number, mod?: Mod, cover = Infinity): Eff {
  const e: Eff = {
    mod,
    bufs: [buf],
    kernelArgs: { buf, v, n, cover },
    apply: () => u32add(modelOf(e.kernelArgs!.buf), e.kernelArgs!.v, Math.min(e.kernelArgs!.n, e.kernelArgs!.cover!)),
  };
  return e;
}
function effUpload(dst: Buf, dOff: number, h: HRec, n: number): Eff {
  return { bufs: [dst], apply: () => modelOf(dst).set(h.model.slice(0, n), dOff) };
}
/** Queue effects on stream si: join first, then apply now (or record them in its capture). */
/** Join before stream si queues work on these; false where a join was impossible (a wait that
 * a capture makes illegal): then the caller skips the call rather than race. */
function prepareQueued(si: number, bs: Buf[], hs: HRec[] = []): boolean {
  if (streams[si]?.cap) return true;
  const as = [...bs.map((b) => b.a), ...hs];
  joinFor(si, as);
  return as.every((a) => a.owner === null || a.owner === si);
}
function applyQueued(si: number, effs: Eff[], hs: HRec[] = []): void {
  const s = streams[si]!;
  if (s.cap) {
    s.cap.effs.push(...effs);
    return;
  }
  for (const e of effs) {
    e.apply();
    for (const b of e.bufs) b.a.owner = si;
  }
  for (const h of hs) h.owner = si;
}

/** A kernel launch's arguments: valid, or one of several kinds of invalid. */
function launchArgs(w: number[], dev: number): { args: unknown[]; grid: number; block: number; valid: boolean; buf: Buf | null; v: number; n: number; src: string } {
  const buf = liveBuf(w[0]!, dev);
  const block = pick([1, 32, 64, 128], w[1]!);
  const v = w[2]! >>> 0;
  const n = buf ? (w[3]! % (Math.floor(buf.len / 4) + 1)) : 0;
  const grid = Math.max(1, Math.ceil(n / block));
  const bad = w[4]! % 8;
  const bn = buf?.name ?? "null";
  if (!buf || !buf.a.live) return { args: [buf?.b ?? null, v, n], grid, block, valid: false, buf, v, n, src: `[${bn}, ${v}, ${n}]` };
  switch (bad) {
    case 0: return { args: [buf.b, v], grid, block, valid: false, buf, v, n, src: `[${bn}, ${v}]` };
    case 1: return { args: [buf.b, "x", n], grid, block, valid: false, buf, v, n, src: `[${bn}, "x", ${n}]` };
    case 2: return { args: [buf.b, v, n], grid, block: 2048, valid: false, buf, v, n, src: `[${bn}, ${v}, ${n}] /* block 2048 */` };
    case 3: {
      const other = liveBuf(w[5]!, 1 - dev);
      if (other) return { args: [other.b, v, n], grid, block, valid: false, buf, v, n, src: `[${other.name} /* other device */, ${v}, ${n}]` };
      return { args: [null, v, n], grid, block, valid: false, buf, v, n, src: `[null, ${v}, ${n}]` };
    }
    default: return { args: [buf.b, v, n], grid, block, valid: true, buf, v, n, src: `[${bn}, ${v}, ${n}]` };
  }
}

// ---- handlers ---------------------------------------------------------------------------------
interface H { name: string; cat: string; weight: number; run(w: number[]): void }
const handlers: H[] = [];
const h = (name: string, cat: string, weight: number, run: (w: number[]) => void) => handlers.push({ name, cat, weight, run });

h("alloc", "buffer", 4, (w) => {
  const i = w[0]! % NB;
  if (bufs[i]?.a.live && !bufs[i]!.view) {
    // replace: dispose the old one first
    const o = bufs[i]!;
    call(() => `${o.name}.dispose()`, anyCapture() ? "any" : "ok", () => o.b.dispose());
    if (o.b.disposed) o.a.live = false;
  }
  const dev = w[1]! % 5 === 0 ? 1 : 0;
  const bad = w[2]! % 10 === 0;
  const size = bad ? pick([-1, 1.5, Number.NaN, 2 ** 60], w[3]!) : pick(SIZES, w[3]!);
  const name = `b${nameNo++}`;
  const r = call(() => `const ${name} = dev${dev}.alloc(${size})`, bad ? "err" : anyCapture() ? "any" : "ok", () => devs[dev]!.alloc(size));
  if (!r.ok) {
    bufs[i] = null;
    return;
  }
  // contents of a new allocation are unspecified: learn them at the next check
  const a: Alloc = { model: new Uint8Array(size), owner: null, live: true, dev, unknown: true };
  allocs.add(a);
  bufs[i] = { b: r.v, a, off: 0, len: size, dev, view: false, name };
});

h("view", "buffer", 2, (w) => {
  const b = liveBuf(w[0]!);
  if (!b) return;
  const off = w[1]! % (b.len + 2);
  const len = w[2]! % (b.len + 2);
  const valid = b.a.live && off + len <= b.len;
  const name = `v${nameNo++}`;
  const r = call(() => `const ${name} = ${b.name}.view(${off}, ${len})`, valid ? "ok" : "err", () => b.b.view(off, len));
  if (r.ok) bufs[w[3]! % NB] = { b: r.v, a: b.a, off: b.off + off, len, dev: b.dev, view: true, name };
});

h("dispose", "buffer", 3, (w) => {
  const b = liveBuf(w[0]!);
  if (!b) return;
  call(() => `${b.name}.dispose()`, anyCapture() ? "any" : "ok", () => b.b.dispose());
  if (!b.view && b.b.disposed) {
    b.a.live = false;
    allocs.delete(b.a);
  }
  if (b.b.disposed) bufs[bufs.indexOf(b)] = null;
  // a disposed buffer stays in reach of later invalid calls through this handler's twin:
  if (b.b.disposed && w[1]! % 2) bufs[bufs.indexOf(null)] = b;
});

h("write", "buffer", 8, (w) => {
  const b = liveBuf(w[0]!);
  if (!b) return;
  const off = w[1]! % (b.len + 1);
  const n = w[2]! % (b.len - off + 2);
  const valid = b.a.live && off + n <= b.len;
  const data = dataFor(n, w[3]!);
  if (!joinSync([b.a])) return;
  const r = call(() => `${b.name}.write(${dataSrc(n, w[3]!)}, { offset: ${off} })`, valid ? (anyCapture() ? "any" : "ok") : "err", () => b.b.write(data, { offset: off }));
  if (r.ok) {
    modelOf(b).set(data, off);
    if (n > 0) afterSync(b.dev); // (an empty copy makes no call, so it waits for nothing)
  }
});

h("read", "buffer", 4, (w) => {
  const b = liveBuf(w[0]!);
  if (!b) return;
  const off = w[1]! % (b.len + 2);
  const valid = b.a.live && off <= b.len;
  if (!joinSync([b.a])) return;
  const r = call(() => `${b.name}.read(Uint8Array, { offset: ${off} })`, valid ? (anyCapture() ? "any" : "ok") : "err", () => b.b.read(Uint8Array, { offset: off }));
  if (r.ok) {
    if (off < b.len) afterSync(b.dev);
    const m = modelOf(b).subarray(off);
    if (!b.a.unknown)
      for (let i = 0; i < m.length; i++)
        if (r.v[i] !== m[i]) throw new Failure("corrupted byte", `${b.name}.read: byte ${off + i} is ${r.v[i]}, the model says ${m[i]}`);
  }
});

h("copyTo", "buffer", 6, (w) => {
  const s = liveBuf(w[0]!), d = liveBuf(w[1]!);
  if (!s || !d) return;
  const so = w[2]! % (s.len + 1), dO = w[3]! % (d.len + 1);
  const n = w[4]! % (Math.min(s.len - so, d.len - dO) + 2);
  const valid = s.a.live && d.a.live && s.dev === d.dev && so + n <= s.len && dO + n <= d.len;
  if (!joinSync([s.a, d.a])) return;
  const r = call(() => `${s.name}.copyTo(${d.name}, { srcOffset: ${so}, dstOffset: ${dO}, bytes: ${n} })`, valid ? (anyCapture() ? "any" : "ok") : "err",
    () => s.b.copyTo(d.b, { srcOffset: so, dstOffset: dO, bytes: n }));
  if (r.ok) {
    modelOf(d).set(modelOf(s).slice(so, so + n), dO);
    if (s.a.unknown) d.a.unknown = true;
    if (n > 0) afterSync(s.dev);
  }
});

h("fill", "buffer", 5, (w) => {
  const b = liveBuf(w[0]!);
  if (!b) return;
  const type = pick(["u8", "u16", "u32", "f32"] as const, w[1]!);
  const size = type === "u8" ? 1 : type === "u16" ? 2 : 4;
  const off = w[2]! % (b.len + 1);
  const n = w[3]! % (b.len - off + 2);
  let value = w[4]! % 7 === 0 ? -1 : w[4]! & (size === 1 ? 0xff : size === 2 ? 0xffff : 0xffffff);
  if (type === "f32") value = (w[4]! % 1000) / 8;
  const valid = b.a.live && off + n <= b.len && n % size === 0 && (b.off + off) % size === 0 && value >= 0;
  if (!joinSync([b.a])) return;
  const r = call(() => `${b.name}.fill(${value}, { type: "${type}", offset: ${off}, bytes: ${n} })`, valid ? (anyCapture() ? "any" : "ok") : "any",
    () => b.b.fill(value, { type, offset: off, bytes: n }));
  if (r.ok) {
    if (!valid) throw new Failure("invalid call accepted", `${b.name}.fill(${value}, ${type}, ${off}, ${n}) did not throw`);
    const bits = type === "f32" ? new Uint32Array(new Float32Array([value]).buffer)[0]! : value;
    fillBytes(modelOf(b).subarray(off, off + n), bits, size);
    if (n > 0) afterSync(b.dev);
  }
});

// -- streams -------------------------------------------------------------------------------------
const streamOf = (w: number) => streams[w % 5];
h("stream.copy", "stream", 6, (w) => {
  const si = w[5]! % 5, st = streams[si];
  if (!st) return;
  const s = liveBuf(w[0]!, w[6]! % 6 === 0 ? -1 : st.dev), d = liveBuf(w[1]!, w[6]! % 7 === 0 ? -1 : st.dev);
  if (!s || !d) return;
  const so = w[2]! % (s.len + 1), dO = w[3]! % (d.len + 1);
  const n = w[4]! % (Math.min(s.len - so, d.len - dO) + 2);
  const valid = s.a.live && d.a.live && s.dev === st.dev && d.dev === st.dev && so + n <= s.len && dO + n <= d.len;
  if (valid && !prepareQueued(si, [s, d])) return;
  const r = call(() => `${st.name}.copy(${d.name}, ${s.name}, { srcOffset: ${so}, dstOffset: ${dO}, bytes: ${n} })`, valid ? (st.cap || (st.isDefault && anyCapture()) ? "any" : "ok") : "err",
    () => st.s.copy(d.b, s.b, { srcOffset: so, dstOffset: dO, bytes: n }));
  if (r.ok) {
    if (s.a.unknown && !st.cap) d.a.unknown = true;
    applyQueued(si, [effCopy(d, dO, s, so, n)]);
  }
});

h("stream.fill", "stream", 5, (w) => {
  const si = w[5]! % 5, st = streams[si];
  if (!st) return;
  const b = liveBuf(w[0]!, w[6]! % 6 === 0 ? -1 : st.dev);
  if (!b) return;
  const type = pick(["u8", "u16", "u32"] as const, w[1]!);
  const size = type === "u8" ? 1 : type === "u16" ? 2 : 4;
  const off = (w[2]! % (b.len + 1)) & ~(w[3]! % 3 === 0 ? 0 : size - 1);
  const n = (w[3]! % (b.len - off + 2)) & ~(w[4]! % 3 === 0 ? 0 : size - 1);
  const value = w[4]! & (size === 1 ? 0xff : size === 2 ? 0xffff : 0xffffff);
  const valid = b.a.live && b.dev === st.dev && off + n <= b.len && n % size === 0 && (b.off + off) % size === 0;
  if (valid && !prepareQueued(si, [b])) return;
  const r = call(() => `${st.name}.fill(${b.name}, ${value}, { type: "${type}", offset: ${off}, bytes: ${n} })`, valid ? (st.cap || (st.isDefault && anyCapture()) ? "any" : "ok") : "err",
    () => st.s.fill(b.b, value, { type, offset: off, bytes: n }));
  if (r.ok) applyQueued(si, [effFill(b, off, n, value, size)]);
});

h("launch", "kernel", 8, (w) => {
  const si = w[6]! % 5, st = streams[si];
  if (!st) return;
  const md = mods[w[5]! % 7 === 0 ? 1 - st.dev : st.dev];
  const dead = w[5]! % 11 === 0 && deadKernels.length > 0;
  const k = dead ? deadKernels[w[5]! % deadKernels.length]! : md?.k;
  if (!k) return;
  const la = launchArgs(w, st.dev);
  const valid = la.valid && !dead && md!.live && md!.dev === st.dev && la.buf!.dev === st.dev;
  if (valid && !prepareQueued(si, [la.buf!])) return;
  const r = call(() => `${dead ? "deadKernel" : `k${md!.dev}`}.launch(${st.name}, { grid: ${la.grid}, block: ${la.block}, args: ${la.src} })`, valid ? (st.cap || (st.isDefault && anyCapture()) ? "any" : "ok") : "err",
    () => k.launch(st.s, { grid: la.grid, block: la.block, args: la.args as never }));
  if (r.ok) applyQueued(si, [effKernel(la.buf!, la.v, la.n, md!, la.grid * la.block)]);
});

h("recompile", "kernel", 0.3, (w) => {
  const d = w[0]! % 2;
  const m = mods[d];
  if (m && m.live) {
    call(() => `mod${d}.dispose()`, anyCapture() ? "any" : "ok", () => m.mod.dispose());
    if (m.mod.disposed) {
      m.live = false;
      deadKernels.push(m.k);
      if (deadKernels.length > 4) deadKernels.shift();
    } else return;
  }
  if (anyCapture()) return;
  call(() => `mod${d} = Program.compile(dev${d}, src); k${d} = mod${d}.kernel("fz_add", ["buffer", "u32", "i32"])`, "ok", () => compile(d));
});

h("stream.sync", "stream", 3, (w) => {
  const si = w[0]! % 5, st = streams[si];
  if (!st) return;
  const r = call(() => `${st.name}.synchronize()`, st.cap || anyCapture() ? "any" : "ok", () => st.s.synchronize());
  if (r.ok) {
    clearOwner((o) => o === si);
    hostFnsDone(si);
    if (st.isDefault) afterSync(st.dev);
  }
});

h("stream.query", "stream", 1, (w) => {
  const st = streamOf(w[0]!);
  if (st) call(() => `${st.name}.query()`, st.cap || anyCapture() ? "any" : "ok", () => st.s.query());
});

h("stream.recreate", "stream", 0.5, (w) => {
  const si = 1 + (w[0]! % 4), st = streams[si];
  if (st) {
    if (st.cap) return;
    syncStream(si);
    call(() => `${st.name}.dispose()`, anyCapture() ? "any" : "ok", () => st.s.dispose());
    if (!st.s.disposed) return;
    // a disposed stream: every call on it is a GpuError
    const k = mods[st.dev]?.k, b = liveBuf(w[1]!, st.dev);
    call(() => `${st.name}.synchronize()`, "err", () => st.s.synchronize());
    if (b) call(() => `${st.name}.fill(${b.name}, 1, { type: "u8" })`, "err", () => st.s.fill(b.b, 1, { type: "u8" }));
    if (k && b && b.a.live) call(() => `k.launch(${st.name} /* disposed */, ...)`, "err", () => k.launch(st.s, { grid: 1, block: 1, args: [b.b, 1, 0] }));
    streams[si] = null;
    pendingFns[si] = [];
  }
  newStream(si);
});

// -- host functions ---------------------------------------------------------------------------------
// Each adds its number to `ran`; a synchronize of its stream must find it run.
const ran = new Set<number>();
const pendingFns: number[][] = [[], [], [], [], []];
let fnNo = 0;
h("hostFn", "hostfn", 1.5, (w) => {
  const si = w[0]! % 5, st = streams[si];
  if (!st) return;
  const id = fnNo++;
  const r = call(() => `${st.name}.hostFn(() => ran.add(${id}))`, st.cap ? "err" : st.isDefault && anyCapture() ? "any" : "ok", () => st.s.hostFn(() => void ran.add(id)));
  if (r.ok) pendingFns[si]!.push(id);
});
function hostFnsDone(si: number): void {
  for (const id of pendingFns[si]!) if (!ran.has(id)) throw new Failure("host function lost", `${streams[si]?.name ?? `stream ${si}`} synchronized but its host function ${id} had not run`);
  pendingFns[si] = [];
}

// -- events --------------------------------------------------------------------------------------
h("event.record", "event", 3, (w) => {
  const ei = w[0]! % 4;
  let ev = events[ei];
  const st = streamOf(w[1]!);
  if (!st) return;
  if (!ev) {
    const dev = ei === 3 ? 1 : 0;
    const r = call(() => `const e${ei} = dev${dev}.createEvent()`, anyCapture() ? "any" : "ok", () => devs[dev]!.createEvent());
    if (!r.ok) return;
    ev = events[ei] = { e: r.v, dev, captured: false, name: `e${ei}` };
  }
  const e = ev;
  const r = call(() => `${e.name}.record(${st.name})`, e.dev === st.dev ? (st.cap || anyCapture() ? "any" : "ok") : "err", () => e.e.record(st.s));
  if (r.ok) e.captured = !!st.cap;
});

h("event.wait", "event", 2, (w) => {
  const ev = events[w[0]! % 4];
  const st = streamOf(w[1]!);
  if (!ev || !st) return;
  // a wait on an event recorded in a capture would fork this stream into the capture (excluded)
  if (ev.captured && !st.cap) return;
  // another device's event is fine (cuStreamWaitEvent across contexts); captures never span devices
  call(() => `${st.name}.wait(${ev.name})`, st.cap || ev.captured || anyCapture() ? "any" : "ok", () => st.s.wait(ev.e));
});

h("event.sync", "event", 2, (w) => {
  const ev = events[w[0]! % 4];
  if (!ev) return;
  const q = w[1]! % 2;
  call(() => `${ev.name}.${q ? "query" : "synchronize"}()`, ev.captured || anyCapture() ? "any" : "ok", () => (q ? ev.e.query() : ev.e.synchronize()));
});

h("event.elapsed", "event", 0.5, (w) => {
  const a = events[w[0]! % 4], b = events[w[1]! % 4];
  if (!a || !b) return;
  call(() => `Event.elapsed(${a.name}, ${b.name})`, a.dev !== b.dev ? "err" : "any", () => Event.elapsed(a.e, b.e));
});

h("event.dispose", "event", 1, (w) => {
  const ei = w[0]! % 4, ev = events[ei];
  if (!ev) return;
  call(() => `${ev.name}.dispose()`, "any", () => ev.e.dispose());
  if (!ev.e.disposed) return;
  const st = streamOf(w[1]!);
  if (st) call(() => `${ev.name}.record(${st.name}) /* disposed */`, "err", () => ev.e.record(st.s));
  call(() => `${ev.name}.synchronize() /* disposed */`, "err", () => ev.e.synchronize());
  events[ei] = null;
});

// -- host buffers ---------------------------------------------------------------------------------
h("host", "host", 2, (w) => {
  const hi = w[0]! % 2;
  let hr = hosts[hi];
  if (!hr) {
    if (anyCapture()) return;
    const n = pick([64, 256, 1024], w[1]!);
    const r = call(() => `const h${hi} = dev0.allocHost(${n})`, "ok", () => devs[0]!.allocHost(n));
    if (!r.ok) return;
    hr = hosts[hi] = { h: r.v, model: new Uint8Array(n), owner: null, name: `h${hi}` };
    hr.model.set(r.v.bytes);
    return;
  }
  // write into the pinned memory from JS: no stream may be using it
  const H = hr;
  if (H.owner !== null) syncStream(H.owner);
  if (H.owner !== null) return;
  const d = dataFor(H.model.length, w[2]!);
  L(() => `${H.name}.bytes.set(${dataSrc(H.model.length, w[2]!)})`);
  H.h.bytes.set(d);
  H.model.set(d);
});

h("upload/download", "host", 3, (w) => {
  const H = hosts[w[0]! % 2];
  const si = w[1]! % 4, st = streams[si];
  if (!H || !st) return;
  const b = liveBuf(w[2]!, 0);
  if (!b) return;
  const n = w[3]! % (Math.min(b.len, H.model.length) + 2);
  const dO = w[4]! % (b.len + 1);
  const valid = b.a.live && n <= H.model.length && dO + n <= b.len;
  if (w[5]! % 2) {
    if (valid && !prepareQueued(si, [b], [H])) return;
    const r = call(() => `${st.name}.upload(${b.name}, ${H.name}, { dstOffset: ${dO}, bytes: ${n} })`, valid ? (st.cap || (st.isDefault && anyCapture()) ? "any" : "ok") : "err",
      () => st.s.upload(b.b, H.h, { dstOffset: dO, bytes: n }));
    if (r.ok) {
      if (st.cap) {
        // the graph would read the pinned bytes when replayed; we cannot know them then
        st.cap.effs.push({ bufs: [b], apply: () => (b.a.unknown = true) });
      } else applyQueued(si, [effUpload(b, dO, H, n)], [H]);
    }
  } else {
    if (st.cap) return; // a download captured into a graph writes host memory at replay: excluded
    if (valid && !prepareQueued(si, [b], [H])) return;
    const r = call(() => `${st.name}.download(${H.name}, ${b.name}, { srcOffset: ${dO}, bytes: ${n} })`, valid ? (st.isDefault && anyCapture() ? "any" : "ok") : "err",
      () => st.s.download(H.h, b.b, { srcOffset: dO, bytes: n }));
    if (r.ok) {
      H.model.set(modelOf(b).slice(dO, dO + n), 0);
      if (b.a.unknown) {
        // the bytes are learned at the next check: trust the device here
        syncStream(si);
        H.model.set(H.h.bytes.slice(0, n), 0);
      }
      H.owner = si;
      b.a.owner = b.a.owner ?? si;
    }
  }
});

// -- capture, graphs --------------------------------------------------------------------------------
h("capture.begin", "capture", 2, (w) => {
  const si = w[0]! % 5, st = streams[si];
  if (!st || st.cap) return;
  const mode = pick(MODES, w[1]!);
  syncStream(si);
  // (a stream that may still be running work cannot be waited for while it captures)
  if ([...allocs].some((a) => a.owner === si) || hosts.some((h) => h?.owner === si)) return;
  const r = call(() => `${st.name}.beginCapture(CaptureMode.${mode.name})`, st.isDefault ? "err" : "any", () => st.s.beginCapture(mode));
  if (r.ok) st.cap = { mode, effs: [], maybeInvalid: false, dev: st.dev };
});

h("capture.end", "capture", 2, (w) => {
  const st = streams.find((s, i) => s?.cap && i >= w[0]! % 5) ?? streams.find((s) => s?.cap);
  if (!st) return;
  const cap = st.cap!;
  const r = call(() => `const g = ${st.name}.endCapture()`, "any", () => st.s.endCapture());
  const status = call(() => `${st.name}.captureStatus()`, "ok", () => st.s.captureStatus());
  if (status.ok && status.v === "None") st.cap = null;
  if (r.ok) {
    if (!status.ok || status.v !== "None") throw new Failure("state", `endCapture succeeded but captureStatus is ${status.ok ? status.v : status.e.message}`);
    const gi = w[1]! % 2;
    const old = graphs[gi];
    if (old) call(() => `${old.name}.dispose()`, "any", () => old.g.dispose());
    graphs[gi] = { g: r.v, effs: cap.effs, name: `g${gi}`, dev: cap.dev };
  }
  if (!anyCapture() && pendingCheck) check("after a capture ended (deferred)");
});

h("graph.instantiate", "capture", 2, (w) => {
  const g = graphs[w[0]! % 2];
  if (!g) return;
  const xi = w[1]! % 2;
  const r = call(() => `const x${xi} = ${g.name}.instantiate()`, g.g.disposed ? "err" : "any", () => g.g.instantiate());
  if (!r.ok) return;
  const old = execs[xi];
  if (old) call(() => `x${xi}.dispose()`, "any", () => old.x.dispose());
  // the exec owns copies of the effects (its arguments can be changed independently)
  execs[xi] = { x: r.v, effs: g.effs.map((e) => (e.kernelArgs ? effKernel(e.kernelArgs.buf, e.kernelArgs.v, e.kernelArgs.n, e.mod, e.kernelArgs.cover) : e)), name: `x${xi}`, dev: g.dev };
});

h("exec.launch", "capture", 3, (w) => {
  const x = execs[w[0]! % 2];
  const si = w[1]! % 5, st = streams[si];
  if (!x || !st) return;
  const touched = x.effs.flatMap((e) => e.bufs);
  const gone = goneIn(x.effs);
  if (gone && EXCLUDE.has("replay-after-dispose")) return; // h6_findings.md #2
  if (!st.cap && st.dev === x.dev && !prepareQueued(si, touched.filter((b) => b.a.live))) return;
  const r = call(() => `${x.name}.launch(${st.name})`, x.x.disposed || st.dev !== x.dev ? "err" : st.cap || anyCapture() ? "any" : "ok", () => x.x.launch(st.s)); // a disposed buffer or module it replays stays alive for it (issue 11)
  if (r.ok) {
    if (st.cap) st.cap.effs.push(...x.effs);
    else applyQueued(si, x.effs);
  }
});

h("exec.setKernelArgs", "capture", 1, (w) => {
  const x = execs[w[0]! % 2];
  if (!x) return;
  const kn = x.effs.filter((e) => e.kernelArgs);
  const idx = w[1]! % (kn.length + 1);
  const md = mods[x.dev];
  if (!md) return;
  const la = launchArgs(w.slice(2).concat(w), x.dev);
  if (la.block === 2048) la.valid = true; // (the block is not an argument: the args are fine)
  const valid = la.valid && idx < kn.length && md.live && !x.x.disposed && la.buf!.dev === x.dev;
  // the new arguments must not change which buffers the exec touches concurrently with our streams
  if (valid && !syncAll()) return;
  const r = call(() => `${x.name}.setKernelArgs(${idx}, k${x.dev}, ${la.src})`, valid ? "any" : "err", () => x.x.setKernelArgs(idx, md.k, la.args as never));
  if (r.ok) {
    kn[idx]!.kernelArgs = { buf: la.buf!, v: la.v, n: la.n, cover: kn[idx]!.kernelArgs!.cover }; // (the grid stays)
    kn[idx]!.bufs = [la.buf!];
    kn[idx]!.mod = md;
  }
});

h("graph.dispose", "capture", 1, (w) => {
  if (w[0]! % 2) {
    const g = graphs[w[1]! % 2];
    if (!g) return;
    call(() => `${g.name}.dispose()`, "any", () => g.g.dispose());
    call(() => `${g.name}.instantiate() /* disposed */`, "err", () => g.g.instantiate());
    graphs[w[1]! % 2] = null;
  } else {
    const x = execs[w[1]! % 2];
    if (!x) return;
    call(() => `${x.name}.dispose()`, "any", () => x.x.dispose());
    const st = streams[1];
    if (st) call(() => `${x.name}.launch(${st.name}) /* disposed */`, "err", () => x.x.launch(st.s));
    execs[w[1]! % 2] = null;
  }
});

/** Nothing queued on our streams may still touch any allocation; false where that cannot be had
 * (a capture makes some waits illegal). */
function syncAll(): boolean {
  if (!anyCapture()) {
    for (let d = 0; d < 2; d++) if (call(() => `dev${d}.synchronize()`, "ok", () => devs[d]!.synchronize()).ok) for (const f of devSyncHooks) f(d);
    clearOwner(() => true);
    return true;
  }
  for (const a of allocs) if (a.owner !== null) syncStream(a.owner);
  for (const h of hosts) if (h && h.owner !== null) syncStream(h.owner);
  return [...allocs].every((a) => a.owner === null) && hosts.every((h) => !h || h.owner === null);
}

// -- command encoders -----------------------------------------------------------------------------
h("encoder", "encoder", 5, (w) => {
  let E = encs[0];
  if (!E) {
    const r = call(() => `const enc = new CommandEncoder(dev0)`, "ok", () => new CommandEncoder(devs[0]!));
    if (!r.ok) return;
    E = encs[0] = { enc: r.v, effs: [], name: "enc" };
  }
  const en = E;
  const op = w[0]! % 6;
  if (op === 0 || op === 1) {
    const md = mods[w[6]! % 9 === 0 ? 1 : 0];
    if (!md) return;
    const la = launchArgs(w.slice(1), 0);
    const valid = la.valid && md.live && md.dev === 0;
    // a block over the device's limit is refused by dispatch itself, as by Kernel.launch
    // (h6_findings.md #1: it used to be found only by commit)
    const r = call(() => `enc.dispatch(k${md.dev}, { grid: ${la.grid}, block: ${la.block}, args: ${la.src} })`, valid ? "ok" : "err",
      () => en.enc.dispatch(md.k, { grid: la.grid, block: la.block, args: la.args as never }));
    if (r.ok) en.effs.push(effKernel(la.buf!, la.v, la.n, md, la.grid * la.block));
  } else if (op === 2) {
    const s = liveBuf(w[1]!), d = liveBuf(w[2]!);
    if (!s || !d) return;
    const n = w[3]! % (Math.min(s.len, d.len) + 2);
    const valid = s.a.live && d.a.live && s.dev === 0 && d.dev === 0 && n <= s.len && n <= d.len;
    const r = call(() => `enc.copy(${d.name}, ${s.name}, { bytes: ${n} })`, valid ? "ok" : "err", () => en.enc.copy(d.b, s.b, { bytes: n }));
    if (r.ok) en.effs.push(effCopy(d, 0, s, 0, n));
  } else if (op === 3) {
    const b = liveBuf(w[1]!);
    if (!b) return;
    const n = w[2]! % (b.len + 2);
    const value = w[3]! & 0xff;
    const valid = b.a.live && b.dev === 0 && n <= b.len;
    const r = call(() => `enc.fill(${b.name}, ${value}, { type: "u8", bytes: ${n} })`, valid ? "ok" : "err", () => en.enc.fill(b.b, value, { type: "u8", bytes: n }));
    if (r.ok) en.effs.push(effFill(b, 0, n, value, 1));
  } else if (op === 4) {
    call(() => `enc.barrier()`, "ok", () => en.enc.barrier());
  } else {
    const si = w[1]! % 5, st = streams[si];
    if (!st) return;
    const touched = en.effs.flatMap((e) => e.bufs);
    const gone = goneIn(en.effs);
    const valid = st.dev === 0 && !gone;
    if (st.dev === 0 && !prepareQueued(si, touched.filter((b) => b.a.live))) return;
    const keep = w[2]! % 4 === 0;
    const r = call(() => `enc.commit(${st.name}${keep ? ", { keep: true }" : ""})`, valid ? (st.cap || (st.isDefault && anyCapture()) ? "any" : "ok") : "err", () => en.enc.commit(st.s, { keep }));
    if (r.ok) {
      applyQueued(si, en.effs);
      if (!keep) en.effs = [];
    }
  }
});

// -- schedules --------------------------------------------------------------------------------------
h("schedule", "schedule", 2, (w) => {
  const xi = w[0]! % 2;
  const cur = exes[xi];
  if (cur && w[1]! % 3 !== 0) {
    // run it (again)
    const gone = goneIn(cur.effs);
    if (gone && EXCLUDE.has("replay-after-dispose")) return;
    if (!syncAll()) return;
    const exp: Expect = anyCapture() || gone || cur.ran && cur.eager ? "any" : "ok";
    const r = call(() => `${cur.name}.run(); ${cur.name}.synchronize()`, exp, () => {
      cur.x.run();
      cur.x.synchronize();
    });
    if (r.ok) {
      for (const e of cur.effs) e.apply();
      cur.ran = true;
    } else {
      // a run refused part-way may have run some steps: learn the bytes at the next check
      for (const e of cur.effs) for (const b of e.bufs) b.a.unknown = true;
      call(() => `${cur.name}.synchronize()`, "any", () => cur.x.synchronize());
    }
    return;
  }
  if (cur) {
    call(() => `${cur.name}.dispose()`, "any", () => cur.x.dispose());
    exes[xi] = null;
    return;
  }
  if (anyCapture()) return;
  // build 1-3 steps on dev0 buffers
  const steps: Step[] = [];
  const effs: Eff[] = [];
  const src: string[] = [];
  const md = mods[0];
  let valid = true;
  for (let k = 0; k < 1 + (w[2]! % 3); k++) {
    const ww = [w[3]! + k * 7919, w[4]! + k * 104729, w[5]! + k * 31, w[6]! + k, w[3]! ^ w[4]!, w[5]! ^ k, w[6]!];
    const kind = ww[0]! % 3;
    if (kind === 0 && md) {
      const la = launchArgs(ww, 0);
      if (!la.valid || !md.live) continue;
      src.push(`Step.kernel(k0, { grid: ${la.grid}, block: ${la.block}, args: ${la.src} })`);
      const r = call(() => src.at(-1)!, "ok", () => Step.kernel(md.k, { grid: la.grid, block: la.block, args: la.args as never }));
      if (!r.ok) return;
      steps.push(r.v);
      effs.push(effKernel(la.buf!, la.v, la.n, md, la.grid * la.block));
    } else if (kind === 1) {
      const s = liveBuf(ww[1]!, 0), d = liveBuf(ww[2]!, 0);
      if (!s || !d) continue;
      const n = ww[3]! % (Math.min(s.len, d.len) + 1);
      if (!s.a.live || !d.a.live) valid = false;
      src.push(`Step.copy(${d.name}, ${s.name}, { bytes: ${n} })`);
      const r = call(() => src.at(-1)!, "any", () => Step.copy(d.b, s.b, { bytes: n }));
      if (!r.ok) return;
      steps.push(r.v);
      effs.push(effCopy(d, 0, s, 0, n));
    } else {
      const b = liveBuf(ww[1]!, 0);
      if (!b) continue;
      if (!b.a.live) valid = false;
      const n = ww[2]! % (b.len + 1);
      src.push(`Step.fill(${b.name}, ${ww[3]! & 0xff}, { type: "u8", bytes: ${n} })`);
      const r = call(() => src.at(-1)!, "any", () => Step.fill(b.b, ww[3]! & 0xff, { type: "u8", bytes: n }));
      if (!r.ok) return;
      steps.push(r.v);
      effs.push(effFill(b, 0, n, ww[3]! & 0xff, 1));
    }
  }
  if (!steps.length) return;
  const mode = pick([ExecMode.Stream, ExecMode.Graph, ExecMode.MultiStream(2), ExecMode.Eager], w[1]!);
  const name = `exe${xi}`;
  const r = call(() => `const ${name} = new Schedule([${src.join(", ")}]).compile(dev0, ExecMode.${mode})`, valid ? "ok" : "any",
    () => new Schedule(steps).compile(devs[0]!, mode));
  if (r.ok) exes[xi] = { x: r.v, effs, eager: mode.kind === "Eager", ran: false, name };
});

// -- rings ------------------------------------------------------------------------------------------
h("ring", "ring", 3, (w) => {
  let R = rings[0];
  if (!R) {
    if (anyCapture()) return;
    const mb = pick([8, 16, 64], w[0]!), cap = pick([4, 8, 64], w[1]!);
    const bad = w[2]! % 6 === 0;
    const r = call(() => `const ring = Ring.create(dev0, { messageBytes: ${bad ? 0 : mb}, capacity: ${bad ? 3 : cap} })`, bad ? "err" : "ok",
      () => Ring.create(devs[0]!, { messageBytes: bad ? 0 : mb, capacity: bad ? 3 : cap }));
    if (r.ok) rings[0] = { r: r.v, q: [], mb, cap, name: "ring" };
    return;
  }
  const rr = R;
  const op = w[0]! % 5;
  if (op <= 1) {
    const k = w[1]! % (rr.cap + 2);
    const bad = w[2]! % 7 === 0;
    const bytes = dataFor(k * rr.mb + (bad ? 3 : 0), w[3]!);
    const r = call(() => `ring.push(${dataSrc(bytes.length, w[3]!)})`, bad ? "err" : "ok", () => rr.r.push(bytes));
    if (r.ok) {
      const want = Math.min(k, rr.cap - rr.q.length);
      if (r.v !== want) throw new Failure("ring", `ring.push of ${k} with ${rr.q.length}/${rr.cap} queued returned ${r.v}, want ${want}`);
      for (let i = 0; i < want; i++) rr.q.push(bytes.slice(i * rr.mb, (i + 1) * rr.mb));
    }
  } else if (op <= 3) {
    const max = w[1]! % (rr.cap + 2);
    const r = call(() => `ring.pop(${max})`, "ok", () => rr.r.pop(max));
    if (r.ok) {
      const want = rr.q.splice(0, Math.min(max, rr.q.length));
      const exp = new Uint8Array(want.length * rr.mb);
      want.forEach((m, i) => exp.set(m, i * rr.mb));
      if (r.v.length !== exp.length || r.v.some((x, i) => x !== exp[i]))
        throw new Failure("corrupted byte", `ring.pop(${max}) returned ${r.v.length} bytes differing from the ${exp.length} pushed`);
    }
    const c = call(() => `ring.count()`, "ok", () => rr.r.count());
    if (c.ok && c.v !== rr.q.length) throw new Failure("ring", `ring.count() is ${c.v}, the model says ${rr.q.length}`);
  } else {
    call(() => `ring.dispose()`, "ok", () => rr.r.dispose());
    call(() => `ring.push(new Uint8Array(${rr.mb})) /* disposed */`, "err", () => rr.r.push(new Uint8Array(rr.mb)));
    call(() => `ring.pop() /* disposed */`, "err", () => rr.r.pop());
    rings[0] = null;
  }
});

// -- tensors ------------------------------------------------------------------------------------------
h("tensor", "tensor", 1, (w) => {
  const op = w[0]! % 8;
  const n = 8;
  const a = Int32Array.from(dataFor(n * 4, w[1]!).subarray(0, n), (x) => x - 128);
  const b = Int32Array.from(dataFor(n * 4, w[2]!).subarray(0, n), (x) => x - 100);
  if (op === 0 && !anyCapture()) {
    // realized on the default device; the kernel is the same every time (cached)
    const r = call(() => `Tensor.from(Int32Array.of(${a}), [8]).add(Tensor.from(Int32Array.of(${b}), [8])).toArray()`, "ok",
      () => Tensor.from(a, [n], { dtype: "int32" }).add(Tensor.from(b, [n], { dtype: "int32" })).toArray());
    if (r.ok) for (let i = 0; i < n; i++) if (r.v[i] !== a[i]! + b[i]!) throw new Failure("corrupted byte", `tensor add: element ${i} is ${r.v[i]}, want ${a[i]! + b[i]!}`);
    return;
  }
  const t = Tensor.from(a, [n], { dtype: "int32" });
  const bad: [string, () => unknown][] = [
    ["t.reshape([3])", () => t.reshape([3])],
    ["t.add(Tensor.zeros([3]))", () => t.add(Tensor.zeros([3]))],
    ["t.permute([1, 0])", () => t.permute([1, 0])],
    ["t.sum(5)", () => t.sum(5)],
    ["Tensor.from(null as never)", () => Tensor.from(null as never)],
    ["t.expand([4, 9])", () => t.expand([4, 9])],
  ];
  const [s, f] = bad[op % bad.length]!;
  call(() => s, "err", f);
});

// -- wrong types and shapes of arguments at every entry ------------------------------------------
const WEIRD: [string, unknown][] = [
  ["null", null], ["undefined", undefined], ['"12"', "12"], ["-1", -1], ["1.5", 1.5], ["NaN", NaN],
  ["Infinity", Infinity], ["2 ** 53", 2 ** 53], ["{}", {}], ["[]", []], ["Symbol()", Symbol("x")], ["10n", 10n],
];
h("badargs", "badargs", 4, (w) => {
  const [ws, x] = WEIRD[w[0]! % WEIRD.length]!;
  const b = liveBuf(w[1]!, 0);
  const st = streams[1 + (w[2]! % 3)];
  const ev = events[w[3]! % 3];
  const md = mods[0];
  const X = x as never;
  const cases: [string, (() => unknown) | null | undefined | false][] = [
    [`dev0.alloc(${ws})`, () => devs[0]!.alloc(X)],
    [`${b?.name}.write(${ws})`, b && (() => b.b.write(X))],
    [`${b?.name}.write(new Uint8Array(1), ${ws})`, b && x !== undefined && typeof x !== "object" ? () => b.b.write(new Uint8Array(1), X) : null],
    [`${b?.name}.write(new Uint8Array(1), { offset: ${ws} })`, b && x !== undefined ? () => b.b.write(new Uint8Array(1), { offset: X }) : null],
    [`${b?.name}.read(${ws})`, b && x !== undefined ? () => b.b.read(X) : null],
    [`${b?.name}.fill(${ws})`, b && (() => b.b.fill(X))],
    [`${b?.name}.fill(1, { type: ${ws} })`, b && x !== undefined ? () => b.b.fill(1, { type: X }) : null],
    [`${b?.name}.copyTo(${ws})`, b && (() => b.b.copyTo(X))],
    [`${b?.name}.view(${ws})`, b && (() => b.b.view(X))],
    [`${st?.name}.copy(${ws}, ${b?.name})`, st && b && (() => st.s.copy(X, b.b))],
    [`${st?.name}.fill(${b?.name}, ${ws})`, st && b && (() => st.s.fill(b.b, X))],
    [`${st?.name}.wait(${ws})`, st && (() => st.s.wait(X))],
    [`${st?.name}.beginCapture(${ws})`, st && x !== undefined ? () => st.s.beginCapture(X) : null],
    [`${ev?.name}.record(${ws})`, ev && x !== undefined ? () => ev.e.record(X) : null],
    [`Event.elapsed(${ws}, ${ws})`, () => Event.elapsed(X, X)],
    [`k0.launch(${ws}, {...})`, md && b && (() => md.k.launch(X, { grid: 1, block: 1, args: [b.b, 1, 0] }))],
    [`k0.launch(${st?.name}, ${ws})`, md && st && (() => md.k.launch(st.s, X))],
    [`k0.launch(${st?.name}, { grid: ${ws}, block: 1, args: [${b?.name}, 1, 0] })`, md && st && b && (() => md.k.launch(st.s, { grid: X, block: 1, args: [b.b, 1, 0] }))],
    [`k0.launch(${st?.name}, { grid: 1, block: 1, args: ${ws} })`, md && st && (() => md.k.launch(st.s, { grid: 1, block: 1, args: X }))],
    [`mod0.kernel(${ws}, ["buffer"])`, md && (() => md.mod.kernel(X, ["buffer"]))],
    [`mod0.kernel("fz_add", ${ws})`, md && (() => md.mod.kernel("fz_add", X))],
    [`Device.open(${ws})`, () => Device.open(X)],
    [`Ring.create(dev0, ${ws})`, () => Ring.create(devs[0]!, X)],
    [`new CommandEncoder(dev0).dispatch(k0, ${ws})`, md && (() => new CommandEncoder(devs[0]!).dispatch(md.k, X))],
    [`new CommandEncoder(dev0).commit(${ws})`, () => new CommandEncoder(devs[0]!).commit(X)],
    [`Step.kernel(k0, ${ws})`, md && (() => Step.kernel(md.k, X))],
    [`Step.copy(${ws}, ${ws})`, () => Step.copy(X, X)],
    [`new Schedule().compile(${ws})`, () => new Schedule().compile(X)],
    [`Tensor.from(${ws})`, typeof x === "number" ? null : () => Tensor.from(X)],
    [`Tensor.zeros(${ws})`, () => Tensor.zeros(X)],
    [`Tensor.from(Int32Array.of(1, 2)).reshape(${ws})`, () => Tensor.from(Int32Array.of(1, 2), [2], { dtype: "int32" }).reshape(X)],
    [`Tensor.from(Int32Array.of(1, 2)).sum(${ws})`, x === undefined || x === null ? null : () => Tensor.from(Int32Array.of(1, 2), [2], { dtype: "int32" }).sum(X)],
  ];
  const [src, f] = cases[w[4]! % cases.length]!;
  if (!f) return;
  if (anyCapture()) return; // (kept simple: nothing here is captured)
  // Some of these are legal (sum(-1), an options object of null, Tensor.from([])): the point is
  // that nothing but a GpuError is thrown. Where one is accepted, its effect is learned.
  const r = call(() => src, "any", f);
  if (r.ok) {
    syncAll();
    for (const a of allocs) a.unknown = true;
    check("after an accepted odd argument");
  }
});

// -- devices --------------------------------------------------------------------------------------
h("device.recycle", "device", 0.2, (w) => {
  // dispose dev1 and everything on it, check calls on its dead objects, and open it again
  if (anyCapture()) return;
  syncAll();
  call(() => `dev1.dispose()`, "ok", () => devs[1]!.dispose());
  const b = bufs.find((x) => x?.dev === 1 && x.a.live);
  if (b) {
    call(() => `${b.name}.read() /* device disposed */`, "err", () => b.b.read());
    call(() => `${b.name}.write(new Uint8Array(1)) /* device disposed */`, "err", () => b.b.write(new Uint8Array(1)));
  }
  const st = streams[4];
  if (st) call(() => `${st.name}.synchronize() /* device disposed */`, "err", () => st.s.synchronize());
  for (const a of allocs) if (a.dev === 1) a.live = false;
  for (let i = 0; i < NB; i++) if (bufs[i]?.dev === 1) bufs[i] = null;
  if (events[3]) events[3] = null;
  call(() => `dev1 = Device.open("${BACKEND}:1")`, "ok", () => (devs[1] = Device.open(`${BACKEND}:1`)));
  mods[1] = null;
  call(() => `mod1 = Program.compile(dev1, src)`, "ok", () => compile(1));
  streams[4] = null;
  newStream(4);
  void w;
});

// -- issue 23 item 10: memory pools, communicators, safetensors bytes, IPC handles and a
// communicator across two processes (a peer process), cache damage (test/fuzz/surfaces.ts)
const surfaces = installSurfaces({
  call,
  h,
  fail: (kind, message) => {
    throw new Failure(kind, message);
  },
  devs,
  mods,
  anyCapture,
  L,
  dataFor,
  seed: SEED,
  calls: CALLS,
  devSyncHooks,
  backend: BACKEND,
});

// ---- main loop ------------------------------------------------------------------------------------
const active = handlers.map((hh, i) => ({ hh, i })).filter(({ hh }) => !EXCLUDE.has(hh.cat) && !EXCLUDE.has(hh.name) && hh.weight > 0);
const total = active.reduce((s, x) => s + x.hh.weight, 0);
function gen(): number[] {
  let r = (rnd() / 4294967296) * total;
  let pickI = active[active.length - 1]!.i;
  for (const x of active) {
    r -= x.hh.weight;
    if (r < 0) {
      pickI = x.i;
      break;
    }
  }
  return [pickI, rnd(), rnd(), rnd(), rnd(), rnd(), rnd(), rnd()];
}

const steps: number[][] = REPLAY ? JSON.parse(readFileSync(REPLAY, "utf8")) : [];
if (RECORD) writeFileSync(RECORD, "");
const t0 = performance.now();
const perHandler: Record<string, number> = {};
let failed: Failure | null = null;
try {
  for (stepNo = 0; REPLAY ? stepNo < steps.length : nCalls < CALLS; stepNo++) {
    const st = REPLAY ? steps[stepNo]! : gen();
    if (!REPLAY) steps.push(st);
    if (RECORD && RECORD_SYNC) appendFileSync(RECORD, JSON.stringify(st) + "\n");
    const hh = handlers[st[0]!];
    if (!hh) continue;
    perHandler[hh.name] = (perHandler[hh.name] ?? 0) + 1;
    L(() => `// step ${stepNo}: ${hh.name}`);
    hh.run(st.slice(1));
    if (stepNo % CHECK_EVERY === CHECK_EVERY - 1) check(`periodic check at step ${stepNo}`);
  }
  check("final check");
  // close everything that is open: captures first
  for (const st of streams) if (st?.cap) call(() => `${st.name}.endCapture()`, "any", () => st.s.endCapture());
  check("after closing captures");
} catch (e) {
  if (e instanceof Failure) failed = e;
  else failed = new Failure("driver error", `${(e as Error)?.stack ?? e}`);
}
try {
  surfaces.close();
} catch (e) {
  failed ??= new Failure("driver error", `closing the surfaces: ${(e as Error)?.stack ?? e}`);
}
if (RECORD && !RECORD_SYNC) writeFileSync(RECORD, steps.slice(0, stepNo + 1).map((s) => JSON.stringify(s)).join("\n") + "\n");
const ms = Math.round(performance.now() - t0);
if (failed) {
  console.log(JSON.stringify({ ok: false, kind: failed.kind, message: failed.message, step: stepNo, calls: nCalls, ms }));
  process.exit(1);
}
if (argv.includes("--stats")) console.log(JSON.stringify({ perHandler, accepted: nCalls - nRejected }));
// the devices it drove, by the backend's own name for them (the harness's caller asserts it)
console.log(JSON.stringify({ ok: true, seed: SEED, backend: devs[0]!.backend, devices: devs.map((d) => d.spec), skipped: surfaces.skipped, steps: stepNo, calls: nCalls, rejected: nRejected, checks: nChecks, ms }));
process.exit(0);
