// `bun --preload` for runs against the CUDA driver simulator: every CUDA source compiled through
// Program.compile also gets host twins translated from it (twins.ts) in $CUDASIM_TWINS_DIR, which
// BUNGPU_SIM_KERNELS must list first. The suite under test runs unchanged.
//
// The hook is appended to src/kernel.ts when the program itself loads it (a runtime plugin), rather
// than imported here: importing it would load libbungpu before the program does, which the loader's
// own tests (a damaged cache must be rebuilt by the program's load) would see; and a packaged copy
// of bungpu elsewhere gets the hook too. test/sim_suite.sh puts this file in BUN_OPTIONS, so every
// Bun process of the suite has it.
import { plugin } from "bun";
import { join } from "node:path";

const dir = process.env.CUDASIM_TWINS_DIR;
const cc = process.env.CUDASIM_TWINS_CC ?? Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");
const shimDir = join(import.meta.dir, "..", "..");
const flag = Symbol.for("bungpu.cudasim.twinsPreload");
const g = globalThis as Record<symbol, unknown>;

if (dir && cc && !g[flag]) {
  g[flag] = true;
  const twins = JSON.stringify(join(import.meta.dir, "twins.ts"));
  const hook = `
import { buildTwins as __cudasimBuildTwins } from ${twins};
{
  const original = Program.compile;
  Program.compile = function (device, source, opts) {
    // Never in the way of the real call: its own argument checks and errors come first.
    try {
      if (device !== null && typeof device === "object" && device.backend === "cuda") {
        const src = typeof source === "string" ? source : source !== null && typeof source === "object" ? source.cuda : undefined;
        if (typeof src === "string" && src) __cudasimBuildTwins(src, ${JSON.stringify(dir)}, ${JSON.stringify(cc)}, ${JSON.stringify(shimDir)});
      }
    } catch (e) {
      if (process.env.CUDASIM_VERBOSE) console.error("cudasim twins:", e);
    }
    return original.call(this, device, source, opts);
  };
}
`;
  plugin({
    name: "cudasim-twins",
    setup(build) {
      build.onLoad({ filter: /[\\/]src[\\/]kernel\.ts$/ }, async (args) => ({
        contents: (await Bun.file(args.path).text()) + hook,
        loader: "ts",
      }));
    },
  });
}
