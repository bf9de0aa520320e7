// Ring kernels: KernelMode (mode.ts), Ring (ring.ts), their generated sources (source.ts), how
// messages reach the kernel (transport.ts) and RingKernel itself (kernel.ts).
export { KernelMode, type KernelModeName } from "./mode";
export { Ring, type RingOptions } from "./ring";
export { RING_KERNEL, BATCH_KERNEL } from "./source";
export { RingKernel, ringKernelSource, type HandlerSource, type RingKernelOptions, type RingRunMode, type RingSourceOptions } from "./kernel";
