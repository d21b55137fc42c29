/** Plain-text output of the operator CLI: aligned tables and key/value blocks, or JSON. */

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

const cell = (v: unknown): string => {
  if (v === undefined || v === null) return '-';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
};

export function formatTable(rows: Record<string, unknown>[], columns: string[]): string {
  if (rows.length === 0) return '(none)\n';
  const grid = [columns.map((c) => c.toUpperCase()), ...rows.map((r) => columns.map((c) => cell(r[c])))];
  const widths = columns.map((_, i) => Math.max(...grid.map((line) => line[i]!.length)));
  return `${grid.map((line) => line.map((v, i) => (i === line.length - 1 ? v : v.padEnd(widths[i]!))).join('  ')).join('\n')}\n`;
}

export function printTable(rows: Record<string, unknown>[], columns: string[]): void {
  process.stdout.write(formatTable(rows, columns));
}

export function printKv(obj: Record<string, unknown>): void {
  const keys = Object.keys(obj).filter((k) => obj[k] !== undefined);
  const w = Math.max(0, ...keys.map((k) => k.length));
  process.stdout.write(keys.map((k) => `  ${k.padEnd(w)}  ${cell(obj[k])}`).join('\n') + '\n');
}
