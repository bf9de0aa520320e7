// How bungpu's objects describe themselves. `console.log(x)` and `Bun.inspect(x)` call the
// method keyed by INSPECT, which each public class defines to return its toString(): one line a
// person can read (what it is, its device, its sizes and state), never a handle or an address.
// A leaf module: it imports nothing, so any file of src/ can use it.

/** `Bun.inspect.custom` (the same symbol as Node's `util.inspect.custom`). */
export const INSPECT: unique symbol = Symbol.for("nodejs.util.inspect.custom") as never;

/** "1 stream", "2 streams"; `many` for irregular plurals ("1 bus", "2 buses"). */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** A byte count for people: "1 byte", "4096 bytes", "64 KiB", "1.5 MiB" (exact below 10 KiB). */
export function bytesText(n: number): string {
  if (n < 10240) return plural(n, "byte");
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${units[u]}`;
}
