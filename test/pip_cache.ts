// A Python package installed once into a per-user test cache folder (pip --target), for tests
// that check declarations against real headers or load real libraries: NVRTC (nvrtc_env.ts) and
// NCCL (nccl_env.ts). One installer at a time across processes; a half-installed folder is never
// seen under its final name.
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

/** The per-user cache folder `name` of Python packages for tests and benches (BUNGPU_TEST_CACHE overrides the base). */
export function pipCacheRoot(name: string): string {
  const base = process.env.BUNGPU_TEST_CACHE ?? join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "bungpu-test");
  return join(base, name);
}

/**
 * Make sure `root` holds `pkg` (as `present(root)` tells), installing it with pip if not (with
 * `deps`, the packages it needs too; else it alone). Returns null when it is there, else why it
 * could not be installed.
 */
export function pipInstallOnce(root: string, pkg: string, present: (dir: string) => boolean, deps = false): string | null {
  if (existsSync(root) && present(root)) return null;
  mkdirSync(dirname(root), { recursive: true });
  // mkdir is atomic: the lock; a stale one (over 10 minutes old) is broken
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
      if (Date.now() > deadline) return `timed out waiting for another install of ${pkg}`;
      Bun.sleepSync(250);
    }
  }
  try {
    if (existsSync(root) && present(root)) return null;
    const tmp = `${root}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    const py = ["python3", "python"].find((p) => Bun.which(p));
    if (!py) return `no python3 with pip to install ${pkg}`;
    const r = Bun.spawnSync([py, "-m", "pip", "install", "--quiet", ...(deps ? [] : ["--no-deps"]), "--disable-pip-version-check", "--target", tmp, pkg], {
      stdout: "pipe",
      stderr: "pipe",
      timeout: 600_000,
    });
    if (r.exitCode !== 0 || !present(tmp)) {
      rmSync(tmp, { recursive: true, force: true });
      const why = (r.stderr?.toString() || r.stdout?.toString() || "").trim().split("\n").slice(-2).join(" ");
      return `pip could not install ${pkg}: ${why || `exit ${r.exitCode}`}`;
    }
    rmSync(root, { recursive: true, force: true });
    renameSync(tmp, root); // atomic
    return present(root) ? null : `${pkg} missing under ${root} after install`;
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}
