// The SVG timeline from a trace file: the package's bungpu-trace command (src/trace/cli.ts), kept
// here under its old name. docs/trace-demo.svg is the demo's first MultiStream run:
//   BUNGPU_DEVICE=cpu BUNGPU_TRACE=/tmp/demo.json BUNGPU_DEMO_MS=1 BUNGPU_DEMO_TENSOR_MS=1 bun run demo
//   bun scripts/trace-svg.ts /tmp/demo.json docs/trace-demo.svg --start-at "event wait" --length 3 --title "…"
// docs/trace-runs.svg is the runs.svg that docs/guide/tracing.md's plan.run block writes.
import { main } from "../src/trace/cli";

export { toSVG as renderSvg } from "../src/trace/svg";

if (import.meta.main) process.exit(main(process.argv.slice(2)));
