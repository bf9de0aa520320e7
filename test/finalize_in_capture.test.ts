// Finalisers never release inside an open capture (bg_mem_free, bg_event_destroy... there are
// illegal and invalidate it): releases are queued and run when the capture ends. In a
// subprocess (it forces collections), on the CPU and on CUDA with the driver simulator.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { testDriver } from "./cuda_driver";
import { nvrtc } from "./nvrtc_env";

const root = join(import.meta.dir, "..");

function run(backend: string, env: Record<string, string> = {}): string {
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/finalize_in_capture.ts"), backend], {
    env: { ...process.env, ...env },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 60_000,
  });
  return r.stdout.toString() + r.stderr.toString();
}

function expectClean(out: string): void {
  expect(out).toContain("collected during the capture: buffers released 0, events released 0");
  expect(out).toContain("ok the capture ended cleanly");
  // once it ended, every collected buffer and event was released
  expect(out).toContain("after: live allocations 0, events released 64");
}

describe("finalisers during a capture", () => {
  test("cpu: releases wait for the capture's end", () => expectClean(run("cpu")), 90_000);

  const rtc = nvrtc();
  const drv = testDriver();
  test.skipIf(!rtc.ok || !drv.ok)("cuda (simulator): releases wait for the capture's end", () => {
    if (!rtc.ok || !drv.ok) return;
    expectClean(run("cuda", { BUNGPU_LIBCUDA: drv.lib, BUNGPU_NVRTC: rtc.lib }));
  }, 90_000);
});
