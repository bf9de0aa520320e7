// bungpu/models: models built on the Tensor API, loaded from the checkpoints users have, and their
// tokenizers (text in and out).
export {
  GPT2,
  configFromTransformers,
  gpt2Name,
  gpt2Shapes,
  randomGPT2Weights,
  writeRandomGPT2,
  type FromPretrainedOptions,
  type GenerateOptions,
  type Generation,
  type GPT2Activation,
  type GPT2Config,
} from "./gpt2";
export { loadTokenizer, type TextTokenizer } from "./tokenizer";
