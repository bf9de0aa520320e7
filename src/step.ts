// Steps: one unit of schedule work (a kernel launch, a copy, a fill) with the byte ranges it reads
// and writes, validated as it is made by the command list's own checks, and lowered to one
// command of a list when a schedule is compiled.
import { Buffer, checkSize, fillPattern, fillTypeOf, type FillType, type FillOptionsFor } from "./buffer";
import type { Device } from "./device";
import { describeGot, invalid, disposed, options, type OptionKeys } from "./errors";
import { CommandList, validateCommand } from "./commands";
import { hazardBetween, overlaps, rangeOf, type ByteRange } from "./hazards";
import { Kernel } from "./kernel";
import { LAUNCH_KEYS, checkLaunch, type ArgsOf, type ArgValue, type Dim3, type Signature } from "./launch";

// The keys each options argument may have (errors.ts `options` refuses any other).
const COPY_KEYS: OptionKeys<CopyStepOptions> = { bytes: true, dstOffset: true, srcOffset: true, label: true };
const COPY_PEER_KEYS: OptionKeys<CopyStepOptions & { device?: Device }> = { ...COPY_KEYS, device: true };
const FILL_KEYS: OptionKeys<FillStepOptions> = { type: true, offset: true, bytes: true, label: true };
const KERNEL_KEYS: OptionKeys<KernelStepConfig> = { ...LAUNCH_KEYS, reads: true, writes: true, label: true };

// ---- steps -----------------------------------------------------------------------------------------

/** A kernel step of a kernel of signature `S`: `args` is typed from it (see ArgsOf). */
export interface KernelStepConfig<S extends Signature = Signature> {
  grid: Dim3;
  block: Dim3;
  args: ArgsOf<S>;
  sharedBytes?: number | undefined;
  /** Buffers (views) the kernel reads. With neither list given, every buffer argument counts as read and written. */
  reads?: readonly Buffer[] | undefined;
  /** Buffers (views) the kernel writes. */
  writes?: readonly Buffer[] | undefined;
  label?: string | undefined;
}

export interface CopyStepOptions {
  bytes?: number | undefined;
  dstOffset?: number | undefined;
  srcOffset?: number | undefined;
  label?: string | undefined;
}

export interface FillStepOptions {
  type?: FillType | undefined;
  offset?: number | undefined;
  bytes?: number | undefined;
  label?: string | undefined;
}

export type KernelOp = {
  kind: "kernel";
  kernel: Kernel;
  grid: [number, number, number];
  block: [number, number, number];
  sharedBytes: number;
  args: readonly ArgValue[];
};
type CopyOp = { kind: "copy"; dst: Buffer; src: Buffer; dstOffset: number; srcOffset: number; bytes: number };
/** A copy between two devices' buffers, run by a stream of `device` (either one); see Stream.copyPeer. */
type PeerOp = { kind: "peer"; dst: Buffer; src: Buffer; dstOffset: number; srcOffset: number; bytes: number };
type FillOp = { kind: "fill"; buffer: Buffer; offset: number; bytes: number; pattern: number; elemSize: 1 | 2 | 4; value: number; type: FillType };
type StepOp = KernelOp | CopyOp | FillOp | PeerOp;

export function isBuffer(b: unknown): b is Buffer {
  return b instanceof Buffer;
}

/** One unit of work with the byte ranges it reads and writes. Immutable once made. */
export class Step {
  readonly op: Readonly<StepOp>;
  readonly reads: readonly ByteRange[];
  readonly writes: readonly ByteRange[];
  readonly label: string;
  readonly device: Device;
  /** Every buffer the step touches (for liveness checks). */
  readonly buffers: readonly Buffer[];

  private constructor(op: StepOp, device: Device, reads: ByteRange[], writes: ByteRange[], buffers: Buffer[], label: string) {
    this.op = Object.freeze(op);
    this.device = device;
    this.reads = Object.freeze(reads);
    this.writes = Object.freeze(writes);
    this.buffers = Object.freeze(buffers);
    this.label = label;
    Object.freeze(this);
  }

  get kind(): StepOp["kind"] {
    return this.op.kind;
  }

  /** @internal Step.kernel for a kernel typed only as Signature, its arguments a plain array (see CommandList.launchArgs). */
  static kernelArgs(kernel: Kernel, cfg: Omit<KernelStepConfig, "args"> & { args: readonly ArgValue[] }): Step {
    return Step.kernel(kernel, cfg as KernelStepConfig);
  }

  /**
   * A kernel launch, checked as every launch is (./launch). Its ranges are `reads`/`writes`, or,
   * when neither is given, every buffer argument read and written. `call` names the door in
   * errors (Schedule.addKernel passes its own).
   */
  static kernel<S extends Signature>(kernel: Kernel<S>, cfg: KernelStepConfig<NoInfer<S>>, door = "Step.kernel"): Step {
    const call = typeof door === "string" ? door : "Step.kernel"; // anything but a door's name is ignored
    if (!(kernel instanceof Kernel)) invalid(call, "expected a Kernel");
    kernel.handle; // throws if its module or device is gone
    const { grid, block, sharedBytes } = checkLaunch(call, kernel, cfg, KERNEL_KEYS); // what every launch door checks (./launch)
    const dev = kernel.device;
    const args: ArgValue[] = [...(cfg.args as readonly ArgValue[])];
    const argBufs = args.filter(isBuffer);
    const list = (what: string, l: readonly Buffer[] | undefined): Buffer[] => {
      if (l === undefined) return [];
      if (!Array.isArray(l)) invalid(call, `${what} must be an array of Buffers`);
      for (const b of l) {
        if (!isBuffer(b)) invalid(call, `${what} must hold Buffers (views), got ${describeGot(b)}`);
        if (b.device.state.handle !== dev.state.handle) invalid(call, `${what}: a buffer of another device (${b.device.spec})`);
        if (b.disposed) disposed(call, `buffer in ${what}`);
      }
      return [...l];
    };
    let reads: Buffer[], writes: Buffer[];
    if (cfg.reads === undefined && cfg.writes === undefined) {
      reads = argBufs;
      writes = argBufs;
    } else {
      reads = list("reads", cfg.reads);
      writes = list("writes", cfg.writes);
    }
    const buffers = [...new Set([...argBufs, ...reads, ...writes])];
    return new Step(
      { kind: "kernel", kernel, grid, block, sharedBytes, args: Object.freeze(args) },
      dev,
      reads.map((b) => rangeOf(b)),
      writes.map((b) => rangeOf(b)),
      buffers,
      cfg.label ?? kernel.name,
    );
  }

  /** A device-to-device copy (the ranges may not overlap). Reads src's range, writes dst's. */
  static copy(dst: Buffer, src: Buffer, opts: CopyStepOptions = {}): Step {
    const call = "Step.copy";
    opts = options(call, opts, COPY_KEYS);
    if (!isBuffer(dst) || !isBuffer(src)) invalid(call, "dst and src must be Buffers");
    if (dst.device.state.handle !== src.device.state.handle) invalid(call, `dst is on ${dst.device.spec}, src on ${src.device.spec}`);
    const so = opts.srcOffset ?? 0, dO = opts.dstOffset ?? 0;
    validateCommand(dst.device, (l) => l.copy(dst, src, { srcOffset: so, dstOffset: dO, bytes: opts.bytes }, call));
    const bytes = opts.bytes ?? src.byteLength - so;
    const r = rangeOf(src, so, bytes), w = rangeOf(dst, dO, bytes);
    if (overlaps(r, w)) invalid(call, "source and destination ranges overlap");
    return new Step({ kind: "copy", dst, src, dstOffset: dO, srcOffset: so, bytes }, dst.device, [r], [w], [dst, src], opts.label ?? "copy");
  }

  /**
   * A copy from `src` on one device to `dst` on another, run by a stream of `opts.device` (src's
   * device unless given; it must be one of the two). Reads src's range, writes dst's. A schedule
   * holding one runs over both devices: compile it for either, and the planner puts each step on
   * its device's stream with event records and waits at every hazard between devices. The copy
   * goes peer to peer when the running device has peer access to the other
   * (Device.enablePeerAccess), staged through host memory otherwise. With both buffers on one
   * device it is Step.copy.
   */
  static copyPeer(dst: Buffer, src: Buffer, opts: CopyStepOptions & { device?: Device } = {}): Step {
    const call = "Step.copyPeer";
    opts = options(call, opts, COPY_PEER_KEYS);
    if (!isBuffer(dst) || !isBuffer(src)) invalid(call, "dst and src must be Buffers");
    if (dst.disposed) disposed(call, "dst buffer");
    if (src.disposed) disposed(call, "src buffer");
    const dd = dst.device, sd = src.device;
    const runner: unknown = opts.device ?? sd;
    if (runner === null || typeof runner !== "object" || !("state" in runner) || !(runner as Device).state || ((runner as Device).state.handle !== dd.state.handle && (runner as Device).state.handle !== sd.state.handle))
      invalid(call, `device must be the device of src (${sd.spec}) or of dst (${dd.spec}), got ${describeGot(runner)}`);
    if (dd.state.handle === sd.state.handle)
      return Step.copy(dst, src, { bytes: opts.bytes, dstOffset: opts.dstOffset, srcOffset: opts.srcOffset, label: opts.label });
    if (dd.backend !== sd.backend) invalid(call, `a copy between the ${sd.backend} and ${dd.backend} backends`);
    const so = opts.srcOffset ?? 0, dO = opts.dstOffset ?? 0;
    const bytes = checkSize(call, "byte count", opts.bytes ?? src.byteLength - checkSize(call, "src offset", so));
    checkSize(call, "dst offset", dO);
    if (so + bytes > src.byteLength) invalid(call, `src range [${so}, ${so + bytes}) is past the end (${src.byteLength} bytes)`);
    if (dO + bytes > dst.byteLength) invalid(call, `dst range [${dO}, ${dO + bytes}) is past the end (${dst.byteLength} bytes)`);
    return new Step(
      { kind: "peer", dst, src, dstOffset: dO, srcOffset: so, bytes },
      runner as Device,
      [rangeOf(src, so, bytes)],
      [rangeOf(dst, dO, bytes)],
      [dst, src],
      opts.label ?? "copyPeer",
    );
  }

  /** A memset of `value` as elements of `type` (Buffer.fill's rules: default the buffer's elementType, else only 0). Writes its range. */
  static fill<B extends Buffer, V extends number>(buffer: B, value: V, ...optsWithType: FillOptionsFor<B, V, FillStepOptions, FillStepOptions & { type: FillType }>): Step;
  static fill(buffer: Buffer, value: number, opts: FillStepOptions = {}): Step {
    const call = "Step.fill";
    opts = options(call, opts, FILL_KEYS);
    if (!isBuffer(buffer)) invalid(call, "expected a Buffer");
    const type = fillTypeOf(call, buffer, value, opts.type);
    const off = opts.offset ?? 0;
    validateCommand(buffer.device, (l) => l.memset(buffer, value, { type, offset: off, bytes: opts.bytes }, call));
    const { pattern, size } = fillPattern(call, value, type);
    const bytes = opts.bytes ?? buffer.byteLength - off;
    return new Step(
      { kind: "fill", buffer, offset: off, bytes, pattern, elemSize: size, value, type },
      buffer.device,
      [],
      [rangeOf(buffer, off, bytes)],
      [buffer],
      opts.label ?? "fill",
    );
  }

  /** True when `later` must wait for this step: RAW, WAR or WAW on overlapping bytes. */
  hazardWith(later: Step): boolean {
    return hazardBetween(this, later) !== null;
  }

  /** Append this step's command to `list`; returns the byte offset of its argument slots (-1 when it has none). */
  lower(list: CommandList, call: string): number {
    const op = this.op;
    if (op.kind === "kernel") {
      list.launchArgs(op.kernel, { grid: op.grid, block: op.block, args: op.args, sharedBytes: op.sharedBytes }, call);
      return list.lastArgOffset;
    }
    if (op.kind === "peer") invalid(call, "a copy between devices is not a command of one device's list (the executable issues it)");
    if (op.kind === "copy") list.copy(op.dst, op.src, { dstOffset: op.dstOffset, srcOffset: op.srcOffset, bytes: op.bytes }, call);
    else list.memset(op.buffer, op.value, { type: op.type, offset: op.offset, bytes: op.bytes }, call);
    return -1;
  }

  toString(): string {
    return `Step(${this.kind}: ${this.label})`;
  }
}
