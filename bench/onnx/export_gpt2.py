"""ONNX export of the GPT-2-style decoder of examples/gpt2.ts, for the onnxruntime comparison.

Reads the safetensors file examples/gpt2.ts writes (writeRandomGPT2: GPT-2's tensor names, Conv1D
layout [in, out], the config in the metadata) and writes ONE ONNX model (opset 17) of the same
computation with dynamic shapes, usable both as the prompt graph and as the decode-step graph:

  inputs   input_ids            int64   [1, S]        the new tokens (S = prompt length, or 1)
           past_key.{i}         float32 [1, H, P, D]  per layer; P = 0 for a prompt
           past_value.{i}       float32 [1, H, P, D]
  outputs  logits               float32 [1, S, V]     every new position's logits
           present_key.{i}      float32 [1, H, P+S, D]  past and new keys (feed back next step)
           present_value.{i}    float32 [1, H, P+S, D]

The new tokens sit at positions [P, P+S) (P read from past_key.0's shape): token embedding plus
learned position, then per layer pre-norm causal self-attention (query P+s sees keys [0, P+s]) and
a pre-norm GELU MLP (GELU in its tanh form, as Tensor.gelu("tanh")), a final LayerNorm and the
head tied to the token embedding (logits = h · wteᵀ). LayerNorm eps 1e-5, as in examples/gpt2.ts.

Only numpy and the `onnx` package are needed; the safetensors file is parsed here by hand.

Run:
  python3 bench/onnx/export_gpt2.py WEIGHTS.safetensors OUT.onnx [--config CONFIG.json]
The config (nLayer, nEmbd, nHead, vocabSize, nCtx) comes from CONFIG.json when given, else from
the safetensors metadata. The test fixture test/fixtures/gpt2_tiny/ is regenerated, weights and
model together, with:  bun run bench/onnx/make_fixture.ts
"""

import argparse
import json
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CONFIG_KEYS = ("nLayer", "nEmbd", "nHead", "vocabSize", "nCtx")
OPSET = 17


def read_safetensors(path):
    """(tensors: name -> float32 array, metadata: dict) from a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + hlen].decode("utf-8"))
    base = 8 + hlen
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {info['dtype']}, expected F32")
        a, b = info["data_offsets"]
        arr = np.frombuffer(raw[base + a : base + b], dtype="<f4").reshape(info["shape"])
        out[name] = arr.astype(np.float32)
    return out, meta


def expected_shapes(cfg):
    """The names and shapes examples/gpt2.ts's gpt2Shapes gives."""
    C = cfg["nEmbd"]
    s = {"wte": [cfg["vocabSize"], C], "wpe": [cfg["nCtx"], C]}
    for i in range(cfg["nLayer"]):
        p = f"h.{i}."
        s.update({
            p + "ln_1.weight": [C], p + "ln_1.bias": [C],
            p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
            p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
            p + "ln_2.weight": [C], p + "ln_2.bias": [C],
            p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
            p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C],
        })
    s["ln_f.weight"] = [C]
    s["ln_f.bias"] = [C]
    return s


def build(weights, cfg):
    L, C, H, V = cfg["nLayer"], cfg["nEmbd"], cfg["nHead"], cfg["vocabSize"]
    D = C // H
    nodes, inits = [], []
    counter = [0]

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(kind, inputs, **attrs):
        counter[0] += 1
        out = f"{kind.lower()}_{counter[0]}"
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    # initializers: every weight under its safetensors name, unchanged (the test compares them)
    for name, shape in expected_shapes(cfg).items():
        w = weights.get(name)
        if w is None:
            raise ValueError(f"no tensor {name!r} in the weights")
        if list(w.shape) != shape:
            raise ValueError(f"{name} has shape {list(w.shape)}, expected {shape}")
        const(name, w)

    i64 = lambda *v: np.array(v, dtype=np.int64)
    c_zero = const("c.zero", np.array(0, dtype=np.int64))
    c_s1 = const("c.s1", np.array(1, dtype=np.int64))
    shape_q = const("c.shape_heads", i64(1, -1, H, D))  # [1, S, H, D]
    shape_c = const("c.shape_c", i64(1, -1, C))
    scale = const("c.scale", np.array(1.0 / np.sqrt(D), dtype=np.float32))
    neg = const("c.neg", np.array(-1e30, dtype=np.float32))
    fzero = const("c.fzero", np.array(0.0, dtype=np.float32))
    g_half = const("c.half", np.array(0.5, dtype=np.float32))
    g_one = const("c.fone", np.array(1.0, dtype=np.float32))
    g_k = const("c.gelu_k", np.array(np.sqrt(2.0 / np.pi), dtype=np.float32))
    g_c = const("c.gelu_c", np.array(0.044715, dtype=np.float32))

    # P (cached positions) and S (new tokens), as 0-d int64
    past_len = op("Gather", [op("Shape", ["past_key.0"]), const("c.i2", np.array(2, dtype=np.int64))], axis=0)
    new_len = op("Gather", [op("Shape", ["input_ids"]), const("c.i1", np.array(1, dtype=np.int64))], axis=0)
    total = op("Add", [past_len, new_len])
    q_pos = op("Range", [past_len, total, c_s1])  # [S] absolute positions of the new tokens
    k_pos = op("Range", [c_zero, total, c_s1])  # [P+S]
    # causal mask [S, P+S]: 0 where key <= query, -1e30 after
    future = op("Greater", [op("Unsqueeze", [k_pos, const("c.ax0", i64(0))]), op("Unsqueeze", [q_pos, const("c.ax1", i64(1))])])
    mask = op("Where", [future, neg, fzero])

    ids = op("Squeeze", ["input_ids", const("c.sq0", i64(0))])  # [S]
    x = op("Add", [op("Gather", ["wte", ids], axis=0), op("Gather", ["wpe", q_pos], axis=0)])  # [S, C]
    x = op("Unsqueeze", [x, const("c.ux0", i64(0))])  # [1, S, C]

    def ln(t, p):
        return op("LayerNormalization", [t, f"{p}.weight", f"{p}.bias"], axis=-1, epsilon=1e-5)

    def lin(t, p):
        return op("Add", [op("MatMul", [t, f"{p}.weight"]), f"{p}.bias"])

    def gelu(t):  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = op("Mul", [op("Mul", [t, t]), t])
        inner = op("Mul", [op("Add", [t, op("Mul", [x3, g_c])]), g_k])
        return op("Mul", [op("Mul", [t, g_half]), op("Add", [op("Tanh", [inner]), g_one])])

    outputs = []
    for i in range(L):
        p = f"h.{i}"
        qkv = lin(ln(x, f"{p}.ln_1"), f"{p}.attn.c_attn")  # [1, S, 3C]
        q, k, v = (f"split_{i}_{j}" for j in "qkv")
        nodes.append(helper.make_node("Split", [qkv, const(f"c.split{i}", i64(C, C, C))], [q, k, v], name=f"split_{i}", axis=2))
        heads = lambda t: op("Transpose", [op("Reshape", [t, shape_q])], perm=[0, 2, 1, 3])  # [1, H, S, D]
        kh, vh = heads(k), heads(v)
        k_all, v_all = f"present_key.{i}", f"present_value.{i}"
        nodes.append(helper.make_node("Concat", [f"past_key.{i}", kh], [k_all], name=f"concat_k_{i}", axis=2))
        nodes.append(helper.make_node("Concat", [f"past_value.{i}", vh], [v_all], name=f"concat_v_{i}", axis=2))
        outputs += [k_all, v_all]
        sc = op("Add", [op("Mul", [op("MatMul", [heads(q), op("Transpose", [k_all], perm=[0, 1, 3, 2])]), scale]), mask])
        a = op("MatMul", [op("Softmax", [sc], axis=-1), v_all])  # [1, H, S, D]
        a = op("Reshape", [op("Transpose", [a], perm=[0, 2, 1, 3]), shape_c])  # [1, S, C]
        x = op("Add", [x, lin(a, f"{p}.attn.c_proj")])
        x = op("Add", [x, lin(gelu(lin(ln(x, f"{p}.ln_2"), f"{p}.mlp.c_fc")), f"{p}.mlp.c_proj")])
    h = ln(x, "ln_f")
    nodes.append(helper.make_node("MatMul", [h, op("Transpose", ["wte"], perm=[1, 0])], ["logits"], name="head"))

    fl = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "S"])]
    outs = [helper.make_tensor_value_info("logits", fl, [1, "S", V])]
    for i in range(L):
        inputs += [helper.make_tensor_value_info(f"past_{n}.{i}", fl, [1, H, "P", D]) for n in ("key", "value")]
        outs += [helper.make_tensor_value_info(f"present_{n}.{i}", fl, [1, H, "T", D]) for n in ("key", "value")]
    graph = helper.make_graph(nodes, "gpt2", inputs, outs, initializer=inits)
    model = helper.make_model(graph, producer_name="bungpu-export_gpt2", opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    helper.set_model_props(model, {k: str(cfg[k]) for k in CONFIG_KEYS})
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("weights")
    ap.add_argument("out")
    ap.add_argument("--config")
    a = ap.parse_args(argv)
    weights, meta = read_safetensors(a.weights)
    if a.config:
        with open(a.config) as f:
            cfg = json.load(f)
    else:
        cfg = meta
    try:
        cfg = {k: int(cfg[k]) for k in CONFIG_KEYS}
    except KeyError as e:
        raise SystemExit(f"the config has no {e.args[0]}")
    if cfg["nEmbd"] % cfg["nHead"]:
        raise SystemExit("nEmbd must be a multiple of nHead")
    model = build(weights, cfg)
    with open(a.out, "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1:])
