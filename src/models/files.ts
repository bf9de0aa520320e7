// The files a model is loaded from (a checkpoint folder, a tokenizer): found, and read as JSON,
// with a GpuError naming the path where they are missing or are not what they should be.
import { existsSync, readFileSync } from "node:fs";
import { GpuError, Status, invalid } from "../errors";

/** GpuError FILE_NOT_FOUND naming `path` unless it exists. */
export function mustExist(call: string, path: string): void {
  if (!existsSync(path)) throw new GpuError(Status.FILE_NOT_FOUND, `${call}: ${path}: no such file or folder`, { backend: "typescript", call });
}

/** The JSON file at `path` (INVALID_VALUE naming it when it is not JSON). */
export function readJson(call: string, path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    invalid(call, `${path}: not readable JSON (${e instanceof Error ? e.message : String(e)})`);
  }
}
