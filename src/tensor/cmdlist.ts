// A tensor plan's launches as one packed command list (the bg_submit format), built once and
// submitted in one crossing per execution: bg_submit_ex with BG_SUBMIT_WAIT submits the list and
// waits for the stream in the same call.
//
// encodeLaunches() is the only place here that knows how the list is encoded: it builds it with
// the project's command encoder and returns the bytes with, for every launch, the byte offset of
// its grid and of its argument slots, so the plan patches grids and i32 arguments in place when a
// variable's value changes, without knowing the record layout.
import { N, lastError, readU64, scratchU8, slot } from "../../ffi/native";
import type { Buffer } from "../buffer";
import type { Device } from "../device";
import { CommandEncoder } from "../encoder";
import { GpuError } from "../errors";
import type { Kernel } from "../kernel";
import type { Stream } from "../stream";

/** One kernel launch of a plan: a 1-D grid and block, buffers and i32 scalars as arguments. */
export interface PlanLaunch {
  readonly kernel: Kernel;
  readonly grid: number;
  readonly block: number;
  readonly args: readonly (Buffer | number)[];
}

/** A packed command list and where each launch's patchable fields sit in it. */
export interface CommandList {
  /** The packed commands (the plan owns them; patched in place). */
  readonly bytes: Uint8Array;
  /** Per launch: byte offset of its grid (x, y, z as u32) and block (x, y, z as u32). */
  readonly gridAt: readonly number[];
  readonly blockAt: readonly number[];
  /** Per launch: byte offset of its first argument slot (8 bytes per argument). */
  readonly argsAt: readonly number[];
}

// Layout of a launch record, relative to its argument slots (the encoder reports where those
// start): u32 grid[3] at -32, u32 block[3] at -20.
const GRID_FROM_ARGS = -32;
const BLOCK_FROM_ARGS = -20;

const encoders = new WeakMap<Device, CommandEncoder>();

/**
 * Encode `launches`, in order, as one command list for `device`. Each launch is validated as
 * Kernel.launch would (GpuError on a bad one). A stream runs its commands in order, so no barrier
 * is needed between a kernel and the next.
 */
export function encodeLaunches(device: Device, launches: readonly PlanLaunch[]): CommandList {
  let enc = encoders.get(device);
  if (!enc) encoders.set(device, (enc = new CommandEncoder(device)));
  enc.reset();
  const gridAt: number[] = [];
  const blockAt: number[] = [];
  const argsAt: number[] = [];
  try {
    for (const l of launches) {
      enc.dispatch(l.kernel, { grid: l.grid, block: l.block, args: l.args });
      const at = enc.lastArgOffset;
      argsAt.push(at);
      gridAt.push(at + GRID_FROM_ARGS);
      blockAt.push(at + BLOCK_FROM_ARGS);
    }
    return { bytes: enc.bytes(), gridAt, blockAt, argsAt };
  } finally {
    enc.reset(); // holds no references between plans
  }
}

/** Flag of bg_submit_ex: synchronize the stream after submitting, in the same crossing. */
export const SUBMIT_WAIT = 1;

/**
 * Submit `list` to `stream` in one crossing (and with `wait`, wait for the stream in it too). A
 * failure throws GpuError naming `call`, with the shim's message.
 */
export function submitList(call: string, stream: Stream, list: CommandList, wait: boolean): void {
  const bytes = list.bytes;
  scratchU8.fill(0xff, 0, 8); // "no offset" unless the shim names a bad command
  const rc = N.bg_submit_ex(stream.handle, bytes.length ? bytes : null, bytes.length, wait ? SUBMIT_WAIT : 0, slot(0));
  if (rc !== 0) {
    const bad = readU64(0); // still all ones when the shim named no command
    const msg = lastError() || "bg_submit_ex failed";
    throw new GpuError(rc, `${call}: ${msg}${bad < bytes.length ? ` (command at byte ${bad})` : ""}`, { backend: stream.device.backend, call });
  }
}
