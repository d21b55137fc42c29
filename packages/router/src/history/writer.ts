import {
  type Keys,
  ListWriter,
  type Logger,
  type RedisClient,
  retryDelayMs,
  type SpillwayEvent,
  sleep,
  tenantTag,
} from '@spillway/shared';
import type { Kafka, Message } from 'kafkajs';
import { type PipeCommands, withCommands } from '../commands/index.ts';
import { historyDroppedTotal, historyRecordsTotal } from '../metrics.ts';
import { type Fingerprint, fingerprint, INDEX_PER_BUCKET, INDEX_SLOT_MS } from '../records/fingerprints.ts';
import { firstError, groupByTenant, pipelineByTag } from '../records/pipeline.ts';
import { eventToWire } from '../worker/fanout.ts';
import { type HistoryTopics, historyPartition, lazyProducer } from './topics.ts';
import { type AttemptRecord, attemptMember, type EventRecord } from './wire.ts';

/** History records wait this long for company before one produce carries them all. */
const FLUSH_MS = 20;
/**
 * At least this long from one flush's start to the next's. Without it a busy worker flushed once per
 * round trip (hundreds of times a second), and every flush pays a produce, a Redis pipeline, an
 * index Lua call that rewrites each bucket it touches, and a health command per endpoint: that was
 * about a third of a worker's CPU per delivery (docs/benchmarks/profile.md). History is a record,
 * so it becomes visible up to this much later.
 */
const SPACING_MS = 50;
/** Records per flush at most (a busy worker flushes sooner). */
const MAX_BATCH = 4000;
/** Bytes of record values per produce request (bodies may be large; see the spill producer). */
const MAX_SEND_BYTES = 512 * 1024;
/** Records buffered while Kafka does not answer; past this new ones are dropped and counted. */
const MAX_BUFFERED = 50_000;
/**
 * Bytes of event records (about their JSON, body included) waiting for a send, past which the
 * worker claims no more intake work (`room()`) until the writer catches up. Without it only
 * MAX_BUFFERED bounded them: 50,000 records whose bodies may be up to 1 MiB each, in the JS heap,
 * whenever fan-out outruns the serial produce (a backlog spilled at 10,000+ events/s does).
 */
export const MAX_BUFFERED_EVENT_BYTES = 8 * 1024 * 1024;
/** How long a resend/recover operation is kept (its idempotency window). */
export const OPERATION_TTL_MS = 24 * 3_600_000;
/** A produce that keeps failing is given up after this many tries (the records are counted dropped). */
const SEND_TRIES = 6;

/**
 * A tenant's records of one kind and one minute in one flush: ONE Kafka message, so one offset for
 * all of them (-1 until the send is acknowledged).
 */
interface Pack {
  kind: 'e' | 'a';
  tenantId: string;
  /** Minutes since the epoch. */
  minute: number;
  partition: number;
  /** The message's index among this send's messages to (kind, partition). */
  k: number;
  items: Item[];
  offset: bigint;
}

/** A record waiting for the next flush; it is serialized only when its send starts. */
type Item =
  | { kind: 'e'; tenantId: string; rec: EventRecord; fp?: Fingerprint; value?: string; bytes: number }
  | { kind: 'a'; tenantId: string; rec: AttemptRecord; value?: string };

/**
 * A pack's message value: its records' JSON as one JSON array, written straight into one Buffer.
 * Handing kafkajs a joined string cost more than the rest of the send: the join is a rope that its
 * encoder's two `Buffer.byteLength` calls flatten and scan before it is copied again.
 */
function packValue(items: readonly Item[]): Buffer {
  if (items.length === 1) return Buffer.from(items[0]!.value!);
  let bytes = items.length + 1; // brackets and commas
  for (const it of items) bytes += Buffer.byteLength(it.value!);
  const buf = Buffer.allocUnsafe(bytes);
  let at = 0;
  for (let i = 0; i < items.length; i++) {
    buf[at++] = i === 0 ? 0x5b : 0x2c; // '[' before the first, ',' between
    at += buf.write(items[i]!.value!, at);
  }
  buf[at] = 0x5d; // ']'
  return buf;
}

export interface HistoryWriterOptions {
  kafka: Kafka;
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  topics: HistoryTopics;
  /** Partition counts of the events and attempts topics. */
  partitions: { events: number; attempts: number };
  retention: { ms: number; count: number };
  /**
   * SPILLWAY_ENDPOINT_DISABLE_AFTER: an endpoint whose attempts have all failed for this long is
   * reported to `onSustainedFailure` (the worker disables it). Undefined: never.
   */
  disableAfterMs?: number;
  onSustainedFailure?: (tenantId: string, endpointId: string, failingSince: number) => void;
}

/**
 * Writes the event log and the attempt history (docs/storage.md). The worker hands it each event it
 * fans out and each attempt it settles; nothing on the delivery path waits for it. Every FLUSH_MS
 * (or MAX_BATCH records) ONE produce carries the records of both topics (each tenant's records to
 * its own partition, so their offsets are known from the acknowledgement), then ONE Redis pipeline
 * (one Lua call per tenant) merges their offsets into the minute indexes, appends the logged ids to
 * the event-id index and adds the failed and later attempts to their capped sorted sets.
 *
 * History is a record, never an owner: a record Kafka does not take after SEND_TRIES is dropped
 * and counted (`spillway_history_dropped_total`), as is one that finds MAX_BUFFERED waiting.
 */
export class HistoryWriter {
  readonly #o: HistoryWriterOptions;
  readonly #redis: ReturnType<typeof withCommands>;
  readonly #producer: ReturnType<typeof lazyProducer>;
  #buffered = 0;
  /** Estimated bytes of the event records buffered (Item.bytes). */
  #eventBytes = 0;
  /** Callers of room() waiting for #eventBytes to fall under MAX_BUFFERED_EVENT_BYTES. */
  #roomWaiters: (() => void)[] = [];
  #closed = false;
  readonly #writer = new ListWriter<Item>({
    flushMs: FLUSH_MS,
    maxItems: MAX_BATCH,
    serial: true,
    spacingMs: SPACING_MS,
    write: (items) => this.#write(items),
  });

  constructor(opts: HistoryWriterOptions) {
    this.#o = opts;
    this.#redis = withCommands(opts.redis);
    this.#producer = lazyProducer(opts.kafka);
  }

  /**
   * A fanned-out event: its body and the endpoints it went to (called once per intake job event).
   * `fp`: the id's fingerprint when the caller has it (the worker computed it for dedup).
   */
  event(ev: SpillwayEvent, endpointIds: readonly string[], fp?: Fingerprint): void {
    const rec: EventRecord = { ...eventToWire(ev), p: [...endpointIds], at: Date.now() };
    // The record's JSON: the base64 body plus about 200 bytes of ids, type and endpoint list.
    const bytes = rec.b.length + 200 + 40 * endpointIds.length;
    const item: Item = { kind: 'e', tenantId: ev.tenantId, rec, bytes };
    if (fp) item.fp = fp;
    if (this.#add(item)) this.#eventBytes += bytes;
  }

  /**
   * Undefined while the event records waiting for a send stay under MAX_BUFFERED_EVENT_BYTES, else
   * a promise that resolves once the writer has caught up below it (or is closed). The worker
   * awaits it before it takes another intake job apart, so a backlog is fanned out no faster than
   * its event log is written, and the records waiting stay bounded.
   */
  room(): Promise<void> | undefined {
    if (this.#closed || this.#eventBytes < MAX_BUFFERED_EVENT_BYTES) return undefined;
    return new Promise((resolve) => this.#roomWaiters.push(resolve));
  }

  #wakeRoom(): void {
    if (this.#eventBytes >= MAX_BUFFERED_EVENT_BYTES && !this.#closed) return;
    for (const w of this.#roomWaiters.splice(0)) w();
  }

  /** One attempt that ended (or a dead letter without one: `endpoint_disabled`). */
  attempt(rec: AttemptRecord): void {
    this.#add({ kind: 'a', tenantId: rec.t, rec });
  }

  /** Whether the item was buffered (false: dropped and counted). */
  #add(item: Item): boolean {
    if (this.#closed || this.#buffered >= MAX_BUFFERED) {
      historyDroppedTotal.inc();
      return false;
    }
    this.#buffered++;
    this.#writer.add(item);
    return true;
  }

  async #write(items: Item[]): Promise<void> {
    try {
      for (let i = 0; i < items.length; ) {
        let bytes = 0;
        const start = i;
        for (; i < items.length; i++) {
          const it = items[i]!;
          it.value ??= JSON.stringify(it.rec);
          if (i > start && bytes + it.value.length > MAX_SEND_BYTES) break;
          bytes += it.value.length;
        }
        await this.#send(items.slice(start, i));
      }
    } finally {
      this.#buffered -= items.length;
      for (const it of items) if (it.kind === 'e') this.#eventBytes -= it.bytes;
      this.#wakeRoom();
    }
  }

  /**
   * One produce for both topics, then one Redis pipeline for the indexes. A tenant's records of one
   * kind and one minute travel as ONE Kafka message (a JSON array the reader flattens): kafkajs
   * encodes a record's framing, headers and varints per message, so at 1 endpoint/event two
   * messages per delivery were a fifth of the worker's CPU (docs/benchmarks/profile.md).
   */
  async #send(items: Item[]): Promise<void> {
    const { topics, partitions } = this.#o;
    /** Messages per (kind, partition) so far: a new pack's index among them. */
    const counts = new Map<string, number>();
    const packs = new Map<string, Pack>();
    const records = { e: 0, a: 0 };
    for (const it of items) {
      records[it.kind]++;
      const minute = Math.floor(it.rec.at / 60_000);
      const gk = `${it.kind}\u0000${it.tenantId}\u0000${minute}`;
      let g = packs.get(gk);
      if (!g) {
        const partition = historyPartition(
          it.tenantId,
          it.kind === 'e' ? partitions.events : partitions.attempts,
        );
        const ck = `${it.kind}:${partition}`;
        const k = counts.get(ck) ?? 0;
        counts.set(ck, k + 1);
        g = { kind: it.kind, tenantId: it.tenantId, minute, partition, k, items: [], offset: -1n };
        packs.set(gk, g);
      }
      g.items.push(it);
    }
    const byTopic = { e: [] as Message[], a: [] as Message[] };
    for (const g of packs.values())
      byTopic[g.kind].push({
        key: g.tenantId,
        value: packValue(g.items),
        partition: g.partition,
        timestamp: String(g.items[0]!.rec.at),
      });
    const topicMessages = [
      ...(byTopic.e.length ? [{ topic: topics.events, messages: byTopic.e }] : []),
      ...(byTopic.a.length ? [{ topic: topics.attempts, messages: byTopic.a }] : []),
    ];
    let meta: { topicName: string; partition: number; baseOffset?: string }[] | undefined;
    for (let n = 1; meta === undefined; n++) {
      try {
        const producer = await this.#producer.get();
        meta = await producer.sendBatch({ acks: -1, topicMessages });
      } catch (err) {
        if (n >= SEND_TRIES || this.#closed) {
          historyDroppedTotal.inc(items.length);
          this.#o.logger.warn(
            { err, records: items.length },
            'history records dropped: Kafka did not take them',
          );
          return;
        }
        this.#o.logger.debug({ err, attempt: n }, 'history send failed; retrying');
        if (n % 3 === 2) await this.#producer.reset();
        await sleep(retryDelayMs(n));
      }
    }
    historyRecordsTotal.inc({ topic: 'events' }, records.e);
    historyRecordsTotal.inc({ topic: 'attempts' }, records.a);
    const base = new Map<string, bigint>();
    for (const m of meta)
      base.set(`${m.topicName === topics.events ? 'e' : 'a'}:${m.partition}`, BigInt(m.baseOffset ?? '-1'));
    // Every record of a pack is in one message: one offset for all of them.
    const placed: Pack[] = [];
    for (const g of packs.values()) {
      const b = base.get(`${g.kind}:${g.partition}`) ?? -1n;
      if (b < 0n) continue;
      g.offset = b + BigInt(g.k);
      placed.push(g);
    }
    await this.#index(placed);
  }

  /**
   * The Redis side of one acknowledged send: one Lua call per tenant, plain commands for the sets.
   * The minute index takes each message once (its offset and how many records it holds).
   */
  async #index(packs: Pack[]): Promise<void> {
    const { keys, retention } = this.#o;
    const ttl = retention.ms + INDEX_SLOT_MS;
    const now = Date.now();
    const probes: { tenantId: string; eps: string[]; at: number }[] = [];
    const res = await pipelineByTag(
      this.#redis,
      groupByTenant(packs, (g) => g.tenantId),
      ([tenantId]) => tenantTag(tenantId),
      (pipe, [tenantId, gs]) => {
        const from = pipe.length;
        const ranges = new Map<string, { first: bigint; last: bigint; count: number }>();
        const ids: (string | number)[] = [];
        /** Per endpoint: a delivery here ended its run (reset), and when failures began after it. */
        const health = new Map<string, { reset: boolean; since: number | undefined }>();
        const zsets = new Map<string, [number, string][]>();
        /** `<event> <endpoint>` → when it failed for good, or undefined: it answered since. */
        const failedNow = new Map<string, number | undefined>();
        const zadd = (key: string, score: number, member: string) => {
          const l = zsets.get(key);
          if (l) l.push([score, member]);
          else zsets.set(key, [[score, member]]);
        };
        for (const g of gs) {
          const hour = Math.floor(g.minute / 60);
          const minute = g.minute % 60;
          const rk = `${g.kind}\u0000${hour}\u0000${minute}\u0000${g.partition}`;
          const r = ranges.get(rk);
          if (!r) ranges.set(rk, { first: g.offset, last: g.offset, count: g.items.length });
          else {
            if (g.offset < r.first) r.first = g.offset;
            if (g.offset > r.last) r.last = g.offset;
            r.count += g.items.length;
          }
          for (const it of g.items) {
            if (it.kind === 'e') {
              const fp = it.fp ?? fingerprint(it.rec.i);
              ids.push(hour, minute, fp.index, fp.bucket);
              continue;
            }
            const a = it.rec;
            // Endpoint health: when the current run of failures began; any delivery ends it.
            const hs = health.get(a.p) ?? { reset: false, since: undefined };
            health.set(a.p, hs);
            if (a.o === 'delivered') {
              hs.reset = true;
              hs.since = undefined;
            } else hs.since ??= a.at;
            if (a.o !== 'delivered') zadd(keys.failedAttempts(tenantId, a.p), a.at, attemptMember(a));
            else if (a.n > 1 || a.rs || a.lt) zadd(keys.laterAttempts(tenantId, a.p), a.at, attemptMember(a));
            // The tenant's failed deliveries (event, endpoint) — until one answers after all.
            if (a.o === 'failed') failedNow.set(`${a.i} ${a.p}`, a.at);
            else if (a.o === 'delivered' && (a.n > 1 || a.rs)) failedNow.set(`${a.i} ${a.p}`, undefined);
            // A resend/recover operation's progress: how many of its deliveries ended, and how.
            if (a.rs && a.o !== 'retrying') {
              const ok = `${keys.operations(tenantId)}:${a.rs}:n`;
              pipe.hincrby(ok, a.o, 1);
              pipe.pexpire(ok, OPERATION_TTL_MS);
            }
          }
        }
        const args: (string | number)[] = [ttl, INDEX_PER_BUCKET, ranges.size];
        for (const [k, r] of ranges) {
          const [kind, hour, minute, partition] = k.split('\u0000');
          args.push(kind!, hour!, minute!, partition!, r.first.toString(), r.last.toString(), r.count);
        }
        (pipe as unknown as PipeCommands).historyIndex(
          keys.eventIdIndex(tenantId),
          keys.historyMinutes(tenantId, 'events'),
          keys.historyMinutes(tenantId, 'attempts'),
          ...args,
          ...ids,
        );
        const fe = keys.failedEvents(tenantId);
        const answered = [...failedNow].filter(([, at]) => at === undefined).map(([m]) => m);
        if (answered.length) pipe.zrem(fe, ...answered);
        for (const [m, at] of failedNow) if (at !== undefined) zadd(fe, at, m);
        // Capped and aged: at most retention.count members, none older than the retention.
        for (const [key, members] of zsets) {
          pipe.zadd(key, ...members.flat());
          pipe.zremrangebyscore(key, '-inf', now - retention.ms);
          pipe.zremrangebyrank(key, 0, -(retention.count + 1));
          pipe.pexpire(key, retention.ms);
        }
        // One command per endpoint per flush, whatever its number of attempts.
        const hk = keys.endpointHealth(tenantId);
        const failing: string[] = [];
        for (const [ep, h] of health) {
          if (h.reset) pipe.hdel(hk, ep);
          if (h.since !== undefined) {
            pipe.hsetnx(hk, ep, h.since);
            failing.push(ep);
          }
        }
        if (failing.length > 0) pipe.pexpire(hk, retention.ms);
        if (this.#o.disableAfterMs !== undefined && failing.length > 0) {
          const eps = failing;
          probes.push({ tenantId, eps, at: pipe.length - from });
          pipe.hmget(keys.endpointHealth(tenantId), ...eps);
        }
      },
    );
    const err = firstError(res);
    if (err)
      this.#o.logger.warn(
        { err, records: packs.reduce((n, g) => n + g.items.length, 0) },
        'history index write failed',
      );
    // Endpoints still failing whose run began longer ago than SPILLWAY_ENDPOINT_DISABLE_AFTER.
    const after = this.#o.disableAfterMs;
    if (after === undefined) return;
    const groups = groupByTenant(packs, (g) => g.tenantId);
    for (const p of probes) {
      const g = groups.findIndex(([t]) => t === p.tenantId);
      const [e, since] = res[g]?.[p.at] ?? [new Error('no reply'), null];
      if (e) continue;
      (since as (string | null)[]).forEach((v, k) => {
        if (v !== null && now - Number(v) >= after)
          this.#o.onSustainedFailure?.(p.tenantId, p.eps[k]!, Number(v));
      });
    }
  }

  /** Writes what is buffered (tests, shutdown). */
  flush(): Promise<void> {
    return this.#writer.flush();
  }

  async close(): Promise<void> {
    do await this.#writer.flush();
    while (this.#writer.busy);
    this.#closed = true;
    this.#wakeRoom();
    await this.#producer.close();
  }
}
