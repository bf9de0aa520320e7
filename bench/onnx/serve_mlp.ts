// examples/server.ts's MLP as an ONNX model with the same weights, and the same JSON server on
// onnxruntime-node (run as a script: bun bench/onnx/serve_mlp.ts --port 0 prints its URL), the
// peer bench/serve.bench.ts measures examples/server.ts against. With --memo it answers an input
// seen before from a cache (keyed by its first value) without running any model: the HTTP and
// JSON work alone, the ceiling of both servers.
import { HIDDEN, IN, OUT, mlpWeights, serve } from "../../examples/server";
import { initializer, node, Pb, valueInfo } from "./writer";

export function mlpOnnx(w: ReturnType<typeof mlpWeights>): Uint8Array {
  const g = new Pb();
  g.msg(1, node("MatMul", ["x", "w1"], ["h0"]));
  g.msg(1, node("Add", ["h0", "b1"], ["h1"]));
  g.msg(1, node("Relu", ["h1"], ["h2"]));
  g.msg(1, node("MatMul", ["h2", "w2"], ["h3"]));
  g.msg(1, node("Add", ["h3", "b2"], ["h4"]));
  g.msg(1, node("Softmax", ["h4"], ["y"], [new Pb().str(1, "axis").int(3, -1).int(20, 2)])); // AttributeProto: i, type INT
  g.str(2, "mlp");
  g.msg(5, initializer("w1", [IN, HIDDEN], w.w1)).msg(5, initializer("b1", [HIDDEN], w.b1));
  g.msg(5, initializer("w2", [HIDDEN, OUT], w.w2)).msg(5, initializer("b2", [OUT], w.b2));
  g.msg(11, valueInfo("x", [1, IN]));
  g.msg(12, valueInfo("y", [1, OUT]));
  return new Pb().int(1, 9).str(2, "bungpu-bench").msg(7, g).msg(8, new Pb().str(1, "").int(2, 20)).done();
}

if (import.meta.main) {
  const ort = await import("onnxruntime-node");
  const session = await ort.InferenceSession.create(mlpOnnx(mlpWeights()), {
    executionProviders: ["cpu"],
    intraOpNumThreads: navigator.hardwareConcurrency,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  const i = process.argv.indexOf("--port");
  const run = async (x: Float32Array) => (await session.run({ x: new ort.Tensor("float32", x, [1, IN]) })).y!.data as Float32Array;
  const memo = new Map<number, Float32Array>();
  const remembered = async (x: Float32Array) => {
    let y = memo.get(x[0]!);
    if (!y) memo.set(x[0]!, (y = await run(x)));
    return y;
  };
  const server = serve(i > 0 ? Number(process.argv[i + 1]) : 3001, process.argv.includes("--memo") ? remembered : run);
  console.log(`${server.url}predict`);
  process.on("SIGTERM", () => process.exit(0));
}
