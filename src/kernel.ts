// Runtime-compiled kernels. Program.compile(device, source) → Module → Kernel by name. How a
// source becomes something the shim loads is each backend's record (../backends: C by the first C
// compiler found on the CPU, CUDA C by NVRTC, MSL by the Metal framework at load; ../compile holds
// the compilers and the disk cache); this file loads the result, finds kernels and launches them.
import { addressOf, cstr, launch } from "../ffi/result";
import { backends, type BackendName } from "./backends";
import type { CompileOptions, LoadableImage } from "./compile/types";
import { isDevice, noteCaptured, type DeviceRef as Device, type StreamRef as Stream } from "./device_state";
import { GpuError, Status, describeGot, invalid, disposed, options, type OptionKeys } from "./errors";
import { INSPECT, plural } from "./inspect";
import { kernelNamesByHandle, nameList, sourceKernelNames } from "./kernel_names";
import { ARG_TYPES, MAX_ARGS, areaOf, checkDevice, checkGeometry, launchLimits, packArgs, sigCodes, type ArgType, type LaunchConfig, type LaunchLimits, type LaunchTarget, type Signature } from "./launch";
import { track, untrack } from "./lifetime";

// The keys each options argument may have (errors.ts `options` refuses any other).
const COMPILE_KEYS: OptionKeys<CompileOptions> = { name: true, options: true };

export { compileStats } from "./compile/cache";
export type { CompileOptions };

// What a launch is, and its one check, live in ./launch (every front door calls it).
export type { ArgType, ArgValue, ArgValueOf, ArgsOf, Dim3, LaunchConfig, Signature } from "./launch";
export { MAX_ARGS } from "./launch";

/** A kernel source in one text, or one per backend name. */
export type KernelSource = string | Partial<Record<BackendName, string>>;

/**
 * What identifies the compiler of `device`'s kernels (the C compiler's version line, NVRTC's
 * version and the GPU architecture, or Metal), for caches keyed by it.
 */
export function compilerIdentity(device: Device): string {
  return backends[device.backend].compilerIdentity(device);
}

// ---- modules ------------------------------------------------------------------------------------

export class Program {
  /** Compile `source` for `device` (in its kernel language) and load it. */
  static compile(device: Device, source: KernelSource, opts: CompileOptions = {}): Module {
    if (!isDevice(device) || source === null || typeof source !== "object" && typeof source !== "string") invalid("Program.compile", "expected (device, source, options?)");
    opts = options("Program.compile", opts, COMPILE_KEYS);
    const src = typeof source === "string" ? source : source[device.backend];
    if (typeof src !== "string" || src.length === 0)
      invalid("Program.compile", `no ${device.backend} source given`);
    return loadModule(device, backends[device.backend].compile(device, src, opts), src);
  }
}

/** Load a compiled image of `source` on `device` (what Program.compile does after compiling). */
export function loadModule(device: Device, img: LoadableImage, source: string): Module {
  return new Module(device, device.state.api.module_load(device.handle, img.kind, img.image, img.bytes), source);
}

export class Module {
  readonly device: Device;
  readonly source: string;
  #handle: number;
  #live = true;
  #kernels = new Map<string, Kernel>();

  constructor(device: Device, handle: number, source: string) {
    this.device = device;
    this.#handle = handle;
    this.source = source;
    track(this, device.state, handle, "module");
  }

  get handle(): number {
    if (!this.device.state.open) disposed("Module", "device of this module");
    if (!this.#live) disposed("Module", "module");
    return this.#handle;
  }

  get disposed(): boolean {
    return !this.#live || !this.device.state.open;
  }

  /**
   * The kernel `name`, with the types of its arguments in order. A literal signature types its
   * launches: `module.kernel("add", ["buffer", "u32"])` takes `args: [buffer, n]`, and the
   * compiler rejects a missing argument or a number where a buffer goes.
   */
  kernel<const S extends Signature>(name: string, signature: S): Kernel<S> {
    if (typeof name !== "string" || !name) invalid("Module.kernel", "name must be a non-empty string");
    if (name.includes("\0")) invalid("Module.kernel", `name ${JSON.stringify(name)} contains a NUL character`);
    if (!Array.isArray(signature)) invalid("Module.kernel", "signature must be an array of argument types");
    for (const t of signature)
      if (!ARG_TYPES.has(t)) invalid("Module.kernel", `unknown argument type ${String(t)} (want buffer, i32, u32, i64, f32 or f64)`);
    if (signature.length > MAX_ARGS) invalid("Module.kernel", `${signature.length} arguments (max ${MAX_ARGS})`);
    const key = `${name}(${signature.join(",")})`;
    let k = this.#kernels.get(key);
    if (!k) {
      k = new Kernel(this, this.#lookup(name), name, [...signature]);
      this.#kernels.set(key, k);
    }
    return k as Kernel<S>;
  }

  dispose(): void {
    if (!this.#live) return;
    this.#live = false;
    untrack(this);
    const st = this.device.state;
    if (!st.open) return;
    try {
      st.api.module_unload(this.#handle);
    } catch {
      /* dispose never throws: a module the shim refused to unload goes with its device */
    }
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /** The kernels its source defines (read from the source text), in order. */
  get kernelNames(): readonly string[] {
    return sourceKernelNames(this.source);
  }

  /** The native kernel `name`; a name the module lacks is NOT_FOUND listing the ones it has. */
  #lookup(name: string): number {
    try {
      return this.device.state.api.module_get_kernel(this.handle, cstr(name));
    } catch (e) {
      if (!(e instanceof GpuError) || e.code !== Status.NOT_FOUND) throw e;
      const names = this.kernelNames;
      const has = names.length ? `its kernels: ${nameList(names, 32)}` : "no kernel names could be read from its source";
      throw new GpuError(e.code, `Module.kernel: no kernel named ${JSON.stringify(name)} in the module (${has})`, { backend: e.backend, call: e.call });
    }
  }

  /** "Module(cpu, 4 kernels: vadd, saxpy, reduce_sum, matmul_tiled)"; ", disposed" once unloaded. */
  toString(): string {
    const names = this.kernelNames;
    return `Module(${this.device.spec}, ${plural(names.length, "kernel")}${names.length ? `: ${nameList(names)}` : ""}${this.disposed ? ", disposed" : ""})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}

// ---- launch ------------------------------------------------------------------------------------

// Kernel.launch packs into an explicit 16 KiB ArrayBuffer: Bun never moves it, so its address is computed once.
const ARG_AB = new ArrayBuffer(16384);
const ARG_PTR = addressOf(ARG_AB);
const launchArea = areaOf(ARG_AB);

export class Kernel<S extends Signature = Signature> implements LaunchTarget {
  readonly module: Module;
  /** Its module's device (a field: every launch reads it). */
  readonly device: Device;
  readonly name: string;
  readonly signature: S;
  /** The signature as packing codes (see sigCodes). */
  readonly codes: Uint8Array;
  readonly #handle: number;
  readonly #backend: BackendName;
  #limits: LaunchLimits | null = null;
  /** What a refused host write names this kernel's launches as. */
  readonly #work: string;

  constructor(module: Module, handle: number, name: string, signature: ArgType[]) {
    this.module = module;
    this.device = module.device;
    this.#handle = handle;
    this.#backend = module.device.backend;
    this.name = name;
    this.signature = Object.freeze(signature) as readonly ArgType[] as S;
    this.codes = sigCodes(signature);
    this.#work = `Kernel.launch(${name})`;
    kernelNamesByHandle.set(handle, name); // timelines name launches by handle (src/trace)
  }

  get handle(): number {
    this.module.handle; // throws if the module or device is gone
    return this.#handle;
  }

  get maxThreadsPerBlock(): number {
    return this.device.state.api.kernel_max_threads(this.handle);
  }

  /** @internal Its launch limits, read from the shim on first use (see ./launch). */
  get launchLimits(): LaunchLimits {
    return this.#limits ?? (this.#limits = launchLimits(this.device, this.maxThreadsPerBlock));
  }

  /**
   * From now on, launches of this kernel (queued, captured, in executables and future ones) run
   * the code of `from`, a kernel of another module on the same device with the same signature:
   * how a kernel compiled quickly is swapped for its optimized build. `from`'s code stays loaded
   * while this kernel's module is. CPU backend only (NOT_SUPPORTED elsewhere).
   */
  retarget(from: Kernel<S>): void {
    if (!(from instanceof Kernel)) invalid("Kernel.retarget", `${this.name}: expected a Kernel, got ${describeGot(from)}`);
    if (from.module.device !== this.module.device) invalid("Kernel.retarget", `${this.name}: ${from.name} is a kernel of another device`);
    if (from.signature.join(",") !== this.signature.join(","))
      invalid("Kernel.retarget", `${this.name}(${this.signature.join(", ")}): ${from.name} takes (${from.signature.join(", ")})`);
    this.device.state.api.kernel_retarget(this.handle, from.handle);
    this.#limits = null; // other code may allow fewer threads
  }

  /** Launch on `stream`: checked by ./launch as every door is, packed into one block, one FFI crossing. */
  launch(stream: Stream, cfg: LaunchConfig<S>): void {
    const call = "Kernel.launch";
    if (stream === null || typeof stream !== "object") invalid(call, `${this.name}: expected (stream, { grid, block, args })`);
    const k = this.handle;
    const s = stream.handle;
    if (typeof s !== "number" || !isDevice(stream.device)) invalid(call, `${this.name}: expected a Stream`);
    checkDevice(call, this, stream.device);
    const g = checkGeometry(call, this, cfg);
    packArgs(call, this, cfg.args, launchArea, 0);
    launch(k, s, g[0]!, g[1]!, g[2]!, g[3]!, g[4]!, g[5]!, g[6]!, ARG_PTR, this.codes.length, this.#backend);
    // a host write into a buffer argument waits for this launch (non-blocking streams only)
    if (stream.nonBlocking === true) stream.usedBy?.(this.#work, cfg.args);
    const st = stream.device.state;
    if (st.captures > 0) noteCaptured(st, s, this, cfg.args); // a graph replays it: keep what it uses
  }

  /** "Kernel(vadd(buffer, buffer, buffer, i32) on cpu)"; ", disposed" once its module is unloaded. */
  toString(): string {
    return `Kernel(${this.name}(${this.signature.join(", ")}) on ${this.device.spec}${this.module.disposed ? ", disposed" : ""})`;
  }

  [INSPECT](): string {
    return this.toString();
  }
}

