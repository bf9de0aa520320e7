// Finds and opens libbungpu: BUNGPU_LIB if set; else the prebuilt library for this platform,
// accepted only if its ABI version and source hash match shim/; else a build of shim/ in the
// per-user cache with the first C compiler found; else a GpuError that lists what was tried.
// BUNGPU_DEBUG_LOADER=1 traces each step on stderr.
import { dlopen } from "bun:ffi";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { GpuError, Status } from "../src/errors";
import { findCompilers } from "./compilers";
import { compileArgs, hostTarget, libName, PREBUILT_DIR, sourceHash } from "./shimsrc";
import { ABI_VERSION, symbols, type Symbols } from "./symbols";

export type Lib = ReturnType<typeof dlopen<Symbols>>;

export interface LoadInfo {
  path: string;
  source: "env" | "prebuilt" | "cache" | "built";
  hash: string;
  compiler?: string;
  steps: string[];
}

const trace = process.env.BUNGPU_DEBUG_LOADER ? (m: string) => console.error(`[bungpu loader] ${m}`) : null;

/** The per-user cache folder for the shim and for compiled kernels. */
export function cacheRoot(): string {
  const env = process.env.BUNGPU_CACHE_DIR;
  if (env) return env;
  if (process.platform === "darwin") return join(homedir(), "Library", "Caches", "bungpu");
  const xdg = process.env.XDG_CACHE_HOME;
  const home = homedir();
  if (xdg) return join(xdg, "bungpu");
  if (home) return join(home, ".cache", "bungpu");
  return join(tmpdir(), "bungpu-cache");
}

function readHash(lib: Lib): string {
  const buf = new Uint8Array(128);
  const rc = lib.symbols.bg_source_hash(buf, 128);
  if (rc !== 0) return "?";
  const end = buf.indexOf(0);
  return new TextDecoder().decode(buf.subarray(0, end < 0 ? 128 : end));
}

/** Open `path` and check it; returns the library or a reason it was refused. */
function tryOpen(path: string, wantHash: string | null): Lib | string {
  if (!existsSync(path)) return "not found";
  let lib: Lib;
  try {
    lib = dlopen(path, symbols);
  } catch (e) {
    return `dlopen failed: ${(e as Error).message.split("\n")[0]}`;
  }
  const abi = lib.symbols.bg_abi_version();
  if (abi !== ABI_VERSION) {
    lib.close();
    return `ABI version ${abi}, want ${ABI_VERSION}`;
  }
  if (wantHash) {
    const got = readHash(lib);
    if (got !== wantHash) {
      lib.close();
      return `stale: source hash ${got.slice(0, 12)}…, shim/ is ${wantHash.slice(0, 12)}…`;
    }
  }
  return lib;
}

/** Build shim/ into `out` with the first compiler that succeeds. */
export function buildShim(out: string, steps: string[]): string | null {
  const { list, tried } = findCompilers();
  if (list.length === 0) {
    steps.push(`no C compiler: looked for ${tried.join(", ")}`);
    return null;
  }
  const target = hostTarget();
  const tmp = `${out}.${process.pid}.${Date.now()}.tmp`;
  for (const cc of list) {
    const args = compileArgs(tmp, target);
    const r = Bun.spawnSync([...cc.argv, ...args], { stdout: "pipe", stderr: "pipe" });
    if (r.exitCode === 0 && existsSync(tmp)) {
      renameSync(tmp, out); // atomic: a reader never sees half a library
      steps.push(`built with ${cc.label}`);
      return cc.label;
    }
    rmSync(tmp, { force: true });
    const err = new TextDecoder().decode(r.stderr).trim().split("\n").slice(0, 3).join(" / ");
    steps.push(`${cc.label} failed: ${err || `exit ${r.exitCode}`}`);
  }
  return null;
}

let loaded: { lib: Lib; info: LoadInfo } | undefined;

export function load(): { lib: Lib; info: LoadInfo } {
  if (loaded) return loaded;
  const steps: string[] = [];
  const note = (s: string) => {
    steps.push(s);
    trace?.(s);
  };
  const target = hostTarget();
  const name = libName(target);

  const envPath = process.env.BUNGPU_LIB;
  if (envPath) {
    const r = tryOpen(envPath, null);
    if (typeof r !== "string") {
      note(`BUNGPU_LIB=${envPath}: opened`);
      loaded = { lib: r, info: { path: envPath, source: "env", hash: readHash(r), steps } };
      return loaded;
    }
    note(`BUNGPU_LIB=${envPath}: ${r}`);
  }

  const hash = sourceHash();
  const prebuilt = join(PREBUILT_DIR, target, name);
  const r1 = process.env.BUNGPU_NO_PREBUILT ? "skipped (BUNGPU_NO_PREBUILT)" : tryOpen(prebuilt, hash);
  if (typeof r1 !== "string") {
    note(`prebuilt ${target}: opened`);
    loaded = { lib: r1, info: { path: prebuilt, source: "prebuilt", hash, steps } };
    return loaded;
  }
  note(`prebuilt ${target}/${name}: ${r1}`);

  const dir = join(cacheRoot(), "shim", `${target}-${hash.slice(0, 16)}`);
  const cached = join(dir, name);
  const r2 = tryOpen(cached, hash);
  if (typeof r2 !== "string") {
    note(`cache ${cached}: opened`);
    loaded = { lib: r2, info: { path: cached, source: "cache", hash, steps } };
    return loaded;
  }
  note(`cache ${cached}: ${r2}`);

  mkdirSync(dir, { recursive: true });
  const compiler = buildShim(cached, steps);
  if (compiler) {
    trace?.(steps[steps.length - 1]!);
    const r3 = tryOpen(cached, hash);
    if (typeof r3 !== "string") {
      loaded = { lib: r3, info: { path: cached, source: "built", hash, compiler, steps } };
      return loaded;
    }
    note(`built library refused: ${r3}`);
  }
  throw new GpuError(
    Status.BACKEND_UNAVAILABLE,
    `cannot load libbungpu for ${target}. Tried:\n  - ${steps.join("\n  - ")}\n` +
      `Install a C compiler (cc, clang, gcc or zig), set BUNGPU_CC, or point BUNGPU_LIB at a built library.`,
    { backend: "loader", call: "load" },
  );
}

export function lib(): Lib {
  return load().lib;
}
