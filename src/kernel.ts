// Runtime-compiled kernels. Program.compile(device, source) → Module → Kernel by name. How a
// source becomes something the shim loads is each backend's record (../backends: C by the first C
// compiler found on the CPU, CUDA C by NVRTC, MSL by the Metal framework at load; ../compile holds
// the compilers and the disk cache); this file loads the result, finds kernels and launches them.
import { addressOf, cstr, launch } from "../ffi/result";
import { backends, type BackendName } from "./backends";
import { Buffer } from "./buffer";
import type { CompileOptions, LoadableImage } from "./compile/types";
import { isDevice, noteCaptured, type DeviceRef as Device, type StreamRef as Stream } from "./device_state";
import { GpuError, Status, describeGot, invalid, disposed, options } from "./errors";
import { INSPECT, plural } from "./inspect";
import { kernelNamesByHandle, nameList, sourceKernelNames } from "./kernel_names";
import { track, untrack } from "./lifetime";

export { compileStats } from "./compile/cache";
export type { CompileOptions };

export type ArgType = "buffer" | "i32" | "u32" | "i64" | "f32" | "f64";
export type ArgValue = Buffer | number | bigint;
/** The value an argument of type `T` takes: a buffer for "buffer", a bigint or safe integer for "i64", else a number. */
export type ArgValueOf<T extends ArgType> = T extends "buffer" ? Buffer : T extends "i64" ? bigint | number : number;
/** A kernel signature: the types of its arguments in order. */
export type Signature = readonly ArgType[];
/**
 * The argument tuple of a signature: `["buffer", "u32", "f32"]` gives `[GpuBuffer, number, number]`.
 * A signature only known at run time (`ArgType[]`) gives `ArgValue[]`.
 */
export type ArgsOf<S extends Signature> = { readonly [K in keyof S]: S[K] extends ArgType ? ArgValueOf<S[K]> : never };
export type Dim3 = number | readonly [number] | readonly [number, number] | readonly [number, number, number];

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
    opts = options("Program.compile", opts);
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

// ---- arguments and launch ----------------------------------------------------------------------

const ARG_TYPES = new Set<string>(["buffer", "i32", "u32", "i64", "f32", "f64"]);
export const MAX_ARGS = 256;

// An explicit 16 KiB ArrayBuffer: Bun never moves it, so its address is computed once.
const ARG_AB = new ArrayBuffer(16384);
const ARG_U32 = new Uint32Array(ARG_AB);
const ARG_I32 = new Int32Array(ARG_AB);
const ARG_F32 = new Float32Array(ARG_AB);
const ARG_F64 = new Float64Array(ARG_AB);
const ARG_I64 = new BigInt64Array(ARG_AB);
const ARG_PTR = addressOf(ARG_AB);

/** Typed views over one packing area; `slot0` is its first 8-byte slot. */
export interface ArgArea {
  u32: Uint32Array;
  i32: Int32Array;
  f32: Float32Array;
  f64: Float64Array;
  i64: BigInt64Array;
}
export const launchArea: ArgArea = { u32: ARG_U32, i32: ARG_I32, f32: ARG_F32, f64: ARG_F64, i64: ARG_I64 };

function argError(call: string, name: string, i: number, want: string, got: unknown): never {
  invalid(call, `${name}: argument ${i} must be ${want}, got ${typeof got === "object" && got ? got.constructor.name : describeGot(got)}`);
}

const CODE: Record<ArgType, number> = { buffer: 0, i32: 1, u32: 2, i64: 3, f32: 4, f64: 5 };
/** A signature as small integer codes, for the packing loop. */
export function sigCodes(sig: readonly ArgType[]): Uint8Array {
  return Uint8Array.from(sig, (t) => CODE[t]);
}

/**
 * Pack `args` by `sig` into 8-byte slots of `area` starting at slot `at`. Validates every
 * argument (type, range, buffer of the right device, not disposed); on a bad argument it throws
 * before the caller submits anything.
 */
export function packArgs(call: string, name: string, sig: readonly ArgType[], args: readonly ArgValue[], devHandle: number, area: ArgArea, at: number, codes: Uint8Array = sigCodes(sig)): void {
  if (!Array.isArray(args)) invalid(call, `${name}: args must be an array`);
  const n = codes.length;
  if (args.length !== n) invalid(call, `${name}: expected ${plural(n, "argument")} (${sig.join(", ")}), got ${args.length}`);
  const { u32, i32, f32, f64, i64 } = area;
  for (let i = 0; i < n; i++) {
    const v = args[i];
    const w = (at + i) * 2;
    switch (codes[i]) {
      case 0: {
        if (!(v instanceof Buffer)) argError(call, name, i, "a Buffer", v);
        if (v.device.state.handle !== devHandle) invalid(call, `${name}: argument ${i} is a buffer of another device (${v.device.spec})`);
        const a = v.address; // throws if disposed
        u32[w] = a >>> 0;
        u32[w + 1] = (a / 4294967296) >>> 0;
        break;
      }
      case 1:
        if (typeof v !== "number" || (v | 0) !== v) argError(call, name, i, "an i32", v);
        i32[w] = v;
        i32[w + 1] = v >> 31;
        break;
      case 2:
        if (typeof v !== "number" || v >>> 0 !== v) argError(call, name, i, "a u32", v);
        u32[w] = v;
        u32[w + 1] = 0;
        break;
      case 3:
        if (typeof v === "bigint") {
          if (v < -(1n << 63n) || v >= 1n << 63n) argError(call, name, i, "an i64", v);
          i64[at + i] = v;
        } else if (typeof v === "number" && Number.isSafeInteger(v)) {
          u32[w] = v >>> 0;
          i32[w + 1] = Math.floor(v / 4294967296);
        } else argError(call, name, i, "an i64 (safe integer or bigint)", v);
        break;
      case 4:
        if (typeof v !== "number") argError(call, name, i, "a number (f32)", v);
        f32[w] = v;
        u32[w + 1] = 0;
        break;
      case 5:
        if (typeof v !== "number") argError(call, name, i, "a number (f64)", v);
        f64[at + i] = v;
        break;
    }
  }
}

/** Normalise a grid or block to [x, y, z], each a positive integer. */
export function dim3(call: string, what: string, d: Dim3): [number, number, number] {
  const a: readonly number[] = typeof d === "number" ? [d] : Array.isArray(d) ? d : [];
  if (a.length < 1 || a.length > 3) invalid(call, `${what} must be a number or [x, y?, z?]`);
  const out: [number, number, number] = [a[0]!, a[1] ?? 1, a[2] ?? 1];
  for (const v of out)
    if (!Number.isInteger(v) || v < 1 || v > 2147483647) invalid(call, `${what} must be positive integers, got [${a.join(", ")}]`);
  return out;
}

/** A launch of a kernel of signature `S`: `args` is typed from it (see ArgsOf). */
export interface LaunchConfig<S extends Signature = Signature> {
  grid: Dim3;
  block: Dim3;
  args: ArgsOf<S>;
  sharedBytes?: number | undefined;
}

export class Kernel<S extends Signature = Signature> {
  readonly module: Module;
  readonly name: string;
  readonly signature: S;
  /** The signature as packing codes (see sigCodes). */
  readonly codes: Uint8Array;
  readonly #handle: number;
  readonly #backend: BackendName;

  constructor(module: Module, handle: number, name: string, signature: ArgType[]) {
    this.module = module;
    this.#handle = handle;
    this.#backend = module.device.backend;
    this.name = name;
    this.signature = Object.freeze(signature) as readonly ArgType[] as S;
    this.codes = sigCodes(signature);
    kernelNamesByHandle.set(handle, name); // timelines name launches by handle (src/trace)
  }

  get device(): Device {
    return this.module.device;
  }

  get handle(): number {
    this.module.handle; // throws if the module or device is gone
    return this.#handle;
  }

  get maxThreadsPerBlock(): number {
    return this.device.state.api.kernel_max_threads(this.handle);
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
  }

  /** Launch on `stream`: arguments checked, packed into one block, one FFI crossing. */
  launch(stream: Stream, cfg: LaunchConfig<S>): void {
    if (stream === null || typeof stream !== "object" || cfg === null || typeof cfg !== "object") invalid("Kernel.launch", `${this.name}: expected (stream, { grid, block, args })`);
    const k = this.handle;
    const s = stream.handle;
    if (typeof s !== "number" || !isDevice(stream.device)) invalid("Kernel.launch", `${this.name}: expected a Stream`);
    const dev = this.module.device.state.handle;
    if (stream.device.state.handle !== dev) invalid("Kernel.launch", `${this.name}: stream of another device`);
    // Grid and block inline (no arrays allocated on the hot path).
    const g = cfg.grid, b = cfg.block;
    let gx: number, gy = 1, gz = 1, bx: number, by = 1, bz = 1;
    if (typeof g === "number") gx = g;
    else {
      if (!Array.isArray(g) || g.length < 1 || g.length > 3) return void dim3("Kernel.launch", "grid", g);
      gx = g[0]!; gy = g[1] ?? 1; gz = g[2] ?? 1;
    }
    if (typeof b === "number") bx = b;
    else {
      if (!Array.isArray(b) || b.length < 1 || b.length > 3) return void dim3("Kernel.launch", "block", b);
      bx = b[0]!; by = b[1] ?? 1; bz = b[2] ?? 1;
    }
    if (!(gx >= 1 && gy >= 1 && gz >= 1 && (gx | 0) === gx && (gy | 0) === gy && (gz | 0) === gz)) dim3("Kernel.launch", "grid", g);
    if (!(bx >= 1 && by >= 1 && bz >= 1 && (bx | 0) === bx && (by | 0) === by && (bz | 0) === bz)) dim3("Kernel.launch", "block", b);
    const shared = cfg.sharedBytes ?? 0;
    if ((shared | 0) !== shared || shared < 0) invalid("Kernel.launch", `sharedBytes must be a non-negative integer`);
    packArgs("Kernel.launch", this.name, this.signature, cfg.args, dev, launchArea, 0, this.codes);
    launch(k, s, gx, gy, gz, bx, by, bz, shared, ARG_PTR, this.codes.length, this.#backend);
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

export const ARG_AREA_PTR = ARG_PTR;
