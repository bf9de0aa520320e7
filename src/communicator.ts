// Communicator: collectives between devices, NCCL's model. One communicator per rank; ranks are
// devices of one process (Communicator.initAll) or of several processes or machines
// (Communicator.uniqueId() once, the id passed however the caller likes, then
// Communicator.initRank on every rank). CUDA: NCCL (libnccl.so.2, loaded at first use). CPU: the
// CPU devices of one process, or processes of one machine through shared memory.
//
// Every collective is stream-ordered: it is queued on a stream of the communicator's device
// (default: the device's default stream) and completes once every rank's contribution is in. As
// with NCCL, every rank issues the same collectives in the same order; a rank that never gets
// there keeps the others waiting, until abort() or the timeout (CPU) ends the communicator.
import { COMM_ID_BYTES, Coll, Dtype, Red } from "../ffi/constants";
import { api, commInitAll, commUniqueId } from "../ffi/result";
import { Buffer } from "./buffer";
import { Device } from "./device";
import { noteCaptured } from "./device_state";
import { GpuError, Status, describeGot, disposed, integerIn, invalid, list, options, type OptionKeys } from "./errors";
import { HOLD } from "./lifetime";
import { Stream } from "./stream";

// The keys each options argument may have (errors.ts `options` refuses any other).
const INIT_KEYS: OptionKeys<InitOptions> = { timeoutMs: true };
const COLLECTIVE_KEYS: OptionKeys<CollectiveOptions> = { dtype: true, count: true, stream: true };
const REDUCE_KEYS: OptionKeys<ReduceOptions> = { ...COLLECTIVE_KEYS, op: true };
const ROOT_KEYS: OptionKeys<CollectiveOptions & RootOptions> = { ...COLLECTIVE_KEYS, root: true };
const REDUCE_ROOT_KEYS: OptionKeys<ReduceOptions & RootOptions> = { ...REDUCE_KEYS, root: true };

/** Element types of collectives: NCCL's ncclDataType_t. */
export type CollectiveDtype = "int8" | "uint8" | "int32" | "uint32" | "int64" | "uint64" | "float16" | "float32" | "float64" | "bfloat16";
/** Reductions: NCCL's ncclRedOp_t. `avg` is the sum divided by the rank count (integers truncate). */
export type ReduceOp = "sum" | "prod" | "max" | "min" | "avg";

const DTYPES: Record<CollectiveDtype, { id: number; size: number }> = {
  int8: { id: Dtype.INT8, size: 1 },
  uint8: { id: Dtype.UINT8, size: 1 },
  int32: { id: Dtype.INT32, size: 4 },
  uint32: { id: Dtype.UINT32, size: 4 },
  int64: { id: Dtype.INT64, size: 8 },
  uint64: { id: Dtype.UINT64, size: 8 },
  float16: { id: Dtype.FLOAT16, size: 2 },
  float32: { id: Dtype.FLOAT32, size: 4 },
  float64: { id: Dtype.FLOAT64, size: 8 },
  bfloat16: { id: Dtype.BFLOAT16, size: 2 },
};
const OPS: Record<ReduceOp, number> = { sum: Red.SUM, prod: Red.PROD, max: Red.MAX, min: Red.MIN, avg: Red.AVG };

export interface CollectiveOptions {
  /** Element type (default "float32"). */
  dtype?: CollectiveDtype;
  /** Elements (default: what the buffers hold; see each method). */
  count?: number;
  /** Stream of the communicator's device (default: the device's default stream). */
  stream?: Stream;
}
export interface ReduceOptions extends CollectiveOptions {
  /** Reduction (default "sum"). */
  op?: ReduceOp;
}
export interface RootOptions {
  /** The rank whose data is sent (broadcast) or that receives the result (reduce); default 0. */
  root?: number;
}
export interface InitOptions {
  /** CPU: a wait for other ranks longer than this aborts the communicator (GpuError LAUNCH_TIMEOUT via check()); 0 waits forever (default, as NCCL). */
  timeoutMs?: number;
}

function dtypeOf(call: string, d: unknown): { id: number; size: number; name: string } {
  const name = d ?? "float32";
  if (typeof name !== "string" || !Object.hasOwn(DTYPES, name))
    invalid(call, `dtype must be one of ${Object.keys(DTYPES).join(", ")}, got ${describeGot(d)}`);
  return { ...DTYPES[name as CollectiveDtype], name: name as string };
}

function opOf(call: string, o: unknown): number {
  const name = o ?? "sum";
  if (typeof name !== "string" || !Object.hasOwn(OPS, name)) invalid(call, `op must be one of ${Object.keys(OPS).join(", ")}, got ${describeGot(o)}`);
  return OPS[name as ReduceOp];
}

let groupDepth = 0;
/** What the calls recorded in the open group use, held until the outermost groupEnd issues them. */
const groupHolds: (() => void)[] = [];
/** Device disposals kept until the group issued their collectives (DeviceState.afterGroup). */
const afterGroup: (() => void)[] = [];

export class Communicator {
  /** The device of this rank. */
  readonly device: Device;
  /** This rank, in [0, size). */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  #handle: number;
  #live = true;
  /** Graphs that captured a collective of this communicator (see [HOLD]): the release waits for them. */
  #holds = 0;
  #released = false;
  /** This communicator in its device's dependents: Device.dispose() disposes it first. */
  readonly #dependent = new WeakRef<{ dispose(): void }>(this);

  private constructor(device: Device, handle: number) {
    this.device = device;
    this.#handle = handle;
    const [rank, size] = device.state.api.comm_info(handle);
    this.rank = rank;
    this.size = size;
    device.state.dependents.add(this.#dependent);
  }

  /**
   * A new id naming one communicator to its ranks (ncclGetUniqueId): BG_COMM_ID_BYTES (128) bytes
   * to pass to every rank's initRank, by any means (a file, a socket, an environment variable).
   * Made for `device`'s backend (default: Device.default()).
   */
  static uniqueId(device?: Device): Uint8Array {
    const call = "Communicator.uniqueId";
    const d = device ?? Device.default();
    if (!(d instanceof Device)) invalid(call, `device must be a Device, got ${describeGot(device)}`);
    return commUniqueId(d.handle, COMM_ID_BYTES, d.backend);
  }

  /**
   * One communicator per device of this process, rank i on devices[i] (ncclCommInitAll). All of
   * one backend, none twice.
   */
  static initAll(devices: readonly Device[], opts?: InitOptions): Communicator[] {
    const call = "Communicator.initAll";
    const devs = list<Device>(call, "devices", devices);
    if (devs.length === 0) invalid(call, "devices must name at least one device");
    devs.forEach((d, i) => {
      if (!(d instanceof Device)) invalid(call, `devices[${i}] must be a Device, got ${describeGot(d)}`);
      if (d.disposed) disposed(call, `device ${i}`);
    });
    const o = options(call, opts, INIT_KEYS);
    const handles = commInitAll(devs.map((d) => d.handle), devs[0]!.backend);
    const comms = handles.map((h, i) => new Communicator(devs[i]!, h));
    if (o.timeoutMs !== undefined) for (const c of comms) c.setTimeout(o.timeoutMs);
    return comms;
  }

  /**
   * Join rank `rank` of `nranks` on `device` to the communicator named by `id` (from uniqueId(),
   * ncclCommInitRank). CUDA: blocks until every rank has joined (NCCL's rule). CPU: returns at
   * once; the first collective meets the other ranks.
   */
  static initRank(device: Device, nranks: number, id: Uint8Array, rank: number, opts?: InitOptions): Communicator {
    const call = "Communicator.initRank";
    if (!(device instanceof Device)) invalid(call, `device must be a Device, got ${describeGot(device)}`);
    integerIn(call, "nranks", nranks, 1, 0x7fffffff);
    integerIn(call, "rank", rank, 0, nranks - 1);
    if (!(id instanceof Uint8Array) || id.length !== COMM_ID_BYTES)
      invalid(call, `id must be the ${COMM_ID_BYTES}-byte Uint8Array from Communicator.uniqueId(), got ${describeGot(id)}${id instanceof Uint8Array ? ` of ${id.length} bytes` : ""}`);
    const o = options(call, opts, INIT_KEYS);
    const h = device.state.api.comm_init_rank(device.handle, nranks, id, COMM_ID_BYTES, rank);
    const c = new Communicator(device, h);
    if (o.timeoutMs !== undefined) c.setTimeout(o.timeoutMs);
    return c;
  }

  /** Start a group on this thread (ncclGroupStart): collectives are recorded until the matching groupEnd. */
  static groupStart(): void {
    api().comm_group_start();
    groupDepth++;
  }

  /**
   * End a group: the outermost end issues every recorded call together (ncclGroupEnd). What the
   * recorded calls use (their buffers, their communicators, their devices) is held until then: a
   * buffer disposed inside the group is freed behind the collective, as it is behind queued work,
   * and a device disposed inside it closes once the group has issued its collectives.
   */
  static groupEnd(): void {
    if (groupDepth === 0) throw new GpuError(Status.ILLEGAL_STATE, "Communicator.groupEnd: no group was started", { backend: "typescript", call: "Communicator.groupEnd" });
    groupDepth--;
    try {
      api().comm_group_end();
    } finally {
      if (groupDepth === 0) {
        for (const drop of groupHolds.splice(0)) drop();
        for (const dispose of afterGroup.splice(0)) dispose();
      }
    }
  }

  /**
   * Run `fn` inside a group: groupStart, fn, groupEnd. When fn throws, the group is abandoned: on
   * the CPU backend none of its calls are issued (a half-issued group would leave other ranks
   * waiting); NCCL cannot drop recorded calls, so on CUDA they are issued. fn's error is rethrown.
   */
  static group<T>(fn: () => T): T {
    if (typeof fn !== "function") invalid("Communicator.group", `fn must be a function, got ${describeGot(fn)}`);
    Communicator.groupStart();
    let r: T;
    try {
      r = fn();
    } catch (e) {
      try {
        api().comm_group_abandon();
        Communicator.groupEnd();
      } catch {
        /* fn's error is the one to report */
      }
      throw e;
    }
    Communicator.groupEnd();
    return r;
  }

  /** Run `fn` inside a group: the same as Communicator.group. */
  group<T>(fn: () => T): T {
    return Communicator.group(fn);
  }

  get handle(): number {
    if (!this.#live || this.device.disposed) disposed("Communicator", "communicator");
    return this.#handle;
  }

  get disposed(): boolean {
    return !this.#live || this.device.disposed;
  }

  /** recv[i] = op over ranks of send[i]. count: default send's elements. In place when send === recv. */
  allReduce(send: Buffer, recv: Buffer, opts?: ReduceOptions): this {
    const call = "Communicator.allReduce";
    const o = options(call, opts, REDUCE_KEYS);
    const t = dtypeOf(call, o.dtype);
    const count = this.#count(call, o.count, send, t.size, "send");
    this.#fits(call, "send", send, count * t.size);
    this.#fits(call, "recv", recv, count * t.size);
    return this.#issue(call, o.stream, Coll.ALL_REDUCE, send, recv, count, t.id, opOf(call, o.op), 0);
  }

  /** Every rank's recv = root's send. Non-root ranks may pass send = null; count: default recv's elements. */
  broadcast(send: Buffer | null, recv: Buffer, opts?: CollectiveOptions & RootOptions): this {
    const call = "Communicator.broadcast";
    const o = options(call, opts, ROOT_KEYS);
    const t = dtypeOf(call, o.dtype);
    const root = this.#rank(call, "root", o.root ?? 0);
    const count = this.#count(call, o.count, recv, t.size, "recv");
    if (this.rank === root || send !== null) this.#fits(call, "send", send, count * t.size);
    this.#fits(call, "recv", recv, count * t.size);
    return this.#issue(call, o.stream, Coll.BROADCAST, send ?? recv, recv, count, t.id, 0, root);
  }

  /** root's recv = op over ranks of send; other ranks may pass recv = null. count: default send's elements. */
  reduce(send: Buffer, recv: Buffer | null, opts?: ReduceOptions & RootOptions): this {
    const call = "Communicator.reduce";
    const o = options(call, opts, REDUCE_ROOT_KEYS);
    const t = dtypeOf(call, o.dtype);
    const root = this.#rank(call, "root", o.root ?? 0);
    const count = this.#count(call, o.count, send, t.size, "send");
    this.#fits(call, "send", send, count * t.size);
    if (this.rank === root || recv !== null) this.#fits(call, "recv", recv, count * t.size);
    return this.#issue(call, o.stream, Coll.REDUCE, send, recv ?? send, count, t.id, opOf(call, o.op), root);
  }

  /** recv[r*count + i] = rank r's send[i]; recv holds size*count. count: default send's elements. */
  allGather(send: Buffer, recv: Buffer, opts?: CollectiveOptions): this {
    const call = "Communicator.allGather";
    const o = options(call, opts, COLLECTIVE_KEYS);
    const t = dtypeOf(call, o.dtype);
    const count = this.#count(call, o.count, send, t.size, "send");
    this.#fits(call, "send", send, count * t.size);
    this.#fits(call, "recv", recv, count * t.size * this.size, `${this.size} ranks × ${count}`);
    return this.#issue(call, o.stream, Coll.ALL_GATHER, send, recv, count, t.id, 0, 0);
  }

  /** recv[i] = op over ranks of send[rank*count + i]; send holds size*count. count: default recv's elements. */
  reduceScatter(send: Buffer, recv: Buffer, opts?: ReduceOptions): this {
    const call = "Communicator.reduceScatter";
    const o = options(call, opts, REDUCE_KEYS);
    const t = dtypeOf(call, o.dtype);
    const count = this.#count(call, o.count, recv, t.size, "recv");
    this.#fits(call, "send", send, count * t.size * this.size, `${this.size} ranks × ${count}`);
    this.#fits(call, "recv", recv, count * t.size);
    return this.#issue(call, o.stream, Coll.REDUCE_SCATTER, send, recv, count, t.id, opOf(call, o.op), 0);
  }

  /** Send count elements of `buf` to rank `peer` (ncclSend); it matches that rank's recv from this one. */
  send(buf: Buffer, peer: number, opts?: CollectiveOptions): this {
    const call = "Communicator.send";
    const o = options(call, opts, COLLECTIVE_KEYS);
    const t = dtypeOf(call, o.dtype);
    const p = this.#rank(call, "peer", peer);
    const count = this.#count(call, o.count, buf, t.size, "buf");
    this.#fits(call, "buf", buf, count * t.size);
    return this.#issue(call, o.stream, Coll.SEND, buf, null, count, t.id, 0, p);
  }

  /** Receive count elements from rank `peer` into `buf` (ncclRecv). */
  recv(buf: Buffer, peer: number, opts?: CollectiveOptions): this {
    const call = "Communicator.recv";
    const o = options(call, opts, COLLECTIVE_KEYS);
    const t = dtypeOf(call, o.dtype);
    const p = this.#rank(call, "peer", peer);
    const count = this.#count(call, o.count, buf, t.size, "buf");
    this.#fits(call, "buf", buf, count * t.size);
    return this.#issue(call, o.stream, Coll.RECV, null, buf, count, t.id, 0, p);
  }

  /** Throw the error that ended this communicator (a mismatch between ranks, an abort, a timeout), if any. */
  check(): void {
    this.device.state.api.comm_check(this.handle);
  }

  /** End every rank's waits at once (ncclCommAbort); the communicator is unusable afterwards. Never waits. */
  abort(): void {
    this.device.state.api.comm_abort(this.handle);
  }

  /** CPU: abort when a wait for other ranks exceeds `ms` (0: wait forever). CUDA: NOT_SUPPORTED. */
  setTimeout(ms: number): void {
    integerIn("Communicator.setTimeout", "ms", ms, 0, 0xffffffff);
    this.device.state.api.comm_set_timeout(this.handle, ms);
  }

  /**
   * Release it, after its queued collectives (and the graphs that captured one) are done. Never
   * throws, and never waits forever: collectives still waiting for ranks that do not move are
   * aborted (CPU: once no rank moved for a quarter second; every rank's check() then says so).
   * Device.dispose() disposes its communicators first.
   */
  dispose(): void {
    if (!this.#live) return;
    this.#live = false;
    this.device.state.dependents.delete(this.#dependent);
    if (this.#holds === 0) this.#release();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /** @internal A graph captured a collective: it keeps the communicator until the returned function runs. */
  [HOLD](): () => void {
    this.#holds++;
    let dropped = false;
    return () => {
      if (dropped) return;
      dropped = true;
      if (--this.#holds === 0 && !this.#live) this.#release();
    };
  }

  toString(): string {
    return `Communicator(rank ${this.rank} of ${this.size} on ${this.device.spec}${this.disposed ? ", disposed" : ""})`;
  }

  #release(): void {
    if (this.#released || this.device.disposed) return;
    this.#released = true;
    try {
      this.device.state.api.comm_destroy(this.#handle);
    } catch {
      /* dispose() never throws */
    }
  }

  #rank(call: string, what: string, v: unknown): number {
    return integerIn(call, what, v, 0, this.size - 1);
  }

  #count(call: string, count: unknown, from: Buffer | null, size: number, what: string): number {
    if (count !== undefined) return integerIn(call, "count", count, 0, Number.MAX_SAFE_INTEGER);
    if (!(from instanceof Buffer)) invalid(call, `${what} must be a Buffer, got ${describeGot(from)}`);
    if (from.byteLength % size !== 0)
      invalid(call, `${what} holds ${from.byteLength} bytes, not a whole number of ${size}-byte elements: pass count`);
    return from.byteLength / size;
  }

  #fits(call: string, what: string, b: Buffer | null, bytes: number, detail?: string): void {
    if (!(b instanceof Buffer)) invalid(call, `${what} must be a Buffer, got ${describeGot(b)}`);
    if (b.disposed) disposed(call, `${what} buffer`);
    if (b.device.handle !== this.device.handle)
      invalid(call, `${what} is on ${b.device.spec}, the communicator's rank ${this.rank} on ${this.device.spec}`);
    if (b.byteLength < bytes)
      invalid(call, `${what} holds ${b.byteLength} bytes; the collective needs ${bytes}${detail ? ` (${detail} elements)` : ""}`);
  }

  #issue(call: string, stream: Stream | undefined, coll: number, send: Buffer | null, recv: Buffer | null, count: number, dtype: number, op: number, peer: number): this {
    const h = this.handle;
    const s = stream ?? this.device.defaultStream;
    if (!(s instanceof Stream)) invalid(call, `stream must be a Stream, got ${describeGot(stream)}`);
    if (s.device.handle !== this.device.handle)
      invalid(call, `the stream is on ${s.device.spec}, the communicator's rank ${this.rank} on ${this.device.spec}`);
    const sh = s.handle;
    this.device.state.api.comm_collective(h, sh, coll, send ? send.address : 0, recv ? recv.address : 0, count, dtype, op, peer);
    if (groupDepth > 0) {
      // its device too: a Device.dispose() before the group ends waits for the group's end
      const st = this.device.state;
      st.grouped++;
      const unhold = () => {
        if (--st.grouped === 0 && st.afterGroup) {
          afterGroup.push(st.afterGroup);
          st.afterGroup = null;
        }
      };
      groupHolds.push(this[HOLD](), ...[send, recv].filter((b) => b !== null).map((b) => b[HOLD]()), unhold);
    }
    if (this.device.state.captures > 0) noteCaptured(this.device.state, sh, null, [this, send, recv]);
    return this;
  }
}
