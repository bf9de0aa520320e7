// No wait that can wait forever (issue 11, item 2). Each scenario runs in a subprocess with a time
// limit (test/fixtures/hangs.ts): before the fixes most of them hung until killed.
import { expect, test } from "bun:test";
import { join } from "node:path";

const root = join(import.meta.dir, "..");

function run(scenario: string, limitMs = 20_000): { out: Record<string, unknown>; code: number | null; stderr: string; ms: number } {
  const t0 = performance.now();
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/hangs.ts"), scenario], {
    cwd: root,
    timeout: limitMs,
    env: { ...process.env, BUNGPU_DEVICE: "" },
  });
  const ms = performance.now() - t0;
  const stderr = r.stderr.toString();
  expect(r.signalCode ?? null, `${scenario} was killed (hung past ${limitMs} ms)\n${stderr}`).toBeNull();
  const line = r.stdout.toString().trim().split("\n").pop() ?? "";
  return { out: line ? JSON.parse(line) : {}, code: r.exitCode, stderr, ms };
}

test("two Device objects on one native device service each other's host functions (synchronize, dispose)", () => {
  const { out, code } = run("two-devices");
  expect(code).toBe(0);
  expect(out).toEqual({ afterSync: ["sync"], afterDispose: ["sync", "dispose"] });
}, 30_000);

test("a stream with a queued host function that then began a capture: stream.dispose() and device.dispose() return", () => {
  for (const s of ["capture-dispose-stream", "capture-dispose-device"]) {
    const { out, code } = run(s);
    expect(code).toBe(0);
    expect(out).toEqual({ result: "disposed", ran: true });
  }
}, 60_000);

test("a host function whose promise never settles does not keep the process alive", () => {
  const { out, code, ms } = run("never-settles");
  expect(code).toBe(0);
  expect(out).toEqual({ started: true });
  expect(ms).toBeLessThan(15_000);
}, 30_000);

test("a host function that throws with no later wait is an unhandled rejection, not dropped", () => {
  const { code, stderr } = run("throws-unwaited");
  expect(code).toBe(1);
  expect(stderr).toContain("BG_ERR_LAUNCH_FAILED");
  expect(stderr).toContain("boom nobody waits for");
}, 30_000);

test("disposing a stream with an unreported host-function failure: dispose() returns, the failure is an unhandled rejection", () => {
  const { out, code, stderr } = run("throws-disposed");
  expect(out).toEqual({ dispose: "returned" });
  expect(code).toBe(1);
  expect(stderr).toContain("boom before dispose");
}, 30_000);

test("device-wide waits report every stream's host-function failures, once", () => {
  const { out, code } = run("throws-device-wait");
  expect(code).toBe(0);
  expect(out).toEqual({ sync: 719, both: true, done: "719 true", clean: true });
}, 30_000);

test("a stream dropped with a host function queued is kept until the function ran (no finaliser deadlock)", () => {
  const { out, code } = run("collect-pending");
  expect(code).toBe(0);
  expect(out).toEqual({ ran: true });
}, 30_000);

test("a Ring-mode kernel dropped while running: the next collections abort it and release its parts, no deadlock", () => {
  const { out, code } = run("ring-gc", 40_000);
  expect(code).toBe(0);
  expect(out).toEqual({ answer: 42, residentBefore: 1, residentAfter: 0 });
}, 60_000);

test("frees while a ring kernel is resident neither wait for it nor fill its queue (100,000 dispose() calls)", () => {
  const { out, code } = run("ring-frees", 40_000);
  expect(code).toBe(0);
  expect(out).toEqual({ frees: 100_000, answer: 3 });
}, 60_000);

test("device.dispose() with a resident ring kernel and a host function queued elsewhere returns", () => {
  const { out, code } = run("ring-dispose-hostfn");
  expect(code).toBe(0);
  expect(out).toEqual({ ran: true, ringDisposed: true });
}, 30_000);

test("a Worker terminated mid-capture: its capture ends with its thread, and the device allocates again", () => {
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/capture_exit.ts")], { cwd: root, timeout: 30_000 });
  expect(r.signalCode ?? null).toBeNull();
  expect(r.exitCode).toBe(0);
  const out = JSON.parse(r.stdout.toString().trim().split("\n").pop()!);
  expect(out.worker).toBe("Active");
  expect(out.whileCapturing).toBe(900); // STREAM_CAPTURE_UNSUPPORTED: the Worker's Global capture is open
  expect(out.afterTerminate).toBe("ok");
}, 45_000);
