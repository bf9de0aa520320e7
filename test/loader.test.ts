// The zero-build promise: fresh prebuilt libraries for every platform, and a cache build when
// the prebuilt one is missing or stale.
import { describe, expect, test } from "bun:test";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PREBUILT_DIR, TARGETS, hostTarget, libName, sourceHash } from "../ffi/shimsrc";
import { loadInfo } from "../src";

const root = join(import.meta.dir, "..");

describe("prebuilt libraries", () => {
  test("every platform's prebuilt library is committed and fresh against shim/", () => {
    const manifest = JSON.parse(readFileSync(join(PREBUILT_DIR, "manifest.json"), "utf8"));
    expect(manifest.sourceHash).toBe(sourceHash());
    for (const t of TARGETS) {
      const path = join(PREBUILT_DIR, t, libName(t));
      expect(existsSync(path)).toBe(true);
      const entry = manifest.targets[t];
      expect(entry).toBeDefined();
      const data = readFileSync(path);
      expect(data.byteLength).toBe(entry.bytes);
      expect(new Bun.CryptoHasher("sha256").update(data).digest("hex")).toBe(entry.sha256);
    }
  });

  test.skipIf(!Bun.which("file"))("each prebuilt file has the right format", () => {
    const want: Record<string, RegExp> = {
      "linux-x64": /ELF 64-bit LSB shared object, x86-64/,
      "linux-arm64": /ELF 64-bit LSB shared object, ARM aarch64/,
      "darwin-arm64": /Mach-O 64-bit (dynamically linked shared library )?arm64|Mach-O 64-bit arm64 dynamically linked shared library/,
      "darwin-x64": /Mach-O 64-bit (dynamically linked shared library )?x86_64|Mach-O 64-bit x86_64 dynamically linked shared library/,
    };
    for (const t of TARGETS) {
      const out = Bun.spawnSync(["file", "-b", join(PREBUILT_DIR, t, libName(t))]).stdout.toString();
      expect(out).toMatch(want[t]!);
    }
  });

  test.skipIf(!TARGETS.includes(hostTarget() as never))("this process loaded the fresh prebuilt library", () => {
    if (process.env.BUNGPU_LIB || process.env.BUNGPU_NO_PREBUILT) return;
    expect(loadInfo.source).toBe("prebuilt");
    expect(loadInfo.hash).toBe(sourceHash());
  });
});

describe("cache build", () => {
  test("without a usable prebuilt library, shim/ is built into the cache, then reused", () => {
    const cache = mkdtempSync(join(tmpdir(), "bungpu-loader-"));
    try {
      const script = "import { loadInfo, Device } from './src'; const d = Device.open('cpu'); const b = d.alloc(4).write(new Uint8Array([1,2,3,4])); console.log(JSON.stringify({ source: loadInfo.source, sum: b.read().reduce((a, x) => a + x, 0) }))";
      const env = { ...process.env, BUNGPU_NO_PREBUILT: "1", BUNGPU_CACHE_DIR: cache };
      const first = Bun.spawnSync(["bun", "-e", script], { cwd: root, env });
      expect(first.stderr.toString()).toBe("");
      expect(JSON.parse(first.stdout.toString())).toEqual({ source: "built", sum: 10 });
      const second = Bun.spawnSync(["bun", "-e", script], { cwd: root, env });
      expect(JSON.parse(second.stdout.toString())).toEqual({ source: "cache", sum: 10 });
      // BUNGPU_SHIM_OPT (the loader tests' quick builds) is cached apart: it never stands in for
      // the default -O2 build, nor the -O2 build for it
      const quick = Bun.spawnSync(["bun", "-e", script], { cwd: root, env: { ...env, BUNGPU_SHIM_OPT: "0" } });
      expect(JSON.parse(quick.stdout.toString())).toEqual({ source: "built", sum: 10 });
      expect(readdirSync(join(cache, "shim")).sort().map((d) => d.replace(/-[0-9a-f]{16}/, "-HASH"))).toEqual([`${process.platform}-${process.arch}-HASH`, `${process.platform}-${process.arch}-HASH-O0`]);
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  }, 120_000);

  test("with no compiler and no library, the error lists what was tried", () => {
    // A copy of the package outside any node_modules tree (so no zig), with an empty PATH.
    const cache = mkdtempSync(join(tmpdir(), "bungpu-loader-"));
    const pkg = mkdtempSync(join(tmpdir(), "bungpu-pkg-"));
    try {
      for (const d of ["src", "ffi", "shim"]) cpSync(join(root, d), join(pkg, d), { recursive: true });
      rmSync(join(pkg, "ffi", "prebuilt"), { recursive: true, force: true });
      const script = "try { await import('./src') } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })) }";
      const env = { ...process.env, BUNGPU_CACHE_DIR: cache, BUNGPU_CC: "/nonexistent/cc", PATH: "/nonexistent" };
      const r = Bun.spawnSync([process.execPath, "-e", script], { cwd: pkg, env });
      const out = JSON.parse(r.stdout.toString());
      expect(out.code).toBe(990);
      expect(out.message).toMatch(/BUNGPU_CC/);
      expect(out.message).toMatch(/prebuilt/);
      expect(out.message).toMatch(/cc on PATH/);
      expect(out.message).toMatch(/zig in node_modules \(not found\)/);
    } finally {
      rmSync(cache, { recursive: true, force: true });
      rmSync(pkg, { recursive: true, force: true });
    }
  }, 60_000);
});
