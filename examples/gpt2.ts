// Generate from a GPT-2 checkpoint: a folder written by transformers' save_pretrained
// (config.json + model.safetensors, or sharded), or one .safetensors file with a config.json
// beside it. Token ids in, token ids out (no tokenizer yet).
//
//   bun run examples/gpt2.ts ./gpt2 464 2068 7586          # greedy, 16 new tokens
//   bun run examples/gpt2.ts ./gpt2 464 --temperature 0.8 --top-k 40 --seed 1 --max 32
import { GPT2 } from "../src/models";

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = Number(args[i + 1]);
  args.splice(i, 2);
  return v;
};
const temperature = flag("--temperature");
const topK = flag("--top-k");
const topP = flag("--top-p");
const seed = flag("--seed");
const maxNewTokens = flag("--max") ?? 16;
const [path, ...ids] = args;
if (!path || ids.length === 0) {
  console.error("usage: bun run examples/gpt2.ts <checkpoint> <token id>... [--max N] [--temperature T] [--top-k K] [--top-p P] [--seed S]");
  process.exit(2);
}
const t0 = performance.now();
using model = GPT2.fromPretrained(path);
console.error(`loaded and prepared in ${(performance.now() - t0).toFixed(0)} ms: ${model.config.nLayer} layers, width ${model.config.nEmbd}, vocabulary ${model.config.vocabSize}`);
const out = model.generate(ids.map(Number), { maxNewTokens, temperature, topK, topP, seed });
console.log(out.tokens.join(" "));
