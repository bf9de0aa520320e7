// The fuzzer's second process (test/fuzz/surfaces.ts starts one per batch, lazily): it exports
// shareable buffers and interprocess events for the driver to open, opens what the driver
// exports, and is rank 1 of a communicator across the two processes. It reads one JSON request a
// line from the FIFO named by argv[2] and answers one JSON line into the FIFO named by argv[3]:
// { ok: true, ... } or { err: <GpuError code>, message }. A throw that is not a GpuError is
// answered { fatal: message } (the driver reports it as a failure of the peer).
//
//   bun test/fuzz/peer.ts REQ_FIFO RESP_FIFO      (BUNGPU_CPU_DEVICES, BUNGPU_LIB from the driver)
import { openSync, readSync, writeSync } from "node:fs";
import { Communicator, Device, GpuError, type Buffer, type Event } from "../../src";

const [reqPath, respPath] = process.argv.slice(2);
const rfd = openSync(reqPath!, "r");
const wfd = openSync(respPath!, "w");

const dev = Device.open("cpu:0");
const stream = dev.createStream({ nonBlocking: true });
const collStream = dev.createStream({ nonBlocking: true });
const bufs = new Map<number, Buffer>();
const events = new Map<number, Event>();
const opened = new Map<number, Buffer>();
let nextId = 1;
let comm: Communicator | null = null;
let pending: { recv: Buffer | null; send: Buffer | null } | null = null;

const b64 = (u: Uint8Array) => globalThis.Buffer.from(u.buffer, u.byteOffset, u.byteLength).toString("base64");
const unb64 = (s: string) => new Uint8Array(globalThis.Buffer.from(s, "base64"));
const bytesOf = (b: Buffer) => b.read(Uint8Array) as Uint8Array;

type Msg = Record<string, unknown> & { op: string };
function handle(m: Msg): Record<string, unknown> {
  switch (m.op) {
    case "alloc": {
      const data = unb64(m.data as string);
      const b = dev.alloc(data.length, { shareable: true });
      b.write(data);
      const id = nextId++;
      bufs.set(id, b);
      return { id, handle: b.exportHandle() };
    }
    case "read": {
      dev.synchronize();
      return { data: b64(bytesOf(bufs.get(m.id as number)!)) };
    }
    case "write": {
      bufs.get(m.id as number)!.write(unb64(m.data as string), { offset: m.off as number });
      return {};
    }
    case "free": {
      dev.synchronize();
      bufs.get(m.id as number)!.dispose();
      bufs.delete(m.id as number);
      return {};
    }
    case "event": {
      const e = dev.createEvent({ interprocess: true });
      const id = nextId++;
      events.set(id, e);
      return { id, handle: e.exportHandle() };
    }
    case "fillrec": {
      // a fill of the buffer queued on a stream, then a record of the event after it
      const b = bufs.get(m.buf as number)!, e = events.get(m.ev as number)!;
      stream.fill(b, m.value as number, { type: "u8" });
      e.record(stream);
      return {};
    }
    case "evfree": {
      events.get(m.id as number)!.dispose();
      events.delete(m.id as number);
      return {};
    }
    case "open": {
      // a handle the driver exported (genuine or altered)
      const b = dev.openSharedBuffer(m.handle as string);
      const id = nextId++;
      opened.set(id, b);
      return { id, bytes: b.byteLength, data: b64(bytesOf(b)) };
    }
    case "openwrite": {
      opened.get(m.id as number)!.write(unb64(m.data as string), { offset: m.off as number });
      return {};
    }
    case "close": {
      opened.get(m.id as number)!.dispose();
      opened.delete(m.id as number);
      return {};
    }
    case "comm": {
      comm?.dispose();
      comm = null;
      comm = Communicator.initRank(dev, m.nranks as number, unb64(m.id as string), m.rank as number, { timeoutMs: m.timeoutMs as number });
      return {};
    }
    case "coll": {
      // queue this rank's part of a collective; "collread" waits for it and returns recv
      const c = comm!;
      const send = m.send ? dev.alloc((unb64(m.send as string)).length || 1) : null;
      if (send && (m.send as string).length) send.write(unb64(m.send as string));
      const recv = m.recvBytes ? dev.alloc(m.recvBytes as number) : null;
      if (recv) recv.fill(0);
      const o = { stream: collStream, dtype: m.dtype as never, ...(m.count !== undefined ? { count: m.count as number } : {}) };
      switch (m.kind) {
        case "allReduce": c.allReduce(send!, recv!, { ...o, op: m.redop as never }); break;
        case "broadcast": c.broadcast(send, recv!, { ...o, root: m.root as number }); break;
        case "reduce": c.reduce(send!, recv, { ...o, op: m.redop as never, root: m.root as number }); break;
        case "allGather": c.allGather(send!, recv!, o); break;
        case "reduceScatter": c.reduceScatter(send!, recv!, { ...o, op: m.redop as never }); break;
        case "send": c.send(send!, m.peer as number, o); break;
        case "recv": c.recv(recv!, m.peer as number, o); break;
        default: throw new Error(`unknown collective ${String(m.kind)}`);
      }
      pending = { recv, send };
      return {};
    }
    case "collread": {
      const p = pending;
      pending = null;
      collStream.synchronize();
      comm!.check();
      const out = p?.recv ? b64(bytesOf(p.recv)) : "";
      p?.recv?.dispose();
      p?.send?.dispose();
      return { data: out };
    }
    case "exit":
      process.exit(0);
  }
  throw new Error(`unknown request ${m.op}`);
}

const buf = new Uint8Array(1 << 20);
let text = "";
const dec = new TextDecoder();
for (;;) {
  const n = readSync(rfd, buf);
  if (n === 0) process.exit(0); // the driver went away
  text += dec.decode(buf.subarray(0, n), { stream: true });
  let nl: number;
  while ((nl = text.indexOf("\n")) >= 0) {
    const line = text.slice(0, nl);
    text = text.slice(nl + 1);
    let reply: Record<string, unknown>;
    try {
      reply = { ok: true, ...handle(JSON.parse(line) as Msg) };
    } catch (e) {
      reply = e instanceof GpuError ? { err: e.code, message: e.message } : { fatal: `${(e as Error)?.constructor?.name}: ${(e as Error)?.message ?? e}` };
    }
    const out = globalThis.Buffer.from(JSON.stringify(reply) + "\n");
    let at = 0;
    while (at < out.length) at += writeSync(wfd, out, at, out.length - at);
  }
}
