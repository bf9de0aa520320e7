// KernelMode, Ring and RingKernel: a stream of small messages handled by one handler function,
// either by a persistent kernel fed through lock-free rings (KernelMode.Ring) or by an ordinary
// launch per batch of messages (KernelMode.Batch), behind one API so a workload can measure both.
//
//  - Ring: TypeScript wrapper over the shim's single-producer single-consumer rings (bg_ring_*).
//    Batches cross the FFI once; head and tail are also read directly through a zero-copy view
//    of the ring header, so polling for a response costs no FFI call.
//  - RingKernel: generates the kernel source around the user's handler for the backend (C for
//    the CPU, CUDA C, MSL), compiles it with Program.compile and runs it:
//      Ring mode, CPU and CUDA: one persistent kernel (grid 1, block 1: always resident) loops
//        over the inbound ring, calls the handler on each message in place and writes the response
//        straight into the outbound ring's slot; it spins briefly when idle, then naps, and exits
//        when the inbound ring is closed (meta.closed = 1) and empty, or at once on abort (2).
//      Batch mode, and Ring mode on Metal (mode "relaunch"): pending messages are staged and run
//        by a launch of the batch kernel (in, out, count, state) that handles them in order.
//    Both kernels run the handler sequentially on one thread with the same state, so the two modes
//    give identical responses and state.
//  - Responses are routed in FIFO order: every accepted message records where its response goes,
//    either to a `request()` promise or to the receive queue (`send()`), so mixing the two is
//    unambiguous: a request never sees a send's response and receive never sees a request's.
import { N, check, slot, readU32, readPtr, nativeView } from "../ffi/native";
import { Status, RING_HEAD_OFFSET, RING_TAIL_OFFSET, RING_META_OFFSET, type BackendName } from "../ffi/sys";
import { Buffer } from "./buffer";
import { Device } from "./device";
import { GpuError, invalid, illegalState, disposed, type BackendLabel } from "./errors";
import { Event } from "./event";
import { Program, type Kernel, type Module } from "./kernel";
import { Stream } from "./stream";

// ---- KernelMode ---------------------------------------------------------------------------------

export type KernelModeName = "batch" | "ring";

/**
 * Typical software overhead of one message round trip, in microseconds, by backend.
 *  - cpu: measured by bench/ring.bench.ts (p50 of a one-message request; 2-vCPU AMD EPYC VM,
 *    see bench/RESULTS.md): Ring 0.45-0.65 µs; Batch 2.2-5.5 µs (stage, launch, wait, copy back).
 *  - cuda: not measured here (no GPU): the usual order of a launch + synchronise + copies for
 *    Batch, and of a mapped-memory round trip over PCIe for Ring.
 *  - metal: not measured here; Metal cannot keep a kernel resident, so Ring relaunches per batch
 *    and costs what Batch costs (a command buffer commit and wait).
 */
const TYPICAL_OVERHEAD_US: Record<BackendName, Record<KernelModeName, number>> = {
  cpu: { batch: 2.5, ring: 0.5 },
  cuda: { batch: 20, ring: 2 },
  metal: { batch: 100, ring: 100 },
};

/** How a RingKernel runs its handler: a launch per batch, or a persistent kernel fed by rings. */
export class KernelMode {
  /** Batch kernel mode (CPU-orchestrated): an ordinary launch per batch of messages. */
  static readonly Batch = new KernelMode("batch");
  /** Ring kernel mode: a persistent kernel reading a lock-free ring. */
  static readonly Ring = new KernelMode("ring");

  readonly #name: KernelModeName;

  private constructor(name: KernelModeName) {
    this.#name = name;
    Object.freeze(this);
  }

  static values(): readonly KernelMode[] {
    return [KernelMode.Batch, KernelMode.Ring];
  }

  /**
   * A mode from its name ("batch", "ring"; case-insensitive), its JSON (`"\"ring\""`), or a
   * KernelMode. Anything else throws GpuError INVALID_VALUE.
   */
  static parse(value: unknown): KernelMode {
    if (value instanceof KernelMode) return value;
    if (typeof value !== "string") invalid("KernelMode.parse", `expected a mode name, got ${typeof value}`);
    let s = value.trim();
    if (s.startsWith('"')) {
      try {
        const v: unknown = JSON.parse(s);
        if (typeof v === "string") s = v;
      } catch {
        /* not JSON: falls through to the name check */
      }
    }
    switch (s.toLowerCase()) {
      case "batch":
        return KernelMode.Batch;
      case "ring":
        return KernelMode.Ring;
    }
    invalid("KernelMode.parse", `unknown kernel mode ${JSON.stringify(value)} (want "batch" or "ring")`);
  }

  isBatch(): boolean {
    return this.#name === "batch";
  }

  isRing(): boolean {
    return this.#name === "ring";
  }

  asStr(): KernelModeName {
    return this.#name;
  }

  /** Typical overhead in µs on `backend` (default "cuda", the figure the reference describes). */
  typicalOverheadUs(backend: BackendName | Device = "cuda"): number {
    const b = backend instanceof Device ? backend.backend : backend;
    const row = TYPICAL_OVERHEAD_US[b];
    if (!row) invalid("KernelMode.typicalOverheadUs", `unknown backend ${String(backend)}`);
    return row[this.#name];
  }

  toString(): string {
    return this.#name;
  }

  toJSON(): string {
    return this.#name;
  }
}

// ---- Ring ---------------------------------------------------------------------------------------

export interface RingOptions {
  /** Bytes per message: a multiple of 4, 4..65536. */
  messageBytes: number;
  /** Messages the ring holds: a power of two, 2..16777216. */
  capacity: number;
}

const HEAD_W = RING_HEAD_OFFSET / 4;
const TAIL_W = RING_TAIL_OFFSET / 4;
const META_W = RING_META_OFFSET / 4;
const CLOSED_W = META_W + 2;

function checkRingShape(call: string, messageBytes: unknown, capacity: unknown): void {
  if (typeof messageBytes !== "number" || !Number.isInteger(messageBytes) || messageBytes < 4 || messageBytes > 65536 || messageBytes % 4)
    invalid(call, `messageBytes must be a multiple of 4 in 4..65536, got ${String(messageBytes)}`);
  if (typeof capacity !== "number" || !Number.isInteger(capacity) || capacity < 2 || capacity > 1 << 24 || (capacity & (capacity - 1)))
    invalid(call, `capacity must be a power of two in 2..16777216, got ${String(capacity)}`);
}

/** Bytes of `v` as a Uint8Array view (no copy), or a GpuError. */
function bytesView(call: string, v: unknown): Uint8Array {
  if (v instanceof Uint8Array) return v;
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  invalid(call, `expected a TypedArray, DataView or ArrayBuffer message, got ${v === null ? "null" : typeof v === "object" ? v.constructor.name : typeof v}`);
}

/**
 * A single-producer single-consumer ring of fixed-size messages in memory the host and the
 * device both see (shim: bg_ring_*). Never overwrites: `push` accepts what fits.
 */
// The raw push and pop, for callers that have already checked the handle, the view and the count
// against the ring (Ring.push/pop and the ring transports). Module-private: a wrong count or view
// here would let the shim read or write past the caller's array.
function pushChecked(backend: BackendLabel, h: number, u8: Uint8Array, n: number): number {
  const rc = N.bg_ring_push(h, u8, n, slot(0));
  if (rc !== 0) check(rc, "bg_ring_push", backend);
  return readU32(0);
}

function popChecked(backend: BackendLabel, h: number, out: Uint8Array, max: number): number {
  const rc = N.bg_ring_pop(h, out, max, slot(0));
  if (rc !== 0) check(rc, "bg_ring_pop", backend);
  return readU32(0);
}

export class Ring {
  readonly device: Device;
  readonly messageBytes: number;
  readonly capacity: number;
  #handle: number;
  #live = true;
  #host: number;
  #devAddr: number;
  #hdrAb: ArrayBuffer | undefined;
  /** u32 words over the 384-byte header: head lo at 0, tail lo at 32, meta at 64.. */
  #hdr: Uint32Array;

  private constructor(device: Device, handle: number, messageBytes: number, capacity: number) {
    this.device = device;
    this.#handle = handle;
    this.messageBytes = messageBytes;
    this.capacity = capacity;
    check(N.bg_ring_address(handle, slot(0), slot(1)), "bg_ring_address", device.backend);
    this.#host = readPtr(0);
    this.#devAddr = readPtr(1);
    this.#hdrAb = nativeView(this.#host, RING_META_OFFSET + 16);
    this.#hdr = new Uint32Array(this.#hdrAb);
  }

  static create(device: Device, opts: RingOptions): Ring {
    const call = "Ring.create";
    if (!(device instanceof Device)) invalid(call, "expected a Device");
    if (!opts || typeof opts !== "object") invalid(call, "expected { messageBytes, capacity }");
    checkRingShape(call, opts.messageBytes, opts.capacity);
    check(N.bg_ring_create(device.handle, opts.messageBytes, opts.capacity, slot(0)), "bg_ring_create", device.backend);
    return new Ring(device, readPtr(0), opts.messageBytes, opts.capacity);
  }

  get handle(): number {
    if (!this.device.state.open) disposed("Ring", "device of this ring");
    if (!this.#live) disposed("Ring", "ring");
    return this.#handle;
  }

  get disposed(): boolean {
    return !this.#live || !this.device.state.open;
  }

  /** Host address of the ring's base (header, then data at +384). */
  get hostAddress(): number {
    this.handle;
    return this.#host;
  }

  /** Device address of the ring's base (what a kernel receives). */
  get deviceAddress(): number {
    this.handle;
    return this.#devAddr;
  }

  /** Messages in the ring now (read from the header, no FFI call). */
  count(): number {
    this.handle;
    return (this.#hdr[TAIL_W]! - this.#hdr[HEAD_W]!) >>> 0;
  }

  /** @internal Unchecked count for hot polling loops of an owner that keeps the ring alive. */
  countFast(): number {
    return (this.#hdr[TAIL_W]! - this.#hdr[HEAD_W]!) >>> 0;
  }

  /** Free slots now. */
  room(): number {
    return this.capacity - this.count();
  }

  /** The `closed` word of the header (0 open; its meaning beyond that is the users'). */
  get closed(): number {
    this.handle;
    return Atomics.load(this.#hdr, CLOSED_W);
  }

  set closed(v: number) {
    this.handle;
    if (!Number.isInteger(v) || v < 0 || v > 4294967295) invalid("Ring.closed", `expected a u32, got ${v}`);
    Atomics.store(this.#hdr, CLOSED_W, v);
  }

  /** @internal */
  closedFast(): number {
    return Atomics.load(this.#hdr, CLOSED_W);
  }

  /**
   * Push whole messages from `msgs` (byteLength a multiple of messageBytes); returns how many
   * fitted (0 when full). Never overwrites.
   */
  push(msgs: ArrayBufferView | ArrayBuffer, count?: number): number {
    const call = "Ring.push";
    const h = this.handle;
    const u8 = bytesView(call, msgs);
    const mb = this.messageBytes;
    if (u8.byteLength % mb) invalid(call, `${u8.byteLength} bytes is not a whole number of ${mb}-byte messages`);
    const max = u8.byteLength / mb;
    const n = count ?? max;
    if (!Number.isInteger(n) || n < 0 || n > max) invalid(call, `count must be an integer in 0..${max}, got ${String(count)}`);
    if (n === 0) return 0;
    return pushChecked(this.device.backend, h, u8, n);
  }

  /**
   * Pop up to `max` messages (default: all there are, at most capacity) into `into` (or a new
   * array); returns the bytes popped (a view of `into` of k * messageBytes).
   */
  pop(max?: number, into?: Uint8Array): Uint8Array {
    const call = "Ring.pop";
    const h = this.handle;
    const mb = this.messageBytes;
    let m = max ?? (into ? Math.floor(into.byteLength / mb) : this.count());
    if (!Number.isInteger(m) || m < 0) invalid(call, `max must be a non-negative integer, got ${String(max)}`);
    if (into !== undefined) {
      if (!(into instanceof Uint8Array)) invalid(call, "into must be a Uint8Array");
      if (m * mb > into.byteLength) invalid(call, `into holds ${Math.floor(into.byteLength / mb)} messages, asked for ${m}`);
    }
    m = Math.min(m, this.capacity);
    const out = into ?? new Uint8Array(Math.min(m, this.count()) * mb);
    if (!into) m = out.byteLength / mb;
    if (m === 0) return out.subarray(0, 0);
    const k = popChecked(this.device.backend, h, out, m);
    return out.subarray(0, k * mb);
  }

  dispose(): void {
    if (!this.#live) return;
    this.#live = false;
    try {
      this.#hdrAb?.transfer(0);
    } catch {
      /* a view Bun cannot detach: nothing else reads it once the ring is dead */
    }
    this.#hdrAb = undefined;
    if (this.device.state.open) check(N.bg_ring_destroy(this.#handle), "bg_ring_destroy", this.device.backend);
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

// ---- generated kernel sources ---------------------------------------------------------------------

export type HandlerSource = string | { cpu?: string; cuda?: string; metal?: string };

export interface RingSourceOptions {
  /** The handler, in the backend's kernel language: defines `BG_RING_HANDLER(msg, resp, state) { ... }`,
   * or a function named by `entry` with the signature `void f(const void* msg, void* resp, void* state)`
   * (MSL: `device` pointers to uchar). One C text can serve the CPU and CUDA: on CUDA it is
   * compiled as CUDA C++ where helper functions need no `__device__` and BG_RING_HANDLER's
   * parameters convert implicitly to any pointer, as `void*` does in C; an `entry` function's own
   * `void*` parameters need explicit casts there, and `void*` arithmetic is not accepted. */
  handler: HandlerSource;
  /** Name of a handler function to call instead of BG_RING_HANDLER's. */
  entry?: string;
  messageBytes: number;
  /** Bytes per response (default messageBytes). */
  responseBytes?: number;
  /** Bytes of persistent state (for BG_RING_STATE_BYTES). */
  stateBytes?: number;
}

/** Names of the generated kernels. */
export const RING_KERNEL = "bg_ring_persistent";
export const BATCH_KERNEL = "bg_ring_batch";

/**
 * CPU persistent kernel when idle: spin (pause) this long, then nap 50 µs at a time; after 5 ms
 * idle nap 200 µs, after 100 ms idle 1 ms, so an idle ring costs next to no CPU. Timer slack is
 * set to 1 µs on Linux so a nap is not stretched by the default 50 µs slack.
 */
const CPU_SPIN_NS = 50_000;

function handlerFor(call: string, backend: BackendName, h: HandlerSource): string {
  const src = typeof h === "string" ? h : h && typeof h === "object" ? h[backend] : undefined;
  if (typeof src !== "string" || !src.trim()) invalid(call, `no ${backend} handler source given`);
  return src;
}

function checkEntry(call: string, entry: unknown, src: string): string {
  if (entry === undefined) {
    if (!/\bBG_RING_HANDLER\s*\(/.test(src))
      invalid(call, "the handler must define BG_RING_HANDLER(msg, resp, state) { ... }, or name its function with `entry`");
    return "bg_ring_handler";
  }
  if (typeof entry !== "string" || !/^[A-Za-z_]\w*$/.test(entry)) invalid(call, `entry must be a C identifier, got ${String(entry)}`);
  return entry;
}

function defines(o: { messageBytes: number; responseBytes: number; stateBytes: number }): string {
  return `#define BG_RING_MSG_BYTES ${o.messageBytes}u
#define BG_RING_RESP_BYTES ${o.responseBytes}u
#define BG_RING_STATE_BYTES ${o.stateBytes}u
`;
}

/**
 * The persistent loop, one text for the C and CUDA sources, so the CUDA kernel that cannot run
 * here is the very loop the CPU tests exercise. Each language declares before it the helpers
 * (bg_u64/bg_u32/bg_u8, bg_ld_acq, bg_ld_acq32, bg_st_rel, bg_st_rel32, bg_idle, bg_zero) and the
 * ring pointers (in_head, in_tail, in_meta, out_head, out_tail, out_meta, in_data, out_data),
 * masks and cursors (h, ot, oh, idle, since).
 */
const RING_LOOP = `  for (;;) {
    bg_u64 t = bg_ld_acq(in_tail);
    if (t != h) {
      bg_u64 room = out_cap - (ot - oh);
      if (room == 0) {
        oh = bg_ld_acq(out_head);
        room = out_cap - (ot - oh);
      }
      if (room == 0) { /* backpressure: wait for the host to read responses, never drop */
        if (bg_ld_acq32(&in_meta[2]) == 2u) break;
        bg_idle(&idle, &since);
        continue;
      }
      bg_u64 k = t - h;
      if (k > room) k = room;
      if (k > 256) k = 256;
      for (bg_u64 i = 0; i < k; i++) {
        bg_u8* r = out_data + ((ot + i) & out_mask) * BG_RING_RESP_BYTES;
        bg_zero(r, BG_RING_RESP_BYTES);
        BG_HANDLER(in_data + ((h + i) & in_mask) * BG_RING_MSG_BYTES, r, state);
      }
      h += k;
      ot += k;
      bg_st_rel(out_tail, ot);
      bg_st_rel(in_head, h);
      idle = 0;
      continue;
    }
    bg_u32 c = bg_ld_acq32(&in_meta[2]);
    if (c == 2u) break;                           /* abort: exit now */
    if (c == 1u && bg_ld_acq(in_tail) == h) break; /* stop: exit once drained */
    if (c == 1u) continue;
    bg_idle(&idle, &since);
  }
  bg_st_rel32(&out_meta[2], 1u); /* the producer of responses has finished */`;

/** The batch kernel's body: the handler on each message in order (in, out, n, state declared). */
const BATCH_LOOP = `  for (bg_u32 i = 0; i < n; i++) {
    bg_u8* r = out + (bg_u64)i * BG_RING_RESP_BYTES;
    bg_zero(r, BG_RING_RESP_BYTES);
    BG_HANDLER(in + (bg_u64)i * BG_RING_MSG_BYTES, r, state);
  }`;

function cpuSource(handler: string, entry: string, o: { messageBytes: number; responseBytes: number; stateBytes: number }): string {
  return `/* generated by bungpu RingKernel (CPU) */
#define _POSIX_C_SOURCE 200809L
#include "bungpu_cpu.h"
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif
${defines(o)}#define BG_RING_HANDLER(msg, resp, state) static inline void bg_ring_handler(const void* msg, void* resp, void* state)
#line 1 "handler"
${handler}
#line 1 "ring_kernel.c"
#define BG_HANDLER ${entry}

typedef uint64_t bg_u64;
typedef uint32_t bg_u32;
typedef uint8_t bg_u8;
static inline void bg_zero(bg_u8* p, size_t n) { memset(p, 0, n); }
static inline uint64_t bg_ld_acq(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline uint32_t bg_ld_acq32(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void bg_st_rel(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void bg_st_rel32(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void bg_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}
static inline uint64_t bg_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
/* Idle: spin (pause) for ${CPU_SPIN_NS} ns, then nap: 50 us, 200 us after 5 ms idle, 1 ms after 100 ms. */
static inline void bg_idle(uint32_t* iters, uint64_t* since) {
  if (*iters == 0) *since = bg_now_ns();
  ++*iters;
  if ((*iters & 63u) == 0) {
    uint64_t idle = bg_now_ns() - *since;
    if (idle > ${CPU_SPIN_NS}ull) {
      struct timespec t = {0, idle > 100000000ull ? 1000000L : idle > 5000000ull ? 200000L : 50000L};
      nanosleep(&t, 0);
      return;
    }
  }
  bg_relax();
}

/* args: inbound ring, outbound ring (base addresses, layout of bungpu.h), state. */
BG_KERNEL(${RING_KERNEL}) {
  uint8_t* in = (uint8_t*)(uintptr_t)BG_ARG(0, uint64_t);
  uint8_t* out = (uint8_t*)(uintptr_t)BG_ARG(1, uint64_t);
  void* state = BG_ARG(2, void*);
  uint64_t* in_head = (uint64_t*)(in + 0);
  const uint64_t* in_tail = (const uint64_t*)(in + 128);
  const uint32_t* in_meta = (const uint32_t*)(in + 256);
  const uint64_t* out_head = (const uint64_t*)(out + 0);
  uint64_t* out_tail = (uint64_t*)(out + 128);
  uint32_t* out_meta = (uint32_t*)(out + 256);
  uint8_t* in_data = in + 384;
  uint8_t* out_data = out + 384;
  const uint64_t in_mask = in_meta[1] - 1u, out_cap = out_meta[1], out_mask = out_cap - 1u;
  uint64_t h = __atomic_load_n(in_head, __ATOMIC_RELAXED);
  uint64_t ot = __atomic_load_n(out_tail, __ATOMIC_RELAXED);
  uint64_t oh = bg_ld_acq(out_head);
  uint32_t idle = 0;
  uint64_t since = 0;
#if defined(__linux__) && defined(PR_SET_TIMERSLACK)
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL); /* this stream's worker thread only */
#endif
${RING_LOOP}
}

/* args: messages, responses, count, state: the handler on each message in order. */
BG_KERNEL(${BATCH_KERNEL}) {
  const uint8_t* in = BG_ARG(0, const uint8_t*);
  uint8_t* out = BG_ARG(1, uint8_t*);
  uint32_t n = BG_ARG(2, uint32_t);
  void* state = BG_ARG(3, void*);
${BATCH_LOOP}
}
`;
}

function cudaSource(handler: string, entry: string, o: { messageBytes: number; responseBytes: number; stateBytes: number }): string {
  return `/* generated by bungpu RingKernel (CUDA). Rings and their closed flags live in mapped pinned
 * memory: the device reads them with volatile loads and orders with system-scope fences. */
typedef unsigned long long bg_u64;
typedef unsigned int bg_u32;
typedef unsigned char bg_u8;
/* The fixed-width names handlers use in C, so one handler source serves the CPU and CUDA. */
#if defined(__CUDACC_RTC__)
typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t; typedef long long int64_t; typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif
/* Handlers are C, compiled here as CUDA C++ (NVRTC runs with -default-device, so helpers need
 * no __device__). BG_RING_HANDLER's parameters convert implicitly to any object pointer, as
 * void* does in C (const Msg* m = msg;). Not covered: arithmetic on msg/resp/state (a GNU C
 * extension anyway), and the parameters of a handler named with \`entry\`, which are its own. */
${defines(o)}#if defined(__cplusplus)
struct bg_ring_cptr {
  const void* p;
  __device__ bg_ring_cptr(const void* q) : p(q) {}
  template <class T> __device__ operator const T*() const { return (const T*)p; }
};
struct bg_ring_ptr {
  void* p;
  __device__ bg_ring_ptr(void* q) : p(q) {}
  template <class T> __device__ operator T*() const { return (T*)p; }
};
#define BG_RING_HANDLER(msg, resp, state) __device__ __forceinline__ void bg_ring_handler(bg_ring_cptr msg, bg_ring_ptr resp, bg_ring_ptr state)
#else /* C (the simulator's host twins) */
#define BG_RING_HANDLER(msg, resp, state) __device__ __forceinline__ void bg_ring_handler(const void* msg, void* resp, void* state)
#endif
#line 1 "handler"
${handler}
#line 1 "ring_kernel.cu"
#define BG_HANDLER ${entry}

__device__ __forceinline__ bg_u64 bg_ld_acq(const volatile bg_u64* p) { bg_u64 v = *p; __threadfence_system(); return v; }
__device__ __forceinline__ bg_u32 bg_ld_acq32(const volatile bg_u32* p) { bg_u32 v = *p; __threadfence_system(); return v; }
__device__ __forceinline__ void bg_st_rel(volatile bg_u64* p, bg_u64 v) { __threadfence_system(); *p = v; }
__device__ __forceinline__ void bg_st_rel32(volatile bg_u32* p, bg_u32 v) { __threadfence_system(); *p = v; }
__device__ __forceinline__ void bg_idle(bg_u32* iters, bg_u64* since) {
  (void)since;
  ++*iters;
#if __CUDA_ARCH__ >= 700
  if (*iters > 4096u) __nanosleep(2000); else if (*iters > 256u) __nanosleep(100);
#endif
}
__device__ __forceinline__ void bg_zero(bg_u8* p, bg_u32 n) { for (bg_u32 i = 0; i < n; i++) p[i] = 0; }

/* One block of one thread: always resident, so the loop can wait for the host. */
extern "C" __global__ void ${RING_KERNEL}(bg_u64 in_addr, bg_u64 out_addr, void* state) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  bg_u8* in = (bg_u8*)in_addr;
  bg_u8* out = (bg_u8*)out_addr;
  volatile bg_u64* in_head = (volatile bg_u64*)(in + 0);
  const volatile bg_u64* in_tail = (const volatile bg_u64*)(in + 128);
  const volatile bg_u32* in_meta = (const volatile bg_u32*)(in + 256);
  const volatile bg_u64* out_head = (const volatile bg_u64*)(out + 0);
  volatile bg_u64* out_tail = (volatile bg_u64*)(out + 128);
  volatile bg_u32* out_meta = (volatile bg_u32*)(out + 256);
  bg_u8* in_data = in + 384;
  bg_u8* out_data = out + 384;
  const bg_u64 in_mask = in_meta[1] - 1u, out_cap = out_meta[1], out_mask = out_cap - 1u;
  bg_u64 h = *in_head, ot = *out_tail, oh = bg_ld_acq(out_head);
  bg_u32 idle = 0;
  bg_u64 since = 0;
${RING_LOOP}
}

extern "C" __global__ void ${BATCH_KERNEL}(const bg_u8* in, bg_u8* out, bg_u32 n, void* state) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
${BATCH_LOOP}
}
`;
}

function metalSource(handler: string, entry: string, o: { messageBytes: number; responseBytes: number; stateBytes: number }): string {
  return `// generated by bungpu RingKernel (Metal): relaunch per batch, Metal cannot keep a kernel resident.
#include <metal_stdlib>
using namespace metal;
${defines(o)}#define BG_RING_HANDLER(msg, resp, state) static inline void bg_ring_handler(const device uchar* msg, device uchar* resp, device uchar* state)
${handler}
#define BG_HANDLER ${entry}

kernel void ${BATCH_KERNEL}(const device uchar* in [[buffer(0)]], device uchar* out [[buffer(1)]],
                          constant uint& n [[buffer(2)]], device uchar* state [[buffer(3)]],
                          uint tid [[thread_position_in_grid]]) {
  if (tid != 0) return;
  for (uint i = 0; i < n; i++) {
    device uchar* r = out + i * BG_RING_RESP_BYTES;
    for (uint b = 0; b < BG_RING_RESP_BYTES; b++) r[b] = 0;
    BG_HANDLER(in + i * BG_RING_MSG_BYTES, r, state);
  }
}
`;
}

function sourceShape(call: string, o: RingSourceOptions): { messageBytes: number; responseBytes: number; stateBytes: number } {
  const mb = o.messageBytes;
  const rb = o.responseBytes ?? mb;
  checkRingShape(call, mb, 2);
  if (typeof rb !== "number" || !Number.isInteger(rb) || rb < 4 || rb > 65536 || rb % 4)
    invalid(call, `responseBytes must be a multiple of 4 in 4..65536, got ${String(rb)}`);
  const sb = o.stateBytes ?? 0;
  if (!Number.isSafeInteger(sb) || sb < 0) invalid(call, `stateBytes must be a non-negative integer, got ${String(sb)}`);
  return { messageBytes: mb, responseBytes: rb, stateBytes: sb };
}

/** The full kernel source RingKernel compiles for `backend` (exported for tests and inspection). */
export function ringKernelSource(backend: BackendName, o: RingSourceOptions): string {
  const call = "ringKernelSource";
  if (!o || typeof o !== "object") invalid(call, "expected options");
  const shape = sourceShape(call, o);
  const src = handlerFor(call, backend, o.handler);
  const entry = checkEntry(call, o.entry, src);
  switch (backend) {
    case "cpu":
      return cpuSource(src, entry, shape);
    case "cuda":
      return cudaSource(src, entry, shape);
    case "metal":
      return metalSource(src, entry, shape);
  }
  invalid(call, `unknown backend ${String(backend)}`);
}

// ---- RingKernel ---------------------------------------------------------------------------------

export interface RingKernelOptions extends RingSourceOptions {
  /** Ring capacity in messages (power of two); in Batch mode, the most messages per launch. */
  capacity: number;
  /** Initial state (its bytes are copied to the device), or a size in bytes (zeroed). */
  state?: ArrayBufferView | number;
  /** Bytes of state; defaults to the state's size. At least 16 bytes are allocated. */
  stateBytes?: number;
  /** Ring (default) or Batch. */
  mode?: KernelMode | KernelModeName;
  /** Extra compiler options. */
  compileOptions?: string[];
}

/** "ring": a persistent kernel; "batch": a launch per batch; "relaunch": Ring asked for, but the
 * backend cannot keep a kernel resident, so it relaunches per batch. */
export type RingRunMode = "ring" | "batch" | "relaunch";

interface Pending {
  resolve: (v: Uint8Array) => void;
  reject: (e: unknown) => void;
  done: boolean;
  value?: Uint8Array;
}

interface ReceiveWaiter {
  max: number; // 0: one message (a Uint8Array of responseBytes); else a batch of up to max
  deadline: number;
  resolve: (v: Uint8Array) => void;
  reject: (e: unknown) => void;
}

/** Where responses come from, and where messages go. */
interface Transport {
  /** Accept up to n messages of `u8` now; returns how many. */
  push(u8: Uint8Array, n: number): number;
  /** Responses ready to pull. */
  available(): number;
  /** Pull up to n responses (k * responseBytes bytes). */
  pull(n: number): Uint8Array;
  /** Make progress (Batch: complete and launch batches). `urgent`: flush staged messages now. */
  progress(urgent: boolean): void;
  /** Block until every accepted message's response is available (requestSync). */
  flushSync(): void;
  /** Ask the kernel to finish once drained. */
  close(): void;
  /** True once closed and every response is available and the device work has finished. */
  finished(): boolean;
  /** Stop at once and wait (dispose). */
  abort(): void;
  dispose(): void;
}

class RingTransport implements Transport {
  readonly inRing: Ring;
  readonly outRing: Ring;
  readonly #inH: number;
  readonly #outH: number;
  readonly #rb: number;
  readonly #stream: Stream;
  #launched = false;
  #resident: Set<number> | null = null;
  #residentHandle = 0;

  constructor(device: Device, kernel: Kernel, stream: Stream, state: Buffer, mb: number, rb: number, cap: number) {
    this.#stream = stream;
    this.#rb = rb;
    this.inRing = Ring.create(device, { messageBytes: mb, capacity: cap });
    try {
      this.outRing = Ring.create(device, { messageBytes: rb, capacity: cap });
    } catch (e) {
      this.inRing.dispose();
      throw e;
    }
    this.#inH = this.inRing.handle;
    this.#outH = this.outRing.handle;
    try {
      kernel.launch(stream, { grid: 1, block: 1, args: [this.inRing.deviceAddress, this.outRing.deviceAddress, state] });
      this.#launched = true;
      // resident until it exits: device-wide waits leave its stream out
      this.#resident = device.state.residentStreams;
      this.#residentHandle = stream.handle;
      this.#resident.add(this.#residentHandle);
    } catch (e) {
      this.inRing.dispose();
      this.outRing.dispose();
      throw e;
    }
  }

  push(u8: Uint8Array, n: number): number {
    return pushChecked(this.inRing.device.backend, this.#inH, u8, n);
  }

  available(): number {
    return this.outRing.countFast();
  }

  pull(n: number): Uint8Array {
    const k = Math.min(n, this.outRing.countFast());
    const out = new Uint8Array(k * this.#rb);
    if (k === 0) return out;
    const got = popChecked(this.outRing.device.backend, this.#outH, out, k);
    return got === k ? out : out.subarray(0, got * this.#rb);
  }

  progress(): void {}

  flushSync(): void {}

  close(): void {
    if (this.inRing.closedFast() === 0) this.inRing.closed = 1;
  }

  finished(): boolean {
    const done = this.outRing.closedFast() === 1 && this.#stream.query();
    if (done) this.#notResident();
    return done;
  }

  #notResident(): void {
    this.#resident?.delete(this.#residentHandle);
    this.#resident = null;
  }

  abort(): void {
    if (this.#launched && !this.inRing.disposed) {
      this.inRing.closed = 2;
      this.#stream.synchronize();
    }
    this.#notResident();
  }

  dispose(): void {
    this.#notResident();
    this.inRing.dispose();
    this.outRing.dispose();
  }
}

class BatchTransport implements Transport {
  readonly #kernel: Kernel;
  readonly #stream: Stream;
  readonly #state: Buffer;
  readonly #mb: number;
  readonly #rb: number;
  readonly #cap: number;
  readonly #stage: Uint8Array;
  #staged = 0;
  readonly #inBuf: Buffer;
  readonly #outBuf: Buffer;
  readonly #event: Event;
  #inFlight = 0;
  /** Completed responses: chunks and the read offset in the first, in responses. */
  #ready: Uint8Array[] = [];
  #readyOff = 0;
  #readyCount = 0;
  #closed = false;

  constructor(device: Device, kernel: Kernel, stream: Stream, state: Buffer, mb: number, rb: number, cap: number) {
    this.#kernel = kernel;
    this.#stream = stream;
    this.#state = state;
    this.#mb = mb;
    this.#rb = rb;
    this.#cap = cap;
    this.#stage = new Uint8Array(cap * mb);
    this.#inBuf = Buffer.alloc(device, cap * mb);
    this.#outBuf = Buffer.alloc(device, cap * rb);
    this.#event = Event.create(device, { timing: false });
  }

  push(u8: Uint8Array, n: number): number {
    const k = Math.min(n, this.#cap - this.#staged);
    if (k > 0) {
      this.#stage.set(u8.subarray(0, k * this.#mb), this.#staged * this.#mb);
      this.#staged += k;
    }
    return k;
  }

  available(): number {
    return this.#readyCount;
  }

  pull(n: number): Uint8Array {
    const rb = this.#rb;
    const k = Math.min(n, this.#readyCount);
    const first = this.#ready[0];
    // The common case: all of it from the first chunk, without a copy.
    if (first && this.#readyOff * rb + k * rb <= first.byteLength) {
      const out = first.subarray(this.#readyOff * rb, (this.#readyOff + k) * rb);
      this.#consume(k);
      return out;
    }
    const out = new Uint8Array(k * rb);
    let got = 0;
    while (got < k) {
      const c = this.#ready[0]!;
      const left = c.byteLength / rb - this.#readyOff;
      const take = Math.min(left, k - got);
      out.set(c.subarray(this.#readyOff * rb, (this.#readyOff + take) * rb), got * rb);
      this.#consume(take);
      got += take;
    }
    return out;
  }

  #consume(k: number): void {
    this.#readyOff += k;
    this.#readyCount -= k;
    const c = this.#ready[0];
    if (c && this.#readyOff * this.#rb >= c.byteLength) {
      this.#ready.shift();
      this.#readyOff = 0;
    }
  }

  #complete(): void {
    const out = this.#outBuf.read(new Uint8Array(this.#inFlight * this.#rb));
    this.#ready.push(out);
    this.#readyCount += this.#inFlight;
    this.#inFlight = 0;
  }

  #launch(): void {
    const n = this.#staged;
    this.#inBuf.write(this.#stage.subarray(0, n * this.#mb));
    this.#kernel.launch(this.#stream, { grid: 1, block: 1, args: [this.#inBuf, this.#outBuf, n, this.#state] });
    this.#event.record(this.#stream);
    this.#inFlight = n;
    this.#staged = 0;
  }

  progress(urgent: boolean): void {
    if (this.#inFlight && this.#event.query()) this.#complete();
    if (!this.#inFlight && this.#staged && (urgent || this.#closed || this.#staged === this.#cap)) this.#launch();
  }

  flushSync(): void {
    for (;;) {
      if (this.#inFlight) {
        this.#stream.synchronize();
        this.#complete();
      }
      if (!this.#staged) return;
      this.#launch();
    }
  }

  close(): void {
    this.#closed = true;
  }

  finished(): boolean {
    this.progress(true);
    return this.#closed && !this.#inFlight && !this.#staged;
  }

  abort(): void {
    if (this.#inFlight) this.#stream.synchronize();
    this.#inFlight = 0;
    this.#staged = 0;
  }

  dispose(): void {
    this.#event.dispose();
    this.#inBuf.dispose();
    this.#outBuf.dispose();
  }
}

const SPIN_NS = 80_000; // request(): busy-poll this long before falling back to the poller
/** The poller turns with setImmediate while work moves and this long after; then timers. */
const IMMEDIATE_MS = 2;
const SYNC_TIMEOUT_NS = 10_000_000_000; // requestSync(): give up after 10 s

function timeoutError(call: string, ms: number): GpuError {
  return new GpuError(Status.LAUNCH_TIMEOUT, `${call}: no response within ${ms} ms`, { backend: "typescript", call });
}

/** What a RingKernel forgotten while running leaves behind: released once its kernel has exited. */
interface Abandoned {
  hdr: Uint32Array;
  device: Device;
  stream: Stream;
  /** Its transport (rings), state buffer, stream and module, in that order. */
  parts: { dispose(): void }[];
}

/** Abandoned kernels being aborted: their parts stay referenced until the kernel has exited. */
const draining = new Set<Abandoned>();

/**
 * Safety net: a RingKernel forgotten while running aborts its kernel rather than spin forever.
 * The registry holds its parts strongly, so none of their own finalisers runs while the kernel
 * may still use them (a stream's would wait for the kernel on this thread: a deadlock in the
 * collector; a buffer's would free memory the kernel writes). They are disposed once the stream
 * is seen idle, polled without blocking.
 */
const abandoned = new FinalizationRegistry<Abandoned>((h) => {
  try {
    Atomics.store(h.hdr, CLOSED_W, 2);
  } catch {
    /* memory already gone */
  }
  draining.add(h);
  const settle = () => {
    let exited: boolean;
    try {
      exited = !h.device.state.open || h.stream.disposed || h.stream.query();
    } catch {
      exited = true; // a failed stream has no kernel left to wait for
    }
    if (!exited) {
      setTimeout(settle, 2).unref();
      return;
    }
    draining.delete(h);
    if (!h.device.state.open) return; // closing the device released them
    for (const p of h.parts) {
      try {
        p.dispose();
      } catch {
        /* a finaliser has no caller to report to */
      }
    }
  };
  settle();
});

/**
 * A handler run on a stream of messages, by a persistent kernel (KernelMode.Ring) or a launch per
 * batch (KernelMode.Batch). See the file comment for the model.
 *
 * Responses are paired by order: each accepted message records its response's destination
 * (a `request()` promise, or the receive queue for `send`/`sendBatch`), so `request` and
 * `receive` may be mixed; `receive` only ever returns responses to messages given to `send`.
 */
export class RingKernel {
  readonly device: Device;
  readonly kernelMode: KernelMode;
  /** "ring", "batch", or "relaunch" (Ring asked for on a backend that relaunches per batch). */
  readonly mode: RingRunMode;
  readonly messageBytes: number;
  readonly responseBytes: number;
  readonly capacity: number;
  readonly stateBytes: number;
  /** The generated source that was compiled. */
  readonly source: string;

  readonly #module: Module;
  readonly #stream: Stream;
  readonly #stateBuf: Buffer;
  readonly #t: Transport;
  readonly #ring: RingTransport | null;
  readonly #stateCtor: (new (b: ArrayBuffer) => ArrayBufferView) | null;

  /** Response destinations in message order: a count of receive-queue responses, or a request. */
  #dq: (number | Pending)[] = [];
  #dqHead = 0;
  #pendingRequests = 0;
  /** Responses pulled from the device that belong to the receive queue, oldest first. */
  #inbox: Uint8Array[] = [];
  #inboxOff = 0;
  #inboxCount = 0;
  /** Messages accepted but not yet in the transport (backpressure), oldest first. */
  #sendq: { u8: Uint8Array; n: number; done?: () => void; fail: (e: unknown) => void }[] = [];
  #sendqOff = 0;
  #sendqCount = 0;
  #receivers: ReceiveWaiter[] = [];
  #stopWaiters: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  #urgent = false;
  #flushQueued = false;
  #pumping = false;
  #stopping = false;
  #stopped = false;
  #live = true;
  #failure: unknown;
  #finalState: Uint8Array | undefined;
  #processedIn = 0;
  #pulled = 0;

  private constructor(
    device: Device,
    kernelMode: KernelMode,
    mode: RingRunMode,
    shape: { messageBytes: number; responseBytes: number; stateBytes: number },
    capacity: number,
    source: string,
    module: Module,
    stream: Stream,
    stateBuf: Buffer,
    t: Transport,
    stateCtor: (new (b: ArrayBuffer) => ArrayBufferView) | null,
  ) {
    this.device = device;
    this.kernelMode = kernelMode;
    this.mode = mode;
    this.messageBytes = shape.messageBytes;
    this.responseBytes = shape.responseBytes;
    this.stateBytes = shape.stateBytes;
    this.capacity = capacity;
    this.source = source;
    this.#module = module;
    this.#stream = stream;
    this.#stateBuf = stateBuf;
    this.#t = t;
    this.#ring = t instanceof RingTransport ? t : null;
    this.#stateCtor = stateCtor;
    if (this.#ring)
      abandoned.register(
        this,
        { hdr: new Uint32Array(nativeView(this.#ring.inRing.hostAddress, RING_META_OFFSET + 16)), device, stream, parts: [t, stateBuf, stream, module] },
        this,
      );
    this.#dependent = new WeakRef(this);
    device.state.dependents.add(this.#dependent);
  }

  /** This kernel's entry in its device's dependents, so Device.dispose() stops it first. */
  #dependent: WeakRef<RingKernel>;

  /** Whether `device` can keep a kernel resident (Ring mode proper) or relaunches per batch. */
  static supportsPersistent(device: Device): boolean {
    return device.backend === "cpu" || device.backend === "cuda";
  }

  /** The source RingKernel would compile for `backend` (see ringKernelSource). */
  static source(backend: BackendName, opts: RingSourceOptions): string {
    return ringKernelSource(backend, opts);
  }

  /** Compile the handler, allocate rings and state, and start the kernel (Ring) or get ready (Batch). */
  static launch(device: Device, opts: RingKernelOptions): RingKernel {
    const call = "RingKernel.launch";
    if (!(device instanceof Device)) invalid(call, "expected a Device");
    if (!opts || typeof opts !== "object") invalid(call, "expected options");
    const kernelMode = opts.mode === undefined ? KernelMode.Ring : KernelMode.parse(opts.mode);
    checkRingShape(call, opts.messageBytes, opts.capacity);
    // State: initial bytes or a size; stateBytes must agree with the initial bytes.
    let init: Uint8Array | undefined;
    let stateCtor: (new (b: ArrayBuffer) => ArrayBufferView) | null = null;
    let sb: number;
    if (opts.state === undefined) sb = opts.stateBytes ?? 0;
    else if (typeof opts.state === "number") sb = opts.state;
    else if (ArrayBuffer.isView(opts.state)) {
      init = new Uint8Array(opts.state.buffer, opts.state.byteOffset, opts.state.byteLength);
      sb = init.byteLength;
      if (!(opts.state instanceof DataView)) stateCtor = opts.state.constructor as new (b: ArrayBuffer) => ArrayBufferView;
    } else invalid(call, "state must be a TypedArray, a DataView or a byte count");
    if (!Number.isSafeInteger(sb) || sb < 0) invalid(call, `state size must be a non-negative integer, got ${String(sb)}`);
    if (opts.stateBytes !== undefined && opts.stateBytes !== sb)
      invalid(call, `stateBytes ${String(opts.stateBytes)} does not match the state given (${sb} bytes)`);
    const shape = sourceShape(call, { ...opts, stateBytes: sb });
    const backend = device.backend;
    const persistent = kernelMode.isRing() && RingKernel.supportsPersistent(device);
    const mode: RingRunMode = kernelMode.isBatch() ? "batch" : persistent ? "ring" : "relaunch";
    const source = ringKernelSource(backend, { ...opts, stateBytes: sb });
    if (opts.compileOptions !== undefined && (!Array.isArray(opts.compileOptions) || opts.compileOptions.some((o) => typeof o !== "string")))
      invalid(call, "compileOptions must be an array of strings");

    const module = Program.compile(device, source, { name: "ring_kernel", options: opts.compileOptions });
    const cleanup: { dispose(): void }[] = [module];
    try {
      const stream = Stream.create(device, { nonBlocking: true });
      cleanup.push(stream);
      const stateBuf = Buffer.alloc(device, Math.max(16, sb));
      cleanup.push(stateBuf);
      stateBuf.fill(0);
      if (init && init.byteLength) stateBuf.write(init);
      let t: Transport;
      if (persistent) {
        const k = module.kernel(RING_KERNEL, ["i64", "i64", "buffer"]);
        t = new RingTransport(device, k, stream, stateBuf, shape.messageBytes, shape.responseBytes, opts.capacity);
      } else {
        const k = module.kernel(BATCH_KERNEL, ["buffer", "buffer", "u32", "buffer"]);
        t = new BatchTransport(device, k, stream, stateBuf, shape.messageBytes, shape.responseBytes, opts.capacity);
      }
      return new RingKernel(device, kernelMode, mode, shape, opts.capacity, source, module, stream, stateBuf, t, stateCtor);
    } catch (e) {
      for (const c of cleanup.reverse()) {
        try {
          c.dispose();
        } catch {
          /* report the first failure */
        }
      }
      throw e;
    }
  }

  // ---- state of the object ----

  get disposed(): boolean {
    return !this.#live || !this.device.state.open;
  }

  /** True once stop() has finished: the kernel has exited and every response was delivered. */
  get stopped(): boolean {
    return this.#stopped;
  }

  #alive(call: string): void {
    if (!this.#live) disposed(call, "ring kernel");
    if (!this.device.state.open) disposed(call, "device of this ring kernel");
    if (this.#failure !== undefined) throw this.#failure;
  }

  #accepting(call: string): void {
    this.#alive(call);
    if (this.#stopping) illegalState(call, "the ring kernel is stopping or stopped; no more messages are accepted");
  }

  /** Messages accepted and not yet answered (in the device, staged, or waiting for room). */
  get inFlight(): number {
    let n = this.#pendingRequests;
    for (let i = this.#dqHead; i < this.#dq.length; i++) {
      const d = this.#dq[i]!;
      if (typeof d === "number") n += d;
    }
    return n;
  }

  /** The handler's state after stop(): a copy, typed like the initial state (else a Uint8Array). */
  get state(): ArrayBufferView {
    const s = this.#stateBytesAfterStop("RingKernel.state");
    return this.#stateCtor ? new this.#stateCtor(s.slice().buffer) : s.slice();
  }

  /** The state's bytes as `C` (e.g. Float64Array) after stop(). */
  stateAs<T extends ArrayBufferView>(C: new (b: ArrayBuffer) => T): T {
    const s = this.#stateBytesAfterStop("RingKernel.stateAs");
    return new C(s.slice().buffer);
  }

  #stateBytesAfterStop(call: string): Uint8Array {
    if (!this.#finalState) {
      if (!this.#live) disposed(call, "ring kernel");
      illegalState(call, "the state is readable after stop() (the kernel owns it while it runs)");
    }
    return this.#finalState.subarray(0, this.stateBytes);
  }

  // ---- messages in ----

  #msg(call: string, msg: unknown): Uint8Array {
    const u8 = bytesView(call, msg);
    if (u8.byteLength !== this.messageBytes)
      invalid(call, `a message is ${this.messageBytes} bytes, got ${u8.byteLength}`);
    return u8;
  }

  #msgs(call: string, msgs: unknown): { u8: Uint8Array; n: number } {
    if (Array.isArray(msgs)) {
      const mb = this.messageBytes;
      const u8 = new Uint8Array(msgs.length * mb);
      for (let i = 0; i < msgs.length; i++) u8.set(this.#msg(call, msgs[i]), i * mb);
      return { u8, n: msgs.length };
    }
    const u8 = bytesView(call, msgs);
    if (u8.byteLength % this.messageBytes)
      invalid(call, `${u8.byteLength} bytes is not a whole number of ${this.messageBytes}-byte messages`);
    return { u8, n: u8.byteLength / this.messageBytes };
  }

  #destRun(n: number): void {
    const last = this.#dq.length > this.#dqHead ? this.#dq[this.#dq.length - 1] : undefined;
    if (typeof last === "number") this.#dq[this.#dq.length - 1] = last + n;
    else this.#dq.push(n);
  }

  /** Push now what fits, in order behind anything already waiting for room; returns how many. */
  #pushNow(u8: Uint8Array, n: number): number {
    if (this.#sendqCount) return 0;
    const k = this.#t.push(u8, n);
    this.#processedIn += k;
    return k;
  }

  #enqueue(u8: Uint8Array, n: number, done: (() => void) | undefined, fail: (e: unknown) => void): void {
    this.#sendq.push({ u8: u8.slice(0, n * this.messageBytes), n, done, fail });
    this.#sendqCount += n;
  }

  /** Move waiting messages into the transport while it has room. */
  #drainSendq(): void {
    const mb = this.messageBytes;
    while (this.#sendq.length) {
      const e = this.#sendq[0]!;
      const left = e.n - this.#sendqOff;
      const k = this.#t.push(e.u8.subarray(this.#sendqOff * mb), left);
      this.#processedIn += k;
      this.#sendqCount -= k;
      if (k < left) {
        this.#sendqOff += k;
        return;
      }
      this.#sendq.shift();
      this.#sendqOff = 0;
      e.done?.();
    }
  }

  /** Send one message if there is room now; false when full (nothing is overwritten or queued). */
  trySend(msg: ArrayBufferView | ArrayBuffer): boolean {
    const call = "RingKernel.trySend";
    this.#accepting(call);
    const u8 = this.#msg(call, msg);
    if (this.#pushNow(u8, 1) !== 1) return false;
    this.#destRun(1);
    return true;
  }

  /** Send as many of `msgs` as fit now (in order); returns how many were accepted. */
  trySendBatch(msgs: ArrayBufferView | ArrayBuffer | readonly (ArrayBufferView | ArrayBuffer)[]): number {
    const call = "RingKernel.trySendBatch";
    this.#accepting(call);
    const { u8, n } = this.#msgs(call, msgs);
    const k = n ? this.#pushNow(u8, n) : 0;
    if (k) this.#destRun(k);
    return k;
  }

  /**
   * Send one message; its response goes to receive(). Resolves once the message is accepted
   * (at once when there is room; otherwise when the kernel has made room: backpressure).
   */
  send(msg: ArrayBufferView | ArrayBuffer): Promise<void> {
    const call = "RingKernel.send";
    this.#accepting(call);
    const u8 = this.#msg(call, msg);
    this.#destRun(1);
    if (this.#pushNow(u8, 1) === 1) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#enqueue(u8, 1, resolve, reject);
      this.#pump();
    });
  }

  /** Send many messages (one Uint8Array of n * messageBytes, or an array of messages), in order. */
  sendBatch(msgs: ArrayBufferView | ArrayBuffer | readonly (ArrayBufferView | ArrayBuffer)[]): Promise<void> {
    const call = "RingKernel.sendBatch";
    this.#accepting(call);
    const { u8, n } = this.#msgs(call, msgs);
    if (n === 0) return Promise.resolve();
    this.#destRun(n);
    const k = this.#pushNow(u8, n);
    if (k === n) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#enqueue(u8.subarray(k * this.messageBytes), n - k, resolve, reject);
      this.#pump();
    });
  }

  /**
   * Send `msg` and resolve with its response. Busy-polls the outbound ring for a short while
   * (no timer) before handing over to the poller, so a round trip costs no event-loop turn.
   */
  request(msg: ArrayBufferView | ArrayBuffer): Promise<Uint8Array> {
    const call = "RingKernel.request";
    this.#accepting(call);
    const u8 = this.#msg(call, msg);
    let p!: Pending;
    const promise = new Promise<Uint8Array>((resolve, reject) => {
      p = { resolve, reject, done: false };
    });
    this.#dq.push(p);
    this.#pendingRequests++;
    if (this.#pushNow(u8, 1) !== 1) {
      this.#enqueue(u8, 1, undefined, () => {});
      this.#pump();
      return promise;
    }
    if (this.#ring) {
      // Spin on the outbound ring's header (zero-copy view): no FFI call until a response is there.
      const out = this.#ring.outRing;
      const t0 = Bun.nanoseconds();
      for (;;) {
        if (out.countFast() !== 0) {
          this.#route();
          if (p.done) return promise;
        }
        if (Bun.nanoseconds() - t0 > SPIN_NS) break;
      }
      this.#pump();
    } else if (!this.#flushQueued) {
      // Batch: requests made in the same turn share one launch, issued from a microtask.
      this.#flushQueued = true;
      queueMicrotask(() => {
        this.#flushQueued = false;
        this.#spinBatch();
        this.#pump();
      });
    }
    return promise;
  }

  /** Batch: launch what is staged and busy-poll its completion for a short while. */
  #spinBatch(): void {
    if (!this.#live) return;
    this.#urgent = true;
    this.#tick();
    const t0 = Bun.nanoseconds();
    while (this.#pendingRequests > 0 && this.#failure === undefined && Bun.nanoseconds() - t0 < SPIN_NS) this.#tick();
  }

  /**
   * Send `msg` and wait for its response, blocking the JS thread (for latency-critical loops and
   * benches). Earlier requests' promises are settled on the way; throws LAUNCH_TIMEOUT after 10 s.
   */
  requestSync(msg: ArrayBufferView | ArrayBuffer): Uint8Array {
    const call = "RingKernel.requestSync";
    this.#accepting(call);
    const u8 = this.#msg(call, msg);
    const p: Pending = { resolve: () => {}, reject: () => {}, done: false };
    const t0 = Bun.nanoseconds();
    // Room first: wait for the kernel (ring) or complete earlier batches (batch).
    while (this.#sendqCount || this.#pushNow(u8, 1) !== 1) {
      this.#tick();
      if (this.#failure !== undefined) throw this.#failure;
      if (!this.#ring) this.#t.flushSync();
      if (Bun.nanoseconds() - t0 > SYNC_TIMEOUT_NS) throw timeoutError(call, SYNC_TIMEOUT_NS / 1e6);
    }
    this.#dq.push(p);
    this.#pendingRequests++;
    if (!this.#ring) {
      this.#t.flushSync();
      this.#route();
    } else {
      const out = this.#ring.outRing;
      for (;;) {
        if (out.countFast() !== 0) {
          this.#route();
          if (p.done) break;
        }
        if (Bun.nanoseconds() - t0 > SYNC_TIMEOUT_NS) {
          this.#failAll(timeoutError(call, SYNC_TIMEOUT_NS / 1e6));
          throw this.#failure;
        }
      }
    }
    if (!p.done) illegalState(call, "no response after a synchronous flush");
    this.#serveReceivers();
    return p.value!;
  }

  /** Batch mode: launch the staged messages now (Ring mode: nothing to do). */
  flush(): void {
    this.#alive("RingKernel.flush");
    this.#urgent = true;
    this.#tick();
  }

  // ---- responses out ----

  /** Route responses in order: requests get theirs; receive-queue responses are pulled into the
   * inbox only when a request waits behind them, when stopping, or in Batch mode. */
  #route(): void {
    const t = this.#t;
    const eager = !this.#ring || this.#stopping;
    while (this.#dqHead < this.#dq.length) {
      const d = this.#dq[this.#dqHead]!;
      if (typeof d !== "number") {
        if (t.available() === 0) break;
        const r = t.pull(1);
        if (r.byteLength === 0) break;
        this.#pulled++;
        this.#dqHead++;
        this.#pendingRequests--;
        d.done = true;
        d.value = r;
        d.resolve(r);
        continue;
      }
      if (!eager && this.#pendingRequests === 0) break;
      const avail = t.available();
      if (avail === 0) break;
      const r = t.pull(Math.min(d, avail));
      const k = r.byteLength / this.responseBytes;
      if (k === 0) break;
      this.#pulled += k;
      this.#inbox.push(r);
      this.#inboxCount += k;
      if (k === d) this.#dqHead++;
      else {
        this.#dq[this.#dqHead] = d - k;
        break;
      }
    }
    if (this.#dqHead > 1024 && this.#dqHead * 2 > this.#dq.length) {
      this.#dq = this.#dq.slice(this.#dqHead);
      this.#dqHead = 0;
    }
  }

  /** Take up to `max` receive-queue responses (inbox first, then the ring); k * responseBytes bytes. */
  #take(max: number): Uint8Array {
    const rb = this.responseBytes;
    if (this.#inboxCount) {
      const c = this.#inbox[0]!;
      const left = c.byteLength / rb - this.#inboxOff;
      const k = Math.min(left, max);
      const out = c.subarray(this.#inboxOff * rb, (this.#inboxOff + k) * rb);
      this.#inboxOff += k;
      this.#inboxCount -= k;
      if (k === left) {
        this.#inbox.shift();
        this.#inboxOff = 0;
      }
      return out;
    }
    const d = this.#dq[this.#dqHead];
    if (typeof d !== "number") return EMPTY;
    const r = this.#t.pull(Math.min(d, max));
    const k = r.byteLength / rb;
    this.#pulled += k;
    if (k === d) this.#dqHead++;
    else if (k) this.#dq[this.#dqHead] = d - k;
    return r;
  }

  /** One response to a sent message, or null if none is ready. */
  tryReceive(): Uint8Array | null {
    this.#alive("RingKernel.tryReceive");
    this.#urgent = true;
    this.#tick();
    const r = this.#take(1);
    return r.byteLength ? r : null;
  }

  /** Up to `max` responses now, concatenated (k * responseBytes bytes; empty when none). */
  tryReceiveBatch(max = this.capacity): Uint8Array {
    const call = "RingKernel.tryReceiveBatch";
    this.#alive(call);
    if (!Number.isInteger(max) || max < 1) invalid(call, `max must be a positive integer, got ${String(max)}`);
    this.#urgent = true;
    this.#tick();
    return this.#take(max);
  }

  /** The next response to a sent message. `timeoutMs`: reject with LAUNCH_TIMEOUT after that long. */
  receive(opts: { timeoutMs?: number } = {}): Promise<Uint8Array> {
    return this.#receive("RingKernel.receive", 0, opts);
  }

  /** At least one and up to `max` responses, concatenated. */
  receiveBatch(max = this.capacity, opts: { timeoutMs?: number } = {}): Promise<Uint8Array> {
    const call = "RingKernel.receiveBatch";
    if (!Number.isInteger(max) || max < 1) invalid(call, `max must be a positive integer, got ${String(max)}`);
    return this.#receive(call, max, opts);
  }

  #receive(call: string, max: number, opts: { timeoutMs?: number }): Promise<Uint8Array> {
    try {
      this.#alive(call);
    } catch (e) {
      return Promise.reject(e);
    }
    const ms = opts?.timeoutMs;
    if (ms !== undefined && (typeof ms !== "number" || !(ms >= 0)))
      return Promise.reject(new GpuError(Status.INVALID_VALUE, `${call}: timeoutMs must be a non-negative number`, { backend: "typescript", call }));
    return new Promise<Uint8Array>((resolve, reject) => {
      this.#receivers.push({ max, deadline: ms === undefined ? Infinity : performance.now() + ms, resolve, reject });
      this.#urgent = true;
      this.#tick();
      this.#pump();
    });
  }

  /** Hand ready responses to receive() waiters, in order; time out the late ones. */
  #serveReceivers(): void {
    while (this.#receivers.length) {
      const w = this.#receivers[0]!;
      const r = this.#take(w.max || 1);
      if (r.byteLength === 0) break;
      this.#receivers.shift();
      w.resolve(r);
    }
    if (!this.#receivers.length) return;
    const now = performance.now();
    const nothingLeft = this.#stopped && !this.#inboxCount;
    this.#receivers = this.#receivers.filter((w) => {
      if (nothingLeft) {
        w.reject(new GpuError(Status.NOT_READY, "RingKernel.receive: the ring kernel has stopped and every response was received", { backend: "typescript", call: "RingKernel.receive" }));
        return false;
      }
      if (now < w.deadline) return true;
      w.reject(timeoutError("RingKernel.receive", Math.round(w.deadline - now)));
      return false;
    });
  }

  // ---- the poller ----

  /** One step of progress: push waiting messages, run batches, route responses, serve waiters. */
  #tick(): void {
    if (!this.#live || this.#failure !== undefined) return;
    try {
      if (this.#sendq.length) this.#drainSendq();
      const waiting = this.#pendingRequests > 0 || this.#receivers.length > 0 || this.#stopping;
      this.#t.progress(this.#urgent || waiting);
      this.#urgent = false;
      this.#route();
      this.#serveReceivers();
      if (this.#stopping && !this.#stopped && !this.#sendq.length) {
        this.#t.close();
        if (this.#t.finished()) {
          this.#route();
          this.#finalState = this.#stateBuf.read();
          this.#stopped = true;
          this.#serveReceivers();
          for (const w of this.#stopWaiters.splice(0)) w.resolve();
        }
      }
    } catch (e) {
      this.#failAll(e);
    }
  }

  #busy(): boolean {
    return this.#live && this.#failure === undefined &&
      (this.#sendq.length > 0 || this.#pendingRequests > 0 || this.#receivers.length > 0 || this.#stopWaiters.length > 0);
  }

  /** Responses and messages moved so far: the poller stays on fast turns while this grows. */
  #moved(): number {
    return this.#processedIn + this.#pulled;
  }

  /**
   * Poll while anyone waits: setImmediate turns while work moves, then a backing-off timer
   * (up to 4 ms) once idle for 2 ms, so a stream never stalls on timers and an idle wait is cheap.
   */
  #pump(): void {
    if (this.#pumping || !this.#busy()) return;
    this.#pumping = true;
    let last = this.#moved();
    let activeAt = performance.now();
    let delay = 0;
    const turn = () => {
      this.#tick();
      if (!this.#busy()) {
        this.#pumping = false;
        return;
      }
      const m = this.#moved();
      const now = performance.now();
      if (m !== last) {
        last = m;
        activeAt = now;
        delay = 0;
      }
      if (now - activeAt < IMMEDIATE_MS) setImmediate(turn);
      else {
        delay = Math.min(4, delay + 0.5);
        setTimeout(turn, delay);
      }
    };
    setImmediate(turn);
  }

  #failAll(e: unknown): void {
    this.#failure ??= e;
    const err = this.#failure;
    for (let i = this.#dqHead; i < this.#dq.length; i++) {
      const d = this.#dq[i]!;
      if (typeof d !== "number" && !d.done) {
        d.done = true;
        d.reject(err);
      }
    }
    this.#dq = [];
    this.#dqHead = 0;
    this.#pendingRequests = 0;
    for (const s of this.#sendq.splice(0)) s.fail(err);
    this.#sendqCount = 0;
    for (const w of this.#receivers.splice(0)) w.reject(err);
    for (const w of this.#stopWaiters.splice(0)) w.reject(err);
  }

  /**
   * Stop accepting messages, let the kernel process every accepted one (responses stay readable
   * through receive/tryReceive), wait for it to exit and copy the state out.
   */
  stop(): Promise<void> {
    try {
      this.#alive("RingKernel.stop");
    } catch (e) {
      return Promise.reject(e);
    }
    if (this.#stopped) return Promise.resolve();
    this.#stopping = true;
    return new Promise<void>((resolve, reject) => {
      this.#stopWaiters.push({ resolve, reject });
      this.#tick();
      this.#pump();
    });
  }

  /**
   * Release everything. A running kernel is aborted (messages not yet processed are dropped) and
   * waited for, so no thread is left spinning; pending promises reject with INVALID_HANDLE.
   */
  dispose(): void {
    if (!this.#live) return;
    const err = new GpuError(Status.INVALID_HANDLE, "RingKernel: disposed before this completed", { backend: "typescript", call: "RingKernel.dispose" });
    let first: unknown;
    const attempt = (f: () => void) => {
      try {
        f();
      } catch (e) {
        first ??= e;
      }
    };
    if (this.device.state.open) {
      attempt(() => this.#t.abort());
      attempt(() => {
        if (!this.#finalState) this.#finalState = this.#stateBuf.read();
      });
    }
    this.#failAll(err);
    this.#live = false;
    abandoned.unregister(this);
    this.device.state.dependents.delete(this.#dependent);
    attempt(() => this.#t.dispose());
    attempt(() => this.#stateBuf.dispose());
    attempt(() => this.#stream.dispose());
    attempt(() => this.#module.dispose());
    if (first !== undefined) throw first;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

const EMPTY = new Uint8Array(0);
