// A host function on a stream that is not capturing is legal while another stream of the thread
// captures, in every CaptureMode; on CUDA it used to fail with 900 and invalidate the capture
// (901 at its end) when it was its device's first host function: the mapped words host functions
// wait on were allocated then (cuMemHostAlloc), an unsafe call under the capture-mode rules. Found
// by the fuzzer on the driver simulator (FUZZ_BACKEND=cuda, seed 1); and one on the legacy stream
// during a capture made a later free hang (seed 2). Runs on the simulator, two
// devices, in a subprocess with a time limit; the CPU backend has no such rule and passed always.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { testDriver } from "./cuda_driver";

const root = join(import.meta.dir, "..");
const drv = testDriver();

function run(mode: string, where: string): Record<string, unknown> {
  if (!drv.ok) throw new Error("unreachable");
  const e: Record<string, string | undefined> = { ...process.env };
  for (const k of Object.keys(e)) if (/^(CUDASIM_|BUNGPU_SIM_KERNELS|BUNGPU_DEVICE)/.test(k)) delete e[k];
  Object.assign(e, { BUNGPU_LIBCUDA: drv.lib, CUDASIM_DEVICES: "2" });
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/hostfn_capture.ts"), mode, where], { cwd: root, env: e, stdout: "pipe", stderr: "pipe", timeout: 30_000 });
  const err = r.stderr.toString();
  expect(r.signalCode ?? null, err).toBeNull();
  expect(r.exitCode, err).toBe(0);
  return JSON.parse(r.stdout.toString().trim().split("\n").pop() ?? "{}");
}

describe.skipIf(!drv.ok)(`host functions beside a capture on CUDA${drv.ok ? "" : ` (skipped: ${drv.reason})`}`, () => {
  for (const mode of ["ThreadLocal", "Global"])
    for (const where of ["other-device", "same-device"])
      test(`${mode} capture, the device's first host function on another stream (${where})`, () => {
        expect(run(mode, where)).toEqual({ mode, where, hostFn: "ok", endCapture: "ok", ran: true });
      }, 120_000);
  // Found by the fuzzer on the simulator (FUZZ_BACKEND=cuda, seed 2): the legacy stream got no
  // gate while a capture was open, so the free after it waited for the host function (a hang).
  for (const mode of ["Relaxed", "ThreadLocal", "Global"])
    test(`a host function on the legacy stream during a ${mode} capture, then a free: no hang`, () => {
      expect(run(mode, "legacy-then-free")).toEqual({ mode, where: "legacy-then-free", disposed: true, ranBeforeSync: false, ran: true });
    }, 120_000);
});
