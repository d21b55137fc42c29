import { readFileSync } from 'node:fs';

/**
 * Secrets and the admin token given to the CLI: on argv they show up in `ps` and shell history, so
 * every option that takes one also takes `-` (read stdin) and has a `--...-file <path>` twin
 * (`-` = stdin there too). One trailing newline is dropped (what `echo` and editors add).
 */
let stdinRead = false;

function readText(path: string, what: string): string {
  if (path === '-') {
    if (stdinRead) throw new Error(`${what}: stdin was already read for another option`);
    stdinRead = true;
  }
  let text: string;
  try {
    text = readFileSync(path === '-' ? 0 : path, 'utf8');
  } catch (err) {
    throw new Error(
      `${what}: cannot read ${path === '-' ? 'stdin' : path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    );
  }
  const value = text.replace(/\r?\n$/, '');
  if (!value) throw new Error(`${what}: ${path === '-' ? 'stdin' : path} is empty`);
  return value;
}

/**
 * The value of `--<name> <value|->` or `--<name>-file <path|->`; undefined when neither is given.
 * Both at once is an error.
 */
export function secretInput(
  name: string,
  value: string | undefined,
  file: string | undefined,
): string | undefined {
  if (value !== undefined && file !== undefined)
    throw new Error(`give --${name} or --${name}-file, not both`);
  if (file !== undefined) return readText(file, `--${name}-file`);
  if (value === '-') return readText('-', `--${name} -`);
  return value;
}
