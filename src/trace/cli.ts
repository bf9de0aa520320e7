#!/usr/bin/env bun
// bungpu-trace: a trace JSON (trace.write's file, BUNGPU_TRACE's) drawn as an SVG timeline.
//
//   bunx bungpu-trace run.json [out.svg] [--from MS] [--to MS] [--start-at NAME [--length MS]]
//                                         [--width PX] [--title TEXT]
//
// Without out.svg the SVG goes to stdout. --from/--to pick a window in ms since the trace's first
// span; --start-at starts a window of --length ms (default 5) 0.1 ms before the first span named
// NAME. Only lanes with work in the window are drawn. See docs/guide/tracing.md.
import { readFileSync, writeFileSync } from "node:fs";
import { GpuError } from "../errors";
import { toSVG, type SvgOptions } from "./svg";

const USAGE = "usage: bungpu-trace trace.json [out.svg] [--from MS] [--to MS] [--start-at NAME [--length MS]] [--width PX] [--title TEXT]";

/** Parse the command line: the files and the options toSVG takes; a message for what is wrong. */
export function parseArgs(argv: readonly string[]): { files: string[]; opts: SvgOptions } | { error: string } {
  const files: string[] = [];
  const opts: SvgOptions = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = (): string | undefined => argv[++i];
    const num = (): number | string => {
      const v = value();
      const n = Number(v);
      return v === undefined || v.trim() === "" || !Number.isFinite(n) ? `${a} wants a number of ms (or px), got ${v === undefined ? "nothing" : JSON.stringify(v)}` : n;
    };
    let r: number | string | undefined;
    if (a === "--from" || a === "--to" || a === "--length" || a === "--width") {
      r = num();
      if (typeof r === "string") return { error: r };
      opts[a === "--from" ? "from" : a === "--to" ? "to" : a === "--length" ? "length" : "width"] = r;
    } else if (a === "--start-at" || a === "--title") {
      const v = value();
      if (v === undefined) return { error: `${a} wants a value` };
      if (a === "--start-at") opts.startAt = v;
      else opts.title = v;
    } else if (a === "-h" || a === "--help") return { error: "" };
    else if (a.startsWith("--")) return { error: `unknown option ${a}` };
    else files.push(a);
  }
  if (files.length < 1 || files.length > 2) return { error: files.length ? `too many files: ${files.join(" ")}` : "no trace file given" };
  return { files, opts };
}

/** Run the command: 0 on success, 2 for a usage error, 1 when the trace cannot be read or drawn. */
export function main(argv: readonly string[]): number {
  const p = parseArgs(argv);
  if ("error" in p) {
    if (p.error) console.error(`bungpu-trace: ${p.error}`);
    console.error(USAGE);
    return 2;
  }
  const [input, output] = p.files as [string, string | undefined];
  let trace: unknown;
  try {
    trace = JSON.parse(readFileSync(input, "utf8"));
  } catch (e) {
    console.error(`bungpu-trace: could not read ${input} as JSON: ${(e as Error).message}`);
    return 1;
  }
  let svg: string;
  try {
    svg = toSVG(trace as Parameters<typeof toSVG>[0], p.opts);
  } catch (e) {
    if (!(e instanceof GpuError)) throw e;
    console.error(`bungpu-trace: ${input}: ${e.message}`);
    return 1;
  }
  if (output === undefined) {
    process.stdout.write(svg);
    return 0;
  }
  writeFileSync(output, svg);
  const lanes = (svg.match(/<g class="lane[ "]/g) ?? []).length, spans = (svg.match(/<g class="span"/g) ?? []).length;
  console.error(`${output}: ${lanes} lanes, ${spans} spans`);
  return 0;
}

if (import.meta.main) process.exit(main(process.argv.slice(2)));
