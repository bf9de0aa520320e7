// The on-disk kernel cache under the per-user cache folder: one folder per backend, artifacts
// keyed by a hash of source, options, device and compiler. Artifacts are written atomically and
// checked against their recorded hash before use, so a corrupt entry is rebuilt, never trusted.
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cacheRoot } from "../../ffi/load";

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
}

export function cacheDir(backend: string): string {
  const d = join(cacheRoot(), "kernels", backend);
  mkdirSync(d, { recursive: true });
  return d;
}

/** The verified artifact path for `key`, or null (absent or corrupt: then removed). */
export function cached(dir: string, key: string, ext: string): string | null {
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

/** Write the data at `tmpPath` as the artifact for `key`, atomically. */
export function store(dir: string, key: string, ext: string, tmpPath: string, compiler: string): string {
  const art = join(dir, `${key}.${ext}`);
  const data = readFileSync(tmpPath);
  const meta: Meta = { sha256: sha256(data), bytes: data.byteLength, compiler };
  const metaTmp = join(dir, `${key}.json.${process.pid}.tmp`);
  writeFileSync(metaTmp, JSON.stringify(meta));
  renameSync(tmpPath, art);
  renameSync(metaTmp, join(dir, `${key}.json`));
  return art;
}
