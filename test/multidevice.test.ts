// Several devices on the CPU backend (BUNGPU_CPU_DEVICES=N, read when a device is opened, so
// each case runs test/fixtures/multidevice.ts in a subprocess with a time limit): peer access and
// its CUDA error codes, copies between devices peer to peer and staged with their values, stream
// order across devices (a slow kernel before the copy, an event of one device waited for by
// another's stream), and schedules whose steps run on two devices. References are computed here.
import { describe, expect, test } from "bun:test";
import { Status } from "../src";
import { randomFloats } from "./helpers";

function runCase(name: string, devices: number, env: Record<string, string> = {}): Record<string, any> {
  const r = Bun.spawnSync(["bun", "run", `${import.meta.dir}/fixtures/multidevice.ts`, name], {
    env: { ...process.env, BUNGPU_CPU_DEVICES: String(devices), BUNGPU_DEVICE: "cpu", ...env },
    cwd: `${import.meta.dir}/..`,
    timeout: 60_000,
  });
  const err = r.stderr.toString();
  expect(r.exitCode, err).toBe(0);
  return JSON.parse(r.stdout.toString());
}

const code = (s: unknown): number => Number(String(s).split(":")[0]);

describe("several CPU devices", () => {
  test("peer and staged copies between devices carry the right bytes and say which path they took", () => {
    const out = runCase("copies", 3);
    expect(out.devices).toEqual(["cpu", "cpu:1", "cpu:2"]);
    expect(out.access).toEqual([true, true, false]); // a device is not its own peer
    const x = Array.from(randomFloats(1 << 16, 7));
    expect(out.staged).toBe("staged"); // no access enabled yet: staged, not refused
    expect(out.stagedValues).toEqual(x);
    expect(out.peer).toBe("peer");
    const peer = new Array(1100).fill(0);
    for (let i = 0; i < 1000; i++) peer[7 + i] = x[100 + i];
    expect(out.peerValues).toEqual(peer);
    // cpu:1's stream pulls from itself into cpu:2 without access: staged
    expect(out.pullFromB).toBe("staged");
    expect(out.pullValues).toEqual(peer.concat(new Array(900).fill(0)).slice(0, 2000));
    expect(out.sameDevice).toBe("device");
    expect(out.afterDisable).toBe("staged");
  });

  test("a copy waits for the work before it on its stream, and an event of one device orders another's stream", () => {
    const out = runCase("ordering", 2);
    const n = 30000;
    const all = (v: number) => new Array(n).fill(v);
    // the slow kernel's value everywhere: the copy ran after it, on the source stream
    expect(out.results["push_false_staged"]).toEqual(all(4));
    expect(out.results["push_true_peer"]).toEqual(all(5));
    // cpu:1's stream waited for cpu:0's event before pulling, then added 1
    expect(out.results["wait_false_staged"]).toEqual(all(6 + 1));
    expect(out.results["wait_true_staged"]).toEqual(all(7 + 1)); // cpu:1 has no access to cpu:0
  });

  test("peer access follows CUDA's rules, and bad input is a GpuError", () => {
    const out = runCase("errors", 3);
    expect(code(out.enableTwice)).toBe(Status.PEER_ACCESS_ALREADY_ENABLED);
    expect(out.enableTwice).toMatch(/bg_device_enable_peer_access/);
    expect(code(out.disableNotEnabled)).toBe(Status.PEER_ACCESS_NOT_ENABLED);
    expect(code(out.enableSelf)).toBe(Status.INVALID_DEVICE);
    expect(code(out.enableThroughSecondHandle)).toBe(Status.PEER_ACCESS_ALREADY_ENABLED); // one native device
    for (const k of ["enableNotDevice", "canAccessNull", "streamOnNeither", "pastEnd", "badOffset", "notBuffer", "stepDevice", "stepNotBuffer", "stepPastEnd"])
      expect([k, code(out[k])]).toEqual([k, Status.INVALID_VALUE]);
    expect(code(out.disposedBuffer)).toBe(Status.INVALID_HANDLE);
    expect(code(out.graphMode)).toBe(Status.NOT_SUPPORTED);
    expect(code(out.multiStreamMode)).toBe(Status.NOT_SUPPORTED);
    expect(out.enableAfterClose).toBe("no error"); // closing the device dropped the access
    expect(code(out.disabledDevice)).toBe(Status.INVALID_HANDLE);
  });

  test("a schedule with steps on two devices gives the values of running its steps in order", () => {
    const out = runCase("schedule", 2);
    const n = 5000;
    const x = Array.from(randomFloats(n, 3));
    // y = x + x (cpu:0); z = y (copy) + (3 + r) on cpu:1; w = z (copy); out = w + x (cpu:0)
    const expected = (r: number) => x.map((v) => Math.fround(Math.fround(Math.fround(v + v) + (3 + r)) + v));
    expect(out.devicesOfExec).toEqual(["cpu", "cpu:1"]);
    expect(out.streamOf).toEqual([0, 0, 1, 1, 0]);
    expect(out.waits).toEqual([[], [], [1], [], [3]]); // one event each way between the devices
    expect(out.runs.length).toBe(3);
    for (let r = 0; r < 3; r++) expect(out.runs[r]).toEqual(expected(r));
    expect(out.paths).toEqual({ "1": "staged", "3": "peer" }); // cpu:1 enabled access to cpu:0 only
    expect(out.eager).toEqual(expected(0));
    expect(out.fromB).toEqual(expected(0)); // setArg changed the executable, not the schedule's steps
  });

  test("closing a device waits for another device's stream still copying into its memory", () => {
    // checked mode unmaps freed device memory: a copy landing after the close would crash the
    // subprocess (it does without the wait)
    const out = runCase("closeDuring", 2, { BUNGPU_CHECK: "1" });
    expect(out.path).toBe("staged");
    expect(out.queryBeforeClose).toBe(false); // the copy was still queued behind the slow kernel
    expect(out.queryAfterClose).toBe(true); // the close waited for it
    expect(out.x).toEqual([9]);
  });

  test("four devices list and open, each its own", () => {
    const out = runCase("copies", 4);
    expect(out.devices).toEqual(["cpu", "cpu:1", "cpu:2", "cpu:3"]);
    expect(out.stagedValues).toEqual(Array.from(randomFloats(1 << 16, 7)));
  });
});
