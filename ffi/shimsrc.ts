// What libbungpu is built from, its source hash, and the compiler command lines. Shared by the
// loader (cache build) and by `bun run build:shim` (prebuilt cross-compiles), so both hash and
// compile exactly the same files the same way.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

export const SHIM_DIR = join(import.meta.dir, "..", "shim");
export const PREBUILT_DIR = join(import.meta.dir, "prebuilt");

/** Every .c and .h of the library (tests excluded), sorted, relative to shim/. */
export function shimFiles(): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) {
        if (e.name !== "test") walk(p);
      } else if (/\.(c|h)$/.test(e.name)) out.push(relative(SHIM_DIR, p).split("\\").join("/"));
    }
  };
  walk(SHIM_DIR);
  return out.sort();
}

/** The .c files compiled into the library. */
export function shimSources(): string[] {
  return shimFiles().filter((f) => f.endsWith(".c"));
}

let cachedHash: string | undefined;
/** sha-256 over each file's path and bytes: what bg_source_hash() must report. */
export function sourceHash(): string {
  if (cachedHash) return cachedHash;
  const h = new Bun.CryptoHasher("sha256");
  for (const f of shimFiles()) {
    h.update(f);
    h.update("\0");
    h.update(readFileSync(join(SHIM_DIR, f)));
    h.update("\0");
  }
  cachedHash = h.digest("hex");
  return cachedHash;
}

export type Target = "linux-x64" | "linux-arm64" | "darwin-arm64" | "darwin-x64";
export const TARGETS: Target[] = ["linux-x64", "linux-arm64", "darwin-arm64", "darwin-x64"];
export const ZIG_TRIPLE: Record<Target, string> = {
  "linux-x64": "x86_64-linux-gnu.2.17",
  "linux-arm64": "aarch64-linux-gnu.2.17",
  "darwin-arm64": "aarch64-macos.11.0",
  "darwin-x64": "x86_64-macos.11.0",
};

export function hostTarget(): string {
  return `${process.platform}-${process.arch}`;
}

export function libName(target: string): string {
  return target.startsWith("darwin") ? "libbungpu.dylib" : "libbungpu.so";
}

/**
 * The optimization level of a cache build: -O2, or BUNGPU_SHIM_OPT (0 to 3). The loader's own
 * tests build the library about ten times and set 0 (a third of the compile time); a build at
 * another level than 2 is cached apart (shimLevelTag), so it never stands in for the default one.
 */
export function shimLevel(): string {
  const v = process.env["BUNGPU_SHIM_OPT"];
  return v === "0" || v === "1" || v === "3" ? v : "2";
}
export const shimLevelTag = (): string => (shimLevel() === "2" ? "" : `-O${shimLevel()}`);

/** The flags every source file is compiled with. */
function cflags(hash: string, level: string): string[] {
  return ["-std=c11", `-O${level}`, "-fPIC", "-fvisibility=hidden", "-Wall", `-DBG_SOURCE_HASH="${hash}"`, `-I${SHIM_DIR}`];
}
/** What the library links with. */
function libs(target: string): string[] {
  return ["-lpthread", "-lm", ...(target.startsWith("darwin") ? ["-Wl,-install_name,@rpath/libbungpu.dylib"] : ["-ldl"])];
}

/** Compiler arguments (after the compiler itself) that build the library into `out` in one run (-O2 unless `level`). */
export function compileArgs(out: string, target: string, hash = sourceHash(), level = "2"): string[] {
  return [...cflags(hash, level), "-shared", ...shimSources().map((f) => join(SHIM_DIR, f)), "-o", out, ...libs(target)];
}

/** The same build in steps, so that it can use every core: each source to an object, then one link. */
export function objectArgs(source: string, obj: string, hash = sourceHash(), level = "2"): string[] {
  return [...cflags(hash, level), "-c", join(SHIM_DIR, source), "-o", obj];
}
export function linkArgs(objs: readonly string[], out: string, target: string): string[] {
  return ["-shared", ...objs, "-o", out, ...libs(target)];
}
