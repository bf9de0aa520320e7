// CommandEncoder: kernel dispatches, copies, fills, barriers and event records/waits appended in
// TypeScript into one packed command buffer (the format of shim/bungpu.h, "command buffers"),
// then handed to the shim in ONE crossing by commit(stream) → bg_submit_checked.
//
// Packing: every command is an 8-byte header {u32 op, u32 size} and an 8-byte-aligned, little
// endian body. A dispatch is 48 + 8·nargs bytes: u64 kernel; u32 grid[3]; u32 block[3];
// u32 shared; u32 nargs; then the argument slots, packed by kernel.ts's packArgs straight into
// the encoder's memory. Nothing crosses the FFI per command and nothing is allocated per
// dispatch in the common case (number grids and blocks).
//
// Every command is validated as it is appended, with the rules of Kernel.launch and Stream.copy /
// Stream.fill: a bad command throws GpuError and leaves the encoder exactly as it was (bytes
// written past the end while validating are not part of the buffer until the length moves).
//
// Memory: one explicit ArrayBuffer of at least 64 KiB (Bun never moves those), doubled when full.
// The shim copies the bytes before bg_submit returns, so the buffer is free again at once.
import { N, addressOf, lastError, readU64, scratchU8, slot } from "../ffi/native";
import { Cmd } from "../ffi/sys";
import { Buffer, checkSize, fillPattern, type FillType } from "./buffer";
import { noteCaptured, type Device, type DeviceState } from "./device";
import { GpuError, disposed, invalid, type BackendLabel, options } from "./errors";
import { Event } from "./event";
import { Kernel, dim3, packArgs, type ArgArea, type ArgValue, type Dim3 } from "./kernel";
import { Stream } from "./stream";

export interface DispatchOptions {
  grid: Dim3;
  block: Dim3;
  args: readonly ArgValue[];
  sharedBytes?: number;
}

export interface CopyOptions {
  bytes?: number;
  srcOffset?: number;
  dstOffset?: number;
}

export interface FillOptions {
  type?: FillType;
  offset?: number;
  bytes?: number;
}

/** Counts of what an encoder holds (or what a range of it holds). */
export interface EncoderCounts {
  commands: number;
  dispatches: number;
  barriers: number;
  copies: number;
  fills: number;
  events: number;
}

/**
 * A position in an encoder: its length and counts at one moment. A ComputeGraph keeps one before
 * and after each node, so it can copy a node's commands into another encoder.
 * @internal
 */
export interface EncoderMark extends EncoderCounts {
  bytes: number;
  refs: number;
}

/** One decoded command (for tests and debugging). */
export interface CommandInfo {
  op: "launch" | "copy" | "memset" | "barrier" | "eventRecord" | "eventWait" | "copyHtoD" | "copyDtoH" | "unknown";
  offset: number;
  bytes: number;
}

const OP_NAMES: CommandInfo["op"][] = ["unknown", "launch", "copy", "memset", "barrier", "eventRecord", "eventWait", "copyHtoD", "copyDtoH"];

/** What a command refers to and must still be alive when the buffer is committed. */
interface Ref {
  readonly disposed: boolean;
}

const MIN_BYTES = 65536;
const TWO32 = 4294967296;
const LAUNCH_HEADER = 48;
const U32_MAX = 4294967295;
const DIM_MAX = 2147483647;

/** Each kernel's most threads per block, asked of the backend once. */
const maxThreadsOf = new WeakMap<Kernel, number>();
function maxThreads(kernel: Kernel): number {
  let m = maxThreadsOf.get(kernel);
  if (m === undefined) maxThreadsOf.set(kernel, (m = kernel.maxThreadsPerBlock));
  return m;
}

function badGeometry(call: string, kernel: Kernel, max: number, g: number[], b: number[]): never {
  invalid(
    call,
    `${kernel.name}: grid ${g.join("x")}, block ${b.join("x")} exceeds the limits (${max} threads per block for this kernel; block x,y <= 1024, z <= 64; grid y,z <= 65535)`,
  );
}

export class CommandEncoder {
  readonly device: Device;
  readonly #dev: DeviceState;
  #ab: ArrayBuffer;
  #u8: Uint8Array;
  #u32: Uint32Array;
  #area: ArgArea;
  #ptr: number;
  #cap: number;
  #len = 0;
  #refs: Ref[] = [];
  #cmds = 0;
  #dispatches = 0;
  #barriers = 0;
  #copies = 0;
  #fills = 0;
  #events = 0;
  #lastArgOffset = -1;
  /** The last kernel dispatched, checked once: its module, handle and argument type codes. */
  #kernel: Kernel | null = null;
  #module: Kernel["module"] | null = null;
  #khandle = 0;
  #codes: Uint8Array = new Uint8Array(0);
  /** The last kernel's most threads per block (bg_kernel_max_threads), for dispatch's checks. */
  #maxThreads = 0;
  /** The last four references added: one used again soon after is not added again. */
  #r0: Ref | null = null;
  #r1: Ref | null = null;
  #r2: Ref | null = null;
  #r3: Ref | null = null;
  /** Successful bg_submit crossings made by commit(). */
  #submits = 0;

  constructor(device: Device, opts: { initialBytes?: number } = {}) {
    opts = options("new CommandEncoder", opts);
    if (!device || typeof device !== "object" || !("state" in device)) invalid("CommandEncoder", "expected a Device");
    if (device.disposed) disposed("CommandEncoder", "device");
    this.device = device;
    this.#dev = device.state;
    const want = checkSize("CommandEncoder", "initialBytes", opts.initialBytes ?? MIN_BYTES);
    let cap = MIN_BYTES;
    while (cap < want) cap *= 2;
    this.#ab = new ArrayBuffer(cap);
    this.#u8 = new Uint8Array(this.#ab);
    this.#u32 = new Uint32Array(this.#ab);
    this.#area = areaOf(this.#ab);
    this.#ptr = addressOf(this.#ab);
    this.#cap = cap;
  }

  /** Bytes of packed commands so far. */
  get byteLength(): number {
    return this.#len;
  }

  get commandCount(): number {
    return this.#cmds;
  }

  /** Bytes the encoder can hold before it grows. */
  get capacity(): number {
    return this.#cap;
  }

  get counts(): EncoderCounts {
    return {
      commands: this.#cmds,
      dispatches: this.#dispatches,
      barriers: this.#barriers,
      copies: this.#copies,
      fills: this.#fills,
      events: this.#events,
    };
  }

  /** bg_submit crossings this encoder has made. */
  get submits(): number {
    return this.#submits;
  }

  /** Byte offset of the argument slots of the last dispatch appended (-1 before any). */
  get lastArgOffset(): number {
    return this.#lastArgOffset;
  }

  #grow(extra: number): void {
    const need = this.#len + extra;
    if (need <= this.#cap) return;
    let cap = this.#cap * 2;
    while (cap < need) cap *= 2;
    const ab = new ArrayBuffer(cap);
    const u8 = new Uint8Array(ab);
    u8.set(this.#u8.subarray(0, this.#len));
    this.#ab = ab;
    this.#u8 = u8;
    this.#u32 = new Uint32Array(ab);
    this.#area = areaOf(ab);
    this.#ptr = addressOf(ab);
    this.#cap = cap;
  }

  #useKernel(call: string, kernel: Kernel): void {
    if (!(kernel instanceof Kernel)) invalid(call, "expected a Kernel");
    const h = kernel.handle; // throws if its module or device is gone
    if (kernel.module.device.state !== this.#dev) invalid(call, `${kernel.name}: kernel of another device`);
    this.#codes = sigCodes(kernel);
    this.#maxThreads = maxThreads(kernel);
    this.#khandle = h;
    this.#module = kernel.module;
    this.#kernel = kernel;
  }

  #ref(x: Ref): void {
    if (x === this.#r0 || x === this.#r1 || x === this.#r2 || x === this.#r3) return;
    this.#r3 = this.#r2;
    this.#r2 = this.#r1;
    this.#r1 = this.#r0;
    this.#r0 = x;
    this.#refs.push(x);
  }

  #forgetRecent(): void {
    this.#r0 = this.#r1 = this.#r2 = this.#r3 = null;
  }

  #live(call: string): void {
    if (!this.#dev.open) disposed(call, "device of this encoder");
  }

  #buffer(call: string, what: string, b: unknown): Buffer {
    if (!(b instanceof Buffer)) invalid(call, `${what} must be a Buffer`);
    if (b.device.state !== this.#dev) invalid(call, `${what} is a buffer of another device (${b.device.spec})`);
    if (b.disposed) disposed(call, "buffer");
    return b;
  }

  /** Append a kernel dispatch: the same checks as Kernel.launch, no FFI crossing. */
  dispatch(kernel: Kernel, cfg: DispatchOptions): this {
    const call = "CommandEncoder.dispatch";
    const dev = this.#dev;
    if (kernel !== this.#kernel || this.#kernel === null) this.#useKernel(call, kernel);
    const m = this.#module!;
    if (m.disposed) kernel.handle; // throws: its module or device is gone
    const k = this.#khandle;
    if (cfg === null || typeof cfg !== "object") invalid(call, `${kernel.name}: expected { grid, block, args }`);
    const codes = this.#codes;
    const n = codes.length;
    const size = LAUNCH_HEADER + 8 * n;
    if (this.#len + size > this.#cap) this.#grow(size);
    const off = this.#len;
    // Grid and block: numbers take a path with no allocation; arrays go through dim3.
    let gx: number, gy = 1, gz = 1, bx: number, by = 1, bz = 1;
    const grid = cfg.grid, block = cfg.block;
    if (typeof grid === "number" && grid >= 1 && grid <= DIM_MAX && Math.floor(grid) === grid) gx = grid;
    else [gx, gy, gz] = dim3(call, "grid", grid);
    if (typeof block === "number" && block >= 1 && block <= DIM_MAX && Math.floor(block) === block) bx = block;
    else [bx, by, bz] = dim3(call, "block", block);
    // The device's limits, checked here as Kernel.launch's bg_launch checks them: a command the
    // backend would refuse must not wait for commit (after the commands before it have run).
    if (bx * by * bz > this.#maxThreads || (dev.backend !== "metal" && (bx > 1024 || by > 1024 || bz > 64 || gy > 65535 || gz > 65535)))
      badGeometry(call, kernel, this.#maxThreads, [gx, gy, gz], [bx, by, bz]);
    if (dev.backend === "cpu" && gx * gy * gz > U32_MAX)
      invalid(call, `${kernel.name}: grid ${gx}x${gy}x${gz} has more than 2^32-1 blocks (the cpu backend's limit)`);
    const shared = cfg.sharedBytes ?? 0;
    if (typeof shared !== "number" || !Number.isInteger(shared) || shared < 0 || shared > U32_MAX)
      invalid(call, `sharedBytes must be a non-negative 32-bit integer, got ${String(shared)}`);
    // Arguments straight into their slots (validated first; the length has not moved yet). The
    // fast packer handles the common cases; anything else (a bigint, a bad value) goes through
    // kernel.ts's packArgs, which packs it or throws Kernel.launch's error.
    const args = cfg.args;
    const at = (off + LAUNCH_HEADER) >>> 3;
    if (!fastPack(codes, args, dev.handle, this.#area, at)) packArgs(call, kernel.name, kernel.signature, args, dev.handle, this.#area, at);
    const u32 = this.#u32;
    const w = off >>> 2;
    u32[w] = Cmd.LAUNCH;
    u32[w + 1] = size;
    u32[w + 2] = k >>> 0;
    u32[w + 3] = (k - (k >>> 0)) / TWO32;
    u32[w + 4] = gx;
    u32[w + 5] = gy;
    u32[w + 6] = gz;
    u32[w + 7] = bx;
    u32[w + 8] = by;
    u32[w + 9] = bz;
    u32[w + 10] = shared;
    u32[w + 11] = n;
    this.#ref(m);
    for (let i = 0; i < n; i++) if (codes[i] === T_BUFFER) this.#ref(args[i] as Buffer);
    this.#len = off + size;
    this.#lastArgOffset = off + LAUNCH_HEADER;
    this.#cmds++;
    this.#dispatches++;
    return this;
  }

  /** Append a device-to-device copy (Stream.copy's rules). */
  copy(dst: Buffer, src: Buffer, opts: CopyOptions = {}): this {
    opts = options("CommandEncoder.copy", opts);
    const call = "CommandEncoder.copy";
    this.#live(call);
    this.#buffer(call, "dst", dst);
    this.#buffer(call, "src", src);
    const so = checkSize(call, "src offset", opts.srcOffset ?? 0);
    const dO = checkSize(call, "dst offset", opts.dstOffset ?? 0);
    const bytes = checkSize(call, "byte count", opts.bytes ?? src.byteLength - so);
    inRange(call, "src", src.byteLength, so, bytes);
    inRange(call, "dst", dst.byteLength, dO, bytes);
    if (this.#len + 32 > this.#cap) this.#grow(32);
    const w = this.#len >>> 2, u32 = this.#u32;
    u32[w] = Cmd.COPY;
    u32[w + 1] = 32;
    put64(u32, w + 2, dst.address + dO);
    put64(u32, w + 4, src.address + so);
    put64(u32, w + 6, bytes);
    this.#ref(dst);
    this.#ref(src);
    this.#len += 32;
    this.#cmds++;
    this.#copies++;
    return this;
  }

  /** Append a fill of `value` as elements of `type` (Stream.fill's rules). */
  fill(buf: Buffer, value: number, opts: FillOptions = {}): this {
    opts = options("CommandEncoder.fill", opts);
    const call = "CommandEncoder.fill";
    this.#live(call);
    this.#buffer(call, "buffer", buf);
    const { pattern, size } = fillPattern(call, value, opts.type ?? "u8");
    const off = checkSize(call, "offset", opts.offset ?? 0);
    const bytes = checkSize(call, "byte count", opts.bytes ?? buf.byteLength - off);
    inRange(call, "buffer", buf.byteLength, off, bytes);
    if (bytes % size || (buf.address + off) % size) invalid(call, `range is not aligned to ${size}-byte elements`);
    if (this.#len + 32 > this.#cap) this.#grow(32);
    const w = this.#len >>> 2, u32 = this.#u32;
    u32[w] = Cmd.MEMSET;
    u32[w + 1] = 32;
    put64(u32, w + 2, buf.address + off);
    u32[w + 4] = pattern;
    u32[w + 5] = size;
    put64(u32, w + 6, bytes / size);
    this.#ref(buf);
    this.#len += 32;
    this.#cmds++;
    this.#fills++;
    return this;
  }

  /** Later commands see every write of earlier ones (a no-op on an in-order CPU stream). */
  barrier(): this {
    this.#live("CommandEncoder.barrier");
    if (this.#len + 8 > this.#cap) this.#grow(8);
    const w = this.#len >>> 2;
    this.#u32[w] = Cmd.BARRIER;
    this.#u32[w + 1] = 8;
    this.#len += 8;
    this.#cmds++;
    this.#barriers++;
    return this;
  }

  #event(call: string, op: number, ev: Event): this {
    this.#live(call);
    if (!(ev instanceof Event)) invalid(call, "expected an Event");
    if (ev.device.state !== this.#dev) invalid(call, "event of another device");
    const h = ev.handle; // throws if disposed
    if (this.#len + 16 > this.#cap) this.#grow(16);
    const w = this.#len >>> 2, u32 = this.#u32;
    u32[w] = op;
    u32[w + 1] = 16;
    put64(u32, w + 2, h);
    this.#refs.push(eventRef(ev));
    this.#len += 16;
    this.#cmds++;
    this.#events++;
    return this;
  }

  /** Record `ev` at this point of the commands. */
  recordEvent(ev: Event): this {
    return this.#event("CommandEncoder.recordEvent", Cmd.EVENT_RECORD, ev);
  }

  /** Make the commands after this point wait for `ev`'s latest record. */
  waitEvent(ev: Event): this {
    return this.#event("CommandEncoder.waitEvent", Cmd.EVENT_WAIT, ev);
  }

  /**
   * Submit every command to `stream` in one crossing (bg_submit_checked), then empty the encoder
   * (unless `keep`, which leaves it ready to be committed again). An empty encoder crosses nothing.
   * Returns true when a crossing was made.
   */
  commit(stream: Stream, opts: { keep?: boolean } = {}): boolean {
    opts = options("CommandEncoder.commit", opts);
    const call = "CommandEncoder.commit";
    if (!(stream instanceof Stream)) invalid(call, "expected a Stream");
    const s = stream.handle; // throws if disposed
    if (stream.device.state !== this.#dev) invalid(call, "stream of another device");
    this.#checkRefs(call);
    let crossed = false;
    if (this.#len > 0) {
      scratchU8.fill(0xff, 0, 8); // "no offset": the shim writes one only when a command is bad
      const rc = N.bg_submit_checked(s, this.#ptr, this.#len, slot(0));
      if (rc !== 0) {
        const bad = readU64(0); // still all ones when the shim named no command
        const msg = lastError() || "bg_submit failed";
        if (bad >= this.#len) throw new GpuError(rc, msg, { backend: this.#dev.backend, call: "bg_submit" });
        throw new CommandError(rc, msg, bad, this.#indexAt(bad), this.#dev.backend);
      }
      this.#submits++;
      crossed = true;
      if (this.#dev.captures > 0) noteCaptured(this.#dev, s, null, this.#refs); // a graph replays it: keep what it uses
    }
    if (!opts.keep) this.reset();
    return crossed;
  }

  #checkRefs(call: string): void {
    const refs = this.#refs;
    for (let i = 0; i < refs.length; i++)
      if (refs[i]!.disposed) disposed(call, `${refs[i]!.constructor.name.toLowerCase()} an encoded command uses`);
  }

  #indexAt(offset: number): number {
    let i = 0;
    for (let off = 0; off < this.#len && off < offset; i++) {
      const size = this.#u32[(off >>> 2) + 1]!;
      if (size < 8) break;
      off += size;
    }
    return i;
  }

  /** Forget every command (the memory is kept for the next use). */
  reset(): void {
    this.#len = 0;
    this.#refs.length = 0;
    this.#forgetRecent();
    this.#cmds = this.#dispatches = this.#barriers = this.#copies = this.#fills = this.#events = 0;
    this.#lastArgOffset = -1;
  }

  /** A copy of the packed commands. */
  bytes(): Uint8Array {
    return this.#u8.slice(0, this.#len);
  }

  /** The commands, decoded (for tests and debugging). */
  describe(): CommandInfo[] {
    const out: CommandInfo[] = [];
    for (let off = 0; off < this.#len; ) {
      const op = this.#u32[off >>> 2]!, size = this.#u32[(off >>> 2) + 1]!;
      out.push({ op: OP_NAMES[op] ?? "unknown", offset: off, bytes: size });
      if (size < 8) break;
      off += size;
    }
    return out;
  }

  // ---- used by ComputeGraph ------------------------------------------------------------------

  /** @internal The current length, counts and reference count. */
  mark(): EncoderMark {
    this.#forgetRecent(); // a node's reference range names its module too
    return {
      bytes: this.#len,
      refs: this.#refs.length,
      commands: this.#cmds,
      dispatches: this.#dispatches,
      barriers: this.#barriers,
      copies: this.#copies,
      fills: this.#fills,
      events: this.#events,
    };
  }

  /** @internal Append the commands of `src` between two of its marks (one memcpy). */
  appendRange(src: CommandEncoder, from: EncoderMark, to: EncoderMark): void {
    if (!(src instanceof CommandEncoder)) invalid("CommandEncoder.appendRange", "src must be a CommandEncoder");
    src.#markRange("CommandEncoder.appendRange", from, to);
    if (src.#dev !== this.#dev) invalid("CommandEncoder.append", "commands of another device");
    const bytes = to.bytes - from.bytes;
    if (bytes <= 0) return;
    if (this.#len + bytes > this.#cap) this.#grow(bytes);
    this.#u8.set(src.#u8.subarray(from.bytes, to.bytes), this.#len);
    this.#len += bytes;
    for (let i = from.refs; i < to.refs; i++) this.#refs.push(src.#refs[i]!);
    this.#forgetRecent();
    this.#cmds += to.commands - from.commands;
    this.#dispatches += to.dispatches - from.dispatches;
    this.#barriers += to.barriers - from.barriers;
    this.#copies += to.copies - from.copies;
    this.#fills += to.fills - from.fills;
    this.#events += to.events - from.events;
  }

  /** @internal Check the references of a range are alive (before a partial append). */
  checkRange(call: string, from: EncoderMark, to: EncoderMark): void {
    this.#markRange(typeof call === "string" ? call : "CommandEncoder.checkRange", from, to);
    for (let i = from.refs; i < to.refs; i++)
      if (this.#refs[i]!.disposed) disposed(call, `${this.#refs[i]!.constructor.name.toLowerCase()} a recorded command uses`);
  }

  /** Two marks of this encoder, in order (mark() made them), else INVALID_VALUE. */
  #markRange(call: string, from: EncoderMark, to: EncoderMark): void {
    const ok = (m: EncoderMark) =>
      m !== null && typeof m === "object" && Number.isInteger(m.bytes) && Number.isInteger(m.refs) && m.bytes >= 0 && m.refs >= 0 && m.bytes <= this.#len && m.refs <= this.#refs.length;
    if (!ok(from) || !ok(to) || from.bytes > to.bytes || from.refs > to.refs) invalid(call, "from and to must be marks of this encoder, in order");
  }

  /** @internal Overwrite `words` u32 words at byte `offset` (an argument block) from `src`. */
  patch(offset: number, src: Uint32Array, words: number): void {
    if (!(src instanceof Uint32Array) || !Number.isInteger(words) || words < 0 || words > src.length ||
        !Number.isInteger(offset) || offset < 0 || offset % 4 || offset + 4 * words > this.#len)
      invalid("CommandEncoder.patch", "offset, src and words must name whole u32 words inside the encoded commands");
    const u32 = this.#u32;
    const w = offset >>> 2;
    for (let i = 0; i < words; i++) u32[w + i] = src[i]!;
  }
}

/** A submit the shim refused: `offset` and `index` name the offending command. Nothing ran. */
export class CommandError extends GpuError {
  readonly offset: number;
  readonly index: number;
  constructor(code: number, message: string, offset: number, index: number, backend: BackendLabel) {
    super(code, `${message} (command ${index} at byte ${offset})`, { backend, call: "bg_submit" });
    this.offset = offset;
    this.index = index;
  }
}

// Event has no `disposed` getter: its handle getter throws once it is disposed.
function eventRef(ev: Event): Ref {
  return {
    get disposed(): boolean {
      try {
        ev.handle;
        return false;
      } catch {
        return true;
      }
    },
    constructor: Event,
  } as Ref;
}

// ---- the fast argument packer -----------------------------------------------------------------

const T_BUFFER = 0, T_I32 = 1, T_U32 = 2, T_I64 = 3, T_F32 = 4, T_F64 = 5;
const TYPE_CODE: Record<string, number> = { buffer: T_BUFFER, i32: T_I32, u32: T_U32, i64: T_I64, f32: T_F32, f64: T_F64 };
const codeCache = new WeakMap<Kernel, Uint8Array>();

function sigCodes(k: Kernel): Uint8Array {
  let c = codeCache.get(k);
  if (!c) {
    c = Uint8Array.from(k.signature, (t) => TYPE_CODE[t]!);
    codeCache.set(k, c);
  }
  return c;
}

/**
 * Pack `args` into slots from `at` when every one is a plain case (a live buffer of this device,
 * an in-range i32/u32, a number for f32/f64). Returns false, having checked nothing it can vouch
 * for, on anything else: the caller then runs packArgs, which packs it or throws.
 */
function fastPack(codes: Uint8Array, args: readonly ArgValue[], devHandle: number, area: ArgArea, at: number): boolean {
  const n = codes.length;
  if (!Array.isArray(args) || args.length !== n) return false;
  const u32 = area.u32, i32 = area.i32;
  for (let i = 0; i < n; i++) {
    const v = args[i];
    const w = (at + i) << 1;
    switch (codes[i]) {
      case T_BUFFER: {
        if (!(v instanceof Buffer) || v.device.state.handle !== devHandle) return false;
        const a = v.address; // throws INVALID_HANDLE if disposed, as packArgs does
        const lo = a >>> 0;
        u32[w] = lo;
        u32[w + 1] = (a - lo) / TWO32;
        break;
      }
      case T_I32:
        if (typeof v !== "number" || (v | 0) !== v) return false;
        i32[w] = v;
        i32[w + 1] = v >> 31;
        break;
      case T_U32:
        if (typeof v !== "number" || v >>> 0 !== v) return false;
        u32[w] = v;
        u32[w + 1] = 0;
        break;
      case T_F32:
        if (typeof v !== "number") return false;
        area.f32[w] = v;
        u32[w + 1] = 0;
        break;
      case T_F64:
        if (typeof v !== "number") return false;
        area.f64[at + i] = v;
        break;
      default:
        return false; // i64: packArgs handles numbers and bigints
    }
  }
  return true;
}

function areaOf(ab: ArrayBuffer): ArgArea {
  return { u32: new Uint32Array(ab), i32: new Int32Array(ab), f32: new Float32Array(ab), f64: new Float64Array(ab), i64: new BigInt64Array(ab) };
}

function put64(u32: Uint32Array, w: number, v: number): void {
  const lo = v >>> 0;
  u32[w] = lo;
  u32[w + 1] = (v - lo) / TWO32;
}

function inRange(call: string, what: string, len: number, off: number, bytes: number): void {
  if (off + bytes > len) invalid(call, `${what} range [${off}, ${off + bytes}) is past the end (${len} bytes)`);
}
