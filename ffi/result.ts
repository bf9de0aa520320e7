// The "result" layer: one typed wrapper per shim function, derived from its entry in sys.ts.
// A wrapper takes the in-arguments, calls the symbol with scratch slots for its out-pointers,
// throws GpuError (code, name, the bg_* call, the backend, the shim's message) on a non-zero
// status, and returns the out-values: nothing, one number, or a tuple. src/ calls these and never
// sees the symbol table or the scratch block.
//
//   const gpu = api("cuda");                         // wrappers that name "cuda" in their errors
//   const stream = gpu.stream_create(dev, 0, 0);     // bg_stream_create(dev, 0, 0, &out) -> out
//   const [free, total] = gpu.device_mem_info(dev);  // two u64 outs -> a tuple
//   if (!gpu.event_query(ev)) ...                    // NOT_READY -> false
//
// Each wrapper is compiled once per backend label as a function of exactly its arity (no rest
// arguments, no loops), so a call through it costs about what the raw symbol costs.
import { GpuError, Status, type BackendLabel } from "./errors";
import { MSG_AREA, N, SCRATCH, cstr, fail, lastError, readF32, readI32, readMsg, readPtr, scratchF32, scratchI32, scratchU32, scratchU8, slot } from "./native";
import { symbols, type Symbols } from "./sys";

export { GpuError, Status, type BackendLabel };
export { ImageKind, StatusName } from "./sys";

/** What a native call accepts for a pointer: an address (number), a view of memory, or null. */
export type Pointer = number | ArrayBufferView | ArrayBuffer | null;

type OutKind = "ptr" | "u64" | "i32" | "u32" | "f32";

// ---- the types, derived from the table ---------------------------------------------------------

type FFIArg<T> = T extends 12 /* FFIType.ptr */ ? Pointer : T extends 7 | 8 /* i64, u64 */ ? number | bigint : number;
type DropLast<T extends readonly unknown[], O extends readonly unknown[]> = O extends readonly [unknown, ...infer Rest]
  ? T extends readonly [...infer Init, unknown]
    ? DropLast<Init, Rest>
    : never
  : T;
type InArgs<E> = E extends { readonly args: infer A extends readonly unknown[] }
  ? E extends { readonly out: infer O extends readonly unknown[] }
    ? DropLast<A, O>
    : A
  : never;
type Typed<A extends readonly unknown[]> = { -readonly [I in keyof A]: FFIArg<A[I]> };
type Result<E> = E extends { readonly query: true }
  ? boolean
  : E extends { readonly out: infer O extends readonly unknown[] }
    ? O extends readonly [unknown]
      ? number
      : { -readonly [I in keyof O]: number }
    : void;
type Wrapper<E> = (...args: Typed<InArgs<E>>) => Result<E>;

/** The wrappers: `bg_stream_create` is `stream_create`. Functions whose return is a value, not a status, are left out. */
export type Api = {
  readonly [K in keyof Symbols as K extends `bg_${infer Name}` ? (Symbols[K] extends { readonly value: true } ? never : Name) : never]: Wrapper<Symbols[K]>;
};

// ---- the wrappers ------------------------------------------------------------------------------

interface EntryInfo {
  readonly args: readonly unknown[];
  readonly out?: readonly OutKind[];
  readonly query?: boolean;
  readonly value?: boolean;
}

/** The statement that reads out slot `i` as `kind` from the scratch views u32/i32/f32. */
function readOut(kind: OutKind, i: number): string {
  switch (kind) {
    case "ptr":
    case "u64":
      return `u32[${2 * i}] + u32[${2 * i + 1}] * 4294967296`;
    case "i32":
      return `i32[${2 * i}]`;
    case "u32":
      return `u32[${2 * i}]`;
    case "f32":
      return `f32[${2 * i}]`;
  }
}

function wrap(name: string, e: EntryInfo, backend: BackendLabel | undefined): (...a: never[]) => unknown {
  const outs = e.out ?? [];
  const nIn = e.args.length - outs.length;
  const params = Array.from({ length: nIn }, (_, i) => `a${i}`);
  const args = [...params, ...outs.map((_, i) => `${SCRATCH + 8 * i}`)].join(", ");
  const failHere = (rc: number): never => fail(rc, name, backend);
  let body: string;
  if (e.query) body = `const rc = n.${name}(${args}); if (rc === 0) return true; if (rc === ${Status.NOT_READY}) return false; return fail(rc);`;
  else if (outs.length === 0) body = `const rc = n.${name}(${args}); if (rc !== 0) fail(rc);`;
  else if (outs.length === 1) body = `const rc = n.${name}(${args}); if (rc !== 0) fail(rc); return ${readOut(outs[0]!, 0)};`;
  else body = `const rc = n.${name}(${args}); if (rc !== 0) fail(rc); return [${outs.map((k, i) => readOut(k, i)).join(", ")}];`;
  // One small function per symbol, of exactly its arity: the JIT inlines it like hand-written code.
  // It looks the symbol up on the table at each call, as a raw `N.bg_*` call does, so a table
  // whose entries are swapped (a test counting crossings, a tracer) sees every call.
  const make = Function("n", "fail", "u32", "i32", "f32", `"use strict"; return function ${name}(${params.join(", ")}) { ${body} };`);
  return make(N, failHere, scratchU32, scratchI32, scratchF32) as (...a: never[]) => unknown;
}

function build(backend: BackendLabel | undefined): Api {
  const out: Record<string, unknown> = {};
  for (const [name, entry] of Object.entries(symbols) as [string, EntryInfo][]) {
    if (entry.value) continue;
    out[name.slice(3)] = wrap(name, entry, backend);
  }
  return Object.freeze(out) as unknown as Api;
}

const apis = new Map<BackendLabel | undefined, Api>();

/** The wrappers whose errors name `backend` (none: calls that belong to no device, e.g. signals). */
export function api(backend?: BackendLabel): Api {
  let a = apis.get(backend);
  if (!a) apis.set(backend, (a = build(backend)));
  return a;
}

// ---- calls whose out-values are not trailing slots ---------------------------------------------

let numbers: ReadonlyMap<string, number> | undefined;
/** The loaded library's backends, name to number (bg_backend_count, bg_backend_name): a number is
 * the backend's line in the shim's table (shim/backends.c). Read once. */
export function backendNumbers(): ReadonlyMap<string, number> {
  if (numbers) return numbers;
  const m = new Map<string, number>();
  for (let b = 0, n = N.bg_backend_count(); b < n; b++) {
    scratchU8.fill(0, 1024, 1536);
    const rc = N.bg_backend_name(b, MSG_AREA, 512);
    if (rc !== 0) fail(rc, "bg_backend_name");
    m.set(readMsg(), b);
  }
  return (numbers = m);
}

/** bg_backend_info: whether the backend loaded, its device count, and why not. */
export function backendInfo(backend: number): { available: boolean; devices: number; message: string } {
  scratchU8.fill(0, 1024, 1536);
  const rc = N.bg_backend_info(backend, slot(0), slot(1), MSG_AREA, 512);
  if (rc !== 0) fail(rc, "bg_backend_info");
  return { available: readI32(0) === 1, devices: readI32(1), message: readMsg() };
}

/** bg_event_elapsed: milliseconds from `start` to `end`. */
export function eventElapsed(start: number, end: number, backend?: BackendLabel): number {
  const rc = N.bg_event_elapsed(slot(0), start, end);
  if (rc !== 0) fail(rc, "bg_event_elapsed", backend);
  return readF32(0);
}

/** bg_device_props_get: the raw bg_device_props bytes (offsets in constants.ts). */
export function devicePropsBytes(dev: number, size: number, backend?: BackendLabel): Uint8Array {
  const buf = new Uint8Array(size);
  const rc = N.bg_device_props_get(dev, buf);
  if (rc !== 0) fail(rc, "bg_device_props_get", backend);
  return buf;
}

/**
 * bg_rtc_compile, then bg_rtc_sizes, bg_rtc_copy and bg_rtc_free: the compiled code (NUL-
 * terminated: `code` holds `bytes` + 1 bytes) and the compiler's log. A failed compilation throws
 * GpuError with the log after the shim's message.
 */
export function rtcCompile(
  dev: number,
  source: string,
  name: string,
  options: string,
  wantCubin: boolean,
  backend: BackendLabel = "cuda",
): { code: Uint8Array; bytes: number; log: string } {
  scratchU32[0] = scratchU32[1] = 0; // a refusal before compiling writes no result
  const rc = N.bg_rtc_compile(dev, cstr(source), cstr(name), cstr(options), wantCubin ? 1 : 0, slot(0));
  const result = readPtr(0);
  const msg = rc !== 0 ? lastError() : "";
  if (!result) fail(rc || Status.UNKNOWN, "bg_rtc_compile", backend);
  const calls = api(backend);
  try {
    const [codeLen, logLen] = calls.rtc_sizes(result);
    const code = new Uint8Array(codeLen + 1);
    const log = new Uint8Array(logLen + 1);
    calls.rtc_copy(result, code, log);
    const text = new TextDecoder().decode(log.subarray(0, logLen));
    if (rc !== 0) throw new GpuError(rc, `${msg}\n${text}`, { backend, call: "bg_rtc_compile" });
    return { code, bytes: codeLen, log: text };
  } finally {
    N.bg_rtc_free(result);
  }
}

/**
 * bg_launch, for Kernel.launch's hot path: the same call and errors as `api(backend).launch`,
 * without the table of wrappers between (a few ns a launch).
 */
export function launch(
  kernel: number, stream: number, gx: number, gy: number, gz: number, bx: number, by: number, bz: number,
  shared: number, args: number, nargs: number, backend: BackendLabel,
): void {
  const rc = N.bg_launch(kernel, stream, gx, gy, gz, bx, by, bz, shared, args, nargs);
  if (rc !== 0) fail(rc, "bg_launch", backend);
}

/**
 * bg_comm_init_all: one communicator per device handle, rank i on `devices[i]` (ncclCommInitAll).
 * The handles go in and come back through one array of addresses.
 */
export function commInitAll(devices: readonly number[], backend?: BackendLabel): number[] {
  const n = devices.length;
  const devs = new BigUint64Array(Math.max(n, 1));
  devices.forEach((d, i) => (devs[i] = BigInt(d)));
  const out = new BigUint64Array(Math.max(n, 1));
  const rc = N.bg_comm_init_all(devs, n, out);
  if (rc !== 0) fail(rc, "bg_comm_init_all", backend);
  return Array.from(out.subarray(0, n), (h) => Number(h));
}

/** bg_comm_unique_id: the BG_COMM_ID_BYTES bytes that name a communicator to its ranks. */
export function commUniqueId(dev: number, bytes: number, backend?: BackendLabel): Uint8Array {
  const id = new Uint8Array(bytes);
  const rc = N.bg_comm_unique_id(dev, id, bytes);
  if (rc !== 0) fail(rc, "bg_comm_unique_id", backend);
  return id;
}

/** A command list the shim refused: `badOffset` is the byte offset of the command at fault, or null when it named none. */
export class SubmitError extends GpuError {
  readonly badOffset: number | null;
  constructor(code: number, message: string, badOffset: number | null, backend?: BackendLabel) {
    super(code, message, { backend, call: "bg_submit" });
    this.badOffset = badOffset;
  }
}

/**
 * bg_submit_ex: run the `len` bytes of commands at `bytes` on `stream`, validated first (nothing
 * runs if one is bad); with SUBMIT_WAIT, wait for them too. Throws SubmitError.
 */
export function submit(stream: number, bytes: Pointer, len: number, flags: number, backend?: BackendLabel): void {
  scratchU32[0] = 0xffffffff; // "no offset": the shim writes one only when a command is bad
  scratchU32[1] = 0xffffffff;
  const rc = N.bg_submit_ex(stream, bytes, len, flags, SCRATCH);
  if (rc === 0) return;
  const bad = scratchU32[0]! + scratchU32[1]! * 4294967296;
  throw new SubmitError(rc, lastError() || "bg_submit failed", bad < len ? bad : null, backend);
}

/** A native function as the table holds it. */
export type NativeFn = (...args: never[]) => number;

/**
 * @internal The tracer's switch (src/trace): replace the table entries named in `make` by what
 * each makes of the original, and return the function that puts the originals back. Every
 * wrapper above looks its symbol up on the table at each call, so the swap is seen everywhere
 * and the wrappers themselves never change; while nothing is swapped, no call pays for it.
 */
/**
 * Run `fn`, host bookkeeping done inside a native call's table entry after the call (a tracer),
 * without disturbing the out-values the call left in the scratch block for its caller to read.
 */
export function keepingOuts<T>(fn: () => T): T {
  const saved = scratchU32.slice(0, 16); // the first 8 out slots
  try {
    return fn();
  } finally {
    scratchU32.set(saved);
  }
}

export function swapNative(make: Readonly<Record<string, (original: NativeFn) => NativeFn>>): () => void {
  const table = N as unknown as Record<string, NativeFn>;
  const saved: [string, NativeFn][] = [];
  for (const [name, f] of Object.entries(make)) {
    const original = table[name];
    if (typeof original !== "function") continue;
    saved.push([name, original]);
    table[name] = f(original);
  }
  return () => {
    for (const [name, original] of saved) table[name] = original;
    saved.length = 0;
  };
}

export { addressOf, cString, cstr, fail, lastError, loadInfo, nativeView } from "./native";
