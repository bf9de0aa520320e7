import { describe, expect, test } from "bun:test";
import { Device, GpuError, Status } from "../src";
import { expectGpuError } from "./helpers";

const cuda = Device.backends().find((b) => b.backend === "cuda")!;

describe("devices", () => {
  test("the CPU backend is always available and lists itself", () => {
    const cpu = Device.backends().find((b) => b.backend === "cpu")!;
    expect(cpu.available).toBe(true);
    expect(cpu.devices).toBeGreaterThanOrEqual(1);
    expect(Device.list()).toContain("cpu");
  });

  test("opening the CPU device gives real properties", () => {
    using d = Device.open("cpu");
    const p = d.props;
    expect(p.backend).toBe("cpu");
    expect(p.name.length).toBeGreaterThan(0);
    expect(p.computeUnits).toBeGreaterThanOrEqual(1);
    expect(p.totalMemory).toBeGreaterThan(64 * 1024 * 1024);
    expect(p.maxThreadsPerBlock).toBeGreaterThanOrEqual(1);
    const m = d.memInfo();
    expect(m.total).toBeGreaterThan(0);
    expect(m.free).toBeGreaterThan(0);
    expect(m.free).toBeLessThanOrEqual(m.total);
    expect(d.spec).toBe("cpu");
  });

  // A process pinned to fewer cores than the machine has (taskset, a container's cpuset) gets
  // one pool thread per core it may use, not per core of the machine.
  test.skipIf(process.platform !== "linux" || !Bun.which("taskset"))("the CPU device counts the cores of the process's affinity mask", () => {
    const r = Bun.spawnSync(
      ["taskset", "-c", "0", process.execPath, "-e", `import { Device } from ${JSON.stringify(require.resolve("../src"))}; using d = Device.open("cpu"); console.log(d.props.computeUnits, d.props.name)`],
      { stdout: "pipe", stderr: "pipe", timeout: 60_000 },
    );
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString()).toMatch(/^1 .*\(1 threads\)/);
  }, 60_000);

  test("Device.default() honours BUNGPU_DEVICE", () => {
    const proc = Bun.spawnSync(["bun", "-e", "import { Device } from './src'; console.log(Device.default().spec)"], {
      env: { ...process.env, BUNGPU_DEVICE: "cpu" },
      cwd: `${import.meta.dir}/..`,
    });
    expect(proc.stdout.toString().trim()).toBe("cpu");
    const bad = Bun.spawnSync(["bun", "-e", "import { Device } from './src'; try { Device.default() } catch (e) { console.log(e.code) }"], {
      env: { ...process.env, BUNGPU_DEVICE: "tpu" },
      cwd: `${import.meta.dir}/..`,
    });
    expect(bad.stdout.toString().trim()).toBe(String(Status.INVALID_VALUE));
  });

  test("a bad device spec throws INVALID_VALUE", () => {
    expectGpuError(() => Device.open("gpu"), Status.INVALID_VALUE, /unknown device/);
    expectGpuError(() => Device.open("cpu:7"), Status.INVALID_DEVICE);
  });

  test.skipIf(cuda.available)("CUDA is reported unavailable cleanly on a machine without a driver", () => {
    expect(cuda.available).toBe(false);
    expect(cuda.devices).toBe(0);
    expect(cuda.message).toMatch(/libcuda/);
    const e = expectGpuError(() => Device.open("cuda:0"), Status.BACKEND_UNAVAILABLE, /libcuda/);
    expect(e.backend).toBe("cuda");
    // and the package keeps working on the CPU
    using d = Device.open("cpu");
    using b = d.alloc(16);
    expect(b.byteLength).toBe(16);
  });

  test.skipIf(process.platform === "darwin")("Metal is reported unavailable off macOS", () => {
    const metal = Device.backends().find((b) => b.backend === "metal")!;
    expect(metal.available).toBe(false);
    expect(metal.message).toMatch(/macOS/);
    expectGpuError(() => Device.open("metal"), Status.BACKEND_UNAVAILABLE);
  });

  test("work that mixes devices is refused and changes nothing (two CPU devices)", () => {
    const r = Bun.spawnSync(["bun", "run", `${import.meta.dir}/fixtures/mismatched_devices.ts`], {
      env: { ...process.env, BUNGPU_CPU_DEVICES: "2" },
      cwd: `${import.meta.dir}/..`,
    });
    expect(r.stderr.toString()).toBe("");
    const out = JSON.parse(r.stdout.toString());
    // other backends (a GPU machine lists cuda:0 too) come before or after; the CPU devices are these two
    expect(out.list.filter((s: string) => s.startsWith("cpu"))).toEqual(["cpu", "cpu:1"]);
    expect(out.ordinals).toEqual([0, 1]);
    for (const k of ["copyTo", "streamCopy", "streamFill", "record", "launchArg", "launchStream"])
      expect(out[k]).toMatch(/^1: .*(another device|is on cpu)/);
    expect(out.wait).toBe("no error"); // waiting for another device's event orders devices (test/multidevice.test.ts)
    expect(out.intactA).toBe(true);
    expect(out.intactB).toBe(true);
  });

  test("a disposed device refuses work with INVALID_HANDLE", () => {
    const d = Device.open("cpu");
    const b = d.alloc(8);
    d.dispose();
    expect(d.disposed).toBe(true);
    expectGpuError(() => d.alloc(8), Status.INVALID_HANDLE, /disposed/);
    expectGpuError(() => b.write(new Uint8Array(8)), Status.INVALID_HANDLE);
    expect(() => d.dispose()).not.toThrow();
  });

  test("GpuError carries code, name, backend and call", () => {
    try {
      Device.open("cpu").alloc(-1);
    } catch (e) {
      expect(e).toBeInstanceOf(GpuError);
      const g = e as GpuError;
      expect(g.code).toBe(1);
      expect(g.codeName).toBe("BG_ERR_INVALID_VALUE");
      expect(g.name).toBe("GpuError");
      expect(g.call).toBe("Buffer.alloc");
      return;
    }
    throw new Error("no error");
  });
});
