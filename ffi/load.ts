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
// permission, read-only, full: at the start or at any later write) is replaced by a private
// temporary folder for this process, with one warning line: the shim, kernels and plans still
// build, only without a cache (cacheRoot, cacheWrite below).
import { dlopen } from "bun:ffi";
import { accessSync, constants, copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, homedir, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { GpuError, Status } from "./errors";
import { findCompilers } from "./compilers";
import { compileArgs, hostTarget, libName, linkArgs, objectArgs, PREBUILT_DIR, shimLevel, shimLevelTag, shimSources, sourceHash } from "./shimsrc";
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

// ---- the cache folder, and the private folder that replaces it ---------------------------------
//
// One place decides where the shim, kernels and plans are cached and what happens when that
// folder fails. A write fault (a file or folder in the way, read-only, no permission, a full disk)
// switches the whole process to a private folder under the OS tmpdir, with one warning line on
// stderr, and the write is retried there (cacheWrite): only the caching is lost. Leftovers of a
// killed process (temporary files in the cache, compiler folders in the private folder) are
// removed by the next process that opens the cache (sweep).

/** Write errors that mean "this cache folder cannot take it", in words (a raw code is never shown). */
const FAULTS: Record<string, string> = {
  EEXIST: "a file is in the way",
  ENOTDIR: "a file is in the way",
  EISDIR: "a folder is in the way",
  EROFS: "read-only file system",
  EACCES: "no permission",
  EPERM: "no permission",
  ENOSPC: "no space left on the device",
  EDQUOT: "disk quota exceeded",
  EMLINK: "too many links",
  ENAMETOOLONG: "a name too long for the file system",
};

/** Whether `e` is a write fault of the cache folder (see FAULTS). */
export function isCacheFault(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && code in FAULTS && Object.hasOwn(FAULTS, code);
}

function faultWords(e: unknown): string {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && Object.hasOwn(FAULTS, code) ? FAULTS[code]! : ((e as Error)?.message ?? String(e)).split("\n")[0]!;
}

// The answer for each preferred folder seen: null when usable, else why not (in words).
const usable = new Map<string, string | null>();
let fallbackDir: string | undefined;
/** Why this process left the preferred folder (null while it uses it). */
let leftBecause: string | null = null;
let warned = false;

/**
 * A fault injected by tests (BUNGPU_TEST_CACHE_FAULT=CODE or CODE:path-part): a write under the
 * cache folder (never the private one) whose path contains path-part fails with CODE, as a
 * read-only folder (EROFS, EACCES: root ignores permission bits) or a full disk (ENOSPC) would.
 */
function injected(path: string, op: "mkdir" | "write" | "rename" | "probe"): void {
  const spec = process.env["BUNGPU_TEST_CACHE_FAULT"];
  if (!spec) return;
  const [code, part] = [spec.split(":")[0]!, spec.split(":").slice(1).join(":")];
  if (fallbackDir && path.startsWith(fallbackDir)) return;
  if (path.startsWith(privateRoot())) return;
  if (part && !path.includes(part)) return;
  if (code === "ENOSPC" && (op === "mkdir" || op === "probe")) return; // a full disk still makes empty entries
  throw Object.assign(new Error(`${code}: injected fault, ${op} '${path}'`), { code });
}

/** mkdir -p under the cache folder. */
export function cacheMkdir(dir: string): void {
  injected(dir, "mkdir");
  mkdirSync(dir, { recursive: true });
}

/** Write a file under the cache folder. */
export function cacheWriteFile(path: string, data: string | Uint8Array): void {
  injected(path, "write");
  writeFileSync(path, data);
}

/** Rename within the cache folder (atomic: readers see the old entry or the new one). */
export function cacheRename(from: string, to: string): void {
  injected(to, "rename");
  renameSync(from, to);
}

/** A name for a temporary file beside `path`: `<path>.<pid>.<random>.tmp` (the pid lets the sweep tell a killed writer's file). */
export function tempName(path: string): string {
  return `${path}.${process.pid}.${Math.random().toString(36).slice(2, 10)}.tmp`;
}

/** Why `dir` cannot serve as the cache (created if missing, writable), or null when it can. */
function unusable(dir: string): string | null {
  try {
    injected(dir, "probe");
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK | constants.X_OK);
    // A probe write: access() says yes for root on a read-only mount.
    const probe = join(dir, `.probe.${process.pid}.${Math.random().toString(36).slice(2)}`);
    writeFileSync(probe, "");
    rmSync(probe, { force: true });
    return null;
  } catch (e) {
    return faultWords(e);
  }
}

let privateRootDir: string | undefined;
/**
 * This user's private folder under the OS tmpdir (`bungpu-<uid>`, mode 0700, checked to be a
 * folder of this user and not a link), where compilers work and the no-cache fallback lives; the
 * tmpdir itself when that cannot be had.
 */
export function privateRoot(): string {
  if (privateRootDir) return privateRootDir;
  const uid = typeof process.getuid === "function" ? process.getuid() : -1;
  const dir = join(tmpdir(), `bungpu-${uid >= 0 ? uid : "user"}`);
  try {
    mkdirSync(dir, { mode: 0o700, recursive: true });
    const st = lstatSync(dir);
    if (!st.isDirectory() || (uid >= 0 && st.uid !== uid) || (st.mode & 0o077) !== 0) throw new Error("not private");
    return (privateRootDir = dir);
  } catch {
    return (privateRootDir = tmpdir());
  }
}

/** A fresh folder for this process in the private folder: `<kind>-<pid>-XXXXXX` (the sweep removes it once the process is gone). */
export function privateTemp(kind: "cc" | "tcc" | "nocache"): string {
  const root = privateRoot();
  return mkdtempSync(join(root, `${root === tmpdir() ? "bungpu-" : ""}${kind}-${process.pid}-`));
}

/** The private folder that replaces the cache for this process, removed when it exits. */
export function fallbackCacheDir(): string {
  if (fallbackDir) return fallbackDir;
  const dir = privateTemp("nocache");
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

/** Switch this process to the private folder (once, with one warning line); returns it. */
function leaveCache(why: string): string {
  const dir = fallbackCacheDir();
  if (!leftBecause) leftBecause = why;
  if (!warned) {
    warned = true;
    console.error(`bungpu: the cache folder ${preferredCacheRoot()} cannot be used (${why}); this process builds without a cache, in ${dir}`);
  }
  trace?.(`cache folder ${preferredCacheRoot()} unusable (${why}); compiling without a cache`);
  return dir;
}

/**
 * The per-user cache folder for the shim, kernels and plans: the preferred one when it can be
 * created and written, else (with one warning line) a private temporary folder for this process,
 * so an unusable cache only costs the caching. Also after a write fault there (cacheWrite).
 */
export function cacheRoot(): string {
  if (leftBecause) return fallbackCacheDir();
  const want = preferredCacheRoot();
  let why = usable.get(want);
  if (why === undefined) {
    why = unusable(want);
    usable.set(want, why);
    if (!why) sweep(want);
  }
  return why ? leaveCache(why) : want;
}

/** Why the cache folder is not used (null when it is), for diagnostics. */
export function cacheProblem(): string | null {
  cacheRoot();
  return leftBecause ?? usable.get(preferredCacheRoot()) ?? null;
}

/**
 * Run `write` (which finds its paths from cacheRoot()); on a write fault of the cache folder,
 * switch the process to the private folder and run it once more there. A fault in the private
 * folder too is a GpuError that says so in words.
 */
export function cacheWrite<T>(write: () => T, call = "cache"): T {
  try {
    return write();
  } catch (e) {
    if (!isCacheFault(e)) throw e;
    if (leftBecause) throw noPrivateSpace(e, call);
    leaveCache(faultWords(e));
  }
  try {
    return write();
  } catch (e) {
    throw isCacheFault(e) ? noPrivateSpace(e, call) : e;
  }
}

function noPrivateSpace(e: unknown, call: string): GpuError {
  return new GpuError(Status.NOT_PERMITTED, `cannot write the cache, nor the private folder ${fallbackCacheDir()} (${faultWords(e)})`, { backend: "loader", call });
}

// ---- leftovers of killed processes ------------------------------------------------------------

const HOUR_MS = 3_600_000;

function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code === "EPERM"; // someone else's process, alive
  }
}

function olderThan(path: string, ms: number): boolean {
  try {
    return Date.now() - lstatSync(path).mtimeMs > ms;
  } catch {
    return false;
  }
}

/**
 * Remove what killed processes left: in the cache, `*.tmp` files of a writer no longer running
 * (or over an hour old), background builds' `*.part` files and `*.err` logs over an hour old,
 * probe files; in the private folder, compiler and no-cache folders whose process (and whose
 * background compiler, `sh.pid`) is gone. Once per process, at its first use of the cache.
 */
function sweep(root: string): void {
  const dirs = [root, join(root, "plans")];
  for (const sub of ["kernels", "shim"]) {
    try {
      for (const d of readdirSync(join(root, sub))) dirs.push(join(root, sub, d));
    } catch {
      /* none */
    }
  }
  for (const { name: n, path } of entries(dirs)) {
    let stale = false;
    if (n.endsWith(".tmp") || n.startsWith(".probe.")) {
      const m = /\.(\d+)\.[0-9a-z]+(?:\.tmp)?$/.exec(n);
      stale = (m ? !alive(Number(m[1])) : false) || olderThan(path, HOUR_MS);
    } else if (n.endsWith(".part") || n.endsWith(".err")) stale = olderThan(path, HOUR_MS);
    if (stale) removeLeftover(path);
  }
  sweepPrivate();
}

/** Every entry of the folders that can be read: its folder, name and path. */
function entries(dirs: readonly string[]): { dir: string; name: string; path: string }[] {
  const out: { dir: string; name: string; path: string }[] = [];
  for (const dir of dirs) {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) out.push({ dir, name, path: join(dir, name) });
  }
  return out;
}

function removeLeftover(path: string): void {
  try {
    rmSync(path, { recursive: true, force: true });
    trace?.(`removed a leftover: ${path}`);
  } catch {
    /* another process removed it, or it is not ours: harmless */
  }
}

/** Folders of the private folder (and, from before it, of the tmpdir) whose process is gone. */
function sweepPrivate(): void {
  const priv = privateRoot();
  const uid = typeof process.getuid === "function" ? process.getuid() : -1;
  for (const { dir, name: n, path } of entries(priv === tmpdir() ? [priv] : [priv, tmpdir()])) {
    const m = /^(?:bungpu-)?(?:cc|tcc|nocache)-(\d+)-/.exec(n);
    if (m && (dir === priv || n.startsWith("bungpu-"))) {
      if (alive(Number(m[1]))) continue;
      try {
        if (alive(Number(readFileSync(join(path, "sh.pid"), "utf8")))) continue; // its background build still runs
      } catch {
        /* no background build */
      }
    } else if (/^bungpu-(?:cc|tcc|nocache)-[A-Za-z0-9]{6}$/.test(n)) {
      // From before this folder: no pid to ask; an hour old and this user's.
      try {
        if (!olderThan(path, HOUR_MS) || (uid >= 0 && lstatSync(path).uid !== uid)) continue;
      } catch {
        continue;
      }
    } else continue;
    removeLeftover(path);
  }
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

/** Remove a folder where a file of the cache belongs (damage: a file is rebuilt in its place). */
export function clearFolderAt(path: string): void {
  try {
    if (lstatSync(path).isDirectory()) rmSync(path, { recursive: true, force: true });
  } catch {
    /* nothing there */
  }
}

/** Put the library `built` (and its record) at `out` in the cache: record first, each renamed into place. */
function installShim(out: string, built: string, rec: LibRecord, steps: string[]): string {
  cacheMkdir(dirname(out));
  clearFolderAt(`${out}.json`);
  clearFolderAt(out);
  const recTmp = tempName(`${out}.json`);
  try {
    cacheWriteFile(recTmp, JSON.stringify(rec));
    cacheRename(recTmp, `${out}.json`);
  } catch (e) {
    rmSync(recTmp, { force: true });
    if (isCacheFault(e)) throw e;
    // Without its record the library is used now and rebuilt by the next process.
    steps.push(`cannot record the build's size and SHA-256: ${(e as Error).message.split("\n")[0]}`);
  }
  const libTmp = tempName(out);
  try {
    injected(libTmp, "write");
    copyFileSync(built, libTmp);
    cacheRename(libTmp, out); // atomic: a reader never sees half a library
  } catch (e) {
    rmSync(libTmp, { force: true });
    throw e;
  }
  return out;
}

/** One word for sh: single-quoted. */
const shWord = (w: string) => `'${w.replace(/'/g, `'\\''`)}'`;

/**
 * Compile shim/ into `out` with the compiler `argv`: on several cores, its sources in as many
 * groups compiled at once (one `sh` running a loop per group in the background), then one link;
 * on one core, or where `sh` is missing, one compiler run. The load is synchronous (import time),
 * hence one blocking `sh`, not promises.
 */
function compileShim(argv: readonly string[], out: string, target: string, work: string): { exitCode: number | null; stderr: Uint8Array } {
  const sources = shimSources();
  const jobs = Math.min(availableParallelism(), 8, sources.length);
  const sh = jobs > 1 ? Bun.which("sh") : null;
  if (!sh) return Bun.spawnSync([...argv, ...compileArgs(out, target, sourceHash(), shimLevel())], { stdout: "pipe", stderr: "pipe" });
  const objs = sources.map((_, i) => join(work, `${i}.o`));
  const cmd = (args: readonly string[]) => [...argv, ...args].map(shWord).join(" ");
  const groups: string[][] = Array.from({ length: jobs }, () => []);
  sources.forEach((src, i) => groups[i % jobs]!.push(cmd(objectArgs(src, objs[i]!, sourceHash(), shimLevel()))));
  const script = [
    ...groups.map((g, k) => `( ${g.join(" && ")} ) & p${k}=$!`),
    `ok=0; for p in ${groups.map((_, k) => `$p${k}`).join(" ")}; do wait "$p" || ok=1; done`,
    `[ "$ok" = 0 ] || exit 1`,
    `exec ${cmd(linkArgs(objs, out, target))}`,
  ].join("\n");
  return Bun.spawnSync([sh, "-c", script], { stdout: "pipe", stderr: "pipe" });
}

/**
 * Build shim/ with the first compiler that succeeds, in a private folder, then put it at `out()`
 * in the cache with its size and SHA-256 in `<out>.json`. `out` is asked again after a write
 * fault, when the process has switched to its private folder (cacheWrite).
 */
export function buildShim(out: () => string, steps: string[]): { compiler: string; path: string } | null {
  const { list, tried } = findCompilers();
  if (list.length === 0) {
    steps.push(`no C compiler: looked for ${tried.join(", ")}`);
    return null;
  }
  const target = hostTarget();
  const work = privateTemp("cc");
  try {
    const tmp = join(work, libName(target));
    for (const cc of list) {
      const r = compileShim(cc.argv, tmp, target, work);
      if (r.exitCode === 0 && existsSync(tmp)) {
        const data = readFileSync(tmp);
        const rec: LibRecord = { bytes: data.byteLength, sha256: sha256File(data) };
        const path = cacheWrite(() => installShim(out(), tmp, rec, steps), "load");
        steps.push(`built with ${cc.label}`);
        return { compiler: cc.label, path };
      }
      rmSync(tmp, { force: true });
      const err = new TextDecoder().decode(r.stderr).trim().split("\n").slice(0, 3).join(" / ");
      steps.push(`${cc.label} failed: ${err || `exit ${r.exitCode}`}`);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
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

  const shimPath = () => join(cacheRoot(), "shim", `${target}-${hash.slice(0, 16)}${shimLevelTag()}`, name);
  const cached = shimPath();
  const problem = cacheProblem();
  if (problem) steps.push(`cache folder ${preferredCacheRoot()} unusable (${problem}): using a temporary folder`);
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

  const built = buildShim(shimPath, steps);
  if (built) {
    trace?.(steps[steps.length - 1]!);
    const r3 = tryOpen(built.path, hash);
    if (typeof r3 !== "string") {
      loaded = { lib: r3, info: { path: built.path, source: "built", hash, compiler: built.compiler, steps } };
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
