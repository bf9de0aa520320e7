// bungpu/models: models built on the Tensor API, loaded from the checkpoints users have, and their
// tokenizers (text in and out).
export { GPT2, type FromPretrainedOptions, type GPT2Options, type GPT2DType, type Generation } from "./gpt2";
export { configFromTransformers, gpt2Name, gpt2Shapes, randomGPT2Weights, writeRandomGPT2, type GPT2Activation, type GPT2Config } from "./gpt2_config";
export { GPT2Batch, type BatchToken } from "./gpt2_batch";
export type { GenerateOptions } from "./sampling";
export { loadTokenizer, type TextTokenizer } from "./tokenizer";
