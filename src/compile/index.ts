// Kernel compilation, one module per backend, over one on-disk cache. Which backend uses which
// compiler is said by its record in ../backends; this folder knows no backend table.
export { compileStats } from "./cache";
export { compileCpu, compileCpuTiered, cpuCompilerIdentity, cpuCompilerLabel, cpuTier } from "./cpu";
export { compileCuda, compileCudaImage, cudaCompilerIdentity, type CudaImage } from "./cuda";
export { compileMetal } from "./metal";
export type { CompileOptions, CompileTarget, LoadableImage, TieredImage } from "./types";
