// The backend table: every backend TypeScript knows, one record each. Every union of backend
// names is derived from it (BackendName), so a backend missing from a `Record<BackendName, …>`
// or a switch fails to compile. The shim's table (shim/backends.c) numbers the backends of the
// library; Device looks them up there by name (ffi/result's backendNumbers), and
// test/backend_records.test.ts checks that the two tables name the same backends.
import { cpu } from "./cpu";
import { cuda } from "./cuda";
import { metal } from "./metal";
import type { BackendRecord } from "./types";

export const backends = { cpu, cuda, metal } as const;

export type BackendName = keyof typeof backends;

/** The record of `name`, or undefined for a name that is not a backend. */
export function backendOf(name: unknown): BackendRecord | undefined {
  return typeof name === "string" && Object.hasOwn(backends, name) ? backends[name as BackendName] : undefined;
}

// Compile-time check: each record sits under its own name.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type EachKeyedByName = { [K in BackendName]: Same<(typeof backends)[K]["name"], K> }[BackendName];
const keyedByName: false extends EachKeyedByName ? false : true = true;
void keyedByName;

export type { BackendRecord } from "./types";
export { dialects, type Dialect, type Lang } from "./dialect";
