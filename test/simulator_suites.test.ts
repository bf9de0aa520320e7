// Issue 22 item 3, in part: the README's and guides' blocks run on the CUDA driver simulator too, in
// every `bun test`: test/sim_suite.sh (BUNGPU_DEVICE=cuda:0, the simulator as libcuda, real NVRTC,
// kernels as host twins) runs test/readme.test.ts in a subprocess, beside a check that the run's
// default device really was cuda:0. (The fuzzer drives CPU devices and CPU C kernels by design;
// a CUDA run of it needs CUDA kernel sources and a second simulated device: not yet.)
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { nvrtc } from "./nvrtc_env";

const root = join(import.meta.dir, "..");
const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");
const nv = process.platform === "linux" && cc ? nvrtc() : ({ ok: false, reason: "needs Linux and a C compiler" } as const);

describe("the README blocks on the CUDA driver simulator", () => {
  test.skipIf(!nv.ok)(`README and guide blocks pass with cuda:0 the default device${nv.ok ? "" : ` (skipped: ${nv.reason})`}`, () => {
    const r = Bun.spawnSync(["bash", join(root, "test/sim_suite.sh"), "test/fixtures/on_device.test.ts", "test/readme.test.ts"], {
      cwd: root,
      env: { ...process.env, BUNGPU_EXPECT_DEVICE: "cuda:0", BUNGPU_NVRTC: nv.ok ? nv.lib : "" },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 280_000,
    });
    const out = r.stdout.toString() + r.stderr.toString();
    if (r.exitCode !== 0) console.error(out.slice(-6000));
    expect(out).toContain("sim_suite: BUNGPU_DEVICE=cuda:0");
    expect(out).toMatch(/\(pass\) the suite runs on cuda:0/);
    expect(out).toMatch(/\(pass\) every README and guide ts block runs as pasted/);
    expect(out).toMatch(/\n\s*0 fail/);
    expect(r.exitCode).toBe(0);
  }, 300_000);
});
