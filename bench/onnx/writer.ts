// A minimal ONNX writer for the benches: a protobuf encoder enough for a ModelProto, and the
// pieces of a graph (initializers, value infos, nodes). No Python `onnx` package needed.
// A minimal protobuf writer, enough for an ONNX ModelProto.
export class Pb {
  parts: number[] = [];
  varint(v: number | bigint): this {
    let x = BigInt(v);
    if (x < 0n) x += 1n << 64n;
    do {
      let b = Number(x & 0x7fn);
      x >>= 7n;
      if (x) b |= 0x80;
      this.parts.push(b);
    } while (x);
    return this;
  }
  tag(field: number, wire: number): this {
    return this.varint((field << 3) | wire);
  }
  int(field: number, v: number): this {
    return this.tag(field, 0).varint(v);
  }
  bytes(field: number, data: Uint8Array | number[]): this {
    this.tag(field, 2).varint(data.length);
    for (const b of data) this.parts.push(b);
    return this;
  }
  str(field: number, s: string): this {
    return this.bytes(field, [...new TextEncoder().encode(s)]);
  }
  msg(field: number, m: Pb): this {
    return this.bytes(field, m.parts);
  }
  done(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

export const FLOAT = 1; // TensorProto.DataType.FLOAT
export function initializer(name: string, dims: number[], data: Float32Array): Pb {
  const t = new Pb();
  for (const d of dims) t.int(1, d);
  t.int(2, FLOAT).str(8, name);
  return t.bytes(9, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
}
export function valueInfo(name: string, dims: number[]): Pb {
  const shape = new Pb();
  for (const d of dims) shape.msg(1, new Pb().int(1, d));
  const tensorType = new Pb().int(1, FLOAT).msg(2, shape);
  return new Pb().str(1, name).msg(2, new Pb().msg(1, tensorType));
}
export function node(op: string, inputs: string[], outputs: string[], attrs: Pb[] = []): Pb {
  const n = new Pb();
  for (const i of inputs) n.str(1, i);
  for (const o of outputs) n.str(2, o);
  n.str(3, `${op}_${outputs[0]}`).str(4, op);
  for (const a of attrs) n.msg(5, a);
  return n;
}
