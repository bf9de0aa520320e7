// Variable: a named integer with inclusive bounds, usable as a tensor dimension (a sequence
// length, a batch size). Buffers are laid out for `max`; the value travels to kernels as an i32
// argument, so a new value never recompiles.
import { describeGot, invalid } from "../errors";
import { INSPECT } from "../inspect";

export class Variable {
  readonly name: string;
  readonly min: number;
  readonly max: number;
  #value: number | undefined;

  constructor(name: string, min: number, max: number, value?: number) {
    if (typeof name !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
      invalid("new Variable", `name must be an identifier, got ${describeGot(name)}`);
    if (!Number.isInteger(min) || !Number.isInteger(max) || min < 0 || max < min || max > 2147483647)
      invalid("new Variable", `bounds must be integers with 0 <= min <= max, got [${describeGot(min)}, ${describeGot(max)}]`);
    this.name = name;
    this.min = min;
    this.max = max;
    if (value !== undefined) this.bind(value);
  }

  /** Set the current value (checked against the bounds); returns this variable. */
  bind(value: number): this {
    this.check(value, "Variable.bind");
    this.#value = value;
    return this;
  }

  check(value: unknown, call: string): number {
    if (typeof value !== "number" || !Number.isInteger(value))
      invalid(call, `variable ${this.name} must be an integer within its bounds [${this.min}, ${this.max}], got ${describeGot(value)}`);
    if (value < this.min || value > this.max) invalid(call, `variable ${this.name} = ${value} is outside its bounds [${this.min}, ${this.max}]`);
    return value;
  }

  get bound(): boolean {
    return this.#value !== undefined;
  }

  /** The bound value (throws when unbound). */
  get value(): number {
    if (this.#value === undefined) invalid("Variable.value", `variable ${this.name} is not bound; call bind(value)`);
    return this.#value;
  }

  toString(): string {
    return `${this.name}[${this.min}..${this.max}]`;
  }

  /** "Variable(T in [1, 128], bound to 5)" (or "unbound"). */
  [INSPECT](): string {
    return `Variable(${this.name} in [${this.min}, ${this.max}], ${this.#value === undefined ? "unbound" : `bound to ${this.#value}`})`;
  }
}

export type Dim = number | Variable;

export function dimMax(d: Dim): number {
  return typeof d === "number" ? d : d.max;
}

export function dimStr(d: Dim): string {
  return typeof d === "number" ? String(d) : d instanceof Variable ? d.name : String(d);
}

export function shapeStr(shape: readonly Dim[]): string {
  return `[${shape.map(dimStr).join(", ")}]`;
}

/** Value of a dim under variable values `vals` (falling back to the variable's bound value). */
export function dimValue(d: Dim, vals?: ReadonlyMap<string, number>): number {
  if (typeof d === "number") return d;
  return vals?.get(d.name) ?? d.value;
}
