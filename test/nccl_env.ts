// Real NCCL headers and library for the suite: installed once with pip from the Python package
// registry (`nvidia-nccl-cu13`) into a per-user test cache, as test/nvrtc_env.ts installs NVRTC.
// BUNGPU_NCCL_HOME points at an installed NCCL instead (its include/ and lib/). Where neither
// works, callers skip with the reason this returns: the suite never needs a GPU.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { pipCacheRoot, pipInstallOnce } from "./pip_cache";

export type Nccl = { ok: true; include: string; lib: string | null; how: string } | { ok: false; reason: string };

const PACKAGE = "nvidia-nccl-cu13";

function cacheRoot(): string {
  return pipCacheRoot("nccl-cu13");
}

function findIn(root: string): { include: string; lib: string | null } | null {
  for (const sub of ["nvidia/nccl", "nvidia/cu13", "."]) {
    const inc = join(root, sub, "include");
    if (!existsSync(join(inc, "nccl.h"))) continue;
    const lib = join(root, sub, "lib", "libnccl.so.2");
    return { include: inc, lib: existsSync(lib) ? lib : null };
  }
  return null;
}

let cached: Nccl | undefined;

/** nccl.h (and libnccl.so.2 where present) for tests: BUNGPU_NCCL_HOME, else pip's nvidia-nccl-cu13 (installed on first use). */
export function nccl(): Nccl {
  if (cached) return cached;
  const env = process.env.BUNGPU_NCCL_HOME;
  if (env) {
    const f = findIn(env);
    return (cached = f ? { ok: true, ...f, how: "BUNGPU_NCCL_HOME" } : { ok: false, reason: `BUNGPU_NCCL_HOME=${env} has no include/nccl.h` });
  }
  const root = cacheRoot();
  const why = pipInstallOnce(root, PACKAGE, (d) => findIn(d) !== null);
  if (why) return (cached = { ok: false, reason: why });
  const found = findIn(root);
  if (!found) return (cached = { ok: false, reason: `nccl.h missing under ${root} after install` });
  return (cached = { ok: true, ...found, how: `pip ${PACKAGE}` });
}
