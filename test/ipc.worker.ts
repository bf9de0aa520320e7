// The two processes of test/ipc.test.ts. `bun test/ipc.worker.ts exporter|importer [nowait]`
// (IPC_DEVICE picks the device, default "cpu"):
// each reads lines of JSON on stdin and answers lines of JSON on stdout; the test relays them.
//   exporter: allocates shareable memory and an interprocess event, sends their handles, then
//             queues a slow kernel, a fill of the data and a record of the event, and says so;
//             after the importer's answer, waits on the same event and reads the answer back.
//   importer: opens both, makes its stream wait on the event (unless `nowait`), sums the data
//             on the device into the shared answer word, records the event after that write.
import { Device, GpuError, Program } from "../src";
import { kernelSources } from "./kernels";

const role = process.argv[2];
const nowait = process.argv[3] === "nowait";
const N = 4096;
const VALUE = 7;

const send = (msg: object) => console.log(JSON.stringify(msg));
const lines = (async function* () {
  for await (const line of console) if (line.trim()) yield JSON.parse(line) as Record<string, unknown>;
})();
async function next(): Promise<Record<string, unknown>> {
  const r = await lines.next();
  if (r.done) throw new Error(`${role}: stdin closed`);
  return r.value;
}
const errorOf = (fn: () => unknown): { code: number; call?: string; backend?: string } | null => {
  try {
    fn();
    return null;
  } catch (e) {
    if (e instanceof GpuError) return { code: e.code, call: e.call, backend: e.backend };
    throw e;
  }
};

const dev = Device.open(process.env.IPC_DEVICE ?? "cpu");
const mod = Program.compile(dev, kernelSources, { name: "ipc" });
const spin = mod.kernel("spin_ms", ["i32"]);
const sumInto = mod.kernel("sum_into", ["buffer", "buffer", "i32"]);
const stream = dev.createStream();

if (role === "exporter") {
  const data = dev.alloc(N * 4, { shareable: true }).write(new Float32Array(N)); // zeros: stale
  const answer = dev.alloc(4, { shareable: true }).write(new Float32Array([-1]));
  const ev = dev.createEvent({ interprocess: true });
  const gone = dev.alloc(64, { shareable: true });
  const goneHandle = gone.exportHandle();
  gone.dispose();
  send({ data: data.exportHandle(), answer: answer.exportHandle(), event: ev.exportHandle(), gone: goneHandle });
  await next(); // the importer opened everything
  spin.launch(stream, { grid: 1, block: 1, args: [400] }); // the slow producer...
  stream.fill(data, VALUE, { type: "f32" }); // ...whose result the importer must see
  ev.record(stream);
  send({ recorded: true });
  await next(); // the importer recorded the event after writing its answer
  stream.wait(ev);
  stream.synchronize();
  send({ answer: (answer.read(Float32Array) as Float32Array)[0] });
  await next(); // the importer closed its mappings
  ev.dispose();
  data.dispose();
  answer.dispose();
  send({ done: true });
} else if (role === "importer") {
  const h = await next();
  const gone = errorOf(() => dev.openSharedBuffer(h.gone as string));
  const data = dev.openSharedBuffer(h.data as string);
  const again = dev.openSharedBuffer(h.data as string); // the same mapping, counted
  const answer = dev.openSharedBuffer(h.answer as string);
  const ev = dev.openSharedEvent(h.event as string);
  const wrongKind = errorOf(() => dev.openSharedEvent(h.data as string));
  send({ opened: true, bytes: data.byteLength, sameAddress: again.address === data.address, gone, wrongKind });
  again.dispose();
  await next(); // the exporter queued its work and recorded the event
  if (!nowait) stream.wait(ev);
  sumInto.launch(stream, { grid: 1, block: 1, args: [data, answer, N] });
  ev.record(stream);
  stream.synchronize();
  const seen = data.read(Float32Array) as Float32Array;
  send({ recorded: true, sum: (answer.read(Float32Array) as Float32Array)[0], first: seen[0], last: seen[N - 1] });
  await next();
  data.dispose();
  answer.dispose();
  ev.dispose();
  send({ closed: true });
}
process.exit(0);
