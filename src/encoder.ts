// CommandEncoder: kernel dispatches, copies, fills, barriers and event records/waits appended in
// TypeScript into one command list, then handed to the shim in ONE crossing by commit(stream).
// It is the command list under the names of the encoder API: everything (the format, validation,
// argument packing, growth, references) lives in commands.ts.
import type { Buffer, FillType, FillOptionsFor } from "./buffer";
import type { Device } from "./device";
import type { Event } from "./event";
import type { Kernel, Signature } from "./kernel";
import type { Stream } from "./stream";
import { CommandList, type CopyOptions, type FillOptions, type LaunchOptions } from "./commands";

export { CommandError, type CopyOptions, type FillOptions, type EncoderCounts, type EncoderMark, type CommandInfo } from "./commands";
export type DispatchOptions<S extends Signature = Signature> = LaunchOptions<S>;

export class CommandEncoder extends CommandList {
  constructor(device: Device, opts: { initialBytes?: number } = {}) {
    super(device, opts, "new CommandEncoder");
  }

  /** Append a kernel dispatch: the same checks as Kernel.launch, no FFI crossing. */
  dispatch<S extends Signature>(kernel: Kernel<S>, cfg: DispatchOptions<NoInfer<S>>): this {
    return this.launch(kernel, cfg, "CommandEncoder.dispatch");
  }

  /** Append a device-to-device copy (Stream.copy's rules). */
  override copy(dst: Buffer, src: Buffer, opts: CopyOptions = {}, call = "CommandEncoder.copy"): this {
    return super.copy(dst, src, opts, call);
  }

  /** Append a fill of `value` as elements of `type` (Buffer.fill's rules: default the buffer's elementType, else only 0). */
  fill<B extends Buffer, V extends number>(buf: B, value: V, ...optsWithType: FillOptionsFor<B, V, FillOptions, FillOptions & { type: FillType }>): this;
  fill(buf: Buffer, value: number, opts: FillOptions = {}): this {
    return this.memset(buf, value, opts, "CommandEncoder.fill");
  }

  override barrier(call = "CommandEncoder.barrier"): this {
    return super.barrier(call);
  }

  /** Record `ev` at this point of the commands. */
  recordEvent(ev: Event): this {
    return this.eventRecord(ev, "CommandEncoder.recordEvent");
  }

  /** Make the commands after this point wait for `ev`'s latest record. */
  waitEvent(ev: Event): this {
    return this.eventWait(ev, "CommandEncoder.waitEvent");
  }

  /**
   * Submit every command to `stream` in one crossing (bg_submit_ex), then empty the encoder
   * (unless `keep`, which leaves it ready to be committed again). An empty encoder crosses nothing.
   * Returns true when a crossing was made.
   */
  commit(stream: Stream, opts: { keep?: boolean } = {}): boolean {
    return this.submit(stream, opts, "CommandEncoder.commit");
  }
}
