/**
 * The internals that tests reach, behind one explicit door (package.json `exports["./testing"]`).
 * Production code and other packages import `./index.ts` only.
 */
export { readEvent } from './records/records.ts';
export { type Role, type Started, start } from './roles/start.ts';
export { SpillProducer } from './spill/producer.ts';
export { Credits } from './worker/credits.ts';
export { eventFromWire, eventToWire, fanOut, taskFromWire, taskToWire } from './worker/fanout.ts';
