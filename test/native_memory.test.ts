// Native memory the collector knows about (issue 11, "lost memory"): a loop of forgotten buffers
// stays near its budget instead of piling up, because an allocation that would pass the budget
// collects first and frees what it found dead, synchronously; a disposed Device object frees its
// memory even while another Device object keeps the native device open. Each case runs in a
// subprocess (its own budget, and a use-after-free would crash it), measured by memoryStats.
import { expect, test } from "bun:test";
import { join } from "node:path";

const MiB = 2 ** 20;

function run(mode: string, budget?: string): Record<string, any> {
  const env = { ...process.env };
  delete env.BUNGPU_GC_BUDGET;
  if (budget !== undefined) env.BUNGPU_GC_BUDGET = budget;
  const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "fixtures", "native_memory.ts"), mode], {
    env,
    stdout: "pipe",
    stderr: "pipe",
    timeout: 90_000,
  });
  expect({ exitCode: r.exitCode, stderr: r.stderr.toString() }).toEqual({ exitCode: 0, stderr: "" });
  return JSON.parse(r.stdout.toString().trim().split("\n").pop()!);
}

test("2,000 forgotten 4 MiB buffers (and 500 host buffers) stay under a 32 MiB budget", () => {
  const out = run("loop", "32M");
  expect(out.peakDevice).toBeLessThanOrEqual(32 * MiB); // the working set is 4 MiB; 8 GB were allocated
  expect(out.peakHost).toBeLessThanOrEqual(32 * MiB);
  expect(out.collections).toBeGreaterThan(0);
  expect(out.viewKept).toBe(true); // a live TypedArray view keeps its forgotten HostBuffer's memory
}, 120_000);

test("without the budget the same loop piles up (what the budget prevents)", () => {
  const out = run("off", "off");
  expect(out.collections).toBe(0);
  expect(out.peakDevice).toBeGreaterThan(64 * MiB); // 40 iterations: 160 MiB live, none collected
}, 60_000);

test("disposing a Device object frees its buffers and host buffers while another holds the native device", () => {
  const out = run("device");
  expect(out.allocatedMiB).toBeGreaterThanOrEqual(256);
  expect(out.hostAllocatedMiB).toBe(16);
  expect(out.liveAfterMiB).toBeLessThan(0.01); // only the other object's 1 KiB
  expect(out.hostAfterMiB).toBe(0);
  expect(out.rssDropMiB).toBeGreaterThanOrEqual(192); // the 272 MiB really went back
  expect(out.viewDetached).toBe(true);
  expect(out.buffersDisposed).toBe(true);
  expect(out.otherStillWorks).toBe(true);
  expect(out.heldByExec).toBe(true); // in use by another object's graph: kept…
  expect(out.replayHarmless).toBe(true);
  expect(out.keptAfterReplay).toBe(true);
  expect(out.freedWithExec).toBe(true); // …and freed when that graph's exec goes
  expect(out.liveEnd).toBe(0);
}, 60_000);

test("RSS follows the budget: 600 forgotten 8 MiB buffers and 300 host buffers grow RSS by at most the budget plus a margin", () => {
  const out = run("rss");
  expect(out.budget).toBe(256 * MiB);
  expect(out.collections).toBeGreaterThan(0);
  expect(out.peakLive).toBeLessThanOrEqual(256 * MiB);
  // the margin is the JavaScript heap and the collector's own growth; before, freed blocks stayed
  // in malloc's heap and RSS grew 310-420 MB
  const limit = 256 * MiB + 40 * MiB;
  expect(out.rssGrowthDevice).toBeLessThanOrEqual(limit);
  expect(out.rssGrowthHost).toBeLessThanOrEqual(limit);
}, 120_000);

test("OUT_OF_MEMORY after a collection and retry is a GpuError; setMemoryBudget validates", () => {
  const out = run("oom");
  expect(out).toEqual({ thrown: "GpuError", collected: true, live: 0, badBudget: "GpuError", budget: 64 * MiB });
}, 60_000);
