// `bun --preload` for runs against the CUDA driver simulator: every CUDA source compiled through
// Program.compile also gets host twins translated from it (twins.ts) in $CUDASIM_TWINS_DIR, which
// BUNGPU_SIM_KERNELS must list first. The suite under test runs unchanged.
import { join } from "node:path";
import { Program } from "../../../src/kernel";
import { buildTwins } from "./twins";

const dir = process.env.CUDASIM_TWINS_DIR;
const cc = process.env.CUDASIM_TWINS_CC ?? Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");
const shimDir = join(import.meta.dir, "..", "..");
if (dir && cc) {
  const original = Program.compile;
  Program.compile = function (device, source, opts) {
    if (device.backend === "cuda") {
      const src = typeof source === "string" ? source : source.cuda;
      if (typeof src === "string" && src) buildTwins(src, dir, cc, shimDir);
    }
    return original.call(this, device, source, opts);
  };
}
