// The safetensors file format: reading (every byte of the header checked) and writing. This module
// works on plain arrays ({ dtype, shape, data }); tensor.ts wraps them in Tensors
// (Tensor.fromSafetensors / Tensor.toSafetensors), so nothing here imports the Tensor class.
//
// Layout: an 8-byte little-endian unsigned header length N, N bytes of JSON (an object; each key a
// tensor name mapping to { dtype, shape, data_offsets: [begin, end] }, plus an optional
// "__metadata__" object of strings), then the data section. Offsets are relative to the data
// section; the tensors tile it exactly (no overlap, no hole, nothing after the last one), and each
// tensor's bytes are its element count times its dtype size. Values are little endian.
//
// Reading reads the header, then each tensor once into its own array (the tensors never alias the
// file, so a later rewrite of it does not change them). The file is never mapped: a file that
// shrinks while it loads is a GpuError, not a SIGBUS, and no mapping's pages stay resident beside
// the arrays.
//
// dtypes: F32, I32, F16, BF16, I8, U8, BOOL and I64 load as their own dtypes (float32, int32,
// float16, bfloat16, int8, uint8, bool, int64; BOOL bytes other than 0 become 1) and are written
// under those names. The format's other dtypes are converted where exact: I16 and U16 become int32,
// U32 int64, U64 int64 when every value fits, F64 float32 when every value is a float32; anything
// else (F8_*, a value that does not fit) is a GpuError naming the dtype.
import { closeSync, fstatSync, openSync, readSync, writeFileSync } from "node:fs";
import { describeGot, GpuError, Status, describeValue, invalid } from "../errors";
import { hostArray, isHostArrayOf, type DType, type HostArray } from "./dtype";

export type SafetensorsDType = DType;

/** One tensor of a safetensors file: its elements (row-major), its shape and dtype. */
export interface SafetensorsEntry {
  readonly dtype: SafetensorsDType;
  readonly shape: readonly number[];
  /** The dtype's host array (dtype.ts HostArray). */
  readonly data: HostArray;
}

/** A whole file: its tensors in data order and its `__metadata__` strings. */
export interface SafetensorsFile {
  readonly tensors: Map<string, SafetensorsEntry>;
  readonly metadata: Record<string, string>;
}

/** Bytes per element of every dtype the format names. */
const DTYPE_SIZE: Readonly<Record<string, number>> = {
  BOOL: 1, U8: 1, I8: 1, F8_E5M2: 1, F8_E4M3: 1,
  I16: 2, U16: 2, F16: 2, BF16: 2,
  I32: 4, U32: 4, F32: 4,
  I64: 8, U64: 8, F64: 8,
};

/** The largest header accepted (the reference implementation's limit). */
const MAX_HEADER = 100_000_000;
/** The most tensors and dimensions a file may declare (each past it a GpuError; reading stays linear below). */
export const MAX_TENSORS = 1_000_000;
export const MAX_RANK = 1024;

function fileError(call: string, code: number, path: string, reason: string): never {
  throw new GpuError(code, `${call}: ${path}: ${reason}`, { backend: "typescript", call });
}

/** The file opened for reading, and its size; GpuError FILE_NOT_FOUND / INVALID_VALUE otherwise. */
function openFile(call: string, path: string): { fd: number; size: number } {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === "ENOENT" || code === "ENOTDIR") fileError(call, Status.FILE_NOT_FOUND, path, "no such file");
    fileError(call, Status.INVALID_VALUE, path, `cannot open (${(e as Error).message})`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) fileError(call, Status.INVALID_VALUE, path, "not a regular file");
    if (st.size < 8) fileError(call, Status.INVALID_VALUE, path, `the file has ${st.size} bytes, fewer than the 8-byte header length`);
    return { fd, size: st.size };
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

/**
 * `into.length` bytes of the file from `at`, read (not mapped: a file that shrinks or is replaced
 * while it loads is a GpuError here, not a fault on a mapping's missing pages).
 */
function readAt(call: string, path: string, fd: number, into: Uint8Array, at: number): void {
  let got = 0;
  while (got < into.length) {
    let n: number;
    try {
      n = readSync(fd, into, got, into.length - got, at + got);
    } catch (e) {
      fileError(call, Status.INVALID_VALUE, path, `cannot read (${(e as Error).message})`);
    }
    if (n === 0) fileError(call, Status.INVALID_VALUE, path, `the file ended at byte ${at + got} while being read (it changed under the loader; ${into.length - got} bytes missing)`);
    got += n;
  }
}

/** One tensor's bytes (`buf`, its own and aligned) as its dtype's host array, or a GpuError. */
function convert(call: string, path: string, name: string, dtype: string, buf: ArrayBuffer): { dtype: SafetensorsDType; data: HostArray } {
  const refuse = (why: string): never =>
    fileError(call, Status.INVALID_VALUE, path, `tensor ${JSON.stringify(name)} has dtype ${dtype}: ${why}`);
  const own = (d: DType) => ({ dtype: d, data: hostArray(d, buf) });
  switch (dtype) {
    case "F32": return own("float32");
    case "I32": return own("int32");
    case "F16": return own("float16");
    case "BF16": return own("bfloat16");
    case "I8": return own("int8");
    case "U8": return own("uint8");
    case "BOOL": return { dtype: "bool", data: Uint8Array.from(new Uint8Array(buf), (x) => (x ? 1 : 0)) };
    case "I64": return own("int64");
    case "U16": return { dtype: "int32", data: Int32Array.from(new Uint16Array(buf)) };
    case "I16": return { dtype: "int32", data: Int32Array.from(new Int16Array(buf)) };
    case "U32": return { dtype: "int64", data: BigInt64Array.from(new Uint32Array(buf), (x) => BigInt(x)) };
    case "U64": {
      const src = new BigUint64Array(buf);
      const out = new BigInt64Array(src.length);
      for (let i = 0; i < src.length; i++) {
        if (src[i]! > 0x7fffffffffffffffn) refuse(`element ${i} (${String(src[i])}) does not fit int64`);
        out[i] = src[i]!;
      }
      return { dtype: "int64", data: out };
    }
    case "F64": {
      const src = new Float64Array(buf);
      const out = Float32Array.from(src);
      for (let i = 0; i < src.length; i++)
        if (out[i] !== src[i] && !(Number.isNaN(out[i]) && Number.isNaN(src[i]))) refuse(`element ${i} (${src[i]}) is not exactly a float32`);
      return { dtype: "float32", data: out };
    }
    default:
      return refuse("no exact conversion to a dtype here (float32, int32, float16, bfloat16, int8, uint8, bool, int64)");
  }
}

interface HeaderEntry {
  readonly name: string;
  readonly dtype: string;
  readonly shape: number[];
  readonly begin: number;
  readonly end: number;
}

/**
 * Parse and check the header of a file of `total` bytes whose first bytes are read by `read`; the
 * data section starts at the returned `dataStart`.
 */
function parseHeader(call: string, path: string, total: number, read: (into: Uint8Array, at: number) => void): { entries: HeaderEntry[]; metadata: Record<string, string>; dataStart: number } {
  const bad = (reason: string): never => fileError(call, Status.INVALID_VALUE, path, reason);
  const lenBytes = new Uint8Array(8);
  read(lenBytes, 0);
  const n = new DataView(lenBytes.buffer).getBigUint64(0, true);
  if (n > BigInt(total - 8)) bad(`the header length ${n} runs past the end of the file (${total} bytes, ${total - 8} after the length)`);
  if (n > BigInt(MAX_HEADER)) bad(`the header length ${n} is over ${MAX_HEADER} bytes`);
  const hlen = Number(n);
  if (hlen < 2) bad(`the header length ${hlen} is too short for a JSON object`);
  const dataStart = 8 + hlen;
  const head = new Uint8Array(hlen);
  read(head, 8);
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(head);
  } catch {
    return bad("the header is not UTF-8");
  }
  if (text[0] !== "{") bad("the header does not start with '{'");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return bad(`the header is not JSON (${(e as Error).message})`);
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) bad("the header is not a JSON object");
  const metadata: Record<string, string> = {};
  const entries: HeaderEntry[] = [];
  const declared = Object.keys(json as object).length;
  if (declared > MAX_TENSORS + 1) bad(`the header declares ${declared} entries, more than the ${MAX_TENSORS} tensors a file may hold here`);
  for (const [name, v] of Object.entries(json as Record<string, unknown>)) {
    const what = `tensor ${JSON.stringify(name)}`;
    if (name === "__metadata__") {
      if (v === null || typeof v !== "object" || Array.isArray(v)) bad("__metadata__ is not an object");
      for (const [k, s] of Object.entries(v as Record<string, unknown>)) {
        if (typeof s !== "string") bad(`__metadata__ ${JSON.stringify(k)} is not a string (${describeValue(s)})`);
        own(metadata, k, s as string); // a key such as __proto__ is data
      }
      continue;
    }
    if (v === null || typeof v !== "object" || Array.isArray(v)) bad(`${what} is not an object`);
    const e = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    for (const k of Object.keys(e)) if (k !== "dtype" && k !== "shape" && k !== "data_offsets") bad(`${what} has an unknown field ${JSON.stringify(k)}`);
    if (typeof e.dtype !== "string") bad(`${what} has no dtype string`);
    const dtype = e.dtype as string;
    const size = Object.hasOwn(DTYPE_SIZE, dtype) ? DTYPE_SIZE[dtype]! : 0; // "constructor" is no dtype
    if (!size) bad(`${what} has an unknown dtype ${JSON.stringify(e.dtype)}`);
    if (Array.isArray(e.shape) && e.shape.length > MAX_RANK) bad(`${what} has ${e.shape.length} dimensions, more than the ${MAX_RANK} a tensor may have here`);
    if (!Array.isArray(e.shape) || e.shape.some((d) => typeof d !== "number" || !Number.isSafeInteger(d) || d < 0))
      bad(`${what} has a shape that is not an array of non-negative integers (${describeValue(e.shape)})`);
    const shape = e.shape as number[];
    const off = e.data_offsets;
    if (!Array.isArray(off) || off.length !== 2 || off.some((d) => typeof d !== "number" || !Number.isSafeInteger(d) || d < 0))
      bad(`${what} has data_offsets that are not two non-negative integers (${describeValue(off)})`);
    const [begin, end] = off as [number, number];
    if (end < begin) bad(`${what} has data_offsets [${begin}, ${end}] that end before they begin`);
    if (end > total - dataStart) bad(`${what} has data_offsets [${begin}, ${end}] past the data section (${total - dataStart} bytes): the file is truncated or its header lies`);
    let numel = 1;
    for (const d of shape) numel *= d;
    if (!Number.isSafeInteger(numel * size) || numel * size !== end - begin)
      bad(`${what}: shape [${shape.join(", ")}] of ${e.dtype} is ${numel * size} bytes but data_offsets [${begin}, ${end}] hold ${end - begin}`);
    entries.push({ name, dtype: e.dtype as string, shape: [...shape], begin, end });
  }
  const sorted = [...entries].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let at = 0;
  for (const e of sorted) {
    if (e.begin < at) bad(`tensor ${JSON.stringify(e.name)} at [${e.begin}, ${e.end}] overlaps the tensor before it (which ends at ${at})`);
    if (e.begin > at) bad(`a hole in the data section: bytes [${at}, ${e.begin}) belong to no tensor`);
    at = e.end;
  }
  if (at !== total - dataStart) bad(`the data section has ${total - dataStart} bytes but the tensors cover ${at}`);
  return { entries: sorted, metadata, dataStart };
}

/**
 * Read and check a safetensors file: the header, then each tensor read into its own array (never
 * a mapping of the file), whose memory `alloc` gives (a device's, see constants.ts deviceReader). Throws GpuError (FILE_NOT_FOUND, INVALID_VALUE) naming the path and the
 * reason, a file that changes while it is read included.
 */
export function readSafetensors(path: unknown, call = "Tensor.fromSafetensors", headerOnly = false, alloc: (bytes: number) => ArrayBuffer = (n) => new ArrayBuffer(n)): SafetensorsFile {
  if (typeof path !== "string" || !path) invalid(call, `path must be a non-empty string, got ${describeGot(path)}`);
  const { fd, size } = openFile(call, path);
  try {
    const read = (into: Uint8Array, at: number) => readAt(call, path, fd, into, at);
    const { entries, metadata, dataStart } = parseHeader(call, path, size, read);
    const tensors = new Map<string, SafetensorsEntry>();
    if (headerOnly) return { tensors, metadata }; // checked, not read
    for (const e of entries) {
      const buf = alloc(e.end - e.begin);
      read(new Uint8Array(buf), dataStart + e.begin);
      const { dtype, data } = convert(call, path, e.name, e.dtype, buf);
      tensors.set(e.name, { dtype, shape: e.shape, data });
    }
    return { tensors, metadata };
  } finally {
    closeSync(fd);
  }
}

/** Set `key` of `rec` as an own property, whatever the key (__proto__ included). */
export function own<T>(rec: Record<string, T>, key: string, value: T): void {
  Object.defineProperty(rec, key, { value, enumerable: true, writable: true, configurable: true });
}

/** The format's name of each dtype. */
const FORMAT_NAME: Readonly<Record<DType, string>> = { float32: "F32", int32: "I32", float16: "F16", bfloat16: "BF16", int8: "I8", uint8: "U8", bool: "BOOL", int64: "I64" };

/** The bytes of a safetensors file holding `tensors` (in the given order) and `metadata`. */
export function encodeSafetensors(tensors: ReadonlyMap<string, SafetensorsEntry>, metadata: Readonly<Record<string, string>> | undefined, call = "Tensor.toSafetensors"): Uint8Array {
  const header: Record<string, unknown> = {};
  if (metadata !== undefined) {
    if (metadata === null || typeof metadata !== "object" || Array.isArray(metadata)) invalid(call, `metadata must be an object of strings, got ${describeGot(metadata)}`);
    for (const [k, v] of Object.entries(metadata)) if (typeof v !== "string") invalid(call, `metadata ${JSON.stringify(k)} must be a string, got ${describeGot(v)}`);
    if (Object.keys(metadata).length) {
      const m: Record<string, string> = {};
      for (const [k, v] of Object.entries(metadata)) own(m, k, v);
      header["__metadata__"] = m;
    }
  }
  let at = 0;
  for (const [name, t] of tensors) {
    if (!name || name === "__metadata__") invalid(call, `a tensor cannot be named ${JSON.stringify(name)}`);
    const fmt = FORMAT_NAME[t.dtype];
    if (!fmt || !isHostArrayOf(t.dtype, t.data)) invalid(call, `tensor ${JSON.stringify(name)}: dtype ${describeValue(t.dtype)} with ${describeValue(t.data)} is no dtype and array pair of this project`);
    const bytes = t.data.byteLength;
    own(header, name, { dtype: fmt, shape: [...t.shape], data_offsets: [at, at + bytes] });
    at += bytes;
  }
  let json = JSON.stringify(header);
  let hbytes = new TextEncoder().encode(json);
  const pad = (8 - (hbytes.length % 8)) % 8;
  if (pad) {
    json += " ".repeat(pad);
    hbytes = new TextEncoder().encode(json);
  }
  const out = new Uint8Array(8 + hbytes.length + at);
  new DataView(out.buffer).setBigUint64(0, BigInt(hbytes.length), true);
  out.set(hbytes, 8);
  let p = 8 + hbytes.length;
  for (const t of tensors.values()) {
    out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), p);
    p += t.data.byteLength;
  }
  return out;
}

/** Write `tensors` to `path` as a safetensors file. Throws GpuError naming the path on failure. */
export function writeSafetensors(path: unknown, tensors: ReadonlyMap<string, SafetensorsEntry>, metadata?: Readonly<Record<string, string>>, call = "Tensor.toSafetensors"): void {
  if (typeof path !== "string" || !path) invalid(call, `path must be a non-empty string, got ${describeGot(path)}`);
  const bytes = encodeSafetensors(tensors, metadata, call);
  try {
    writeFileSync(path, bytes);
  } catch (e) {
    const code = (e as { code?: string }).code;
    fileError(call, code === "ENOENT" || code === "ENOTDIR" ? Status.FILE_NOT_FOUND : Status.INVALID_VALUE, path, `cannot write (${(e as Error).message})`);
  }
}
