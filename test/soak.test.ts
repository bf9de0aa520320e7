// A short soak (issue 23, "Done when"; the 3-minute one is `bun run bench/soak.ts`, its curve in
// README): for 10 s plans are prepared, run (each answer checked) and disposed, and buffers of
// random sizes are allocated, a third of them left to the collector. In a subprocess with a time
// limit; RSS after the first 4 s must stay flat: over 1-second windows, the last 3 s's highest
// peak and trough no more than 48 MiB above the 3 s before. The budget is 16 MiB, so the
// sawtooth of forgotten buffers (at most the budget plus one 16 MiB buffer) stays well inside the
// margin however slowly a loaded machine runs the loop; what the margin catches is growth that
// stays.
import { expect, test } from "bun:test";
import { join } from "node:path";

test("10 s of plans and buffers, a third forgotten: RSS flat after the warm-up", () => {
  const r = Bun.spawnSync(
    [process.execPath, join(import.meta.dir, "..", "bench", "soak.ts"), "--seconds", "10", "--every", "1", "--warmup", "4", "--budget", "16", "--margin", "48", "--json"],
    { stdout: "pipe", stderr: "pipe", timeout: 90_000, killSignal: "SIGKILL", env: { ...process.env, BUNGPU_DEVICE: "cpu" } },
  );
  const stderr = r.stderr.toString();
  expect(r.signalCode ?? null, stderr).toBeNull();
  const out = JSON.parse(r.stdout.toString().trim().split("\n").pop() ?? "{}");
  expect(out.planRuns, stderr).toBeGreaterThan(0); // every run's answer was checked
  expect(out.forgotten).toBeGreaterThan(0);
  expect(out.collections).toBeGreaterThan(0);
  expect({ flat: out.flat, peakGrowthMiB: out.peakGrowthMiB, troughGrowthMiB: out.troughGrowthMiB, windows: out.windows }).toMatchObject({ flat: true });
  expect(r.exitCode).toBe(0);
}, 120_000);
