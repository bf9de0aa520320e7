// The safety net: native objects whose owners are forgotten are released when collected.
import { expect, test } from "bun:test";
import { join } from "node:path";

test.skipIf(process.platform !== "linux")("forgotten streams, events and modules are released by the finaliser", () => {
  const r = Bun.spawnSync(["bun", "run", join(import.meta.dir, "fixtures", "forgotten_resources.ts")], {
    cwd: join(import.meta.dir, ".."),
  });
  expect(r.stderr.toString()).toBe("");
  const out = JSON.parse(r.stdout.toString());
  expect(out.w1).toBe(out.w0 + 16); // sixteen stream workers were running
  expect(out.released.stream).toBe(16);
  expect(out.released.event).toBe(16);
  expect(out.released.module).toBeGreaterThanOrEqual(1);
  expect(out.w2).toBe(out.w0); // and their threads are gone
  expect(out.afterDispose).toBe(16); // a disposed stream is not released twice
  expect(out.buffers).toEqual([8 << 20, 0]); // forgotten buffers freed, and counted as freed
}, 60_000);
