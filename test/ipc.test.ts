// Memory and events shared between processes (issue 14 item 4): two Bun processes
// (test/ipc.worker.ts), each with a time limit, the test relaying their messages. The exporter
// queues a slow kernel, then the data, then a record of an interprocess event; the importer's
// stream waits on that event before summing the data: without the wait it sums stale zeros (the
// `nowait` run shows that the check can fail). In-process: the errors, as GpuError with codes.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Device, Event, Status } from "../src";
import { expectGpuError } from "./helpers";

const worker = join(import.meta.dir, "ipc.worker.ts");
const N = 4096;
const VALUE = 7;
const linux = process.platform === "linux";

type Msg = Record<string, unknown>;
type Child = Bun.Subprocess<"pipe", "pipe", "inherit">;

function lineReader(p: Child): () => Promise<Msg> {
  const reader = p.stdout.getReader();
  const dec = new TextDecoder();
  let buf = "";
  return async () => {
    for (;;) {
      const i = buf.indexOf("\n");
      if (i >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        return JSON.parse(line) as Msg;
      }
      const { value, done } = await reader.read();
      if (done) throw new Error(`worker exited (code ${await p.exited}) before answering`);
      buf += dec.decode(value);
    }
  };
}

/** Run exporter and importer to the end; returns every message each sent, in order. */
async function runPair(mode: "wait" | "nowait", device = "cpu"): Promise<{ a: Msg[]; b: Msg[] }> {
  const spawn = (role: string): Child =>
    Bun.spawn(["bun", worker, role, mode], {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "inherit",
      env: { ...process.env, IPC_DEVICE: device },
      timeout: 40_000,
      killSignal: "SIGKILL",
    });
  const A = spawn("exporter");
  const B = spawn("importer");
  const [ra, rb] = [lineReader(A), lineReader(B)];
  const to = (p: Child, m: Msg) => {
    p.stdin.write(JSON.stringify(m) + "\n");
    p.stdin.flush();
  };
  const a: Msg[] = [];
  const b: Msg[] = [];
  try {
    // handles -> opened -> recorded -> answered -> answer read -> closed -> done
    for (let step = 0; step < 3; step++) {
      a.push(await ra());
      to(B, a.at(-1)!);
      b.push(await rb());
      to(A, b.at(-1)!);
    }
    a.push(await ra());
    expect(await A.exited).toBe(0);
    expect(await B.exited).toBe(0);
  } finally {
    A.kill("SIGKILL");
    B.kill("SIGKILL");
  }
  return { a, b };
}

describe.skipIf(!linux)("memory and events shared between two processes (cpu)", () => {
  test("the importer waits on the exporter's event, reads its data and writes an answer it reads back", async () => {
    const { a, b } = await runPair("wait");
    const [opened, answered] = [b[0]!, b[1]!];
    expect(opened.bytes).toBe(N * 4);
    expect(opened.sameAddress).toBe(true); // one handle opened twice: one mapping, counted
    // a handle of a buffer the exporter already freed, and a memory handle given as an event's
    expect(opened.gone).toEqual({ code: Status.INVALID_HANDLE, call: "bg_ipc_mem_open", backend: "cpu" });
    expect(opened.wrongKind).toEqual({ code: Status.INVALID_VALUE, call: "bg_ipc_event_open", backend: "cpu" });
    // the importer saw the exporter's data, written after a 400 ms kernel on the exporter's stream
    expect(answered.first).toBe(VALUE);
    expect(answered.last).toBe(VALUE);
    expect(answered.sum).toBe(VALUE * N);
    // ...and the exporter read back what the importer's kernel wrote, ordered by the same event
    expect(a[2]!.answer).toBe(VALUE * N);
    expect(a[3]!.done).toBe(true);
  }, 60_000);

  test("without the wait the importer reads the stale data (the check above can fail)", async () => {
    const { a, b } = await runPair("nowait");
    expect(b[1]!.first).toBe(0);
    expect(b[1]!.sum).not.toBe(VALUE * N);
    expect(a[2]!.answer).not.toBe(VALUE * N);
  }, 60_000);
});

describe.skipIf(!linux)("examples/ipc.ts (the example of docs/guide/ipc.md)", () => {
  test("the importer reads what the exporter queued and the exporter reads the answer back", () => {
    const r = Bun.spawnSync(["bun", join(import.meta.dir, "../examples/ipc.ts")], {
      env: { ...process.env, BUNGPU_DEVICE: "cpu" },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 60_000,
    });
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString()).toBe("importer: read 42, wrote 43\nexporter reads back: 43\n");
    expect(r.exitCode).toBe(0);
  }, 60_000);
});

// On a real GPU (not the simulator, whose memory cannot leave its process) the same exchange
// runs through cuIpc*: shareable is ignored there, every cuMemAlloc buffer can be exported.
const realCuda = !process.env.BUNGPU_LIBCUDA && (() => {
  try {
    return Device.default().backend === "cuda";
  } catch {
    return false;
  }
})();

describe.skipIf(!realCuda)("memory and events shared between two processes (cuda)", () => {
  test("the same exchange through cuIpcGetMemHandle / cuIpcOpenEventHandle", async () => {
    const { a, b } = await runPair("wait", "cuda");
    expect(b[0]!.bytes).toBeGreaterThanOrEqual(N * 4);
    expect((b[0]!.gone as { code: number } | null)?.code).toBeGreaterThan(0); // freed memory: refused
    expect(b[0]!.wrongKind).toEqual({ code: Status.INVALID_VALUE, call: "bg_ipc_event_open", backend: "cuda" });
    expect(b[1]!.sum).toBe(VALUE * N);
    expect(a[2]!.answer).toBe(VALUE * N);
  }, 60_000);
});

describe.skipIf(!linux)("sharing: errors (cpu)", () => {
  const dev = Device.open("cpu");

  test("opening a handle in the process that exported it is INVALID_CONTEXT, as cuIpcOpenMemHandle", () => {
    using buf = dev.alloc(256, { shareable: true });
    buf.write(new Uint32Array([1, 2, 3]));
    const h = buf.exportHandle();
    expect(h).toMatch(/^bgipc:/);
    const e = expectGpuError(() => dev.openSharedBuffer(h), Status.INVALID_CONTEXT, /exported by this process/);
    expect(e.call).toBe("bg_ipc_mem_open");
    expect(e.backend).toBe("cpu");
    expect(buf.shared).toBe("shareable");
    expect(Array.from(buf.read(Uint32Array, { offset: 0 }) as Uint32Array).slice(0, 3)).toEqual([1, 2, 3]);
  });

  test("a disposed buffer, a view, plain or stream-ordered memory cannot be exported", () => {
    const buf = dev.alloc(256, { shareable: true });
    expectGpuError(() => buf.view(64, 64).exportHandle(), Status.INVALID_VALUE, /view/);
    buf.dispose();
    expectGpuError(() => buf.exportHandle(), Status.INVALID_HANDLE);
    using plain = dev.alloc(256);
    const e = expectGpuError(() => plain.exportHandle(), Status.INVALID_VALUE, /shareable/);
    expect(e.call).toBe("bg_ipc_mem_export");
    using ordered = dev.defaultStream.alloc(256);
    expectGpuError(() => ordered.exportHandle(), Status.INVALID_VALUE, /stream-ordered/);
    expectGpuError(() => dev.alloc(0, { shareable: true }), Status.INVALID_VALUE);
  });

  test("a garbage handle is a GpuError, not a crash", () => {
    for (const bad of ["", "bgipc:", "bgipc:!!!", "hello", "bgipc:" + "A".repeat(128)])
      expectGpuError(() => dev.openSharedBuffer(bad), Status.INVALID_VALUE);
    expectGpuError(() => dev.openSharedBuffer(42 as never), Status.INVALID_VALUE);
    const junk = new Uint8Array(96).map((_, i) => (i * 37 + 11) & 0xff);
    const e = expectGpuError(() => dev.openSharedBuffer(junk), Status.INVALID_VALUE, /not a bungpu interprocess handle/);
    expect(e.call).toBe("bg_ipc_mem_open");
    expectGpuError(() => dev.openSharedEvent(junk), Status.INVALID_VALUE);
    // a well-formed header naming a process that does not exist: the exporter is gone
    using buf = dev.alloc(64, { shareable: true });
    const bytes = new Uint8Array(Buffer.from(buf.exportHandle().slice(6), "base64url"));
    new DataView(bytes.buffer).setInt32(12, 0x7ffffff0, true); // the exporter's pid
    expectGpuError(() => dev.openSharedBuffer(bytes), Status.INVALID_HANDLE, /does not hold/);
  });

  test("interprocess events: no timing, exported only when created so", () => {
    expectGpuError(() => dev.createEvent({ interprocess: true, timing: true }), Status.INVALID_VALUE, /keeps no time/);
    using plain = dev.createEvent({ timing: false });
    expectGpuError(() => plain.exportHandle(), Status.INVALID_VALUE, /interprocess/);
    using ev = dev.createEvent({ interprocess: true });
    expect(ev.interprocess).toBe(true);
    expect(ev.timing).toBe(false);
    ev.record();
    ev.synchronize();
    // no timestamps: elapsed is INVALID_HANDLE, as cuEventElapsedTime on a DISABLE_TIMING event
    using t = dev.createEvent();
    t.record();
    t.synchronize();
    expectGpuError(() => Event.elapsed(t, ev), Status.INVALID_HANDLE);
    // not in the exporting process, as for memory (the two-process test opens it properly)
    const e = expectGpuError(() => dev.openSharedEvent(ev.exportHandle()), Status.INVALID_CONTEXT, /exported by this process/);
    expect(e.call).toBe("bg_ipc_event_open");
    ev.dispose();
    expectGpuError(() => ev.exportHandle(), Status.INVALID_HANDLE);
  });
});
