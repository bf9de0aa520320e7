// CommandEncoder.dispatch checks the launch geometry against the device's limits as it is
// appended, like Kernel.launch (h6_findings.md #1: a block of 2048 was accepted and only commit
// refused it, after the commands before it had run).
import { afterAll, expect, test } from "bun:test";
import { Device, Program, Status } from "../src";
import { CommandEncoder } from "../src/encoder";
import { expectGpuError } from "./helpers";
import { kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "limits" });
const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
const s = dev.createStream();
afterAll(() => {
  s.dispose();
  mod.dispose();
  dev.dispose();
});

test("dispatch refuses a grid or block the device cannot launch, as Kernel.launch does; the encoder is unchanged", () => {
  const n = 256;
  const b = dev.alloc(4 * n).write(new Float32Array(n).fill(1));
  const enc = new CommandEncoder(dev);
  enc.dispatch(addScalar, { grid: 2, block: 128, args: [b, 1, n] });
  const bad = [
    { grid: 2, block: 2048 },
    { grid: 1, block: [1, 1, 128] },
    { grid: 1, block: [2048, 1, 1] },
    { grid: 1, block: [64, 64, 1] },
    { grid: [1, 70000], block: 1 },
    { grid: [1, 1, 70000], block: 1 },
  ] as const;
  for (const g of bad) {
    // Kernel.launch refuses each one...
    expectGpuError(() => addScalar.launch(s, { ...g, args: [b, 1, n] }), Status.INVALID_VALUE);
    // ...and so does dispatch, at once, naming the kernel
    const e = expectGpuError(() => enc.dispatch(addScalar, { ...g, args: [b, 1, n] }), Status.INVALID_VALUE, /add_scalar.*exceeds the limits/);
    expect(e.call).toBe("CommandEncoder.dispatch");
  }
  expect(enc.commandCount).toBe(1);
  // the largest block the kernel allows is accepted; the good commands all run
  const max = addScalar.maxThreadsPerBlock;
  enc.dispatch(addScalar, { grid: 1, block: max, args: [b, 2, Math.min(n, max)] });
  enc.commit(s);
  s.synchronize();
  const out = b.read(Float32Array);
  expect(out[0]).toBe(4);
  expect(out[n - 1]).toBe(max >= n ? 4 : 2);
  b.dispose();
});
