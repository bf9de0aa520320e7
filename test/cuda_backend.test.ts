// Regression tests of the CUDA backend against the CUDA driver simulator (shim/test/cudasim):
// shim/test/cuda_backend/backend_test.c, each check for a defect that the backend had, under
// ASan/UBSan. The names below are the checks it must report as passing.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";

const root = join(import.meta.dir, "..");
const gcc = Bun.which("gcc");

const CHECKS = [
  "CUDA_MODULE_LOADING",
  "CUDA_DEVICE_MAX_CONNECTIONS",
  "no context is left current on the calling thread",
  "still none after alloc, memset, free",
  "bg_memset is complete on return",
  "bg_memcpy_dtod is complete on return",
  "bg_memcpy_htod (pageable) is complete on return",
  "props report the opt-in shared memory limit",
  "a launch with 100 KiB of dynamic shared memory",
  "a launch with all the shared memory the props report",
  "one byte more is refused with INVALID_VALUE",
  "cuMemAlloc during a global capture is refused",
  "end_capture names the call that invalidated the capture",
  "a later capture on the stream ends cleanly",
  "the persistent kernel runs",
  "free, free host, module unload return while a persistent kernel is resident",
  "a device-wide wait is refused, not hung",
  "other streams work beside the resident kernel",
  "the put-off free happened once the kernel had finished",
  "an exec runs a kernel of a module unloaded after capture",
];

describe("CUDA backend against the driver simulator", () => {
  test.skipIf(!gcc || process.platform !== "linux")("backend_test: every check passes, no sanitizer report", () => {
    const r = Bun.spawnSync(["bash", join(root, "shim/test/cuda_backend/run.sh")], { stdout: "pipe", stderr: "pipe", timeout: 240_000 });
    const out = r.stdout.toString();
    const err = r.stderr.toString();
    expect(err).not.toMatch(/ERROR: AddressSanitizer|runtime error:/);
    expect(out).not.toContain("FAIL");
    for (const c of CHECKS) expect(out).toContain(`ok   ${c}\n`);
    expect(out.match(/^0 failures$/gm)?.length).toBe(2); // the run with defaults and the one with the user's settings
    expect(r.exitCode).toBe(0);
  }, 300_000);
});
