import diagnosticsChannel from 'node:diagnostics_channel';

/**
 * `spillway:delivery:attempt` — one message per attempt outcome: `{ task, outcome }`. Published only
 * while someone subscribes (tracing, tests), so the hot path pays one boolean check.
 */
export const attemptChannel = diagnosticsChannel.channel('spillway:delivery:attempt');
