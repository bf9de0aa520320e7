// CommandList: the one TypeScript encoder of the bg_submit byte format. Every batching mode
// (schedules in Stream, MultiStream and Graph mode, command encoders, compute graphs) lowers its
// work to command lists and hands them to the shim in one crossing each.
//
// Format (shim/bungpu.h, "command buffers"): every command is an 8-byte header {u32 op, u32 size}
// and an 8-byte-aligned, little-endian body. A launch is 48 + 8·nargs bytes: u64 kernel;
// u32 grid[3]; u32 block[3]; u32 shared; u32 nargs; then the argument slots, packed by launch.ts's
// packArgs straight into the list's memory. The list remembers where each launch's slots start,
// so arguments can be rewritten in place later (patchArgs) and a replay submits the same bytes.
//
// Every command is validated as it is appended: a launch by ./launch (the check every door shares),
// copies and fills by the rules of Stream.copy / Stream.fill: a bad command throws GpuError and leaves the list exactly as it was (bytes written
// past the end while validating are not part of it until the length moves).
//
// Memory: one explicit ArrayBuffer of at least 64 KiB (Bun never moves those), doubled when full.
// The shim copies the bytes before bg_submit returns, so the memory is free again at once.
//
// Over 600 lines on purpose: the format and its one encoder are kept in one file so that nothing
// else writes command bytes.
import { SubmitError, addressOf, submit } from "../ffi/result";
import { Cmd, SUBMIT_SERIAL, SUBMIT_WAIT as BG_SUBMIT_WAIT, bg_cmd_copy_rec, bg_cmd_event_rec, bg_cmd_header, bg_cmd_launch_rec, bg_cmd_memset_rec } from "../ffi/constants";
import { Buffer, HostBuffer, checkSize, fillPattern, fillTypeOf, type FillType } from "./buffer";
import { noteCaptured, type Device, type DeviceState } from "./device";
import { GpuError, Status, disposed, invalid, options, type OptionKeys, type BackendLabel } from "./errors";
import { Event } from "./event";
import { INSPECT, bytesText, plural } from "./inspect";
import { Graph } from "./capture";
import { Kernel } from "./kernel";
import { kernelNamesByHandle } from "./kernel_names";
import { CHECK_AREA, LAUNCH_KEYS, areaOf, checkArgs, checkDevice, checkGeometry, packArgs, type ArgArea, type ArgValue, type LaunchConfig, type LaunchKeys, type Signature } from "./launch";
import { Stream } from "./stream";

// The keys each options argument may have (errors.ts `options` refuses any other).
const LIST_KEYS: OptionKeys<{ initialBytes?: number }> = { initialBytes: true };
const COPY_KEYS: OptionKeys<CopyOptions> = { bytes: true, dstOffset: true, srcOffset: true };
const FILL_KEYS: OptionKeys<FillOptions> = { type: true, offset: true, bytes: true };
const SUBMIT_KEYS: OptionKeys<{ keep?: boolean; wait?: boolean; serial?: boolean }> = { keep: true, wait: true, serial: true };

// ---- the format: tags and sizes in one spot ------------------------------------------------------

/** Command tags (BG_CMD_*). */
export const CMD = Cmd;
/** Byte sizes of the fixed commands, and of a launch before its argument slots. */
export const CMD_BYTES = {
  LAUNCH_HEADER: bg_cmd_launch_rec.size,
  COPY: bg_cmd_copy_rec.size,
  MEMSET: bg_cmd_memset_rec.size,
  BARRIER: bg_cmd_header.size,
  EVENT: bg_cmd_event_rec.size,
} as const;
/**
 * Byte offsets inside a launch record, from its header: u64 kernel, u32 grid[3], u32 block[3],
 * u32 shared bytes, u32 nargs, then the 8-byte argument slots (bg_cmd_launch_rec, generated).
 */
export const LAUNCH_AT = bg_cmd_launch_rec.offset;
/** bg_submit_ex flag: wait for the stream in the same crossing. */
export const SUBMIT_WAIT = BG_SUBMIT_WAIT;

/** A launch of a kernel of signature `S`: `args` is typed from it (see ArgsOf). */
export type LaunchOptions<S extends Signature = Signature> = LaunchConfig<S>;

export interface CopyOptions {
  bytes?: number | undefined;
  srcOffset?: number | undefined;
  dstOffset?: number | undefined;
}

export interface FillOptions {
  type?: FillType | undefined;
  offset?: number | undefined;
  bytes?: number | undefined;
}

/** Counts of what a list holds (or what a range of it holds). */
export interface EncoderCounts {
  commands: number;
  dispatches: number;
  barriers: number;
  copies: number;
  fills: number;
  events: number;
}

/**
 * A position in a list: its length and counts at one moment. A ComputeGraph keeps one before and
 * after each node, so it can copy a node's commands into another list.
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

/** What a command refers to and must still be alive when the list is submitted. */
interface Ref {
  readonly disposed: boolean;
}

const KERNEL_W = LAUNCH_AT.kernel >>> 2;
const GRID_W = LAUNCH_AT.grid >>> 2;
const BLOCK_W = LAUNCH_AT.block >>> 2;
const SHARED_W = LAUNCH_AT.shared >>> 2;
const NARGS_W = LAUNCH_AT.nargs >>> 2;

/** Grid, block and shared bytes of the launch record at word `w`. */
function writeGeometry(u32: Uint32Array, w: number, gx: number, gy: number, gz: number, bx: number, by: number, bz: number, shared: number): void {
  u32[w + GRID_W] = gx;
  u32[w + GRID_W + 1] = gy;
  u32[w + GRID_W + 2] = gz;
  u32[w + BLOCK_W] = bx;
  u32[w + BLOCK_W + 1] = by;
  u32[w + BLOCK_W + 2] = bz;
  u32[w + SHARED_W] = shared;
}

const MIN_BYTES = 65536;
const TWO32 = 4294967296;

// ---- the list ------------------------------------------------------------------------------------

export class CommandList {
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
  /** The last kernel launched, checked once: its module and handle. */
  #kernel: Kernel | null = null;
  #module: Kernel["module"] | null = null;
  #khandle = 0;
  /** The last four references added: one used again soon after is not added again. */
  #r0: Ref | null = null;
  #r1: Ref | null = null;
  #r2: Ref | null = null;
  #r3: Ref | null = null;
  /** Successful bg_submit crossings made by submit(). */
  #submits = 0;

  constructor(device: Device, opts: { initialBytes?: number } = {}, call = "new CommandList") {
    opts = options(call, opts, LIST_KEYS);
    if (!device || typeof device !== "object" || !("state" in device)) invalid(call, "expected a Device");
    if (device.disposed) disposed(call, "device");
    this.device = device;
    this.#dev = device.state;
    const want = checkSize(call, "initialBytes", opts.initialBytes ?? MIN_BYTES);
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

  /** Bytes the list can hold before it grows. */
  get capacity(): number {
    return this.#cap;
  }

  /** Address of the first byte (moves when the list grows). */
  get address(): number {
    return this.#ptr;
  }

  get counts(): EncoderCounts {
    return { commands: this.#cmds, dispatches: this.#dispatches, barriers: this.#barriers, copies: this.#copies, fills: this.#fills, events: this.#events };
  }

  /** bg_submit crossings this list has made. */
  get submits(): number {
    return this.#submits;
  }

  /** Byte offset of the argument slots of the last launch appended (-1 before any). */
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
    checkDevice(call, kernel, this.device);
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
    if (b.disposed) disposed(call, what === "buffer" ? "buffer" : `${what} buffer`);
    return b;
  }

  #host(call: string, what: string, h: unknown): HostBuffer {
    if (!(h instanceof HostBuffer)) invalid(call, `${what} must be a HostBuffer (pinned host memory)`);
    if (h.device.state !== this.#dev) invalid(call, `${what} is host memory of another device`);
    if (h.disposed) disposed(call, `${what} host buffer`);
    return h;
  }

  /**
   * @internal launch() for a kernel typed only as Signature, its arguments a plain array (the
   * package's plans and schedules build them). TypeScript 7 (`bun check`) maps
   * ArgsOf<NoInfer<Signature>> as an object that no array satisfies, so they come through here.
   */
  launchArgs(kernel: Kernel, cfg: Omit<LaunchOptions, "args"> & { args: readonly ArgValue[] }, call = "CommandList.launch"): this {
    return this.launch(kernel, cfg as LaunchOptions, call, null); // built by the package: its keys are known
  }

  /**
   * Append a kernel launch: checked by ./launch as Kernel.launch is (under `call`'s name, its
   * config's keys against `known`: a door with more keys passes its own), no FFI crossing.
   */
  launch<S extends Signature>(kernel: Kernel<S>, cfg: LaunchOptions<NoInfer<S>>, call = "CommandList.launch", known: LaunchKeys | null = LAUNCH_KEYS): this {
    if (kernel !== this.#kernel || this.#kernel === null) this.#useKernel(call, kernel);
    const m = this.#module!;
    if (m.disposed) kernel.handle; // throws: its module or device is gone
    const k = this.#khandle;
    const g = checkGeometry(call, kernel, cfg, known);
    const gx = g[0]!, gy = g[1]!, gz = g[2]!, bx = g[3]!, by = g[4]!, bz = g[5]!, shared = g[6]!;
    const n = kernel.codes.length;
    const size = CMD_BYTES.LAUNCH_HEADER + 8 * n;
    if (this.#len + size > this.#cap) this.#grow(size);
    const off = this.#len;
    // Arguments straight into their slots (validated first; the length has not moved yet).
    const args = cfg.args;
    packArgs(call, kernel, args, this.#area, (off + CMD_BYTES.LAUNCH_HEADER) >>> 3);
    const u32 = this.#u32;
    const w = off >>> 2;
    u32[w] = CMD.LAUNCH;
    u32[w + 1] = size;
    u32[w + KERNEL_W] = k >>> 0;
    u32[w + KERNEL_W + 1] = (k - (k >>> 0)) / TWO32;
    writeGeometry(u32, w, gx, gy, gz, bx, by, bz, shared);
    u32[w + NARGS_W] = n;
    this.#ref(m);
    const codes = kernel.codes;
    for (let i = 0; i < n; i++) if (codes[i] === 0) this.#ref(args[i] as Buffer);
    this.#len = off + size;
    this.#lastArgOffset = off + CMD_BYTES.LAUNCH_HEADER;
    this.#cmds++;
    this.#dispatches++;
    return this;
  }

  /** One copy command of any direction: sizes checked against both ends, then appended. */
  #copy(call: string, op: number, opts: CopyOptions, dst: Buffer | HostBuffer, src: Buffer | HostBuffer): this {
    opts = options(call, opts, COPY_KEYS);
    this.#live(call);
    const addr = (what: string, x: Buffer | HostBuffer, host: boolean) =>
      host ? this.#host(call, what, x).hostAddress : this.#buffer(call, what, x).address;
    const dstAddr = addr("dst", dst, op === CMD.COPY_DTOH);
    const srcAddr = addr("src", src, op === CMD.COPY_HTOD);
    const so = checkSize(call, "src offset", opts.srcOffset ?? 0);
    const dO = checkSize(call, "dst offset", opts.dstOffset ?? 0);
    const bytes = checkSize(call, "byte count", opts.bytes ?? src.byteLength - so);
    inRange(call, "src", src.byteLength, so, bytes);
    inRange(call, "dst", dst.byteLength, dO, bytes);
    if (this.#len + CMD_BYTES.COPY > this.#cap) this.#grow(CMD_BYTES.COPY);
    const w = this.#len >>> 2, u32 = this.#u32;
    u32[w] = op;
    u32[w + 1] = CMD_BYTES.COPY;
    put64(u32, w + 2, dstAddr + dO);
    put64(u32, w + 4, srcAddr + so);
    put64(u32, w + 6, bytes);
    this.#ref(dst);
    this.#ref(src);
    this.#len += CMD_BYTES.COPY;
    this.#cmds++;
    this.#copies++;
    return this;
  }

  /** Append a device-to-device copy (Stream.copy's rules). */
  copy(dst: Buffer, src: Buffer, opts: CopyOptions = {}, call = "CommandList.copy"): this {
    return this.#copy(call, CMD.COPY, opts, dst, src);
  }

  /** Append a copy from pinned host memory into a buffer (the host memory is kept alive by the caller). */
  copyHtoD(dst: Buffer, src: HostBuffer, opts: CopyOptions = {}, call = "CommandList.copyHtoD"): this {
    return this.#copy(call, CMD.COPY_HTOD, opts, dst, src);
  }

  /** Append a copy from a buffer into pinned host memory (the host memory is kept alive by the caller). */
  copyDtoH(dst: HostBuffer, src: Buffer, opts: CopyOptions = {}, call = "CommandList.copyDtoH"): this {
    return this.#copy(call, CMD.COPY_DTOH, opts, dst, src);
  }

  /** Append a fill of `value` as elements of `type` (Buffer.fill's rules: default the buffer's elementType, else only 0). */
  memset(buf: Buffer, value: number, opts: FillOptions = {}, call = "CommandList.memset"): this {
    opts = options(call, opts, FILL_KEYS);
    this.#live(call);
    this.#buffer(call, "buffer", buf);
    const { pattern, size } = fillPattern(call, value, fillTypeOf(call, buf, value, opts.type));
    const off = checkSize(call, "offset", opts.offset ?? 0);
    const bytes = checkSize(call, "byte count", opts.bytes ?? buf.byteLength - off);
    inRange(call, "buffer", buf.byteLength, off, bytes);
    if (bytes % size || (buf.address + off) % size) invalid(call, `range is not aligned to ${size}-byte elements`);
    if (this.#len + CMD_BYTES.MEMSET > this.#cap) this.#grow(CMD_BYTES.MEMSET);
    const w = this.#len >>> 2, u32 = this.#u32;
    u32[w] = CMD.MEMSET;
    u32[w + 1] = CMD_BYTES.MEMSET;
    put64(u32, w + 2, buf.address + off);
    u32[w + 4] = pattern;
    u32[w + 5] = size;
    put64(u32, w + 6, bytes / size);
    this.#ref(buf);
    this.#len += CMD_BYTES.MEMSET;
    this.#cmds++;
    this.#fills++;
    return this;
  }

  /** Later commands see every write of earlier ones (a no-op on an in-order CPU stream). */
  barrier(call = "CommandList.barrier"): this {
    this.#live(call);
    if (this.#len + CMD_BYTES.BARRIER > this.#cap) this.#grow(CMD_BYTES.BARRIER);
    const w = this.#len >>> 2;
    this.#u32[w] = CMD.BARRIER;
    this.#u32[w + 1] = CMD_BYTES.BARRIER;
    this.#len += CMD_BYTES.BARRIER;
    this.#cmds++;
    this.#barriers++;
    return this;
  }

  #event(call: string, op: number, ev: Event): this {
    this.#live(call);
    if (!(ev instanceof Event)) invalid(call, "expected an Event");
    if (ev.device.state !== this.#dev) invalid(call, "event of another device");
    const h = ev.handle; // throws if disposed
    if (this.#len + CMD_BYTES.EVENT > this.#cap) this.#grow(CMD_BYTES.EVENT);
    const w = this.#len >>> 2, u32 = this.#u32;
    u32[w] = op;
    u32[w + 1] = CMD_BYTES.EVENT;
    put64(u32, w + 2, h);
    this.#refs.push(eventRef(ev));
    this.#len += CMD_BYTES.EVENT;
    this.#cmds++;
    this.#events++;
    return this;
  }

  /** Record `ev` at this point of the commands. */
  eventRecord(ev: Event, call = "CommandList.eventRecord"): this {
    return this.#event(call, CMD.EVENT_RECORD, ev);
  }

  /** Make the commands after this point wait for `ev`'s latest record. */
  eventWait(ev: Event, call = "CommandList.eventWait"): this {
    return this.#event(call, CMD.EVENT_WAIT, ev);
  }

  /**
   * Submit every command to `stream` in one crossing (bg_submit_ex; with `wait`, the stream is
   * synchronized in the same crossing), then empty the list unless `keep`. An empty list crosses
   * nothing (unless `wait`). Returns true when a crossing was made. `serial` (with `wait`): a hint
   * that the list is too small to repay a host backend's thread pool (BG_SUBMIT_SERIAL).
   */
  submit(stream: Stream, opts: { keep?: boolean; wait?: boolean; serial?: boolean } = {}, call = "CommandList.submit"): boolean {
    opts = options(call, opts, SUBMIT_KEYS);
    const s = this.#stream(call, stream);
    this.checkRefs(call);
    const wait = opts.wait === true;
    const crossed = this.#len > 0 || wait;
    if (crossed) this.#cross(stream, s, 0, this.#len, wait ? SUBMIT_WAIT | (opts.serial ? SUBMIT_SERIAL : 0) : 0, call);
    if (!opts.keep) this.reset();
    return crossed;
  }

  /**
   * @internal Submit bytes [from, to) (whole commands: offsets taken between appends) without the
   * reference check, which the caller has made for the whole list (one multi-stream run submits
   * several ranges of one list).
   */
  submitRange(stream: Stream, from: number, to: number, call: string): void {
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to > this.#len || from > to) invalid(call, "range outside the list");
    if (to > from) this.#cross(stream, this.#stream(call, stream), from, to, 0, call);
  }

  #stream(call: string, stream: Stream): number {
    if (!(stream instanceof Stream)) invalid(call, "expected a Stream");
    const s = stream.handle; // throws if disposed
    if (stream.device.state !== this.#dev) invalid(call, "stream of another device");
    return s;
  }

  #cross(stream: Stream, s: number, from: number, to: number, flags: number, call: string): void {
    const len = to - from;
    try {
      submit(s, this.#ptr + from, len, flags, this.#dev.backend);
    } catch (e) {
      // A refusal that names the command at fault says which one, counted from the list's start.
      if (e instanceof SubmitError && e.badOffset !== null) {
        const at = from + e.badOffset;
        throw new CommandError(e.code, e.message, at, this.#indexAt(at), this.#dev.backend);
      }
      throw e;
    }
    if (len > 0) {
      this.#submits++;
      if (this.#dev.captures > 0) noteCaptured(this.#dev, s, null, this.#refs); // a graph replays it: keep what it uses
      // not waited for on a non-blocking stream: a host write into a buffer it uses waits for it
      if (stream.nonBlocking && !(flags & SUBMIT_WAIT)) stream.usedBy(call, this.#refs);
    }
  }

  /**
   * A Graph of the whole list (bg_graph_from_commands): no capture, so it works on every backend,
   * Metal included. The graph keeps what the commands use, as a captured graph does; the shim
   * keeps the kernels and events it names alive natively. `stream` names the device (and is
   * checked like a submit's stream); the list is kept.
   */
  toGraph(stream: Stream, call = "CommandList.toGraph"): Graph {
    this.#stream(call, stream);
    this.checkRefs(call);
    if (this.#len === 0) invalid(call, "the list is empty: a graph needs at least one command");
    const handle = this.#dev.api.graph_from_commands(this.#dev.handle, this.#ptr, this.#len);
    return new Graph(stream.device, handle, { uses: [...this.#refs] as object[], kernels: null });
  }

  /**
   * Throw INVALID_HANDLE when something a command uses was disposed since it was appended; a
   * buffer is named by the command and argument that use it ("command 0 (vadd): args[1] is a
   * disposed buffer"), as a launch door names it.
   */
  checkRefs(call: string, what = "an encoded command uses"): void {
    const refs = this.#refs;
    for (let i = 0; i < refs.length; i++) if (refs[i]!.disposed) this.#disposedRef(call, refs[i]!, what);
  }

  #disposedRef(call: string, r: Ref, what: string): never {
    const use = r instanceof Buffer && !(r instanceof HostBuffer) ? this.#bufferUse(r) : undefined;
    if (use !== undefined) throw new GpuError(Status.INVALID_HANDLE, `${call}: ${use} is a disposed buffer`, { backend: "typescript", call });
    disposed(call, `${refName(r)} ${what}`);
  }

  /** The first command whose addresses fall in `b`'s allocation, and which of them: for messages. */
  #bufferUse(b: Buffer): string | undefined {
    const { address, bytes } = b.allocation;
    const u32 = this.#u32;
    const at = (w: number) => {
      const a = u32[w]! + u32[w + 1]! * TWO32;
      return a >= address && a < address + Math.max(bytes, 1);
    };
    for (let off = 0, i = 0; off + 8 <= this.#len; i++) {
      const w = off >>> 2, op = u32[w]!, size = u32[w + 1]!;
      if (size < 8) break;
      if (op === CMD.LAUNCH) {
        const name = kernelNamesByHandle.get(u32[w + KERNEL_W]! + u32[w + KERNEL_W + 1]! * TWO32) ?? "a kernel";
        for (let j = 0; j < u32[w + NARGS_W]!; j++) if (at(w + (LAUNCH_AT.args >>> 2) + 2 * j)) return `command ${i} (${name}): args[${j}]`;
      } else if (op === CMD.COPY || op === CMD.COPY_HTOD || op === CMD.COPY_DTOH) {
        if (op !== CMD.COPY_DTOH && at(w + (bg_cmd_copy_rec.offset.dst >>> 2))) return `command ${i} (a copy): its destination`;
        if (op !== CMD.COPY_HTOD && at(w + (bg_cmd_copy_rec.offset.src >>> 2))) return `command ${i} (a copy): its source`;
      } else if (op === CMD.MEMSET && at(w + (bg_cmd_memset_rec.offset.dst >>> 2))) return `command ${i} (a fill): its destination`;
      off += size;
    }
    return undefined;
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

  // ---- ranges and patches (compute graphs, executables) -----------------------------------------

  /** @internal The current length, counts and reference count. */
  mark(): EncoderMark {
    this.#forgetRecent(); // a node's reference range names its module too
    return { bytes: this.#len, refs: this.#refs.length, ...this.counts };
  }

  /** @internal Append the commands of `src` between two of its marks (one memcpy). */
  appendRange(src: CommandList, from: EncoderMark, to: EncoderMark): void {
    if (!(src instanceof CommandList)) invalid("CommandEncoder.appendRange", "src must be a CommandEncoder");
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
    for (let i = from.refs; i < to.refs; i++) if (this.#refs[i]!.disposed) this.#disposedRef(call, this.#refs[i]!, "a recorded command uses");
  }

  /** Two marks of this list, in order (mark() made them), else INVALID_VALUE. */
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

  /**
   * @internal Rewrite the argument slots at byte `argOffset` (a launch of `kernel`) with `args`,
   * validated in full first (packed into scratch), then copied in: nothing changes on a bad value.
   */
  patchArgs(call: string, argOffset: number, kernel: Kernel, args: readonly ArgValue[]): void {
    this.#launchAt(call, argOffset, kernel);
    checkArgs(call, kernel, args);
    this.patch(argOffset, CHECK_AREA.u32, 2 * kernel.codes.length);
  }

  /**
   * @internal Rewrite the launch whose argument slots start at byte `argOffset` (lastArgOffset
   * after it was appended; a launch of `kernel`) in place: its grid, block, shared bytes and
   * arguments, checked as launch() checks them, all first: nothing changes on a bad value. A
   * buffer argument must stay the buffer the launch was appended with (the list holds that one).
   */
  patchLaunch(call: string, argOffset: number, kernel: Kernel, cfg: LaunchOptions): void {
    const w = this.#launchAt(call, argOffset, kernel);
    const g = checkGeometry(call, kernel, cfg, null); // @internal callers build cfg themselves
    const gx = g[0]!, gy = g[1]!, gz = g[2]!, bx = g[3]!, by = g[4]!, bz = g[5]!, shared = g[6]!;
    checkArgs(call, kernel, cfg.args);
    const u32 = this.#u32, src = CHECK_AREA.u32, a = argOffset >>> 2;
    const codes = kernel.codes;
    for (let i = 0; i < codes.length; i++)
      if (codes[i] === 0 && (u32[a + 2 * i] !== src[2 * i] || u32[a + 2 * i + 1] !== src[2 * i + 1]))
        invalid(call, `${kernel.name}: argument ${i} is a buffer the launch was not appended with (patch scalars, grid and block; append a new launch to bind another buffer)`);
    writeGeometry(u32, w, gx, gy, gz, bx, by, bz, shared);
    for (let i = 0; i < 2 * codes.length; i++) u32[a + i] = src[i]!;
  }

  /** The word index of the launch record of `kernel` whose argument slots start at byte `argOffset`, else INVALID_VALUE. */
  #launchAt(call: string, argOffset: number, kernel: Kernel): number {
    if (!(kernel instanceof Kernel)) invalid(call, "expected a Kernel");
    checkDevice(call, kernel, this.device);
    const off = argOffset - LAUNCH_AT.args;
    const u32 = this.#u32, w = off >>> 2;
    const k = kernel.handle; // throws if its module or device is gone
    if (!Number.isInteger(argOffset) || off < 0 || off % 8 || off + LAUNCH_AT.args > this.#len || u32[w] !== CMD.LAUNCH ||
        u32[w + NARGS_W] !== kernel.codes.length || u32[w + KERNEL_W] !== k >>> 0 || u32[w + KERNEL_W + 1] !== (k - (k >>> 0)) / TWO32)
      invalid(call, `${kernel.name}: byte ${String(argOffset)} is not where a launch of this kernel keeps its arguments`);
    return w;
  }

  /** "CommandEncoder(cpu, 4 commands: 2 dispatches, 1 copy, 1 barrier; 272 bytes, submitted 3 times)". */
  toString(): string {
    const kinds = [plural(this.#dispatches, "dispatch", "dispatches"), plural(this.#copies, "copy", "copies"), plural(this.#fills, "fill"), plural(this.#barriers, "barrier"), plural(this.#events, "event record or wait", "event records and waits")];
    const shown = kinds.filter((k) => !k.startsWith("0 "));
    const submits = this.#submits === 0 ? "" : this.#submits === 1 ? ", submitted once" : `, submitted ${this.#submits} times`;
    return `${this.constructor.name}(${this.device.spec}, ${plural(this.#cmds, "command")}${shown.length ? `: ${shown.join(", ")}` : ""}; ${bytesText(this.#len)}${submits})`;
  }

  [INSPECT](): string {
    return this.toString();
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

// ---- helpers -------------------------------------------------------------------------------------

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

function refName(r: Ref): string {
  return r instanceof HostBuffer ? "host buffer" : r instanceof Buffer ? "buffer" : r.constructor.name.toLowerCase();
}

function put64(u32: Uint32Array, w: number, v: number): void {
  const lo = v >>> 0;
  u32[w] = lo;
  u32[w + 1] = (v - lo) / TWO32;
}

function inRange(call: string, what: string, len: number, off: number, bytes: number): void {
  if (off + bytes > len) invalid(call, `${what} range [${off}, ${off + bytes}) is past the end (${len} bytes)`);
}

/** One scratch list per device, for validating a command without keeping it. */
const scratchLists = new WeakMap<DeviceState, CommandList>();

/** Run `append` on an empty scratch list of `device` (it throws what appending would throw), then empty it. */
export function validateCommand(device: Device, append: (list: CommandList) => void): void {
  let list = scratchLists.get(device.state);
  if (!list) scratchLists.set(device.state, (list = new CommandList(device)));
  try {
    append(list);
  } finally {
    list.reset();
  }
}

// ---- raw lists, read back (the tracer, src/trace) ------------------------------------------------

/** One command of a list in bytes, as a timeline shows it. */
export interface RawCommand {
  op: CommandInfo["op"];
  offset: number;
  size: number;
  /** Launches: the kernel's handle and geometry. */
  kernel?: number;
  grid?: [number, number, number];
  block?: [number, number, number];
  shared?: number;
  /** Copies: bytes moved; memsets: bytes written. */
  bytes?: number;
}

const rd64 = (v: DataView, at: number): number => v.getUint32(at, true) + v.getUint32(at + 4, true) * TWO32;

/** @internal The commands of `len` list bytes in `view` (stops at a malformed header). */
export function decodeRaw(view: DataView, len: number): RawCommand[] {
  const out: RawCommand[] = [];
  for (let off = 0; off + 8 <= len; ) {
    const op = view.getUint32(off, true), size = view.getUint32(off + 4, true);
    if (size < 8 || off + size > len) break;
    const c: RawCommand = { op: OP_NAMES[op] ?? "unknown", offset: off, size };
    if (op === CMD.LAUNCH && size >= CMD_BYTES.LAUNCH_HEADER) {
      const g = off + LAUNCH_AT.grid, b = off + LAUNCH_AT.block;
      c.kernel = rd64(view, off + LAUNCH_AT.kernel);
      c.grid = [view.getUint32(g, true), view.getUint32(g + 4, true), view.getUint32(g + 8, true)];
      c.block = [view.getUint32(b, true), view.getUint32(b + 4, true), view.getUint32(b + 8, true)];
      c.shared = view.getUint32(off + LAUNCH_AT.shared, true);
    } else if ((op === CMD.COPY || op === CMD.COPY_HTOD || op === CMD.COPY_DTOH) && size >= CMD_BYTES.COPY) {
      c.bytes = rd64(view, off + bg_cmd_copy_rec.offset.bytes);
    } else if (op === CMD.MEMSET && size >= CMD_BYTES.MEMSET) {
      c.bytes = rd64(view, off + bg_cmd_memset_rec.offset.count) * view.getUint32(off + bg_cmd_memset_rec.offset.elem_size, true);
    }
    out.push(c);
    off += size;
  }
  return out;
}

/**
 * @internal The list `src` (whole commands `cmds`, from decodeRaw) with an event record of
 * `events[i]` before command i and of `events[cmds.length]` after the last: one submit then
 * stamps every command's start and end on the device. `at[i]` is command i's offset in the copy.
 */
export function withEventRecords(src: Uint8Array, cmds: readonly RawCommand[], events: readonly number[]): { bytes: Uint8Array; at: number[] } {
  let len = CMD_BYTES.EVENT;
  for (const c of cmds) len += c.size + CMD_BYTES.EVENT;
  const bytes = new Uint8Array(len);
  const u32 = new Uint32Array(bytes.buffer);
  const at: number[] = [];
  let off = 0;
  const record = (ev: number) => {
    const w = off >>> 2;
    u32[w] = CMD.EVENT_RECORD;
    u32[w + 1] = CMD_BYTES.EVENT;
    put64(u32, w + 2, ev);
    off += CMD_BYTES.EVENT;
  };
  cmds.forEach((c, i) => {
    record(events[i]!);
    at.push(off);
    bytes.set(src.subarray(c.offset, c.offset + c.size), off);
    off += c.size;
  });
  record(events[cmds.length]!);
  return { bytes, at };
}
