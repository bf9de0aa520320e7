// A refused event record (and a refused graph exec launch or encoder submit that records an event)
// leaves the event as it was, as in CUDA. The CPU backend used to complete the refused record with
// a newer record number, which let a wait on the event's still-pending record pass early (the
// fuzzer's seed 228 at 100,000 calls). In a subprocess: the fixture holds a stream with a host
// function, so the old behaviour shows deterministically (the download reads the unfilled buffer).
import { expect, test } from "bun:test";
import { join } from "node:path";

const root = join(import.meta.dir, "..");

for (const check of ["", "1"]) {
  test(`a refused record on the default stream does not complete the event's pending record${check ? " (BUNGPU_CHECK=1)" : ""}`, () => {
    const r = Bun.spawnSync([process.execPath, join(root, "test/fixtures/refused_record.ts")], {
      cwd: root,
      timeout: 30_000,
      env: { ...process.env, BUNGPU_DEVICE: "", BUNGPU_CHECK: check },
    });
    if (r.exitCode !== 0) console.error(r.stderr.toString().slice(-2000));
    expect(r.signalCode ?? null).toBeNull();
    expect(r.exitCode).toBe(0);
    const out = JSON.parse(r.stdout.toString().trim().split("\n").pop()!);
    for (const how of ["record", "graph", "encoder"])
      // refused, and the download waited for the fill (behind the host function) all the same
      expect([how, out[how]]).toEqual([how, { refused: true, released: true, early: 0, after: [65, 65, 65, 65] }]);
  }, 60_000);
}
