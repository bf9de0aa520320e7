// Finds and opens libbungpu: BUNGPU_LIB if set; else the prebuilt library for this platform,
// accepted only if its ABI version and source hash match shim/; else a build of shim/ in the
// per-user cache with the first C compiler found; else a GpuError that lists what was tried.
// BUNGPU_DEBUG_LOADER=1 traces each step on stderr.
//
// Nothing is handed to dlopen unchecked: a truncated or corrupt library can crash the process
// inside dlopen (SIGBUS mapping past the end of a short file), before any later check runs.
// A prebuilt library must match the size and SHA-256 in prebuilt/manifest.json; a cached one
// the size and SHA-256 recorded beside it (`<lib>.json`) when it was built. A cached library
// that fails is removed and rebuilt. A cache folder that cannot be used (a file in the way, no
// permission, read-only) is replaced by a private temporary folder for this process: the shim
// and kernels still build, only without a cache.
import { dlopen } from "bun:ffi";
import { accessSync, constants, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { GpuError, Status } from "./errors";
import { findCompilers } from "./compilers";
import { compileArgs, hostTarget, libName, PREBUILT_DIR, sourceHash } from "./shimsrc";
import { ABI_VERSION, symbols, type Symbols } from "./sys";

export type Lib = ReturnType<typeof dlopen<Symbols>>;

export interface LoadInfo {
  path: string;
  source: "env" | "prebuilt" | "cache" | "built";
  hash: string;
  compiler?: string;
  steps: string[];
}

const trace = process.env["BUNGPU_DEBUG_LOADER"] ? (m: string) => console.error(`[bungpu loader] ${m}`) : null;

/** Where the per-user cache folder should be (BUNGPU_CACHE_DIR, else the platform's place). */
export function preferredCacheRoot(): string {
  const env = process.env["BUNGPU_CACHE_DIR"];
  if (env) return env;
  if (process.platform === "darwin") return join(homedir(), "Library", "Caches", "bungpu");
  const xdg = process.env["XDG_CACHE_HOME"];
  const home = homedir();
  if (xdg) return join(xdg, "bungpu");
  if (home) return join(home, ".cache", "bungpu");
  return join(tmpdir(), "bungpu-cache");
}

// The answer for each preferred folder seen: itself when usable, else why not.
const usable = new Map<string, string | null>();
let fallbackDir: string | undefined;

/** Why `dir` cannot serve as the cache (created if missing, writable), or null when it can. */
function unusable(dir: string): string | null {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK | constants.X_OK);
    // A probe write: access() says yes for root on a read-only mount.
    const probe = join(dir, `.probe.${process.pid}.${Math.random().toString(36).slice(2)}`);
    writeFileSync(probe, "");
    rmSync(probe, { force: true });
    return null;
  } catch (e) {
    return (e as Error).message.split("\n")[0] ?? String(e);
  }
}

/** A private temporary folder, removed when the process exits: the cache when there is none. */
export function fallbackCacheDir(): string {
  if (fallbackDir) return fallbackDir;
  const dir = mkdtempSync(join(tmpdir(), "bungpu-nocache-"));
  fallbackDir = dir;
  process.on("exit", () => {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      /* best effort */
    }
  });
  return dir;
}

/**
 * The per-user cache folder for the shim and for compiled kernels: the preferred one when it
 * can be created and written, else (with one note under BUNGPU_DEBUG_LOADER) a private
 * temporary folder for this process, so an unusable cache only costs the caching.
 */
export function cacheRoot(): string {
  const want = preferredCacheRoot();
  let why = usable.get(want);
  if (why === undefined) {
    why = unusable(want);
    usable.set(want, why);
    if (why) trace?.(`cache folder ${want} unusable (${why}); compiling without a cache`);
  }
  return why ? fallbackCacheDir() : want;
}

/** Why the cache folder is not used (null when it is), for diagnostics. */
export function cacheProblem(): string | null {
  cacheRoot();
  return usable.get(preferredCacheRoot()) ?? null;
}

function sha256File(data: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(data).digest("hex");
}

/** The record written beside a cached library: `<lib>.json`. */
interface LibRecord {
  bytes: number;
  sha256: string;
}

/**
 * Why the file at `path` must not be opened (its size or SHA-256 is not `want`'s), or null.
 * Read before dlopen, so a short or damaged file is never mapped.
 */
function integrityProblem(path: string, want: LibRecord | null): string | null {
  if (!want || typeof want.bytes !== "number" || typeof want.sha256 !== "string") return "no size/sha256 record";
  let data: Uint8Array;
  try {
    data = readFileSync(path);
  } catch (e) {
    return `unreadable: ${(e as Error).message.split("\n")[0]}`;
  }
  if (data.byteLength !== want.bytes) return `corrupt: ${data.byteLength} bytes, recorded ${want.bytes}`;
  if (sha256File(data) !== want.sha256) return "corrupt: SHA-256 differs from the record";
  return null;
}

function readRecord(path: string): LibRecord | null {
  try {
    const r = JSON.parse(readFileSync(path, "utf8")) as LibRecord;
    return r && typeof r === "object" ? r : null;
  } catch {
    return null;
  }
}

/** The manifest's record for the prebuilt library of `target`, or null when there is no manifest. */
function prebuiltRecord(target: string): LibRecord | null | "none" {
  const file = join(PREBUILT_DIR, "manifest.json");
  if (!existsSync(file)) return "none";
  try {
    const m = JSON.parse(readFileSync(file, "utf8")) as { targets?: Record<string, LibRecord> };
    return m.targets?.[target] ?? null;
  } catch {
    return null;
  }
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

/**
 * Build shim/ into `out` with the first compiler that succeeds, and record its size and SHA-256
 * in `<out>.json` (record first, then the library, each renamed into place atomically).
 */
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
      const data = readFileSync(tmp);
      const rec: LibRecord = { bytes: data.byteLength, sha256: sha256File(data) };
      const recTmp = `${out}.json.${process.pid}.${Date.now()}.tmp`;
      try {
        writeFileSync(recTmp, JSON.stringify(rec));
        renameSync(recTmp, `${out}.json`);
      } catch (e) {
        // Without its record the library is used now and rebuilt by the next process.
        rmSync(recTmp, { force: true });
        steps.push(`cannot record the build's size and SHA-256: ${(e as Error).message.split("\n")[0]}`);
      }
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

  const envPath = process.env["BUNGPU_LIB"];
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
  let r1: Lib | string;
  if (process.env["BUNGPU_NO_PREBUILT"]) r1 = "skipped (BUNGPU_NO_PREBUILT)";
  else if (!existsSync(prebuilt)) r1 = "not found";
  else {
    const rec = prebuiltRecord(target);
    const bad = rec === "none" ? null : integrityProblem(prebuilt, rec);
    r1 = bad ?? tryOpen(prebuilt, hash);
  }
  if (typeof r1 !== "string") {
    note(`prebuilt ${target}: opened`);
    loaded = { lib: r1, info: { path: prebuilt, source: "prebuilt", hash, steps } };
    return loaded;
  }
  note(`prebuilt ${target}/${name}: ${r1}`);

  const root = cacheRoot();
  const problem = cacheProblem();
  if (problem) steps.push(`cache folder ${preferredCacheRoot()} unusable (${problem}): using a temporary folder`);
  let dir = join(root, "shim", `${target}-${hash.slice(0, 16)}`);
  let cached = join(dir, name);
  let r2: Lib | string = "not found";
  if (existsSync(cached)) {
    const bad = integrityProblem(cached, readRecord(`${cached}.json`));
    // A bad library is never mapped; the build below replaces it (renamed over it atomically, not
    // removed first: another process may be renaming its fresh build into place right now).
    r2 = bad ?? tryOpen(cached, hash);
  }
  if (typeof r2 !== "string") {
    note(`cache ${cached}: opened`);
    loaded = { lib: r2, info: { path: cached, source: "cache", hash, steps } };
    return loaded;
  }
  note(`cache ${cached}: ${r2}`);

  try {
    mkdirSync(dir, { recursive: true });
  } catch (e) {
    note(`cache ${dir}: ${(e as Error).message.split("\n")[0]}: building into a temporary folder`);
    dir = join(fallbackCacheDir(), "shim", `${target}-${hash.slice(0, 16)}`);
    cached = join(dir, name);
    mkdirSync(dir, { recursive: true });
  }
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
