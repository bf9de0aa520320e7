// CPU kernels: C (with shim/bungpu_cpu.h) compiled to a shared library by the first C compiler
// found, cached on disk; with no C compiler, compiled in memory by Bun's TinyCC and handed to the
// shim as a symbol table.
import { existsSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { findCompilers, type CCompiler } from "../../ffi/compilers";
import { cacheRename, cacheRoot, cacheWrite, cacheWriteFile, privateTemp, tempName } from "../../ffi/load";
import { ImageKind, addressOf, cstr } from "../../ffi/result";
import { SHIM_DIR } from "../../ffi/shimsrc";
import { Status } from "../../ffi/constants";
import { GpuError, invalid } from "../errors";
import { cacheDir, cached, compileStats, sha256, store } from "./cache";
import { tinyccCompile } from "./tinycc";
import type { CompileOptions, LoadableImage, TieredImage } from "./types";

const TINYCC = "tinycc (bun:ffi)";

let cpuCompiler: { cc: CCompiler; version: string } | null | undefined;
/** The C compiler for CPU kernels, or null when only Bun's TinyCC is left (BUNGPU_CC=tinycc forces it). */
function cpuCompilerInfo(): { cc: CCompiler; version: string } | null {
  if (cpuCompiler !== undefined) return cpuCompiler;
  const cc = process.env["BUNGPU_CC"] === "tinycc" ? undefined : findCompilers().list[0];
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
      cacheWrite(() => {
        const at = join(cacheRoot(), VERSIONS_FILE);
        const tmp = tempName(at);
        try {
          cacheWriteFile(tmp, JSON.stringify(next));
          cacheRename(tmp, at);
        } finally {
          rmSync(tmp, { force: true });
        }
      });
    } catch {
      /* not even the private folder: the next start spawns again */
    }
  }
  return version;
}

function archFlags(cc: CCompiler): string[] {
  if (process.env["BUNGPU_NO_NATIVE_ARCH"]) return [];
  if (cc.kind === "zig") return ["-mcpu=native"];
  return process.arch === "arm64" ? ["-mcpu=native"] : ["-march=native"];
}

/** Which compiler CPU kernels use here: a label, e.g. "cc (/usr/bin/cc)" or "tinycc (bun:ffi)". */
export function cpuCompilerLabel(): string {
  return cpuCompilerInfo()?.cc.label ?? TINYCC;
}

/** What identifies the CPU kernels' compiler: its label, version line and architecture flags. */
export function cpuCompilerIdentity(): string {
  const info = cpuCompilerInfo();
  return info ? `${info.cc.label}|${info.version}|${archFlags(info.cc).join(" ")}` : TINYCC;
}

/** The kernels a CPU source defines: every BG_KERNEL(name). */
function kernelNames(source: string): string[] {
  return [...new Set([...source.matchAll(/BG_KERNEL\s*\(\s*([A-Za-z_]\w*)\s*\)/g)].map((m) => m[1]!))];
}

/**
 * The C file a kernel named `name` is compiled from: its name made safe for a file system and
 * bounded (a kernel named after a rank-120 tensor, or a long Variable name, was ENAMETOOLONG):
 * past 80 characters, the first 64 and a hash of the whole.
 */
export function sourceFileName(name: string | undefined): string {
  const safe = (name ?? "kernel").replace(/[^\w.-]/g, "_");
  return `${safe.length <= 80 ? safe : `${safe.slice(0, 64)}_${sha256(safe).slice(0, 12)}`}.c`;
}

/** Last resort: compile in memory with Bun's TinyCC; the image is a symbol table for the shim. */
function tinyccImage(source: string, opts: CompileOptions): LoadableImage {
  const names = kernelNames(source);
  if (names.length === 0) invalid("Program.compile", "no BG_KERNEL(name) in the source (TinyCC needs to know the kernels)");
  const work = privateTemp("tcc");
  const file = join(work, sourceFileName(opts.name));
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
  // One explicit buffer for the names and the table, so nothing moves during the load.
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
  return { kind: ImageKind.symbols, image: ab, bytes: 16 * names.length };
}

/** One shared library to build: its flags, cache key and where it goes. */
interface LibraryJob {
  cc: CCompiler;
  version: string;
  flags: string[];
  key: string;
  ext: string;
  file: string;
}

/** The optimization level of a build: "-O3" (optimized) or "-O0" (quick: the first tier). */
type Level = "-O3" | "-O0";

function libraryJob(cc: CCompiler, version: string, source: string, opts: CompileOptions, level: Level): LibraryJob {
  const flags = ["-std=c11", level, ...archFlags(cc), "-fPIC", "-shared", `-I${SHIM_DIR}`, ...(opts.options ?? [])];
  const key = sha256("cpu", process.platform, process.arch, version, flags.join(" "), source);
  return { cc, version, flags, key, ext: process.platform === "darwin" ? "dylib" : "so", file: sourceFileName(opts.name) };
}

function compileFailed(job: LibraryJob, stderr: Uint8Array | string): GpuError {
  const log = (typeof stderr === "string" ? stderr : new TextDecoder().decode(stderr)).trim();
  return new GpuError(Status.COMPILE, `compiling ${job.file} with ${job.cc.label} failed:\n${log}`, { backend: "compiler", call: "Program.compile" });
}

/** The path of the shared library `job` builds from `source` (cached on disk). */
function sharedLibrary(job: LibraryJob, source: string): string {
  const hit = cached("cpu", job.key, job.ext);
  if (hit) {
    compileStats.diskHits++;
    return hit;
  }
  // The compiler writes in a private folder, never into the cache: a full or read-only cache then
  // fails in store(), which falls back, not as a compile error.
  const work = privateTemp("cc");
  try {
    writeFileSync(join(work, job.file), source);
    const lib = join(work, `lib.${job.ext}`);
    compileStats.compilerRuns++;
    const r = Bun.spawnSync([...job.cc.argv, ...job.flags, "-o", lib, job.file], { cwd: work, stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0 || !existsSync(lib)) throw compileFailed(job, r.stderr);
    return store("cpu", job.key, job.ext, lib, job.version);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

// Optimized builds in the background, one at a time (each is one compiler process, most of a
// core for a second or more: two would take the cores a server answers on). A build is a shell
// running the compiler in a private folder, then copying the library to `<key>.<ext>.built` in
// the cache folder (through a `.part` file renamed when complete, so a file under that name is
// whole), or its log to `<key>.err`. Where the cache cannot take them (read-only, full), both stay
// in the private folder and this process adopts them from there when the shell exits (a process
// that ended first loses the upgrade; the next start sweeps the folder). The process is not waited
// for: a program that ends first leaves it to finish, and the next process to open the same key
// adopts its library instead of compiling. A build is noticed finished by the event loop (its
// exit) or by pollBuilds(), which plans call as they run, so a program that never yields to the
// event loop still gets its optimized kernels.
const BUILD_SCRIPT =
  'w="$1"; out="$2"; part="$3"; err="$4"; file="$5"; shift 5; cd "$w" || exit 1; ' +
  'if "$@" -o lib "$file" 2>log; then ' +
  'if cp lib "$part" 2>/dev/null && mv -f "$part" "$out" 2>/dev/null; then cd /; rm -rf "$w"; exit 0; fi; rm -f "$part"; exit 3; fi; ' +
  'if cp log "$part" 2>/dev/null && mv -f "$part" "$err" 2>/dev/null; then cd /; rm -rf "$w"; exit 2; fi; rm -f "$part"; exit 4';

interface Build {
  job: LibraryJob;
  source: string;
  /** Where the shell puts the library and the log in the cache (set when it starts). */
  out: string;
  err: string;
  /** The shell's private folder: the library or log stays there when the cache cannot take it. */
  work: string | null;
  settled: boolean;
  /** Called once, where the build is noticed finished: the library's path, or the error. */
  done: (result: string | Error) => void;
}
const queued: Build[] = [];
let running: Build | null = null;
let lastPoll = 0;

/** Settle `b` if its library (or its error) is there; true when settled. */
function finish(b: Build, exited = false): boolean {
  if (b.settled) return true;
  const { job } = b;
  let result: string | Error;
  try {
    const hit = b.out ? adopt(job, b.out) : cached("cpu", job.key, job.ext);
    if (hit) result = hit;
    else if (b.err && existsSync(b.err)) {
      const log = readFileSync(b.err, "utf8");
      rmSync(b.err, { force: true });
      result = compileFailed(job, log);
    } else if (exited && b.work && existsSync(join(b.work, "lib"))) result = store("cpu", job.key, job.ext, join(b.work, "lib"), job.version);
    else if (exited && b.work && existsSync(join(b.work, "log"))) result = compileFailed(job, readFileSync(join(b.work, "log"), "utf8"));
    else if (exited) result = compileFailed(job, "the compiler process ended without a library or a log");
    else return false;
  } catch (e) {
    result = e instanceof Error ? e : new Error(String(e));
  }
  if (exited && b.work) rmSync(b.work, { recursive: true, force: true });
  b.settled = true;
  if (running === b) running = null;
  b.done(result);
  startNext();
  return true;
}

/**
 * The verified library of `job` in the cache, adopting a background build's finished library
 * (`out`: of this process or of one that ended before it) first; null when neither is there.
 */
function adopt(job: LibraryJob, out: string): string | null {
  const hit = cached("cpu", job.key, job.ext);
  if (hit) return hit;
  if (!existsSync(out)) return null;
  try {
    const art = store("cpu", job.key, job.ext, out, job.version);
    rmSync(out, { force: true });
    return art;
  } catch {
    return cached("cpu", job.key, job.ext); // another process adopted it meanwhile
  }
}

function startNext(): void {
  while (!running && queued.length) {
    const b = queued.shift()!;
    running = b;
    const { job } = b;
    try {
      // Asked now, not when queued: the process may have moved to its private folder meanwhile.
      const dir = cacheDir("cpu");
      b.out = builtPath(dir, job);
      b.err = join(dir, `${job.key}.err`);
      rmSync(b.err, { recursive: true, force: true }); // a failure an earlier process left: try again
      if (finish(b)) continue; // built already (this process or one before it)
      b.work = privateTemp("cc");
      writeFileSync(join(b.work, job.file), b.source);
      compileStats.backgroundRuns++;
      const part = `${b.out}.${process.pid}.${Date.now()}.part`;
      const p = Bun.spawn(["/bin/sh", "-c", BUILD_SCRIPT, "sh", b.work, b.out, part, b.err, job.file, ...job.cc.argv, ...job.flags], { stdin: "ignore", stdout: "ignore", stderr: "ignore" });
      writeFileSync(join(b.work, "sh.pid"), String(p.pid)); // the sweep leaves a running build's folder alone
      p.unref();
      // Never throws into the event loop: finish() turns every failure into b.done(error).
      const exited = () => {
        try {
          finish(b, true);
        } catch {
          /* settled already */
        }
      };
      void p.exited.then(exited, exited);
    } catch (e) {
      if (b.work) rmSync(b.work, { recursive: true, force: true });
      b.work = null;
      if (b.settled) continue;
      b.settled = true;
      running = null;
      b.done(e instanceof Error ? e : new Error(String(e)));
    }
  }
}

/** Notice a finished background build (cheap: at most one file check a millisecond). */
export function pollBuilds(): void {
  if (!running) return;
  const now = performance.now();
  if (now - lastPoll < 1) return;
  lastPoll = now;
  finish(running);
}

const builtPath = (dir: string, job: LibraryJob) => join(dir, `${job.key}.${job.ext}.built`);

/** Build `job`'s library from `source` in the background (see above); `done` gets its path or the error. */
function sharedLibraryInBackground(job: LibraryJob, source: string, done: (result: string | Error) => void): void {
  queued.push({ job, source, out: "", err: "", work: null, settled: false, done });
  startNext();
}

function libraryImage(path: string): LoadableImage {
  const image = cstr(path);
  return { kind: ImageKind.sharedLibrary, image, bytes: image.byteLength };
}

/** C source → what the shim loads: a shared library's path, or TinyCC's symbol table. */
export function compileCpu(source: string, opts: CompileOptions): LoadableImage {
  const info = cpuCompilerInfo();
  if (!info) return tinyccImage(source, opts);
  return libraryImage(sharedLibrary(libraryJob(info.cc, info.version, source, opts, "-O3"), source));
}

/**
 * How CPU kernels are built, from BUNGPU_TIER: "tiered" (the default: an unoptimized build at
 * once, the optimized one in the background), "optimized" (only the optimized build, waited
 * for), "quick" (only the unoptimized build: for checking that the two agree, and debugging).
 */
export function cpuTier(): "tiered" | "optimized" | "quick" {
  const t = process.env["BUNGPU_TIER"];
  return t === "optimized" || t === "quick" ? t : "tiered";
}

/**
 * C source → a quick build to load now (-O0: about a tenth of -O3's compile time) and the
 * optimized build (-O3), compiled in the background, to swap in when ready; the optimized build
 * alone where it is cached already. The source must give the same results at both levels: no
 * implicit floating-point contraction (the tensor code generator compiles with -ffp-contract=off
 * and fuses explicitly). Null where tiering is off: BUNGPU_TIER is "optimized", or there is only
 * TinyCC. With BUNGPU_TIER=quick the optimized build is not made (`done` gets NOT_SUPPORTED).
 */
export function compileCpuTiered(source: string, opts: CompileOptions): TieredImage | null {
  const info = cpuCompilerInfo();
  const tier = cpuTier();
  if (!info || tier === "optimized") return null;
  const optimized = libraryJob(info.cc, info.version, source, opts, "-O3");
  const hit = tier === "tiered" ? adopt(optimized, builtPath(cacheDir("cpu"), optimized)) : null;
  if (hit) {
    compileStats.diskHits++;
    return { image: libraryImage(hit) }; // verified once, here (Program.compile would verify it again)
  }
  return {
    image: libraryImage(sharedLibrary(libraryJob(info.cc, info.version, source, opts, "-O0"), source)),
    whenOptimized: (done) => {
      if (tier === "tiered") sharedLibraryInBackground(optimized, source, (r) => done(typeof r === "string" ? libraryImage(r) : r));
      else done(new GpuError(Status.NOT_SUPPORTED, "BUNGPU_TIER=quick: kernels keep their quick build", { backend: "compiler", call: "ExecutionPlan.optimized" }));
    },
  };
}
