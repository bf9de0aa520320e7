// No synchronous free, unload or close waits behind a TypeScript host function or a resident
// ring kernel (issue 22): cuMemFree, cuMemFreeHost, cuModuleUnload and cuIpcCloseMemHandle wait
// for all work on the device, and a stream parked at a host function waits for the JS thread that
// is making the call. Memory freed while a ring kernel is resident is reused, not leaked. Each
// scenario of test/fixtures/cuda_release.ts runs in a subprocess with a time limit (before the
// fixes each hung until killed), on the CUDA driver simulator and, as a reference, on the CPU.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { testDriver } from "./cuda_driver";
import { nvrtc } from "./nvrtc_env";

const root = join(import.meta.dir, "..");
const rtc = nvrtc();
const drv = testDriver();
const noSim = !rtc.ok || !drv.ok;

function run(backend: "cpu" | "cuda", scenario: string, limitMs = 30_000): Record<string, unknown> {
  const twins = mkdtempSync(join(tmpdir(), "bungpu-twins-"));
  try {
    const env: Record<string, string | undefined> = { ...process.env, BUNGPU_DEVICE: "" };
    const args = [process.execPath];
    if (backend === "cuda" && rtc.ok && drv.ok) {
      Object.assign(env, { BUNGPU_LIBCUDA: drv.lib, BUNGPU_NVRTC: rtc.lib, CUDASIM_TWINS_DIR: twins, BUNGPU_SIM_KERNELS: twins });
      args.push("--preload", join(root, "shim/test/cudasim/twins_preload.ts"));
    }
    const r = Bun.spawnSync([...args, join(root, "test/fixtures/cuda_release.ts"), backend, scenario], {
      cwd: root,
      env,
      stdout: "pipe",
      stderr: "pipe",
      timeout: limitMs,
    });
    const stderr = r.stderr.toString();
    expect(r.signalCode ?? null, `${backend} ${scenario} was killed (hung past ${limitMs} ms)\n${stderr}`).toBeNull();
    expect(r.exitCode, `${backend} ${scenario}\n${stderr}`).toBe(0);
    const line = r.stdout.toString().trim().split("\n").pop() ?? "";
    return line ? JSON.parse(line) : {};
  } finally {
    rmSync(twins, { recursive: true, force: true });
  }
}

for (const backend of ["cpu", "cuda"] as const) {
  describe.skipIf(backend === "cuda" && noSim)(`${backend}${backend === "cuda" ? " (simulator)" : ""}: releases beside host functions and ring kernels`, () => {
    test("dispose() of a buffer, a module, pinned memory, and the finaliser's frees, with a host function queued: no hang", () => {
      for (const s of ["free", "unload", "host-free", "finalizer"]) expect(run(backend, s)).toEqual({ returned: true, ran: true });
    }, 180_000);

    test("dispose() of a buffer while an async host function runs: no hang", () => {
      expect(run(backend, "free-running")).toEqual({ running: true, returned: true, ran: true });
    }, 60_000);

    test("a free while a ring kernel is resident, an async host function, then stop(): stop() returns", () => {
      expect(run(backend, "ring-stop")).toEqual({ first: 2, stopped: true, ran: true });
    }, 60_000);

    test("bg_ipc_mem_close of an address that is no mapping: an error at once, beside a ring kernel or a host function", () => {
      const ring = run(backend, "ipc-close-ring");
      const fn = run(backend, "ipc-close-hostfn");
      expect(ring.first).toBe(2);
      expect(typeof ring.close).toBe("number"); // a GpuError's code
      expect(fn.close).toBe(ring.close);
      expect(fn.ran).toBe(true);
    }, 90_000);

    test("alloc and free while a ring kernel is resident reuse the memory (used memory stays bounded)", () => {
      const r = run(backend, "ring-reuse", 60_000);
      expect(r.first).toBe(2);
      expect(r.second).toBe(3);
      expect(r.growthMiB as number).toBeLessThan(256); // 400 rounds of 5 MiB: 2 GB if nothing were reused
    }, 90_000);

    // the simulator's device memory is never touched here; the CPU's would be real memory
    test.skipIf(backend === "cpu")("out of memory while a ring kernel is resident: a block freed meanwhile serves the allocation", () => {
      expect(run(backend, "ring-oom", 60_000)).toEqual({ first: 2, alloc: "ok" });
    }, 90_000);
  });
}
