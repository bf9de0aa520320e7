// bun run bench: every bench file in turn, in one process run each (mitata prints ratios).
import { readdirSync } from "node:fs";
import { join } from "node:path";

const only = process.argv.slice(2);
const files = readdirSync(import.meta.dir)
  .filter((f) => f.endsWith(".bench.ts"))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();
for (const f of files) {
  console.log(`\n=== bench/${f}`);
  const r = Bun.spawnSync(["bun", "run", join(import.meta.dir, f)], { stdout: "inherit", stderr: "inherit" });
  if (r.exitCode !== 0) process.exitCode = 1;
}
