// The kernel names a source text defines, read from the text itself (no backend can list the
// entry points of a loaded module for every backend): `BG_KERNEL(name)` in CPU C, `__global__`
// functions in CUDA C, `kernel void name(` in MSL. Error messages and descriptions use it.
// Also the names of looked-up kernels by native handle, for timelines (src/trace), which see a
// launch, a command list or a graph name its kernel by handle only.

/**
 * Kernel names by native handle: written once per kernel when it is looked up (Module.kernel),
 * never on a launch; a handle the shim reuses after an unload gets the new kernel's name.
 */
export const kernelNamesByHandle = new Map<number, string>();

const PATTERNS = [
  /BG_KERNEL\s*\(\s*([A-Za-z_]\w*)\s*\)/g,
  /__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(/g,
  /(?:\bkernel|\[\[\s*kernel\s*\]\])\s+void\s+([A-Za-z_]\w*)\s*\(/g,
];

/** The kernels `source` defines, in order of appearance, each once. */
export function sourceKernelNames(source: string): string[] {
  const found: { name: string; at: number }[] = [];
  for (const re of PATTERNS) for (const m of source.matchAll(re)) found.push({ name: m[1]!, at: m.index ?? 0 });
  found.sort((a, b) => a.at - b.at);
  return [...new Set(found.map((f) => f.name))];
}

/** "a, b, c" with at most `max` names, then "and N more". */
export function nameList(names: readonly string[], max = 8): string {
  return names.length > max ? `${names.slice(0, max).join(", ")} and ${names.length - max} more` : names.join(", ");
}
