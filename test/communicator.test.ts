// Communicators (src/communicator.ts; shim/cpu/collective.c, shim/cuda/nccl.c). A collective waits
// for every rank, so each case runs test/fixtures/communicator.ts in a subprocess with a time
// limit and BUNGPU_CPU_DEVICES=1..4: every collective and reduction of every data type against
// the references of test/collective_reference.ts, on the devices of one process and across two
// processes sharing an id; grouped sends and receives; a collective captured into a graph and
// replayed; a rank that never arrives (timeout, abort); mismatched calls and bad input as
// GpuError codes. The CUDA path: nccl_api.h against the real nccl.h (pip's nvidia-nccl-cu13), and
// the real libnccl.so.2 loaded under the driver simulator (no GPU here: NCCL's collectives
// themselves cannot run, and the simulator's missing runtime shows as NCCL's own error).
import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Communicator, Device, Status } from "../src";
import { testDriver } from "./cuda_driver";
import { nccl } from "./nccl_env";

const root = join(import.meta.dir, "..");
const fixture = join(import.meta.dir, "fixtures/communicator.ts");

function run(args: string[], devices: number, env: Record<string, string> = {}, timeout = 60_000): Record<string, any> {
  const r = Bun.spawnSync(["bun", "run", fixture, ...args], {
    env: { ...process.env, BUNGPU_CPU_DEVICES: String(devices), BUNGPU_DEVICE: "cpu", ...env },
    cwd: root,
    timeout,
  });
  const err = r.stderr.toString();
  expect(r.exitCode, err || `exit ${r.exitCode} (killed after ${timeout} ms?)`).toBe(0);
  return JSON.parse(r.stdout.toString());
}

/** "code NAME backend call: message" as the fixture reports a GpuError. */
function expectError(s: string, code: number, backend: string, call: string, fragment: string | RegExp) {
  const [c, name, be, fn] = s.split(" ");
  expect(Number(c), s).toBe(code);
  expect(name).toMatch(/^BG_ERR_/);
  expect(be).toBe(backend);
  expect(fn).toBe(`${call}:`);
  expect(s).toMatch(fragment);
}

describe("collectives on CPU devices of one process", () => {
  for (const n of [1, 2, 3, 4]) {
    test(`every collective, reduction and data type on ${n} device${n > 1 ? "s" : ""} matches the reference`, () => {
      const out = run(["suite", "all"], n);
      expect(out.ranks).toEqual(Array.from({ length: n }, (_, r) => [r, n, r ? `cpu:${r}` : "cpu"]));
      expect(out.cases).toBe(10 * 5 * 3 + 10 * 2 + 1);
      expect(out.checks).toBe(out.cases * n);
      expect(out.mismatches).toEqual([]);
    });
  }

  test("grouped sends and receives: a ring, a rank with itself and its partner, order kept, nested groups", () => {
    for (const n of [2, 3, 4]) {
      const out = run(["group"], n);
      const all = new Array(n).fill(true);
      expect(out.ring).toEqual(all);
      expect(out.self).toEqual(all);
      expect(out.partner).toEqual(all);
      expect(out.ordered).toEqual([[1, 2, 3], [4, 5, 6]]);
      expect(out.groupedMax).toEqual(new Array(n).fill([n - 1, n]));
      expect(out.innerEndDidNotIssue).toBe(true);
      expect(out.abandoned).toEqual(["boom", Array.from({ length: n }, (_, r) => r + 5)]);
      let fact = 1;
      for (let i = 2; i <= n; i++) fact *= i;
      expect(out.nestedProd).toEqual(new Array(n).fill(fact));
    }
  });

  test("a collective captured into a graph replays with new inputs; the graph keeps a disposed communicator", () => {
    const n = 3;
    const out = run(["capture"], n);
    out.replays.forEach((rep: { sums: number[][]; gathered: number[][] }, k: number) => {
      const input = (r: number) => Array.from({ length: 64 }, (_, i) => (k + 1) * (r + 1) + i);
      const sum = Array.from({ length: 64 }, (_, i) => ((k + 1) * n * (n + 1)) / 2 + n * i);
      expect(rep.sums).toEqual(new Array(n).fill(sum));
      const gathered = Array.from({ length: n }, (_, r) => input(r)).flat();
      expect(rep.gathered).toEqual(new Array(n).fill(gathered));
    });
    expect(out.afterDispose).toEqual(new Array(n).fill(10 * ((n * (n + 1)) / 2)));
  });

  test("a rank that never arrives: the timeout ends the wait and the communicator, on every rank", () => {
    const out = run(["timeout"], 2);
    expect(out.waitedMs).toBeGreaterThanOrEqual(280);
    expect(out.waitedMs).toBeLessThan(20_000);
    expectError(out.check0, Status.LAUNCH_TIMEOUT, "cpu", "bg_comm_check", /rank 0 of 2 waited more than 300 ms for all_reduce/);
    expect(out.check1).toBe(out.check0);
    expectError(out.after, Status.ILLEGAL_STATE, "cpu", "bg_comm_collective", /aborted/);
    expect(out.data).toEqual([1, 2]); // nothing was written
  });

  test("abort on one rank ends another rank's wait", () => {
    const out = run(["abort"], 2);
    expectError(out.check0, Status.ILLEGAL_STATE, "cpu", "bg_comm_check", /rank 1 aborted the communicator/);
    expectError(out.after, Status.ILLEGAL_STATE, "cpu", "bg_comm_collective", /aborted/);
  });

  test("calls that differ between ranks end the communicator with INVALID_VALUE naming both", () => {
    const out = run(["mismatch"], 2);
    for (const s of out.counts) expectError(s, Status.INVALID_VALUE, "cpu", "bg_comm_check", /collective #1 does not match across ranks: rank 0 called all_reduce\(count 10, float32, op 0, root 0\), rank 1 all_reduce\(count 12, float32/);
    expectError(out.dtypes, Status.INVALID_VALUE, "cpu", "bg_comm_check", /rank 0 called all_reduce\(count 12, float32.*rank 1 all_reduce\(count 12, int32/);
    expectError(out.p2p, Status.INVALID_VALUE, "cpu", "bg_comm_check", /rank 1 receives 48 bytes from rank 0, which sends 40 bytes/);
  });

  test("bad input is a GpuError with its code, before anything is queued", () => {
    const o = run(["errors"], 2);
    const ts = (s: string, call: string, f: RegExp) => expectError(s, Status.INVALID_VALUE, "typescript", call, f);
    ts(o.dtype, "Communicator.allReduce", /dtype must be one of .*float32.*got the string "float8"/);
    ts(o.op, "Communicator.allReduce", /op must be one of sum, prod, max, min, avg, got the string "mean"/);
    ts(o.protoOp, "Communicator.allReduce", /op must be one of .*got the string "constructor"/);
    ts(o.protoOp2, "Communicator.allReduce", /op must be one of .*got the string "__proto__"/);
    ts(o.protoDtype, "Communicator.allReduce", /dtype must be one of .*got the string "toString"/);
    ts(o.recvSmall, "Communicator.allReduce", /recv holds 8 bytes; the collective needs 40/);
    ts(o.gatherSmall, "Communicator.allGather", /recv holds 40 bytes; the collective needs 80 \(2 ranks × 10 elements\)/);
    ts(o.scatterSmall, "Communicator.reduceScatter", /send holds 40 bytes; the collective needs 80/);
    ts(o.ragged, "Communicator.allReduce", /not a whole number of 4-byte elements/);
    ts(o.root, "Communicator.broadcast", /root must be an integer in \[0, 1\], got 2/);
    ts(o.peer, "Communicator.send", /peer must be an integer in \[0, 1\], got -1/);
    ts(o.otherDevice, "Communicator.allReduce", /send is on cpu:1, the communicator's rank 0 on cpu/);
    ts(o.otherStream, "Communicator.allReduce", /the stream is on cpu:1/);
    ts(o.rankRange, "Communicator.initRank", /rank must be an integer in \[0, 1\], got 2/);
    ts(o.idLength, "Communicator.initRank", /128-byte Uint8Array .* of 64 bytes/);
    ts(o.noDevices, "Communicator.initAll", /at least one device/);
    ts(o.groupThrows, "Communicator.allReduce", /got the string "nope"/);
    const shim = (s: string, call: string, f: RegExp, code: number = Status.INVALID_VALUE) => expectError(s, code, "cpu", call, f);
    shim(o.rawPeer, "bg_comm_collective", /peer 9 out of range \[0, 2\)/);
    shim(o.rawDtype, "bg_comm_collective", /no data type 42/);
    shim(o.rawColl, "bg_comm_collective", /no collective 99/);
    shim(o.rawStream, "bg_comm_collective", /the stream is on cpu:1, the communicator on cpu:0/);
    shim(o.rawRankRange, "bg_comm_init_rank", /rank 5 out of range \[0, 2\)/);
    shim(o.notAnId, "bg_comm_init_rank", /not an id of the CPU backend/);
    shim(o.sameRankTwice, "bg_comm_init_rank", /rank 0 already joined/);
    shim(o.otherSize, "bg_comm_init_rank", /has 2 ranks, not 3/);
    shim(o.sameDeviceTwice, "bg_comm_init_all", /cpu:0 is named twice/, Status.INVALID_DEVICE);
    expectError(o.groupEnd, Status.ILLEGAL_STATE, "typescript", "Communicator.groupEnd", /no group was started/);
    expectError(o.afterGroupThrows, Status.ILLEGAL_STATE, "typescript", "Communicator.groupEnd", /no group was started/);
    expect(o.abandonedEnd).toMatch(new RegExp(`^${Status.ILLEGAL_STATE} BG_ERR_ILLEGAL_STATE .* bg_comm_group_end: .*the group was abandoned`));
    expect(o.abandonOutside).toMatch(new RegExp(`^${Status.ILLEGAL_STATE} BG_ERR_ILLEGAL_STATE .* bg_comm_group_abandon: .*no group was started`));
    expectError(o.disposed, Status.INVALID_HANDLE, "typescript", "Communicator", /disposed/);
    expect(o.disposeTwice).toBe("no error");
    expect(o.idBytes).toBe(128);
    expect(o.info).toEqual([1, 2, "Communicator(rank 1 of 2 on cpu:1)"]);
  });
});

describe("the collectives guide's example", () => {
  // The collectives block of docs/guide/multi-device.md, extracted and run as written (the import pointed at src/).
  const README_EXAMPLE = [...readFileSync(join(root, "docs", "guide", "multi-device.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g)]
    .map((m) => m[1]!)
    .find((b) => b.includes("Communicator.initAll"))!;
  test("runs on two CPU devices and prints the sums and the exchanged values", () => {
    const r = Bun.spawnSync(["bun", "-e", README_EXAMPLE.replace('from "bungpu"', 'from "./src"')], {
      env: { ...process.env, BUNGPU_CPU_DEVICES: "2" },
      cwd: root,
      timeout: 60_000,
    });
    expect(r.exitCode, r.stderr.toString()).toBe(0);
    expect(r.stdout.toString().trim().split("\n")).toEqual(["Float32Array(4) [ 3, 6, 9, 12 ]", "Float32Array(4) [ 2, 4, 6, 8 ]"]);
  });
});

describe("the CPU communicators in C, under sanitizers", () => {
  // shim/test/collective_test.c over the C ABI: rounds of every collective, a grouped ring, an abort.
  const gcc = Bun.which("gcc");
  for (const [name, flags] of [
    ["AddressSanitizer and UndefinedBehaviorSanitizer", ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]],
    ["ThreadSanitizer", ["-fsanitize=thread"]],
  ] as const)
    test.skipIf(!gcc || process.platform !== "linux")(`collective_test passes under ${name}`, () => {
      const dir = mkdtempSync(join(tmpdir(), "bg-coll-"));
      try {
        const bin = join(dir, "collective_test");
        const sh = join(root, "shim");
        const srcs = [join(sh, "test/collective_test.c"), join(sh, "test/stub_backend.c"), ...(require("node:fs").readdirSync(sh) as string[]).filter((f) => f.endsWith(".c")).map((f) => join(sh, f))];
        for (const f of require("node:fs").readdirSync(join(sh, "cpu")) as string[]) if (f.endsWith(".c")) srcs.push(join(sh, "cpu", f));
        const b = Bun.spawnSync([gcc!, "-std=c11", "-g", "-O1", "-Wall", "-Wextra", ...flags, `-I${sh}`, "-DBG_STUBS(X)=X(cuda, 0) X(metal, 0)", "-o", bin, ...srcs, "-lpthread", "-lm", "-ldl"], { stderr: "pipe" });
        expect(b.stderr.toString()).not.toMatch(/error|warning/);
        expect(b.exitCode).toBe(0);
        const r = Bun.spawnSync([bin], { stdout: "pipe", stderr: "pipe", env: { ...process.env, BUNGPU_CPU_DEVICES: "4", ASAN_OPTIONS: "detect_leaks=1" }, timeout: 120_000 });
        const out = r.stdout.toString() + r.stderr.toString();
        expect(out).not.toMatch(/ERROR: AddressSanitizer|runtime error:|LeakSanitizer|ThreadSanitizer/);
        expect(out).toMatch(/collective_test: 33 checks passed/);
        expect(r.exitCode).toBe(0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }, 180_000);
});

describe("collectives across processes", () => {
  test("two Bun processes sharing an id: every collective matches the reference on both ranks", async () => {
    const id = Communicator.uniqueId(Device.open("cpu"));
    const hex = Buffer.from(id).toString("hex");
    const procs = [0, 1].map((r) =>
      Bun.spawn(["bun", "run", fixture, "suite", "rank", String(r), "2", hex], {
        env: { ...process.env, BUNGPU_CPU_DEVICES: "1", BUNGPU_DEVICE: "cpu" },
        cwd: root,
        stdout: "pipe",
        stderr: "pipe",
        timeout: 90_000,
      }),
    );
    const outs = await Promise.all(procs.map(async (p) => ({ code: await p.exited, out: await new Response(p.stdout).text(), err: await new Response(p.stderr).text() })));
    outs.forEach((o, r) => {
      expect(o.code, o.err).toBe(0);
      const j = JSON.parse(o.out);
      expect(j.ranks).toEqual([[r, 2, "cpu"]]);
      expect(j.checks).toBe(171);
      expect(j.mismatches).toEqual([]);
    });
    // the last rank to join unlinked the segment's name (Linux keeps it under /dev/shm)
    if (process.platform === "linux") expect(existsSync(`/dev/shm/bgc-${hex.slice(32, 52)}`)).toBe(false);
  }, 120_000);
});

describe("NCCL (the CUDA backend's communicators)", () => {
  const n = nccl();
  const cudaInclude = process.env.CUDA_HOME ? join(process.env.CUDA_HOME, "include") : "/usr/local/cuda/include";
  const gcc = Bun.which("gcc");
  const hasRuntimeH = (() => {
    try {
      readFileSync(join(cudaInclude, "cuda_runtime.h"));
      return true;
    } catch {
      return false;
    }
  })();
  const why = !n.ok ? n.reason : !gcc ? "no gcc" : !hasRuntimeH ? `nccl.h needs cuda_runtime.h, not under ${cudaInclude}` : "";
  if (why) console.warn(`skipping the nccl.h checks: ${why}`);

  const compile = (shimDir: string) =>
    Bun.spawnSync([gcc!, "-std=c11", "-fsyntax-only", `-I${cudaInclude}`, `-I${(n as { include: string }).include}`, `-I${shimDir}`, join(root, "shim/test/nccl_decls_check.c")], { stderr: "pipe" });

  test.skipIf(!!why)("nccl_api.h's declarations, constants and bungpu.h's codes compile against the real nccl.h", () => {
    const r = compile(join(root, "shim"));
    expect(r.stderr.toString()).toBe("");
    expect(r.exitCode).toBe(0);
  });

  test.skipIf(!!why)("a wrong declaration or code fails the check", () => {
    const dir = mkdtempSync(join(tmpdir(), "bungpu-nccl-decls-"));
    try {
      mkdirSync(join(dir, "cuda"));
      const api = readFileSync(join(root, "shim/cuda/nccl_api.h"), "utf8");
      const header = readFileSync(join(root, "shim/bungpu.h"), "utf8");
      const cases: [string, string, string, RegExp][] = [
        ["ncclSend peer type", api.replace("bgnccl_enum datatype, int peer,", "bgnccl_enum datatype, long peer,"), header, /signature of ncclSend/],
        ["ncclInvalidUsage value", api.replace("X(ncclInvalidUsage, 5)", "X(ncclInvalidUsage, 6)"), header, /value of ncclInvalidUsage/],
        ["BG_DTYPE_BFLOAT16", api, header.replace("BG_DTYPE_BFLOAT16 = 9", "BG_DTYPE_BFLOAT16 = 10"), /BG_DTYPE_BFLOAT16 == ncclBfloat16/],
      ];
      for (const [what, a, h, msg] of cases) {
        writeFileSync(join(dir, "cuda/nccl_api.h"), a);
        writeFileSync(join(dir, "bungpu.h"), h);
        const r = compile(dir);
        expect(r.exitCode, what).not.toBe(0);
        expect(r.stderr.toString(), what).toMatch(msg);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  const drv = testDriver();
  test.skipIf(!drv.ok || !n.ok || !(n as { lib: string | null }).lib)(
    "the real libnccl.so.2 loads under the driver simulator: a unique id from NCCL, its errors as GpuErrors",
    () => {
      const script = `
        import { Communicator, Device, GpuError } from "./src";
        import { dlopen, FFIType, ptr } from "bun:ffi";
        // the simulator's own cuCtxGetCurrent (the library the shim opened): what is current on this thread
        const sim = dlopen(process.env.BUNGPU_LIBCUDA, { cuCtxGetCurrent: { args: [FFIType.ptr], returns: FFIType.i32 } });
        const current = () => { const c = new BigUint64Array(1); sim.symbols.cuCtxGetCurrent(ptr(c)); return c[0] !== 0n; };
        const d = Device.open("cuda:0");
        const res = {};
        res.currentBefore = current();
        const id = Communicator.uniqueId(d);
        res.currentAfter = current(); // NCCL's entry pushed and popped the context, as every entry does
        res.idBytes = id.length;
        res.idNonZero = id.some((b) => b !== 0);
        for (const [k, f] of [["initAll", () => Communicator.initAll([d])], ["timeout", () => Communicator.initRank(d, 1, id, 0).setTimeout(5)]]) {
          try { f(); res[k] = "no error"; } catch (e) { res[k] = e instanceof GpuError ? [e.code, e.call, e.backend, e.message] : String(e); }
        }
        console.log(JSON.stringify(res));`;
      const r = Bun.spawnSync(["bun", "-e", script], {
        env: { ...process.env, BUNGPU_LIBCUDA: (drv as { lib: string }).lib, BUNGPU_LIBNCCL: (n as { lib: string }).lib, BUNGPU_DEVICE: "cuda" },
        cwd: root,
        timeout: 60_000,
      });
      expect(r.exitCode, r.stderr.toString()).toBe(0);
      const o = JSON.parse(r.stdout.toString());
      expect([o.currentBefore, o.currentAfter]).toEqual([false, false]); // it was left current
      expect(o.idBytes).toBe(128);
      expect(o.idNonZero).toBe(true);
      // NCCL reaches for the CUDA runtime, which the simulator lacks: NCCL's own error, mapped
      expect(o.initAll[1]).toBe("bg_comm_init_all");
      expect(o.initAll[2]).toBe("cuda");
      expect(o.initAll[3]).toMatch(/ncclCommInitAll: NCCL error \d+/);
      expect(o.initAll[0]).not.toBe(Status.OK);
    },
  );

  test.skipIf(!drv.ok)("without NCCL: BACKEND_UNAVAILABLE naming what was tried", () => {
    const r = Bun.spawnSync(
      ["bun", "-e", `import { Communicator, Device, GpuError } from "./src"; try { Communicator.uniqueId(Device.open("cuda:0")); console.log("no error"); } catch (e) { console.log(e instanceof GpuError ? e.code + " " + e.message : String(e)); }`],
      { env: { ...process.env, BUNGPU_LIBCUDA: (drv as { lib: string }).lib, BUNGPU_LIBNCCL: "/nonexistent/libnccl.so.2" }, cwd: root, timeout: 60_000 },
    );
    const s = r.stdout.toString().trim();
    expect(s).toMatch(new RegExp(`^${Status.BACKEND_UNAVAILABLE} .*BUNGPU_LIBNCCL=/nonexistent/libnccl.so.2 could not be loaded`));
  });
});
