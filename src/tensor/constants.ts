// Constant weights: tensors a plan is told never change (PrepareOptions.constants). Their data is
// uploaded once per device and the buffer shared by every plan prepared with the same data array
// (a model's prompt and decode plans hold one copy of the weights, not two), counted, and freed
// when the last plan holding it releases its buffers. A constant is not an input of run() or
// setWeights(), so a plan keeps no host copy of it: once uploaded, its data can be collected.
import type { Buffer } from "../buffer";
import type { Device } from "../device";
import type { DeviceState } from "../device_state";
import type { HostArray } from "./dtype";

interface Entry {
  buf: Buffer;
  refs: number;
  /** Where the entry is found by its data (while that data lives). */
  map: WeakMap<HostArray, Entry>;
  key: WeakRef<HostArray>;
}

const byDevice = new WeakMap<DeviceState, WeakMap<HostArray, Entry>>();
const byBuffer = new WeakMap<Buffer, Entry>();

/** The device buffer holding `data` (uploaded on first use), counted once more. */
export function acquireConstant(device: Device, data: HostArray, bytes: number): Buffer {
  let m = byDevice.get(device.state);
  if (!m) byDevice.set(device.state, (m = new WeakMap()));
  const e = m.get(data);
  if (e && !e.buf.disposed && e.buf.byteLength >= bytes) {
    e.refs++;
    return e.buf;
  }
  const buf = device.alloc(Math.max(bytes, 4));
  try {
    buf.write(data);
  } catch (err) {
    buf.dispose();
    throw err;
  }
  const entry: Entry = { buf, refs: 1, map: m, key: new WeakRef(data) };
  m.set(data, entry);
  byBuffer.set(buf, entry);
  return buf;
}

/** Give back a buffer acquireConstant gave: freed with its last holder. Any other buffer is freed. */
export function releaseConstant(buf: Buffer): void {
  const e = byBuffer.get(buf);
  if (!e) return buf.dispose();
  if (--e.refs > 0) return;
  byBuffer.delete(buf);
  const k = e.key.deref();
  if (k && e.map.get(k) === e) e.map.delete(k);
  buf.dispose();
}

/** Plans holding the constant buffer `buf` (tests read this). */
export function constantHolders(buf: Buffer): number {
  return byBuffer.get(buf)?.refs ?? 0;
}
