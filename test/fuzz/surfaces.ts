// The fuzzer's handlers for the surfaces of issue 23 item 10, registered by test/fuzz/run.ts after
// its own (so the indexes of recorded steps of older handlers stay): memory pools (an exact model
// of every custom pool's blocks, free list and stats), communicators in one process (2 or 3 ranks
// on BUNGPU_CPU_DEVICES devices; grouped and ungrouped collectives checked against a reference
// reduction; buffers and communicators disposed mid-group; bad op/dtype names), safetensors bytes
// (random and damaged files against a reference reader), and, with a second process
// (test/fuzz/peer.ts, one per batch, started at first need): shared buffers and events opened
// genuine and altered, and a communicator across the two processes; and cache damage (each case
// a subprocess, test/fuzz/cache_child.ts, over a private BUNGPU_CACHE_DIR the driver damages).
// Every case checks values read back against its model, or the exact GpuError code.
import { chmodSync, closeSync, constants, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, truncateSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import {
  Communicator,
  Device,
  GpuError,
  MemoryPool,
  Status,
  Tensor,
  loadInfo,
  type Buffer,
  type Event,
  type Kernel,
  type Stream,
} from "../../src";
import { readSafetensors, writeSafetensors, type SafetensorsEntry } from "../../src/tensor";

type Expect = "ok" | "err" | "any";
type Res<T> = { ok: true; v: T } | { ok: false; e: GpuError };
export interface FuzzCtx {
  call<T>(src: () => string, expect: Expect, fn: () => T): Res<T>;
  h(name: string, cat: string, weight: number, run: (w: number[]) => void): void;
  fail(kind: string, message: string): never;
  devs: Device[];
  mods: ({ k: Kernel; live: boolean; dev: number } | null)[];
  anyCapture(): boolean;
  L(f: () => string): void;
  dataFor(n: number, w: number): Uint8Array;
  seed: number;
  calls: number;
  /** Functions run after the driver synchronized a device (its check, its syncAll). */
  devSyncHooks: ((d: number) => void)[];
  /** The backend run.ts drove: "cpu" (every surface), or "cuda" (FUZZ_BACKEND=cuda; see below). */
  backend: "cpu" | "cuda";
}

const pick = <T>(xs: readonly T[], w: number): T => xs[w % xs.length]!;
const hex = (u: Uint8Array, n = 24) => [...u.subarray(0, n)].map((x) => x.toString(16).padStart(2, "0")).join("") + (u.length > n ? "…" : "");
const b64 = (u: Uint8Array) => globalThis.Buffer.from(u.buffer, u.byteOffset, u.byteLength).toString("base64");
const unb64 = (s: string) => new Uint8Array(globalThis.Buffer.from(s, "base64"));
const bytesOf = (x: ArrayBufferView) => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
function sameBytes(a: Uint8Array, b: Uint8Array): number {
  if (a.length !== b.length) return Math.min(a.length, b.length);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}
const KEEP = Number.MAX_SAFE_INTEGER;
const GRANULE = 256;
const roundUp = (n: number) => Math.ceil(n / GRANULE) * GRANULE;

export function installSurfaces(c: FuzzCtx): { close(): void; skipped: string[] } {
  const { call, fail, devs, L } = c;
  // On CUDA (FUZZ_BACKEND=cuda: the driver simulator or a GPU) some surfaces are the CPU
  // backend's own and are left out, registered with weight 0 so the handlers' indexes (recorded
  // steps) stay the same:
  //  - ipc, ipc.export: the handles' fields (memfd number, allocation id) and the peer process's
  //    shared-memory mapping are the CPU backend's IPC; CUDA's handle is the driver's, and the
  //    simulator's device memory is its process's own (flow.c covers its export and refusals);
  //  - cache: cache_child.ts compiles a CPU C kernel and the shim over a damaged CPU kernel cache;
  //  - comm, xcomm: NCCL, unless a probe finds it (it is absent beside the simulator).
  // The pool handler keeps its calls and checks its invariants only on custom pools there (bytes,
  // no overlap, used >= the blocks in use, peaks): the exact model is the CPU pool's (best fit,
  // 256-byte granules, largest-first release), the driver's pools choose their own.
  const cudaSkip = new Map<string, string>();
  if (c.backend === "cuda") {
    for (const k of ["ipc", "ipc.export"]) cudaSkip.set(k, "CPU shared-memory IPC (memfd handles, a peer mapping it)");
    cudaSkip.set("cache", "the damaged cache child compiles CPU C kernels");
    let nccl = "";
    try {
      for (const x of Communicator.initAll([devs[0]!, devs[1]!], { timeoutMs: 10_000 })) x.dispose();
    } catch (e) {
      nccl = `no NCCL (${(e as Error).message.split("\n")[0]!.slice(0, 120)})`;
    }
    if (nccl) for (const k of ["comm", "xcomm"]) cudaSkip.set(k, nccl);
  }
  const h: FuzzCtx["h"] = (name, cat, weight, run) => c.h(name, cat, cudaSkip.has(name) ? 0 : weight, run);
  const exactPools = c.backend === "cpu";
  const temps: string[] = [];
  const tempDir = (kind: string) => {
    const d = mkdtempSync(join(tmpdir(), `bungpu-fuzz-${kind}-`));
    temps.push(d);
    return d;
  };
  const expectCode = (r: Res<unknown>, codes: readonly number[], what: string) => {
    if (!r.ok && !codes.includes(r.e.code)) fail("wrong error code", `${what}: ${r.e.message} (code ${r.e.code}), want one of ${codes.join(", ")}`);
  };

  // ================================================================================================
  // Memory pools. Custom pools on dev0 have an exact model: every block the pool holds (in use, or
  // free in its free list in the C order: newest first), which stream freed a free block and
  // whether that stream has since completed the free; stats follow. The CPU pool's rules
  // (shim/cpu/pool_mem.c): best fit among blocks this stream may have (freed by it, or whose free
  // has completed), else fresh memory rounded to 256; at a synchronize a pool above its threshold,
  // and at trim(keep) above keep, gives back reusable blocks, largest first. Where readiness
  // depends on timing the model keeps every outcome the rules allow and learns which happened
  // from the address and the stats. The default pool is shared with tensor plans: invariants only.
  interface PBlock { addr: number; size: number; fs: number; done: boolean }
  interface PPool {
    pool: MemoryPool;
    name: string;
    shared: boolean; // the device's default pool
    loose: boolean; // invariants only: the default pool (shared with plans), or any pool off the CPU
    threshold: number;
    free: PBlock[]; // head first
    inUse: Map<number, number>; // addr -> block size
    exact: boolean; // the free list is known exactly
    dead: boolean;
    peakR: number;
    peakU: number;
  }
  interface PBuf { b: Buffer; addr: number; bytes: number; size: number; pool: PPool; si: number; model: Uint8Array; name: string; live: boolean }
  const pools: (PPool | null)[] = [null, null];
  let defaultPool: PPool | null = null;
  const pbufs: (PBuf | null)[] = Array(6).fill(null);
  const pstreams: (Stream | null)[] = [null, null];
  let pNo = 0;
  const pstreamOf = (i: number): Stream => {
    let s = pstreams[i];
    if (!s || s.disposed) s = pstreams[i] = devs[0]!.createStream({ nonBlocking: i === 1 });
    return s;
  };
  const usedOf = (p: PPool) => [...p.inUse.values()].reduce((a, b) => a + b, 0);
  const freeOf = (p: PPool) => p.free.reduce((a, b) => a + b.size, 0);
  /** What the shim's shrink(p, mark) does when every free block is reusable. */
  function shrinkModel(p: PPool, mark: number): void {
    let reserved = usedOf(p) + freeOf(p);
    while (reserved > mark && p.free.length) {
      let best = -1;
      p.free.forEach((b, i) => {
        if (best < 0 || b.size > p.free[best]!.size) best = i;
      });
      reserved -= p.free[best]!.size;
      p.free.splice(best, 1);
    }
  }
  /** After a synchronize of dev0: every free has completed; pools above their threshold shrink. */
  function poolsDevSync(): void {
    for (const p of [...pools, defaultPool]) {
      if (!p || p.dead) continue;
      for (const b of p.free) b.done = true;
      if (p.loose) continue;
      if (p.exact) shrinkModel(p, p.threshold);
      p.peakR = Math.max(p.peakR, usedOf(p) + freeOf(p));
    }
  }
  c.devSyncHooks.push((d) => {
    if (d === 0) poolsDevSync();
  });
  /** A synchronize of private stream si: its frees completed; other streams' maybe. */
  function poolsStreamSync(si: number): void {
    for (const p of [...pools, defaultPool]) {
      if (!p || p.dead || p.loose) continue;
      for (const b of p.free) if (b.fs === si) b.done = true;
      const reserved = usedOf(p) + freeOf(p);
      if (reserved <= p.threshold) continue;
      if (p.free.every((b) => b.done)) shrinkModel(p, p.threshold);
      else p.exact = false; // which blocks went depends on timing: learned from the stats below
    }
  }
  function statsOf(p: PPool): { reserved: number; used: number; reservedPeak: number; usedPeak: number } | null {
    const r = call(() => `${p.name}.stats`, "ok", () => p.pool.stats);
    return r.ok ? r.v : null;
  }
  /** Compare a pool's stats with the model; an inexact model learns what it can. */
  function checkPool(p: PPool, why: string): void {
    if (p.dead) return;
    const st = statsOf(p);
    if (!st) return;
    const used = usedOf(p);
    if (p.loose) {
      if (st.used < used || st.reserved < st.used || st.reservedPeak < st.reserved || st.usedPeak < st.used)
        fail("pool stats", `${why}: ${p.name}.stats ${JSON.stringify(st)}: this handler alone has ${used} bytes in use`);
      return;
    }
    if (st.used !== used) fail("pool stats", `${why}: ${p.name}.stats.used is ${st.used}, the model's blocks in use are ${used} bytes`);
    const free = freeOf(p);
    if (!p.exact) {
      // the free blocks the pool still holds are a subset of the model's: their bytes tell
      const held = st.reserved - st.used;
      if (held > free || held < 0) fail("pool stats", `${why}: ${p.name} holds ${held} free bytes; the model's free blocks are ${free} (a subset of them may be left)`);
      if (held === free) p.exact = true;
      else if (held === 0) {
        p.free = [];
        p.exact = true;
      }
    } else if (st.reserved !== used + free)
      fail("pool stats", `${why}: ${p.name}.stats.reserved is ${st.reserved}, the model says ${used} in use + ${free} free (${p.free.map((b) => b.size).join(", ")})`);
    p.peakR = Math.max(p.peakR, st.reserved);
    p.peakU = Math.max(p.peakU, st.used);
    if (st.reservedPeak < st.reserved || st.usedPeak < st.used || (p.exact && (st.usedPeak !== p.peakU)))
      fail("pool stats", `${why}: ${p.name} peaks ${st.reservedPeak}/${st.usedPeak} with reserved ${st.reserved}, used ${st.used}; the model's used peak is ${p.peakU}`);
    p.peakR = st.reservedPeak;
  }
  /** Every live pool buffer holds its model's bytes, and no two blocks overlap. */
  function checkPoolBufs(why: string): void {
    const live = pbufs.filter((x): x is PBuf => !!x && x.live);
    const spans = live.map((x) => [x.addr, x.addr + x.size, x] as const).sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < spans.length; i++)
      if (spans[i]![0] < spans[i - 1]![1]) fail("pool overlap", `${why}: ${spans[i - 1]![2].name} [0x${spans[i - 1]![0].toString(16)}, +${spans[i - 1]![2].size}) and ${spans[i]![2].name} at 0x${spans[i]![0].toString(16)} overlap`);
    for (const x of live) {
      const r = call(() => `${x.name}.read()`, "ok", () => x.b.read(Uint8Array) as Uint8Array);
      if (!r.ok) continue;
      const at = sameBytes(r.v, x.model);
      if (at >= 0) fail("corrupted byte", `${why}: pool buffer ${x.name} (${x.pool.name}) byte ${at} is ${r.v[at]}, the model says ${x.model[at]}`);
    }
  }
  function newPool(i: number, w: number): void {
    const threshold = pick([0, KEEP, 1024, 4096], w);
    const name = `pool${i}_${pNo++}`;
    const r = call(() => `const ${name} = new MemoryPool(dev0, { releaseThreshold: ${threshold === KEEP ? "KEEP" : threshold} })`, "ok", () => new MemoryPool(devs[0]!, { releaseThreshold: threshold }));
    // (on CUDA a custom pool is checked as the shared one is: invariants only, see above)
    if (r.ok) pools[i] = { pool: r.v, name, shared: false, loose: !exactPools, threshold, free: [], inUse: new Map(), exact: exactPools, dead: false, peakR: 0, peakU: 0 };
  }

  h("pool", "pool", 2, (w) => {
    if (c.anyCapture()) return;
    const d0 = devs[0]!;
    // start from a known point: dev0 synchronized (every free completed); an inexact pool is
    // trimmed to nothing so its model is exact again
    if (!call(() => `dev0.synchronize()`, "ok", () => d0.synchronize()).ok) return;
    poolsDevSync();
    if (!defaultPool) defaultPool = { pool: d0.defaultPool, name: "dev0.defaultPool", shared: true, loose: true, threshold: 0, free: [], inUse: new Map(), exact: false, dead: false, peakR: 0, peakU: 0 };
    for (const p of pools) {
      if (!p || p.dead) continue;
      checkPool(p, "at the start of a pool step");
      if (!p.exact && !p.loose) {
        call(() => `${p.name}.trim(0)`, "ok", () => p.pool.trim(0));
        p.free = [];
        p.exact = true;
        checkPool(p, "after trim(0) of an inexact pool");
      }
    }
    const nOps = 1 + (w[0]! % 4);
    for (let k = 0; k < nOps; k++) {
      const ww = (j: number) => (w[(k + j) % 7]! * (k + 1) + j * 7919) >>> 0;
      const op = ww(1) % 12;
      if (op <= 3) {
        // alloc on a private stream from a custom pool or the default one
        const slot = ww(2) % pbufs.length;
        const old = pbufs[slot];
        if (old?.live) continue;
        const si = ww(3) % 2;
        const usePool = ww(4) % 3;
        let p: PPool | null = usePool < 2 ? pools[usePool] ?? null : defaultPool;
        if (usePool < 2 && !p) {
          newPool(usePool, ww(5));
          p = pools[usePool] ?? null;
        }
        if (!p) continue;
        const P = p;
        const bytes = pick([1, 4, 64, 200, 256, 1000, 4096, 5000, 65536], ww(6));
        const s = pstreamOf(si);
        const before = P.dead || P.loose ? null : statsOf(P);
        const name = `pb${pNo++}`;
        const r = call(() => `const ${name} = ps${si}.alloc(${bytes}${P.shared ? "" : `, { pool: ${P.name} }`})`, P.dead ? "err" : "ok", () => s.alloc(bytes, P.shared ? {} : { pool: P.pool }));
        if (!r.ok) {
          expectCode(r, [Status.INVALID_HANDLE], `alloc from a disposed pool`);
          continue;
        }
        const b = r.v;
        const addr = b.address;
        let size = roundUp(bytes);
        if (before) {
          const after = statsOf(P)!;
          const dU = after.used - before.used, dR = after.reserved - before.reserved;
          // the outcomes the rules allow: the best fit among blocks surely reusable by stream si,
          // or one that may be (freed on the other stream, its free perhaps completed), or fresh
          const R = roundUp(bytes);
          const sure = P.free.filter((x) => x.size >= R && (x.fs === si || x.done));
          const best = sure.reduce<PBlock | null>((m, x) => (!m || x.size < m.size ? x : m), null);
          const maybe = P.free.filter((x) => x.size >= R && !(x.fs === si || x.done) && (!best || x.size <= best.size));
          if (dR === 0) {
            const i = P.free.findIndex((x) => x.addr === addr);
            const blk = P.free[i]!;
            if (i < 0 || blk.size !== dU) fail("pool reuse", `${name} = alloc(${bytes}) on ps${si} reused memory at 0x${addr.toString(16)} (used +${dU}) that is no free block of the model (${P.free.map((x) => `0x${x.addr.toString(16)}:${x.size}${x.fs === si || x.done ? "" : "?"}`).join(" ")})`);
            // the shim takes the first smallest fitting block in list order: `best`, unless a
            // block that may be reusable fits at most as well
            const allowed = blk === best || maybe.includes(blk);
            if (P.exact && !allowed)
              fail("pool reuse", `${name} = alloc(${bytes}) on ps${si} got the ${blk.size}-byte block freed on ps${blk.fs}${blk.done ? "" : " (not yet completed)"}; the best fit it may have is ${best ? best.size : "none (fresh memory)"}`);
            P.free.splice(i, 1);
            size = blk.size;
          } else {
            if (dR !== R || dU !== R) fail("pool stats", `${name} = alloc(${bytes}): reserved +${dR}, used +${dU}; fresh memory is +${R} each`);
            if (P.exact && best) fail("pool reuse", `${name} = alloc(${bytes}) on ps${si} took fresh memory though the ${best.size}-byte block at 0x${best.addr.toString(16)} (freed on ps${best.fs}) was reusable`);
            // a block the inexact model still lists at this address was given back before
            P.free = P.free.filter((x) => x.addr + x.size <= addr || x.addr >= addr + R);
          }
          P.inUse.set(addr, size);
          P.peakU = Math.max(P.peakU, usedOf(P));
        } else if (P.loose) P.inUse.set(addr, size);
        const x: PBuf = { b, addr, bytes, size, pool: P, si, model: new Uint8Array(bytes), name, live: true };
        // new memory's bytes are unspecified: fill them on the allocating stream
        const v = ww(7) & 0xff;
        if (call(() => `ps${si}.fill(${name}, ${v}, { type: "u8" })`, "ok", () => s.fill(b, v, { type: "u8" })).ok) x.model.fill(v);
        pbufs[slot] = x;
      } else if (op <= 5) {
        // work on a live pool buffer, on its own stream: a fill of a part, or fz_add
        const x = pbufs[ww(2) % pbufs.length];
        if (!x?.live) continue;
        const s = pstreamOf(x.si);
        const md = c.mods[0];
        if (ww(3) % 2 && md?.live && x.bytes >= 4) {
          const n = Math.floor(x.bytes / 4), v = ww(4);
          const ok = call(() => `k0.launch(ps${x.si}, { grid: ${Math.ceil(n / 64)}, block: 64, args: [${x.name}, ${v >>> 0}, ${n}] })`, "ok",
            () => md.k.launch(s, { grid: Math.ceil(n / 64), block: 64, args: [x.b, v >>> 0, n] }));
          if (ok.ok) {
            const dv = new DataView(x.model.buffer);
            for (let i = 0; i < n; i++) dv.setUint32(i * 4, (dv.getUint32(i * 4, true) + (v >>> 0)) >>> 0, true);
          }
        } else {
          const off = ww(4) % x.bytes, n = ww(5) % (x.bytes - off + 1), v = ww(6) & 0xff;
          if (call(() => `ps${x.si}.fill(${x.name}, ${v}, { type: "u8", offset: ${off}, bytes: ${n} })`, "ok", () => s.fill(x.b, v, { type: "u8", offset: off, bytes: n })).ok)
            x.model.fill(v, off, off + n);
        }
      } else if (op <= 7) {
        // free: on its stream, on the other one after an event orders it, or by dispose()
        const x = pbufs[ww(2) % pbufs.length];
        if (!x?.live) continue;
        const how = ww(3) % 3;
        let fs = x.si;
        if (how === 1) {
          fs = 1 - x.si;
          const ev = devs[0]!.createEvent({ timing: false });
          call(() => `ps${fs}.wait(ps${x.si}.record())`, "ok", () => pstreamOf(fs).wait(ev.record(pstreamOf(x.si))));
          ev.dispose();
          call(() => `${x.name}.free(ps${fs})`, "ok", () => x.b.free(pstreamOf(fs)));
        } else if (how === 2) call(() => `${x.name}.dispose()`, "ok", () => x.b.dispose());
        else call(() => `${x.name}.free(ps${fs})`, "ok", () => x.b.free(pstreamOf(fs)));
        x.live = false;
        const P = x.pool;
        if (!P.dead) {
          P.inUse.delete(x.addr);
          if (!P.loose) P.free.unshift({ addr: x.addr, size: x.size, fs, done: false });
        }
        // freed twice, or freed as a view: refused
        if (ww(4) % 4 === 0) expectCode(call(() => `${x.name}.free(ps${fs}) /* again */`, "err", () => x.b.free(pstreamOf(fs))), [Status.INVALID_HANDLE, Status.INVALID_VALUE], "free twice");
      } else if (op === 8) {
        // trim, after a synchronize or not
        const p = pools[ww(2) % 2];
        if (!p || p.dead) continue;
        const keep = pick([0, 256, 1024, 5000, KEEP], ww(3));
        if (ww(4) % 2) {
          call(() => `dev0.synchronize()`, "ok", () => devs[0]!.synchronize());
          poolsDevSync();
        }
        call(() => `${p.name}.trim(${keep})`, "ok", () => p.pool.trim(keep));
        if (p.free.every((b) => b.done)) {
          if (p.exact) shrinkModel(p, keep);
        } else if (usedOf(p) + freeOf(p) > keep) p.exact = false;
        checkPool(p, `after ${p.name}.trim(${keep})`);
      } else if (op === 9) {
        // a synchronize: of a private stream, or of the device; the threshold applies
        const p = pools[ww(2) % 2];
        if (p && !p.dead && ww(3) % 3 === 0) {
          const t = pick([0, 512, 4096, KEEP], ww(4));
          call(() => `${p.name}.releaseThreshold = ${t}`, "ok", () => (p.pool.releaseThreshold = t));
          p.threshold = t;
        }
        if (ww(5) % 2) {
          const si = ww(6) % 2;
          if (call(() => `ps${si}.synchronize()`, "ok", () => pstreamOf(si).synchronize()).ok) poolsStreamSync(si);
        } else if (call(() => `dev0.synchronize()`, "ok", () => devs[0]!.synchronize()).ok) poolsDevSync();
        for (const q of pools) if (q && !q.dead) checkPool(q, "after a synchronize");
      } else if (op === 10) {
        // dispose a pool (its blocks in use stay valid until freed), or make one
        const i = ww(2) % 2;
        const p = pools[i];
        if (!p) {
          newPool(i, ww(3));
          continue;
        }
        if (p.dead) {
          pools[i] = null;
          continue;
        }
        call(() => `${p.name}.dispose()`, "ok", () => p.pool.dispose());
        p.dead = true;
        p.free = [];
        expectCode(call(() => `${p.name}.stats /* disposed */`, "err", () => p.pool.stats), [Status.INVALID_HANDLE], "stats of a disposed pool");
        expectCode(call(() => `ps0.alloc(64, { pool: ${p.name} }) /* disposed */`, "err", () => pstreamOf(0).alloc(64, { pool: p.pool })), [Status.INVALID_HANDLE], "alloc from a disposed pool");
        call(() => `${p.name}.dispose() /* again */`, "ok", () => p.pool.dispose());
      } else {
        // refused: sizes, a pool of another device, a view freed, a plain buffer freed, bad trims
        const s = pstreamOf(0);
        const cases: [string, () => unknown, number][] = [
          ["ps0.alloc(0)", () => s.alloc(0), Status.INVALID_VALUE],
          ["ps0.alloc(-1)", () => s.alloc(-1), Status.INVALID_VALUE],
          ["ps0.alloc(1.5)", () => s.alloc(1.5), Status.INVALID_VALUE],
          ["ps0.alloc(64, { pool: {} })", () => s.alloc(64, { pool: {} as never }), Status.INVALID_VALUE],
          ["new MemoryPool(dev0, { releaseThreshold: -1 })", () => new MemoryPool(devs[0]!, { releaseThreshold: -1 }), Status.INVALID_VALUE],
          ["new MemoryPool(dev0, { releaseThreshold: NaN })", () => new MemoryPool(devs[0]!, { releaseThreshold: NaN }), Status.INVALID_VALUE],
          ["ps0.alloc(64, { pool: dev1.defaultPool }) /* another device */", () => s.alloc(64, { pool: devs[1]!.defaultPool }), Status.INVALID_VALUE],
        ];
        const p = pools[ww(3) % 2];
        if (p && !p.dead) cases.push([`${p.name}.trim(-5)`, () => p.pool.trim(-5), Status.INVALID_VALUE]);
        const x = pbufs[ww(4) % pbufs.length];
        if (x?.live && x.bytes > 1) cases.push([`${x.name}.view(0, 1).free(ps0)`, () => x.b.view(0, 1).free(s), Status.INVALID_VALUE]);
        if (x?.live) cases.push([`${x.name}.free(dev1.defaultStream) /* another device's stream */`, () => x.b.free(devs[1]!.defaultStream), Status.INVALID_VALUE]);
        cases.push(["ps0.alloc(2 ** 50)", () => s.alloc(2 ** 50), Status.OUT_OF_MEMORY]);
        const [src, f, code] = cases[ww(2) % cases.length]!;
        expectCode(call(() => src, "err", f), [code], src);
      }
    }
    // end of the step: everything done; the model's bytes, stats and no overlap
    if (!call(() => `dev0.synchronize()`, "ok", () => devs[0]!.synchronize()).ok) return;
    poolsDevSync();
    for (const p of [...pools, defaultPool]) if (p && !p.dead) checkPool(p, "at the end of a pool step");
    checkPoolBufs("at the end of a pool step");
    for (let i = 0; i < pbufs.length; i++) if (pbufs[i] && !pbufs[i]!.live) pbufs[i] = null;
    for (let i = 0; i < 2; i++) if (pools[i]?.dead && !pbufs.some((x) => x?.live && x.pool === pools[i])) pools[i] = null;
  });

  // ================================================================================================
  // Communicators in one process: 2 or 3 ranks (dev0, dev1, and cpu:2 of BUNGPU_CPU_DEVICES=3).
  type CDtype = "int8" | "uint8" | "int32" | "uint32" | "int64" | "uint64" | "float32" | "float64";
  const CDTYPES: CDtype[] = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float32", "float64"];
  const CTYPED: Record<CDtype, { new (n: number): ArrayLike<number | bigint> & ArrayBufferView; BYTES_PER_ELEMENT: number }> = {
    int8: Int8Array, uint8: Uint8Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array as never, uint64: BigUint64Array as never, float32: Float32Array, float64: Float64Array,
  };
  const ROPS = ["sum", "prod", "max", "min", "avg"] as const;
  type ROp = (typeof ROPS)[number];
  const BAD_NAMES: unknown[] = ["constructor", "__proto__", "toString", "hasOwnProperty", "valueOf", "SUM", "", "float", 1, {}, "isPrototypeOf"];
  /** count elements of `dtype` for rank r, small enough that sums and products of 3 stay exact. */
  function collData(dtype: CDtype, count: number, w: number): Uint8Array {
    const T = CTYPED[dtype];
    const a = new T(count) as unknown as (number | bigint)[] & ArrayBufferView;
    const src = c.dataFor(count, w);
    const signed = !dtype.startsWith("u");
    for (let i = 0; i < count; i++) {
      const v = signed ? (src[i]! % 9) - 4 : src[i]! % 7;
      const val = dtype.startsWith("float") ? v / 2 : v;
      a[i] = dtype.endsWith("64") && !dtype.startsWith("float") ? BigInt(val) : val;
    }
    return new Uint8Array(a.buffer.slice(0));
  }
  /** The CPU backend's reduction (shim/cpu/collective.c), in rank order. */
  function reduceRef(dtype: CDtype, op: ROp, parts: Uint8Array[]): Uint8Array {
    const T = CTYPED[dtype];
    const n = parts.length;
    const view = (u: Uint8Array) => new (T as unknown as new (b: ArrayBuffer) => (number | bigint)[])(u.slice().buffer);
    const o = view(parts[0]!);
    const f32 = dtype === "float32";
    const big = typeof o[0] === "bigint" || dtype.endsWith("64") && !dtype.startsWith("float");
    for (let r = 1; r < n; r++) {
      const x = view(parts[r]!);
      for (let i = 0; i < o.length; i++) {
        const a = o[i]!, b = x[i]!;
        let v: number | bigint;
        switch (op) {
          case "sum": case "avg": v = big ? (a as bigint) + (b as bigint) : (a as number) + (b as number); break;
          case "prod": v = big ? (a as bigint) * (b as bigint) : (a as number) * (b as number); break;
          case "max": v = b > a ? b : a; break;
          default: v = b < a ? b : a;
        }
        o[i] = big ? v : f32 ? Math.fround(v as number) : v;
      }
    }
    if (op === "avg")
      for (let i = 0; i < o.length; i++) {
        const a = o[i]!;
        o[i] = big ? (a as bigint) / BigInt(n) : dtype.startsWith("float") ? (f32 ? Math.fround((a as number) / n) : (a as number) / n) : Math.trunc((a as number) / n);
      }
    return new Uint8Array((o as unknown as ArrayBufferView).buffer);
  }
  interface CollPlan {
    kind: "allReduce" | "broadcast" | "reduce" | "allGather" | "reduceScatter" | "ring";
    dtype: CDtype;
    op: ROp;
    root: number;
    count: number;
  }
  /** Per rank: the send bytes (null: none), the recv size, and what recv must hold after (null: untouched). */
  function collExpect(p: CollPlan, n: number, w: number): { send: (Uint8Array | null)[]; recvBytes: number[]; want: (Uint8Array | null)[] } {
    const es = CTYPED[p.dtype].BYTES_PER_ELEMENT, c1 = p.count * es;
    const sendN = p.kind === "reduceScatter" ? p.count * n : p.count;
    const send = Array.from({ length: n }, (_, r) => collData(p.dtype, sendN, (w + r * 7919) >>> 0));
    const recvBytes: number[] = [], want: (Uint8Array | null)[] = [];
    for (let r = 0; r < n; r++) {
      switch (p.kind) {
        case "allReduce": recvBytes.push(c1); want.push(reduceRef(p.dtype, p.op, send)); break;
        case "reduce": recvBytes.push(c1); want.push(r === p.root ? reduceRef(p.dtype, p.op, send) : null); break;
        case "broadcast": recvBytes.push(c1); want.push(send[p.root]!.slice()); break;
        case "allGather": {
          recvBytes.push(c1 * n);
          const all = new Uint8Array(c1 * n);
          send.forEach((s, q) => all.set(s, q * c1));
          want.push(all);
          break;
        }
        case "reduceScatter": recvBytes.push(c1); want.push(reduceRef(p.dtype, p.op, send.map((s) => s.slice(r * c1, (r + 1) * c1)))); break;
        case "ring": recvBytes.push(c1); want.push(send[(r + n - 1) % n]!.slice()); break;
      }
    }
    return { send: send.map((s, r) => (p.kind === "broadcast" && r !== p.root ? null : s)), recvBytes, want };
  }

  interface CommSet { comms: Communicator[]; devs: Device[]; name: string }
  let cset: CommSet | null = null;
  let dev2: Device | null = null;
  const cstreams = new Map<Device, Stream>();
  let cNo = 0;
  function commSet(w: number): CommSet | null {
    if (cset && cset.comms.some((x) => x.disposed)) {
      for (const x of cset.comms) call(() => `${cset!.name}[${x.rank}].dispose()`, "ok", () => x.dispose());
      cset = null;
    }
    if (cset) return cset;
    const n = c.backend === "cpu" ? 2 + (w % 2) : 2; // (a third CUDA device is not asked for)
    if (n === 3 && !dev2) {
      const r = call(() => `const dev2 = Device.open("${c.backend}:2")`, "ok", () => Device.open(`${c.backend}:2`));
      if (!r.ok) return null;
      dev2 = r.v;
    }
    const ds = [devs[0]!, devs[1]!, dev2!].slice(0, n);
    const name = `comms${cNo++}`;
    const r = call(() => `const ${name} = Communicator.initAll([dev0, dev1${n === 3 ? ", dev2" : ""}], { timeoutMs: 30000 })`, "ok", () => Communicator.initAll(ds, { timeoutMs: 30_000 }));
    if (!r.ok) return null;
    cset = { comms: r.v, devs: ds, name };
    return cset;
  }
  const streamFor = (d: Device, priv: boolean): Stream => {
    if (!priv) return d.defaultStream;
    let s = cstreams.get(d);
    if (!s || s.disposed) {
      s = d.createStream({ nonBlocking: true });
      cstreams.set(d, s);
    }
    return s;
  };
  /** Issue rank r's part of a collective plan on its communicator. */
  function issue(cm: Communicator, p: CollPlan, send: Buffer | null, recv: Buffer | null, stream: Stream, n: number): void {
    const o = { dtype: p.dtype, count: p.count, stream };
    const r = cm.rank;
    switch (p.kind) {
      case "allReduce": cm.allReduce(send!, recv!, { ...o, op: p.op }); break;
      case "broadcast": cm.broadcast(send, recv!, { ...o, root: p.root }); break;
      case "reduce": cm.reduce(send!, recv, { ...o, op: p.op, root: p.root }); break; // recv: null or untouched off the root
      case "allGather": cm.allGather(send!, recv!, o); break;
      case "reduceScatter": cm.reduceScatter(send!, recv!, { ...o, op: p.op }); break;
      case "ring":
        cm.send(send!, (r + 1) % n, o);
        cm.recv(recv!, (r + n - 1) % n, o);
        break;
    }
  }
  const planSrc = (p: CollPlan) => `${p.kind}(${p.dtype}, ${p.op}, root ${p.root}, count ${p.count})`;
  function makePlan(w: number[], n: number): CollPlan {
    const kind = pick(["allReduce", "allReduce", "broadcast", "reduce", "allGather", "reduceScatter", "ring"] as const, w[0]!);
    return { kind, dtype: pick(CDTYPES, w[1]!), op: pick(ROPS, w[2]!), root: w[3]! % n, count: 1 + (w[4]! % 40) };
  }
  const TAIL = 0xee;

  h("comm", "comm", 1.2, (w) => {
    if (c.anyCapture()) return;
    const cs = commSet(w[0]!);
    if (!cs) return;
    const n = cs.comms.length;
    const p = makePlan(w.slice(1), n);
    const ex = collExpect(p, n, w[6]!);
    const priv = w[0]! % 3 === 0;
    const grouped = p.kind === "ring" || w[5]! % 2 === 0;
    const mode = w[6]! % 8; // 0: a buffer disposed after its call, 1: a communicator disposed mid-group, 2: a bad call (alone or ending a group), 3: in place
    // in place (NCCL's rules): all-reduce send === recv; broadcast and reduce at the root send ===
    // recv; all-gather send = recv's own slice; reduce-scatter recv = send's own slice
    const inPlace = mode === 3 && p.kind !== "ring";
    const es = CTYPED[p.dtype].BYTES_PER_ELEMENT, c1 = p.count * es;
    // buffers: recv with a tail that must stay untouched. Per rank, the buffer read back after
    // (`checkB`: recv, or the whole buffer a slice of which is in place) and what it held before
    const tails = ex.recvBytes.map((_, r) => (w[4]! + r) % 9);
    const sendB: (Buffer | null)[] = [], recvB: (Buffer | null)[] = [], checkB: (Buffer | null)[] = [], before: Uint8Array[] = [], after: (Uint8Array | null)[] = [];
    for (let r = 0; r < n; r++) {
      const d = cs.devs[r]!;
      const s = ex.send[r];
      let sb: Buffer | null = null, rb: Buffer | null = null, ck: Buffer | null = null;
      let init = new Uint8Array(0), fin: Uint8Array | null = null;
      const whole = (b: Buffer, bytes: Uint8Array) => {
        b.write(bytes);
        init = bytes.slice();
        return b;
      };
      if (inPlace && p.kind === "allGather") {
        const all = new Uint8Array(n * c1 + tails[r]!).fill(TAIL);
        all.set(s!, r * c1);
        ck = rb = whole(d.alloc(all.length), all);
        sb = rb.view(r * c1, c1);
        fin = init.slice();
        fin.set(ex.want[r]!);
      } else if (inPlace && p.kind === "reduceScatter") {
        ck = sb = whole(d.alloc(s!.length), s!);
        rb = sb.view(r * c1, c1);
        fin = init.slice();
        fin.set(ex.want[r]!, r * c1);
      } else if (inPlace && (p.kind === "allReduce" || r === p.root)) {
        ck = rb = sb = whole(d.alloc(s!.length), s!);
        fin = ex.want[r]!;
      } else {
        if (s) sb = d.alloc(s.length).write(s);
        if (p.kind !== "reduce" || r === p.root || w[3]! % 2) {
          ck = rb = whole(d.alloc(ex.recvBytes[r]! + tails[r]!), new Uint8Array(ex.recvBytes[r]! + tails[r]!).fill(TAIL));
          fin = init.slice();
          if (ex.want[r]) fin.set(ex.want[r]!);
        }
      }
      sendB.push(sb);
      recvB.push(rb);
      checkB.push(ck);
      before.push(init);
      after.push(fin);
    }
    const streams = cs.devs.map((d) => streamFor(d, priv));
    const order = Array.from({ length: n }, (_, i) => i);
    if (w[2]! % 2) order.reverse();
    const src = `${cs.name}: ${planSrc(p)}${grouped ? " in a group" : ""}${priv ? " on private streams" : ""}${inPlace ? " in place" : ""}`;
    let disposedRecv = -1, disposedComm = -1, disposedDev = -1;
    const badAt = mode === 2 ? w[4]! % n : -1;
    const badKind = w[5]! % 8;
    const bad = (cm: Communicator, r: number): (() => void) => {
      const s = streams[r]!, sb = sendB[r] ?? recvB[r]!, rb = recvB[r] ?? sendB[r]!;
      switch (badKind) {
        case 0: return () => cm.allReduce(sb, rb, { op: pick(BAD_NAMES, w[6]!) as never, stream: s, dtype: p.dtype, count: p.count });
        case 1: return () => cm.allReduce(sb, rb, { dtype: pick(BAD_NAMES, w[6]!) as never, stream: s, count: p.count });
        case 2: return () => cm.broadcast(sb, rb, { root: pick([n, -1, 1.5, NaN, "0"], w[6]!) as never, stream: s, dtype: p.dtype, count: p.count });
        case 3: return () => cm.allReduce(sb, rb, { count: 1 << 20, stream: s, dtype: p.dtype });
        case 4: return () => cm.allReduce(sb, rb, { stream: streams[(r + 1) % n]!, dtype: p.dtype, count: p.count }); // another device's stream
        case 5: return () => cm.send(sb, n, { stream: s, dtype: p.dtype, count: p.count });
        case 6: return () => cm.reduce(sb, rb, { op: "constructor" as never, root: 0, stream: s, dtype: p.dtype, count: p.count });
        default: return () => cm.allGather(sb, (recvB[(r + 1) % n] ?? sendB[(r + 1) % n])!, { stream: s, dtype: p.dtype, count: p.count }); // a buffer of another device
      }
    };
    const body = () => {
      for (const r of order) {
        if (r === badAt && grouped) bad(cs.comms[r]!, r)();
        issue(cs.comms[r]!, p, sendB[r]!, recvB[r]!, streams[r]!, n);
        if (mode === 0 && r === w[3]! % n) {
          // disposed after its call was recorded (in a group: held until the group issues it) or
          // queued: freed behind the collective
          const which = w[4]! % 2 === 0 || !recvB[r] || inPlace ? sendB[r] : recvB[r];
          if (which) {
            which.dispose();
            if (which === recvB[r]) disposedRecv = r;
          }
        }
        if (grouped && mode === 1 && r === w[3]! % n) {
          if (r === 2 && w[4]! % 2 === 0) {
            // the rank's device (cpu:2, which only communicators use): it closes once the group
            // has issued the call
            cs.devs[2]!.dispose();
            if (cs.devs[2]!.disposed) fail("collective", `${src}: dev2.dispose() inside the group closed it before the group issued its collective`);
            disposedDev = 2;
          } else cs.comms[r]!.dispose();
          disposedComm = r;
        }
      }
    };
    if (mode === 2 && !grouped) {
      // one rank's bad call alone: nothing is issued, nothing changes
      const r = badAt;
      const res = call(() => `${cs.name}[${r}]: a bad call (${badKind})`, "err", bad(cs.comms[r]!, r));
      expectCode(res, [Status.INVALID_VALUE], `${cs.name}[${r}] bad call ${badKind}`);
    } else if (mode === 2) {
      // a bad call inside a group: the group is abandoned, none of its calls run
      const res = call(() => `Communicator.group(() => { ${src}, rank ${badAt}'s bad call (${badKind}) })`, "err", () => Communicator.group(body));
      expectCode(res, [Status.INVALID_VALUE], `a bad call in a group`);
    } else {
      const res = call(() => (grouped ? `Communicator.group(() => { ${src} })` : src), "ok", () => (grouped ? Communicator.group(body) : body()));
      if (!res.ok) return;
    }
    if (disposedDev >= 0) {
      if (!cs.devs[disposedDev]!.disposed) fail("collective", `${src}: dev${disposedDev}, disposed inside the group, is still open after it`);
      dev2 = null;
    }
    for (let r = 0; r < n; r++) if (r !== disposedDev) call(() => `${cs.name}[${r}] stream.synchronize()`, "ok", () => streams[r]!.synchronize());
    if (disposedComm < 0 && mode !== 2) for (const cm of cs.comms) call(() => `${cs.name}[${cm.rank}].check()`, "ok", () => cm.check());
    for (let r = 0; r < n; r++) {
      const ck = checkB[r];
      if (!ck || ck.disposed || r === disposedRecv || r === disposedDev) continue;
      const got = call(() => `${cs.name}[${r}] ${ck === recvB[r] ? "recv" : "send"}.read()`, "ok", () => ck.read(Uint8Array) as Uint8Array);
      if (!got.ok) continue;
      const want = mode === 2 ? before[r]! : after[r]!;
      const at = sameBytes(got.v, want);
      if (at >= 0) fail("collective", `${src}${mode === 2 ? " (refused: nothing may run)" : ""}${mode === 0 ? ` (rank ${w[3]! % n}'s ${disposedRecv >= 0 ? "recv" : "send"} buffer disposed after its call)` : mode === 1 ? ` (rank ${disposedComm}'s ${disposedDev >= 0 ? "device" : "communicator"} disposed mid-group)` : ""}: rank ${r} ${ck === recvB[r] ? "recv" : "send"} byte ${at} is ${got.v[at]}, want ${want[at]} (got ${hex(got.v)}, want ${hex(want)})`);
    }
    for (const b of [...sendB, ...recvB]) if (b && !b.isView) b.dispose();
    if (disposedComm >= 0) {
      for (const cm of cs.comms) cm.dispose();
      cset = null;
    }
    // a disposed communicator refuses calls
    if (disposedComm >= 0 && w[2]! % 2 === 0) {
      const cm = cs.comms[0]!, d = cs.devs[0]!;
      const b = d.alloc(8);
      expectCode(call(() => `${cs.name}[0].allReduce(...) /* disposed */`, "err", () => cm.allReduce(b, b, { dtype: "int32" })), [Status.INVALID_HANDLE, Status.INVALID_VALUE], "a disposed communicator");
      b.dispose();
    }
  });

  // ================================================================================================
  // Safetensors bytes: files written by this handler (valid, then maybe damaged), read by
  // readSafetensors / Tensor.fromSafetensors and compared with a reference reader written from the
  // format's rules here. Every case is a GpuError (INVALID_VALUE) or exactly the reference's read.
  const stDir = () => (stDirPath ??= tempDir("st"));
  let stDirPath: string | undefined;
  const ST_SIZE: Record<string, number> = { BOOL: 1, U8: 1, I8: 1, F8_E5M2: 1, F8_E4M3: 1, I16: 2, U16: 2, F16: 2, BF16: 2, I32: 4, U32: 4, F32: 4, I64: 8, U64: 8, F64: 8 };
  const ST_NAMES = ["w", "a.b", "__proto__", "constructor", "toString", "hasOwnProperty", "ü→", "x".repeat(300), "0", "10", "__metadata__x", "", " "];
  const ST_DTYPES = ["F32", "I32", "F16", "BF16", "I8", "U8", "BOOL", "I64", "U16", "I16", "U32", "U64", "F64", "F8_E4M3"];
  interface RefTensor { dtype: string; shape: number[]; data: Uint8Array }
  /** The reference reader: the format's rules as README and src/tensor/safetensors.ts state them. */
  function refRead(f: Uint8Array): { tensors: [string, RefTensor][]; metadata: Record<string, string> } | string {
    if (f.length < 8) return "short";
    const n = new DataView(f.buffer, f.byteOffset).getBigUint64(0, true);
    if (n > BigInt(f.length - 8) || n > 100_000_000n || n < 2n) return "header length";
    const hlen = Number(n), dataStart = 8 + hlen, dataLen = f.length - dataStart;
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(f.subarray(8, dataStart));
    } catch {
      return "utf-8";
    }
    if (text[0] !== "{") return "no {";
    let j: unknown;
    try {
      j = JSON.parse(text);
    } catch {
      return "json";
    }
    if (!j || typeof j !== "object" || Array.isArray(j)) return "not an object";
    const metadata: Record<string, string> = {};
    const ents: { name: string; dtype: string; shape: number[]; b: number; e: number }[] = [];
    for (const name of Object.keys(j)) {
      const v = (j as Record<string, unknown>)[name];
      if (name === "__metadata__") {
        if (!v || typeof v !== "object" || Array.isArray(v)) return "metadata";
        for (const k of Object.keys(v)) {
          const s = (v as Record<string, unknown>)[k];
          if (typeof s !== "string") return "metadata value";
          Object.defineProperty(metadata, k, { value: s, enumerable: true, writable: true, configurable: true });
        }
        continue;
      }
      if (!v || typeof v !== "object" || Array.isArray(v)) return "entry";
      const keys = Object.keys(v);
      if (keys.some((k) => k !== "dtype" && k !== "shape" && k !== "data_offsets")) return "field";
      const e = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
      if (typeof e.dtype !== "string" || !Object.hasOwn(ST_SIZE, e.dtype)) return "dtype";
      if (!Array.isArray(e.shape) || e.shape.length > 1024 || e.shape.some((d) => typeof d !== "number" || !Number.isSafeInteger(d) || d < 0)) return "shape";
      const off = e.data_offsets;
      if (!Array.isArray(off) || off.length !== 2 || off.some((d) => typeof d !== "number" || !Number.isSafeInteger(d) || d < 0)) return "offsets";
      const [b, en] = off as [number, number];
      if (en < b || en > dataLen) return "offsets range";
      let numel = 1n;
      for (const d of e.shape as number[]) numel *= BigInt(d);
      if (numel * BigInt(ST_SIZE[e.dtype]!) !== BigInt(en - b)) return "size";
      ents.push({ name, dtype: e.dtype, shape: [...(e.shape as number[])], b, e: en });
    }
    ents.sort((x, y) => x.b - y.b || x.e - y.e);
    let at = 0;
    for (const e of ents) {
      if (e.b !== at) return "tiling";
      at = e.e;
    }
    if (at !== dataLen) return "coverage";
    const tensors: [string, RefTensor][] = [];
    for (const e of ents) {
      const raw = f.slice(dataStart + e.b, dataStart + e.e);
      const conv = refConvert(e.dtype, raw);
      if (typeof conv === "string") return conv;
      tensors.push([e.name, { dtype: conv.dtype, shape: e.shape, data: conv.data }]);
    }
    return { tensors, metadata };
  }
  function refConvert(dtype: string, raw: Uint8Array): { dtype: string; data: Uint8Array } | string {
    const own: Record<string, string> = { F32: "float32", I32: "int32", F16: "float16", BF16: "bfloat16", I8: "int8", U8: "uint8", I64: "int64" };
    if (Object.hasOwn(own, dtype)) return { dtype: own[dtype]!, data: raw };
    const buf = raw.buffer;
    switch (dtype) {
      case "BOOL": return { dtype: "bool", data: raw.map((x) => (x ? 1 : 0)) };
      case "U16": return { dtype: "int32", data: bytesOf(Int32Array.from(new Uint16Array(buf))) };
      case "I16": return { dtype: "int32", data: bytesOf(Int32Array.from(new Int16Array(buf))) };
      case "U32": return { dtype: "int64", data: bytesOf(BigInt64Array.from(new Uint32Array(buf), (x) => BigInt(x))) };
      case "U64": {
        const s = new BigUint64Array(buf);
        if (s.some((x) => x > 0x7fffffffffffffffn)) return "u64 range";
        return { dtype: "int64", data: bytesOf(BigInt64Array.from(s, (x) => BigInt.asIntN(64, x))) };
      }
      case "F64": {
        const s = new Float64Array(buf);
        const o = Float32Array.from(s);
        for (let i = 0; i < s.length; i++) if (o[i] !== s[i] && !(Number.isNaN(o[i]) && Number.isNaN(s[i]))) return "f64 inexact";
        return { dtype: "float32", data: bytesOf(o) };
      }
      default: return "no conversion";
    }
  }
  /** A valid file's bytes (written by hand, so names such as __proto__ stay keys), data in order. */
  function stFile(w: number[]): Uint8Array {
    const k = w[0]! % 5;
    const parts: string[] = [];
    const datas: Uint8Array[] = [];
    let at = 0;
    const used = new Set<string>();
    for (let i = 0; i < k; i++) {
      const wi = (w[1]! + i * 2654435761) >>> 0;
      const name = pick(ST_NAMES, wi) + (wi % 3 === 0 ? "" : String(i));
      if (used.has(name) || name === "__metadata__") continue;
      used.add(name);
      let dtype = pick(ST_DTYPES, wi >>> 4);
      const rank = (wi >>> 8) % 4;
      const shape = Array.from({ length: rank }, (_, d) => ((wi >>> (10 + d * 3)) % 5) === 4 ? 0 : ((wi >>> (10 + d * 3)) % 4) + 1);
      const numel = shape.reduce((a, b) => a * b, 1);
      const data = c.dataFor(numel * ST_SIZE[dtype]!, wi ^ 0x5bd1e995);
      if (dtype === "F64" && (wi & 1)) {
        // values that are float32 exactly (convertible)
        const f = new Float64Array(numel).map((_, j) => (j % 7) - 3.5);
        data.set(bytesOf(f));
      }
      if (dtype === "U64" && (wi & 2)) data.forEach((_, j) => j % 8 === 7 && (data[j]! &= 0x7f));
      if (dtype === "F8_E4M3" && (wi & 4)) dtype = "U8";
      parts.push(`${JSON.stringify(name)}:{"dtype":"${dtype}","shape":[${shape.join(",")}],"data_offsets":[${at},${at + data.length}]}`);
      datas.push(data);
      at += data.length;
    }
    if (w[2]! % 3 === 0) parts.splice(w[2]! % (parts.length + 1), 0, `"__metadata__":{"format":"pt",${JSON.stringify(pick(ST_NAMES, w[3]!))}:"v","__proto__":"p"}`);
    let head = `{${parts.join(",")}}`;
    head += " ".repeat((8 - (new TextEncoder().encode(head).length % 8)) % 8);
    const hb = new TextEncoder().encode(head);
    const f = new Uint8Array(8 + hb.length + at);
    new DataView(f.buffer).setBigUint64(0, BigInt(hb.length), true);
    f.set(hb, 8);
    let p = 8 + hb.length;
    for (const d of datas) {
      f.set(d, p);
      p += d.length;
    }
    return f;
  }
  /** Damage: a flipped byte, a cut, extra bytes, an edited length or header. */
  function stDamage(f: Uint8Array, w: number[]): { f: Uint8Array; how: string } {
    const kind = w[0]! % 12;
    const hlen = Number(new DataView(f.buffer).getBigUint64(0, true));
    const head = new TextDecoder().decode(f.subarray(8, 8 + hlen));
    const rebuild = (h: string, data = f.subarray(8 + hlen)) => {
      const hb = new TextEncoder().encode(h);
      const o = new Uint8Array(8 + hb.length + data.length);
      new DataView(o.buffer).setBigUint64(0, BigInt(hb.length), true);
      o.set(hb, 8);
      o.set(data, 8 + hb.length);
      return o;
    };
    switch (kind) {
      case 0: case 1: {
        const g = f.slice();
        const i = w[1]! % g.length;
        g[i] = (g[i]! ^ (1 + (w[2]! % 255))) & 0xff;
        return { f: g, how: `byte ${i} flipped` };
      }
      case 2: {
        const n = w[1]! % f.length;
        return { f: f.slice(0, n), how: `cut to ${n} bytes` };
      }
      case 3: return { f: Uint8Array.from([...f, ...c.dataFor(1 + (w[1]! % 9), w[2]!)]), how: "bytes appended" };
      case 4: {
        const g = f.slice();
        const v = pick([0n, 1n, 2n, BigInt(hlen - 1), BigInt(hlen + 1), BigInt(f.length), 1n << 40n, 1n << 63n, (1n << 64n) - 1n, 100_000_001n], w[1]!);
        new DataView(g.buffer).setBigUint64(0, v, true);
        return { f: g, how: `header length ${v}` };
      }
      case 5: return { f: rebuild(head.replace(/"data_offsets":\[(\d+),(\d+)\]/, (_, a, b) => `"data_offsets":[${Math.max(0, Number(a) - 1 - (w[1]! % 3))},${b}]`)), how: "offsets overlap" };
      case 6: return { f: rebuild(head.replace(/"shape":\[[^\]]*\]/, pick([`"shape":[1099511627776,1099511627776]`, `"shape":[9007199254740991,2]`, `"shape":[-1]`, `"shape":[1.5]`, `"shape":["2"]`, `"shape":[${Array(1100).fill(1).join(",")}]`, `"shape":[0,9007199254740993]`, `"shape":{}`], w[1]!))), how: "shape edited" };
      case 7: return { f: rebuild(head.replace(/"dtype":"[A-Z0-9_]*"/, `"dtype":${JSON.stringify(pick(["constructor", "__proto__", "toString", "f32", "F32 ", "", "valueOf", "F8_E5M2"], w[1]!))}`)), how: "dtype edited" };
      case 8: return { f: rebuild(head.replace(/"data_offsets":\[(\d+),(\d+)\]/, pick([`"data_offsets":[0,18446744073709551616]`, `"data_offsets":[0,1e300]`, `"data_offsets":[5,2]`, `"data_offsets":[0]`, `"data_offsets":[0,0,0]`, `"data_offsets":null`, `"data_offsets":[0,9007199254740991]`], w[1]!))), how: "offsets edited" };
      case 9: return { f: rebuild(pick([` ${head}`, `\ufeff${head}`, `[${head}]`, `{"__metadata__":[],${head.slice(1)}`, `{"__metadata__":{"a":1},${head.slice(1)}`, `{"extra":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"more":1},${head.slice(1)}`, `${"[".repeat(5000)}`, `{"__proto__":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},${head.slice(1)}`], w[1]!)), how: "header edited" };
      case 10: {
        const g = f.slice();
        if (hlen > 2) g[8 + 1 + (w[1]! % (hlen - 2))] = pick([0xff, 0xc0, 0x80, 0x00], w[2]!);
        return { f: g, how: "a non-UTF-8 or NUL byte in the header" };
      }
      default: return { f, how: "undamaged" };
    }
  }
  function sameRead(got: { tensors: Map<string, SafetensorsEntry>; metadata: Record<string, string> }, want: Exclude<ReturnType<typeof refRead>, string>, what: string): void {
    const names = [...got.tensors.keys()];
    const wantNames = want.tensors.map(([n]) => n);
    if (JSON.stringify(names) !== JSON.stringify(wantNames)) fail("safetensors", `${what}: tensors ${JSON.stringify(names)}, the reference reads ${JSON.stringify(wantNames)}`);
    for (const [name, t] of want.tensors) {
      const g = got.tensors.get(name)!;
      if (g.dtype !== t.dtype || JSON.stringify(g.shape) !== JSON.stringify(t.shape)) fail("safetensors", `${what}: ${JSON.stringify(name)} is ${g.dtype} ${JSON.stringify(g.shape)}, want ${t.dtype} ${JSON.stringify(t.shape)}`);
      const at = sameBytes(bytesOf(g.data), t.data);
      if (at >= 0) fail("safetensors", `${what}: ${JSON.stringify(name)} byte ${at} differs from the file's`);
    }
    const mk = Object.keys(got.metadata), wk = Object.keys(want.metadata);
    if (JSON.stringify(mk) !== JSON.stringify(wk) || mk.some((k) => !Object.hasOwn(got.metadata, k) || got.metadata[k] !== want.metadata[k]))
      fail("safetensors", `${what}: metadata ${JSON.stringify(mk)}, want ${JSON.stringify(wk)}`);
  }
  let stNo = 0;
  h("safetensors", "safetensors", 1, (w) => {
    const path = join(stDir(), `f${stNo++ % 4}.safetensors`);
    const op = w[0]! % 8;
    if (op === 7 && w[5]! % 3 === 0) {
      // the writer refuses what is no tensor of this project, and names it cannot write
      const bad: [string, SafetensorsEntry][] = [
        ["x", { dtype: pick(["constructor", "__proto__", "toString", "F32", "float64"], w[6]!) as never, shape: [1], data: Int32Array.of(1) }],
        ["x", { dtype: "int32", shape: [1], data: Float32Array.of(1) as never }],
        [pick(["", "__metadata__"], w[6]!), { dtype: "int32", shape: [1], data: Int32Array.of(1) }],
      ];
      const [name, e] = pick(bad, w[1]!);
      expectCode(call(() => `writeSafetensors(path, new Map([[${JSON.stringify(name)}, { dtype: ${JSON.stringify(e.dtype)}, data: ${e.data.constructor.name} }]]))`, "err", () => writeSafetensors(path, new Map([[name, e]]))), [Status.INVALID_VALUE], "a bad entry written");
      return;
    }
    if (op === 7) {
      // a round trip through the writer: names such as __proto__ survive both ways
      const m = new Map<string, SafetensorsEntry>();
      const n = 1 + (w[1]! % 3);
      for (let i = 0; i < n; i++) m.set(pick(ST_NAMES.filter(Boolean), w[2]! + i), { dtype: "int32", shape: [2], data: Int32Array.of(i, w[3]! | 0) });
      const meta: Record<string, string> = {};
      Object.defineProperty(meta, pick(["__proto__", "constructor", "m"], w[4]!), { value: "x", enumerable: true, writable: true, configurable: true });
      const r = call(() => `writeSafetensors("${path}", …${m.size} tensors named ${JSON.stringify([...m.keys()].map((k) => k.slice(0, 12)))})`, "ok", () => writeSafetensors(path, m, meta));
      if (!r.ok) return;
      const back = call(() => `Tensor.fromSafetensors("${path}")`, "ok", () => Tensor.fromSafetensors(path));
      if (back.ok) {
        const keys = Object.keys(back.v);
        if (JSON.stringify(keys.sort()) !== JSON.stringify([...m.keys()].sort()) || [...m.keys()].some((k) => !Object.hasOwn(back.v, k) || !(back.v[k] instanceof Tensor)))
          fail("safetensors", `round trip of ${JSON.stringify([...m.keys()])}: fromSafetensors gave own keys ${JSON.stringify(keys)}`);
      }
      const md = call(() => `Tensor.safetensorsMetadata("${path}")`, "ok", () => Tensor.safetensorsMetadata(path));
      if (md.ok && JSON.stringify(Object.keys(md.v)) !== JSON.stringify(Object.keys(meta))) fail("safetensors", `metadata round trip: ${JSON.stringify(Object.keys(md.v))}, want ${JSON.stringify(Object.keys(meta))}`);
      return;
    }
    const file = stFile(w.slice(1));
    const { f, how } = op < 2 ? { f: file, how: "undamaged" } : stDamage(file, w.slice(3));
    writeFileSync(path, f);
    const want = refRead(f);
    const what = `a ${f.length}-byte file (${how})`;
    const r = call(() => `readSafetensors("${path}") /* ${what}; the reference says ${typeof want === "string" ? `refused: ${want}` : "ok"} */`, typeof want === "string" ? "err" : "ok", () => readSafetensors(path));
    if (!r.ok) {
      expectCode(r, [Status.INVALID_VALUE], what);
      // a dtype refused for what it is (Object.prototype's names are no dtypes, not NaN-byte sizes)
      if (want === "dtype" && !/dtype/.test(r.e.message)) fail("safetensors", `${what}: refused as ${r.e.message}; the reference refuses its dtype`);
      return;
    }
    sameRead(r.v, want as Exclude<typeof want, string>, what);
    if (w[2]! % 4 === 0) {
      const t = call(() => `Tensor.fromSafetensors("${path}")`, "ok", () => Tensor.fromSafetensors(path));
      if (t.ok) {
        const names = (want as Exclude<typeof want, string>).tensors.map(([n]) => n);
        if (Object.keys(t.v).length !== names.length || names.some((n) => !Object.hasOwn(t.v, n)))
          fail("safetensors", `${what}: Tensor.fromSafetensors gave own keys ${JSON.stringify(Object.keys(t.v))}, want ${JSON.stringify(names)}`);
      }
    }
  });

  // ================================================================================================
  // The second process (test/fuzz/peer.ts), over two FIFOs; every answer within PEER_MS.
  const PEER_MS = 30_000;
  let peer: { proc: ReturnType<typeof Bun.spawn>; w: number; r: number; pending: string } | null = null;
  let peerBroken = false;
  function startPeer(): boolean {
    if (peer) return true;
    if (peerBroken || process.platform !== "linux") return false;
    const dir = tempDir("peer");
    const req = join(dir, "req"), resp = join(dir, "resp");
    if (Bun.spawnSync(["mkfifo", req, resp]).exitCode !== 0) {
      peerBroken = true;
      return false;
    }
    const r = openSync(resp, constants.O_RDONLY | constants.O_NONBLOCK);
    const env = { ...process.env, BUNGPU_LIB: loadInfo.path, BUNGPU_CPU_DEVICES: "1" } as Record<string, string>;
    const proc = Bun.spawn([process.execPath, join(import.meta.dir, "peer.ts"), req, resp], { env, stdout: "ignore", stderr: "inherit" });
    let wfd = -1;
    const t0 = Date.now();
    while (wfd < 0) {
      try {
        wfd = openSync(req, constants.O_WRONLY | constants.O_NONBLOCK);
      } catch (e) {
        if ((e as { code?: string }).code !== "ENXIO") throw e;
        if (Date.now() - t0 > PEER_MS || !peerAlive(proc.pid)) fail("peer", "the peer process did not start");
        Bun.sleepSync(1);
      }
    }
    peer = { proc, w: wfd, r, pending: "" };
    L(() => `// the peer process started (pid ${proc.pid})`);
    return true;
  }
  /** Whether the peer still runs (its exit code is only set by the event loop, which a synchronous driver never turns). */
  function peerAlive(pid: number): boolean {
    try {
      const st = readFileSync(`/proc/${pid}/stat`, "utf8");
      return st.slice(st.lastIndexOf(")") + 2)[0] !== "Z";
    } catch {
      return false;
    }
  }
  const rbuf = new Uint8Array(1 << 20);
  /** One request to the peer and its answer (the driver is synchronous: it polls the FIFO). */
  function ask(msg: Record<string, unknown>): Record<string, unknown> {
    const p = peer!;
    const out = globalThis.Buffer.from(JSON.stringify(msg) + "\n");
    const t0 = Date.now();
    let at = 0;
    while (at < out.length) {
      try {
        at += writeSync(p.w, out, at, out.length - at);
      } catch (e) {
        if ((e as { code?: string }).code !== "EAGAIN") fail("peer", `writing to the peer: ${(e as Error).message}`);
        if (Date.now() - t0 > PEER_MS) fail("peer", `the peer took no request for ${PEER_MS} ms (${String(msg.op)})`);
        Bun.sleepSync(0.2);
      }
    }
    for (;;) {
      const nl = p.pending.indexOf("\n");
      if (nl >= 0) {
        const line = p.pending.slice(0, nl);
        p.pending = p.pending.slice(nl + 1);
        const rep = JSON.parse(line) as Record<string, unknown>;
        if (rep.fatal) fail("peer", `the peer threw on ${String(msg.op)}: ${String(rep.fatal)}`);
        return rep;
      }
      let n = 0;
      try {
        n = readSync(p.r, rbuf);
      } catch (e) {
        if (e instanceof Error && (e as { code?: string }).code !== "EAGAIN") throw e;
      }
      if (n === 0) {
        // (0 also while the peer has not yet opened its end for writing)
        if (!peerAlive(p.proc.pid)) fail("peer", `the peer process ended during ${String(msg.op)}`);
        if (Date.now() - t0 > PEER_MS) fail("hang", `the peer did not answer ${String(msg.op)} within ${PEER_MS} ms`);
        Bun.sleepSync(0.2);
        continue;
      }
      p.pending += new TextDecoder().decode(rbuf.subarray(0, n));
    }
  }
  const peerOk = (rep: Record<string, unknown>, what: string) => {
    if (!rep.ok) fail("peer", `${what}: the peer answered ${JSON.stringify(rep).slice(0, 300)}`);
    return rep;
  };

  // ---- IPC handles: the peer's shareable buffers opened here, genuine and altered -------------------
  interface Shared { id: number; handle: string; size: number; model: Uint8Array; opens: Buffer[]; gone: boolean; name: string }
  const shared: (Shared | null)[] = [null, null, null];
  let ipcNo = 0;
  const IPC_REFUSED = [Status.INVALID_HANDLE, Status.INVALID_VALUE];
  /** A handle string altered: a byte of its 96 changed, a field edited, cut, lengthened. */
  function alter(handle: string, w: number[], event = false): { h: string | Uint8Array; how: string; codes: number[] } {
    const bytes = new Uint8Array(globalThis.Buffer.from(handle.slice(6), "base64url"));
    const enc = (u: Uint8Array) => "bgipc:" + globalThis.Buffer.from(u).toString("base64url");
    const k = w[0]! % 10;
    const g = bytes.slice();
    const dv = new DataView(g.buffer);
    switch (k) {
      case 0: case 1: {
        const i = w[1]! % 96;
        g[i] = (g[i]! ^ (1 + (w[2]! % 255))) & 0xff;
        // a pid changed into this process's own is refused as INVALID_CONTEXT
        return { h: enc(g), how: `byte ${i} changed`, codes: [...IPC_REFUSED, Status.INVALID_CONTEXT, Status.NOT_PERMITTED] };
      }
      case 2: {
        const size = Number(dv.getBigUint64(16, true));
        const v = pick([size + 1, size - 1, size * 2, size + 4096, 1, 4096, 2 ** 40, 2 ** 63], w[1]!);
        if (v === size || v < 0) return { h: handle + "A", how: "a character appended", codes: [Status.INVALID_VALUE] };
        dv.setBigUint64(16, BigInt(Math.min(v, 2 ** 63)) & ((1n << 64n) - 1n), true);
        // an event's handle names no size: the exporter writes 0 there
        return { h: enc(g), how: `size field ${size} -> ${v}`, codes: v === 0 || event ? [Status.INVALID_VALUE] : [Status.INVALID_HANDLE] };
      }
      case 3: return { h: handle.slice(0, handle.length - 1 - (w[1]! % 8)), how: "cut", codes: [Status.INVALID_VALUE] };
      case 4: return { h: handle + pick(["A", "Q", "AA", "-", "=", " ", "\n", "é"], w[1]!), how: "extra characters", codes: [Status.INVALID_VALUE] };
      case 5: {
        const i = 6 + (w[1]! % (handle.length - 6));
        const ch = pick(["A", "_", "-", "+", "/", "=", "z"], w[2]!);
        if (handle[i] === ch) return { h: " " + handle, how: "a leading space", codes: [Status.INVALID_VALUE] };
        return { h: handle.slice(0, i) + ch + handle.slice(i + 1), how: `character ${i} replaced by ${ch}`, codes: [...IPC_REFUSED, Status.INVALID_CONTEXT, Status.NOT_PERMITTED] };
      }
      case 6: return { h: pick([bytes.slice(0, 95), Uint8Array.from([...bytes, 0]), new Uint8Array(96)], w[1]!), how: "bytes of the wrong length, or zeros", codes: [Status.INVALID_VALUE] };
      case 7: {
        dv.setUint32(4, pick([event ? 1 : 2, 0, 3, 0xffffffff], w[1]!), true); // kind: the other kind, or none
        return { h: enc(g), how: "kind edited", codes: [Status.INVALID_VALUE] };
      }
      case 8: {
        dv.setUint32(32, (dv.getUint32(32, true) + 1 + (w[1]! % 5)) >>> 0, true); // the memfd number
        return { h: enc(g), how: "fd edited", codes: [Status.INVALID_HANDLE] };
      }
      default: {
        dv.setBigUint64(40, dv.getBigUint64(40, true) + 1n + BigInt(w[1]! % 3), true); // the allocation id
        return { h: enc(g), how: "id edited", codes: [Status.INVALID_HANDLE] };
      }
    }
  }
  function sharedCheck(s: Shared, b: Buffer, what: string): void {
    const r = call(() => `${s.name}.read()`, "ok", () => b.read(Uint8Array) as Uint8Array);
    if (!r.ok) return;
    const at = sameBytes(r.v, s.model);
    if (at >= 0) fail("corrupted byte", `${what}: opened ${s.name} (${s.size} bytes) byte ${at} is ${r.v[at]}, the exporter's model says ${s.model[at]}`);
  }
  let ipcSt: Stream | null = null;
  /** The stream IPC and cross-process collectives use (not the pool handler's: its syncs are modelled). */
  const ipcStream = (): Stream => (ipcSt && !ipcSt.disposed ? ipcSt : (ipcSt = devs[0]!.createStream({ nonBlocking: true })));
  let ipcSteps = 0;
  const IPC_BUDGET = 40 + Math.floor(c.calls / 2_000);
  h("ipc", "ipc", 0.6, (w) => {
    if (ipcSteps >= IPC_BUDGET || c.anyCapture()) return;
    if (!startPeer()) return;
    ipcSteps++;
    const d0 = devs[0]!;
    const i = w[0]! % shared.length;
    let s = shared[i];
    if (!s || s.gone) {
      if (s) for (const b of s.opens) call(() => `${s!.name}.dispose()`, "ok", () => b.dispose());
      const size = pick([1, 100, 4096, 8192, 70_000], w[1]!);
      const data = c.dataFor(size, w[2]!);
      const rep = peerOk(ask({ op: "alloc", data: b64(data) }), "alloc");
      s = shared[i] = { id: rep.id as number, handle: rep.handle as string, size, model: data, opens: [], gone: false, name: `sh${ipcNo++}` };
    }
    const S = s;
    const op = w[3]! % 9;
    if (op <= 1 || S.opens.length === 0) {
      // the genuine handle: opened, exactly the allocation; a second open is the same mapping
      const r = call(() => `const ${S.name} = dev0.openSharedBuffer(${S.name}Handle)`, "ok", () => d0.openSharedBuffer(S.handle));
      if (!r.ok) return;
      if (r.v.byteLength !== S.size) fail("ipc", `${S.name} opened as ${r.v.byteLength} bytes; the exporter allocated ${S.size}`);
      if (S.opens.length && r.v.address !== S.opens[0]!.address) fail("ipc", `${S.name} opened twice at two addresses (one counted mapping expected)`);
      S.opens.push(r.v);
      sharedCheck(S, r.v, "after an open");
    } else if (op === 2) {
      // written here, read by the exporter
      const b = S.opens[w[4]! % S.opens.length]!;
      const off = w[5]! % S.size, n = 1 + (w[6]! % (S.size - off));
      const data = c.dataFor(n, w[6]!);
      if (call(() => `${S.name}.write(data(${n}), { offset: ${off} })`, "ok", () => b.write(data, { offset: off })).ok) S.model.set(data, off);
      const rep = peerOk(ask({ op: "read", id: S.id }), "read");
      const got = unb64(rep.data as string);
      const at = sameBytes(got, S.model);
      if (at >= 0) fail("corrupted byte", `the exporter reads ${S.name} byte ${at} as ${got[at]} after this process wrote ${S.model[at]}`);
    } else if (op === 3) {
      // written by the exporter, read here
      const off = w[5]! % S.size, n = 1 + (w[6]! % (S.size - off));
      const data = c.dataFor(n, w[4]!);
      peerOk(ask({ op: "write", id: S.id, off, data: b64(data) }), "write");
      S.model.set(data, off);
      sharedCheck(S, S.opens[0]!, "after the exporter wrote");
    } else if (op <= 5) {
      // an altered handle: refused with the code the shim uses, never opened; the genuine one still
      // works, opened before it or (every other time) only after it
      const fresh = w[6]! % 2 === 0;
      if (fresh) for (const b of S.opens.splice(0)) call(() => `${S.name}.dispose()`, "ok", () => b.dispose());
      const a = alter(S.handle, w.slice(4));
      const r = call(() => `dev0.openSharedBuffer(${S.name}Handle /* ${a.how} */)`, "err", () => d0.openSharedBuffer(a.h as string));
      expectCode(r, a.codes, `an altered handle (${a.how})`);
      if (w[6]! % 3 === 0) expectCode(call(() => `dev0.openSharedEvent(${S.name}Handle /* a buffer's handle */)`, "err", () => d0.openSharedEvent(S.handle)), [Status.INVALID_VALUE], "a buffer's handle opened as an event");
      if (fresh) {
        const g = call(() => `const ${S.name} = dev0.openSharedBuffer(${S.name}Handle) /* after the altered one */`, "ok", () => d0.openSharedBuffer(S.handle));
        if (!g.ok) return;
        if (g.v.byteLength !== S.size) fail("ipc", `${S.name} opened after an altered handle (${a.how}) as ${g.v.byteLength} bytes; the exporter allocated ${S.size}`);
        S.opens.push(g.v);
      }
      sharedCheck(S, S.opens[0]!, `after an altered handle (${a.how}) was refused`);
    } else if (op === 6) {
      // close one open (the mapping stays while another is open)
      const b = S.opens.pop()!;
      call(() => `${S.name}.dispose()`, "ok", () => b.dispose());
      expectCode(call(() => `${S.name}.read() /* closed */`, "err", () => b.read()), [Status.INVALID_HANDLE, Status.INVALID_VALUE, Status.DEINITIALIZED, Status.ILLEGAL_STATE], "a read of a closed shared buffer");
      if (S.opens.length) sharedCheck(S, S.opens[0]!, "after one of two opens closed");
    } else if (op === 7) {
      // the exporter frees it: an open mapping stays readable; a new open of the stale handle is refused
      peerOk(ask({ op: "free", id: S.id }), "free");
      S.gone = true;
      for (const b of S.opens) sharedCheck(S, b, "after the exporter freed it");
      for (const b of S.opens.splice(0)) call(() => `${S.name}.dispose()`, "ok", () => b.dispose());
      expectCode(call(() => `dev0.openSharedBuffer(${S.name}Handle /* freed by its exporter */)`, "err", () => d0.openSharedBuffer(S.handle)), [Status.INVALID_HANDLE], "a stale handle");
    } else {
      // an interprocess event of the peer orders its fill before this process's copy
      const ev = peerOk(ask({ op: "event" }), "event");
      const opened = call(() => `const ev = dev0.openSharedEvent(peerEventHandle)`, "ok", () => d0.openSharedEvent(ev.handle as string));
      const a = alter(ev.handle as string, w.slice(4), true);
      expectCode(call(() => `dev0.openSharedEvent(peerEventHandle /* ${a.how} */)`, "err", () => d0.openSharedEvent(a.h as string)), a.codes, `an altered event handle (${a.how})`);
      if (opened.ok) {
        const v = w[5]! & 0xff;
        peerOk(ask({ op: "fillrec", buf: S.id, ev: ev.id, value: v }), "fillrec");
        S.model.fill(v);
        const st = ipcStream();
        const local = d0.alloc(S.size);
        const r = call(() => `ipcStream.wait(ev); ipcStream.copy(local, ${S.name}); ipcStream.synchronize()`, "ok", () => {
          st.wait(opened.v);
          st.copy(local, S.opens[0]!);
          st.synchronize();
        });
        if (r.ok) {
          const got = local.read(Uint8Array) as Uint8Array;
          const at = sameBytes(got, S.model);
          if (at >= 0) fail("ipc event", `a copy ordered after the peer's event record saw byte ${at} = ${got[at]}, not the ${v} filled before the record`);
        }
        local.dispose();
        call(() => `ev.synchronize(); ev.dispose()`, "ok", () => {
          opened.v.synchronize();
          opened.v.dispose();
        });
      }
      peerOk(ask({ op: "evfree", id: ev.id }), "evfree");
    }
  });

  // ---- IPC the other way: this process exports, the peer opens (genuine and altered) ---------------
  let mine: { b: Buffer; handle: string; model: Uint8Array } | null = null;
  h("ipc.export", "ipc", 0.2, (w) => {
    if (ipcSteps >= IPC_BUDGET || c.anyCapture()) return;
    if (!startPeer()) return;
    ipcSteps++;
    if (!mine || w[0]! % 5 === 0) {
      mine?.b.dispose();
      const size = pick([8, 4096, 5000], w[1]!);
      const b = devs[0]!.alloc(size, { shareable: true });
      const model = c.dataFor(size, w[2]!);
      b.write(model);
      mine = { b, handle: b.exportHandle(), model };
      expectCode(call(() => `dev0.openSharedBuffer(myHandle) /* the exporting process */`, "err", () => devs[0]!.openSharedBuffer(mine!.handle)), [Status.INVALID_CONTEXT], "a handle opened in its exporting process");
    }
    const M = mine;
    const altered = w[3]! % 2 === 1;
    const a = altered ? alter(M.handle, w.slice(4)) : null;
    const h1 = a ? (typeof a.h === "string" ? a.h : "bgipc:" + globalThis.Buffer.from(a.h).toString("base64url")) : M.handle;
    const rep = ask({ op: "open", handle: h1 });
    if (a) {
      if (rep.ok) fail("ipc", `the peer opened this process's altered handle (${a.how}) as ${String(rep.bytes)} bytes`);
      const codes = a.codes.includes(Status.INVALID_CONTEXT) ? [...a.codes, Status.INVALID_CONTEXT] : a.codes;
      if (!codes.includes(rep.err as number) && !(typeof a.h !== "string" && rep.err === Status.INVALID_VALUE)) fail("wrong error code", `the peer refused an altered handle (${a.how}) with ${String(rep.err)}: ${String(rep.message)}`);
      return;
    }
    peerOk(rep, "open");
    if (rep.bytes !== M.model.length) fail("ipc", `the peer opened this process's ${M.model.length}-byte buffer as ${String(rep.bytes)} bytes`);
    const got = unb64(rep.data as string);
    const at = sameBytes(got, M.model);
    if (at >= 0) fail("corrupted byte", `the peer reads this process's shared buffer byte ${at} as ${got[at]}, want ${M.model[at]}`);
    const off = w[5]! % M.model.length, data = c.dataFor(1 + (w[6]! % (M.model.length - off)), w[4]!);
    peerOk(ask({ op: "openwrite", id: rep.id, off, data: b64(data) }), "openwrite");
    M.model.set(data, off);
    const mineNow = M.b.read(Uint8Array) as Uint8Array;
    const at2 = sameBytes(mineNow, M.model);
    if (at2 >= 0) fail("corrupted byte", `after the peer wrote this process's shared buffer, byte ${at2} is ${mineNow[at2]}, want ${M.model[at2]}`);
    peerOk(ask({ op: "close", id: rep.id }), "close");
  });

  // ---- a communicator across the two processes ------------------------------------------------------
  let xcomm: Communicator | null = null;
  let xSteps = 0;
  const XCOMM_BUDGET = 6 + Math.floor(c.calls / 20_000);
  h("xcomm", "xcomm", 0.3, (w) => {
    if (xSteps >= XCOMM_BUDGET || c.anyCapture()) return;
    if (!startPeer()) return;
    xSteps++;
    const d0 = devs[0]!;
    if (!xcomm || xcomm.disposed) {
      const id = Communicator.uniqueId(d0);
      peerOk(ask({ op: "comm", id: b64(id), nranks: 2, rank: 1, timeoutMs: 30_000 }), "initRank");
      const r = call(() => `const xcomm = Communicator.initRank(dev0, 2, id, 0, { timeoutMs: 30000 })`, "ok", () => Communicator.initRank(d0, 2, id, 0, { timeoutMs: 30_000 }));
      if (!r.ok) return;
      xcomm = r.v;
    }
    const X = xcomm;
    const p = makePlan(w, 2);
    if (p.kind === "ring") p.kind = "allReduce";
    const ex = collExpect(p, 2, w[5]!);
    // when both send and recv, it is a one-way send (rank 0 -> 1 or 1 -> 0)
    const oneWay = w[6]! % 4 === 0;
    const from = w[6]! % 8 < 4 ? 0 : 1;
    const s = ipcStream();
    const tail = w[4]! % 5;
    const myRecvBytes = oneWay ? (from === 0 ? 0 : ex.recvBytes[0]!) : ex.recvBytes[0]!;
    const mySend = oneWay ? (from === 0 ? ex.send[0] ?? collData(p.dtype, p.count, w[5]!) : null) : ex.send[0];
    const sb = mySend ? d0.alloc(mySend.length) : null;
    if (sb) sb.write(mySend!);
    const rb = myRecvBytes ? d0.alloc(myRecvBytes + tail) : null;
    rb?.fill(TAIL, { type: "u8" });
    const peerSend = oneWay ? (from === 1 ? collData(p.dtype, p.count, w[5]! + 1) : null) : ex.send[1];
    const src = oneWay ? `xcomm: send ${p.count} ${p.dtype} from rank ${from}` : `xcomm: ${planSrc(p)}`;
    peerOk(ask({ op: "coll", kind: oneWay ? (from === 1 ? "send" : "recv") : p.kind, dtype: p.dtype, redop: p.op, root: p.root, count: p.count, peer: 0, send: peerSend ? b64(peerSend) : undefined, recvBytes: oneWay ? (from === 0 ? p.count * CTYPED[p.dtype].BYTES_PER_ELEMENT : 0) : ex.recvBytes[1] }), `${src} (peer)`);
    const r = call(() => src, "ok", () => {
      if (oneWay) {
        if (from === 0) X.send(sb!, 1, { dtype: p.dtype, count: p.count, stream: s });
        else X.recv(rb!, 1, { dtype: p.dtype, count: p.count, stream: s });
      } else issue(X, p, sb, rb, s, 2);
    });
    if (r.ok) call(() => `ipcStream.synchronize(); xcomm.check()`, "ok", () => {
      s.synchronize();
      X.check();
    });
    const back = peerOk(ask({ op: "collread" }), `${src} (peer's result)`);
    const peerGot = unb64(back.data as string);
    let wantMine: Uint8Array | null, wantPeer: Uint8Array | null;
    if (oneWay) {
      wantMine = from === 1 ? peerSend! : null;
      wantPeer = from === 0 ? mySend!.subarray(0, p.count * CTYPED[p.dtype].BYTES_PER_ELEMENT) : null;
    } else {
      wantMine = ex.want[0]!;
      wantPeer = ex.want[1]!;
    }
    if (rb) {
      const got = rb.read(Uint8Array) as Uint8Array;
      const want = new Uint8Array(got.length).fill(TAIL);
      if (wantMine) want.set(wantMine);
      const at = sameBytes(got, want);
      if (at >= 0) fail("collective", `${src}: rank 0 (this process) recv byte ${at} is ${got[at]}, want ${want[at]}`);
    }
    if (wantPeer) {
      const at = sameBytes(peerGot.subarray(0, wantPeer.length), wantPeer);
      if (at >= 0) fail("collective", `${src}: rank 1 (the peer) recv byte ${at} is ${peerGot[at]}, want ${wantPeer[at]}`);
    }
    sb?.dispose();
    rb?.dispose();
  });

  // ================================================================================================
  // Cache damage: a private BUNGPU_CACHE_DIR (and TMPDIR) for this batch, filled by the first run
  // of cache_child.ts; before each later run one thing in it is damaged. Every run must exit 0
  // with the right results, no raw error code on stderr, at most one warning line.
  let cacheNo = 0;
  const CACHE_BUDGET = Math.max(1, Math.round(c.calls / 40_000));
  let cachePlace: { cache: string; tmp: string } | null = null;
  const RAW = /EEXIST|ENOTDIR|EISDIR|EROFS|EACCES|EPERM|ENOSPC|TypeError|SIGSEGV|panic/;
  const WARNING = /^bungpu: the cache folder .* cannot be used/gm;
  const listAll = (dir: string): string[] => {
    let out: string[] = [];
    try {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        out.push(p);
        if (e.isDirectory()) out = out.concat(listAll(p));
      }
    } catch {
      /* gone */
    }
    return out;
  };
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  let faultEnv = "";
  function damage(w: number[]): string {
    if (!existsSync(cachePlace!.cache)) return "nothing to damage yet";
    const all = listAll(cachePlace!.cache).filter((p) => !/\.probe\./.test(p));
    const files = all.filter((p) => {
      try {
        return statSync(p).isFile();
      } catch {
        return false;
      }
    });
    const dirs = all.filter((p) => !files.includes(p));
    const kind = w[0]! % 10;
    const f = files.length ? pick(files, w[1]!) : null;
    const rel = (p: string) => p.slice(cachePlace!.cache.length + 1);
    if (kind === 9) {
      // two entries swapped, each with its own record (sizes and hashes intact): a kernel's
      // library and .json, or two plans
      const kdir = join(cachePlace!.cache, "kernels", "cpu"), pdir = join(cachePlace!.cache, "plans");
      const bases = (d: string, ext: string) => files.filter((p) => dirname(p) === d && p.endsWith(ext)).map((p) => p.slice(0, -ext.length));
      const plans = w[2]! % 2 === 0;
      const b = plans ? bases(pdir, ".json") : bases(kdir, ".json").filter((x) => files.includes(`${x}.so`));
      if (b.length < 2) return "nothing to swap yet";
      const i = w[3]! % b.length, j = (i + 1 + (w[4]! % (b.length - 1))) % b.length;
      for (const ext of plans ? [".json"] : [".json", ".so"]) {
        renameSync(b[i]! + ext, join(dirname(b[i]!), "swap.tmp"));
        renameSync(b[j]! + ext, b[i]! + ext);
        renameSync(join(dirname(b[i]!), "swap.tmp"), b[j]! + ext);
      }
      return `${rel(b[i]!)} and ${basename(b[j]!)} swapped (${plans ? "plans" : "libraries with their records"})`;
    }
    try {
      switch (kind) {
        case 0: if (f) { truncateSync(f, w[2]! % Math.max(1, statSync(f).size)); return `${rel(f)} truncated`; } break;
        case 1: if (f) { writeFileSync(f, c.dataFor(1 + (w[2]! % 300), w[3]!)); return `${rel(f)} replaced by random bytes`; } break;
        case 2: if (f) {
          const fd = openSync(f, "r+");
          const size = statSync(f).size;
          if (size) writeSync(fd, Uint8Array.of(w[3]! & 0xff), 0, 1, w[2]! % size);
          closeSync(fd);
          return `a byte of ${rel(f)} changed`;
        } break;
        case 3: if (f) { rmSync(f); mkdirSync(join(f, "inside"), { recursive: true }); return `${rel(f)} replaced by a folder`; } break;
        case 4: {
          const d = dirs.length ? pick(dirs, w[2]!) : join(cachePlace!.cache, "kernels");
          rmSync(d, { recursive: true, force: true });
          writeFileSync(d, "not a folder");
          return `${rel(d)} replaced by a file`;
        }
        case 5: if (f) { chmodSync(f, 0o444); return `${rel(f)} made read-only`; } break;
        case 6: {
          // permission bits do not stop root: there the child is told to fail such writes as a
          // read-only mount would (BUNGPU_TEST_CACHE_FAULT, which only tests set), or as a full disk
          const d = dirs.length ? pick(dirs, w[2]!) : cachePlace!.cache;
          chmodSync(d, 0o555);
          if (isRoot) faultEnv = w[3]! % 3 === 0 ? "ENOSPC" : `EROFS:${rel(d)}`;
          return `${rel(d) || "the cache folder"} made read-only${faultEnv ? ` (${faultEnv})` : ""}`;
        }
        case 7: if (f) { writeFileSync(f, ""); return `${rel(f)} emptied`; } break;
        default: {
          // a leftover of a killed writer beside an entry
          const base = f ?? join(cachePlace!.cache, "kernels", "cpu", "x.so");
          mkdirSync(join(base, ".."), { recursive: true });
          writeFileSync(`${base}.999999.abcd.tmp`, "partial");
          return `a dead writer's ${rel(base)}.999999.abcd.tmp`;
        }
      }
    } catch (e) {
      return `damage failed: ${(e as Error).message}`;
    }
    return "nothing to damage yet";
  }
  // The shim's own cache: a case rebuilds the library (seconds), so only batches of 100,000 calls
  // or more have one (FUZZ_CALLS=2000000: one in each of its 8 batches).
  const SHIM_BUDGET = c.calls >= 100_000 ? 1 : 0;
  let shimNo = 0;
  /** The driver's library and its record where a process with BUNGPU_NO_PREBUILT=1 looks for it. */
  function seedShim(): string | null {
    const lib = loadInfo.path, dir = basename(dirname(lib));
    const target = loadInfo.source === "cache" || loadInfo.source === "built" ? dir.replace(/-[0-9a-f]{16}$/, "") : dir;
    if (!loadInfo.hash || !/^[a-z0-9]+-[a-z0-9_]+$/.test(target)) return null;
    const at = join(cachePlace!.cache, "shim", `${target}-${loadInfo.hash.slice(0, 16)}`);
    const to = join(at, basename(lib));
    try {
      if (!existsSync(to) || !statSync(to).isFile()) {
        rmSync(at, { recursive: true, force: true });
        mkdirSync(at, { recursive: true });
        const data = readFileSync(lib);
        writeFileSync(to, data);
        writeFileSync(`${to}.json`, JSON.stringify({ bytes: data.byteLength, sha256: new Bun.CryptoHasher("sha256").update(data).digest("hex") }));
      }
    } catch {
      return null;
    }
    return at;
  }
  function damageShim(at: string, w: number[]): string {
    const lib = join(at, basename(loadInfo.path)), rec = `${lib}.json`;
    const rel = (p: string) => p.slice(cachePlace!.cache.length + 1);
    try {
      switch (w[0]! % 9) {
        case 0: truncateSync(lib, w[1]! % statSync(lib).size); return `${rel(lib)} truncated`;
        case 1: {
          const fd = openSync(lib, "r+");
          writeSync(fd, Uint8Array.of(w[2]! & 0xff), 0, 1, w[1]! % statSync(lib).size);
          closeSync(fd);
          return `a byte of ${rel(lib)} changed`;
        }
        case 2: writeFileSync(lib, c.dataFor(64 + (w[1]! % 4096), w[2]!)); return `${rel(lib)} replaced by random bytes`;
        case 3: rmSync(lib); mkdirSync(lib); return `${rel(lib)} replaced by a folder`;
        case 4: rmSync(rec); return `${rel(rec)} removed`;
        case 5: writeFileSync(rec, c.dataFor(1 + (w[1]! % 64), w[2]!)); return `${rel(rec)} replaced by random bytes`;
        case 6: rmSync(rec); mkdirSync(rec); return `${rel(rec)} replaced by a folder`;
        case 7: rmSync(at, { recursive: true, force: true }); writeFileSync(at, "x"); return `${rel(at)} replaced by a file`;
        default: chmodSync(at, 0o555); return `${rel(at)} made read-only`;
      }
    } catch (e) {
      return `damage failed: ${(e as Error).message}`;
    }
  }
  h("cache", "cache", 0.05, (w) => {
    if (cacheNo >= CACHE_BUDGET) return;
    cacheNo++;
    if (!cachePlace) {
      const base = tempDir("cache");
      mkdirSync(join(base, "tmp"));
      cachePlace = { cache: join(base, "cache"), tmp: join(base, "tmp") };
    }
    // the shim's case: the driver's library seeded into the cache, then damaged
    const shimAt = shimNo < SHIM_BUDGET && cacheNo >= 2 ? seedShim() : null;
    faultEnv = "";
    if (shimAt) shimNo++;
    const how = shimAt ? `the shim's cache: ${damageShim(shimAt, w.slice(1))}` : cacheNo === 1 && w[0]! % 2 ? "first run" : damage(w.slice(1));
    const K = w[5]! % 3, P = w[6]! % 3;
    L(() => `// cache_child.ts ${K} ${P} after: ${how}`);
    const shimEnv = shimAt ? { BUNGPU_LIB: "", BUNGPU_NO_PREBUILT: "1" } : { BUNGPU_LIB: loadInfo.path };
    const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "cache_child.ts"), String(K), String(P)], {
      env: { ...process.env, ...shimEnv, BUNGPU_CACHE_DIR: cachePlace.cache, TMPDIR: cachePlace.tmp, BUNGPU_TIER: "optimized", BUNGPU_TEST_CACHE_FAULT: faultEnv, BUNGPU_CPU_DEVICES: "1" } as Record<string, string>,
      stdout: "pipe",
      stderr: "pipe",
      timeout: 120_000,
      killSignal: "SIGKILL",
    });
    const err = r.stderr.toString();
    let out: { k?: number[]; t?: number[] } | null = null;
    try {
      out = JSON.parse(r.stdout.toString().trim().split("\n").pop() ?? "");
    } catch {
      out = null;
    }
    const wantT = P === 0 ? [20] : P === 1 ? [2, 6, 12, 20] : [3];
    const wantK = [1, 2, 3, 4].map((x) => x + K + 1);
    const what = `a run over a damaged cache (${how}; kernel ${K}, plan ${P})`;
    if (r.signalCode || r.exitCode !== 0) fail("cache", `${what} ended with exit ${r.exitCode}, signal ${r.signalCode ?? "none"}: ${err.trim().split("\n").slice(-3).join(" / ")}`);
    if (JSON.stringify(out?.k) !== JSON.stringify(wantK) || JSON.stringify(out?.t) !== JSON.stringify(wantT))
      fail("cache", `${what}: results ${JSON.stringify(out)}, want k ${JSON.stringify(wantK)}, t ${JSON.stringify(wantT)}`);
    if (RAW.test(err)) fail("cache", `${what}: stderr shows a raw error: ${err.trim().slice(0, 400)}`);
    if ((err.match(WARNING) ?? []).length > 1) fail("cache", `${what}: more than one warning line: ${err.trim().slice(0, 400)}`);
    const source = (out as { source?: string } | null)?.source;
    if (shimAt ? source !== "cache" && source !== "built" : source !== "env") fail("cache", `${what}: the library came from ${source}`);
    if (shimAt) L(() => `// the shim: ${source}`);
    // the damage is left in place: the next run meets it too (and more)
  });

  return {
    skipped: [...cudaSkip].map(([k, why]) => `${k}: ${why}`),
    close() {
      if (peer) {
        try {
          writeSync(peer.w, '{"op":"exit"}\n');
        } catch {
          /* gone */
        }
        const t0 = Date.now();
        while (peerAlive(peer.proc.pid) && Date.now() - t0 < 5000) Bun.sleepSync(1);
        if (peerAlive(peer.proc.pid)) peer.proc.kill(9);
        closeSync(peer.w);
        closeSync(peer.r);
        peer = null;
      }
      for (const d of temps) {
        Bun.spawnSync(["chmod", "-R", "u+rwX", d], { stderr: "ignore" });
        rmSync(d, { recursive: true, force: true });
      }
    },
  };
}
