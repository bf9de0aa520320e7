// A timeline of every stream's work, in the Chrome trace / Perfetto JSON format.
// It is one file over 600 lines: every tracing entry reads and writes the one session's state
// (its devices, lanes, pending records, scope), which a split would pass across files.
//
//   trace.start();  ...work...;  const t = trace.stop();   // { traceEvents: [...] }
//   trace.write("run.json", t);                            // open in ui.perfetto.dev
//   BUNGPU_TRACE=run.json bun app.ts                       // the whole process, written at exit
//
// How it costs nothing when off: the result layer's wrappers look their native symbol up on the
// table at every call, so start() swaps the table entries of the calls that queue work on a
// stream (swapNative in ffi/result.ts) for tracing versions, and stop() puts the originals back.
// While tracing is off no wrapper, table entry or method differs from an untraced process.
//
// What is recorded, one lane (tid) per stream, one process (pid) per device: launches (kernel
// name, grid, block, shared bytes), copies and memsets (bytes), peer copies, collectives,
// stream-ordered allocations and frees, host functions (the time the
// stream waits for the JavaScript function), graph replays, and command-list submits as a span
// holding one child per command (decoded from the list's bytes, which are resubmitted with an
// event record between commands: one crossing still). Tensor plan executions become a span
// around their kernels (ExecutionPlan's execute methods are swapped the same way). Ring pushes
// and pops are instants on the "host" process, with host timestamps.
//
// Timestamps are the device's: a timing event is recorded on the op's stream before and after
// it. Times are taken against one base event per device, recorded on a private idle stream when
// the device is first seen and matched there with the host clock; precision is the backend's
// event precision (CPU: the monotonic clock when the stream's worker reaches the event; CUDA:
// cuEventElapsedTime, about 0.5 µs). The shim gives milliseconds as a float32: a span's duration
// is read between its own two events (full precision), its start as the time since the base
// (steps of under 1 µs for the first 8 s of a trace, 4 µs after a minute). Tracing adds an event
// record before and after each op (one between commands in a list), itself device work: the
// shortest kernels look a little longer.
// Work queued into a stream capture is not timed (it does not run then); its replays are.
//
// The JavaScript lane (process "host", thread "JavaScript"), on the host clock the device bases
// are matched with: the time the JS thread spent inside each traced call (issuing; "+ wait" where
// the call also waited for the device, like a submit with BG_SUBMIT_WAIT or a synchronous copy),
// in host waits (stream, event and device synchronize), in plan calls (execute, runSync, a run's
// issue); and, computed at stop, the gaps where no device ran anything and the JS thread was in
// none of these calls ("JS outside bungpu"). Beside it, "awaited runs": each plan.run from the
// call to its promise settling. A run's device work is one span named after it ("ExecutionPlan.run
// #3"), through the no-op hooks ExecutionPlan's run queue calls (runHooks, swapped like the table).
import { Coll } from "../../ffi/constants";
import { eventElapsed, keepingOuts, nativeView, swapNative, type Api, type NativeFn } from "../../ffi/result";
import { StreamFlag, SUBMIT_WAIT } from "../../ffi/constants";
import { decodeRaw, withEventRecords, type RawCommand } from "../commands";
import { openDeviceStates } from "../device";
import type { DeviceState } from "../device_state";
import { GpuError, Status, illegalState } from "../errors";
import { blockUntil } from "../hostfn";
import { ExecutionPlan, runHooks, type RunJob } from "../tensor/plan";
import { hostGaps, scopeSpans, write, JS_PID, JS_TID, AWAIT_TID, type Trace, type TraceEvent, type TraceLane } from "./format";
import { kernelNamesByHandle as kernelNames } from "../kernel_names";

export { fromProfile, write, type Trace, type TraceEvent, type TraceLane } from "./format";
export { toSVG, type SvgOptions } from "./svg";

export interface StopOptions {
  /** How long stop() waits for traced work still running, in ms (default 2000). */
  waitMs?: number;
}

// ---- state while tracing --------------------------------------------------------------------------

interface Lane {
  readonly tid: number;
  readonly name: string;
  readonly stream: number;
}

/** A device seen while tracing: its events, its base, its lanes. */
interface Dev {
  readonly state: DeviceState;
  readonly api: Api;
  readonly pid: number;
  readonly label: string;
  /** A private non-blocking stream, idle, where the base and end marks are recorded. */
  readonly own: number;
  readonly base: number;
  /** Host time of the base, µs since the trace began. */
  readonly baseUs: number;
  readonly defaultStream: number;
  readonly pool: number[];
  readonly all: number[];
  readonly lanes: Lane[];
  nextTid: number;
}

interface Item {
  name: string;
  cat: string;
  args: Record<string, unknown>;
  /** Indices into the record's events: start and end. */
  from: number;
  to: number;
}

/** Work traced on one stream in one call: its events (in stream order) and what lies between them. */
interface Rec {
  dev: Dev;
  lane: Lane;
  events: number[];
  items: Item[];
  scope: Scope | null;
}

interface Scope {
  readonly id: number;
  readonly name: string;
}

interface Session {
  readonly t0: number;
  readonly devs: Map<number, Dev>;
  /** Native stream handle → its device and lane. */
  readonly streams: Map<number, { dev: Dev; lane: Lane | null; nonBlocking: boolean }>;
  readonly pending: Rec[];
  readonly done: TraceEvent[];
  readonly host: TraceEvent[];
  readonly lanes: TraceLane[];
  readonly restore: (() => void)[];
  drainAt: number;
  scope: Scope | null;
  scopes: number;
  /** Plan execution spans: id → the call's name. */
  readonly scopeNames: Map<number, string>;
  captured: number;
  unplaced: number;
  unfinished: number;
  /** The JavaScript lane's spans (host clock), and the awaited runs still open. */
  readonly js: TraceEvent[];
  readonly awaiting: Map<number, { name: string; at: number }>;
  runs: number;
  asyncs: number;
  /** Above 0 while the tracer waits on its own account (not drawn on the JavaScript lane). */
  quiet: number;
}

let session: Session | null = null;
const nowUs = (s: Session) => (performance.now() - s.t0) * 1000;

function deviceOf(s: Session, st: DeviceState): Dev {
  let d = s.devs.get(st.handle);
  if (d) return d;
  const a = st.api;
  const own = a.stream_create(st.handle, StreamFlag.NON_BLOCKING, 0);
  // The base's device time lies between the host times before its record and after its wait: of
  // a few tries, the one with the shortest round trip, at its middle (a worker that woke late, on
  // a busy host, would otherwise shift every device span against the JavaScript lane).
  const tries: { e: number; h0: number; h1: number }[] = [];
  s.quiet++;
  try {
    for (let i = 0; i < 5; i++) {
      const e = a.event_create(st.handle, 0);
      const h0 = nowUs(s);
      a.event_record(e, own);
      a.event_synchronize(e);
      tries.push({ e, h0, h1: nowUs(s) });
    }
  } finally {
    s.quiet--;
  }
  const best = tries.reduce((m, t) => (t.h1 - t.h0 < m.h1 - m.h0 ? t : m));
  d = {
    state: st, api: a, pid: s.devs.size + 1, label: `${st.backend} (device ${s.devs.size + 1})`,
    own, base: best.e, baseUs: (best.h0 + best.h1) / 2, defaultStream: a.stream_default(st.handle),
    pool: tries.filter((t) => t !== best).map((t) => t.e), all: tries.map((t) => t.e), lanes: [], nextTid: 1,
  };
  s.devs.set(st.handle, d);
  s.streams.set(d.defaultStream, { dev: d, lane: null, nonBlocking: false });
  return d;
}

/** Learn the streams of every open device (a stream created since the last look is found here). */
function rescan(s: Session): void {
  for (const st of openDeviceStates()) {
    const d = deviceOf(s, st);
    for (const ref of st.streams) {
      const x = ref.deref();
      if (x && !x.disposed && !s.streams.has(x.handle)) s.streams.set(x.handle, { dev: d, lane: null, nonBlocking: x.nonBlocking });
    }
  }
}

function laneOf(s: Session, d: Dev, stream: number, nonBlocking: boolean): Lane {
  const isDefault = stream === d.defaultStream;
  const tid = isDefault ? 0 : d.nextTid++;
  const lane: Lane = { tid, stream, name: isDefault ? "default stream" : `stream ${tid}${nonBlocking ? " (non-blocking)" : ""}` };
  d.lanes.push(lane);
  s.lanes.push({ pid: d.pid, tid, name: lane.name, stream, device: d.label });
  return lane;
}

/** Where work on `stream` goes, or null when it is not timed (unknown stream, or capturing). */
function place(s: Session, stream: number): { dev: Dev; lane: Lane } | null {
  let e = s.streams.get(stream);
  if (!e) {
    rescan(s);
    e = s.streams.get(stream);
    if (!e) {
      s.unplaced++;
      return null;
    }
  }
  try {
    if (e.dev.api.stream_capture_status(stream) !== 0) {
      s.captured++;
      return null;
    }
  } catch {
    return null;
  }
  e.lane ??= laneOf(s, e.dev, stream, e.nonBlocking);
  return { dev: e.dev, lane: e.lane };
}

function take(d: Dev): number {
  const e = d.pool.pop();
  if (e !== undefined) return e;
  const h = d.api.event_create(d.state.handle, 0);
  d.all.push(h);
  return h;
}

/** A span on the JavaScript lane: the JS thread inside a call from `h0` (µs) until now. */
function jsSpan(s: Session, name: string, cat: "js-call" | "js-wait", h0: number, args?: Record<string, unknown>): void {
  if (s.quiet > 0) return;
  s.js.push({ name, cat, ph: "X", ts: h0, dur: nowUs(s) - h0, pid: JS_PID, tid: JS_TID, ...(args ? { args } : {}) });
}

/** Run `run` (the native call) between two timing events on `stream`; returns its status. */
function timed(s: Session, stream: number, name: string, cat: string, args: Record<string, unknown>, run: () => number, blocking = false): number {
  const h0 = nowUs(s);
  const rc = timedOp(s, stream, name, cat, args, run);
  const js = cat === "kernel" ? `launch ${name}` : name;
  jsSpan(s, blocking ? `${js} + wait` : js, blocking ? "js-wait" : "js-call", h0);
  return rc;
}

function timedOp(s: Session, stream: number, name: string, cat: string, args: Record<string, unknown>, run: () => number): number {
  const at = place(s, stream);
  if (!at) return run();
  const { dev, lane } = at;
  // Both events are taken before the op runs: taking one may create it, and a creation writes its
  // handle into the result layer's scratch block, where an op with out-values (a stream-ordered
  // allocation's address, a peer copy's path) has just left them for its caller to read.
  const e0 = take(dev), e1 = take(dev);
  try {
    dev.api.event_record(e0, stream);
  } catch {
    dev.pool.push(e0, e1);
    return run();
  }
  const rc = run();
  if (rc !== 0) {
    dev.pool.push(e0, e1);
    return rc;
  }
  keepingOuts(() => {
    try {
      dev.api.event_record(e1, stream);
    } catch {
      dev.pool.push(e0, e1);
      return;
    }
    push(s, { dev, lane, events: [e0, e1], items: [{ name, cat, args, from: 0, to: 1 }], scope: s.scope }); // may drain: reads elapsed times through the scratch block
  });
  return rc;
}

function push(s: Session, r: Rec): void {
  s.pending.push(r);
  if (s.pending.length >= s.drainAt) {
    drain(s, false);
    s.drainAt = Math.max(2048, s.pending.length * 2);
  }
}

/** Turn finished records into trace events and give their events back (all: also unfinished ones). */
function drain(s: Session, all: boolean): void {
  let keep = 0;
  const end = new Map<Dev, number>();
  for (const r of s.pending) {
    const last = r.events[r.events.length - 1]!;
    let finished: boolean;
    try {
      finished = r.dev.api.event_query(last);
    } catch {
      finished = false;
    }
    if (!finished && !all) {
      s.pending[keep++] = r;
      continue;
    }
    const ms = r.events.map((e) => {
      try {
        return eventElapsed(r.dev.base, e, r.dev.state.backend);
      } catch {
        return NaN; // not reached yet
      }
    });
    for (const it of r.items) {
      const a = ms[it.from]!;
      if (Number.isNaN(a)) {
        s.unfinished++; // not begun by the stop: left out
        continue;
      }
      let b = ms[it.to]!;
      const args = { ...it.args };
      if (!Number.isNaN(b)) {
        try {
          b = a + eventElapsed(r.events[it.from]!, r.events[it.to]!, r.dev.state.backend); // the duration at full precision
        } catch {
          /* the difference of the two times from the base will do */
        }
      } else {
        let m = end.get(r.dev);
        if (m === undefined) end.set(r.dev, (m = endMark(r.dev)));
        b = Math.max(a, m);
        args["unfinished"] = true;
        s.unfinished++;
      }
      if (r.scope) args["scope"] = r.scope.id;
      s.done.push({ name: it.name, cat: it.cat, ph: "X", ts: r.dev.baseUs + a * 1000, dur: Math.max(0, (b - a) * 1000), pid: r.dev.pid, tid: r.lane.tid, args });
    }
    if (finished) r.dev.pool.push(...r.events);
  }
  s.pending.length = keep;
}

/** Milliseconds from the device's base to now, on the device's clock. */
function endMark(d: Dev): number {
  const e = take(d);
  d.api.event_record(e, d.own);
  const s = session;
  if (s) s.quiet++;
  try {
    d.api.event_synchronize(e);
  } finally {
    if (s) s.quiet--;
  }
  const ms = eventElapsed(d.base, e, d.state.backend);
  d.pool.push(e);
  return ms;
}

// ---- the tracing versions of the table entries ---------------------------------------------------

const hex = (h: number) => `0x${h.toString(16)}`;
const kernelName = (k: number) => kernelNames.get(k) ?? `kernel ${hex(k)}`;
type N = (...a: any[]) => number; // eslint-disable-line @typescript-eslint/no-explicit-any

function rawBytes(bytes: unknown, len: number): Uint8Array | null {
  if (len <= 0) return null;
  if (typeof bytes === "number") return bytes ? new Uint8Array(nativeView(bytes, len)) : null;
  if (bytes instanceof ArrayBuffer) return new Uint8Array(bytes, 0, len);
  if (ArrayBuffer.isView(bytes)) return new Uint8Array(bytes.buffer, bytes.byteOffset, len);
  return null;
}

const OP_LABEL: Record<string, string> = { copy: "copy DtoD", copyHtoD: "copy HtoD", copyDtoH: "copy DtoH", memset: "memset" };

/**
 * A command list's submit, traced: its commands decoded, resubmitted with an event record before
 * each and one after the last; the refusal of a bad command names its offset in the caller's list.
 */
function tracedSubmit(s: Session, orig: N, stream: number, bytes: unknown, len: number, rest: unknown[], badAt: number): number {
  const h0 = nowUs(s);
  const wait = badAt === 1 && (Number(rest[0]) & SUBMIT_WAIT) !== 0;
  const name = { v: "command list" };
  const rc = submitOp(s, orig, stream, bytes, len, rest, badAt, name);
  jsSpan(s, wait ? `submit + wait: ${name.v}` : `submit: ${name.v}`, wait ? "js-wait" : "js-call", h0);
  return rc;
}

function submitOp(s: Session, orig: N, stream: number, bytes: unknown, len: number, rest: unknown[], badAt: number, named: { v: string }): number {
  const src = rawBytes(bytes, len);
  const at = src ? place(s, stream) : null;
  if (!src || !at) return orig(stream, bytes, len, ...rest);
  const cmds: RawCommand[] = decodeRaw(new DataView(src.buffer, src.byteOffset, src.byteLength), len);
  const covered = cmds.length ? cmds[cmds.length - 1]!.offset + cmds[cmds.length - 1]!.size : 0;
  if (cmds.length === 0 || covered !== len) return orig(stream, bytes, len, ...rest); // malformed: the shim says why
  const { dev, lane } = at;
  const events = cmds.map(() => take(dev));
  events.push(take(dev));
  const copy = withEventRecords(src, cmds, events);
  const rc = orig(stream, copy.bytes, copy.bytes.length, ...rest);
  if (rc !== 0) {
    dev.pool.push(...events);
    const out = rest[badAt];
    if (typeof out === "number" && out) {
      // The shim's offset is into the copy: give the caller the command's offset in its own list.
      const w = new Uint32Array(nativeView(out, 8));
      const bad = w[0]! + w[1]! * 4294967296;
      const i = copy.at.indexOf(bad);
      if (i >= 0) {
        w[0] = cmds[i]!.offset >>> 0;
        w[1] = Math.floor(cmds[i]!.offset / 4294967296);
      }
    }
    return rc;
  }
  const items: Item[] = [];
  let kernels = 0;
  cmds.forEach((c, i) => {
    if (c.op === "launch") {
      kernels++;
      items.push({ name: kernelName(c.kernel!), cat: "kernel", args: { grid: c.grid, block: c.block, shared: c.shared, list: true }, from: i, to: i + 1 });
    } else if (c.op in OP_LABEL) items.push({ name: OP_LABEL[c.op]!, cat: c.op === "memset" ? "memset" : "copy", args: { bytes: c.bytes, list: true }, from: i, to: i + 1 });
    else if (c.op === "eventWait") items.push({ name: "event wait", cat: "wait", args: { list: true }, from: i, to: i + 1 });
  });
  const name = !s.scope ? "command list" : kernels > 0 ? s.scope.name : copiesName(cmds);
  named.v = name;
  items.unshift({ name, cat: "submit", args: { commands: cmds.length, kernels, bytes: len }, from: 0, to: cmds.length });
  keepingOuts(() => push(s, { dev, lane, events, items, scope: s.scope })); // a drain reads through the scratch block
  return rc;
}

/** A list of a plan call without kernels (a run's copies in or out) is named by what it copies. */
function copiesName(cmds: readonly RawCommand[]): string {
  const ins = cmds.some((c) => c.op === "copyHtoD"), outs = cmds.some((c) => c.op === "copyDtoH");
  return ins && !outs ? "copies in" : outs && !ins ? "copies out" : "copies";
}

const COLL_NAME: Record<number, string> = Object.fromEntries(Object.entries(Coll).map(([k, v]) => [v, k.toLowerCase().replace(/_(.)/g, (_, c: string) => c.toUpperCase())]));

/**
 * The native entries that take a stream and are not traced, each with why: every other entry that
 * takes a stream must have a tracer (test/trace.test.ts checks it against ffi/sys.ts, so a new
 * work-issuing entry cannot be invisible in timelines by omission).
 */
export const UNTRACED_STREAM_ENTRIES: Readonly<Record<string, string>> = {
  bg_stream_synchronize: "a host wait, not device work (swapped apart, for the JavaScript lane only: hostWaits)",
  bg_stream_query: "a host query",
  bg_stream_wait_event: "an ordering edge between streams, not work (its wait shows as the gap before the next span)",
  bg_stream_notify: "bungpu's own completion callback (wake.ts), queued behind every awaited op",
  bg_stream_write_value32: "a 4-byte store that releases a waiting host function (hostfn.ts), part of that host function's span",
  bg_event_record: "a marker; the tracer's own timing is event records",
  bg_stream_begin_capture: "capture: nothing runs",
  bg_stream_end_capture: "capture: nothing runs",
  bg_stream_capture_status: "a host query",
  bg_graph_upload: "prepares a replay; the replay (bg_graph_launch) is traced",
  bg_bench_launch_loop: "benches only: the loop measures the raw launch cost, untraced on purpose",
  bg_bench_issue_loop: "benches only: the loop measures the raw issue cost, untraced on purpose",
};

/** The native entries a trace replaces while it runs. */
export function tracedEntries(): string[] {
  return Object.keys(tracers({} as Session));
}

function tracers(s: Session): Record<string, (o: NativeFn) => NativeFn> {
  const t = (f: (o: N) => N) => f as unknown as (o: NativeFn) => NativeFn;
  const copy = (name: string) =>
    t((o) => (stream: number, dst: number, src: number, bytes: number) => timed(s, stream, name, "copy", { bytes: Number(bytes) }, () => o(stream, dst, src, bytes)));
  /** A synchronous device call, timed on the device's default stream (where it is ordered). */
  const sync = (name: string, cat: string, argsOf: (a: number[]) => Record<string, unknown>) =>
    t((o) => (dev: number, ...a: number[]) => {
      let d = s.devs.get(dev);
      if (!d) {
        rescan(s);
        d = s.devs.get(dev);
      }
      if (!d) return o(dev, ...a);
      return timed(s, d.defaultStream, name, cat, argsOf(a), () => o(dev, ...a), true);
    });
  return {
    bg_launch: t((o) => (k: number, st: number, gx: number, gy: number, gz: number, bx: number, by: number, bz: number, sh: number, args: number, n: number) =>
      timed(s, st, kernelName(k), "kernel", { grid: [gx, gy, gz], block: [bx, by, bz], shared: sh }, () => o(k, st, gx, gy, gz, bx, by, bz, sh, args, n))),
    bg_memcpy_htod_async: copy("copy HtoD"),
    bg_memcpy_dtoh_async: copy("copy DtoH"),
    bg_memcpy_dtod_async: copy("copy DtoD"),
    bg_memset_async: t((o) => (st: number, dst: number, pattern: number, size: number, count: number) =>
      timed(s, st, "memset", "memset", { bytes: size * Number(count) }, () => o(st, dst, pattern, size, count))),
    bg_memcpy_htod: sync("copy HtoD (sync)", "copy", (a) => ({ bytes: Number(a[2]) })),
    bg_memcpy_dtoh: sync("copy DtoH (sync)", "copy", (a) => ({ bytes: Number(a[2]) })),
    bg_memcpy_dtod: sync("copy DtoD (sync)", "copy", (a) => ({ bytes: Number(a[2]) })),
    bg_memset: sync("memset (sync)", "memset", (a) => ({ bytes: a[2]! * Number(a[3]) })),
    bg_launch_host_func: t((o) => (st: number, fn: number, user: number) => timed(s, st, "host function (native)", "hostfn", {}, () => o(st, fn, user))),
    bg_stream_host_signal: t((o) => (st: number, sig: number) => timed(s, st, "host function", "hostfn", {}, () => o(st, sig))),
    bg_stream_wait_value32: t((o) => (st: number, addr: number, v: number) => timed(s, st, "host function", "hostfn", { wait: "value32" }, () => o(st, addr, v))),
    bg_graph_launch: t((o) => (x: number, st: number) => timed(s, st, "graph replay", "graph", { exec: hex(x) }, () => o(x, st))),
    bg_memcpy_peer_async: t((o) => (st: number, dst: number, dd: number, src: number, sd: number, bytes: number, path: number) =>
      timed(s, st, "copy peer", "copy", { bytes: Number(bytes) }, () => o(st, dst, dd, src, sd, bytes, path))),
    bg_comm_collective: t((o) => (comm: number, st: number, coll: number, send: number, recv: number, count: number, dtype: number, op: number, peer: number) =>
      timed(s, st, COLL_NAME[coll] ?? `collective ${coll}`, "collective", { count: Number(count) }, () => o(comm, st, coll, send, recv, count, dtype, op, peer))),
    bg_mem_alloc_async: t((o) => (st: number, pool: number, bytes: number, out: number) =>
      timed(s, st, "alloc (stream-ordered)", "memory", { bytes: Number(bytes) }, () => o(st, pool, bytes, out))),
    bg_mem_free_async: t((o) => (st: number, ptr: number) => timed(s, st, "free (stream-ordered)", "memory", {}, () => o(st, ptr))),
    bg_submit: t((o) => (st: number, b: unknown, len: number) => tracedSubmit(s, o, st, b, Number(len), [], -1)),
    bg_submit_checked: t((o) => (st: number, b: unknown, len: number, bad: number) => tracedSubmit(s, o, st, b, Number(len), [bad], 0)),
    bg_submit_ex: t((o) => (st: number, b: unknown, len: number, flags: number, bad: number) => tracedSubmit(s, o, st, b, Number(len), [flags, bad], 1)),
    bg_ring_push: t((o) => (ring: number, msgs: unknown, n: number, out: number) => {
      const rc = o(ring, msgs, n, out);
      if (rc === 0) s.host.push({ name: "ring push", ph: "i", s: "t", ts: nowUs(s), pid: 0, tid: 0, cat: "ring", args: { ring: hex(ring), messages: new Uint32Array(nativeView(out, 4))[0] } });
      return rc;
    }),
    bg_ring_pop: t((o) => (ring: number, dst: unknown, max: number, out: number) => {
      const rc = o(ring, dst, max, out);
      const n = rc === 0 ? new Uint32Array(nativeView(out, 4))[0]! : 0;
      if (n > 0) s.host.push({ name: "ring pop", ph: "i", s: "t", ts: nowUs(s), pid: 0, tid: 0, cat: "ring", args: { ring: hex(ring), messages: n } });
      return rc;
    }),
    // A stream destroyed: its handle may come back for a new stream, which gets a lane of its own.
    bg_stream_destroy: t((o) => (st: number) => {
      s.streams.delete(st);
      return o(st);
    }),
    // A device closing takes its events with it: finish its records first.
    bg_device_close: t((o) => (dev: number) => {
      const d = s.devs.get(dev);
      if (d) closeDev(s, d, true);
      return o(dev);
    }),
  };
}

/** Write out a device's records and free the tracer's events and stream on it (wait: for its work first). */
function closeDev(s: Session, d: Dev, wait: boolean): void {
  const mine = s.pending.filter((r) => r.dev === d);
  const others = s.pending.filter((r) => r.dev !== d);
  s.pending.length = 0;
  s.pending.push(...mine);
  // The close would wait for the device's work anyway: wait for the traced part of it first.
  if (wait)
    for (const r of mine)
      try {
        d.api.event_synchronize(r.events[r.events.length - 1]!);
      } catch {
        /* written as far as it got */
      }
  drain(s, true);
  s.pending.push(...others);
  for (const e of d.all)
    try {
      d.api.event_destroy(e);
    } catch {
      /* gone with the device */
    }
  try {
    d.api.stream_destroy(d.own);
  } catch {
    /* gone with the device */
  }
  s.devs.delete(d.state.handle);
  for (const [h, e] of s.streams) if (e.dev === d) s.streams.delete(h);
}

// ---- plan executions as spans ----------------------------------------------------------------------

const PLAN_METHODS = ["execute", "executeAsync", "executeWithVars", "executeProfiled", "executeWithVarsProfiled", "runSync"] as const;

function swapPlanMethods(s: Session): () => void {
  const proto = ExecutionPlan.prototype as unknown as Record<string, (...a: unknown[]) => unknown>;
  const saved: [string, (...a: unknown[]) => unknown][] = [];
  for (const m of PLAN_METHODS) {
    const orig = proto[m];
    if (typeof orig !== "function") continue;
    saved.push([m, orig]);
    proto[m] = function (this: unknown, ...a: unknown[]) {
      if (s.scope) return orig.apply(this, a); // the outer call's span covers it
      const name = `ExecutionPlan.${m}`;
      s.scope = { id: ++s.scopes, name };
      s.scopeNames.set(s.scope.id, s.scope.name);
      const h0 = nowUs(s);
      try {
        const r = orig.apply(this, a); // the async forms queue their work before they first await
        if (r instanceof Promise) awaited(s, name, h0, r);
        return r;
      } finally {
        s.scope = null;
        jsSpan(s, name, "js-call", h0);
      }
    };
  }
  // run(): the call itself (checking the feeds, queueing, and issuing where a slot is free) on the
  // JavaScript lane; its number comes from the run queue's hook, called inside it.
  const run = proto["run"];
  if (typeof run === "function") {
    saved.push(["run", run]);
    proto["run"] = function (this: unknown, ...a: unknown[]) {
      const h0 = nowUs(s), before = s.runs;
      try {
        return run.apply(this, a);
      } finally {
        const id = s.runs > before ? s.runs : 0;
        jsSpan(s, id ? `ExecutionPlan.run #${id} queued` : "ExecutionPlan.run", "js-call", h0, id ? { run: id } : undefined);
      }
    };
  }
  return () => {
    for (const [m, f] of saved) proto[m] = f;
  };
}

/** An awaited call on the "awaited runs" lane: from `h0` until `p` settles (written up to the stop if it has not). */
function awaited(s: Session, name: string, h0: number, p: Promise<unknown>): void {
  const key = -++s.asyncs; // apart from the runs' numbers
  s.awaiting.set(key, { name, at: h0 });
  const done = (ok: boolean) => {
    if (session !== s || !s.awaiting.delete(key)) return;
    s.js.push({ name, cat: "js-await", ph: "X", ts: h0, dur: nowUs(s) - h0, pid: JS_PID, tid: AWAIT_TID, args: { ok } });
  };
  p.then(() => done(true), () => done(false));
}

/**
 * plan.run through the run queue's hooks: each run numbered when queued, its await timed until
 * its promise settles, and the work it issues (copies in, the plan's list, copies out; or an
 * inline run) in one scope, a span on the device lanes and one on the JavaScript lane.
 */
function swapRunHooks(s: Session): () => void {
  const saved = { ...runHooks };
  const ids = new WeakMap<RunJob, number>();
  let open: { job: RunJob; h0: number; scoped: boolean } | null = null;
  runHooks.queued = (job) => {
    const id = ++s.runs;
    ids.set(job, id);
    const name = `await run #${id}`, h0 = nowUs(s);
    s.awaiting.set(id, { name, at: h0 });
    const res = job.resolve, rej = job.reject;
    const done = (ok: boolean) => {
      if (session !== s || !s.awaiting.delete(id)) return;
      s.js.push({ name, cat: "js-await", ph: "X", ts: h0, dur: nowUs(s) - h0, pid: JS_PID, tid: AWAIT_TID, args: { run: id, ok } });
    };
    job.resolve = (v) => {
      done(true);
      res(v);
    };
    job.reject = (e) => {
      done(false);
      rej(e);
    };
  };
  runHooks.begin = (job) => {
    if (open) return;
    const scoped = s.scope === null;
    if (scoped) {
      const id = ids.get(job);
      s.scope = { id: ++s.scopes, name: id ? `ExecutionPlan.run #${id}` : "ExecutionPlan.run" };
      s.scopeNames.set(s.scope.id, s.scope.name);
    }
    open = { job, h0: nowUs(s), scoped };
  };
  runHooks.end = (job) => {
    if (!open || open.job !== job) return;
    const id = ids.get(job);
    jsSpan(s, id ? `ExecutionPlan.run #${id}` : "ExecutionPlan.run", "js-call", open.h0, id ? { run: id } : undefined);
    if (open.scoped) s.scope = null;
    open = null;
  };
  return () => Object.assign(runHooks, saved);
}

/** Host waits, on the JavaScript lane only (they are not device work). */
function hostWaits(s: Session): Record<string, (o: NativeFn) => NativeFn> {
  const wait = (name: string) =>
    ((o: N) => (h: number) => {
      const h0 = nowUs(s);
      const rc = o(h);
      jsSpan(s, name, "js-wait", h0);
      return rc;
    }) as unknown as (o: NativeFn) => NativeFn;
  return { bg_stream_synchronize: wait("stream synchronize"), bg_event_synchronize: wait("event synchronize"), bg_device_synchronize: wait("device synchronize") };
}

// ---- start, stop, write ------------------------------------------------------------------------------

/** Whether a trace is being recorded. */
export function active(): boolean {
  return session !== null;
}

/**
 * Begin recording every stream's work. Throws GpuError ILLEGAL_STATE when a trace is already
 * being recorded (one at a time: with BUNGPU_TRACE set, the process's own).
 */
export function start(): void {
  if (session) illegalState("trace.start", "a trace is already being recorded (stop() it first)");
  const s: Session = {
    t0: performance.now(), devs: new Map(), streams: new Map(), pending: [], done: [], host: [], lanes: [], restore: [],
    drainAt: 2048, scope: null, scopes: 0, scopeNames: new Map(), captured: 0, unplaced: 0, unfinished: 0,
    js: [], awaiting: new Map(), runs: 0, asyncs: 0, quiet: 0,
  };
  session = s;
  try {
    rescan(s);
    s.restore.push(swapNative(tracers(s)), swapNative(hostWaits(s)), swapPlanMethods(s), swapRunHooks(s));
  } catch (e) {
    session = null;
    for (const r of s.restore) r();
    throw e;
  }
}

/**
 * Stop recording and return the trace. Work still queued is waited for (up to opts.waitMs,
 * running host functions meanwhile); what has not finished by then is written up to the stop
 * and counted in otherData.unfinished. Throws GpuError ILLEGAL_STATE when no trace is being
 * recorded.
 */
export function stop(opts: StopOptions = {}): Trace {
  const s = session;
  if (!s) illegalState("trace.stop", "no trace is being recorded (start() one first)");
  const waitMs = opts.waitMs ?? 2000;
  if (typeof waitMs !== "number" || !(waitMs >= 0)) throw new GpuError(Status.INVALID_VALUE, "trace.stop: waitMs must be a number >= 0", { backend: "typescript", call: "trace.stop" });
  for (const r of s.restore) r(); // from here on nothing new is traced
  const stopUs = nowUs(s);
  for (const [id, a] of s.awaiting) s.js.push({ name: a.name, cat: "js-await", ph: "X", ts: a.at, dur: stopUs - a.at, pid: JS_PID, tid: AWAIT_TID, args: { ...(a.name.startsWith("await run") ? { run: id } : {}), unfinished: true } });
  s.awaiting.clear();
  session = null;
  const until = performance.now() + waitMs;
  const reached = () =>
    s.pending.every((r) => {
      try {
        return r.dev.api.event_query(r.events[r.events.length - 1]!);
      } catch {
        return true;
      }
    });
  try {
    blockUntil(() => reached() || performance.now() > until, "trace.stop");
  } catch {
    /* an async host function holds a stream: what it holds up is written as unfinished */
  }
  for (const d of [...s.devs.values()]) closeDev(s, d, false); // waited for above
  const meta: TraceEvent[] = [];
  const pids = new Map<number, string>();
  for (const l of s.lanes) {
    if (!pids.has(l.pid)) pids.set(l.pid, l.device);
    meta.push({ name: "thread_name", ph: "M", ts: 0, pid: l.pid, tid: l.tid, args: { name: l.name } });
    meta.push({ name: "thread_sort_index", ph: "M", ts: 0, pid: l.pid, tid: l.tid, args: { sort_index: l.tid } });
  }
  for (const [pid, name] of pids) meta.push({ name: "process_name", ph: "M", ts: 0, pid, tid: 0, args: { name } });
  const js = [...s.js, ...hostGaps(s.done, s.js)];
  if (s.host.length || js.length) meta.push({ name: "process_name", ph: "M", ts: 0, pid: JS_PID, tid: 0, args: { name: "host" } });
  if (s.host.length) meta.push({ name: "thread_name", ph: "M", ts: 0, pid: JS_PID, tid: 0, args: { name: "rings" } });
  if (js.length) meta.push({ name: "thread_name", ph: "M", ts: 0, pid: JS_PID, tid: JS_TID, args: { name: "JavaScript" } });
  if (js.some((e) => e.tid === AWAIT_TID)) meta.push({ name: "thread_name", ph: "M", ts: 0, pid: JS_PID, tid: AWAIT_TID, args: { name: "awaited runs" } });
  const spans = [...s.done, ...scopeSpans(s.done, s.scopeNames), ...js];
  // Each lane in time order; a span before what it holds (the longer first at one start).
  spans.sort((a, b) => a.pid - b.pid || a.tid - b.tid || a.ts - b.ts || (b.dur ?? 0) - (a.dur ?? 0));
  return {
    traceEvents: [...meta, ...spans, ...s.host],
    displayTimeUnit: "ms",
    otherData: { producer: "bungpu", lanes: s.lanes, captured: s.captured, unplaced: s.unplaced, unfinished: s.unfinished },
  };
}

/** BUNGPU_TRACE=file.json: trace the whole process and write the file when it exits. */
const envPath = process.env["BUNGPU_TRACE"];
if (envPath) {
  start();
  process.on("exit", () => {
    if (!session) return;
    try {
      write(envPath, stop({ waitMs: 1000 }));
    } catch (e) {
      console.error(`bungpu: BUNGPU_TRACE: could not write ${envPath}: ${(e as Error).message}`);
    }
  });
}
