// A libcuda-shaped driver for tests without a GPU, loaded through BUNGPU_LIBCUDA in a subprocess:
// the CUDA driver simulator of shim/test/cudasim (streams on threads, capture rules, launch limits,
// kernels run as host twins), built once per content into a per-user temporary folder.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export type TestDriver = { ok: true; lib: string; kind: string } | { ok: false; reason: string };

const root = join(import.meta.dir, "..");
let cached: TestDriver | undefined;

/** Build (once per process, into a temporary folder) and return the test driver library. */
export function testDriver(): TestDriver {
  if (cached) return cached;
  if (process.platform !== "linux") return (cached = { ok: false, reason: "the test driver is built for Linux only" });
  const gcc = Bun.which("gcc") ?? Bun.which("cc");
  if (!gcc) return (cached = { ok: false, reason: "no C compiler to build the test driver" });
  const src = join(root, "shim/test/cudasim/sim.c");
  if (!existsSync(src)) return (cached = { ok: false, reason: "shim/test/cudasim/sim.c is missing" });
  const dir = join(tmpdir(), `bungpu-testdriver-${process.getuid?.() ?? 0}`);
  mkdirSync(dir, { recursive: true });
  const h = new Bun.CryptoHasher("sha256");
  for (const f of ["shim/test/cudasim/sim.c", "shim/test/cudasim/cudasim.h", "shim/cuda/cuda_api.h", "shim/bungpu_cpu.h"])
    if (existsSync(join(root, f))) h.update(readFileSync(join(root, f)));
  const lib = join(dir, `libcudasim-${h.digest("hex").slice(0, 16)}.so`);
  if (!existsSync(lib)) {
    const work = mkdtempSync(join(dir, "build-"));
    const out = join(work, "lib.so");
    const r = Bun.spawnSync([gcc, "-std=c11", "-O1", "-g", "-fPIC", "-shared", "-o", out, src, "-lpthread", "-ldl"], { stderr: "pipe" });
    if (r.exitCode !== 0) {
      rmSync(work, { recursive: true, force: true });
      return (cached = { ok: false, reason: `building the CUDA simulator failed: ${r.stderr.toString().slice(0, 300)}` });
    }
    renameSync(out, lib);
    rmSync(work, { recursive: true, force: true });
  }
  return (cached = { ok: true, lib, kind: "cudasim" });
}
