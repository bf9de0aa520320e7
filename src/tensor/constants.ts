// Constant weights: tensors a plan is told never change (PrepareOptions.constants). Their data is
// uploaded once per device and the buffer shared by every plan prepared with the same data array
// (a model's prompt and decode plans hold one copy of the weights, not two), counted, and freed
// when the last plan holding it releases its buffers. A constant is not an input of run() or
// setWeights(), so a plan keeps no host copy of it: once uploaded, its data can be collected.
import type { Buffer } from "../buffer";
import type { Device } from "../device";
import type { DeviceState } from "../device_state";
import { backends } from "../backends";
import { nativeView } from "../../ffi/result";
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

/** Releases a data array's own hold on the constant it was read into, once the array is collected. */
const readHolds = new FinalizationRegistry<Buffer>((buf) => releaseConstant(buf));

/**
 * Where a loader reads data straight into device memory: on a backend whose device memory is host
 * memory (the CPU backend), `alloc(bytes)` gives the memory of a new device buffer as an
 * ArrayBuffer, and `keep(data)` makes a host array over it that buffer's constant (found by
 * acquireConstant like an uploaded one: preparing with it as a constant copies nothing), held for
 * as long as the array lives; memory whose bytes were converted instead is freed by `drop`. Other
 * backends get null: their loaders read into host arrays, uploaded at prepare.
 */
export function deviceReader(device: Device): { alloc(bytes: number): ArrayBuffer; keep(data: HostArray): void; drop(): void } | null {
  if (!backends[device.backend].computesOnHost) return null;
  const pending = new Map<ArrayBuffer, Buffer>();
  return {
    alloc(bytes) {
      if (bytes === 0) return new ArrayBuffer(0);
      const buf = device.alloc(bytes);
      const ab = nativeView(buf.address, bytes);
      pending.set(ab, buf);
      return ab;
    },
    keep(data) {
      const buf = pending.get(data.buffer as ArrayBuffer);
      if (!buf || data.byteOffset !== 0 || data.byteLength !== buf.byteLength) return;
      pending.delete(data.buffer as ArrayBuffer);
      let m = byDevice.get(device.state);
      if (!m) byDevice.set(device.state, (m = new WeakMap()));
      const entry: Entry = { buf, refs: 1, map: m, key: new WeakRef(data) };
      m.set(data, entry);
      byBuffer.set(buf, entry);
      readHolds.register(data, buf);
    },
    drop() {
      for (const buf of pending.values()) buf.dispose();
      pending.clear();
    },
  };
}
