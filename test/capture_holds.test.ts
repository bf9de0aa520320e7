// Issue 11: every object a recorded piece of work uses stays alive until that work is done. A
// buffer disposed during the capture that recorded work on it must stay allocated while the graph
// and the execs made from that capture live (h6_findings.md #2; the fuzzer's seed 3, 20000 calls).
// In subprocesses with a time limit: before the fix a replay wrote freed memory (SIGSEGV, or a
// glibc abort in a stream worker); in checked mode freed memory is unmapped, so any late write faults.
import { expect, test } from "bun:test";
import { join } from "node:path";

const root = join(import.meta.dir, "..");

for (const checked of [false, true]) {
  test(`a buffer disposed during a capture stays allocated for the graph and its execs${checked ? " (BUNGPU_CHECK=1)" : ""}`, () => {
    const env: Record<string, string | undefined> = { ...process.env, BUNGPU_DEVICE: "" };
    if (checked) env.BUNGPU_CHECK = "1";
    else delete env.BUNGPU_CHECK;
    const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/capture_dispose_holds.ts"), "cpu"], {
      cwd: root,
      timeout: 60_000,
      env,
    });
    if (r.exitCode !== 0) console.error(r.stderr.toString().slice(-2000));
    expect(r.signalCode ?? null).toBeNull();
    expect(r.exitCode).toBe(0);
    const out = JSON.parse(r.stdout.toString().trim().split("\n").pop()!);
    expect(out).toEqual({
      keptAfterEnd: 1064, // b0 (disposed during the capture) and b1: nothing freed at endCapture
      freshUntouched1: true, // 50 replays into b0's memory touched no later allocation
      keptWhileExec: 128, // b0, kept by the exec after the graph went, and b2
      freedWithExec: 64, // b0 freed with the exec
      freshUntouched2: true,
      keptBeforeExecDispose: 8192,
      freedAfterExecDispose: 4096,
      keptByOther: 256, // two execs: the first dispose keeps it
      freedByLast: 0,
      invalidatedEnd: "GpuError", // no graph: what the capture held is freed, not leaked
      freedAfterInvalidated: 0,
      freedAfterStreamDispose: 0,
      keptOverlap: 128, // another capture ending does not free what this capture used
      freedOverlap: 0,
    });
  }, 90_000);
}
