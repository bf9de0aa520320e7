// The CUDA driver simulator (shim/test/cudasim): its own tests of each driver rule it models, and
// the cross-backend suites (test/backends.test.ts, test/stream_sync.test.ts) run unchanged against
// it, in subprocesses.
//
// The suites' "on cuda:0" blocks run the CUDA backend through the simulator: real NVRTC builds the
// CUBINs, the simulator loads them and runs each kernel as a host twin translated from the
// kernel's own CUDA C (twins_preload.ts; a block's threads are coroutines switched at barriers),
// or, where C cannot express the source, the CPU kernel of the same name, which a first CPU-only
// run of the suites compiles into a fresh cache.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nvrtc } from "./nvrtc_env";

const root = join(import.meta.dir, "..");
const simDir = join(root, "shim/test/cudasim");
const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");
const gcc = Bun.which("gcc");
const linux = process.platform === "linux";
const nvcc = Bun.which("nvcc") ?? (existsSync("/usr/local/cuda/bin/nvcc") ? "/usr/local/cuda/bin/nvcc" : null);

/** The environment without any variable that would point the run at another driver or device. */
function baseEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !/^(BUNGPU_LIBCUDA|BUNGPU_DEVICE|BUNGPU_SIM_KERNELS|BUNGPU_CACHE_DIR|CUDASIM_)/.test(k)) env[k] = v;
  return { ...env, ...extra };
}

describe("CUDA driver simulator", () => {
  test.skipIf(!gcc || !linux)("its own tests: each modelled driver rule, under ASan/UBSan", () => {
    const work = mkdtempSync(join(tmpdir(), "bungpu-cudasim-"));
    try {
      const env: Record<string, string> = baseEnv({});
      if (nvcc) {
        // Real nvcc output for both image paths: a struct parameter, __launch_bounds__, static
        // shared memory, and a kernel of 128 registers (at most 512 threads a block on sm_90).
        writeFileSync(
          join(work, "k.cu"),
          `extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
struct S { double x; int y; char z; };
extern "C" __global__ void __launch_bounds__(256) odd(char c, short s, S st, double d, float* p) { __shared__ float sh[64]; sh[threadIdx.x % 64] = d; p[0] = c + s + st.x + st.y + sh[0]; }
extern "C" __global__ void heavy(const float* a, float* out) {
  float v[96];
#pragma unroll
  for (int i = 0; i < 96; i++) v[i] = a[threadIdx.x + i * 1024];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 96; i++)
#pragma unroll
    for (int j = 0; j < 96; j += 7) s += v[i] * v[(j + i) % 96] + v[j];
#pragma unroll
  for (int i = 0; i < 96; i++) out[threadIdx.x + i * 1024] = v[i] * s;
}
`,
        );
        for (const [flag, file, key] of [["-cubin", "k.cubin", "CUDASIM_TEST_CUBIN"], ["-ptx", "k.ptx", "CUDASIM_TEST_PTX"]] as const) {
          const r = Bun.spawnSync([nvcc, flag, "-arch=sm_90", "-o", join(work, file), join(work, "k.cu")], { stderr: "pipe", timeout: 60_000 });
          if (r.exitCode === 0) env[key] = join(work, file);
        }
      }
      const r = Bun.spawnSync(["bash", join(simDir, "run.sh"), "sim_test"], { env, stdout: "pipe", stderr: "pipe", timeout: 150_000 });
      const out = r.stdout.toString();
      expect(r.stderr.toString()).not.toMatch(/ERROR: AddressSanitizer|runtime error:/);
      expect(out).not.toContain("FAIL");
      for (const want of [
        "ok streams: asynchronous, legacy/blocking/non-blocking ordering",
        "ok API synchronization behaviour",
        "ok host functions: one serialized driver thread, CUDA calls from it give 800",
        "ok implicit sync control: returns",
        "ok implicit sync memfree: deadlocks",
        "ok implicit sync memfreehost: deadlocks",
        "ok implicit sync moduleunload: deadlocks",
        "ok implicit sync ctxsync: deadlocks",
        "ok capture legality: 900 901 902 903 904 905 906 907 908",
        "ok graphs: memset/memcpy/kernel/host nodes",
        "ok event timing: 400 unrecorded / no timing, 600 pending",
        "ok launch limits",
        "ok modules: PTX entries only (500 otherwise)",
        "ok mapped pinned memory: same address, shared with a running kernel",
        "ok hardware queues: streams sharing one of CUDA_DEVICE_MAX_CONNECTIONS queues wait for each other",
        "ok memory pools: reuse in stream order (same stream, completed free, event order)",
        "ok sticky 700",
      ])
        expect(out).toContain(want);
      if (env.CUDASIM_TEST_CUBIN) expect(out).toContain("ok CUBIN from nvcc: kernels, parameter layout");
      if (env.CUDASIM_TEST_CUBIN) expect(out).toContain("200 for a CUDA 13 CUBIN on a 12.8 driver");
      if (env.CUDASIM_TEST_PTX) expect(out).toContain("ok PTX from nvcc: kernels, parameter layout");
      expect(out).toMatch(/sim_test: \d+ checks, 0 failures/);
      expect(r.exitCode).toBe(0);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 180_000);

  // test/sim_suite.sh runs the WHOLE suite this way (BUNGPU_DEVICE=cuda:0, as on a lent GPU); too
  // slow for every run, so only its syntax is checked here.
  test("test/sim_suite.sh (the whole suite on the simulator) is valid bash", () => {
    const r = Bun.spawnSync(["bash", "-n", join(root, "test/sim_suite.sh")], { stderr: "pipe" });
    expect(r.stderr.toString()).toBe("");
    expect(r.exitCode).toBe(0);
  });

  const nv = linux && cc ? nvrtc() : ({ ok: false, reason: "needs Linux and a C compiler" } as const);

  const suites = ["test/backends.test.ts", "test/stream_sync.test.ts"];

  /**
   * Once for the file: the simulator built, and the suites run CPU-only into a fresh cache (which
   * compiles the CPU kernels, the twins of last resort). Both simulator runs below share it.
   */
  let prepared: { work: string; sim: string; cache: string; twins: string } | null = null;
  afterAll(() => {
    if (prepared) rmSync(prepared.work, { recursive: true, force: true });
  });
  function simSetup(): { sim: string; cache: string; twins: string } {
    if (prepared) return prepared;
    if (!nv.ok || !cc) throw new Error("unreachable");
    const work = mkdtempSync(join(tmpdir(), "bungpu-cudasim-suite-"));
    prepared = { work, sim: join(work, "libcudasim.so"), cache: join(work, "cache"), twins: join(work, "twins") };
    const b = Bun.spawnSync(["sh", join(simDir, "build.sh"), work], { env: baseEnv({ CC: cc }), stdout: "pipe", stderr: "pipe" });
    expect(b.stderr.toString()).toBe("");
    const cpu = Bun.spawnSync([process.execPath, "test", ...suites], {
      cwd: root,
      env: baseEnv({ BUNGPU_CACHE_DIR: prepared.cache }),
      stdout: "pipe",
      stderr: "pipe",
      timeout: 120_000,
    });
    expect(cpu.exitCode).toBe(0);
    return prepared;
  }

  /** The suites against the simulator (the shared setup first); their output. */
  function suiteOnSimulator(extraEnv: Record<string, string>): { out: string; exitCode: number | null } {
    if (!nv.ok) throw new Error("unreachable");
    const { sim, cache, twins } = simSetup();
    const r = Bun.spawnSync([process.execPath, "test", "--preload", join(simDir, "twins_preload.ts"), ...suites], {
      cwd: root,
      env: baseEnv({
        BUNGPU_CACHE_DIR: cache,
        BUNGPU_LIBCUDA: sim,
        BUNGPU_NVRTC: nv.lib,
        BUNGPU_SIM_KERNELS: `${twins}:${join(cache, "kernels", "cpu")}`,
        CUDASIM_TWINS_DIR: twins,
        ...extraEnv,
      }),
      stdout: "pipe",
      stderr: "pipe",
      timeout: 150_000,
    });
    return { out: r.stdout.toString() + r.stderr.toString(), exitCode: r.exitCode };
  }

  function expectAllPassed(r: { out: string; exitCode: number | null }) {
    const cudaPassed = r.out.match(/^\(pass\) [^\n]*\bon cuda:0 > /gm)?.length ?? 0;
    const cpuPassed = r.out.match(/^\(pass\) [^\n]*\bon cpu > /gm)?.length ?? 0;
    if (r.exitCode !== 0) console.error(r.out.slice(-4000));
    expect(r.out).not.toContain("(fail)");
    expect(cpuPassed).toBeGreaterThanOrEqual(15); // 8 + 9 cases when this was written
    expect(cudaPassed).toBe(cpuPassed); // every case of the suite ran on the simulated CUDA device
    expect(r.exitCode).toBe(0);
  }

  test.skipIf(!nv.ok)(`backends.test.ts and stream_sync.test.ts run unchanged on the simulator${nv.ok ? "" : ` (skipped: ${nv.reason})`}`, () => {
    expectAllPassed(suiteOnSimulator({}));
  }, 300_000);

  // Every queued copy and memset 3 ms late: work that is not ordered after a synchronous copy or
  // fill would read stale bytes (before ad2a0c0 the ring's state fill and the tensor plan's input
  // upload raced their non-blocking streams this way; the driver queues cuMemsetD* and pageable
  // cuMemcpyHtoD on the legacy stream and returns early).
  // New device memory is filled with 0xff bytes too (cuMemAlloc does not clear it).
  test.skipIf(!nv.ok)("the same suites on the simulator with every copy and memset delayed, new memory poisoned", () => {
    expectAllPassed(suiteOnSimulator({ CUDASIM_DELAY_US: "3000", CUDASIM_POISON: "1" }));
  }, 300_000);
});
