// tsconfig.json is strict: the whole package (src, ffi, test, bench) must type-check.
import { expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dir, "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");

test.skipIf(!existsSync(tsc))("tsc --noEmit reports no errors", () => {
  const r = Bun.spawnSync([process.execPath, tsc, "-p", root], { cwd: root, stdout: "pipe", stderr: "pipe" });
  expect(r.stdout.toString() + r.stderr.toString()).toBe("");
  expect(r.exitCode).toBe(0);
}, 120_000);
