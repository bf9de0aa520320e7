// TypeScript host functions hold no driver thread on CUDA (the stream waits on a mapped word with
// cuStreamWaitValue32): a host function that waits for another stream's host function finishes.
// With the previous hand-off (a parked cuLaunchHostFunc callback, BUNGPU_HOSTFN_SIGNALS=1) this
// deadlocked on CUDA. In a subprocess with a time limit, on the CPU and on the CUDA simulator.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { testDriver } from "./cuda_driver";
import { nvrtc } from "./nvrtc_env";

const root = join(import.meta.dir, "..");
const STEPS = ["ok order b,a", "ok 50 host functions ran", "ok blocking waits 100,101", "ok in order 1,2", "ok disposed"];

function run(backend: string, env: Record<string, string> = {}): { out: string; code: number | null } {
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/hostfn_cross_stream.ts"), backend], {
    env: { ...process.env, ...env },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 30_000,
  });
  return { out: r.stdout.toString() + r.stderr.toString(), code: r.exitCode };
}

describe("host functions across streams", () => {
  test("cpu", () => {
    const r = run("cpu");
    for (const s of STEPS) expect(r.out).toContain(s);
    expect(r.code).toBe(0);
  }, 60_000);

  const rtc = nvrtc();
  const drv = testDriver();
  test.skipIf(!drv.ok)("cuda (simulator): no driver thread is parked, nothing deadlocks", () => {
    if (!drv.ok) return;
    const r = run("cuda", { BUNGPU_LIBCUDA: drv.lib, ...(rtc.ok ? { BUNGPU_NVRTC: rtc.lib } : {}) });
    for (const s of STEPS) expect(r.out).toContain(s);
    expect(r.code).toBe(0);
  }, 60_000);
});
