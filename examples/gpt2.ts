// Generate from a GPT-2 checkpoint: a folder written by transformers' save_pretrained
// (config.json + model.safetensors, or sharded), or one .safetensors file with a config.json
// beside it. Text in and out where the folder has a tokenizer.json (needs the optional
// @huggingface/tokenizers), else token ids.
//
//   bun run examples/gpt2.ts ./gpt2 "The GPU"                # greedy, 16 new tokens, as text
//   bun run examples/gpt2.ts ./gpt2 464 2068 7586            # token ids in and out
//   bun run examples/gpt2.ts ./gpt2 "The GPU" --temperature 0.8 --top-k 40 --seed 1 --max 32
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { GPT2, loadTokenizer } from "../src/models";

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
const [path, ...words] = args;
if (!path || words.length === 0) {
  console.error("usage: bun run examples/gpt2.ts <checkpoint> <text | token id...> [--max N] [--temperature T] [--top-k K] [--top-p P] [--seed S]");
  process.exit(2);
}
const asIds = words.every((w) => /^\d+$/.test(w));
const tokenizer = !asIds && statSync(path).isDirectory() && existsSync(join(path, "tokenizer.json")) ? await loadTokenizer(path) : null;
if (!asIds && !tokenizer) {
  console.error(`${path} has no tokenizer.json: give token ids`);
  process.exit(2);
}
const ids = tokenizer ? tokenizer.encode(words.join(" ")) : words.map(Number);
const t0 = performance.now();
using model = GPT2.fromPretrained(path);
console.error(`loaded and prepared in ${(performance.now() - t0).toFixed(0)} ms: ${model.config.nLayer} layers, width ${model.config.nEmbd}, vocabulary ${model.config.vocabSize}`);
const out = model.generate(ids, { maxNewTokens, temperature, topK, topP, seed });
console.log(tokenizer ? tokenizer.decode([...ids, ...out.tokens]) : out.tokens.join(" "));
