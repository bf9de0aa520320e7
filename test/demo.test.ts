// The main job, `bun run demo`, run as a user would: it must exit 0 and print every PASS line
// (raw-kernel MLP, the Tensor API's MLP and transformer block in every ExecMode, no recompiles).
// Timing budgets are shortened through the environment: this checks results, not speed.
import { expect, test } from "bun:test";
import { join } from "node:path";

test("bun run demo exits 0 and every check passes", async () => {
  const proc = Bun.spawn(["bun", "run", "demo"], {
    cwd: join(import.meta.dir, ".."),
    env: { ...process.env, BUNGPU_DEMO_MS: "200", BUNGPU_DEMO_TENSOR_MS: "60" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) console.error(`demo stdout:\n${out}\ndemo stderr:\n${err}`);
  expect(code).toBe(0);
  expect(out).toContain("round trip: 1048576 bytes host → ");
  expect(out).toContain("PASS: raw-kernel MLP, every ExecMode matches the reference");
  expect(out).toContain("PASS: tensor MLP, every ExecMode matches the reference");
  expect(out).toContain("PASS: transformer block, every ExecMode and sequence length matches the reference, no recompiles");
  expect(out).toContain("PASS: text generation, the KV-cached decode matches recomputing the sequence, no recompiles");
  expect(out).toMatch(/decode \d+\.\d+ ms\/token/);
  expect(out).toContain("PASS: all checks");
  expect(out).not.toContain("FAIL");
  for (const mode of ["Stream", "Graph", "Eager", "MultiStream(2)"]) expect(out).toContain(`\n  ${mode} `);
  expect(out).toMatch(/recompiles over \d+ checked executions .*: 0 /);
  expect(out).toContain("top kernels (executeProfiled");
}, 120_000);
