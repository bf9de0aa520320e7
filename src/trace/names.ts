// Kernel names by native handle, for timelines (src/trace): a launch, a command list or a graph
// names its kernel by handle only. Written once per kernel when it is looked up (Module.kernel),
// never on a launch; a handle the shim reuses after an unload gets the new kernel's name.
export const kernelNames = new Map<number, string>();
