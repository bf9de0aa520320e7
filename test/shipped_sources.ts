// Every kernel source bungpu ships or generates, per language, for the checks that compile them
// all (test/nvrtc.test.ts: CUDA C through real NVRTC; test/msl.test.ts: MSL through a C++
// syntax check). Sources are built without a device: the tensor kernels come from the codegen
// for the demo's models, joined into one module per model as ExecutionPlan does.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { demoCudaSource, demoMlpModel, demoTransformerModel } from "../examples/demo";
import { ringKernelSource } from "../src/ring";
import { Tensor, Variable, generate, schedule, type Lang } from "../src/tensor";
import { prelude } from "../src/tensor/codegen";
import { cudaKernels, metalKernels } from "./kernels";

export interface NamedSource {
  name: string;
  source: string;
  /** Kernels the source defines (the ones a check can look for in the output). */
  kernels: string[];
}

/** Ring handlers written once in C for the CPU and CUDA (the C++ subset of src/ring/source.ts). */
export const RING_HANDLERS: Record<string, string> = {
  // explicit casts; test/ring.test.ts runs this one on the CPU
  seq: `
typedef struct { uint32_t seq, val; } Msg;
typedef struct { uint32_t seq, ok, count, sum_lo; } Resp;
typedef struct { uint32_t next, errors, count, pad; uint64_t sum; } State;
BG_RING_HANDLER(msg, resp, state) {
  const Msg* m = (const Msg*)msg;
  Resp* r = (Resp*)resp;
  State* s = (State*)state;
  r->ok = m->seq == s->next;
  if (!r->ok) s->errors++;
  s->next = m->seq + 1;
  s->count++;
  s->sum += m->val;
  r->seq = m->seq;
  r->count = s->count;
  r->sum_lo = (uint32_t)s->sum;
}
`,
  // plain C: a helper without __device__ and implicit conversions from void*
  plainC: `
typedef struct { uint32_t a, b; } Pair;
static uint32_t mix32(uint32_t x) { x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; return x; }
static inline void put2(uint32_t* r, uint32_t x, uint32_t y) { r[0] = x; r[1] = y; }
BG_RING_HANDLER(msg, resp, state) {
  const Pair* m = msg;
  uint32_t* r = resp;
  uint64_t* s = state;
  const uint8_t* bytes = msg;
  s[0] += m->a;
  put2(r, mix32(m->a) + m->b, bytes[0]);
  r[2] = (uint32_t)s[0];
}
`,
};

function ringSources(backend: "cuda" | "metal"): NamedSource[] {
  const kernels = backend === "cuda" ? ["bg_ring_persistent", "bg_ring_batch"] : ["bg_ring_batch"];
  if (backend === "metal") {
    const handler = `BG_RING_HANDLER(m, r, s) { for (uint i = 0; i < 8; i++) r[i] = m[i] ^ s[i]; }`;
    return [{ name: "ring (msl)", source: ringKernelSource("metal", { handler: { metal: handler }, messageBytes: 8, responseBytes: 16, stateBytes: 8 }), kernels }];
  }
  return Object.entries(RING_HANDLERS).map(([name, handler]) => ({
    name: `ring ${name}`,
    source: ringKernelSource("cuda", { handler, messageBytes: 8, responseBytes: 16, stateBytes: 24 }),
    kernels,
  }));
}

function elementwiseOps(): Tensor[] {
  const x = Tensor.rand([4, 8]).sub(0.5).mul(6);
  const i = Tensor.arange(-16, 16).reshape([4, 8]);
  const unary = ["erf", "floor", "ceil", "trunc", "round", "exp2", "log2", "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "sign", "isnan", "isinf", "isfinite", "silu", "softplus", "leakyRelu", "elu", "hardswish", "mish", "relu6", "hardsigmoid", "softsign", "logsigmoid", "quickGelu", "celu", "selu"] as const;
  return [
    ...unary.map((n) => x[n]().contiguous()),
    x.gelu("none"), x.clip(-1, 1), x.lerp(x.exp(), 0.25),
    x.mod(1.5), x.fmod(-1.5), i.mod(3), i.fmod(-3), i.min(1), x.min(0), i.sign(),
  ];
}

/** Stepped and reversed slices, moded pads, cat, roll, triangles, eye and gathers: strides, masks and selects. */
function movementModel(): Tensor[] {
  const x = Tensor.rand([6, 8], { seed: 1 });
  const ix = Tensor.from([3, 0, 5], [3], { dtype: "int32" });
  return [
    x.slice([[null, null, -2], [1, 7, 3]]).pad([[1, 2], [1, 1]], "reflect").exp(),
    Tensor.cat([x, x.roll(3, 1).triu(1), Tensor.eye(4, 8)], 0).pad([[0, 0], [-1, 2]], 2),
    x.pad([[2, 2], [3, 3]], "circular").indexSelect(0, ix).gather(1, ix.reshape([3, 1]).expand([3, 4]).contiguous()),
  ];
}

/** prod (float32 and int32), argmax, scans (short and blocked), var, logsumexp, crossEntropy, topk. */
function reduceModel(): Tensor[] {
  const x = Tensor.rand([6, 40], { seed: 2 }).add(0.5);
  const i = Tensor.arange(0, 240).reshape([6, 40]).mod(5).sub(2);
  const t = Tensor.from([1, 0, 3, 2, 2, 1], [6], { dtype: "int32" });
  return [
    x.prod(1), x.prod(0), i.prod(-1), x.argmax(1), i.argmin(), x.cumsum(1), x.cumprod(0), i.cummax(1),
    x.var(0), x.std(1), x.logsumexp(1), x.any(1), x.all(), x.shrink([null, [0, 4]]).crossEntropy(t, { labelSmoothing: 0.1 }),
    ...x.topk(2),
  ];
}

/** Convolutions (strided, dilated, depthwise, transposed), pools and resizes: window views, fused multiply-reduces, gathers. */
function convModel(): Tensor[] {
  const x = Tensor.rand([2, 4, 9, 9], { seed: 2 });
  const w = Tensor.rand([6, 2, 3, 3], { seed: 3 });
  const y = x.conv2d(w, Tensor.rand([6], { seed: 4 }), { stride: 2, padding: 1, groups: 2 }).relu();
  return [
    y.maxPool2d(2),
    x.conv2d(Tensor.rand([4, 1, 3, 3], { seed: 5 }), undefined, { dilation: 2, groups: 4 }).avgPool2d(3, { stride: 1, padding: 1, countIncludePad: false }),
    y.convTranspose2d(Tensor.rand([6, 2, 3, 3], { seed: 6 }), undefined, { stride: 2, padding: 1, outputPadding: 1 }),
    x.maxPool2d(3, { stride: 2, padding: 1, dilation: 2 }),
    x.interpolate([13, 7], "bilinear"),
    y.interpolate([10, 10], "nearest"),
  ];
}

/** Attention (causal over a Variable KV-cache length, masked, a decode step), einsum contractions with diagonals, and sort. */
function attentionModel(): Tensor[] {
  const S = new Variable("S", 1, 16).bind(7);
  const x = Tensor.rand([2, 16, 8], { seed: 7 }).shrink([null, [0, S], null]);
  const q = Tensor.rand([2, 1, 8], { seed: 8 });
  const a = Tensor.rand([3, 4], { seed: 9 }), b = Tensor.rand([4, 5], { seed: 10 }), m = Tensor.rand([3, 3], { seed: 11 });
  return [
    x.scaledDotProductAttention(x, x, { isCausal: true }),
    q.scaledDotProductAttention(x, x),
    q.scaledDotProductAttention(x, x, { attnMask: Tensor.arange(S).cmpne(2) }),
    Tensor.einsum("ij,jk->ik", a, b),
    Tensor.einsum("bi,ij,bj->b", m, a, Tensor.rand([3, 4], { seed: 12 })),
    Tensor.einsum("ii->i", m),
    Tensor.einsum("...ij->...ji", x),
    ...Tensor.rand([3, 6], { seed: 13 }).sort(-1, true),
  ];
}

/** Reductions long against their outputs, which GPUs run as block trees (one block per output). */
function treeReduceModel(): Tensor[] {
  const x = Tensor.rand([8, 3000], { seed: 21 });
  const i = Tensor.rand([5, 4099], { seed: 22 }).mul(1000).cast("int32");
  const N = new Variable("N", 0, 600).bind(600);
  return [
    Tensor.rand([2 ** 20 + 3], { seed: 23 }).sum(),
    x.softmax(-1),
    x.layerNorm(),
    x.prod(1),
    x.argmax(1),
    i.max(1), i.min(1), i.sum(1), i.prod(1),
    Tensor.rand([6, 40, 9, 30], { seed: 24 }).sum([1, 3]),
    Tensor.rand([5, 7, 8, 9, 10], { seed: 25 }).max([0, 2, 4]),
    Tensor.rand([6, 600], { seed: 26 }).shrink([null, [0, N]]).sum(1),
  ];
}

function dtypeModel(): Tensor[] {
  const x = Tensor.rand([4, 40], { seed: 14 }).sub(0.5).mul(8);
  const h = x.half(), b = x.bfloat16(), i8 = x.cast("int8"), u8 = x.abs().cast("uint8"), l = x.long().mul(1 << 20), m = x.cmpgt(0);
  return [
    h.mul(h).add(1).sqrt(), b.sub(h.float()).exp().bfloat16(), h.sum(1), b.max(0), h.matmul(h.T),
    i8.add(i8).mul(3).div(Tensor.from([3], [1], { dtype: "int8" })), u8.sub(7).fmod(5), i8.neg().abs(), i8.pow(2), u8.sum(0), i8.min(1),
    l.mul(l).div(7).add(l.neg().abs()), l.pow(2).fmod(11), l.max(1), l.prod(0), l.cast("float16"),
    m.where(h, b), m.any(1), m.all(0), m.int().sum(), x.bool().maximum(m),
    x.bitcast("int32").bitcast("float32"), h.bitcast("bfloat16").bitcast("float16"), i8.bitcast("uint8"), h.cast("int8"), b.cast("bool"),
    Tensor.arange(0, 40, 1, { dtype: "int64" }).mul(2 ** 33), Tensor.arange(0, 8, 1, { dtype: "float16" }),
  ];
}

/** One module per demo model, as ExecutionPlan.prepare builds it: prelude + every kernel body. */
function tensorSources(lang: Lang): NamedSource[] {
  const models: [string, Tensor[]][] = [
    ["tensor MLP", [demoMlpModel().y]],
    ["transformer block", [demoTransformerModel().out]],
    // kernels over 2^32 elements, which the codegen indexes with 64-bit integers
    ["64-bit indexing", [Tensor.full([65536, 65536], 3).add(Tensor.arange(65536)), Tensor.rand([65536, 65536]).mul(2).sum(1)]],
    // every elementwise primitive and composite past the models' own (libm names, erf, remainders)
    ["elementwise ops", elementwiseOps()],
    ["movement ops", movementModel()],
    ["reduction ops", reduceModel()],
    ["conv and pool ops", convModel()],
    ["attention and einsum", attentionModel()],
    ["block tree reductions", treeReduceModel()],
    // every dtype: loads and stores of half types, int8/uint8/bool/int64 arithmetic, casts, bitcasts, reductions
    ["dtypes", dtypeModel()],
  ];
  return models.map(([name, outs]) => {
    const gens = schedule(outs.map((o) => o.node)).kernels.map((k) => generate(k.ir, lang));
    const seen = new Set<string>();
    const unique = gens.filter((g) => (seen.has(g.name) ? false : (seen.add(g.name), true)));
    return { name: `${name} (${unique.length} kernels)`, source: prelude(lang) + unique.map((g) => g.body).join("\n"), kernels: unique.map((g) => g.name) };
  });
}

function cudaNames(src: string): string[] {
  return [...src.matchAll(/extern "C" __global__ void (\w+)/g)].map((m) => m[1]!);
}

function mslNames(src: string): string[] {
  return [...src.matchAll(/kernel void (\w+)/g)].map((m) => m[1]!);
}

/** Every CUDA C source: test kernels, the demo's raw kernels, ring kernels, demo tensor kernels. */
export function cudaSources(): NamedSource[] {
  return [
    { name: "test kernels", source: cudaKernels, kernels: cudaNames(cudaKernels) },
    { name: "demo raw MLP", source: demoCudaSource, kernels: cudaNames(demoCudaSource) },
    ...ringSources("cuda"),
    ...tensorSources("cuda"),
  ];
}

/** The built-in MSL of the Metal backend (a C string literal in shim/metal/ops.c). */
export function metalBuiltinSource(): string {
  const c = readFileSync(join(import.meta.dir, "..", "shim", "metal", "ops.c"), "utf8");
  const start = c.indexOf("static const char BI_SRC[] =");
  if (start < 0) throw new Error("BI_SRC not found in shim/metal/ops.c");
  // the string literals after "=", up to the first ';' outside a literal
  const out: string[] = [];
  const lit = /\s*"((?:[^"\\]|\\.)*)"/y;
  lit.lastIndex = c.indexOf("=", start) + 1;
  for (let m = lit.exec(c); m; m = lit.exec(c)) out.push(JSON.parse(`"${m[1]!}"`) as string);
  return out.join("");
}

/** Every MSL source: the backend's built-ins, test kernels, the ring batch kernel, demo tensor kernels. */
export function mslSources(): NamedSource[] {
  const builtin = metalBuiltinSource();
  return [
    { name: "metal backend built-ins", source: builtin, kernels: mslNames(builtin) },
    { name: "test kernels", source: metalKernels, kernels: mslNames(metalKernels) },
    ...ringSources("metal"),
    ...tensorSources("metal"),
  ];
}
