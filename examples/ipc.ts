// bun examples/ipc.ts: two processes share device memory and order their work with an event.
// This process (the exporter) queues a fill of a shareable buffer and records an interprocess
// event after it, then starts this same file again as the importer and sends it both handles.
// The importer's stream waits on the event, reads the buffer and writes an answer back into it.
import { Device } from "../src/index";

const dev = Device.default();

if (process.argv[2] !== "importer") {
  const buf = dev.alloc(1024 * 4, { shareable: true }); // CUDA: any buffer; CPU: shareable ones
  const ready = dev.createEvent({ interprocess: true }); // no timing: CU_EVENT_INTERPROCESS
  const stream = dev.createStream();
  stream.fill(buf, 42, { type: "f32" }); // queued: it may not have run yet
  ready.record(stream); // the importer waits for this point of `stream`
  const child = Bun.spawn([process.execPath, import.meta.path, "importer"], {
    stdin: "pipe",
    stdout: "pipe",
    timeout: 30_000,
  });
  child.stdin.write(JSON.stringify({ buf: buf.exportHandle(), ready: ready.exportHandle() }));
  child.stdin.end();
  console.log("importer:", (await new Response(child.stdout).text()).trim());
  if ((await child.exited) !== 0) process.exit(1);
  // keep `buf` and `ready` alive until the importer is done with them (as CUDA requires)
  console.log("exporter reads back:", (buf.read(Float32Array) as Float32Array)[0]);
} else {
  const { buf: bufHandle, ready: readyHandle } = JSON.parse(await Bun.stdin.text());
  using buf = dev.openSharedBuffer(bufHandle); // maps the exporter's memory
  using ready = dev.openSharedEvent(readyHandle);
  dev.defaultStream.wait(ready); // waits for the record the exporter issued before this call
  const v = (buf.read(Float32Array) as Float32Array)[0]!; // 42: the fill has run
  buf.write(new Float32Array([v + 1])); // in place when write() returns
  console.log(`read ${v}, wrote ${v + 1}`);
}
