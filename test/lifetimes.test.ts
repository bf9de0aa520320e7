// Lifetimes that follow the data (issue 11, item 1): what a captured graph's exec replays stays
// alive until the exec goes, and argument updates check the kernel. In a subprocess with a time
// limit: before these rules a replay wrote freed memory or jumped into unloaded code (a crash).
import { expect, test } from "bun:test";
import { join } from "node:path";

const root = join(import.meta.dir, "..");

test("a GraphExec keeps its buffers and module past dispose() and collection; setKernelArgs checks the kernel", () => {
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/exec_lifetimes.ts"), "cpu"], {
    cwd: root,
    timeout: 60_000,
    env: { ...process.env, BUNGPU_DEVICE: "" },
  });
  expect(r.signalCode ?? null).toBeNull();
  expect(r.exitCode).toBe(0);
  const out = JSON.parse(r.stdout.toString());
  // disposed while the exec uses it: disposed to the caller, its memory kept until the exec goes
  expect(out.disposedIsDisposed).toBe(true);
  expect(out.keptBytes).toBe(0);
  expect(out.freshUntouched).toBe(true);
  expect(out.freedBytes).toBe(4096);
  // dropped and collected: the exec holds them, and a replay touches no one else's memory
  expect(out.collectedKept).toBe(0);
  expect(out.junkUntouched).toBe(true);
  // a disposed module's code stays loaded for the exec (1 + 1 = 2 everywhere)
  expect(out.afterModuleDispose).toBe(2);
  expect(out.setArgsDisposedModule).toBe(400); // INVALID_HANDLE: the kernel's module is gone
  // another kernel with the same argument count: INVALID_VALUE naming the node's kernel, exec unchanged
  expect(out.wrongKernel).toBe("1 true");
  expect(out.afterRefused).toBe(2);
  expect(out.setArgsKept).toBe(true);
  // commands committed from a CommandEncoder into the capture are kept alike
  expect(out.encoderKept).toBe(true);
  expect(out.encoderSetArgs).toBe(2);
  // a stream disposed mid-capture ends its capture, so collected buffers are freed again
  expect(out.capturesAfterDispose).toBe(0);
  expect(out.forgottenFreed).toBe(true);
}, 90_000);
