// Regenerates test/fixtures/gpt2_tiny/: config.json, weights.safetensors (examples/gpt2.ts's
// writeRandomGPT2, seeded: the same bytes every run) and model.onnx (bench/onnx/export_gpt2.py
// over those weights; needs python3 with numpy and onnx).
// Run: bun run bench/onnx/make_fixture.ts
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { writeRandomGPT2 } from "../../src/models";
import { TINY_CONFIG, TINY_SEED } from "./ort_gpt2";

const dir = join(import.meta.dir, "..", "..", "test", "fixtures", "gpt2_tiny");
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, "config.json"), `${JSON.stringify(TINY_CONFIG, null, 2)}\n`);
writeRandomGPT2(join(dir, "weights.safetensors"), TINY_CONFIG, TINY_SEED);
const r = Bun.spawnSync(
  ["python3", join(import.meta.dir, "export_gpt2.py"), join(dir, "weights.safetensors"), join(dir, "model.onnx"), "--config", join(dir, "config.json")],
  { stdout: "inherit", stderr: "inherit" },
);
if (r.exitCode !== 0) {
  console.error(`export_gpt2.py failed (exit ${r.exitCode})`);
  process.exit(1);
}
console.log(`wrote ${dir}: config.json, weights.safetensors, model.onnx`);
