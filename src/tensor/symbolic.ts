// Integer index arithmetic with range analysis: the algebra that turns views (shape, strides,
// offset, mask) into index expressions and simplifies them. An expression is an affine sum
// `c + Σ coef·atom`, where an atom is a loop coordinate with known bounds, or an opaque floor
// division / modulo by a positive constant that could not be simplified away. Division and modulo
// distribute over the affine terms when the remainder's range allows it, and
// `d·(x / d) + (x % d)` recombines into `x`: that is what lets a reshape that splits or merges
// dimensions cost nothing in the generated index.

export type Atom =
  | { kind: "coord"; name: string; max: number; key: string }
  | { kind: "div"; x: Sym; d: number; key: string; lo: number; hi: number }
  | { kind: "mod"; x: Sym; d: number; key: string; lo: number; hi: number };

interface Term {
  atom: Atom;
  coef: number;
}

function floorDiv(a: number, b: number): number {
  return Math.floor(a / b);
}
function posMod(a: number, b: number): number {
  return ((a % b) + b) % b;
}

export class Sym {
  readonly c: number;
  readonly terms: ReadonlyMap<string, Term>;
  #key: string | undefined;
  #lo: number | undefined;
  #hi: number | undefined;

  constructor(c: number, terms: Map<string, Term>) {
    this.c = c;
    this.terms = terms;
  }

  static const(c: number): Sym {
    return new Sym(c, new Map());
  }

  /** A loop coordinate in [0, max]. A coordinate of a size-1 dimension is the constant 0. */
  static coord(name: string, max: number): Sym {
    if (max <= 0) return Sym.const(0);
    const atom: Atom = { kind: "coord", name, max, key: name };
    return new Sym(0, new Map([[name, { atom, coef: 1 }]]));
  }

  static of(atom: Atom, coef = 1): Sym {
    return new Sym(0, new Map([[atom.key, { atom, coef }]]));
  }

  get key(): string {
    if (this.#key === undefined) {
      const parts = [...this.terms.values()].map((t) => `${t.coef}*${t.atom.key}`).sort();
      this.#key = parts.length ? `${parts.join("+")}+${this.c}` : `${this.c}`;
    }
    return this.#key;
  }

  get isConst(): boolean {
    return this.terms.size === 0;
  }

  get lo(): number {
    if (this.#lo === undefined) this.#bounds();
    return this.#lo!;
  }
  get hi(): number {
    if (this.#hi === undefined) this.#bounds();
    return this.#hi!;
  }

  #bounds(): void {
    let lo = this.c, hi = this.c;
    for (const { atom, coef } of this.terms.values()) {
      const [alo, ahi] = atomBounds(atom);
      if (coef >= 0) {
        lo += coef * alo;
        hi += coef * ahi;
      } else {
        lo += coef * ahi;
        hi += coef * alo;
      }
    }
    this.#lo = lo;
    this.#hi = hi;
  }

  add(o: Sym | number): Sym {
    if (typeof o === "number") {
      if (o === 0) return this;
      return new Sym(this.c + o, new Map(this.terms));
    }
    if (o.terms.size === 0) return this.add(o.c);
    const m = new Map(this.terms);
    for (const [k, t] of o.terms) {
      const prev = m.get(k);
      const coef = (prev?.coef ?? 0) + t.coef;
      if (coef === 0) m.delete(k);
      else m.set(k, { atom: t.atom, coef });
    }
    return recombine(new Sym(this.c + o.c, m));
  }

  mul(k: number): Sym {
    if (k === 1) return this;
    if (k === 0) return Sym.const(0);
    const m = new Map<string, Term>();
    for (const [key, t] of this.terms) m.set(key, { atom: t.atom, coef: t.coef * k });
    return new Sym(this.c * k, m);
  }

  /** Floor division by a positive constant. */
  div(d: number): Sym {
    if (d === 1) return this;
    if (this.isConst) return Sym.const(floorDiv(this.c, d));
    const q = new Map<string, Term>();
    const r = new Map<string, Term>();
    for (const [k, t] of this.terms) {
      if (t.coef % d === 0) q.set(k, { atom: t.atom, coef: t.coef / d });
      else r.set(k, t);
    }
    const cq = floorDiv(this.c, d);
    const rem = new Sym(this.c - cq * d, r);
    const quot = new Sym(cq, q);
    const klo = floorDiv(rem.lo, d), khi = floorDiv(rem.hi, d);
    if (klo === khi) return quot.add(klo);
    // (x / a) / b = x / (a·b) for x ≥ 0
    if (rem.c === 0 && rem.terms.size === 1) {
      const only = [...rem.terms.values()][0]!;
      if (only.coef === 1 && only.atom.kind === "div" && only.atom.x.lo >= 0)
        return quot.add(only.atom.x.div(only.atom.d * d));
    }
    // pull a common factor: (g·y + c) / d with g | d and 0 ≤ c < g  →  y / (d/g)
    const g = gcdOfCoefs(rem);
    if (g > 1 && d % g === 0 && rem.c >= 0 && rem.c < g) {
      const y = new Sym(0, scaleTerms(rem.terms, 1 / g));
      return quot.add(y.div(d / g));
    }
    return quot.add(Sym.of(mkDiv(rem, d)));
  }

  /** Floor modulo by a positive constant (result in [0, d)). */
  mod(d: number): Sym {
    if (d === 1) return Sym.const(0);
    if (this.isConst) return Sym.const(posMod(this.c, d));
    // (c·a + y) % d = ((c mod d)·a + y) % d for integer atoms: a smaller coefficient may bring the
    // whole remainder inside [0, d) (window views built by repeat: (k·(n+s) + o) % n = k·s + o)
    const r = new Map<string, Term>();
    for (const [k, t] of this.terms) {
      const c = posMod(t.coef, d);
      if (c !== 0) r.set(k, c === t.coef ? t : { atom: t.atom, coef: c });
    }
    const rem = new Sym(posMod(this.c, d), r);
    const klo = floorDiv(rem.lo, d), khi = floorDiv(rem.hi, d);
    if (klo === khi) return rem.add(-klo * d);
    const g = gcdOfCoefs(rem);
    if (g > 1 && d % g === 0 && rem.c >= 0 && rem.c < g) {
      // (g·y + c) % d = g·(y % (d/g)) + c
      const y = new Sym(0, scaleTerms(rem.terms, 1 / g));
      return y.mod(d / g).mul(g).add(rem.c);
    }
    return Sym.of(mkMod(rem, d));
  }

  toString(): string {
    const parts: string[] = [];
    for (const { atom, coef } of this.terms.values()) parts.push(`${coef === 1 ? "" : `${coef}*`}${atomStr(atom)}`);
    if (this.c !== 0 || parts.length === 0) parts.push(String(this.c));
    return parts.join(" + ");
  }
}

function atomStr(a: Atom): string {
  if (a.kind === "coord") return a.name;
  return `(${a.x.toString()})${a.kind === "div" ? "/" : "%"}${a.d}`;
}

function gcd(a: number, b: number): number {
  a = Math.abs(a);
  b = Math.abs(b);
  while (b) [a, b] = [b, a % b];
  return a;
}

function gcdOfCoefs(s: Sym): number {
  let g = 0;
  for (const t of s.terms.values()) g = gcd(g, t.coef);
  return g;
}

function scaleTerms(terms: ReadonlyMap<string, Term>, k: number): Map<string, Term> {
  const m = new Map<string, Term>();
  for (const [key, t] of terms) m.set(key, { atom: t.atom, coef: t.coef * k });
  return m;
}

export function atomBounds(a: Atom): [number, number] {
  if (a.kind === "coord") return [0, a.max];
  return [a.lo, a.hi];
}

function mkDiv(x: Sym, d: number): Atom {
  return { kind: "div", x, d, key: `(${x.key})/${d}`, lo: floorDiv(x.lo, d), hi: floorDiv(x.hi, d) };
}

function mkMod(x: Sym, d: number): Atom {
  const lo = x.lo, hi = x.hi;
  // A modulo whose argument stays inside one period keeps a tight range.
  if (floorDiv(lo, d) === floorDiv(hi, d)) return { kind: "mod", x, d, key: `(${x.key})%${d}`, lo: posMod(lo, d), hi: posMod(hi, d) };
  return { kind: "mod", x, d, key: `(${x.key})%${d}`, lo: 0, hi: d - 1 };
}

/** c·d·(x / d) + c·(x % d) → c·x, repeatedly. */
function recombine(s: Sym): Sym {
  for (const [mk, mt] of s.terms) {
    if (mt.atom.kind !== "mod") continue;
    const dk = `(${mt.atom.x.key})/${mt.atom.d}`;
    const dt = s.terms.get(dk);
    if (!dt || dt.coef !== mt.coef * mt.atom.d) continue;
    const m = new Map(s.terms);
    m.delete(mk);
    m.delete(dk);
    return new Sym(s.c, m).add(mt.atom.x.mul(mt.coef));
  }
  return s;
}

/** A conjunction of range conditions lo ≤ s < hi; `never` when one of them cannot hold. */
export class Valid {
  readonly conds: readonly { s: Sym; lo: number; hi: number }[];
  readonly never: boolean;
  private constructor(conds: { s: Sym; lo: number; hi: number }[], never: boolean) {
    this.conds = conds;
    this.never = never;
  }
  static readonly always = new Valid([], false);
  static readonly none = new Valid([], true);

  get always(): boolean {
    return !this.never && this.conds.length === 0;
  }

  and(s: Sym, lo: number, hi: number): Valid {
    if (this.never) return this;
    if (s.lo >= lo && s.hi < hi) return this;
    if (s.hi < lo || s.lo >= hi || hi <= lo) return Valid.none;
    return new Valid([...this.conds, { s, lo, hi }], false);
  }

  andValid(o: Valid): Valid {
    if (this.never || o.always) return this;
    if (o.never) return o;
    let v: Valid = this;
    for (const c of o.conds) v = v.and(c.s, c.lo, c.hi);
    return v;
  }
}
