// The CUDA driver simulator is no kinder than the driver (issue 22 item 2): each of its rules
// below has a deliberately broken use that fails as it would on a GPU, beside the same work done
// right. Scenarios run in test/fixtures/cudasim_rules.ts, in a subprocess with a time limit, with
// the simulator as libcuda, real NVRTC, and host twins translated from the kernels' CUDA C.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { testDriver } from "./cuda_driver";
import { nvrtc } from "./nvrtc_env";

const root = join(import.meta.dir, "..");
const rtc = nvrtc();
const drv = testDriver();
const skip = !rtc.ok || !drv.ok;

function run(scenario: string, env: Record<string, string> = {}, limitMs = 60_000): Record<string, any> {
  if (!rtc.ok || !drv.ok) throw new Error("unreachable");
  const twins = mkdtempSync(join(tmpdir(), "bungpu-twins-"));
  try {
    const e: Record<string, string | undefined> = { ...process.env };
    for (const k of Object.keys(e)) if (/^(CUDASIM_|BUNGPU_SIM_KERNELS|BUNGPU_DEVICE)/.test(k)) delete e[k];
    Object.assign(e, { BUNGPU_LIBCUDA: drv.lib, BUNGPU_NVRTC: rtc.lib, CUDASIM_TWINS_DIR: twins, BUNGPU_SIM_KERNELS: twins, ...env });
    const r = Bun.spawnSync([process.execPath, "--preload", join(root, "shim/test/cudasim/twins_preload.ts"), join(root, "test/fixtures/cudasim_rules.ts"), scenario], {
      cwd: root,
      env: e,
      stdout: "pipe",
      stderr: "pipe",
      timeout: limitMs,
    });
    const stderr = r.stderr.toString();
    expect(r.signalCode ?? null, `${scenario} was killed (past ${limitMs} ms)\n${stderr}`).toBeNull();
    expect(r.exitCode, `${scenario}\n${stderr}`).toBe(0);
    return JSON.parse(r.stdout.toString().trim().split("\n").pop() ?? "{}");
  } finally {
    rmSync(twins, { recursive: true, force: true });
  }
}

describe.skipIf(skip)(`CUDA driver simulator rules${skip ? ` (skipped: ${!rtc.ok ? rtc.reason : !drv.ok ? drv.reason : ""})` : ""}`, () => {
  test("threads of a block run in a seeded order: a missing __syncthreads() gives wrong results, the barrier right ones", () => {
    const shuffled = run("race"); // the default seed
    expect(shuffled.thrown).toBeUndefined();
    expect(shuffled.neighbours).toBe(0);
    expect(shuffled.neighbours_racy).toBeGreaterThan(0);
    // The same seed gives the same orders (and the same wrong answers); another seed other ones.
    expect(run("race").neighbours_racy).toBe(shuffled.neighbours_racy);
    const other = run("race", { CUDASIM_SEED: "12345" });
    expect(other.neighbours).toBe(0);
    expect(other.neighbours_racy).toBeGreaterThan(0);
    // CUDASIM_SEED=0 runs threads in index order, which hides this race: the shuffle is what shows it.
    expect(run("race", { CUDASIM_SEED: "0" })).toEqual({ neighbours_racy: 0, neighbours: 0 });
  }, 240_000);

  test("registers come from the CUBIN: a kernel past the register file gets fewer threads a block, and the launch path refuses more", () => {
    const r = run("regs");
    expect(r.thrown).toBeUndefined();
    // NVRTC gives heavy more than 64 registers a thread, so fewer than 1024 threads fit (the
    // simulator used to report 32 registers for every kernel, and 1024 threads).
    expect(r.maxThreads).toBeLessThan(1024);
    expect(r.maxThreads % 32).toBe(0);
    // launch.ts checks a block against the kernel's limit before anything is queued (the driver's
    // own refusal, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, is tested in sim_test.c)
    expect(r.launch1024.code).toBe(1);
    expect(r.launch1024.message).toContain(`1024 threads > ${r.maxThreads} per block for this kernel`);
    expect(r.worst).toBeLessThan(1e-5); // the largest block that fits runs and is right
    // 64 KiB of dynamic shared memory: the backend opts in past 48 KiB, so the launch runs
    expect(r.sharedSum).toBeCloseTo(r.sharedWant, 4);
  }, 120_000);

  test("images are checked against the simulated driver's version: NVRTC 13 on a CUDA 12.4 driver is refused at the compile, a cached CUDA 13 CUBIN at the load", () => {
    const cache = mkdtempSync(join(tmpdir(), "bungpu-rules-cache-"));
    try {
      const old = run("version", { CUDASIM_DRIVER_VERSION: "12040", BUNGPU_CACHE_DIR: cache });
      expect(old.compile.code).toBe(222); // BG_ERR_UNSUPPORTED_PTX_VERSION
      expect(old.compile.message).toMatch(/NVRTC 13\.\d+ .*is newer than the CUDA driver \(CUDA 12\.4\)/);
      expect(old.compile.message).toContain("nvidia-cuda-nvrtc-cu12");
      // On a 13.0 driver the same source compiles, and its CUBIN goes into the kernel cache ...
      expect(run("version", { BUNGPU_CACHE_DIR: cache }).compile).toBe("ok");
      // ... which a later run on the 12.4 driver finds: the driver refuses the CUBIN (a newer
      // CUDA major's ELF) as CUDA_ERROR_INVALID_IMAGE, and the error names the driver.
      const cached = run("version", { CUDASIM_DRIVER_VERSION: "12040", BUNGPU_CACHE_DIR: cache });
      expect(cached.compile.code).toBe(200);
      expect(cached.compile.message).toContain("the driver is CUDA 12.4");
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  }, 180_000);

  test("graph memory: a captured allocation without its free relaunches (AUTO_FREE_ON_LAUNCH), and a second exec while the first lives is refused", () => {
    // Without the backend's handling (instantiated with flags 0, no exec count) the simulator
    // refuses the second launch with INVALID_VALUE, as the driver does; sim_test.c checks the
    // driver-level rules (801 for a second exec, 1 for a relaunch, cuMemFreeAsync in between).
    const r = run("graphmem");
    expect(r.thrown).toBeUndefined();
    expect(r.launch).toBeUndefined();
    expect(r.runs).toEqual([256, 256, 256]);
    expect(r.second.code).toBe(801);
    expect(r.second.message).toContain("one executable graph of such a graph at a time");
    expect(r.again).toBe("ok");
  }, 120_000);

  test("two simulated devices: peer copies after a cross-device event, a kernel reaching the peer's memory with peer access and the peer's pool with pool access, a fault without", () => {
    const r = run("peer", { CUDASIM_DEVICES: "2" });
    expect(r.thrown).toBeUndefined();
    expect(r.devices).toEqual(["cuda:0", "cuda:1"]);
    expect(r.canAccess).toBe(true);
    expect(r.copyPath).toBe("peer");
    expect(r.copied).toBe("right");
    expect(r.plain).toBe("right"); // cuMemAlloc memory: peer access suffices
    // pools made with MemoryPool are granted too, whether made before peer access or after it
    expect({ early: r.customEarly, late: r.customLate }).toEqual({ early: "right", late: "right" });
    // stream-ordered memory: peer access does not extend to pools; the backend grants cuda:1
    // access to cuda:0's default pool when peer access is enabled (before it did not, and this
    // read faulted with 700 on the simulator, as it would on a GPU)
    expect(r.pooled).toBe("right");
    expect(r.withoutAccess.code).toBe(700);
    expect(r.withoutAccess.message).toContain("without peer access");
  }, 120_000);

  test("single-precision math is as loose as CUDA documents it: expf, sinf 2 ulps, logf 1, powf 4 from the correctly rounded result (libm's exactly with CUDASIM_EXACT_MATH=1)", () => {
    const r = run("math");
    expect(r.thrown).toBeUndefined();
    // every result moved by the function's maximum error in CUDA's table, none further; an
    // integer result (expf(0) = 1) exact, as the GPU gives it
    expect(r.expf.maxUlps).toBe(2);
    expect(r.sinf.maxUlps).toBe(2);
    expect(r.logf.maxUlps).toBe(1);
    expect(r.powf.maxUlps).toBe(4);
    for (const f of ["expf", "logf", "sinf", "powf"]) expect(r[f].moved).toBeGreaterThan(200);
    expect(r.exp0).toBe(1);
    const exact = run("math", { CUDASIM_EXACT_MATH: "1" });
    for (const f of ["expf", "logf", "sinf", "powf"]) expect(exact[f]).toEqual({ moved: 0, maxUlps: 0 });
  }, 120_000);
});
