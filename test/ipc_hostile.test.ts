// Hostile handles and dying peers (issue 23, items 1 and 2). Each scenario runs in a subprocess
// with a time limit: test/fixtures/ipc_hostile.ts (the importer, which starts the exporter) or
// test/fixtures/collective_hangs.ts. Before the fixes a forged size crashed the importer with
// SIGSEGV, a dead exporter's event hung it, and so did disposing a rank left waiting.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Device, Status } from "../src";
import { expectGpuError } from "./helpers";

const root = join(import.meta.dir, "..");
const linux = process.platform === "linux";
const HANDLE_CODE = { code: Status.INVALID_HANDLE, call: "bg_ipc_mem_open" };

function run(scenario: string, limitMs = 30_000): Record<string, unknown> {
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/ipc_hostile.ts"), scenario], {
    cwd: root,
    timeout: limitMs,
    killSignal: "SIGKILL",
    env: { ...process.env, BUNGPU_DEVICE: "" },
  });
  const stderr = r.stderr.toString();
  expect(r.signalCode ?? null, `${scenario} died or hung past ${limitMs} ms\n${stderr}`).toBeNull();
  expect(r.exitCode, stderr).toBe(0);
  const line = r.stdout.toString().trim().split("\n").pop() ?? "";
  return JSON.parse(line) as Record<string, unknown>;
}

describe.skipIf(!linux)("an opened shared buffer is exactly the exported allocation (item 1)", () => {
  test("a handle whose size was edited larger is INVALID_HANDLE, opened alone or beside the genuine one", () => {
    const o = run("forged-larger");
    expect(o.real).toBe(8192);
    expect(o.larger).toEqual(HANDLE_CODE); // was: opened as 1 MiB of an 8 KiB mapping, read → SIGSEGV
    expect(o.largerBytes).toBeUndefined();
    expect(o.alone).toEqual(HANDLE_CODE);
    expect(o.sum).toBe(8192 * 7);
  }, 60_000);

  test("a small forged handle is refused, and the genuine one still opens whole", () => {
    const o = run("forged-smaller");
    expect(o.smaller).toEqual(HANDLE_CODE); // was: opened, and the genuine open then reused its one page
    expect(o.real).toBe(8192);
    expect(o.sum).toBe(8192 * 7);
    expect(o.page).toEqual(HANDLE_CODE); // the same page count, another size: still not the handle
  }, 60_000);

  test("payload bytes the exporter writes as zeros, the header's reserved word and an event handle's size are checked", () => {
    const o = run("forged-payload");
    expect(o.payload).toEqual(HANDLE_CODE);
    expect(o.reserved).toEqual({ code: Status.INVALID_VALUE, call: "bg_ipc_mem_open" });
    expect(o.real).toBe(8192 * 7);
    expect(o.eventSize).toEqual({ code: Status.INVALID_VALUE, call: "bg_ipc_event_open" }); // was: opened as the genuine event
    expect(o.event).toBe(true);
  }, 60_000);

  test("handle strings are parsed strictly: an extra trailing base64 character is refused", () => {
    const dev = Device.open("cpu");
    using buf = dev.alloc(64, { shareable: true });
    using ev = dev.createEvent({ interprocess: true });
    for (const h of [buf.exportHandle(), ev.exportHandle()]) {
      for (const extra of ["A", "Q", "AA", "-"]) {
        expectGpuError(() => dev.openSharedBuffer(h + extra), Status.INVALID_VALUE, /not a handle from exportHandle|a handle is 96 bytes/);
        expectGpuError(() => dev.openSharedEvent(h + extra), Status.INVALID_VALUE, /not a handle from exportHandle|a handle is 96 bytes/);
      }
      expectGpuError(() => dev.openSharedBuffer(h.slice(0, -1)), Status.INVALID_VALUE);
      expectGpuError(() => dev.openSharedBuffer(h + "="), Status.INVALID_VALUE);
      expectGpuError(() => dev.openSharedBuffer(" " + h), Status.INVALID_VALUE);
    }
    // the genuine string still reaches the shim (which refuses it in the exporting process)
    expectGpuError(() => dev.openSharedBuffer(buf.exportHandle()), Status.INVALID_CONTEXT);
  });
});

describe.skipIf(!linux)("nothing waits on another process forever (item 2)", () => {
  test("an interprocess event whose exporter died before reaching its record: done(), synchronize(), query() and waits fail", () => {
    const o = run("dead-exporter");
    expect(o.before).toBe(false);
    const lost = (call: string) => ({ code: Status.ILLEGAL_STATE, call });
    expect(o.done).toEqual(lost("bg_event_query")); // was: never settled
    expect(o.sync).toEqual(lost("bg_event_synchronize")); // was: blocked forever
    expect(o.query).toEqual(lost("bg_event_query"));
    expect(o.wait).toEqual(lost("bg_stream_wait_event"));
    expect(o.queued).toBe("no error"); // a wait queued before the death ends; the event says why
  }, 60_000);

  function collective(scenario: string, limitMs = 30_000, env: Record<string, string> = {}): Record<string, unknown> {
    const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/collective_hangs.ts"), scenario], {
      cwd: root,
      timeout: limitMs,
      killSignal: "SIGKILL",
      env: { ...process.env, BUNGPU_DEVICE: "", BUNGPU_CPU_DEVICES: "2", ...env },
    });
    const stderr = r.stderr.toString();
    expect(r.signalCode ?? null, `${scenario} died or hung past ${limitMs} ms\n${stderr}`).toBeNull();
    expect(r.exitCode, stderr).toBe(0);
    return JSON.parse(r.stdout.toString().trim().split("\n").pop() ?? "{}") as Record<string, unknown>;
  }

  test("Communicator.dispose() and Device.dispose() with a collective waiting for a rank that never comes abort it and return", () => {
    for (const s of ["dispose-comm", "dispose-device"]) {
      const o = collective(s);
      expect(o.returned).toBe(true);
      expect(o.disposed).toBe(true);
      expect(o.other).toEqual({ code: Status.ILLEGAL_STATE, call: "bg_comm_check" }); // every rank sees the abort
    }
  }, 60_000);

  test("a buffer disposed inside Communicator.group() is held until the group issues its collective (item 3)", () => {
    for (const check of ["", "1"]) {
      const o = collective("dispose-in-group", 30_000, { BUNGPU_CHECK: check });
      expect(o.rank1).toEqual([2]); // was 1 (default mode) or 8 (checked mode: the freed memory's new owner was summed)
      expect(o.otherIntact).toBe(true); // was false in checked mode: the all-reduce wrote into a live buffer
    }
  }, 60_000);

  test("a rank's device disposed inside Communicator.group() closes once the group issued its collective (it crashed)", () => {
    for (const check of ["", "1"]) {
      const o = collective("device-dispose-in-group", 30_000, { BUNGPU_CHECK: check }); // was: SIGSEGV
      expect(o).toEqual({ openInGroup: true, closedAfter: true, sum: [11, 22, 33, 44], check: "no error" });
    }
  }, 60_000);

  test("after every rank joined, a second initRank with a taken rank is refused (it waited forever)", () => {
    const o = collective("rejoin");
    expect(o.again).toEqual({ code: Status.INVALID_VALUE, call: "bg_comm_init_rank" });
    expect(o.againRank0).toEqual({ code: Status.INVALID_VALUE, call: "bg_comm_init_rank" });
    expect(o.sum).toEqual([11, 22, 33, 44]);
  }, 60_000);
});
