import { Device, Tensor } from "bungpu";

const dev = Device.default(); // CUDA, then Metal, then the CPU; BUNGPU_DEVICE=cpu chooses
console.log(`device: ${dev}`);

// y = relu(x · w): prepared once (fused kernels, compiled on first use), then run for each input.
const x = Tensor.from(new Float32Array(6), [2, 3], { name: "x" });
const w = Tensor.from(new Float32Array([1, -1, 2, 0, 0.5, 1]), [3, 2], { constant: true }); // weights: the plan's own, not an input
using plan = x.matmul(w).relu().prepare({ device: dev });
for (const input of [[1, 2, 3, 4, 5, 6], [-1, -2, -3, 4, 5, 6]]) {
  const [y] = await plan.run([new Float32Array(input)]);
  console.log(`x = ${input.join(" ")} -> y = ${y!.join(" ")}`);
}
