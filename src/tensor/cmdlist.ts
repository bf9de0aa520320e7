// A tensor plan's launches as one command list (../commands), built once and submitted in one
// crossing per execution: with `wait`, the list's submit also waits for the stream in the same
// call. A variable's new value rewrites the grid, block and i32 arguments in place
// (CommandList.patchLaunch) of the launches whose kernel reads that variable (in its index space
// or as an argument) and leaves the others alone; only a kernel gaining or losing all its work
// rebuilds the list.
import type { Buffer } from "../buffer";
import { CommandList } from "../commands";
import type { Device } from "../device";
import type { Kernel } from "../kernel";
import type { GeneratedKernel } from "./codegen";
import type { KDim } from "./ir";

/** A plan's launches as one command list, kept in step with the variable values. */
export class PlanCommands {
  readonly #device: Device;
  readonly #gens: readonly GeneratedKernel[];
  readonly #compiled: readonly Kernel[];
  /** The list (its memory is kept across rebuilds), and whether it holds the current launches. */
  #list: CommandList | null = null;
  #built = false;
  /** Per launch in the list: where its argument slots start (CommandList.lastArgOffset). */
  #argsAt: number[] = [];
  /** The kernels the list launches (those with work at its variable values), and those values. */
  #launched: number[] = [];
  #vals = "";
  /** The variable values the list's launches were written with. */
  #written = new Map<string, number>();
  /** Per kernel: the variables its grid or its arguments depend on. */
  readonly #uses: readonly (readonly string[])[];

  /** `argVars[i]`: the variables kernel i takes as i32 arguments. */
  constructor(device: Device, gens: readonly GeneratedKernel[], compiled: readonly Kernel[], argVars: readonly (readonly string[])[]) {
    this.#device = device;
    this.#gens = gens;
    this.#compiled = compiled;
    const named = (d: KDim): string[] => (typeof d === "number" ? [] : [d.var]);
    this.#uses = gens.map((g, i) => [...new Set([...g.geometry.dims.flatMap(named), ...(argVars[i] ?? [])])]);
  }

  /** Forget the launches (the plan's buffers were reallocated): the next get() builds them again. */
  drop(): void {
    this.#list?.reset(); // holds no references to buffers about to be freed
    this.#built = false;
    this.#launched = [];
    this.#argsAt = [];
  }

  /**
   * The list for the variable values `vals` (`valsKey` names them): built on first use; a new
   * value patches grids, blocks and i32 arguments in place, or rebuilds the list when a kernel
   * gains or loses all its work. `argsOf(i)` gives kernel i's arguments. Each launch is checked
   * as Kernel.launch checks it (GpuError naming `call`). A stream runs its commands in order, so
   * no barrier is needed between a kernel and the next.
   */
  get(call: string, vals: ReadonlyMap<string, number>, valsKey: string, argsOf: (i: number) => (Buffer | number)[]): CommandList {
    const l = this.#list;
    if (l && this.#built && this.#vals === valsKey) return l;
    const geo = this.#gens.map((g) => g.launch(vals));
    const kis: number[] = [];
    geo.forEach((g, i) => g.grid > 0 && kis.push(i));
    const prev = this.#launched;
    if (l && this.#built && kis.length === prev.length && kis.every((k, j) => k === prev[j])) {
      // only the geometry and scalars change: a kernel's buffers are the plan's, fixed until drop();
      // a launch none of whose variables changed keeps what it has
      const old = this.#written;
      kis.forEach((ki, j) => {
        if (this.#uses[ki]!.every((v) => old.get(v) === vals.get(v))) return;
        l.patchLaunch(call, this.#argsAt[j]!, this.#compiled[ki]!, { grid: geo[ki]!.grid, block: geo[ki]!.block, args: argsOf(ki) });
      });
      this.#vals = valsKey;
      this.#written = new Map(vals);
      return l;
    }
    const list = (this.#list ??= new CommandList(this.#device, {}, call));
    list.reset();
    this.#built = false;
    const argsAt: number[] = [];
    try {
      for (const i of kis) {
        list.launchArgs(this.#compiled[i]!, { grid: geo[i]!.grid, block: geo[i]!.block, args: argsOf(i) }, call);
        argsAt.push(list.lastArgOffset);
      }
    } catch (e) {
      list.reset();
      throw e;
    }
    this.#argsAt = argsAt;
    this.#launched = kis;
    this.#vals = valsKey;
    this.#written = new Map(vals);
    this.#built = true;
    return list;
  }
}
