// Real NVRTC for the suite: found where the user pointed (BUNGPU_NVRTC), else installed once with
// pip from the Python package registry (`nvidia-cuda-nvrtc`, CUDA 13) into a per-user test cache.
// Where neither works, callers skip with the reason this returns: the suite never needs a GPU.
import { existsSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { pipCacheRoot, pipInstallOnce } from "./pip_cache";

export type Nvrtc =
  | { ok: true; lib: string; include: string | null; version: string; how: string }
  | { ok: false; reason: string };

const PACKAGE = "nvidia-cuda-nvrtc~=13.0";

function cacheRoot(): string {
  return pipCacheRoot("nvrtc13");
}

/** The libnvrtc.so.N (not the .alt variant) under a pip --target folder, if any. */
function findLib(root: string): { lib: string; include: string | null } | null {
  for (const sub of ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"]) {
    const dir = join(root, sub);
    if (!existsSync(dir)) continue;
    const lib = readdirSync(dir).find((f) => /^libnvrtc\.so\.\d+$/.test(f));
    if (!lib) continue;
    const inc = join(dir, "..", "include");
    return { lib: join(dir, lib), include: existsSync(join(inc, "nvrtc.h")) ? inc : null };
  }
  return null;
}

let cached: Nvrtc | undefined;

/** The folder with nvrtc.h next to a libnvrtc (toolkit lib64/ or pip lib/ → ../include), if any. */
function includeBeside(lib: string): string | null {
  const inc = join(dirname(lib), "..", "include");
  return existsSync(join(inc, "nvrtc.h")) ? inc : null;
}

/** The major version of the NVRTC at `lib`: its nvrtcVersion(), else the soname's number, else "?". */
function majorOf(lib: string): string {
  try {
    const { dlopen, FFIType, ptr } = require("bun:ffi") as typeof import("bun:ffi");
    const h = dlopen(lib, { nvrtcVersion: { args: [FFIType.ptr, FFIType.ptr], returns: FFIType.i32 } });
    try {
      const v = new Int32Array(2);
      if (h.symbols.nvrtcVersion(ptr(v), ptr(v, 4)) === 0 && v[0]! > 0) return String(v[0]);
    } finally {
      h.close();
    }
  } catch {}
  return /libnvrtc\.so\.(\d+)/.exec(lib)?.[1] ?? "?";
}

/** NVRTC for tests: BUNGPU_NVRTC if set, else the pip-installed CUDA 13 NVRTC (installed on first use). */
export function nvrtc(): Nvrtc {
  if (cached) return cached;
  const env = process.env.BUNGPU_NVRTC;
  if (env) {
    cached = existsSync(env)
      ? { ok: true, lib: env, include: includeBeside(env), version: majorOf(env), how: "BUNGPU_NVRTC" }
      : { ok: false, reason: `BUNGPU_NVRTC=${env} does not exist` };
    return cached;
  }
  const root = cacheRoot();
  const why = pipInstallOnce(root, PACKAGE, (d) => findLib(d) !== null);
  if (why) return (cached = { ok: false, reason: why });
  const found = findLib(root);
  if (!found) return (cached = { ok: false, reason: `NVRTC missing under ${root} after install` });
  const m = /libnvrtc\.so\.(\d+)/.exec(found.lib);
  return (cached = { ok: true, lib: found.lib, include: found.include, version: m ? m[1]! : "?", how: `pip ${PACKAGE}` });
}
