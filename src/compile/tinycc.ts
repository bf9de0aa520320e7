// Bun's built-in TinyCC, the last resort for CPU kernels when no C compiler is installed. It
// compiles in memory without optimisation; the functions' addresses go to the shim as a symbol
// table (BG_IMAGE_SYMBOLS). The compiled code is kept for the life of the process, since the
// shim may still run a kernel from queued work after its module is unloaded.
import { cc, FFIType } from "bun:ffi";

const keep: unknown[] = [];

/** Compile `path` and return the address of each of `names`. Throws the compiler's message. */
export function tinyccCompile(path: string, include: string[], names: string[], flags: string[] = []): Map<string, number> {
  const symbols = Object.fromEntries(names.map((n) => [n, { args: [FFIType.ptr], returns: FFIType.void }]));
  const lib = cc({ source: path, include, symbols, flags });
  keep.push(lib);
  const out = new Map<string, number>();
  const fns = lib.symbols as unknown as Record<string, { ptr: unknown }>;
  for (const n of names) out.set(n, Number(fns[n]!.ptr));
  return out;
}
