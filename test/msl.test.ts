// Every MSL source bungpu ships or generates (the Metal backend's built-in kernels, the test
// kernels, the ring batch kernel, every kernel the tensor codegen emits for the demo models) is
// parsed and type-checked as C++17 against a small stand-in for <metal_stdlib> kept in
// shim/test/metal_stdlib: syntax errors, undeclared names and wrong calls show up without a Mac.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { mslSources } from "./shipped_sources";

const root = join(import.meta.dir, "..");
const cxx = Bun.which("g++") ?? Bun.which("clang++");
if (!cxx) console.log("msl.test.ts: skipped, no g++ or clang++");

function check(dir: string, name: string, source: string): { code: number | null; err: string } {
  const file = join(dir, `${name.replace(/\W+/g, "_")}.metal`);
  writeFileSync(file, source);
  const r = Bun.spawnSync([cxx!, "-x", "c++", "-std=c++17", "-fsyntax-only", "-Wno-attributes", `-I${join(root, "shim/test/metal_stdlib")}`, file], {
    stdout: "pipe",
    stderr: "pipe",
    timeout: 60_000,
  });
  return { code: r.exitCode, err: r.stderr.toString() };
}

describe("MSL syntax check", () => {
  test.skipIf(!cxx)("every shipped and generated MSL source parses and type-checks", () => {
    const dir = mkdtempSync(join(tmpdir(), "bungpu-msl-"));
    try {
      const sources = mslSources();
      expect(sources.map((s) => s.name.replace(/ \(\d+ kernels\)$/, ""))).toEqual([
        "metal backend built-ins",
        "test kernels",
        "ring (msl)",
        "tensor MLP",
        "transformer block",
        "64-bit indexing",
        "elementwise ops",
        "movement ops",
        "reduction ops",
        "conv and pool ops",
        "attention and einsum",
        "block tree reductions",
        "dtypes",
      ]);
      for (const s of sources) {
        expect(s.kernels.length).toBeGreaterThan(0);
        expect(s.source).toContain("#include <metal_stdlib>");
        const r = check(dir, s.name, s.source);
        if (r.code !== 0) throw new Error(`${s.name}:\n${r.err}`);
        expect(r.err).toBe("");
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  test.skipIf(!cxx)("a deliberate error in each kind of source fails the check", () => {
    const dir = mkdtempSync(join(tmpdir(), "bungpu-msl-bad-"));
    try {
      for (const s of mslSources()) {
        const k = s.kernels[0]!;
        // a missing semicolon after the first statement of the first kernel
        const broken = s.source.replace(new RegExp(`(kernel void ${k}\\([^{]*\\{[^;]*);`), "$1");
        expect(broken).not.toBe(s.source);
        expect(check(dir, `${s.name}_syntax`, broken).code).not.toBe(0);
      }
      // an undeclared function and a misspelt type are caught too, not only syntax
      const base = mslSources()[1]!.source;
      expect(check(dir, "undeclared", base.replace("c[i] = a[i] + b[i];", "c[i] = expp(a[i]) + b[i];")).code).not.toBe(0);
      expect(check(dir, "type", base.replace("uint i [[thread_position_in_grid]]", "uin i [[thread_position_in_grid]]")).code).not.toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
