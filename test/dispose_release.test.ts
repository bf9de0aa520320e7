// Nothing is lost: Buffer.dispose() inside a capture never throws and frees the memory when the
// capture ends (the capture survives); a HostBuffer left to the collector is freed by its
// finaliser; a HostBuffer's TypedArray views keep its memory alive after the object is gone.
// Runs in a subprocess (a use-after-free would crash it), measured by memoryStats (and RSS for the explicit free).
import { expect, test } from "bun:test";
import { join } from "node:path";

test("dispose in a capture, HostBuffer finaliser, views outliving their HostBuffer", () => {
  const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "fixtures", "dispose_release.ts")], {
    stdout: "pipe",
    stderr: "pipe",
    timeout: 90_000,
  });
  expect({ exitCode: r.exitCode, stderr: r.stderr.toString() }).toEqual({ exitCode: 0, stderr: "" });
  const out = JSON.parse(r.stdout.toString().trim().split("\n").pop()!);
  expect(out.disposeInCapture).toBe("ok");
  expect(out.disposedFlag).toBe(true);
  expect(out.heldDuringCapture).toBe(true); // not freed inside the capture…
  expect(out.endCapture).toBe("ok"); // …so the capture is not invalidated…
  expect(out.freedAfterCapture).toBe(true); // …and freed once it ends
  expect(out.rssDropMiB).toBeGreaterThanOrEqual(48); // the 64 MiB really went back
  expect(out.hostAllocatedLive).toBe(true);
  expect(out.hostCollected).toBe(true); // 512 MiB of forgotten HostBuffers: collected
  expect(out.viewHeld).toBe(true); // the HostBuffer object is gone, its view keeps the memory
  expect(out.viewIntact).toBe(true);
  expect(out.viewReleased).toBe(true); // freed once the view went too
}, 120_000);
