// Real NCCL headers and library for the suite: installed once with pip from the Python package
// registry (`nvidia-nccl-cu13`) into a per-user test cache, as test/nvrtc_env.ts installs NVRTC.
// BUNGPU_NCCL_HOME points at an installed NCCL instead (its include/ and lib/). Where neither
// works, callers skip with the reason this returns: the suite never needs a GPU.
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

export type Nccl = { ok: true; include: string; lib: string | null; how: string } | { ok: false; reason: string };

const PACKAGE = "nvidia-nccl-cu13";

function cacheRoot(): string {
  const base = process.env.BUNGPU_TEST_CACHE ?? join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "bungpu-test");
  return join(base, "nccl-cu13");
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
  let found = findIn(root);
  if (!found) {
    mkdirSync(dirname(root), { recursive: true });
    // One installer at a time across processes: mkdir is atomic; a stale lock (>10 min) is broken.
    const lock = `${root}.lock`;
    const deadline = Date.now() + 300_000;
    for (;;) {
      try {
        mkdirSync(lock);
        break;
      } catch {
        try {
          if (Date.now() - statSync(lock).mtimeMs > 600_000) rmSync(lock, { recursive: true, force: true });
        } catch {}
        if (Date.now() > deadline) return (cached = { ok: false, reason: "timed out waiting for another NCCL install" });
        Bun.sleepSync(250);
      }
    }
    try {
      found = findIn(root);
      if (!found) {
        const tmp = `${root}.tmp-${process.pid}`;
        rmSync(tmp, { recursive: true, force: true });
        const py = ["python3", "python"].find((p) => Bun.which(p));
        if (!py) return (cached = { ok: false, reason: `no python3 with pip to install ${PACKAGE}` });
        const r = Bun.spawnSync([py, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check", "--target", tmp, PACKAGE], {
          stdout: "pipe",
          stderr: "pipe",
          timeout: 600_000,
        });
        if (r.exitCode !== 0 || !findIn(tmp)) {
          rmSync(tmp, { recursive: true, force: true });
          const why = (r.stderr?.toString() || r.stdout?.toString() || "").trim().split("\n").slice(-2).join(" ");
          return (cached = { ok: false, reason: `pip could not install ${PACKAGE}: ${why || `exit ${r.exitCode}`}` });
        }
        rmSync(root, { recursive: true, force: true });
        renameSync(tmp, root); // atomic: a half-installed folder is never seen under the final name
        found = findIn(root);
      }
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
  if (!found) return (cached = { ok: false, reason: `nccl.h missing under ${root} after install` });
  return (cached = { ok: true, ...found, how: `pip ${PACKAGE}` });
}
