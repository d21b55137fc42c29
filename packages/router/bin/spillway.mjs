#!/usr/bin/env node
// Spillway runs its TypeScript sources directly (Node >= 24 strips types), so there is no build.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  process.stderr.write(
    `spillway: Node ${process.versions.node} is too old; Spillway needs Node >= 24 (source infra/local/env.sh)\n`,
  );
  process.exit(1);
}
const { main } = await import('../src/cli/main.ts');
await main(process.argv);
