/** Latency samples kept as a sorted-on-demand array: runs are bounded, so this stays small. */
export class Samples {
  #v: number[] = [];
  #sorted = true;
  add(x: number): void {
    this.#v.push(x);
    this.#sorted = false;
  }
  get count(): number {
    return this.#v.length;
  }
  pct(p: number): number {
    if (this.#v.length === 0) return Number.NaN;
    if (!this.#sorted) {
      this.#v.sort((a, b) => a - b);
      this.#sorted = true;
    }
    const i = Math.min(this.#v.length - 1, Math.max(0, Math.ceil((p / 100) * this.#v.length) - 1));
    return this.#v[i]!;
  }
  values(): number[] {
    return this.#v;
  }
}

export function pct(values: number[], p: number): number {
  const s = new Samples();
  for (const v of values) s.add(v);
  return s.pct(p);
}

export const round = (x: number, digits = 2) =>
  Number.isFinite(x) ? Math.round(x * 10 ** digits) / 10 ** digits : x;

export const MiB = 1024 * 1024;
