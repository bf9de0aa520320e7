// The safety net: native objects whose owners are forgotten are released when collected.
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { Device, Program } from "../src";
import { finalized } from "../src/lifetime";
import { cpuKernels } from "./kernels";

/** Stream worker threads alive in this process (the CPU backend names them "bg-stream"). */
const threads = () =>
  readdirSync("/proc/self/task").filter((t) => {
    try {
      return readFileSync(`/proc/self/task/${t}/comm`, "utf8").trim() === "bg-stream";
    } catch {
      return false; // the thread ended while we looked
    }
  }).length;

test.skipIf(process.platform !== "linux")("forgotten streams, events and modules are released by the finaliser", async () => {
  const dev = Device.open("cpu");
  const before = { ...finalized };
  const t0 = threads();
  (() => {
    for (let i = 0; i < 16; i++) {
      const s = dev.createStream(); // one worker thread each on the CPU backend
      s.synchronize();
      dev.createEvent().record(s);
    }
    Program.compile(dev, cpuKernels);
  })();
  const t1 = threads();
  expect(t1).toBeGreaterThanOrEqual(t0 + 16);
  for (let i = 0; i < 20 && finalized.stream - before.stream < 16; i++) {
    Bun.gc(true);
    await Bun.sleep(10);
  }
  expect(finalized.stream - before.stream).toBe(16);
  expect(finalized.event - before.event).toBe(16);
  expect(finalized.module - before.module).toBeGreaterThanOrEqual(1);
  expect(threads()).toBe(t1 - 16); // the 16 workers are gone
  // and what is disposed explicitly is not released twice
  const s = dev.createStream();
  s.dispose();
  Bun.gc(true);
  await Bun.sleep(10);
  Bun.gc(true);
  expect(finalized.stream - before.stream).toBe(16);
  dev.dispose();
});
