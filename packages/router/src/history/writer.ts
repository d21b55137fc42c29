import {
  BatchedWriter,
  type Keys,
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

/** Bytes of one pack's value at most: past it the pack is closed and the next record starts another. */
const MAX_PACK_BYTES = 256 * 1024;
/** An id's bytes in a pack's id run: its index fingerprint (2) and its bucket hash (4). */
const ID_BYTES = 6;
/** A pack's id run starts with the hour since the epoch (4 bytes) and the minute of the hour (1). */
const ID_HEADER = 5;

/** Per endpoint, over a run of attempts in order: a delivery ended its failure run (reset), and when failures began after the last one. */
interface Health {
  reset: boolean;
  since: number | undefined;
}

/**
 * A tenant's records of one kind and one minute in one flush: ONE Kafka message, so one offset for
 * all of them (-1 until the send is acknowledged). Each record is written into the pack's buffer as
 * it arrives (a JSON array, docs/storage.md): nothing of it stays in the JS heap but what its
 * Redis index needs, so records waiting for a flush are neither scanned nor copied by V8's
 * scavenges. Kept as objects (an event record holds its body's base64) until their send, they
 * made the writer cost ~23 µs of CPU per event and attempt; written on arrival, ~10
 * (docs/benchmarks/profile.md, 2026-12-06).
 */
interface Pack {
  kind: 'e' | 'a';
  tenantId: string;
  /** Minutes since the epoch. */
  minute: number;
  partition: number;
  /** The message's index among its send's messages to (kind, partition); set when the send starts. */
  k: number;
  /** The value: `[rec,rec,...` up to `len`; the closing bracket is written when the send starts. */
  buf: Buffer;
  len: number;
  records: number;
  /** When its first record was logged (the message's timestamp; #pack opens it for that record). */
  at: number;
  /**
   * Events: the id run for the event-id index: ID_HEADER bytes (hour, minute) then ID_BYTES per
   * record (fingerprint, bucket hash), `idLen` bytes used. One Lua argument however many ids.
   */
  ids: Buffer | undefined;
  idLen: number;
  /** Attempts that are indexed beyond their endpoint's health (failed, retrying, later, resent). */
  indexed: AttemptRecord[];
  /** Attempts: per endpoint, the health of this pack's attempts in order. */
  health: Map<string, Health> | undefined;
  offset: bigint;
}

/** A flush's records: the packs in the order they were opened. */
interface Batch {
  packs: Pack[];
  /** The open pack of each `kind \0 tenant \0 minute`. */
  open: Map<string, Pack>;
  /** The pack each kind's last record went to. */
  last: { e?: Pack; a?: Pack };
  records: number;
}

function newBatch(): Batch {
  return { packs: [], open: new Map(), last: {}, records: 0 };
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
  /** Records buffered or being sent. */
  #buffered = 0;
  /** Bytes of event packs buffered or being sent. */
  #eventBytes = 0;
  /** Callers of room() waiting for #eventBytes to fall under MAX_BUFFERED_EVENT_BYTES. */
  #roomWaiters: (() => void)[] = [];
  #closed = false;
  #batch = newBatch();
  readonly #writer = new BatchedWriter<Batch>({
    flushMs: FLUSH_MS,
    serial: true,
    spacingMs: SPACING_MS,
    take: () => {
      const b = this.#batch;
      if (b.records === 0) return undefined;
      this.#batch = newBatch();
      return b;
    },
    write: (b) => this.#write(b),
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
    if (!this.#admit()) return;
    const at = Date.now();
    const rec = eventToWire(ev) as EventRecord;
    rec.p = endpointIds as string[];
    rec.at = at;
    const g = this.#pack('e', ev.tenantId, at);
    const before = g.len;
    this.#append(g, JSON.stringify(rec));
    this.#eventBytes += g.len - before;
    const f = fp ?? fingerprint(ev.id);
    let ids = g.ids;
    if (ids === undefined || g.idLen + ID_BYTES > ids.length) {
      const grown = Buffer.allocUnsafe(Math.max(ID_HEADER + 64 * ID_BYTES, (ids?.length ?? 0) * 2));
      if (ids) ids.copy(grown, 0, 0, g.idLen);
      else {
        grown.writeUInt32BE(Math.floor(g.minute / 60), 0);
        grown[4] = g.minute % 60;
        g.idLen = ID_HEADER;
      }
      g.ids = ids = grown;
    }
    ids.writeUInt16BE(Number.parseInt(f.index, 16), g.idLen);
    ids.writeUInt32BE(f.bucket, g.idLen + 2);
    g.idLen += ID_BYTES;
    this.#added();
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
    if (!this.#admit()) return;
    const g = this.#pack('a', rec.t, rec.at);
    this.#append(g, JSON.stringify(rec));
    // Endpoint health: when the current run of failures began; any delivery ends it.
    g.health ??= new Map();
    let h = g.health.get(rec.p);
    if (!h) {
      h = { reset: false, since: undefined };
      g.health.set(rec.p, h);
    }
    if (rec.o === 'delivered') {
      h.reset = true;
      h.since = undefined;
    } else h.since ??= rec.at;
    if (rec.o !== 'delivered' || rec.n > 1 || rec.rs || rec.lt) g.indexed.push(rec);
    this.#added();
  }

  /** Whether another record may be buffered (false: dropped and counted). */
  #admit(): boolean {
    if (this.#closed || this.#buffered >= MAX_BUFFERED) {
      historyDroppedTotal.inc();
      return false;
    }
    return true;
  }

  #added(): void {
    this.#buffered++;
    this.#writer.buffered(++this.#batch.records >= MAX_BATCH);
  }

  /** The open pack of (kind, tenant, minute of `at`) in this flush, opened if there is none. */
  #pack(kind: 'e' | 'a', tenantId: string, at: number): Pack {
    const minute = Math.floor(at / 60_000);
    const b = this.#batch;
    // The previous record's pack of this kind, most often the one (no key string, no map lookup).
    const last = b.last[kind];
    if (
      last !== undefined &&
      last.tenantId === tenantId &&
      last.minute === minute &&
      last.len < MAX_PACK_BYTES
    )
      return last;
    const key = `${kind}\u0000${tenantId}\u0000${minute}`;
    let g = b.open.get(key);
    if (!g || g.len >= MAX_PACK_BYTES) {
      const { partitions } = this.#o;
      g = {
        kind,
        tenantId,
        minute,
        partition: historyPartition(tenantId, kind === 'e' ? partitions.events : partitions.attempts),
        k: 0,
        buf: Buffer.allocUnsafe(1024),
        len: 0,
        records: 0,
        at,
        ids: undefined,
        idLen: 0,
        indexed: [],
        health: undefined,
        offset: -1n,
      };
      b.open.set(key, g);
      b.packs.push(g);
    }
    b.last[kind] = g;
    return g;
  }

  /** Writes one record's JSON into its pack (after `[` or `,`), growing the buffer as needed. */
  #append(g: Pack, json: string): void {
    // A small record is sized at 3 bytes per UTF-16 unit (the most UTF-8 takes) instead of
    // scanning it; a large one (a body of up to 1 MiB) exactly. Plus the separator and the bracket.
    const need = g.len + (json.length > 16_384 ? Buffer.byteLength(json) : json.length * 3) + 2;
    if (need > g.buf.length) {
      const grown = Buffer.allocUnsafe(Math.max(need, g.buf.length * 2));
      g.buf.copy(grown, 0, 0, g.len);
      g.buf = grown;
    }
    g.buf[g.len++] = g.records === 0 ? 0x5b : 0x2c; // '[' before the first, ',' between
    g.len += g.buf.write(json, g.len);
    g.records++;
  }

  async #write(b: Batch): Promise<void> {
    try {
      for (let i = 0; i < b.packs.length; ) {
        let bytes = 0;
        const start = i;
        for (; i < b.packs.length; i++) {
          const g = b.packs[i]!;
          if (i > start && bytes + g.len > MAX_SEND_BYTES) break;
          bytes += g.len;
        }
        await this.#send(b.packs.slice(start, i));
      }
    } finally {
      this.#buffered -= b.records;
      for (const g of b.packs) if (g.kind === 'e') this.#eventBytes -= g.len;
      this.#wakeRoom();
    }
  }

  /**
   * One produce for both topics, then one Redis pipeline for the indexes. A tenant's records of one
   * kind and one minute travel as ONE Kafka message (a JSON array the reader flattens): kafkajs
   * encodes a record's framing, headers and varints per message, so at 1 endpoint/event two
   * messages per delivery were a fifth of the worker's CPU (docs/benchmarks/profile.md).
   */
  async #send(packs: Pack[]): Promise<void> {
    const { topics } = this.#o;
    /** Messages per (kind, partition) so far: a pack's index among them. */
    const counts = new Map<string, number>();
    const byTopic = { e: [] as Message[], a: [] as Message[] };
    const records = { e: 0, a: 0 };
    for (const g of packs) {
      const ck = `${g.kind}:${g.partition}`;
      g.k = counts.get(ck) ?? 0;
      counts.set(ck, g.k + 1);
      records[g.kind] += g.records;
      g.buf[g.len] = 0x5d; // ']' (#append left room for it)
      byTopic[g.kind].push({
        key: g.tenantId,
        value: g.buf.subarray(0, g.len + 1),
        partition: g.partition,
        timestamp: String(g.at),
      });
    }
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
          historyDroppedTotal.inc(records.e + records.a);
          this.#o.logger.warn(
            { err, records: records.e + records.a },
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
    for (const g of packs) {
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
        /** The event packs' id runs, one Lua argument each. */
        const runs: Buffer[] = [];
        /** Per endpoint: a delivery here ended its run (reset), and when failures began after it. */
        const health = new Map<string, Health>();
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
          if (!r) ranges.set(rk, { first: g.offset, last: g.offset, count: g.records });
          else {
            if (g.offset < r.first) r.first = g.offset;
            if (g.offset > r.last) r.last = g.offset;
            r.count += g.records;
          }
          if (g.ids !== undefined && g.idLen > ID_HEADER) runs.push(g.ids.subarray(0, g.idLen));
          // The pack's health follows the tenant's earlier packs (they are in the order they were
          // opened): a delivery in it ends the run, else its first failure may begin one.
          if (g.health)
            for (const [ep, ph] of g.health) {
              const hs = health.get(ep);
              if (!hs) health.set(ep, { ...ph });
              else if (ph.reset) {
                hs.reset = true;
                hs.since = ph.since;
              } else hs.since ??= ph.since;
            }
          for (const a of g.indexed) {
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
          ...runs,
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
        { err, records: packs.reduce((n, g) => n + g.records, 0) },
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
