// Cache faults fall back: a file where a cache folder belongs, a folder where a cached file
// belongs, a read-only folder, a full disk. The shim, kernels and plans are still built (in a
// private folder, with one warning line, or repaired in place), never a raw EEXIST/ENOTDIR/EISDIR/
// EROFS/EACCES/ENOSPC, on the first run and every later one. Leftovers of a killed process are
// removed at the next start. Each case runs in a subprocess with its own BUNGPU_CACHE_DIR and
// TMPDIR (so its private folder too is its own).
//
// Read-only folders and a full disk are real where this process may make them: a read-only bind
// mount and a small tmpfs (root with mount rights), or chmod (any other user). Where it may not
// (root without mount rights: permission bits do not stop root), the fault is injected with
// BUNGPU_TEST_CACHE_FAULT, which only tests set (ffi/load.ts).
import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(import.meta.dir, "..");
const temps: string[] = [];
const mounts: string[] = [];
afterAll(() => {
  for (const m of mounts.reverse()) Bun.spawnSync(["umount", m], { stderr: "pipe" });
  for (const d of temps) {
    try {
      chmodSync(d, 0o700);
    } catch {
      /* gone */
    }
    Bun.spawnSync(["chmod", "-R", "u+w", d], { stderr: "pipe" });
    rmSync(d, { recursive: true, force: true });
  }
});

/** A fresh place: `cache` (BUNGPU_CACHE_DIR, not yet made) and `tmp` (TMPDIR, made). */
function place(): { base: string; cache: string; tmp: string } {
  const base = mkdtempSync(join(tmpdir(), "bungpu-fault-"));
  temps.push(base);
  mkdirSync(join(base, "tmp"));
  return { base, cache: join(base, "cache"), tmp: join(base, "tmp") };
}

const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
const mount = (args: string[], at: string): boolean => {
  if (Bun.spawnSync(["mount", ...args, at], { stdout: "pipe", stderr: "pipe" }).exitCode !== 0) return false;
  mounts.push(at);
  return true;
};

/** Make `dir` read-only for real if this process can; else the env that injects the fault. */
function readOnly(dir: string, part: string): Record<string, string> {
  mkdirSync(dir, { recursive: true });
  if (!isRoot) {
    chmodSync(dir, 0o555);
    return {};
  }
  if (mount(["--bind", dir], dir) && Bun.spawnSync(["mount", "-o", "remount,bind,ro", dir], { stderr: "pipe" }).exitCode === 0) return {};
  return { BUNGPU_TEST_CACHE_FAULT: `EROFS:${part}` };
}

/** Make `dir` a full file system for real if this process can; else the env that injects ENOSPC. */
function fullDisk(dir: string): Record<string, string> {
  mkdirSync(dir, { recursive: true });
  if (isRoot && mount(["-t", "tmpfs", "-o", "size=64k", "tmpfs"], dir)) {
    // Fill it, leaving room for empty entries only.
    Bun.spawnSync(["sh", "-c", `dd if=/dev/zero of=${join(dir, "filler")} bs=4k 2>/dev/null; true`]);
    return {};
  }
  return { BUNGPU_TEST_CACHE_FAULT: "ENOSPC" };
}

// A CPU kernel (Program.compile) and a tensor plan, their results and what the caches did.
const SCRIPT = `
import { loadInfo, Device, Program, compileStats } from './src';
import { Tensor } from './src/tensor';
import { tensorCompileStats } from './src/tensor/cache';
import { tierStats } from './src/tensor/prepare';
const d = Device.open('cpu');
const src = '#include "bungpu_cpu.h"\\nBG_KERNEL(inc) { int* p = BG_ARG(0, int*); int n = BG_ARG(1, int); BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1; } } }';
const k = Program.compile(d, { cpu: src, cuda: '', metal: '' }, { name: 'inc' }).kernel('inc', ['buffer', 'i32']);
const b = d.alloc(16).write(new Int32Array([1, 2, 3, 4]));
const s = d.createStream();
k.launch(s, { grid: 1, block: 4, args: [b, 4] });
s.synchronize();
const plan = Tensor.from(new Float32Array([1, 2, 3])).mul(2).sum().prepare({ device: d });
plan.execute();
if (process.env.WAIT_OPTIMIZED) await plan.optimized();
console.log(JSON.stringify({ source: loadInfo.source, k: [...new Int32Array(b.read().buffer)], t: [...plan.readOutput()],
  diskHits: compileStats.diskHits, planHits: tensorCompileStats.planCacheHits, planRebuilt: tensorCompileStats.planCacheRebuilt, upgraded: tierStats.upgraded, upgradeFailures: tierStats.upgradeFailures }));
`;

interface Run {
  exitCode: number | null;
  out: Record<string, unknown> | null;
  stderr: string;
}

function run(p: { cache: string; tmp: string }, env: Record<string, string> = {}, cwd = root, code = SCRIPT): Run {
  const r = Bun.spawnSync([process.execPath, "-e", code], {
    cwd,
    env: { ...process.env, BUNGPU_LIB: "", BUNGPU_TIER: "optimized", BUNGPU_TEST_CACHE_FAULT: "", BUNGPU_CACHE_DIR: p.cache, TMPDIR: p.tmp, ...env },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 90_000,
  });
  let out: Record<string, unknown> | null = null;
  try {
    out = JSON.parse(r.stdout.toString().trim().split("\n").pop() ?? "");
  } catch {
    out = null;
  }
  return { exitCode: r.exitCode, out, stderr: r.stderr.toString() };
}

const RAW = /EEXIST|ENOTDIR|EISDIR|EROFS|EACCES|EPERM|ENOSPC/;
const WARNING = /^bungpu: the cache folder .* cannot be used \((.*)\); this process builds without a cache, in .*$/gm;

/** The run worked, said so once on stderr with `why` in words, and showed no raw error code. */
function expectFallback(r: Run, why: RegExp): void {
  expect(r.stderr).not.toMatch(RAW);
  expect({ exitCode: r.exitCode, k: r.out?.["k"], t: r.out?.["t"] }).toEqual({ exitCode: 0, k: [2, 3, 4, 5], t: [12] });
  const lines = [...r.stderr.matchAll(WARNING)];
  expect(lines.length).toBe(1);
  expect(lines[0]![1]).toMatch(why);
}

/** The run worked without a word (the damage was repaired in place). */
function expectQuiet(r: Run): void {
  expect(r.stderr).not.toMatch(RAW);
  expect(r.stderr).not.toMatch(WARNING);
  expect({ exitCode: r.exitCode, k: r.out?.["k"], t: r.out?.["t"] }).toEqual({ exitCode: 0, k: [2, 3, 4, 5], t: [12] });
}

const entries = (dir: string, ext: string) => readdirSync(dir).filter((f) => f.endsWith(ext)).map((f) => join(dir, f));

describe("kernels and plans", () => {
  test("a file where kernels/ belongs: falls back with one warning, on every run", () => {
    const p = place();
    mkdirSync(p.cache);
    writeFileSync(join(p.cache, "kernels"), "not a folder");
    expectFallback(run(p), /a file is in the way/);
    expectFallback(run(p), /a file is in the way/);
  }, 60_000);

  test("a folder where a cached .so and its .json belong: rebuilt in place, then a disk hit", () => {
    const p = place();
    expectQuiet(run(p));
    const dir = join(p.cache, "kernels", "cpu");
    const damaged = [...entries(dir, ".so"), ...entries(dir, ".json")];
    expect(damaged.length).toBeGreaterThan(1);
    for (const f of damaged) {
      rmSync(f);
      mkdirSync(join(f, "inside"), { recursive: true });
    }
    expectQuiet(run(p));
    for (const f of damaged) expect(statSync(f).isFile()).toBe(true);
    const third = run(p);
    expectQuiet(third);
    expect(third.out?.["diskHits"]).toBeGreaterThan(0);
  }, 60_000);

  test("a folder where a cached plan belongs: rebuilt in place", () => {
    const p = place();
    expectQuiet(run(p));
    const plans = entries(join(p.cache, "plans"), ".json");
    expect(plans.length).toBeGreaterThan(0);
    for (const f of plans) {
      rmSync(f);
      mkdirSync(f);
    }
    const r = run(p);
    expectQuiet(r);
    expect(r.out?.["planRebuilt"]).toBeGreaterThan(0);
    for (const f of plans) expect(statSync(f).isFile()).toBe(true);
    expect(run(p).out?.["planHits"]).toBeGreaterThan(0);
  }, 60_000);

  test("a read-only kernels/cpu: falls back", () => {
    const p = place();
    const env = readOnly(join(p.cache, "kernels", "cpu"), "kernels/cpu");
    expectFallback(run(p, env), /read-only file system|no permission/);
  }, 60_000);

  test("a read-only plans/: falls back", () => {
    const p = place();
    const env = readOnly(join(p.cache, "plans"), "plans");
    expectFallback(run(p, env), /read-only file system|no permission/);
  }, 60_000);

  test("a full disk: falls back, no COMPILE error", () => {
    const p = place();
    const env = fullDisk(p.cache);
    expectFallback(run(p, env), /no space left/);
  }, 60_000);

  test("the background -O3 build on a read-only kernels/cpu: upgrades from the private folder, nothing thrown", () => {
    const p = place();
    const env = readOnly(join(p.cache, "kernels", "cpu"), "kernels/cpu");
    const r = run(p, { ...env, BUNGPU_TIER: "", WAIT_OPTIMIZED: "1" });
    expectFallback(r, /read-only file system|no permission/);
    expect({ upgraded: r.out?.["upgraded"], upgradeFailures: r.out?.["upgradeFailures"] }).toEqual({ upgraded: 1, upgradeFailures: 0 });
  }, 60_000);
});

// The shim itself, without a prebuilt library (a private copy of the package: its shim/ hash
// cannot change under the test). Each run builds the shim (seconds).
function packageCopy(): string {
  const pkg = mkdtempSync(join(tmpdir(), "bungpu-pkg-"));
  temps.push(pkg);
  for (const d of ["src", "ffi", "shim"]) cpSync(join(root, d), join(pkg, d), { recursive: true });
  rmSync(join(pkg, "ffi", "prebuilt"), { recursive: true, force: true });
  return pkg;
}

describe("the shim library", () => {
  const pkg = packageCopy();
  const env = { BUNGPU_NO_PREBUILT: "1", BUNGPU_SHIM_OPT: "0" }; // -O0: a third of the build's time

  test("a full disk: import still works (built in the private folder)", () => {
    const p = place();
    const r = run(p, { ...env, ...fullDisk(p.cache) }, pkg);
    expectFallback(r, /no space left/);
    expect(r.out?.["source"]).toBe("built");
  }, 90_000);

  test("a folder where the cached library's record belongs: rebuilt in place, then opened from the cache", () => {
    const p = place();
    expectQuiet(run(p, env, pkg));
    const shim = join(p.cache, "shim");
    const lib = join(shim, readdirSync(shim)[0]!);
    const rec = entries(lib, ".json")[0]!;
    rmSync(rec);
    mkdirSync(rec);
    const r = run(p, env, pkg);
    expectQuiet(r);
    expect(r.out?.["source"]).toBe("built");
    expect(run(p, env, pkg).out?.["source"]).toBe("cache");
  }, 90_000);
});

describe("leftovers of a killed process", () => {
  test("a compile killed with SIGKILL: its compiler folder and stale temporary files are gone after the next start", async () => {
    const p = place();
    // A compiler that says it has started, then hangs (until the test kills it).
    const cc = join(p.base, "slowcc");
    const mark = join(p.base, "mark");
    writeFileSync(cc, `#!/bin/sh\nfor a in "$@"; do [ "$a" = --version ] && exec cc --version; done\necho $$ > "${mark}"\nexec sleep 60\n`);
    chmodSync(cc, 0o755);
    const killed = Bun.spawn([process.execPath, "-e", SCRIPT], {
      cwd: root,
      env: { ...process.env, BUNGPU_LIB: "", BUNGPU_TIER: "optimized", BUNGPU_TEST_CACHE_FAULT: "", BUNGPU_CACHE_DIR: p.cache, TMPDIR: p.tmp, BUNGPU_CC: cc },
      stdout: "ignore",
      stderr: "ignore",
    });
    const t0 = Date.now();
    while (!existsSync(mark) && Date.now() - t0 < 30_000) await Bun.sleep(20);
    await Bun.sleep(50);
    killed.kill(9);
    await killed.exited;
    try {
      process.kill(Number(await Bun.file(mark).text()), 9);
    } catch {
      /* gone */
    }
    const all = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? [join(dir, e.name), ...all(join(dir, e.name))] : [join(dir, e.name)]));
    const compilerFolders = () => all(p.tmp).filter((f) => /(^|\/)(bungpu-)?cc-[^/]*$/.test(f));
    expect(compilerFolders().length).toBeGreaterThan(0); // what the killed process left

    // What killed writers leave in the cache: temporary files of a dead process, a background
    // build's .part and .err an hour old. A live writer's and a fresh build's files stay.
    const dead = Bun.spawnSync(["true"]).pid;
    const kdir = join(p.cache, "kernels", "cpu");
    const pdir = join(p.cache, "plans");
    mkdirSync(kdir, { recursive: true });
    mkdirSync(pdir, { recursive: true });
    const old = (Date.now() - 2 * 3_600_000) / 1000;
    const stale = [join(kdir, `a.so.${dead}.x1y2.tmp`), join(pdir, `b.json.${dead}.x1y2.tmp`), join(kdir, `c.so.built.${dead}.1.part`), join(kdir, "d.err")];
    const fresh = [join(kdir, `e.so.${process.pid}.x1y2.tmp`), join(kdir, `f.so.built.${dead}.1.part`)];
    for (const f of [...stale, ...fresh]) writeFileSync(f, "x");
    for (const f of stale.slice(2)) utimesSync(f, old, old);

    expectQuiet(run(p));
    expect(compilerFolders()).toEqual([]);
    expect(stale.filter((f) => existsSync(f))).toEqual([]);
    expect(fresh.filter((f) => existsSync(f))).toEqual(fresh);
  }, 60_000);
});
