// The on-disk kernel cache under the per-user cache folder: one folder per backend, artifacts
// keyed by a hash of source, options, device and compiler. Artifacts are written atomically and
// checked against their record (size, hash, and the key it was built for) before use, so a
// corrupt or misplaced entry is rebuilt, never trusted.
// A write fault (read-only, full, something in the way) moves the process to a private folder
// (ffi/load.ts cacheWrite): the kernel is still built and used, only not cached.
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { cacheMkdir, cacheRename, cacheRoot, cacheWrite, cacheWriteFile, clearFolderAt, tempName } from "../../ffi/load";

/** What compilation did in this process: tests and benches read it. */
export const compileStats = {
  /** Compiler processes waited for (a compile that blocks the caller). */
  compilerRuns: 0,
  /** Optimized builds started in the background (tiered compilation: none of them blocks). */
  backgroundRuns: 0,
  diskHits: 0,
  rebuiltCorrupt: 0,
  /** `cc --version` spawns to identify the C compiler (0 on a warm start: the identity is remembered on disk). */
  versionSpawns: 0,
};

export function sha256(...parts: (string | Uint8Array)[]): string {
  const h = new Bun.CryptoHasher("sha256");
  for (const p of parts) {
    h.update(p);
    h.update("\0");
  }
  return h.digest("hex");
}

interface Meta {
  sha256: string;
  bytes: number;
  compiler: string;
  /** The key the artifact was built for: a record beside another key's file is not its record. */
  key: string;
}

/** The kernel cache folder of `backend` (made if missing; after a write fault, the process's private one). */
export function cacheDir(backend: string): string {
  return cacheWrite(() => {
    const d = join(cacheRoot(), "kernels", backend);
    cacheMkdir(d);
    return d;
  }, "Program.compile");
}

/** The verified artifact path for `key`, or null (absent or damaged: then removed, to be rebuilt). */
export function cached(backend: string, key: string, ext: string): string | null {
  const dir = join(cacheRoot(), "kernels", backend); // a read: nothing to make
  const art = join(dir, `${key}.${ext}`);
  const metaPath = join(dir, `${key}.json`);
  if (!existsSync(art) || !existsSync(metaPath)) return null;
  try {
    const meta = JSON.parse(readFileSync(metaPath, "utf8")) as Meta;
    const data = readFileSync(art);
    // the record must be this key's: entries swapped or copied under another key's name (their
    // own size and hash intact) would run another kernel's code
    if (meta.key === key && data.byteLength === meta.bytes && sha256(data) === meta.sha256) return art;
  } catch {
    /* unreadable (a folder in its place, say): treated as corrupt */
  }
  compileStats.rebuiltCorrupt++;
  for (const p of [art, metaPath]) {
    try {
      rmSync(p, { recursive: true, force: true });
    } catch {
      /* store() replaces it, or falls back */
    }
  }
  return null;
}

/**
 * Copy the artifact at `built` (anywhere: a compiler's private folder) into the cache as the one
 * for `key`, atomically (record first, then the artifact, each renamed into place); its path. A
 * write fault moves the process to its private folder and the store is done there (cacheWrite).
 */
export function store(backend: string, key: string, ext: string, built: string, compiler: string): string {
  return storeData(backend, key, ext, readFileSync(built), compiler);
}

/** store() for an artifact in memory. */
export function storeData(backend: string, key: string, ext: string, data: Uint8Array, compiler: string): string {
  const meta: Meta = { sha256: sha256(data), bytes: data.byteLength, compiler, key };
  return cacheWrite(() => {
    const dir = cacheDir(backend);
    const art = join(dir, `${key}.${ext}`);
    const metaPath = join(dir, `${key}.json`);
    clearFolderAt(art);
    clearFolderAt(metaPath);
    const artTmp = tempName(art);
    const metaTmp = tempName(metaPath);
    try {
      cacheWriteFile(artTmp, data);
      cacheWriteFile(metaTmp, JSON.stringify(meta));
      cacheRename(artTmp, art);
      cacheRename(metaTmp, metaPath);
    } finally {
      rmSync(artTmp, { force: true });
      rmSync(metaTmp, { force: true });
    }
    return art;
  }, "Program.compile");
}
