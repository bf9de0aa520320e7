// Launches of one graph exec on several streams run in launch order (CUDA orders each launch of an
// exec behind its previous launches). The CPU backend used to run whichever launch reached the exec
// first, which could deadlock on an event wait inside the exec (the fuzzer's seed 201, 100000 calls:
// a hang). In a subprocess with a time limit: the old behaviour hangs.
import { expect, test } from "bun:test";
import { join } from "node:path";

const root = join(import.meta.dir, "..");

test("a graph exec launched on two streams replays in launch order: no deadlock on its event wait", () => {
  const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/exec_launch_order.ts")], {
    cwd: root,
    timeout: 30_000,
    env: { ...process.env, BUNGPU_DEVICE: "" },
  });
  if (r.exitCode !== 0) console.error(r.stderr.toString().slice(-2000));
  expect(r.signalCode ?? null).toBeNull();
  expect(r.exitCode).toBe(0);
  // both replays ran (p = p * 10 + 1, twice), after the host function that held stream B
  expect(JSON.parse(r.stdout.toString().trim().split("\n").pop()!)).toEqual({ released: true, value: 11 });
}, 60_000);
