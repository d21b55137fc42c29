/**
 * The internals that tests reach, behind one explicit door (package.json `exports["./testing"]`).
 * Production code and other packages import `./index.ts` only.
 */
export { SnapshotHub } from './admin/console/hub.ts';
export { utcDay } from './admin/quota.ts';
export { withCommands } from './commands/index.ts';
export { KafkaRangeReader } from './history/kafka-range.ts';
export { HistoryReader } from './history/reader.ts';
export { ensureHistoryTopics, historyTopics } from './history/topics.ts';
export { unpackRecords } from './history/wire.ts';
export { HistoryWriter, MAX_BUFFERED_EVENT_BYTES } from './history/writer.ts';
export { ordStepArgs } from './ordering/store.ts';
export { fingerprint } from './records/fingerprints.ts';
export { retryBucketOf } from './retry/scheduler.ts';
export { type Role, type Started, start } from './roles/start.ts';
export { NOTE_EVERY_MS, SpillActivity } from './spill/activity.ts';
export { SpillProducer } from './spill/producer.ts';
export { Credits } from './worker/credits.ts';
export { eventFromWire, eventToWire, fanOut, taskFromWire, taskToWire } from './worker/fanout.ts';
export { FETCH_AHEAD, FetchGate, GatedWorker, oneRunPerJob } from './worker/fetch-gate.ts';
export { Turns } from './worker/turns.ts';
