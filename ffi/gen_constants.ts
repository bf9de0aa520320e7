// bun run gen:constants — writes ffi/constants.ts from shim/bungpu.h: every numeric #define and
// enum member (grouped by prefix: BG_CMD_* becomes Cmd.*, BG_OK and BG_ERR_* become Status.*),
// and the byte layout of every struct the header defines. `bun run build:shim` runs it first.
// TypeScript takes these numbers from the generated file only; test/constants.test.ts fails when
// the committed file differs from what this script makes of the header.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const HEADER = join(import.meta.dir, "..", "shim", "bungpu.h");
export const OUTPUT = join(import.meta.dir, "constants.ts");

/** Names of the enum groups whose TypeScript name is not the PascalCase of their prefix. */
const GROUP_NAMES: Record<string, string> = {
  BG_BACKEND_: "BackendId",
  BG_HOST_ALLOC_: "HostAllocFlag",
  BG_STREAM_: "StreamFlag",
  BG_EVENT_: "EventFlag",
  BG_CAPTURE_MODE_: "CaptureModeId",
  BG_CAPTURE_: "CaptureStatusId",
  BG_IMAGE_: "ImageKindId",
};

/** C scalar types the layouts understand: size (= alignment) in bytes. */
const SCALARS: Record<string, number> = {
  char: 1, int8_t: 1, uint8_t: 1,
  int16_t: 2, uint16_t: 2,
  int: 4, int32_t: 4, uint32_t: 4, float: 4,
  int64_t: 8, uint64_t: 8, double: 8, size_t: 8, bg_devptr: 8,
};

function stripComments(src: string): string {
  return src.replace(/\/\*[\s\S]*?\*\//g, " ").replace(/\/\/[^\n]*/g, " ");
}

/** An integer constant expression over literals and names already known; undefined if not one. */
function evaluate(expr: string, known: Map<string, number>): number | undefined {
  let e = expr.trim();
  if (!e) return undefined;
  e = e.replace(/\b([A-Za-z_]\w*)\b/g, (n) => (known.has(n) ? `(${known.get(n)})` : n));
  e = e.replace(/\b(0x[0-9a-fA-F]+|\d+)[uUlL]+\b/g, "$1");
  if (!/^[\s\d()xXa-fA-F+\-*/%|&^~<>]+$/.test(e) || /[a-wyzA-WYZ]/.test(e.replace(/0x[0-9a-fA-F]+/g, ""))) return undefined;
  try {
    const v = Function(`"use strict"; return (${e});`)() as unknown;
    return typeof v === "number" && Number.isSafeInteger(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

interface Field {
  name: string;
  offset: number;
}
interface Layout {
  name: string;
  size: number;
  align: number;
  fields: Field[];
}

export interface Parsed {
  defines: [string, number][];
  groups: { name: string; members: [string, number][] }[];
  layouts: Layout[];
  /** Structs left out, with why (a field type the layout rules do not know). */
  skipped: string[];
}

export function parseHeader(text: string): Parsed {
  const src = stripComments(text);
  const known = new Map<string, number>();
  const defines: [string, number][] = [];
  const groups: Parsed["groups"] = [];
  const flatEnums: [string, number][] = [];

  // Walk the header in order so a constant can use the ones before it.
  const re = /^[ \t]*#[ \t]*define[ \t]+(BG_\w+)[ \t]+([^\n]+)$|\benum\s*\w*\s*\{([^}]*)\}/gm;
  for (let m: RegExpExecArray | null; (m = re.exec(src)); ) {
    if (m[1]) {
      const v = evaluate(m[2]!, known);
      if (v === undefined) continue;
      known.set(m[1], v);
      defines.push([m[1], v]);
      continue;
    }
    let next = 0;
    const members: [string, number][] = [];
    for (const part of m[3]!.split(",")) {
      const mm = /^\s*(BG_\w+)\s*(?:=\s*([\s\S]+?))?\s*$/.exec(part);
      if (!mm) continue;
      const v = mm[2] !== undefined ? evaluate(mm[2], known) : next;
      if (v === undefined) continue;
      known.set(mm[1]!, v);
      members.push([mm[1]!, v]);
      next = v + 1;
    }
    if (members.length === 0) continue;
    const names = members.map(([n]) => n);
    if (names.includes("BG_OK")) {
      groups.push({ name: "Status", members: members.map(([n, v]) => [n === "BG_OK" ? "OK" : n.replace(/^BG_ERR_/, ""), v]) });
      continue;
    }
    const prefix = commonPrefix(names);
    if (members.length < 2 || prefix === "BG_") {
      flatEnums.push(...members);
      continue;
    }
    const name = GROUP_NAMES[prefix] ?? pascal(prefix);
    groups.push({ name, members: members.map(([n, v]) => [n.slice(prefix.length), v]) });
  }

  const layouts: Layout[] = [];
  const skipped: string[] = [];
  const sre = /\b(?:typedef\s+)?struct\s+(\w+)\s*\{([^{}]*)\}\s*(\w*)\s*;/g;
  for (let m: RegExpExecArray | null; (m = sre.exec(src)); ) {
    const name = m[3] || m[1]!;
    const l = layoutOf(name, m[2]!, known, layouts);
    if (typeof l === "string") skipped.push(`${name}: ${l}`);
    else layouts.push(l);
  }
  return { defines: [...defines, ...flatEnums], groups, layouts, skipped };
}

function commonPrefix(names: string[]): string {
  let p = names[0]!;
  for (const n of names) while (!n.startsWith(p)) p = p.slice(0, -1);
  return p.slice(0, p.lastIndexOf("_") + 1);
}

function pascal(prefix: string): string {
  return prefix
    .replace(/^BG_/, "")
    .split("_")
    .filter(Boolean)
    .map((w) => w[0] + w.slice(1).toLowerCase())
    .join("");
}

function layoutOf(name: string, body: string, known: Map<string, number>, done: Layout[]): Layout | string {
  let offset = 0;
  let align = 1;
  const fields: Field[] = [];
  for (const decl of body.split(";")) {
    const d = decl.trim().replace(/\s+/g, " ");
    if (!d) continue;
    const m = /^(?:const )?((?:struct )?\w+)( ?\*+ ?| )(.+)$/.exec(d);
    if (!m) return `cannot read "${d}"`;
    const isPtr = m[2]!.includes("*");
    const type = m[1]!.replace(/^struct /, "");
    const inner = done.find((l) => l.name === type);
    const size = isPtr ? 8 : SCALARS[type] ?? inner?.size;
    const a = isPtr ? 8 : SCALARS[type] ?? inner?.align;
    if (size === undefined || a === undefined) return `unknown type ${type}`;
    for (const one of m[3]!.split(",")) {
      const fm = /^\s*\**\s*(\w+)\s*(?:\[([^\]]*)\])?\s*$/.exec(one);
      if (!fm) return `cannot read "${one}"`;
      const count = fm[2] === undefined ? 1 : fm[2].trim() === "" ? 0 : evaluate(fm[2], known);
      if (count === undefined) return `unknown array length ${fm[2]}`;
      offset = Math.ceil(offset / a) * a;
      align = Math.max(align, a);
      fields.push({ name: fm[1]!, offset });
      offset += size * count;
    }
  }
  return { name, size: Math.ceil(offset / align) * align, align, fields };
}

export function render(p: Parsed): string {
  const out: string[] = [
    "// Generated by `bun run gen:constants` (ffi/gen_constants.ts) from shim/bungpu.h: do not edit.",
    "// test/constants.test.ts fails when this file differs from what the header generates.",
    "",
  ];
  for (const [n, v] of p.defines) out.push(`export const ${n.replace(/^BG_/, "")} = ${v};`);
  for (const g of p.groups) {
    out.push("", `export const ${g.name} = {`);
    for (const [k, v] of g.members) out.push(`  ${k}: ${v},`);
    out.push("} as const;");
  }
  for (const l of p.layouts) {
    out.push("", `/** struct ${l.name}: size and alignment in bytes, and each field's offset. */`);
    out.push(`export const ${l.name} = {`, `  size: ${l.size},`, `  align: ${l.align},`, "  offset: {");
    for (const f of l.fields) out.push(`    ${f.name}: ${f.offset},`);
    out.push("  },", "} as const;");
  }
  for (const s of p.skipped) out.push("", `// struct ${s}: no layout generated`);
  return out.join("\n") + "\n";
}

/** The text ffi/constants.ts must hold for the header as it is now. */
export function generate(header = HEADER): string {
  return render(parseHeader(readFileSync(header, "utf8")));
}

/** Regenerate ffi/constants.ts; returns whether it changed. */
export function writeConstants(): boolean {
  const text = generate();
  let old = "";
  try {
    old = readFileSync(OUTPUT, "utf8");
  } catch {
    /* first run */
  }
  if (old === text) return false;
  writeFileSync(OUTPUT, text);
  return true;
}

if (import.meta.main) console.log(writeConstants() ? "ffi/constants.ts regenerated" : "ffi/constants.ts up to date");
