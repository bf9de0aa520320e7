// A persistent RingKernel never finishes on its own: device-wide waits (Device.synchronize,
// Device.done) leave its stream out, and frees while it runs do not wait for it. Run in a
// subprocess with a time limit, on the CPU and on CUDA with the driver simulator (host twins
// translated from the ring kernel's CUDA C, shim/test/cudasim/twins_preload.ts).
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { testDriver } from "./cuda_driver";
import { nvrtc } from "./nvrtc_env";

const root = join(import.meta.dir, "..");
const STEPS = ["ok answered 42", "ok Device.synchronize returned", "ok Device.done resolved", "ok free while resident", "ok answered 2", "ok stopped"];

function run(backend: string, env: Record<string, string>, preload: string[] = []): { out: string; err: string; code: number | null } {
  const r = Bun.spawnSync([process.execPath, ...preload, join(root, "test/fixtures/ring_resident.ts"), backend], {
    env: { ...process.env, ...env },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 60_000,
  });
  return { out: r.stdout.toString(), err: r.stderr.toString(), code: r.exitCode };
}

describe("device-wide waits beside a resident persistent kernel", () => {
  test("cpu: synchronize, done and free return while the ring runs", () => {
    const r = run("cpu", {});
    for (const s of STEPS) expect(r.out).toContain(s);
    expect(r.code).toBe(0);
  }, 90_000);

  const rtc = nvrtc();
  const drv = testDriver();
  test.skipIf(!rtc.ok || !drv.ok)("cuda (simulator): synchronize, done and free return while the ring runs", () => {
    if (!rtc.ok || !drv.ok) return;
    const twins = mkdtempSync(join(tmpdir(), "bungpu-twins-"));
    try {
      const r = run(
        "cuda",
        { BUNGPU_LIBCUDA: drv.lib, BUNGPU_NVRTC: rtc.lib, CUDASIM_TWINS_DIR: twins, BUNGPU_SIM_KERNELS: twins },
        ["--preload", join(root, "shim/test/cudasim/twins_preload.ts")],
      );
      expect(r.out).toContain("mode ring");
      for (const s of STEPS) expect(r.out).toContain(s);
      expect(r.code).toBe(0);
    } finally {
      rmSync(twins, { recursive: true, force: true });
    }
  }, 120_000);
});
