// dispose() never throws and never deadlocks inside a host function (issue 23, item 9): the
// scenarios run in a subprocess with a time limit (test/fixtures/dispose_hostfn.ts).
import { expect, test } from "bun:test";
import { join } from "node:path";

const root = join(import.meta.dir, "..");

test("a stream or device disposed while one of its async host functions awaits is disposed once it settles", () => {
  const limit = 20_000;
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/dispose_hostfn.ts")], {
    cwd: root,
    timeout: limit,
    killSignal: "SIGKILL",
    env: { ...process.env, BUNGPU_DEVICE: "" },
  });
  const stderr = r.stderr.toString();
  expect(r.signalCode ?? null, `hung past ${limit} ms (was: the JS thread blocked forever)\n${stderr}`).toBeNull();
  expect(r.exitCode, stderr).toBe(0);
  const out = JSON.parse(r.stdout.toString().trim().split("\n").pop() ?? "{}");
  expect(out).toEqual({
    ownStreamAfterAwait: "returned",
    otherStreamAwaiting: "returned",
    deviceFromHostFn: "returned",
    ranAfter: true,
    slowDone: true,
    streamDisposed: true,
    otherDisposed: true,
    deviceOpen: false,
  });
}, 30_000);
