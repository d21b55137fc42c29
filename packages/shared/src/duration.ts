const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Parses `250ms`, `5s`, `30m`, `2h` (also `1.5s`) into milliseconds; undefined when malformed. */
export function parseDuration(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$/.exec(text);
  if (!m) return undefined;
  return Math.round(Number(m[1]) * UNIT_MS[m[2]!]!);
}

/** Formats milliseconds back into the shortest exact unit (`300000` → `5m`). */
export function formatDuration(ms: number): string {
  for (const unit of ['h', 'm', 's'] as const) {
    const size = UNIT_MS[unit]!;
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
