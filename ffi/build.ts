// bun run build:shim — cross-compile libbungpu for every platform with `zig cc` into
// ffi/prebuilt/<platform>-<arch>/ and write ffi/prebuilt/manifest.json with the source hash.
// `bun run build:shim --host` builds only this machine's target (with zig, or cc if no zig).
// Either way ffi/constants.ts is regenerated from shim/bungpu.h first.
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { findCompilers } from "./compilers";
import { writeConstants } from "./gen_constants";
import { compileArgs, hostTarget, libName, PREBUILT_DIR, sourceHash, TARGETS, ZIG_TRIPLE, type Target } from "./shimsrc";
import { ABI_VERSION } from "./sys";

export interface Manifest {
  abiVersion: number;
  sourceHash: string;
  compiler: string;
  targets: Record<string, { file: string; bytes: number; sha256: string }>;
}

function run(argv: string[]): { ok: boolean; err: string } {
  const r = Bun.spawnSync(argv, { stdout: "pipe", stderr: "pipe" });
  return { ok: r.exitCode === 0, err: new TextDecoder().decode(r.stderr) };
}

export function buildAll(targets: Target[] = TARGETS): Manifest {
  const zig = findCompilers().list.find((c) => c.kind === "zig");
  if (!zig) throw new Error("build:shim needs zig (bun install puts it in node_modules)");
  const hash = sourceHash();
  const zv = Bun.spawnSync([zig.argv[0]!, "version"], { stdout: "pipe" });
  const compiler = `zig ${new TextDecoder().decode(zv.stdout).trim()}`;
  const manifestPath = join(PREBUILT_DIR, "manifest.json");
  const manifest: Manifest = existsSync(manifestPath)
    ? (JSON.parse(readFileSync(manifestPath, "utf8")) as Manifest)
    : { abiVersion: ABI_VERSION, sourceHash: hash, compiler, targets: {} };
  if (manifest.sourceHash !== hash) manifest.targets = {};
  manifest.abiVersion = ABI_VERSION;
  manifest.sourceHash = hash;
  manifest.compiler = compiler;
  for (const t of targets) {
    const dir = join(PREBUILT_DIR, t);
    mkdirSync(dir, { recursive: true });
    const out = join(dir, libName(t));
    const tmp = `${out}.tmp`;
    // -s strips debug info: the prebuilt files ship in the package.
    const r = run([...zig.argv, "-target", ZIG_TRIPLE[t], "-s", ...compileArgs(tmp, t, hash)]);
    if (!r.ok) {
      rmSync(tmp, { force: true });
      throw new Error(`build:shim ${t} failed:\n${r.err}`);
    }
    renameSync(tmp, out);
    const data = readFileSync(out);
    manifest.targets[t] = {
      file: `${t}/${libName(t)}`,
      bytes: data.byteLength,
      sha256: new Bun.CryptoHasher("sha256").update(data).digest("hex"),
    };
    console.log(`built ${t}: ${data.byteLength} bytes`);
  }
  writeFileSync(manifestPath, JSON.stringify(manifest, null, 2) + "\n");
  return manifest;
}

if (import.meta.main) {
  if (writeConstants()) console.log("ffi/constants.ts regenerated from shim/bungpu.h");
  const host = process.argv.includes("--host");
  const t = hostTarget() as Target;
  buildAll(host ? [t] : TARGETS);
  console.log(`source hash ${sourceHash()}`);
}
