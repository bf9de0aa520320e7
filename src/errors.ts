// GpuError (defined with the result layer, ffi/errors.ts, and re-exported here) and the
// validation helpers src/ uses to throw it before anything crosses the FFI.
import { GpuError, Status, StatusName, type BackendLabel } from "../ffi/errors";

export { GpuError, StatusName, type BackendLabel };
export { Status };

/** Throw an INVALID_VALUE GpuError from TypeScript validation. */
export function invalid(call: string, message: string): never {
  throw new GpuError(Status.INVALID_VALUE, `${call}: ${message}`, { backend: "typescript", call });
}

export function illegalState(call: string, message: string): never {
  throw new GpuError(Status.ILLEGAL_STATE, `${call}: ${message}`, { backend: "typescript", call });
}

export function disposed(call: string, what: string): never {
  throw new GpuError(Status.INVALID_HANDLE, `${call}: the ${what} was disposed`, {
    backend: "typescript",
    call,
  });
}

/**
 * An options argument: `{}` when omitted (undefined), the object itself when it is one, else
 * INVALID_VALUE (null, a string, a number, an array).
 */
export function options<T extends object>(call: string, o: T | undefined): T {
  if (o === undefined) return {} as T;
  if (o === null || typeof o !== "object" || Array.isArray(o)) invalid(call, `options must be an object, got ${describeGot(o)}`);
  return o;
}

/** A short description of a value for an error message ("null", "a string", "NaN", "[object]"). */
export function describeValue(v: unknown): string {
  if (v === null) return "null";
  if (v === undefined) return "undefined";
  if (typeof v === "number" || typeof v === "boolean" || typeof v === "bigint") return String(v);
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (Array.isArray(v)) return "an array";
  if (typeof v === "function") return "a function";
  const name = (v as object).constructor?.name;
  return name ? `${/^[AEIOU]/.test(name) ? "an" : "a"} ${name}` : "an object";
}

/**
 * What a bad argument was, after "got": a string is called one (`got the string "1024"`, where
 * describeValue's bare `"1024"` could be taken for the number), anything else as describeValue says.
 */
export function describeGot(v: unknown): string {
  return typeof v === "string" ? `the string ${describeValue(v)}` : describeValue(v);
}

/** A finite number (any sign, fractions allowed), else INVALID_VALUE naming `what`. */
export function finiteNumber(call: string, what: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v)) invalid(call, `${what} must be a finite number, got ${describeGot(v)}`);
  return v;
}

/** An integer in [lo, hi] (a safe integer), else INVALID_VALUE naming `what`. */
export function integerIn(call: string, what: string, v: unknown, lo: number, hi: number): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < lo || v > hi)
    invalid(call, `${what} must be an integer in [${lo}, ${hi}], got ${describeGot(v)}`);
  return v;
}

/** A list (an Array), else INVALID_VALUE naming `what`. */
export function list<T>(call: string, what: string, v: readonly T[] | unknown): readonly T[] {
  if (!Array.isArray(v)) invalid(call, `${what} must be an array, got ${describeGot(v)}`);
  return v as readonly T[];
}

/**
 * Make a host-side array (a read's destination): JavaScript's RangeError "Out of memory" (or an
 * invalid array length) becomes GpuError OUT_OF_MEMORY naming the call and the size.
 */
export function hostArray<T>(call: string, bytes: number, make: () => T): T {
  try {
    return make();
  } catch (e) {
    if (e instanceof RangeError)
      throw new GpuError(Status.OUT_OF_MEMORY, `${call}: cannot allocate ${bytes} bytes of host memory for the result (${e.message})`, {
        backend: "typescript",
        call,
      });
    throw e;
  }
}

/** The text of a GpuError after its "CODE_NAME (code): " prefix. */
export function errorDetail(e: GpuError): string {
  const prefix = `${e.codeName} (${e.code}): `;
  return e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message;
}

/**
 * The same error (code, backend, call unless `call` is given) with its text rewritten by `f`:
 * a caller adds what only it knows (the environment variable that chose a device, the valid choices).
 */
export function reword(e: GpuError, f: (detail: string) => string, call?: string): GpuError {
  const out = new GpuError(e.code, f(errorDetail(e)), { backend: e.backend, call: call ?? e.call });
  (out as { cause?: unknown }).cause = e;
  return out;
}
