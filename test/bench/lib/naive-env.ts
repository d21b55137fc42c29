/** The naive peers' configuration: a required environment variable, or exit 2 naming it. */
export function requireEnv(who: string, name: string): string {
  const v = process.env[name];
  if (!v) {
    process.stderr.write(`${who}: ${name} is not set\n`);
    process.exit(2);
  }
  return v;
}
