/**
 * Repeated measurements: a benchmark whose verdict can flip runs its measured phase in rounds and
 * reports the median and the worst round. Verdicts use the worst: one good sample on a shared
 * machine proves nothing, a target met by the worst of three is met.
 */
import { readFileSync } from 'node:fs';

/** Rounds of the measured phase: 3 in a full run; `--quick` keeps the columns with 2. */
export const roundsFor = (quick: boolean): number => (quick ? 2 : 3);

/** Load average above this makes the numbers of that round suspect (2 cores, shared). */
export const LOAD_WARN = 0.5;

export function loadAvg1m(): number {
  try {
    return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
  } catch {
    return Number.NaN;
  }
}

export type Better = 'higher' | 'lower';

export interface Spread {
  median: number;
  /** The worst round: the lowest when higher is better, the highest when lower is. */
  worst: number;
  /** Rounds that produced a number. */
  n: number;
  /** Rounds asked for; a round without a number (undefined / NaN) makes `worst` undefined-worst. */
  of: number;
  samples: (number | undefined)[];
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * Median and worst of the rounds. A round that produced no number counts as the worst possible
 * result (0 when higher is better, +∞ when lower is): a benchmark that failed once has not met its
 * target. Undefined when no round produced a number.
 */
export function spread(samples: (number | undefined)[], better: Better): Spread | undefined {
  const ok = samples.filter((x): x is number => typeof x === 'number' && !Number.isNaN(x));
  if (ok.length === 0) return undefined;
  const missing = ok.length < samples.length;
  const worstOk = better === 'higher' ? Math.min(...ok) : Math.max(...ok);
  const worst = missing ? (better === 'higher' ? 0 : Number.POSITIVE_INFINITY) : worstOk;
  return { median: median(ok), worst, n: ok.length, of: samples.length, samples };
}

/** The per-round values as one cell: "5,745 / 5,120 / 6,001". */
export function roundsCell(samples: (number | undefined)[], digits = 0): string {
  return samples
    .map((x) =>
      x === undefined || Number.isNaN(x)
        ? '—'
        : Number.isFinite(x)
          ? x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
          : '∞',
    )
    .join(' / ');
}

/** Ratio a ÷ b per round (undefined where either is missing). */
export function perRound(
  a: (number | undefined)[],
  b: (number | undefined)[],
  f: (x: number, y: number) => number = (x, y) => x / y,
): (number | undefined)[] {
  return a.map((x, i) => {
    const y = b[i];
    return typeof x === 'number' && typeof y === 'number' && y !== 0 && !Number.isNaN(x) && !Number.isNaN(y)
      ? f(x, y)
      : undefined;
  });
}

/** "worst of 3 rounds" / "worst of 2 rounds (quick)" for goal texts. */
export const worstOf = (s: Spread | undefined, quick: boolean): string =>
  s ? `worst of ${s.of} round${s.of > 1 ? 's' : ''}${quick ? ', quick' : ''}` : 'not measured';
