// BUNGPU_CHECK=1: guard pages around CPU device allocations, and a fault inside a CPU kernel is
// a sticky GpuError 700 (ILLEGAL_ADDRESS) naming the kernel, the process surviving. Without it a
// fault in a kernel is a crash, as a bad pointer in any native code, but one line on stderr names
// the kernel and BUNGPU_CHECK=1 first (issue 23 item 9). Each case in a subprocess.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";

const fixture = join(import.meta.dir, "fixtures", "oob_kernel.ts");

function run(what: string, check: boolean) {
  const env: Record<string, string> = { ...process.env } as Record<string, string>;
  if (check) env.BUNGPU_CHECK = "1";
  else delete env.BUNGPU_CHECK;
  return Bun.spawnSync([process.execPath, fixture, what], { env, stdout: "pipe", stderr: "pipe", timeout: 60_000 });
}

describe("checked mode (BUNGPU_CHECK=1)", () => {
  for (const what of ["past-end", "far"]) {
    test(`an out-of-bounds write (${what}) is a sticky 700 naming the kernel; the process lives on`, () => {
      const r = run(what, true);
      const out = r.stdout.toString();
      if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode} signal ${r.signalCode}\n${out}\n${r.stderr.toString()}`);
      const j = JSON.parse(out.trim().split("\n").pop()!);
      expect(j.before).toEqual([2, 2]);
      expect(j.sync.code).toBe(700);
      expect(j.sync.message).toContain('kernel "oob_write"');
      expect(j.sync.message).toContain("ILLEGAL_ADDRESS");
      // every later call on the device returns the same sticky error
      for (const k of ["alloc", "read", "launch", "stream", "deviceSync"]) {
        expect(j[k]?.code).toBe(700);
        expect(j[k].message).toContain('kernel "oob_write"');
      }
      // releasing still works, and a device opened afterwards starts clean
      expect(j.disposed).toBe(true);
      expect(j.after).toEqual([7, 7, 7, 7]);
    }, 90_000);
  }

  for (const what of ["far", "far-inline"]) {
    test(`without BUNGPU_CHECK the same write (${what}) kills the process by a signal, after one line naming the kernel and BUNGPU_CHECK=1`, () => {
      const r = run(what, false);
      expect(r.exitCode === 0).toBe(false);
      // Bun's crash handler re-raises the fault: the process ends by SIGSEGV (or SIGBUS/SIGILL/SIGABRT
      // where the runtime turns it into an abort), never a normal exit
      expect(["SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGTRAP"]).toContain(String(r.signalCode ?? "none"));
      // before the runtime's crash report (which blames the runtime), one line of ours says whose it is
      const err = r.stderr.toString();
      const ours = err.split("\n").filter((l) => l.startsWith("bungpu:"));
      expect(ours).toHaveLength(1);
      expect(ours[0]).toContain('CPU kernel "oob_write" faulted (SIG');
      expect(ours[0]).toContain("BUNGPU_CHECK=1");
      const banner = err.indexOf("Bun has crashed");
      if (banner >= 0) expect(err.indexOf("bungpu:")).toBeLessThan(banner);
    }, 90_000);
  }

  test("a fault outside any kernel is left to the runtime, never named as a kernel's", () => {
    const r = run("outside", false);
    expect(["SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGTRAP"]).toContain(String(r.signalCode ?? "none"));
    expect(r.stderr.toString()).not.toContain("bungpu:");
  }, 90_000);
});
