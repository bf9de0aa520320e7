// The C backend table (shim/backends.c): a backend is its folder, one line in the table and its
// TypeScript record. The proof: the whole library built with one more line,
// -D'BG_EXTRA_BACKENDS(X)=X(null)', and the test's one stand-in backend (shim/test/stub_backend.c)
// as the null backend's folder, lists the backend by name after the others, at the next number,
// opens its device, and every call on it is BG_ERR_NOT_SUPPORTED naming it; a number past the end
// is an error, not some backend. The backends every build has keep their numbers.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Status } from "../ffi/result";
import { compileArgs, hostTarget, libName, SHIM_DIR } from "../ffi/shimsrc";

const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");

describe("the C backend table", () => {
  test.skipIf(!cc || process.platform === "win32")("a null backend added by one table line is listed by name and refuses every call cleanly", () => {
    const dir = mkdtempSync(join(tmpdir(), "bg-table-"));
    try {
      const target = hostTarget();
      const lib = join(dir, libName(target));
      const extra = [join(SHIM_DIR, "test/stub_backend.c"), "-DBG_EXTRA_BACKENDS(X)=X(null)", "-DBG_STUBS(X)=X(null, 1)", "-O0", "-Wextra"];
      const b = Bun.spawnSync([cc!, ...compileArgs(lib, target), ...extra], { stderr: "pipe", timeout: 120_000 });
      const err = b.stderr.toString();
      expect(err).not.toMatch(/backends\.c|stub_backend\.c|error:/);
      expect(b.exitCode).toBe(0);
      const r = Bun.spawnSync(["bun", join(import.meta.dir, "fixtures/null_backend.ts")], {
        stdout: "pipe",
        stderr: "pipe",
        env: { ...process.env, BUNGPU_LIB: lib },
        timeout: 60_000,
      });
      const text = r.stdout.toString();
      expect(r.stderr.toString()).toBe("");
      expect(r.exitCode).toBe(0);
      const out = JSON.parse(text.trim().split("\n").pop()!);
      expect(out.numbers).toEqual({ cpu: 0, cuda: 1, metal: 2, null: 3 });
      expect(out.info).toEqual({ available: true, devices: 1, message: "" });
      for (const [call, got] of Object.entries(out.calls)) expect([call, got]).toEqual([call, { code: Status.NOT_SUPPORTED, call: `bg_${call}` }]);
      expect(out.message).toMatch(/bg_mem_alloc: not supported on the null backend/);
      expect(out.past).toEqual({ code: Status.INVALID_VALUE, call: "bg_backend_info" });
      // TypeScript lists the backends it has records of: the null backend has none here
      expect(out.records.sort()).toEqual(["cpu", "cuda", "metal"]);
      expect(out.closed).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
