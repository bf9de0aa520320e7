// Runtime-compiled kernels. Program.compile(device, source) → Module → Kernel by name.
//  - CPU: C (with shim/bungpu_cpu.h) compiled to a shared library by the first C compiler found.
//  - CUDA: CUDA C compiled by NVRTC to a CUBIN for the device's sm_XY (PTX where NVRTC does not
//    know the GPU), loaded with cuModuleLoadDataEx.
//  - Metal: MSL compiled by the Metal framework when the module loads.
// One disk cache under the per-user cache folder, keyed by a hash of source, options, device and
// compiler; artifacts are written atomically and checked against their recorded hash before use,
// so a corrupt entry is rebuilt, never trusted.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findCompilers, type CCompiler } from "../ffi/compilers";
import { tinyccCompile } from "../ffi/tinycc";
import { cacheRoot } from "../ffi/load";
import { N, check, cstr, slot, readPtr, readI32, readU64, addressOf, lastError } from "../ffi/native";
import { SHIM_DIR } from "../ffi/shimsrc";
import { ImageKind, Status } from "../ffi/sys";
import { Buffer } from "./buffer";
import { Device, noteCaptured } from "./device";
import { GpuError, invalid, disposed, options } from "./errors";
import { track, untrack } from "./lifetime";
import type { Stream } from "./stream";

export type ArgType = "buffer" | "i32" | "u32" | "i64" | "f32" | "f64";
export type ArgValue = Buffer | number | bigint;
export type Dim3 = number | readonly [number] | readonly [number, number] | readonly [number, number, number];

export interface CompileOptions {
  /** A name for logs and the source file ("kernel" by default). */
  name?: string;
  /** Extra compiler options (C compiler flags on CPU, NVRTC options on CUDA). */
  options?: string[];
}

export type KernelSource = string | { cpu?: string; cuda?: string; metal?: string };

/** What compilation did in this process: tests and benches read it. */
export const compileStats = {
  compilerRuns: 0,
  diskHits: 0,
  rebuiltCorrupt: 0,
  /** `cc --version` spawns to identify the C compiler (0 on a warm start: the identity is remembered on disk). */
  versionSpawns: 0,
};

// ---- compiler identity ---------------------------------------------------------------------

let cpuCompiler: { cc: CCompiler; version: string } | null | undefined;
/** The C compiler for CPU kernels, or null when only Bun's TinyCC is left (BUNGPU_CC=tinycc forces it). */
function cpuCompilerInfo(): { cc: CCompiler; version: string } | null {
  if (cpuCompiler !== undefined) return cpuCompiler;
  const cc = process.env.BUNGPU_CC === "tinycc" ? undefined : findCompilers().list[0];
  if (!cc) return (cpuCompiler = null);
  cpuCompiler = { cc, version: compilerVersion(cc) };
  return cpuCompiler;
}

const VERSIONS_FILE = "compilers.json";
const VERSIONS_MAX = 32;

/**
 * The first line of `cc --version`, remembered under the per-user cache folder by the compiler
 * binary's resolved path, size, mtime and inode: a warm start skips the spawn (~1.3 ms). When the
 * binary changes (an upgrade, another alternative behind the symlink), its stamp changes and the
 * compiler is asked again. A missing or unreadable record only costs the spawn.
 */
function compilerVersion(cc: CCompiler): string {
  let stamp: string | null = null;
  try {
    const real = realpathSync(cc.argv[0]!);
    const st = statSync(real);
    stamp = `${cc.argv.join(" ")}|${real}|${st.size}|${st.mtimeMs}|${st.ino}`;
  } catch {
    stamp = null;
  }
  const file = join(cacheRoot(), VERSIONS_FILE);
  let known: Record<string, string> = {};
  if (stamp) {
    try {
      const parsed = JSON.parse(readFileSync(file, "utf8")) as unknown;
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) known = parsed as Record<string, string>;
      const v = known[stamp];
      if (typeof v === "string" && v.length > 0) return v;
    } catch {
      known = {};
    }
  }
  compileStats.versionSpawns++;
  const r = Bun.spawnSync([...cc.argv, "--version"], { stdout: "pipe", stderr: "pipe" });
  const version = new TextDecoder().decode(r.stdout).split("\n")[0]?.trim() || cc.label;
  if (stamp && r.exitCode === 0) {
    try {
      const keys = Object.keys(known).filter((k) => typeof known[k] === "string");
      const next: Record<string, string> = {};
      for (const k of keys.slice(Math.max(0, keys.length - (VERSIONS_MAX - 1)))) next[k] = known[k]!;
      next[stamp] = version;
      mkdirSync(cacheRoot(), { recursive: true });
      const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
      writeFileSync(tmp, JSON.stringify(next));
      renameSync(tmp, file);
    } catch {
      /* a read-only cache folder: the next start spawns again */
    }
  }
  return version;
}

/**
 * What identifies the compiler of `device`'s kernels (the C compiler's version line, NVRTC's
 * version and the GPU architecture, or Metal), for caches keyed by it.
 */
export function compilerIdentity(device: Device): string {
  if (device.backend === "cpu") {
    const info = cpuCompilerInfo();
    return info ? `${info.cc.label}|${info.version}|${archFlags(info.cc).join(" ")}` : "tinycc (bun:ffi)";
  }
  if (device.backend === "cuda") {
    const [major, minor] = device.props.computeCapability;
    let rtc = "nvrtc";
    if (N.bg_rtc_version(device.handle, slot(0), slot(1)) === 0) rtc = `nvrtc ${readI32(0)}.${readI32(1)}`;
    return `${rtc}|sm_${major}${minor}`;
  }
  return device.backend;
}

function archFlags(cc: CCompiler): string[] {
  if (process.env.BUNGPU_NO_NATIVE_ARCH) return [];
  if (cc.kind === "zig") return ["-mcpu=native"];
  return process.arch === "arm64" ? ["-mcpu=native"] : ["-march=native"];
}

function sha256(...parts: (string | Uint8Array)[]): string {
  const h = new Bun.CryptoHasher("sha256");
  for (const p of parts) {
    h.update(p);
    h.update("\0");
  }
  return h.digest("hex");
}

// ---- the disk cache --------------------------------------------------------------------------

interface Meta {
  sha256: string;
  bytes: number;
  compiler: string;
}

function cacheDir(backend: string): string {
  const d = join(cacheRoot(), "kernels", backend);
  mkdirSync(d, { recursive: true });
  return d;
}

/** The verified artifact path for `key`, or null (absent or corrupt: then removed). */
function cached(dir: string, key: string, ext: string): string | null {
  const art = join(dir, `${key}.${ext}`);
  const metaPath = join(dir, `${key}.json`);
  if (!existsSync(art) || !existsSync(metaPath)) return null;
  try {
    const meta = JSON.parse(readFileSync(metaPath, "utf8")) as Meta;
    const data = readFileSync(art);
    if (data.byteLength === meta.bytes && sha256(data) === meta.sha256) return art;
  } catch {
    /* unreadable meta: treated as corrupt */
  }
  compileStats.rebuiltCorrupt++;
  rmSync(art, { force: true });
  rmSync(metaPath, { force: true });
  return null;
}

/** Write `data` (already at `tmpPath`, or given) as the artifact for `key`, atomically. */
function store(dir: string, key: string, ext: string, tmpPath: string, compiler: string): string {
  const art = join(dir, `${key}.${ext}`);
  const data = readFileSync(tmpPath);
  const meta: Meta = { sha256: sha256(data), bytes: data.byteLength, compiler };
  const metaTmp = join(dir, `${key}.json.${process.pid}.tmp`);
  writeFileSync(metaTmp, JSON.stringify(meta));
  renameSync(tmpPath, art);
  renameSync(metaTmp, join(dir, `${key}.json`));
  return art;
}

// ---- per-backend compilation ----------------------------------------------------------------

/** Which compiler CPU kernels use here: a label, e.g. "cc (/usr/bin/cc)" or "tinycc (bun:ffi)". */
export function cpuCompilerLabel(): string {
  return cpuCompilerInfo()?.cc.label ?? "tinycc (bun:ffi)";
}

/** The kernels a CPU source defines: every BG_KERNEL(name). */
function kernelNames(source: string): string[] {
  return [...new Set([...source.matchAll(/BG_KERNEL\s*\(\s*([A-Za-z_]\w*)\s*\)/g)].map((m) => m[1]!))];
}

/** Last resort: compile in memory with Bun's TinyCC and hand the shim a symbol table. */
function loadTinyCC(device: Device, source: string, opts: CompileOptions): number {
  const names = kernelNames(source);
  if (names.length === 0) invalid("Program.compile", "no BG_KERNEL(name) in the source (TinyCC needs to know the kernels)");
  const work = mkdtempSync(join(tmpdir(), "bungpu-tcc-"));
  const file = join(work, `${(opts.name ?? "kernel").replace(/[^\w.-]/g, "_")}.c`);
  let fns: Map<string, number>;
  try {
    writeFileSync(file, source);
    compileStats.compilerRuns++;
    try {
      fns = tinyccCompile(file, [SHIM_DIR], names, opts.options ?? []);
    } catch (e) {
      const log = (e as Error).message.replaceAll(`${work}/`, "");
      throw new GpuError(Status.COMPILE, `compiling with Bun's TinyCC (no C compiler found) failed:\n${log}`, { backend: "compiler", call: "Program.compile" });
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  // One explicit buffer for the names and the table, so nothing moves during the call.
  const enc = new TextEncoder();
  const nameBytes = names.map((n) => enc.encode(`${n}\0`));
  const total = 16 * names.length + nameBytes.reduce((a, b) => a + b.length, 0);
  const ab = new ArrayBuffer(Math.max(8192, total));
  const base = addressOf(ab);
  const table = new BigUint64Array(ab, 0, 2 * names.length);
  let at = 16 * names.length;
  names.forEach((n, i) => {
    new Uint8Array(ab, at, nameBytes[i]!.length).set(nameBytes[i]!);
    table[2 * i] = BigInt(base + at);
    table[2 * i + 1] = BigInt(fns.get(n)!);
    at += nameBytes[i]!.length;
  });
  check(N.bg_module_load(device.handle, ImageKind.symbols, ab, 16 * names.length, slot(0)), "bg_module_load", "cpu");
  return readPtr(0);
}

function compileCpu(source: string, opts: CompileOptions): string {
  const { cc, version } = cpuCompilerInfo()!;
  const flags = ["-std=c11", "-O3", ...archFlags(cc), "-fPIC", "-shared", `-I${SHIM_DIR}`, ...(opts.options ?? [])];
  const key = sha256("cpu", process.platform, process.arch, version, flags.join(" "), source);
  const dir = cacheDir("cpu");
  const ext = process.platform === "darwin" ? "dylib" : "so";
  const hit = cached(dir, key, ext);
  if (hit) {
    compileStats.diskHits++;
    return hit;
  }
  const work = mkdtempSync(join(tmpdir(), "bungpu-cc-"));
  const file = `${(opts.name ?? "kernel").replace(/[^\w.-]/g, "_")}.c`;
  try {
    writeFileSync(join(work, file), source);
    const tmpOut = join(dir, `${key}.${process.pid}.${Date.now()}.tmp`);
    compileStats.compilerRuns++;
    const r = Bun.spawnSync([...cc.argv, ...flags, "-o", tmpOut, file], { cwd: work, stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0 || !existsSync(tmpOut)) {
      rmSync(tmpOut, { force: true });
      const log = new TextDecoder().decode(r.stderr).trim();
      throw new GpuError(Status.COMPILE, `compiling ${file} with ${cc.label} failed:\n${log}`, {
        backend: "compiler",
        call: "Program.compile",
      });
    }
    return store(dir, key, ext, tmpOut, version);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** A CUDA image: an ELF CUBIN (the usual) or NUL-terminated PTX (NVRTC older than the GPU). */
export interface CudaImage {
  kind: "cubin" | "ptx";
  /** The bytes to load (PTX with its NUL). */
  code: Uint8Array;
  /** NVRTC's log (warnings). */
  log: string;
}

function isElf(b: Uint8Array): boolean {
  return b.length >= 4 && b[0] === 0x7f && b[1] === 0x45 && b[2] === 0x4c && b[3] === 0x46;
}

/**
 * CUDA C → an image for `device`, through the shim's NVRTC path (bg_rtc_compile): a CUBIN for the
 * device's own sm_XY, PTX only where this NVRTC does not know the GPU. Cached on disk unless
 * `useCache` is false (tests that must see NVRTC run).
 */
export function compileCudaImage(device: Device, source: string, opts: CompileOptions = {}, useCache = true): CudaImage {
  const [major, minor] = device.props.computeCapability;
  let rtc = "nvrtc";
  if (N.bg_rtc_version(device.handle, slot(0), slot(1)) === 0) rtc = `nvrtc ${readI32(0)}.${readI32(1)}`;
  const options = opts.options ?? [];
  const key = sha256("cuda-image", `sm_${major}${minor}`, rtc, options.join("\n"), source);
  const dir = cacheDir("cuda");
  const hit = useCache ? cached(dir, key, "img") : null;
  if (hit) {
    compileStats.diskHits++;
    const data = new Uint8Array(readFileSync(hit));
    return isElf(data) ? { kind: "cubin", code: data, log: "" } : { kind: "ptx", code: cstr(new TextDecoder().decode(data)), log: "" };
  }
  compileStats.compilerRuns++;
  const rc = N.bg_rtc_compile(device.handle, cstr(source), cstr(opts.name ?? "kernel.cu"), cstr(options.join("\n")), 1, slot(0));
  const result = readPtr(0);
  const msg = rc !== 0 ? lastError() : "";
  if (!result) check(rc, "bg_rtc_compile", "cuda");
  try {
    check(N.bg_rtc_sizes(result, slot(0), slot(1)), "bg_rtc_sizes", "cuda");
    const codeLen = readU64(0), logLen = readU64(1);
    const code = new Uint8Array(codeLen + 1);
    const log = new Uint8Array(logLen + 1);
    check(N.bg_rtc_copy(result, code, log), "bg_rtc_copy", "cuda");
    const text = new TextDecoder().decode(log.subarray(0, logLen));
    if (rc !== 0) throw new GpuError(rc, `${msg}\n${text}`, { backend: "cuda", call: "bg_rtc_compile" });
    const bytes = code.subarray(0, codeLen);
    if (useCache) {
      const tmp = join(dir, `${key}.${process.pid}.tmp`);
      writeFileSync(tmp, bytes);
      store(dir, key, "img", tmp, rtc);
    }
    // PTX keeps its NUL terminator (code has one extra zero byte); a CUBIN is passed as is.
    return isElf(bytes) ? { kind: "cubin", code: bytes, log: text } : { kind: "ptx", code, log: text };
  } finally {
    N.bg_rtc_free(result);
  }
}

// ---- modules ------------------------------------------------------------------------------------

export class Program {
  /** Compile `source` for `device` (in its kernel language) and load it. */
  static compile(device: Device, source: KernelSource, opts: CompileOptions = {}): Module {
    if (!(device instanceof Device) || source === null || typeof source !== "object" && typeof source !== "string") invalid("Program.compile", "expected (device, source, options?)");
    opts = options("Program.compile", opts);
    const src = typeof source === "string" ? source : source[device.backend];
    if (typeof src !== "string" || src.length === 0)
      invalid("Program.compile", `no ${device.backend} source given`);
    const h = device.handle;
    let image: Uint8Array;
    let kind: number;
    let bytes: number;
    if (device.backend === "cpu" && cpuCompilerInfo() === null) {
      return new Module(device, loadTinyCC(device, src, opts), src);
    } else if (device.backend === "cpu") {
      image = cstr(compileCpu(src, opts));
      kind = ImageKind.sharedLibrary;
      bytes = image.byteLength;
    } else if (device.backend === "cuda") {
      const img = compileCudaImage(device, src, opts);
      image = img.code;
      kind = img.kind === "cubin" ? ImageKind.cubin : ImageKind.ptx;
      bytes = image.byteLength;
    } else {
      image = cstr(src);
      kind = ImageKind.mslSource;
      bytes = image.byteLength - 1;
    }
    check(N.bg_module_load(h, kind, image, bytes, slot(0)), "bg_module_load", device.backend);
    return new Module(device, readPtr(0), src);
  }
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

  /** The kernel `name`, with the types of its arguments in order. */
  kernel(name: string, signature: readonly ArgType[]): Kernel {
    if (typeof name !== "string" || !name) invalid("Module.kernel", "name must be a non-empty string");
    if (name.includes("\0")) invalid("Module.kernel", `name ${JSON.stringify(name)} contains a NUL character`);
    if (!Array.isArray(signature)) invalid("Module.kernel", "signature must be an array of argument types");
    for (const t of signature)
      if (!ARG_TYPES.has(t)) invalid("Module.kernel", `unknown argument type ${String(t)} (want buffer, i32, u32, i64, f32 or f64)`);
    if (signature.length > MAX_ARGS) invalid("Module.kernel", `${signature.length} arguments (max ${MAX_ARGS})`);
    const key = `${name}(${signature.join(",")})`;
    let k = this.#kernels.get(key);
    if (!k) {
      check(N.bg_module_get_kernel(this.handle, cstr(name), slot(0)), "bg_module_get_kernel", this.device.backend);
      k = new Kernel(this, readPtr(0), name, [...signature]);
      this.#kernels.set(key, k);
    }
    return k;
  }

  dispose(): void {
    if (!this.#live) return;
    this.#live = false;
    untrack(this);
    if (this.device.state.open) check(N.bg_module_unload(this.#handle), "bg_module_unload", this.device.backend);
  }

  [Symbol.dispose](): void {
    this.dispose();
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
  invalid(call, `${name}: argument ${i} must be ${want}, got ${typeof got === "object" && got ? got.constructor.name : String(got)}`);
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
  if (args.length !== n) invalid(call, `${name}: expected ${n} arguments (${sig.join(", ")}), got ${args.length}`);
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

export interface LaunchConfig {
  grid: Dim3;
  block: Dim3;
  args: readonly ArgValue[];
  sharedBytes?: number;
}

export class Kernel {
  readonly module: Module;
  readonly name: string;
  readonly signature: readonly ArgType[];
  /** The signature as packing codes (see sigCodes). */
  readonly codes: Uint8Array;
  readonly #handle: number;

  constructor(module: Module, handle: number, name: string, signature: ArgType[]) {
    this.module = module;
    this.#handle = handle;
    this.name = name;
    this.signature = Object.freeze(signature);
    this.codes = sigCodes(signature);
  }

  get device(): Device {
    return this.module.device;
  }

  get handle(): number {
    this.module.handle; // throws if the module or device is gone
    return this.#handle;
  }

  get maxThreadsPerBlock(): number {
    check(N.bg_kernel_max_threads(this.handle, slot(0)), "bg_kernel_max_threads", this.device.backend);
    return readI32(0);
  }

  /** Launch on `stream`: arguments checked, packed into one block, one FFI crossing. */
  launch(stream: Stream, cfg: LaunchConfig): void {
    if (stream === null || typeof stream !== "object" || cfg === null || typeof cfg !== "object") invalid("Kernel.launch", `${this.name}: expected (stream, { grid, block, args })`);
    const k = this.handle;
    const s = stream.handle;
    if (typeof s !== "number" || !(stream.device instanceof Device)) invalid("Kernel.launch", `${this.name}: expected a Stream`);
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
    const rc = N.bg_launch(k, s, gx, gy, gz, bx, by, bz, shared, ARG_PTR, this.codes.length);
    if (rc !== 0) check(rc, "bg_launch", this.device.backend);
    const st = stream.device.state;
    if (st.captures > 0) noteCaptured(st, s, this, cfg.args); // a graph replays it: keep what it uses
  }
}

export const ARG_AREA_PTR = ARG_PTR;
