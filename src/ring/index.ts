// Ring kernels: KernelMode (mode.ts), Ring (ring.ts), their generated sources (source.ts), how
// messages reach the kernel (transport.ts) and RingKernel itself (kernel.ts).
export { KernelMode, type KernelModeName } from "./mode";
export { Ring, type RingOptions } from "./ring";
export { RingKernel, type RingKernelOptions, type RingRunMode } from "./kernel";
export { RING_KERNEL, BATCH_KERNEL, ringKernelSource, type HandlerSource, type RingSourceOptions } from "./source";
