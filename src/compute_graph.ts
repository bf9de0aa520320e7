// ComputeGraph: recorded nodes (dispatch, copy, fill, barrier) with their bindings, grid, block and
// the byte ranges they read and write, over one command list packed once. encodeSequential()
// replays in recorded order with the recorded barriers; encodeWithBarriers() drops the recorded
// barriers and places one where hazards.ts's planBarriers says (RAW, WAR, WAW on overlapping byte
// ranges since the last barrier), and none elsewhere. setArgs() rewrites only a dispatch's
// argument words, and submit() hands the same bytes to the shim again: one crossing, no
// re-encoding.
import { Buffer, checkSize, type FillType, type FillOptionsFor } from "./buffer";
import type { Device, DeviceState } from "./device";
import { describeGot, disposed, invalid, options, type OptionKeys } from "./errors";
import type { CopyOptions, EncoderMark, FillOptions } from "./commands";
import { CommandEncoder, type DispatchOptions } from "./encoder";
import { bufferRange, planBarriers, type BufferRange, type PlannedBarrier } from "./hazards";
import { INSPECT, plural } from "./inspect";
import type { Kernel } from "./kernel";
import { GEO, LAUNCH_KEYS, checkArgs, type ArgValue, type Signature } from "./launch";
import type { Stream } from "./stream";

// The keys each options argument may have (errors.ts `options` refuses any other).
const COPY_KEYS: OptionKeys<CopyOptions> = { bytes: true, dstOffset: true, srcOffset: true };
const FILL_KEYS: OptionKeys<FillOptions> = { type: true, offset: true, bytes: true };
/** A dispatch's keys: a launch's and the ranges it reads and writes (GraphSession's too). */
export const DISPATCH_KEYS: OptionKeys<GraphDispatchOptions> = { ...LAUNCH_KEYS, reads: true, writes: true };
const SUBMIT_KEYS: OptionKeys<{ barriers?: BarrierMode | undefined }> = { barriers: true };

export type { Hazard, PlannedBarrier } from "./hazards";

/** A byte range a node reads or writes: a whole buffer (view), or part of one. */
export type Access = Buffer | { buffer: Buffer; offset?: number; bytes?: number };

export interface GraphDispatchOptions<S extends Signature = Signature> extends DispatchOptions<S> {
  /** Byte ranges the kernel reads. Default: every buffer argument (conservative). */
  reads?: readonly Access[];
  /** Byte ranges the kernel writes. Default: every buffer argument (conservative). */
  writes?: readonly Access[];
}

export type NodeKind = "dispatch" | "copy" | "fill" | "barrier";
export type BarrierMode = "recorded" | "computed";

export interface GraphNode {
  readonly index: number;
  readonly kind: NodeKind;
  /** The kernel of a dispatch; null otherwise. */
  readonly kernel: Kernel | null;
  /** The bindings of a dispatch (its arguments, as last set); empty otherwise. */
  readonly args: readonly ArgValue[];
  readonly grid: readonly [number, number, number] | null;
  readonly block: readonly [number, number, number] | null;
  readonly sharedBytes: number;
  /** Byte ranges read and written (allocation base + offset, with the buffer and first address). */
  readonly reads: readonly BufferRange[];
  readonly writes: readonly BufferRange[];
}

const EMPTY_MARK: EncoderMark = { bytes: 0, refs: 0, commands: 0, dispatches: 0, barriers: 0, copies: 0, fills: 0, events: 0 };

class Node implements GraphNode {
  index: number;
  kind: NodeKind;
  kernel: Kernel | null = null;
  args: readonly ArgValue[] = [];
  grid: readonly [number, number, number] | null = null;
  block: readonly [number, number, number] | null = null;
  sharedBytes = 0;
  reads: readonly BufferRange[] = [];
  writes: readonly BufferRange[] = [];
  /** Marks of the graph's sequential list around this node's command. */
  before: EncoderMark;
  after: EncoderMark = EMPTY_MARK;
  /** Byte offset of the argument slots in the sequential list, and in the computed one. */
  argOffset = -1;
  computedArgOffset = -1;

  constructor(index: number, kind: NodeKind, before: EncoderMark) {
    this.index = index;
    this.kind = kind;
    this.before = before;
  }
}

/** @internal Access lists to byte ranges (empty ranges dropped), validated. */
export function resolveAccess(call: string, dev: DeviceState, what: string, list: unknown): BufferRange[] {
  if (!Array.isArray(list)) invalid(call, `${what} must be an array of Buffers or { buffer, offset?, bytes? }`);
  const out: BufferRange[] = [];
  for (let i = 0; i < list.length; i++) {
    const a = list[i] as unknown;
    let buffer: unknown, offset = 0, bytes: number;
    if (a instanceof Buffer) {
      buffer = a;
      bytes = a.byteLength;
    } else if (a !== null && typeof a === "object" && (a as { buffer?: unknown }).buffer instanceof Buffer) {
      const r = a as { buffer: Buffer; offset?: number; bytes?: number };
      buffer = r.buffer;
      offset = checkSize(call, `${what}[${i}].offset`, r.offset ?? 0);
      bytes = checkSize(call, `${what}[${i}].bytes`, r.bytes ?? r.buffer.byteLength - offset);
      if (offset + bytes > r.buffer.byteLength)
        invalid(call, `${what}[${i}]: range [${offset}, ${offset + bytes}) is past the end (${r.buffer.byteLength} bytes)`);
    } else invalid(call, `${what}[${i}] must be a Buffer or { buffer, offset?, bytes? }`);
    const b = buffer as Buffer;
    if (b.device.state !== dev) invalid(call, `${what}[${i}] is a buffer of another device (${b.device.spec})`);
    if (b.disposed) disposed(call, "buffer");
    if (bytes > 0) out.push(bufferRange(b, offset, bytes));
  }
  return out;
}

export class ComputeGraph {
  readonly device: Device;
  readonly #dev: DeviceState;
  readonly #nodes: Node[] = [];
  /** The recorded order with the recorded barriers, packed once, patched by setArgs. */
  readonly #seq: CommandEncoder;
  /** The same nodes with computed barriers (built on first use, dropped when a node is added). */
  #computed: CommandEncoder | null = null;
  #plan: PlannedBarrier[] | null = null;
  #submits = 0;

  constructor(device: Device) {
    this.#seq = new CommandEncoder(device);
    this.device = device;
    this.#dev = device.state;
  }

  get nodes(): readonly GraphNode[] {
    return this.#nodes;
  }

  get nodeCount(): number {
    return this.#nodes.length;
  }

  /** bg_submit crossings made by submit(). */
  get submits(): number {
    return this.#submits;
  }

  /** Bytes of the sequential encoding. */
  get byteLength(): number {
    return this.#seq.byteLength;
  }

  #begin(kind: NodeKind): Node {
    return new Node(this.#nodes.length, kind, this.#seq.mark());
  }

  #end(n: Node): number {
    n.after = this.#seq.mark();
    this.#nodes.push(n);
    this.#computed = null;
    this.#plan = null;
    return n.index;
  }

  /** Record a dispatch; returns its node index. */
  dispatch<S extends Signature>(kernel: Kernel<S>, cfg: GraphDispatchOptions<NoInfer<S>>, door = "ComputeGraph.dispatch"): number {
    const call = typeof door === "string" ? door : "ComputeGraph.dispatch"; // the door's name (GraphSession passes its own); anything else a caller passes is ignored
    const given = cfg !== null && typeof cfg === "object";
    const reads = given && cfg.reads !== undefined ? resolveAccess(call, this.#dev, "reads", cfg.reads) : null;
    const writes = given && cfg.writes !== undefined ? resolveAccess(call, this.#dev, "writes", cfg.writes) : null;
    const n = this.#begin("dispatch");
    this.#seq.launch(kernel, cfg, call, DISPATCH_KEYS); // the launch module's checks (./launch); throws with the graph unchanged
    n.argOffset = this.#seq.lastArgOffset;
    n.kernel = kernel;
    n.args = [...cfg.args];
    n.grid = [GEO[0]!, GEO[1]!, GEO[2]!]; // the launch just checked, normalised
    n.block = [GEO[3]!, GEO[4]!, GEO[5]!];
    n.sharedBytes = GEO[6]!;
    if (reads === null || writes === null) {
      const all: BufferRange[] = [];
      const sig = kernel.signature;
      for (let i = 0; i < sig.length; i++) if (sig[i] === "buffer" && (cfg.args[i] as Buffer).byteLength > 0) all.push(bufferRange(cfg.args[i] as Buffer));
      n.reads = reads ?? all;
      n.writes = writes ?? all;
    } else {
      n.reads = reads;
      n.writes = writes;
    }
    return this.#end(n);
  }

  /** Record a device-to-device copy; returns its node index. */
  copy(dst: Buffer, src: Buffer, opts: CopyOptions = {}): number {
    return this.recordCopy("ComputeGraph.copy", dst, src, opts);
  }

  /** @internal copy() under the name of the door it came through (GraphSession passes its own). */
  recordCopy(door: string, dst: Buffer, src: Buffer, opts: CopyOptions = {}): number {
    const call = typeof door === "string" ? door : "ComputeGraph.copy"; // anything but a door's name is ignored
    opts = options(call, opts, COPY_KEYS);
    const n = this.#begin("copy");
    this.#seq.copy(dst, src, opts, call);
    const so = opts.srcOffset ?? 0, dO = opts.dstOffset ?? 0;
    const bytes = opts.bytes ?? src.byteLength - so;
    n.args = [dst, src];
    if (bytes > 0) {
      n.reads = [bufferRange(src, so, bytes)];
      n.writes = [bufferRange(dst, dO, bytes)];
    }
    return this.#end(n);
  }

  /** Record a fill; returns its node index. */
  fill<B extends Buffer, V extends number>(buf: B, value: V, ...optsWithType: FillOptionsFor<B, V, FillOptions, FillOptions & { type: FillType }>): number;
  fill(buf: Buffer, value: number, opts: FillOptions = {}): number {
    return this.recordFill("ComputeGraph.fill", buf, value, opts);
  }

  /** @internal fill() under the name of the door it came through (GraphSession passes its own). */
  recordFill(door: string, buf: Buffer, value: number, opts: FillOptions = {}): number {
    const call = typeof door === "string" ? door : "ComputeGraph.fill"; // anything but a door's name is ignored
    opts = options(call, opts, FILL_KEYS);
    const n = this.#begin("fill");
    this.#seq.memset(buf, value, opts, call); // Buffer.fill's type rule, at run time (fillTypeOf)
    const off = opts.offset ?? 0;
    const bytes = opts.bytes ?? buf.byteLength - off;
    n.args = [buf];
    if (bytes > 0) n.writes = [bufferRange(buf, off, bytes)];
    return this.#end(n);
  }

  /** Record a barrier (kept by encodeSequential, replaced by computed ones in encodeWithBarriers). */
  barrier(): number {
    const n = this.#begin("barrier");
    this.#seq.barrier();
    return this.#end(n);
  }

  /**
   * Where encodeWithBarriers puts barriers: before each node that reads what a node since the
   * last barrier wrote (RAW), writes what one read (WAR) or writes what one wrote (WAW).
   */
  barrierPlan(): readonly PlannedBarrier[] {
    return (this.#plan ??= planBarriers(this.#nodes.map((n) => (n.kind === "barrier" ? null : n))));
  }

  #computedEncoding(): CommandEncoder {
    if (this.#computed) return this.#computed;
    const before = new Set(this.barrierPlan().map((b) => b.before));
    const enc = new CommandEncoder(this.device, { initialBytes: this.#seq.byteLength + 8 * before.size });
    for (const n of this.#nodes) {
      if (n.kind === "barrier") continue;
      if (before.has(n.index)) enc.barrier();
      const base = enc.byteLength;
      enc.appendRange(this.#seq, n.before, n.after);
      if (n.kind === "dispatch") n.computedArgOffset = base + (n.argOffset - n.before.bytes);
    }
    this.#computed = enc;
    return enc;
  }

  #target(call: string, encoder: unknown): CommandEncoder {
    if (!(encoder instanceof CommandEncoder)) invalid(call, "expected a CommandEncoder");
    if (encoder.device.state !== this.#dev) invalid(call, "encoder of another device");
    return encoder;
  }

  /** Append nodes [from, to) in recorded order, with the recorded barriers. */
  encodeRange(encoder: CommandEncoder, from: number, to: number): void {
    const call = "ComputeGraph.encodeRange";
    const enc = this.#target(call, encoder);
    const count = this.#nodes.length;
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to > count || from > to)
      invalid(call, `node range [${from}, ${to}) is not inside [0, ${count})`);
    if (from === to) return;
    const a = this.#nodes[from]!.before, b = this.#nodes[to - 1]!.after;
    this.#seq.checkRange(call, a, b);
    enc.appendRange(this.#seq, a, b);
  }

  /** Append every node in recorded order, barriers where they were recorded. */
  encodeSequential(encoder: CommandEncoder): void {
    const call = "ComputeGraph.encodeSequential";
    const enc = this.#target(call, encoder);
    const end = this.#seq.mark();
    this.#seq.checkRange(call, EMPTY_MARK, end);
    enc.appendRange(this.#seq, EMPTY_MARK, end);
  }

  /** Append every node with barriers computed from range hazards (recorded barriers dropped). */
  encodeWithBarriers(encoder: CommandEncoder): void {
    const call = "ComputeGraph.encodeWithBarriers";
    const enc = this.#target(call, encoder);
    const c = this.#computedEncoding();
    const end = c.mark();
    c.checkRange(call, EMPTY_MARK, end);
    enc.appendRange(c, EMPTY_MARK, end);
  }

  /** The packed commands of one encoding (a copy), and its decoded command list. */
  encoding(barriers: BarrierMode = "recorded"): CommandEncoder {
    const enc = new CommandEncoder(this.device);
    if (barriers === "computed") this.encodeWithBarriers(enc);
    else this.encodeSequential(enc);
    return enc;
  }

  /**
   * Submit the whole graph to `stream` in one crossing, from the graph's own packed bytes (no
   * re-encoding). Returns true when a crossing was made (false for an empty graph).
   */
  submit(stream: Stream, opts: { barriers?: BarrierMode | undefined } = {}): boolean {
    opts = options("ComputeGraph.submit", opts, SUBMIT_KEYS);
    const call = "ComputeGraph.submit";
    const mode = opts.barriers ?? "recorded";
    if (mode !== "recorded" && mode !== "computed") invalid(call, `barriers must be "recorded" or "computed", got ${describeGot(mode)}`);
    const enc = mode === "computed" ? this.#computedEncoding() : this.#seq;
    const crossed = enc.commit(stream, { keep: true });
    if (crossed) this.#submits++;
    return crossed;
  }

  /** Barriers one submit of `mode` runs. */
  barrierCount(mode: BarrierMode = "recorded"): number {
    return mode === "computed" ? this.barrierPlan().length : this.#seq.counts.barriers;
  }

  /** Dispatch nodes in the graph. */
  get dispatchCount(): number {
    return this.#seq.counts.dispatches;
  }

  /**
   * New arguments for dispatch node `index`: scalars may change; buffer arguments must bind the
   * same bytes as recorded (the hazards were computed from them). Validated in full first; then
   * only the node's argument words are rewritten, in every encoding the graph keeps.
   */
  setArgs(index: number, args: readonly ArgValue[]): void {
    const call = "ComputeGraph.setArgs";
    const n = this.#dispatchNode(call, index);
    const k = n.kernel!;
    k.handle; // the module is alive
    const sig = k.signature;
    checkArgs(call, k, args); // every argument as a launch checks it (./launch), before the binding rule
    for (let i = 0; i < sig.length; i++) {
      if (sig[i] !== "buffer") continue;
      const now = args[i] as Buffer, was = n.args[i] as Buffer;
      if (now !== was && (now.address !== was.address || now.byteLength !== was.byteLength))
        invalid(call, `${k.name}: argument ${i} must bind the buffer range it was recorded with (setArgs changes scalars; record a new graph to rebind buffers)`);
    }
    this.#seq.patchArgs(call, n.argOffset, k, args);
    if (this.#computed && n.computedArgOffset >= 0) this.#computed.patchArgs(call, n.computedArgOffset, k, args);
    n.args = [...args];
  }

  /** Set one argument of dispatch node `index` (see setArgs). */
  setArg(index: number, argIndex: number, value: ArgValue): void {
    const n = this.#dispatchNode("ComputeGraph.setArg", index);
    if (!Number.isInteger(argIndex) || argIndex < 0 || argIndex >= n.args.length)
      invalid("ComputeGraph.setArg", `argument index ${String(argIndex)} is not in [0, ${n.args.length})`);
    const args = [...n.args];
    args[argIndex] = value;
    this.setArgs(index, args);
  }

  /** Byte offset of a dispatch node's argument slots in the sequential encoding. */
  argOffset(index: number): number {
    return this.#dispatchNode("ComputeGraph.argOffset", index).argOffset;
  }

  #dispatchNode(call: string, index: number): Node {
    if (!Number.isInteger(index) || index < 0 || index >= this.#nodes.length)
      invalid(call, `node ${String(index)} is not in [0, ${this.#nodes.length})`);
    const n = this.#nodes[index]!;
    if (n.kind !== "dispatch") invalid(call, `node ${index} is a ${n.kind}, not a dispatch`);
    return n;
  }

  /** "ComputeGraph(cpu, 4 nodes: 2 dispatches, 1 copy, 1 barrier)". */
  toString(): string {
    const count = (k: NodeKind) => this.#nodes.filter((n) => n.kind === k).length;
    const kinds = [plural(count("dispatch"), "dispatch", "dispatches"), plural(count("copy"), "copy", "copies"), plural(count("fill"), "fill"), plural(count("barrier"), "barrier")].filter((t) => !t.startsWith("0 "));
    return `ComputeGraph(${this.device.spec}, ${plural(this.#nodes.length, "node")}${kinds.length ? `: ${kinds.join(", ")}` : ""})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}

