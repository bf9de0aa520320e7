// bungpu/models: models built on the Tensor API, loaded from the checkpoints users have, and their
// tokenizers (text in and out).
export {
  GPT2,
  GPT2Batch,
  configFromTransformers,
  gpt2Name,
  gpt2Shapes,
  randomGPT2Weights,
  writeRandomGPT2,
  type BatchToken,
  type FromPretrainedOptions,
  type GPT2Options,
  type GenerateOptions,
  type Generation,
  type GPT2Activation,
  type GPT2Config,
} from "./gpt2";
export { loadTokenizer, type TextTokenizer } from "./tokenizer";
