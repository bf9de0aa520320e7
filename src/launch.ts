// The one launch module: what a launch is (a kernel's grid, block, shared bytes and arguments) and
// the one check of it, which every front door calls in the same order with its own name:
// Kernel.launch, CommandList.launch (CommandEncoder.dispatch, ComputeGraph/GraphSession.dispatch,
// Step lowering), Step.kernel / Schedule.addKernel, CommandList.patchLaunch, and the argument
// updates (GraphExec.setKernelArgs, Executable.setArgs, ComputeGraph.setArgs through patchArgs).
// So a bad launch gets the same GpuError (code and text after the door's name) at the call that
// made it, whichever door it came through (cudarc's launch.rs and cuda.core's LaunchConfig are the
// models).
//
// The order of the checks: the kernel's device against the door's (checkDevice), the config is
// an object whose keys the door knows (LAUNCH_KEYS, or a door's own), grid, block (each a number or [x, y?, z?] of integers in [1, 2^31-1]), the limits,
// sharedBytes (a non-negative integer, at most the device's limit), then the arguments (packArgs:
// count, then each one's type and range, buffers of the kernel's device and not disposed).
//
// The limits come from the shim, never from numbers written here: bg_device_props reports the
// device's block and grid limits per dimension, the most blocks of a grid and the most shared
// bytes of a block; bg_kernel_max_threads the kernel's most threads per block. A kernel reads them
// once (Kernel's launch limits); the hot path compares numbers and allocates nothing.
import { Buffer } from "./buffer";
import type { DeviceRef } from "./device_state";
import { GpuError, Status, describeGot, invalid, unknownOption, type OptionKeys } from "./errors";
import { plural } from "./inspect";

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

/** A launch of a kernel of signature `S`: `args` is typed from it (see ArgsOf). */
export interface LaunchConfig<S extends Signature = Signature> {
  grid: Dim3;
  block: Dim3;
  args: ArgsOf<S>;
  sharedBytes?: number | undefined;
}

/**
 * The keys a door's launch config may have (errors.ts OptionKeys): LAUNCH_KEYS at Kernel.launch,
 * CommandEncoder.dispatch and CommandList.launch; a door whose config has more (a Step's reads and
 * writes) passes its own. Any other key is INVALID_VALUE naming the door, the kernel and the
 * nearest known key (`shared` → "did you mean sharedBytes?"), never silently ignored.
 */
export type LaunchKeys = Readonly<Record<string, true>>;
export const LAUNCH_KEYS: OptionKeys<LaunchConfig> = { grid: true, block: true, args: true, sharedBytes: true };

export const ARG_TYPES = new Set<string>(["buffer", "i32", "u32", "i64", "f32", "f64"]);
export const MAX_ARGS = 256;

const CODE: Record<ArgType, number> = { buffer: 0, i32: 1, u32: 2, i64: 3, f32: 4, f64: 5 };
/** A signature as small integer codes, for the packing loop. */
export function sigCodes(sig: readonly ArgType[]): Uint8Array {
  return Uint8Array.from(sig, (t) => CODE[t]);
}

// ---- limits ------------------------------------------------------------------------------------

/** A kernel's launch limits (Infinity: none), read from the shim once per kernel. */
export interface LaunchLimits {
  /** Most threads of a block: the kernel's own limit, within the device's. */
  readonly threads: number;
  readonly bx: number;
  readonly by: number;
  readonly bz: number;
  readonly gx: number;
  readonly gy: number;
  readonly gz: number;
  /** Most blocks of one grid. */
  readonly blocks: number;
  /** Most shared bytes of a block. */
  readonly shared: number;
}

const lim = (n: number) => (n > 0 ? n : Infinity); // the shim reports 0 where it knows no limit

/** The limits of a kernel of `device` whose own most threads per block is `kernelThreads`. */
export function launchLimits(device: DeviceRef, kernelThreads: number): LaunchLimits {
  const p = device.props;
  return {
    threads: Math.min(lim(p.maxThreadsPerBlock), lim(kernelThreads)),
    bx: lim(p.maxBlockDim[0]),
    by: lim(p.maxBlockDim[1]),
    bz: lim(p.maxBlockDim[2]),
    gx: lim(p.maxGridDim[0]),
    gy: lim(p.maxGridDim[1]),
    gz: lim(p.maxGridDim[2]),
    blocks: lim(p.maxGridBlocks),
    shared: p.maxSharedBytesPerBlock >= 0 ? p.maxSharedBytesPerBlock : Infinity,
  };
}

/** What the launch module needs of a kernel (Kernel in kernel.ts is one). */
export interface LaunchTarget {
  readonly name: string;
  readonly signature: readonly ArgType[];
  /** The signature as packing codes (sigCodes). */
  readonly codes: Uint8Array;
  readonly device: DeviceRef;
  /** Its limits, read once (throws if the kernel's module or device is gone). */
  readonly launchLimits: LaunchLimits;
}

// ---- the checks ----------------------------------------------------------------------------------

/** The door's device must be the kernel's. */
export function checkDevice(call: string, k: LaunchTarget, device: DeviceRef): void {
  if (k.device.state.handle !== device.state.handle) invalid(call, `${k.name}: a kernel of ${k.device.spec}, used on ${device.spec} (another device)`);
}

const DIM_MAX = 2147483647;
const AXES = ["x", "y", "z"] as const;

/**
 * A launch's grid, block and shared bytes, checked and normalised, as [gx, gy, gz, bx, by, bz,
 * shared] in one reused array (read it before the next call). No allocation on any good launch.
 */
export const GEO = new Uint32Array(7);

export function checkGeometry(call: string, k: LaunchTarget, cfg: Omit<LaunchConfig, "args">, known: LaunchKeys | null = LAUNCH_KEYS): Uint32Array {
  if (cfg !== null && typeof cfg === "object") {
    // Every key known (a for-in over a literal's few keys: no allocation, 10-20 ns a launch);
    // null: a config the package built itself (a Step's lowering, a plan's list), not looked at.
    if (known !== null) for (const key in cfg) if (known[key] !== true) unknownOption(call, key, Object.keys(known), `${k.name}: `);
    // The common launch (numbers, no shared memory) in a few comparisons; anything else below.
    const g = cfg.grid, b = cfg.block, L = k.launchLimits;
    if (typeof g === "number" && typeof b === "number" && cfg.sharedBytes === undefined &&
        (g | 0) === g && g >= 1 && g <= L.gx && (b | 0) === b && b >= 1 && b <= L.bx && b <= L.threads) {
      GEO[0] = g;
      GEO[1] = GEO[2] = 1;
      GEO[3] = b;
      GEO[4] = GEO[5] = 1;
      GEO[6] = 0;
      return GEO;
    }
  }
  return fullGeometry(call, k, cfg);
}

function fullGeometry(call: string, k: LaunchTarget, cfg: Omit<LaunchConfig, "args">): Uint32Array {
  if (cfg === null || typeof cfg !== "object") invalid(call, `${k.name}: expected { grid, block, args }`);
  dims(call, k, "grid", cfg.grid, 0);
  dims(call, k, "block", cfg.block, 3);
  const L = k.launchLimits;
  const gx = GEO[0]!, gy = GEO[1]!, gz = GEO[2]!, bx = GEO[3]!, by = GEO[4]!, bz = GEO[5]!;
  if (bx > L.bx || by > L.by || bz > L.bz || bx * by * bz > L.threads || gx > L.gx || gy > L.gy || gz > L.gz || gx * gy * gz > L.blocks)
    overLimits(call, k, L);
  const s = cfg.sharedBytes;
  if (s === undefined) GEO[6] = 0;
  else if ((s >>> 0) === s && s <= L.shared) GEO[6] = s;
  else if (typeof s !== "number" || !Number.isInteger(s) || s < 0) invalid(call, `${k.name}: sharedBytes must be a non-negative integer, got ${describeGot(s)}`);
  else invalid(call, `${k.name}: sharedBytes ${s} exceeds the limit (${L.shared} bytes per block)`);
  return GEO;
}

/** Grid or block `d` into GEO at `at`, else INVALID_VALUE naming the bad field. */
function dims(call: string, k: LaunchTarget, what: "grid" | "block", d: Dim3, at: number): void {
  let x: unknown, y: unknown = 1, z: unknown = 1;
  if (typeof d === "number") x = d;
  else if (Array.isArray(d) && d.length >= 1 && d.length <= 3) {
    x = d[0];
    y = d[1] ?? 1;
    z = d[2] ?? 1;
  } else {
    const got = Array.isArray(d) ? `${d.length} dimensions` : describeGot(d);
    invalid(call, `${k.name}: ${what} must be a number or [x, y?, z?], got ${got}`);
  }
  if (!(((x as number) | 0) === x && (x as number) >= 1 && ((y as number) | 0) === y && (y as number) >= 1 && ((z as number) | 0) === z && (z as number) >= 1)) {
    const v = [x, y, z];
    for (let i = 0; i < 3; i++) {
      const n = v[i];
      if (typeof n !== "number" || !Number.isInteger(n) || n < 1 || n > DIM_MAX)
        invalid(call, `${k.name}: ${what}.${AXES[i]} must be an integer in [1, ${DIM_MAX}], got ${describeGot(n)}`);
    }
  }
  GEO[at] = x as number;
  GEO[at + 1] = y as number;
  GEO[at + 2] = z as number;
}

function overLimits(call: string, k: LaunchTarget, L: LaunchLimits): never {
  const g = `grid ${GEO[0]}x${GEO[1]}x${GEO[2]}`, b = `block ${GEO[3]}x${GEO[4]}x${GEO[5]}`;
  const per: [string, string, number, number][] = [
    [b, "block.x", GEO[3]!, L.bx], [b, "block.y", GEO[4]!, L.by], [b, "block.z", GEO[5]!, L.bz],
    [g, "grid.x", GEO[0]!, L.gx], [g, "grid.y", GEO[1]!, L.gy], [g, "grid.z", GEO[2]!, L.gz],
  ];
  for (const [what, field, v, max] of per.slice(0, 3)) if (v > max) invalid(call, `${k.name}: ${what} exceeds the limits: ${field} ${v} > ${max}`);
  const t = GEO[3]! * GEO[4]! * GEO[5]!;
  if (t > L.threads) invalid(call, `${k.name}: ${b} exceeds the limits: ${t} threads > ${L.threads} per block for this kernel`);
  for (const [what, field, v, max] of per.slice(3)) if (v > max) invalid(call, `${k.name}: ${what} exceeds the limits: ${field} ${v} > ${max}`);
  invalid(call, `${k.name}: ${g} exceeds the limits: ${GEO[0]! * GEO[1]! * GEO[2]!} blocks > ${L.blocks}`);
}

// ---- arguments -------------------------------------------------------------------------------------

/** Typed views over one packing area, 8-byte slots. */
export interface ArgArea {
  u32: Uint32Array;
  i32: Int32Array;
  f32: Float32Array;
  f64: Float64Array;
  i64: BigInt64Array;
}

export function areaOf(ab: ArrayBuffer): ArgArea {
  return { u32: new Uint32Array(ab), i32: new Int32Array(ab), f32: new Float32Array(ab), f64: new Float64Array(ab), i64: new BigInt64Array(ab) };
}

function disposedArg(call: string, name: string, i: number): never {
  throw new GpuError(Status.INVALID_HANDLE, `${call}: ${name}: args[${i}] is a disposed buffer`, { backend: "typescript", call });
}

function argError(call: string, name: string, i: number, want: string, got: unknown): never {
  invalid(call, `${name}: args[${i}] must be ${want}, got ${describeGot(got)}`);
}

/**
 * Pack `args` by `k`'s signature into 8-byte slots of `area` starting at slot `at`. Validates
 * every argument (count, type, range, a buffer of the kernel's device, not disposed); on a bad
 * argument it throws before the caller submits anything.
 */
export function packArgs(call: string, k: LaunchTarget, args: readonly ArgValue[], area: ArgArea, at: number): void {
  const name = k.name, codes = k.codes, n = codes.length;
  if (!Array.isArray(args)) invalid(call, `${name}: args must be an array, got ${describeGot(args)}`);
  if (args.length !== n) invalid(call, `${name}: expected ${plural(n, "argument")} (${k.signature.join(", ")}), got ${args.length}`);
  const { u32, i32, f32, f64, i64 } = area;
  let dev = -1; // the kernel's device handle, read at the first buffer
  for (let i = 0; i < n; i++) {
    const v = args[i];
    const w = (at + i) * 2;
    switch (codes[i]) {
      case 0: {
        if (!(v instanceof Buffer)) argError(call, name, i, "a Buffer", v);
        if (dev < 0) dev = k.device.state.handle;
        if (v.device.state.handle !== dev) invalid(call, `${name}: args[${i}] is a buffer of another device (${v.device.spec})`);
        if (v.disposed) disposedArg(call, name, i);
        const a = v.address;
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

// Validation scratch for a launch checked before it is appended anywhere (a Step) and for argument
// updates validated in full before they are copied in: an explicit ArrayBuffer, never submitted.
const CHECK_AB = new ArrayBuffer(16384);
/** @internal The scratch checkLaunch and checkArgs pack into. */
export const CHECK_AREA = areaOf(CHECK_AB);

/** Validate `args` for `k` (packed into CHECK_AREA, never submitted). */
export function checkArgs(call: string, k: LaunchTarget, args: readonly ArgValue[]): void {
  packArgs(call, k, args, CHECK_AREA, 0);
}

/**
 * The whole check of a launch that is not appended anywhere yet (a Step is made before its list):
 * geometry, shared bytes and every argument. Returns the normalised geometry (allocated: not for
 * hot paths).
 */
export function checkLaunch(call: string, k: LaunchTarget, cfg: LaunchConfig, known: LaunchKeys = LAUNCH_KEYS): { grid: [number, number, number]; block: [number, number, number]; sharedBytes: number } {
  const g = checkGeometry(call, k, cfg, known);
  const out = { grid: [g[0]!, g[1]!, g[2]!] as [number, number, number], block: [g[3]!, g[4]!, g[5]!] as [number, number, number], sharedBytes: g[6]! };
  checkArgs(call, k, cfg.args as readonly ArgValue[]);
  return out;
}
