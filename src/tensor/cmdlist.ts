// A tensor plan's launches as one packed command list (the bg_submit format), built once and
// submitted in one crossing per execution: bg_submit_ex with BG_SUBMIT_WAIT submits the list and
// waits for the stream in the same call.
//
// encodeLaunches() is the only place here that knows how the list is encoded: it builds it with
// the project's command encoder and returns the bytes with, for every launch, the byte offset of
// its grid and of its argument slots, so the plan patches grids and i32 arguments in place when a
// variable's value changes, without knowing the record layout.
import { SubmitError, submit } from "../../ffi/result";
import type { Buffer } from "../buffer";
import type { Device } from "../device";
import { CommandEncoder } from "../encoder";
import { GpuError } from "../errors";
import type { Kernel } from "../kernel";
import type { Stream } from "../stream";
import type { GeneratedKernel } from "./codegen";
import type { PreparedKernel } from "./prepare";

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
  const backend = stream.device.backend;
  try {
    submit(stream.handle, bytes.length ? bytes : null, bytes.length, wait ? SUBMIT_WAIT : 0, backend);
  } catch (e) {
    if (!(e instanceof SubmitError)) throw e;
    throw new GpuError(e.code, `${call}: ${e.message}${e.badOffset !== null ? ` (command at byte ${e.badOffset})` : ""}`, { backend, call });
  }
}

/** A plan's launches as one command list, kept in step with the variable values. */
export class PlanCommands {
  readonly #device: Device;
  readonly #kernels: readonly PreparedKernel[];
  readonly #gens: readonly GeneratedKernel[];
  readonly #compiled: readonly Kernel[];
  #list: CommandList | null = null;
  #u32: Uint32Array = new Uint32Array(0);
  #i32: Int32Array = new Int32Array(0);
  /** The kernels the list launches (those with work at its variable values), and those values. */
  #launched: number[] = [];
  #vals = "";

  constructor(device: Device, kernels: readonly PreparedKernel[], gens: readonly GeneratedKernel[], compiled: readonly Kernel[]) {
    this.#device = device;
    this.#kernels = kernels;
    this.#gens = gens;
    this.#compiled = compiled;
  }

  /** Forget the list (the plan's buffers were reallocated): the next get() builds it again. */
  drop(): void {
    this.#list = null;
    this.#launched = [];
  }

  /**
   * The list for the variable values `vals` (`valsKey` names them): built on first use; a new
   * value patches grids and i32 arguments in place, or rebuilds the list when a kernel gains or
   * loses all its work. `argsOf(i)` gives kernel i's arguments when the list is built.
   */
  get(vals: ReadonlyMap<string, number>, valsKey: string, argsOf: (i: number) => (Buffer | number)[]): CommandList {
    const l = this.#list;
    if (l && this.#vals === valsKey) return l;
    const geo = this.#gens.map((g) => g.launch(vals));
    const kis: number[] = [];
    geo.forEach((g, i) => g.grid > 0 && kis.push(i));
    const prev = this.#launched;
    if (l && kis.length === prev.length && kis.every((k, j) => k === prev[j])) {
      const u32 = this.#u32, i32 = this.#i32;
      kis.forEach((ki, j) => {
        u32[l.gridAt[j]! >>> 2] = geo[ki]!.grid;
        u32[l.blockAt[j]! >>> 2] = geo[ki]!.block;
        const pk = this.#kernels[ki]!;
        let w = (l.argsAt[j]! >>> 2) + 2 * pk.bufferIndices.length;
        for (const v of pk.vars) {
          const x = vals.get(v)!;
          i32[w] = x;
          i32[w + 1] = x >> 31;
          w += 2;
        }
      });
      this.#vals = valsKey;
      return l;
    }
    const list = encodeLaunches(
      this.#device,
      kis.map((i) => ({ kernel: this.#compiled[i]!, grid: geo[i]!.grid, block: geo[i]!.block, args: argsOf(i) })),
    );
    const b = list.bytes;
    this.#u32 = new Uint32Array(b.buffer, b.byteOffset, b.byteLength >>> 2);
    this.#i32 = new Int32Array(b.buffer, b.byteOffset, b.byteLength >>> 2);
    this.#list = list;
    this.#launched = kis;
    this.#vals = valsKey;
    return list;
  }
}
