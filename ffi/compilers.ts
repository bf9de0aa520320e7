// The C compilers bungpu can use, in this order: BUNGPU_CC, cc/clang/gcc on PATH,
// then zig from node_modules (or PATH). Used for the cache build of the shim and for CPU kernels.
import { existsSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";

export interface CCompiler {
  /** What the user would recognise, e.g. "cc (/usr/bin/cc)" or "zig cc (node_modules)". */
  label: string;
  /** argv prefix: ["/usr/bin/cc"] or ["/path/zig", "cc"]. */
  argv: string[];
  kind: "cc" | "zig";
}

function zigInNodeModules(): string | undefined {
  let dir = import.meta.dir;
  for (let i = 0; i < 8; i++) {
    const scope = join(dir, "node_modules", "@ryoppippi");
    if (existsSync(scope)) {
      for (const e of readdirSync(scope)) {
        const z = join(scope, e, process.platform === "win32" ? "zig.exe" : "zig");
        if (e.startsWith("zig-") && existsSync(z)) return z;
      }
    }
    const bin = join(dir, "node_modules", ".bin", "zig");
    if (existsSync(bin)) return bin;
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return undefined;
}

let found: { list: CCompiler[]; tried: string[] } | undefined;

/** Every usable compiler, best first, and what was looked for. Computed once. */
export function findCompilers(): { list: CCompiler[]; tried: string[] } {
  if (found) return found;
  const list: CCompiler[] = [];
  const tried: string[] = [];
  const env = process.env["BUNGPU_CC"];
  if (env) {
    const parts = env.split(/\s+/).filter(Boolean);
    const exe = parts[0] ? Bun.which(parts[0]) ?? (existsSync(parts[0]) ? parts[0] : null) : null;
    tried.push(`BUNGPU_CC=${env}${exe ? "" : " (not found)"}`);
    if (exe) list.push({ label: `BUNGPU_CC (${env})`, argv: [exe, ...parts.slice(1)], kind: /zig$/.test(exe) ? "zig" : "cc" });
  } else tried.push("BUNGPU_CC (unset)");
  for (const name of ["cc", "clang", "gcc"]) {
    const p = Bun.which(name);
    tried.push(`${name} on PATH${p ? "" : " (not found)"}`);
    if (p) list.push({ label: `${name} (${p})`, argv: [p], kind: "cc" });
  }
  const z = zigInNodeModules();
  tried.push(`zig in node_modules${z ? "" : " (not found)"}`);
  if (z) list.push({ label: `zig cc (${z})`, argv: [z, "cc"], kind: "zig" });
  const zp = Bun.which("zig");
  tried.push(`zig on PATH${zp ? "" : " (not found)"}`);
  if (zp && zp !== z) list.push({ label: `zig cc (${zp})`, argv: [zp, "cc"], kind: "zig" });
  found = { list, tried };
  return found;
}

/** Forget what was found (tests change PATH or BUNGPU_CC). */
export function resetCompilers(): void {
  found = undefined;
}
