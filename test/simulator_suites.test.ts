// Issue 22 item 3: the README's and guides' blocks and the fuzzer run on the CUDA driver simulator
// too, in every `bun test`: test/sim_suite.sh (BUNGPU_DEVICE=cuda:0, the simulator as libcuda,
// real NVRTC, kernels as host twins) runs test/readme.test.ts in a subprocess, beside a check that
// the run's default device really was cuda:0; and a short run of the fuzzer (test/fuzz.test.ts with
// FUZZ_BACKEND=cuda, two simulated devices: CUDASIM_DEVICES=2) whose child must report that it
// drove cuda:0 and cuda:1. The fuzzer's CPU-only surfaces (shared-memory IPC, the cache-damage
// child, checked mode; communicators without NCCL) are left out there, each with its reason in the
// run's summary (test/fuzz/surfaces.ts). Longer runs by hand: FUZZ_BACKEND=cuda FUZZ_CALLS=100000
// bash test/sim_suite.sh test/fuzz.test.ts.
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

describe("the fuzzer on the CUDA driver simulator", () => {
  const CALLS = 4000;
  test.skipIf(!nv.ok)(`${CALLS} random public calls on cuda:0 and cuda:1 (one batch)${nv.ok ? "" : ` (skipped: ${nv.reason})`}`, () => {
    const r = Bun.spawnSync(["bash", join(root, "test/sim_suite.sh"), "test/fuzz.test.ts"], {
      cwd: root,
      env: { ...process.env, FUZZ_BACKEND: "cuda", CUDASIM_DEVICES: "2", FUZZ_CALLS: String(CALLS), FUZZ_BATCHES: "1", FUZZ_SEED: "1", BUNGPU_NVRTC: nv.ok ? nv.lib : "" },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 280_000,
    });
    const out = r.stdout.toString() + r.stderr.toString();
    if (r.exitCode !== 0) console.error(out.slice(-6000));
    expect(out).toContain("sim_suite: BUNGPU_DEVICE=cuda:0");
    // the fuzz test checks each batch's summary named cuda and cuda:0, cuda:1; its line says so too
    const m = out.match(/fuzz: (\d+) calls \((\d+) rejected, (\d+) model checks\) in \d+ ms on backend (\w+)/);
    expect(m?.[4]).toBe("cuda");
    expect(Number(m?.[1])).toBeGreaterThanOrEqual(CALLS);
    expect(Number(m?.[2])).toBeGreaterThan(0);
    expect(out).toMatch(/\(pass\) fuzzer: random public calls/);
    expect(out).toMatch(/\n\s*0 fail/);
    expect(r.exitCode).toBe(0);
  }, 300_000);
});
