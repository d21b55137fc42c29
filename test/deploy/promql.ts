/**
 * The metric selectors a PromQL expression reads, found lexically: strings, label matchers, range
 * and subquery brackets and grouping clauses are removed first; what remains that is an identifier
 * not followed by `(` (a function or an aggregation) and not a keyword is a metric name. Enough for
 * the expressions in deploy/ (each is also parsed by promtool, so a malformed one fails there).
 */

const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
]);

export interface Selector {
  name: string;
  /** Equality matchers only (`role="worker"`); regex and negative matchers are left out. */
  labels: Record<string, string>;
}

export function selectors(expr: string): Selector[] {
  const out: Selector[] = [];
  // Keep each selector's matchers aside before blanking them.
  const matchers: string[] = [];
  let e = expr.replace(/\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}/g, (_m, inner: string) => {
    matchers.push(inner);
    return `«${matchers.length - 1}»`;
  });
  e = e.replace(/"(?:[^"\\]|\\.)*"/g, '""').replace(/'(?:[^'\\]|\\.)*'/g, "''");
  e = e.replace(/\[[^\]]*\]/g, '');
  e = e.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '');
  for (const m of e.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const at = m.index;
    const prev = at > 0 ? e[at - 1]! : '';
    if (/[0-9.$«]/.test(prev)) continue; // 1e9, $variable, a placeholder's digits
    if (KEYWORDS.has(m[0].toLowerCase())) continue;
    const rest = e.slice(at + m[0].length);
    if (rest.trimStart().startsWith('(')) continue;
    const labels: Record<string, string> = {};
    const ph = /^«(\d+)»/.exec(rest);
    if (ph) {
      // `name="v"` only: `!=` and `=~` do not match (no `"` right after the `=`, or a `!` before it).
      for (const l of matchers[Number(ph[1])]!.matchAll(/(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"/g))
        labels[l[1]!] = l[2]!;
    }
    out.push({ name: m[0], labels });
  }
  return out;
}
