// Text in and out: a model's tokenizer.json (the Hugging Face tokenizers format, GPT-2's byte-level
// BPE among them) through @huggingface/tokenizers, Hugging Face's own pure-JavaScript
// implementation. It is an optional peer dependency (`bun add @huggingface/tokenizers`): loaded
// when a tokenizer is asked for, so a program that only passes token ids needs nothing more.
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { describeGot, GpuError, Status, invalid, options, type OptionKeys } from "../errors";
import { mustExist, readJson } from "./files";

const DECODE_KEYS: OptionKeys<{ skipSpecial?: boolean }> = { skipSpecial: true };

/** Text to token ids and back, as the model's own tokenizer does it. */
export interface TextTokenizer {
  /** Token ids of `text` (special tokens written in it, such as <|endoftext|>, become their ids). */
  encode(text: string): number[];
  /** The text of `ids` (special tokens included unless `skipSpecial`). */
  decode(ids: readonly number[], opts?: { skipSpecial?: boolean }): string;
  /** Tokens the vocabulary holds (added tokens included). */
  readonly vocabSize: number;
}

interface HfTokenizer {
  encode(text: string, opts?: { add_special_tokens?: boolean }): { ids: number[] };
  decode(ids: number[], opts?: { skip_special_tokens?: boolean; clean_up_tokenization_spaces?: boolean | null }): string;
}

/**
 * The tokenizer at `path`: a folder holding tokenizer.json (and tokenizer_config.json, if there),
 * as transformers' save_pretrained writes it, or a tokenizer.json file. Needs the optional peer
 * dependency @huggingface/tokenizers (NOT_SUPPORTED, saying how to add it, where it is missing).
 */
export async function loadTokenizer(path: string): Promise<TextTokenizer> {
  const call = "loadTokenizer";
  if (typeof path !== "string" || !path) invalid(call, `path must be a folder or a tokenizer.json file, got ${describeGot(path)}`);
  mustExist(call, path);
  const dir = statSync(path).isDirectory();
  const file = dir ? join(path, "tokenizer.json") : path;
  if (!existsSync(file)) invalid(call, `${path}: no tokenizer.json`);
  const json = readJson(call, file);
  const cfgFile = join(dir ? path : join(file, ".."), "tokenizer_config.json");
  const config = existsSync(cfgFile) ? readJson(call, cfgFile) : {};
  if (json === null || typeof json !== "object" || !("model" in json)) invalid(call, `${file}: not a tokenizers file (no "model")`);
  const spec = "@huggingface/tokenizers"; // a variable: projects without it still type-check
  let mod: { Tokenizer: new (tokenizer: object, config: object) => HfTokenizer };
  try {
    mod = (await import(spec)) as typeof mod;
  } catch {
    throw new GpuError(Status.NOT_SUPPORTED, `${call}: text needs the package @huggingface/tokenizers (bun add @huggingface/tokenizers); token ids work without it`, {
      backend: "typescript",
      call,
    });
  }
  let tok: HfTokenizer;
  try {
    tok = new mod.Tokenizer(json as object, (config ?? {}) as object);
  } catch (e) {
    invalid(call, `${file}: the tokenizer could not be built (${e instanceof Error ? e.message : String(e)})`);
  }
  const vocab = (json as { model: { vocab?: Record<string, number> }; added_tokens?: { id: number }[] }).model.vocab ?? {};
  let size = 0;
  for (const id of Object.values(vocab)) size = Math.max(size, id + 1);
  for (const t of (json as { added_tokens?: { id: number }[] }).added_tokens ?? []) size = Math.max(size, t.id + 1);
  return {
    vocabSize: size,
    encode(text: string): number[] {
      if (typeof text !== "string") invalid("TextTokenizer.encode", `text must be a string, got ${describeGot(text)}`);
      return tok.encode(text).ids;
    },
    decode(ids: readonly number[], opts?: { skipSpecial?: boolean }): string {
      const o = options("TextTokenizer.decode", opts, DECODE_KEYS);
      if (!Array.isArray(ids) || ids.some((t) => !Number.isInteger(t) || t < 0 || t >= size))
        invalid("TextTokenizer.decode", `ids must be token ids in [0, ${size}), got ${describeGot(ids)}`);
      return tok.decode([...ids], { skip_special_tokens: o.skipSpecial === true, clean_up_tokenization_spaces: false });
    },
  };
}
