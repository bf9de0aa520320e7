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
 * The keys an options argument may have, as `{ key: true, ... }`: every key of `T` and no other (the
 * compiler checks both, so a new option cannot be forgotten here). Declare one per options type at
 * module level, so checking a call's keys allocates nothing.
 */
export type OptionKeys<T> = { readonly [K in keyof T]-?: true };

/**
 * An options argument: `{}` when omitted (undefined), the object itself when it is one, else
 * INVALID_VALUE (null, a string, a number, an array). A key `known` does not list is INVALID_VALUE
 * too, naming the key and the nearest known one ("did you mean nonBlocking?"), or listing the
 * known keys when none is near: a misspelt option is refused, never silently ignored.
 */
export function options<T extends object>(call: string, o: T | undefined, known: NoInfer<OptionKeys<T>>): T {
  if (o === undefined) return {} as T;
  if (o === null || typeof o !== "object" || Array.isArray(o)) invalid(call, `options must be an object, got ${describeGot(o)}`);
  for (const k in o) if (!Object.hasOwn(known, k)) unknownOption(call, k, Object.keys(known));
  return o;
}

/**
 * INVALID_VALUE for an option `key` that is not one of `known`, suggesting the nearest; `what`
 * goes between the call and the text (a launch names its kernel: "Kernel.launch: vadd: unknown …").
 */
export function unknownOption(call: string, key: string, known: readonly string[], what = ""): never {
  const near = nearest(key, known);
  const name = JSON.stringify(key);
  if (near !== undefined) invalid(call, `${what}unknown option ${name} (did you mean ${near}?)`);
  if (!known.length) invalid(call, `${what}unknown option ${name}: it takes no options`);
  invalid(call, `${what}unknown option ${name}; the options are ${known.join(", ")}`);
}

/**
 * The entry of `known` nearest to `word`: one equal to it but for case, else the only one it begins
 * (`shared` → sharedBytes; a word of 3 letters or more), else the one fewest edits away
 * (editDistance) when that is at most a third of its length (at least 1, at most 3); else none.
 */
export function nearest(word: string, known: readonly string[]): string | undefined {
  const lower = word.toLowerCase();
  const same = known.find((k) => k.toLowerCase() === lower);
  if (same !== undefined) return same;
  const longer = word.length >= 3 ? known.filter((k) => k.toLowerCase().startsWith(lower)) : [];
  if (longer.length === 1) return longer[0];
  let best: string | undefined, bestD = Math.min(3, Math.max(1, Math.floor(word.length / 3))) + 1;
  for (const k of known) {
    const d = editDistance(lower, k.toLowerCase());
    if (d < bestD) [best, bestD] = [k, d];
  }
  return best;
}

/** Edits from `a` to `b`: insertions, deletions, substitutions and swaps of neighbours (`lable` → label is one). */
function editDistance(a: string, b: string): number {
  let before: number[] = [], prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) cur[j] = Math.min(cur[j]!, before[j - 2]! + 1);
    }
    [before, prev] = [prev, cur];
  }
  return prev[b.length]!;
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
