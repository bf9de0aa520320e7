// One launch, one answer (issue 24, item 1): a table of bad launches goes through every front door
// that launches or re-binds a kernel (Kernel.launch, CommandEncoder.dispatch, ComputeGraph and
// GraphSession dispatches, Step.kernel and Schedule.addKernel, CommandList.patchLaunch; for the
// arguments also GraphExec.setKernelArgs, Executable.setArgs, ComputeGraph.setArgs and
// CommandList.patchArgs), and every door must throw the same GpuError at the call that made it: the
// same code and the same text after the door's name, which names the kernel and the bad field.
// Nothing is queued or appended by a refused launch. The limits are whatever the device reports
// (bg_device_props), so the table runs unchanged on the CPU and on CUDA (bash test/sim_suite.sh).
import { afterAll, describe, expect, test } from "bun:test";
import { CommandEncoder, ComputeGraph, Device, GpuError, Graph, GraphExecutor, Program, Schedule, Status, Step } from "../src";
import { CommandList } from "../src/commands";
import { errorDetail } from "../src/errors";
import type { ArgValue } from "../src/launch";
import { kernelSources } from "./kernels";

const spec = process.env.BUNGPU_DEVICE ?? "cpu";
// Another device: the CPU beside a CUDA device; a second CPU device beside the CPU, which needs
// BUNGPU_CPU_DEVICES=2 from the start of the process: without it the file runs itself in a child.
const inChild = spec.startsWith("cpu") && !process.env.BUNGPU_CPU_DEVICES;
if (inChild)
  test("the table runs with two CPU devices (a child process with BUNGPU_CPU_DEVICES=2)", () => {
    const r = Bun.spawnSync([process.execPath, "test", import.meta.path], {
      env: { ...process.env, BUNGPU_CPU_DEVICES: "2" },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 120_000,
    });
    const out = `${r.stdout.toString()}${r.stderr.toString()}`;
    if (r.exitCode !== 0) console.error(out.slice(-6000));
    expect({ exitCode: r.exitCode, fails: out.match(/^\(fail\).*$/gm) ?? [] }).toEqual({ exitCode: 0, fails: [] });
    expect(out).toMatch(/\b[1-9]\d* pass\b/);
  });
if (!inChild) table(Device.open(spec));

function table(dev: Device): void {
  const other = Device.open(dev.backend === "cpu" ? "cpu:1" : "cpu");
  const mod = Program.compile(dev, kernelSources, { name: "launch_doors" });
  const otherMod = Program.compile(other, kernelSources, { name: "launch_doors" });
  const k = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
  const otherK = otherMod.kernel("add_scalar", ["buffer", "f32", "i32"]);
  const s = dev.createStream();
  const N = 64;
  const buf = dev.alloc(4 * N).fill(0, { type: "f32" });
  const otherBuf = other.alloc(4 * N);
  const gone = dev.alloc(4 * N);
  gone.dispose();
  afterAll(() => {
    buf.dispose();
    otherBuf.dispose();
    s.dispose();
    mod.dispose();
    otherMod.dispose();
    dev.dispose();
    other.dispose();
  });

  const good = { grid: 1, block: N, args: [buf, 1, N] as [typeof buf, number, number] };
  const props = dev.props;
  const [BX, BY, BZ] = props.maxBlockDim;
  const [, GY, GZ] = props.maxGridDim;
  const threads = Math.min(props.maxThreadsPerBlock, k.maxThreadsPerBlock);

  // ---- the doors -------------------------------------------------------------------------------------

  type Cfg = Record<string, unknown>;
  /** A door: its name (the `call` of its errors) and how it takes one launch of `kernel`. */
  type Door = [string, (kernel: typeof k, cfg: Cfg) => void];

  function recorded(): ComputeGraph {
    return new ComputeGraph(dev);
  }

  /** A GraphSession's dispatch: a refusal leaves no dispatch behind; the session is disposed. */
  function sessionDispatch(session: ReturnType<GraphExecutor["begin"]>, kernel: typeof k, cfg: Cfg): void {
    try {
      session.dispatch(kernel, cfg as never);
    } catch (e) {
      expect(session.stats.dispatches).toBe(0);
      throw e;
    } finally {
      session.dispose();
    }
  }

  /** Doors that take a whole launch. Each also checks that a refusal left nothing behind. */
  const launchDoors: Door[] = [
    ["Kernel.launch", (kernel, cfg) => kernel.launch(s, cfg as never)],
    ["CommandEncoder.dispatch", (kernel, cfg) => {
      const enc = new CommandEncoder(dev);
      try {
        enc.dispatch(kernel, cfg as never);
      } catch (e) {
        expect(enc.commandCount).toBe(0);
        throw e;
      }
    }],
    ["ComputeGraph.dispatch", (kernel, cfg) => {
      const g = recorded();
      try {
        g.dispatch(kernel, cfg as never);
      } catch (e) {
        expect(g.dispatchCount).toBe(0);
        throw e;
      }
    }],
    ["GraphSession.dispatch", (kernel, cfg) => sessionDispatch(new GraphExecutor(dev, { stream: s }).begin(), kernel, cfg)],
    ["GraphSession.dispatch", (kernel, cfg) => sessionDispatch(new GraphExecutor(dev, { stream: s }).beginRecorded(), kernel, cfg)],
    ["Step.kernel", (kernel, cfg) => void Step.kernel(kernel, cfg as never)],
    ["Schedule.addKernel", (kernel, cfg) => {
      const sched = new Schedule();
      try {
        sched.addKernel(kernel, cfg as never);
      } catch (e) {
        expect(sched.length).toBe(0);
        throw e;
      }
    }],
    ["CommandList.patchLaunch", (kernel, cfg) => {
      const list = new CommandList(dev);
      list.launchArgs(k, good);
      list.patchLaunch("CommandList.patchLaunch", list.lastArgOffset, kernel, cfg as never);
    }],
  ];

  /** Doors that take new arguments for a launch already made (graph execs, executables, recorded graphs). */
  const argDoors: [string, (args: unknown) => void][] = [
    ["GraphExec.setKernelArgs", (args) => {
      using st = dev.createStream();
      const graph = Graph.capture(st, (cs) => k.launch(cs, good));
      using exec = graph.instantiate();
      graph.dispose();
      exec.setKernelArgs(0, k, args as never);
    }],
    ["Executable.setArgs", (args) => {
      using exec = new Schedule().addKernel(k, good).compile(dev);
      exec.setArgs(0, args as ArgValue[]);
      expect(exec.args(0)).toEqual(good.args);
    }],
    ["ComputeGraph.setArgs", (args) => {
      const g = recorded();
      g.dispatch(k, good);
      g.setArgs(0, args as ArgValue[]);
    }],
    ["CommandList.patchArgs", (args) => {
      const list = new CommandList(dev);
      list.launchArgs(k, good);
      list.patchArgs("CommandList.patchArgs", list.lastArgOffset, k, args as ArgValue[]);
    }],
  ];

  /** The error `f` throws, as { code, call, detail }: detail is the text after "<call>: ". */
  function refusal(f: () => void): { code: number; backend: string; call: string; detail: string } {
    try {
      f();
    } catch (e) {
      if (!(e instanceof GpuError)) throw new Error(`not a GpuError: ${String(e)}`);
      const text = errorDetail(e);
      const call = e.call ?? "";
      expect(text.startsWith(`${call}: `)).toBe(true);
      return { code: e.code, backend: String(e.backend), call, detail: text.slice(call.length + 2) };
    }
    throw new Error("accepted");
  }

  /** Every door refuses `cfg` with one code and one text, naming the kernel and matching `want`. */
  function sameEverywhere(doors: [string, () => void][], code: number, want: RegExp): void {
    const got = doors.map(([name, f]) => {
      const r = refusal(f);
      expect({ door: name, call: r.call }).toEqual({ door: name, call: name });
      return r;
    });
    const first = got[0]!;
    expect(first.code).toBe(code);
    expect(first.detail).toMatch(want);
    for (let i = 1; i < got.length; i++)
      expect({ door: doors[i]![0], code: got[i]!.code, backend: got[i]!.backend, detail: got[i]!.detail }).toEqual({ door: doors[i]![0], code: first.code, backend: first.backend, detail: first.detail });
  }

  // ---- the table -------------------------------------------------------------------------------------

  const I = Status.INVALID_VALUE, H = Status.INVALID_HANDLE;
  const dimsField = (what: string, got: string) => new RegExp(`^add_scalar: ${what.replace(".", "\\.")} must be an integer in \\[1, 2147483647\\], got ${got}$`);
  const over = (what: string, field: string, v: number) => new RegExp(`^add_scalar: ${what} .* exceeds the limits: ${field.replace(".", "\\.")} ${v} > \\d+$`);

  /** [what, the launch (over `good`), code, what the text must say] */
  const launches: [string, Cfg, number, RegExp][] = [
    ["block too large in x", { block: 2048 > BX ? 2048 : BX + 1 }, I, over("block", "block.x", 2048 > BX ? 2048 : BX + 1)],
    ["block too large in y", { block: [1, BY + 1] }, I, over("block", "block.y", BY + 1)],
    ["block too large in z", { block: [1, 1, BZ + 1] }, I, over("block", "block.z", BZ + 1)],
    ["block too large in total", { block: [BX, Math.max(2, Math.ceil((threads + 1) / BX))] }, I, /^add_scalar: block \d+x\d+x1 exceeds the limits: \d+ threads > \d+ per block for this kernel$/],
    ["grid 0", { grid: 0 }, I, dimsField("grid.x", "0")],
    ["grid.y 0", { grid: [1, 0] }, I, dimsField("grid.y", "0")],
    ["grid.y over the limit", { grid: [1, GY + 1] }, I, over("grid", "grid.y", GY + 1)],
    ["grid.z over the limit", { grid: [1, 1, GZ + 1] }, I, over("grid", "grid.z", GZ + 1)],
    ["grid.x past 2^31-1", { grid: 2 ** 31 }, I, dimsField("grid.x", "2147483648")],
    ["negative block", { block: -1 }, I, dimsField("block.x", "-1")],
    ["negative grid.z", { grid: [1, 1, -2] }, I, dimsField("grid.z", "-2")],
    ["fractional grid", { grid: 1.5 }, I, dimsField("grid.x", "1.5")],
    ["fractional block.y", { block: [4, 2.5] }, I, dimsField("block.y", "2.5")],
    ["NaN block", { block: NaN }, I, dimsField("block.x", "NaN")],
    ["Infinity grid", { grid: Infinity }, I, dimsField("grid.x", "Infinity")],
    ["string grid", { grid: "4" }, I, /^add_scalar: grid must be a number or \[x, y\?, z\?\], got the string "4"$/],
    ["string dimension", { block: [4, "2"] }, I, dimsField("block.y", 'the string "2"')],
    ["too many dimensions", { grid: [1, 1, 1, 1] }, I, /^add_scalar: grid must be a number or \[x, y\?, z\?\], got 4 dimensions$/],
    ["no dimensions", { block: [] }, I, /^add_scalar: block must be a number or \[x, y\?, z\?\], got 0 dimensions$/],
    ["grid missing", { grid: undefined }, I, /^add_scalar: grid must be a number or \[x, y\?, z\?\], got undefined$/],
    ["sharedBytes too large", { sharedBytes: 3e9 }, I, /^add_scalar: sharedBytes 3000000000 exceeds the limit \(\d+ bytes per block\)$/],
    ["sharedBytes past 2^32", { sharedBytes: 2 ** 40 }, I, /^add_scalar: sharedBytes 1099511627776 exceeds the limit \(\d+ bytes per block\)$/],
    ["sharedBytes negative", { sharedBytes: -1 }, I, /^add_scalar: sharedBytes must be a non-negative integer, got -1$/],
    ["sharedBytes fractional", { sharedBytes: 0.5 }, I, /^add_scalar: sharedBytes must be a non-negative integer, got 0.5$/],
    ["sharedBytes a string", { sharedBytes: "0" }, I, /^add_scalar: sharedBytes must be a non-negative integer, got the string "0"$/],
    ["too few arguments", { args: [buf, 1] }, I, /^add_scalar: expected 3 arguments \(buffer, f32, i32\), got 2$/],
    ["too many arguments", { args: [buf, 1, N, 0] }, I, /^add_scalar: expected 3 arguments \(buffer, f32, i32\), got 4$/],
    ["args not an array", { args: "buf" }, I, /^add_scalar: args must be an array, got the string "buf"$/],
    ["a number for a buffer", { args: [7, 1, N] }, I, /^add_scalar: args\[0\] must be a Buffer, got 7$/],
    ["a string for an f32", { args: [buf, "1", N] }, I, /^add_scalar: args\[1\] must be a number \(f32\), got the string "1"$/],
    ["a fraction for an i32", { args: [buf, 1, 1.5] }, I, /^add_scalar: args\[2\] must be an i32, got 1.5$/],
    ["a bigint for an i32", { args: [buf, 1, 64n] }, I, /^add_scalar: args\[2\] must be an i32, got 64$/],
    ["a disposed buffer", { args: [gone, 1, N] }, H, /^add_scalar: args\[0\] is a disposed buffer$/],
    ["a buffer of another device", { args: [otherBuf, 1, N] }, I, /^add_scalar: args\[0\] is a buffer of another device \(cpu(:1)?\)$/],
  ];
  if (props.maxGridBlocks > 0)
    launches.push(["more blocks than the device allows", { grid: [props.maxGridDim[0], Math.min(GY, Math.ceil((props.maxGridBlocks + 1) / props.maxGridDim[0]))] }, I, /^add_scalar: grid \d+x\d+x1 exceeds the limits: \d+ blocks > \d+$/]);

  describe(`every front door gives one bad launch the same GpuError (${dev.spec})`, () => {
    test("the good launch passes every door (the table is not vacuous)", () => {
      for (const [, door] of launchDoors) door(k, good);
      for (const [, door] of argDoors) door(good.args);
      s.synchronize();
    });

    for (const [what, change, code, want] of launches)
      test(what, () => {
        const cfg = { ...good, ...change };
        sameEverywhere(launchDoors.map(([name, door]) => [name, () => door(k, cfg)]), code, want);
        if ("args" in change) sameEverywhere(argDoors.map(([name, door]) => [name, () => door(change.args)]), code, want);
      });

    test("not an object", () => {
      sameEverywhere(launchDoors.map(([name, door]) => [name, () => door(k, null as never)]), I, /^add_scalar: expected \{ grid, block, args \}$/);
    });

    test("a kernel of another device, where the door has a device (a Step's device is its kernel's)", () => {
      const withDevice = launchDoors.filter(([n]) => n !== "Step.kernel" && n !== "Schedule.addKernel");
      const want = new RegExp(`^add_scalar: a kernel of ${other.spec}, used on ${dev.spec} \\(another device\\)$`);
      sameEverywhere(withDevice.map(([name, door]) => [name, () => door(otherK, { ...good, args: [otherBuf, 1, N] })]), I, want);
      const argDoor = argDoors[0]!; // GraphExec.setKernelArgs(…, otherK, …): its kernel is named with the arguments
      expect(refusal(() => {
        using st = dev.createStream();
        const graph = Graph.capture(st, (cs) => k.launch(cs, good));
        using exec = graph.instantiate();
        graph.dispose();
        exec.setKernelArgs(0, otherK as never, [otherBuf, 1, N]);
      })).toEqual({ code: I, backend: "typescript", call: argDoor[0], detail: `add_scalar: a kernel of ${other.spec}, used on ${dev.spec} (another device)` });
      // a step of the other device's kernel is a step of that device (schedules span devices)
      expect(Step.kernel(otherK, { ...good, args: [otherBuf, 1, N] }).device).toBe(other);
    });

    test("nothing ran: the buffer holds what the good launches wrote", () => {
      s.synchronize();
      const v = buf.read(Float32Array);
      expect(new Set(v).size).toBe(1);
    });
  });
}
