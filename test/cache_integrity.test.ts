// Crash-proof loading: a cached (or prebuilt) libbungpu is checked against its recorded size and
// SHA-256 before dlopen, and a bad cached one is rebuilt; an unusable cache folder only costs the
// caching. Each load runs in a subprocess with a time limit (a bad library used to kill it).
import { afterAll, describe, expect, test } from "bun:test";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hostTarget, libName } from "../ffi/shimsrc";

const root = join(import.meta.dir, "..");
const temps: string[] = [];
const temp = (p: string) => {
  const d = mkdtempSync(join(tmpdir(), p));
  temps.push(d);
  return d;
};
afterAll(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

// A private copy of the package: its shim/ (and so its source hash) cannot change under the test
// while other work edits the tree.
function packageCopy(withPrebuilt: boolean): string {
  const pkg = temp("bungpu-pkg-");
  for (const d of ["src", "ffi", "shim"]) cpSync(join(root, d), join(pkg, d), { recursive: true });
  if (!withPrebuilt) rmSync(join(pkg, "ffi", "prebuilt"), { recursive: true, force: true });
  return pkg;
}

const script =
  "import { loadInfo, Device } from './src'; const d = Device.open('cpu'); " +
  "const b = d.alloc(4).write(new Uint8Array([1,2,3,4])); " +
  "console.log(JSON.stringify({ source: loadInfo.source, sum: b.read().reduce((a, x) => a + x, 0) }))";

function runIn(pkg: string, env: Record<string, string>, code = script) {
  const r = Bun.spawnSync([process.execPath, "-e", code], {
    cwd: pkg,
    env: { ...process.env, BUNGPU_LIB: "", BUNGPU_SHIM_OPT: "0", ...env }, // -O0: these runs build the shim about ten times
    stdout: "pipe",
    stderr: "pipe",
    timeout: 90_000,
  });
  const out = r.stdout.toString().trim();
  let parsed: unknown = null;
  try {
    parsed = JSON.parse(out.split("\n").pop() ?? "");
  } catch {
    parsed = null;
  }
  return { exitCode: r.exitCode, signal: r.signalCode, out: parsed, stderr: r.stderr.toString() };
}

function cachedLib(cache: string): string {
  const shim = join(cache, "shim");
  const dirs = readdirSync(shim).filter((d) => d.startsWith(hostTarget()));
  expect(dirs.length).toBe(1);
  return join(shim, dirs[0]!, libName(hostTarget()));
}

describe("the cached shim library is verified before dlopen", () => {
  const pkg = packageCopy(false);
  const cache = temp("bungpu-cache-");
  const env = { BUNGPU_NO_PREBUILT: "1", BUNGPU_CACHE_DIR: cache };

  test("a build records size and SHA-256 beside the library; the next run uses it", () => {
    expect(runIn(pkg, env).out).toEqual({ source: "built", sum: 10 });
    const lib = cachedLib(cache);
    const rec = JSON.parse(readFileSync(`${lib}.json`, "utf8"));
    const data = readFileSync(lib);
    expect(rec.bytes).toBe(data.byteLength);
    expect(rec.sha256).toBe(new Bun.CryptoHasher("sha256").update(data).digest("hex"));
    expect(runIn(pkg, env).out).toEqual({ source: "cache", sum: 10 });
  }, 120_000);

  // Each damage: the run that finds it rebuilds and works; the run after it uses the rebuilt one.
  const damages: [string, (lib: string) => void][] = [
    ["truncated", (lib) => truncateSync(lib, 20_000)],
    [
      "same size, bytes flipped",
      (lib) => {
        const d = readFileSync(lib);
        for (let i = 4096; i < d.length; i += 997) d[i] = d[i]! ^ 0x5a;
        writeFileSync(lib, d);
      },
    ],
    ["record missing", (lib) => rmSync(`${lib}.json`)],
  ];
  for (const [i, [what, damage]] of damages.entries()) {
    test(`${what}: rebuilt, never opened`, () => {
      const lib = cachedLib(cache);
      damage(lib);
      const r = runIn(pkg, { ...env, BUNGPU_DEBUG_LOADER: "1" });
      expect({ exitCode: r.exitCode, signal: r.signal, out: r.out }).toEqual({ exitCode: 0, signal: undefined, out: { source: "built", sum: 10 } });
      expect(r.stderr).toMatch(/cache .*: (corrupt|no size\/sha256 record)/);
      if (i === 0) expect(runIn(pkg, env).out).toEqual({ source: "cache", sum: 10 });
    }, 120_000);
  }
});

describe("processes starting together on a damaged cache", () => {
  test("three at once: each rebuilds or finds the other's build, all work", async () => {
    const pkg = packageCopy(false);
    const cache = temp("bungpu-cache-");
    const env = { ...process.env, BUNGPU_LIB: "", BUNGPU_NO_PREBUILT: "1", BUNGPU_SHIM_OPT: "0", BUNGPU_CACHE_DIR: cache };
    expect(runIn(pkg, env).out).toEqual({ source: "built", sum: 10 });
    truncateSync(cachedLib(cache), 20_000);
    const procs = [0, 1, 2].map(() => Bun.spawn([process.execPath, "-e", script], { cwd: pkg, env, stdout: "pipe", stderr: "pipe" }));
    const outs = await Promise.all(
      procs.map(async (p) => {
        const [out, code] = await Promise.all([new Response(p.stdout).text(), p.exited]);
        return { code, sum: code === 0 ? JSON.parse(out.trim()).sum : out };
      }),
    );
    expect(outs).toEqual([0, 1, 2].map(() => ({ code: 0, sum: 10 })));
  }, 120_000);
});

describe("a damaged prebuilt library is refused by its manifest record", () => {
  test("truncated prebuilt: not opened, a cache build is used", () => {
    const pkg = packageCopy(true);
    const cache = temp("bungpu-cache-");
    const t = hostTarget();
    const pre = join(pkg, "ffi", "prebuilt", t, libName(t));
    if (!existsSync(pre)) return; // no prebuilt for this platform: nothing to damage
    truncateSync(pre, 20_000);
    const r = runIn(pkg, { BUNGPU_CACHE_DIR: cache, BUNGPU_DEBUG_LOADER: "1" });
    expect({ exitCode: r.exitCode, signal: r.signal, out: r.out }).toEqual({ exitCode: 0, signal: undefined, out: { source: "built", sum: 10 } });
    expect(r.stderr).toMatch(/prebuilt .*: corrupt/);
  }, 120_000);
});

describe("an unusable cache folder falls back to compiling without a cache", () => {
  // A regular file where the folder should be: ENOTDIR for everything below it (root ignores
  // permission bits, so EACCES cannot be provoked reliably; the same path handles both).
  const base = temp("bungpu-badcache-");
  const blocker = join(base, "file");
  writeFileSync(blocker, "not a folder");
  const bad = join(blocker, "cache");

  test("the shim loads, and a CPU kernel and a tensor plan compile and run", () => {
    const pkg = packageCopy(false);
    const code = `
      import { loadInfo, Device, Program } from './src';
      import { Tensor } from './src/tensor';
      const d = Device.open('cpu');
      const src = '#include "bungpu_cpu.h"\\nBG_KERNEL(inc) { int* p = BG_ARG(0, int*); int n = BG_ARG(1, int); BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1; } } }';
      const m = Program.compile(d, { cpu: src, cuda: '', metal: '' }, { name: 'inc' });
      const k = m.kernel('inc', ['buffer', 'i32']);
      const b = d.alloc(16).write(new Int32Array([1, 2, 3, 4]));
      const s = d.createStream();
      k.launch(s, { grid: 1, block: 4, args: [b, 4] });
      s.synchronize();
      const tv = Tensor.from(new Float32Array([1, 2, 3])).mul(2).sum().toArray({ device: d });
      console.log(JSON.stringify({ source: loadInfo.source, k: [...new Int32Array(b.read().buffer)], t: [...tv] }));
    `;
    const r = runIn(pkg, { BUNGPU_CACHE_DIR: bad }, code);
    expect(r.stderr).not.toMatch(/ENOTDIR|EACCES/);
    expect({ exitCode: r.exitCode, out: r.out }).toEqual({ exitCode: 0, out: { source: "built", k: [2, 3, 4, 5], t: [12] } });
    // Nothing was left behind in the temporary folder.
    expect(existsSync(bad)).toBe(false);
  }, 120_000);
});
