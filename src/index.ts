// bungpu: driver-level GPU control for Bun.
import { GpuBuffer } from "./buffer";
import { GpuEvent } from "./event";
export { GpuError } from "./errors";
export { Status, StatusName } from "../ffi/errors";
export { Device, type DeviceProps, type BackendInfo } from "./device";
export { GpuBuffer, HostBuffer, memoryStats, setMemoryBudget, type FillOptionsFor, type FillRange, type FillType, type GpuBufferOf, type HostData } from "./buffer";
export { Stream, type StreamOptions, type PeerCopyPath } from "./stream";
export { MemoryPool, type MemoryPoolOptions, type MemoryPoolStats } from "./memory_pool";
export {
  Communicator,
  type CollectiveDtype,
  type ReduceOp,
  type CollectiveOptions,
  type ReduceOptions,
  type RootOptions,
  type InitOptions,
} from "./communicator";
export { GpuEvent, type EventOptions } from "./event";
/** @deprecated since 0.2, removed in 0.3: use `GpuBuffer`. Imported, `Buffer` hides Bun's global `Buffer` (host bytes). */
export const Buffer = GpuBuffer;
/** @deprecated since 0.2, removed in 0.3: use `GpuBuffer`. Imported, `Buffer` hides Bun's global `Buffer` (host bytes). */
export type Buffer = GpuBuffer;
/** @deprecated since 0.2, removed in 0.3: use `GpuEvent`. Imported, `Event` hides the DOM `Event` global. */
export const Event = GpuEvent;
/** @deprecated since 0.2, removed in 0.3: use `GpuEvent`. Imported, `Event` hides the DOM `Event` global. */
export type Event = GpuEvent;
export {
  Program,
  Module,
  Kernel,
  compileStats,
  type ArgType,
  type ArgValue,
  type ArgValueOf,
  type ArgsOf,
  type Signature,
  type CompileOptions,
  type KernelSource,
  type LaunchConfig,
  type Dim3,
} from "./kernel";
export { loadInfo } from "../ffi/result";
export { CaptureMode, Graph, GraphExec, type CaptureStatus } from "./capture";
export {
  Step,
  Schedule,
  ExecMode,
  Executable,
  planStreams,
  rangeOf,
  overlaps,
  type ByteRange,
  type KernelStepConfig,
  type CopyStepOptions,
  type FillStepOptions,
  type ExecKind,
  type ScheduleCompileOptions,
  type RunOptions,
  type ExecStats,
  type StreamPlan,
  type InputPair,
} from "./schedule";
export {
  CommandEncoder,
  CommandError,
  type DispatchOptions,
  type CopyOptions,
  type FillOptions,
  type EncoderCounts,
  type CommandInfo,
} from "./encoder";
export {
  GraphExecutor,
  GraphSession,
  ComputeGraph,
  type GraphDispatchOptions,
  type Access,
  type GraphNode,
  type NodeKind,
  type Hazard,
  type BarrierMode,
  type PlannedBarrier,
  type SessionStats,
  type ExecutorStats,
  type SessionMode,
  type SessionState,
} from "./graph_executor";
export {
  Tensor,
  Variable,
  ExecutionPlan,
  tensorCompileStats,
  tierStats,
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
  type DType,
  type HostArray,
  type HostArrayOf,
  type HostArrayOfDType,
  type Dim,
  type TensorLike,
  type FromOptions,
  type Shape,
} from "./tensor";
export {
  KernelMode,
  Ring,
  RingKernel,
  ringKernelSource,
  RING_KERNEL,
  BATCH_KERNEL,
  type KernelModeName,
  type RingOptions,
  type RingKernelOptions,
  type RingSourceOptions,
  type RingRunMode,
  type HandlerSource,
} from "./ring";
/** Timelines of every stream's work (Chrome trace / Perfetto JSON): trace.start(), trace.stop(), BUNGPU_TRACE=file.json. */
export * as trace from "./trace";
export type { Trace, TraceEvent, TraceLane } from "./trace";
