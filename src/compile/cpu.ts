// CPU kernels: C (with shim/bungpu_cpu.h) compiled to a shared library by the first C compiler
// found, cached on disk; with no C compiler, compiled in memory by Bun's TinyCC and handed to the
// shim as a symbol table.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findCompilers, type CCompiler } from "../../ffi/compilers";
import { cacheRoot } from "../../ffi/load";
import { ImageKind, addressOf, cstr } from "../../ffi/result";
import { SHIM_DIR } from "../../ffi/shimsrc";
import { Status } from "../../ffi/constants";
import { GpuError, invalid } from "../errors";
import { cacheDir, cached, compileStats, sha256, store } from "./cache";
import { tinyccCompile } from "./tinycc";
import type { CompileOptions, LoadableImage } from "./types";

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
  const work = mkdtempSync(join(tmpdir(), "bungpu-tcc-"));
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

/** The path of the shared library built from `source` (cached on disk). */
function sharedLibrary(cc: CCompiler, version: string, source: string, opts: CompileOptions): string {
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
  const file = sourceFileName(opts.name);
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

/** C source → what the shim loads: a shared library's path, or TinyCC's symbol table. */
export function compileCpu(source: string, opts: CompileOptions): LoadableImage {
  const info = cpuCompilerInfo();
  if (!info) return tinyccImage(source, opts);
  const image = cstr(sharedLibrary(info.cc, info.version, source, opts));
  return { kind: ImageKind.sharedLibrary, image, bytes: image.byteLength };
}
