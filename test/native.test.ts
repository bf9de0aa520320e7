// Checks of the C side that need no device: the CUDA declarations against the real cuda.h, and
// the CPU backend's own C test under AddressSanitizer and UndefinedBehaviorSanitizer.
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(import.meta.dir, "..");
const cudaInclude = process.env.CUDA_HOME ? join(process.env.CUDA_HOME, "include") : "/usr/local/cuda/include";
const hasCudaH = existsSync(join(cudaInclude, "cuda.h"));
const gcc = Bun.which("gcc");

describe("CUDA driver declarations", () => {
  test.skipIf(!hasCudaH || !gcc)("compile together with the real cuda.h", () => {
    const r = Bun.spawnSync([gcc!, "-std=c11", "-fsyntax-only", `-I${cudaInclude}`, `-I${join(root, "shim")}`, join(root, "shim/test/cuda_decls_check.c")], {
      stderr: "pipe",
    });
    expect(r.stderr.toString()).toBe("");
    expect(r.exitCode).toBe(0);
  });

  test.skipIf(!hasCudaH || !gcc)("a wrong declaration fails the check", () => {
    // Flip one declared signature and one constant in a copy: the check must refuse both.
    const dir = mkdtempSync(join(tmpdir(), "bungpu-decls-"));
    try {
      const api = readFileSync(join(root, "shim/cuda/cuda_api.h"), "utf8");
      // The check includes "cuda/cuda_api.h": give it a shim-like folder holding the mutated copy.
      const { mkdirSync, cpSync } = require("node:fs") as typeof import("node:fs");
      mkdirSync(join(dir, "cuda"));
      cpSync(join(root, "shim/bungpu.h"), join(dir, "bungpu.h"));
      cpSync(join(root, "shim/internal.h"), join(dir, "internal.h"));
      const check = readFileSync(join(root, "shim/test/cuda_decls_check.c"), "utf8");
      writeFileSync(join(dir, "check.c"), check);
      const variants = [
        api.replace("X(CU_STREAM_CAPTURE_MODE_RELAXED, 2)", "X(CU_STREAM_CAPTURE_MODE_RELAXED, 3)"),
        api.replace("cuMemAlloc_v2, (bgcu_deviceptr * dptr, size_t bytes)", "cuMemAlloc_v2, (bgcu_deviceptr * dptr, unsigned int bytes)"),
      ];
      // the unmutated copy passes in the same place, so a failure below is the mutation's
      writeFileSync(join(dir, "cuda", "cuda_api.h"), api);
      const ok = Bun.spawnSync([gcc!, "-std=c11", "-fsyntax-only", `-I${cudaInclude}`, `-I${dir}`, join(dir, "check.c")], { stderr: "pipe" });
      expect(ok.stderr.toString()).toBe("");
      for (const v of variants) {
        expect(v).not.toBe(api); // the mutation applied
        writeFileSync(join(dir, "cuda", "cuda_api.h"), v);
        const r = Bun.spawnSync([gcc!, "-std=c11", "-fsyntax-only", `-I${cudaInclude}`, `-I${dir}`, join(dir, "check.c")], { stderr: "pipe" });
        expect(r.exitCode).not.toBe(0);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * A command's output, without blocking the test thread: the four sanitizer builds below run as
 * concurrent tests (each is seconds of compiling; the two cores share them).
 */
async function run(argv: string[], opts: { cwd?: string; env?: Record<string, string | undefined>; timeoutMs?: number } = {}): Promise<{ stdout: string; stderr: string; exitCode: number | null }> {
  const p = Bun.spawn(argv, { cwd: opts.cwd, env: opts.env ?? process.env, stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => p.kill(9), opts.timeoutMs ?? 170_000);
  const [stdout, stderr, exitCode] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  clearTimeout(timer);
  return { stdout, stderr, exitCode };
}
const sanitizerTest = (runs: boolean) => (runs ? test.concurrent : test.skip);

describe("CUDA backend against the driver simulator", () => {
  // shim/test/cudasim: a libcuda-shaped simulator with the driver's asynchrony and rules; the
  // backend's bookkeeping (contexts, capture records, kernel node order, argument updates, error
  // mapping) is checked through the results its host-twin kernels record.
  sanitizerTest(!!gcc && process.platform === "linux")("every mapped call, capture node order and argument updates, under ASan/UBSan", async () => {
    const r = await run(["bash", join(root, "shim/test/cudasim/run.sh"), "flow"], { timeoutMs: 110_000 });
    const out = r.stdout;
    expect(r.stderr).not.toMatch(/ERROR: AddressSanitizer|runtime error:/);
    expect(out).toContain("info 1 1");
    expect(out).toContain("memset32 1020304");
    expect(out).toContain("memset16 beefbeef");
    expect(out).toContain("mapped dev==host 1");
    expect(out).toContain("same kernel handle 1");
    expect(out).toMatch(/bg_module_load\(dev, BG_IMAGE_PTX, "BAD ptx".*-> 218: cuModuleLoadDataEx: .*Missing \.version directive/);
    expect(out).toMatch(/bg_launch\(kt, .*-> 500: .*twinless has no host twin/);
    expect(out).toContain("nothing ran during capture: []");
    expect(out).toContain("nodes 4 kernel 4");
    expect(out).toContain("replay: vadd(1)x1 scale(77)x2 vadd(99)x3 one(5)x4");
    expect(out).toContain("elapsed >= 90 ms: 1");
    // bg_graph_from_commands: the core's command-list graph, replayed, with an argument update
    expect(out).toContain("list graph nodes 5 kernel 2");
    expect(out).toContain("list replay: vadd(5)x1 scale(6)x2 vadd(5)x1 scale(6)x2 vadd(5)x1 scale(8)x2");
    expect(out).toContain("list memset 7070707");
    // built node by node on the driver (cuGraphAdd*Node), not replayed by the core
    expect(out).toMatch(/set_kernel_args\(cx, 2, up, 3\) -> 1: .*no kernel node 2 \(the graph has 2: launches of its command list/);
    expect(out).toContain("after unload: vadd(9)x1");
    // stream-ordered allocation and pools: the driver's reuse rules, stats, trim, memory nodes
    expect(out).toContain("default pool handle stable 1");
    expect(out).toContain("pool reuse same stream 1 other stream while busy 0");
    expect(out).toContain("pool stats 2048 2048 2048 2048");
    expect(out).toMatch(/bg_mem_free_async\(s4, p3\) -> 1: cuMemFreeAsync: CUDA_ERROR_INVALID_VALUE/);
    expect(out).toContain("pool after trim 1024 0 2048 0");
    expect(out).toContain("pool after sync 0");
    expect(out).toContain("memory graph nodes 4 kernel 0");
    expect(out).toContain("memory graph replayed 5050505");
    // sharing between processes: the driver's own refusals in the exporting process
    expect(out).toMatch(/bg_ipc_mem_open\(dev, mh, &got, &bytes\) -> 201: cuIpcOpenMemHandle_v2: CUDA_ERROR_INVALID_CONTEXT/);
    expect(out).toContain("ipc handles checked");
    expect(out).toContain("0 failures");
    expect(r.exitCode).toBe(0);
  }, 120_000);
});

describe("Metal backend against a mock Objective-C runtime and Metal", () => {
  // The Apple code path, compiled on Linux with an x86_64 objc_msgSend trampoline and a mock GPU
  // thread per queue that enforces Metal's encoder rules.
  sanitizerTest(!!gcc && process.platform === "linux" && process.arch === "x64")("launches, copies, events, host work, submit with barriers, under ASan/UBSan", async () => {
    const r = await run(["sh", join(root, "shim/test/metal_mock/run.sh")]);
    expect(r.stderr).not.toMatch(/FAIL|ERROR: AddressSanitizer|runtime error:/);
    expect(r.stdout).toContain("all mock tests passed");
    expect(r.exitCode).toBe(0);
  }, 180_000);
});

/** The core's sources: every .c directly under shim/. */
const coreSources = (sh: string) => readdirSync(sh).filter((f) => f.endsWith(".c")).map((f) => join(sh, f));

describe("the core in C against a recording fake backend, under sanitizers", () => {
  // shim/test/core_test.c: the command decoder on good and bad lists, one-by-one issue, the
  // synchronous copies built from asynchronous ones, and the generic command-list graph.
  sanitizerTest(!!gcc && process.platform === "linux")("core_test passes under ASan and UBSan", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bg-core-"));
    try {
      const bin = join(dir, "core_test");
      const sh = join(root, "shim");
      const b = await run([gcc!, "-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", `-I${sh}`, "-DBG_STUBS(X)=X(cpu, 0) X(cuda, 0) X(metal, 0)", "-o", bin, join(sh, "test/core_test.c"), join(sh, "test/stub_backend.c"), ...coreSources(sh), "-lpthread"]);
      expect(b.stderr).not.toMatch(/error|warning/);
      expect(b.exitCode).toBe(0);
      const r = await run([bin], { env: { ...process.env, ASAN_OPTIONS: "detect_leaks=1" } });
      const out = r.stdout + r.stderr;
      expect(out).not.toMatch(/ERROR: AddressSanitizer|runtime error:|LeakSanitizer|FAIL/);
      expect(out).toMatch(/core_test: \d+ checks passed/);
      expect(r.exitCode).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe("CPU backend in C under sanitizers", () => {
  sanitizerTest(!!gcc && process.platform === "linux")("cpu_test passes under ASan and UBSan with no report", async () => {
    const r = await run(["bash", join(root, "shim/test/run_sanitizers.sh")], { cwd: root });
    const out = r.stdout + r.stderr;
    expect(out).not.toMatch(/ERROR: AddressSanitizer|runtime error:|LeakSanitizer/);
    expect(out).toMatch(/cpu_test: \d+ checks passed/);
    expect(r.exitCode).toBe(0);
  }, 180_000);
});
