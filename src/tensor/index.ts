// The tensor compiler's public API (re-exported from src/index.ts).
export { Tensor, type TensorLike, type Shape, type FromOptions } from "./tensor";
export type { PadMode } from "./tensor";
export type { Conv2dOptions, ConvTranspose2dOptions, PoolOptions, AvgPoolOptions, InterpolateMode } from "./ops_conv";
export type { AttentionOptions } from "./ops_attention";
export { Variable, type Dim } from "./variable";
export {
  ExecutionPlan,
  tensorCompileStats,
  type PrepareOptions,
  type ExecuteOptions,
  type CachedKernel,
  type PreparedKernel,
  type PreparedOp,
  type KernelProfile,
  type PlanBuffer,
  type PlanRunOptions,
  type RunInput,
  type RunOutput,
  type RunFeeds,
  RunBatcher,
  type BatchOptions,
} from "./plan";
export type { DType, UnaryOp, BinaryOp, ReduceOp } from "./ast";
export type { HostArray, HostArrayOf, HostArrayOfDType } from "./dtype";
export { schedule, tierStats } from "./prepare";
export type { Scheduled, ScheduledKernel, ScheduleOptions } from "./scheduler";
export { generate, type GeneratedKernel, type Lang } from "./codegen";
export type { KernelIR, Expr, KDim } from "./ir";
export { interpretSchedule, interpretKernel } from "./interp";
export { readSafetensors, writeSafetensors, encodeSafetensors, type SafetensorsEntry, type SafetensorsFile, type SafetensorsDType } from "./safetensors";
