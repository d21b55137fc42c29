#!/usr/bin/env node
// Spillway runs its TypeScript sources directly (Node >= 24 strips types), so there is no build.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  process.stderr.write(
    `spillway: Node ${process.versions.node} is too old; Spillway needs Node >= 24 (source infra/local/env.sh)\n`,
  );
  process.exit(1);
}
// kafkajs 2.2 schedules some request-queue timers with a negative delay, which Node >= 23 reports
// as a TimeoutNegativeWarning on every start (Node treats the delay as 1 ms: harmless). Drop that
// one warning; every other still prints.
const emitWarning = process.emitWarning;
process.emitWarning = function (warning, ...rest) {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0]?.type;
  if (type === 'TimeoutNegativeWarning' || warning?.name === 'TimeoutNegativeWarning') return;
  return emitWarning.call(process, warning, ...rest);
};
const { main } = await import('../src/cli/main.ts');
await main(process.argv);
