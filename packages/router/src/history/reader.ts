import type { DeliveryRecord, DeliveryStatus, Keys, RedisClient } from '@spillway/shared';
import { errors } from '@spillway/shared';
import type { Kafka } from 'kafkajs';
import { fingerprint, INDEX_SLOT_MS } from '../records/fingerprints.ts';
import { KafkaRangeReader } from './kafka-range.ts';
import type { HistoryTopics } from './topics.ts';
import {
  type AttemptMember,
  type AttemptRecord,
  attemptMember,
  type EventRecord,
  unpackRecords,
} from './wire.ts';

/** One attempt as the API shows it. */
export interface AttemptView {
  eventId: string;
  endpointId: string;
  attempt: number;
  /** ISO-8601, when it ended. */
  at: string;
  /** What this attempt came to (whether another one follows: `nextAt`, `deadLettered`). */
  status: 'delivered' | 'failed';
  /** The last attempt of its delivery failed: the delivery went to the DLQ. */
  deadLettered?: true;
  httpStatus?: number;
  error?: string;
  latencyMs: number;
  /** First 1 KiB of the response body. */
  response?: string;
  /** ISO-8601, when the next attempt is due (status retrying). */
  nextAt?: string;
  /** The resend or recover operation it belongs to. */
  operation?: string;
}

/** An event as the event log lists it. */
export interface LoggedEvent {
  id: string;
  type: string;
  receivedAt: string;
  /** When the worker logged (fanned out) it. */
  loggedAt: string;
  endpoints: string[];
  status: DeliveryStatus;
}

export interface Page<T> {
  data: T[];
  /** Pass as `cursor` for the next page; absent at the end. */
  next?: string;
}

/** One minute of a tenant's records in a history topic: an offset range of one partition. */
interface Minute {
  hour: number;
  minute: number;
  partition: number;
  first: bigint;
  last: bigint;
  count: number;
}

/** Records one request reads from Kafka at most before it answers with a cursor. */
const SCAN_RECORDS = 20_000;
/** Members a ZSCAN step looks at (the capped sets hold up to the retention count). */
const ZSCAN_STEP = 2000;
/** After an event was logged, how many of the tenant's attempt minutes are searched for its attempts. */
const ATTEMPT_MINUTES = 3;

const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
function dec<T>(s: string | undefined): T | undefined {
  if (s === undefined) return undefined;
  try {
    return JSON.parse(Buffer.from(s, 'base64url').toString()) as T;
  } catch {
    throw errors.invalidRequest('cursor is not one this API gave out');
  }
}

const minuteMs = (m: Pick<Minute, 'hour' | 'minute'>) => m.hour * INDEX_SLOT_MS + m.minute * 60_000;

/**
 * A cursor into a newest-first scan: go on below record `j` of the message at offset `o` of this
 * minute's partition range (a message packs a tenant's records of one flush; `j` absent: 0).
 */
interface Pos {
  h: number;
  m: number;
  p: number;
  o: string;
  j?: number;
}
const posMs = (c: Pos) => c.h * INDEX_SLOT_MS + c.m * 60_000;
const same = (m: Minute, c: Pos) => minuteMs(m) === posMs(c) && m.partition === c.p;
/** Whether the minute was fully read by the pages before the cursor (newest-first order). */
const before = (m: Minute, c: Pos) =>
  minuteMs(m) > posMs(c) || (same(m, c) && (m.first > BigInt(c.o) || (m.first === BigInt(c.o) && !c.j)));

function toView(a: AttemptRecord): AttemptView {
  const v: AttemptView = {
    eventId: a.i,
    endpointId: a.p,
    attempt: a.n,
    at: new Date(a.at).toISOString(),
    status: a.o === 'delivered' ? 'delivered' : 'failed',
    latencyMs: a.ms,
  };
  if (a.o === 'failed') v.deadLettered = true;
  if (a.st !== undefined) v.httpStatus = a.st;
  if (a.er !== undefined) v.error = a.er;
  if (a.x !== undefined) v.response = a.x;
  if (a.nx !== undefined) v.nextAt = new Date(a.nx).toISOString();
  if (a.rs !== undefined) v.operation = a.rs;
  return v;
}

/** An attempt known only from its sorted-set member (no excerpt): filled from Kafka when asked. */
const STATES = { d: 'delivered', r: 'retrying', f: 'failed' } as const;

function fromMember(endpointId: string, raw: string): AttemptRecord {
  const [i, n, code, ms, at, o, rs] = JSON.parse(raw) as AttemptMember;
  const a: AttemptRecord = { t: '', i, p: endpointId, n, at, ms, o: STATES[o] ?? 'failed' };
  if (/^\d+$/.test(code)) a.st = Number(code);
  else if (code) {
    a.er = code;
    const m = /^http_(\d+)$/.exec(code);
    if (m) a.st = Number(m[1]);
  }
  if (rs) a.rs = rs;
  return a;
}

const attemptKey = (a: Pick<AttemptRecord, 'i' | 'p' | 'n' | 'at'>) =>
  `${a.i}\u0000${a.p}\u0000${a.n}\u0000${a.at}`;

/**
 * Reads the history back (docs/storage.md): Redis says where (minute indexes, the event-id index,
 * the capped sorted sets), Kafka has what (the records). Every read is bounded: a page reads at
 * most SCAN_RECORDS records and answers with a cursor to go on.
 */
export interface HistoryReaderOptions {
  redis: RedisClient;
  keys: Keys;
  kafka: Kafka;
  topics: HistoryTopics;
  retentionMs: number;
  /**
   * When the current incarnation of the tenant (with `endpointId`: of that endpoint) began, or
   * undefined when it does not exist. History from before is an earlier owner's of the id (deleted
   * and created again) and is not shown as this one's: events, attempts, failures to recover
   * (config/incarnation.ts). Without it, everything under the id is shown.
   */
  bornAt?: (tenantId: string, endpointId?: string) => Promise<number | undefined>;
}

export class HistoryReader {
  readonly #redis: RedisClient;
  readonly #keys: Keys;
  readonly #topics: HistoryTopics;
  readonly #retentionMs: number;
  readonly #kafka: KafkaRangeReader;
  readonly #bornAt: HistoryReaderOptions['bornAt'];

  constructor(opts: HistoryReaderOptions) {
    this.#bornAt = opts.bornAt;
    this.#redis = opts.redis;
    this.#keys = opts.keys;
    this.#topics = opts.topics;
    this.#retentionMs = opts.retentionMs;
    this.#kafka = new KafkaRangeReader(opts.kafka);
  }

  // --- indexes ---------------------------------------------------------------------------------

  /** The tenant's minutes of a topic between two times, newest first (or oldest first). */
  async #minutes(
    tenantId: string,
    kind: 'events' | 'attempts',
    fromMs: number,
    toMs: number,
    order: 'desc' | 'asc' = 'desc',
  ): Promise<Minute[]> {
    const lo = Math.max(
      Math.floor(fromMs / INDEX_SLOT_MS),
      Math.floor((Date.now() - this.#retentionMs) / INDEX_SLOT_MS) - 1,
    );
    const hi = Math.floor(toMs / INDEX_SLOT_MS);
    const hours: number[] = [];
    for (let h = hi; h >= lo; h--) hours.push(h);
    const base = this.#keys.historyMinutes(tenantId, kind);
    const pipe = this.#redis.pipeline();
    for (const h of hours) pipe.hgetall(`${base}:${h}`);
    const res = (await pipe.exec()) ?? [];
    const out: Minute[] = [];
    hours.forEach((hour, i) => {
      const [err, all] = res[i] ?? [];
      if (err) throw err;
      for (const [f, v] of Object.entries((all ?? {}) as Record<string, string>)) {
        const [m, p] = f.split(':');
        const [a, b, c] = v.split(':');
        const x: Minute = {
          hour,
          minute: Number(m),
          partition: Number(p),
          first: BigInt(a!),
          last: BigInt(b!),
          count: Number(c),
        };
        const t = minuteMs(x);
        if (t + 60_000 > fromMs && t <= toMs) out.push(x);
      }
    });
    out.sort((x, y) => minuteMs(x) - minuteMs(y) || Number(x.first - y.first));
    return order === 'asc' ? out : out.reverse();
  }

  /**
   * Reads one minute of the tenant's records, oldest first, parsed and unpacked; with `below`, only
   * those before record `j` of the message at offset `o`. `budget` counts records read (a message
   * of another tenant counts one).
   */
  async #readMinute<T extends { t: string }>(
    kind: 'events' | 'attempts',
    tenantId: string,
    m: Minute,
    budget: { left: number },
    below?: { o: bigint; j: number },
  ): Promise<{ offset: bigint; j: number; rec: T }[]> {
    const topic = kind === 'events' ? this.#topics.events : this.#topics.attempts;
    const out: { offset: bigint; j: number; rec: T }[] = [];
    const end = below === undefined ? m.last : below.j > 0 ? below.o : below.o - 1n;
    const to = end < m.last ? end : m.last;
    if (to < m.first || budget.left <= 0) return out;
    await this.#kafka.read(topic, m.partition, m.first, to, (r) => {
      if (r.key !== tenantId) return --budget.left > 0;
      const recs = unpackRecords<T>(r.value);
      const n = below && r.offset === below.o ? Math.min(below.j, recs.length) : recs.length;
      for (let j = 0; j < n; j++)
        if (recs[j]!.t === tenantId) out.push({ offset: r.offset, j, rec: recs[j]! });
      budget.left -= Math.max(1, recs.length);
      return budget.left > 0;
    });
    return out;
  }

  /**
   * The tenant's records of a topic from `until` (or from below the cursor `cur`) back to `since`,
   * newest first, each with the cursor that goes on below it. Reads at most SCAN_RECORDS records;
   * `scan.cut` is set when that budget ends the scan with minutes left.
   */
  async *#newestFirst<T extends { t: string }>(
    kind: 'events' | 'attempts',
    tenantId: string,
    since: number,
    until: number,
    cur: Pos | undefined,
    scan: { cut: boolean },
  ): AsyncGenerator<{ rec: T; pos: Pos }> {
    const budget = { left: SCAN_RECORDS };
    const top = cur ? Math.min(until, posMs(cur)) : until;
    for (const m of await this.#minutes(tenantId, kind, since, top)) {
      if (cur && before(m, cur)) continue;
      if (budget.left <= 0) {
        scan.cut = true;
        return;
      }
      const below = cur && same(m, cur) ? { o: BigInt(cur.o), j: cur.j ?? 0 } : undefined;
      for (const { offset, j, rec } of (
        await this.#readMinute<T>(kind, tenantId, m, budget, below)
      ).reverse())
        yield {
          rec,
          pos: { h: m.hour, m: m.minute, p: m.partition, o: offset.toString(), ...(j ? { j } : {}) },
        };
    }
  }

  /** Hours and minutes where the event-id index says the id may have been logged (newest first). */
  async #locate(tenantId: string, eventId: string): Promise<{ hour: number; minute: number }[]> {
    const fp = fingerprint(eventId);
    const want0 = Number.parseInt(fp.index.slice(0, 2), 16);
    const want1 = Number.parseInt(fp.index.slice(2, 4), 16);
    const base = this.#keys.eventIdIndex(tenantId);
    const hi = Math.floor(Date.now() / INDEX_SLOT_MS);
    const lo = Math.floor((Date.now() - this.#retentionMs) / INDEX_SLOT_MS) - 1;
    const hours: number[] = [];
    for (let h = hi; h >= lo; h--) hours.push(h);
    const metas = this.#redis.pipeline();
    for (const h of hours) metas.hmget(`${base}:${h}:m`, 'e0', 'l');
    const mres = (await metas.exec()) ?? [];
    const gets = this.#redis.pipeline();
    const which: number[] = [];
    hours.forEach((h, i) => {
      const [e0, l] = (mres[i]?.[1] ?? []) as (string | null)[];
      if (e0 == null || l == null) return;
      for (let e = Number(e0); e <= Number(l); e++) {
        gets.getBuffer(`${base}:${h}:${e}:${fp.bucket % 2 ** e}`);
        which.push(h);
      }
    });
    const gres = (await gets.exec()) ?? [];
    const out: { hour: number; minute: number }[] = [];
    gres.forEach(([, v], k) => {
      const b = v as Buffer | null;
      if (!b) return;
      for (let i = 0; i + 2 < b.length; i += 3)
        if (b[i] === want0 && b[i + 1] === want1) out.push({ hour: which[k]!, minute: b[i + 2]! });
    });
    return out;
  }

  /** Where the history of the current incarnation of the tenant (or endpoint) starts (ms). */
  async #floor(tenantId: string, endpointId?: string): Promise<number> {
    return (await this.#bornAt?.(tenantId, endpointId)) ?? 0;
  }

  /**
   * The logged record of an event, or undefined (not logged yet, past the retention, or accepted
   * for an earlier incarnation of the tenant).
   */
  async findEvent(tenantId: string, eventId: string): Promise<EventRecord | undefined> {
    const found = await this.#findEvent(tenantId, eventId);
    return found && found.r >= (await this.#floor(tenantId)) ? found : undefined;
  }

  async #findEvent(tenantId: string, eventId: string): Promise<EventRecord | undefined> {
    const budget = { left: SCAN_RECORDS };
    for (const c of await this.#locate(tenantId, eventId)) {
      const minutes = (await this.#minutes(tenantId, 'events', minuteMs(c), minuteMs(c))).filter(
        (m) => m.hour === c.hour && m.minute === c.minute,
      );
      for (const m of minutes) {
        const found = (await this.#readMinute<EventRecord>('events', tenantId, m, budget)).find(
          (r) => r.rec.i === eventId,
        );
        if (found) return found.rec;
      }
    }
    return undefined;
  }

  // --- attempts of one event ------------------------------------------------------------------

  /** Every attempt of the event the history still has, oldest first (excerpts included). */
  async #eventAttempts(tenantId: string, ev: EventRecord): Promise<AttemptRecord[]> {
    const byKey = new Map<string, AttemptRecord>();
    // First attempts follow the fan-out: the tenant's next few attempt minutes.
    const budget = { left: SCAN_RECORDS };
    const minutes = (await this.#minutes(tenantId, 'attempts', ev.at - 60_000, Date.now(), 'asc')).slice(
      0,
      ATTEMPT_MINUTES + 1,
    );
    for (const m of minutes)
      for (const { rec } of await this.#readMinute<AttemptRecord>('attempts', tenantId, m, budget))
        if (rec.i === ev.i) byKey.set(attemptKey(rec), rec);
    // Failed attempts and what came after them: the endpoints' sorted sets, matched by event id.
    const pattern = `[${JSON.stringify(ev.i).replace(/[*?[\]\\]/g, (c) => `\\${c}`)},*`;
    const sets: [string, string][] = [];
    for (const p of ev.p) {
      sets.push([this.#keys.failedAttempts(tenantId, p), p]);
      sets.push([this.#keys.laterAttempts(tenantId, p), p]);
    }
    // ZSCAN in steps of ZSCAN_STEP (each call short, so Redis never blocks long on a big set),
    // every set in parallel.
    const missing: AttemptRecord[] = [];
    await Promise.all(
      sets.map(async ([key, p]) => {
        let cursor = '0';
        do {
          const [next, flat] = await this.#redis.zscan(key, cursor, 'MATCH', pattern, 'COUNT', ZSCAN_STEP);
          cursor = next;
          for (let k = 0; k < flat.length; k += 2) {
            const a = fromMember(p, flat[k]!);
            a.t = tenantId;
            if (!byKey.has(attemptKey(a))) missing.push(a);
          }
        } while (cursor !== '0');
      }),
    );
    // Their full records (state, excerpt, next time) are in the attempt minutes they happened in.
    if (missing.length > 0) {
      const wanted = new Map(missing.map((a) => [attemptKey(a), a]));
      const mins = new Set(missing.map((a) => Math.floor(a.at / 60_000)));
      for (const mm of mins) {
        for (const m of await this.#minutes(tenantId, 'attempts', mm * 60_000, mm * 60_000)) {
          for (const { rec } of await this.#readMinute<AttemptRecord>('attempts', tenantId, m, budget)) {
            const k = attemptKey(rec);
            if (wanted.has(k)) {
              byKey.set(k, rec);
              wanted.delete(k);
            }
          }
        }
      }
      for (const [k, a] of wanted) byKey.set(k, a);
    }
    return [...byKey.values()].sort((a, b) => a.at - b.at || a.n - b.n);
  }

  /** GET .../events/:eid — the contract's view: per endpoint the latest attempt's outcome. */
  async eventView(
    tenantId: string,
    eventId: string,
  ): Promise<{ id: string; type: string; receivedAt: string; deliveries: DeliveryRecord[] } | undefined> {
    const ev = await this.findEvent(tenantId, eventId);
    if (!ev) return undefined;
    const attempts = await this.#eventAttempts(tenantId, ev);
    const deliveries = ev.p
      .map((endpointId): DeliveryRecord => {
        const last = attempts.filter((a) => a.p === endpointId).at(-1);
        if (!last) return { endpointId, status: 'pending', attempts: 0 };
        const d: DeliveryRecord = { endpointId, status: last.o, attempts: last.n };
        if (last.st !== undefined) d.lastStatus = last.st;
        if (last.er !== undefined) d.lastError = last.er;
        return d;
      })
      .sort((a, b) => a.endpointId.localeCompare(b.endpointId));
    return { id: ev.i, type: ev.y, receivedAt: new Date(ev.r).toISOString(), deliveries };
  }

  /** GET .../events/:eid/attempts — newest first, cursor = how many were shown. */
  async eventAttempts(
    tenantId: string,
    eventId: string,
    opts: { cursor?: string; limit: number },
  ): Promise<Page<AttemptView> | undefined> {
    const ev = await this.findEvent(tenantId, eventId);
    if (!ev) return undefined;
    const all = (await this.#eventAttempts(tenantId, ev)).reverse();
    const from = dec<{ o: number }>(opts.cursor)?.o ?? 0;
    const data = all.slice(from, from + opts.limit).map(toView);
    return from + opts.limit < all.length ? { data, next: enc({ o: from + opts.limit }) } : { data };
  }

  // --- the event log --------------------------------------------------------------------------

  /** GET .../events — newest first, filtered; each request reads at most SCAN_RECORDS records. */
  async listEvents(
    tenantId: string,
    q: {
      since?: number;
      until?: number;
      type?: string;
      status?: DeliveryStatus;
      cursor?: string;
      limit: number;
    },
  ): Promise<Page<LoggedEvent>> {
    const since = Math.max(q.since ?? Date.now() - this.#retentionMs, await this.#floor(tenantId));
    const until = q.until ?? Date.now();
    if (q.status === 'failed') return this.#listFailed(tenantId, { ...q, since, until });
    const cur = dec<Pos>(q.cursor);
    const items: LoggedEvent[] = [];
    let pending: { rec: EventRecord; pos: Pos }[] = [];
    let next: Pos | undefined;
    /** Gives the pending records their status; keeps the matches (in scan order). */
    const settle = async () => {
      const withStatus = await this.#withStatus(
        tenantId,
        pending.map((x) => x.rec),
      );
      withStatus.forEach((e, k) => {
        if (items.length >= q.limit) return;
        if (q.status !== undefined && e.status !== q.status) return;
        items.push(e);
        next = pending[k]!.pos;
      });
      pending = [];
    };
    const chunk = q.status === undefined ? q.limit : q.limit * 2;
    const scan = { cut: false };
    const recs = this.#newestFirst<EventRecord>('events', tenantId, since, until, cur, scan);
    for await (const { rec, pos } of recs) {
      next = pos;
      if (rec.at < since || rec.at > until) continue;
      if (q.type !== undefined && rec.y !== q.type) continue;
      pending.push({ rec, pos });
      if (pending.length >= chunk) {
        await settle();
        if (items.length >= q.limit) {
          scan.cut = true;
          break;
        }
      }
    }
    if (pending.length > 0) await settle();
    return scan.cut && next ? { data: items, next: enc(next) } : { data: items };
  }

  /**
   * status=failed: the tenant's failed deliveries, newest first (exact; capped by the retention
   * count). An event with several failed endpoints is listed once, at its latest failure.
   */
  async #listFailed(
    tenantId: string,
    q: { since: number; until: number; type?: string; cursor?: string; limit: number },
  ): Promise<Page<LoggedEvent>> {
    const fe = this.#keys.failedEvents(tenantId);
    const floor = await this.#floor(tenantId);
    const cur = dec<{ s: number; m: string }>(q.cursor);
    const out: LoggedEvent[] = [];
    let max: number = cur ? cur.s : q.until;
    let after = cur?.m;
    for (let round = 0; round < 20 && out.length < q.limit; round++) {
      const raw = await this.#redis.zrevrangebyscore(
        fe,
        max,
        q.since,
        'WITHSCORES',
        'LIMIT',
        0,
        q.limit * 2 + 10,
      );
      const pairs: [string, number][] = [];
      for (let i = 0; i < raw.length; i += 2) pairs.push([raw[i]!, Number(raw[i + 1])]);
      // Resume after the cursor's member (members of one score come in reverse lexical order).
      let k = 0;
      if (after !== undefined) {
        const at = pairs.findIndex(([m, sc]) => m === after && sc === max);
        k = at >= 0 ? at + 1 : pairs.findIndex(([, sc]) => sc < max);
        if (k < 0) k = pairs.length;
      }
      const page = pairs.slice(k);
      if (page.length === 0) return { data: out };
      for (const [member, score] of page) {
        max = score;
        after = member;
        const id = member.slice(0, member.lastIndexOf(' '));
        const ev = await this.#findEvent(tenantId, id);
        // An event of an earlier incarnation of the tenant is not this one's.
        if (!ev || ev.r < floor || (q.type !== undefined && ev.y !== q.type)) continue;
        // Listed at its latest failed delivery only.
        const scores = (await this.#redis.zmscore(fe, ...ev.p.map((p) => `${id} ${p}`))) as (string | null)[];
        if (Math.max(...scores.map((x) => Number(x ?? 0))) > score) continue;
        if (out.some((e) => e.id === id)) continue;
        out.push({ ...logged(ev), status: 'failed' });
        if (out.length >= q.limit) return { data: out, next: enc({ s: score, m: member }) };
      }
      if (pairs.length < q.limit * 2 + 10) return { data: out };
    }
    return after !== undefined ? { data: out, next: enc({ s: max, m: after }) } : { data: out };
  }

  /** Status of logged events: failed from the failed-events set, else from their attempts. */
  async #withStatus(tenantId: string, evs: EventRecord[]): Promise<LoggedEvent[]> {
    if (evs.length === 0) return [];
    const members = evs.flatMap((e) => e.p.map((p) => `${e.i} ${p}`));
    const scores = members.length
      ? ((await this.#redis.zmscore(this.#keys.failedEvents(tenantId), ...members)) as (string | null)[])
      : [];
    const failedNow = new Set(members.filter((_, k) => scores[k] !== null));
    const lo = Math.min(...evs.map((e) => e.at));
    const hi = Math.max(...evs.map((e) => e.at));
    // Attempts of the page: the tenant's attempt minutes over the page's span (and one after).
    const last = new Map<string, AttemptRecord>();
    const budget = { left: SCAN_RECORDS };
    const ids = new Set(evs.map((e) => e.i));
    for (const m of await this.#minutes(tenantId, 'attempts', lo - 60_000, hi + 120_000, 'asc'))
      for (const { rec } of await this.#readMinute<AttemptRecord>('attempts', tenantId, m, budget))
        if (ids.has(rec.i)) {
          const k = `${rec.i}\u0000${rec.p}`;
          const prev = last.get(k);
          if (!prev || prev.at <= rec.at) last.set(k, rec);
        }
    // Deliveries that answered after a failure, later than the page's span.
    const eps = new Set(evs.flatMap((e) => e.p));
    const pipe = this.#redis.pipeline();
    for (const p of eps)
      pipe.zrangebyscore(this.#keys.laterAttempts(tenantId, p), lo, '+inf', 'LIMIT', 0, 5000);
    const res = (await pipe.exec()) ?? [];
    [...eps].forEach((p, i) => {
      for (const raw of (res[i]?.[1] ?? []) as string[]) {
        const a = fromMember(p, raw);
        if (!ids.has(a.i)) continue;
        const k = `${a.i}\u0000${p}`;
        const prev = last.get(k);
        if (!prev || prev.at <= a.at) last.set(k, a);
      }
    });
    return evs.map((ev) => {
      let status: DeliveryStatus = 'delivered';
      if (ev.p.some((p) => failedNow.has(`${ev.i} ${p}`))) status = 'failed';
      else
        for (const p of ev.p) {
          const a = last.get(`${ev.i}\u0000${p}`);
          if (!a) status = status === 'retrying' ? 'retrying' : 'pending';
          else if (a.o === 'retrying') status = 'retrying';
          else if (a.o === 'failed') status = 'failed';
        }
      return { ...logged(ev), status };
    });
  }

  // --- attempts of one endpoint ---------------------------------------------------------------

  /** GET .../endpoints/:epid/attempts — newest first; status=failed reads the endpoint's failed set. */
  async endpointAttempts(
    tenantId: string,
    endpointId: string,
    q: { status?: 'delivered' | 'failed'; since?: number; until?: number; cursor?: string; limit: number },
  ): Promise<Page<AttemptView>> {
    const since = Math.max(
      q.since ?? Date.now() - this.#retentionMs,
      await this.#floor(tenantId, endpointId),
    );
    const until = q.until ?? Date.now();
    if (q.status === 'failed') {
      const cur = dec<{ s: number; k: string }>(q.cursor);
      const raw = await this.#redis.zrevrangebyscore(
        this.#keys.failedAttempts(tenantId, endpointId),
        cur ? cur.s : until,
        since,
        'WITHSCORES',
        'LIMIT',
        0,
        q.limit + 50,
      );
      const list: AttemptRecord[] = [];
      let skipping = cur !== undefined;
      for (let i = 0; i < raw.length; i += 2) {
        const a = fromMember(endpointId, raw[i]!);
        a.t = tenantId;
        if (skipping) {
          if (Number(raw[i + 1]) < cur!.s) skipping = false;
          else {
            if (raw[i] === cur!.k) skipping = false;
            continue;
          }
        }
        list.push(a);
        if (list.length >= q.limit) break;
      }
      const full = await this.#fill(tenantId, list);
      const more = list.length >= q.limit;
      const tail = list.at(-1);
      return more && tail
        ? { data: full.map(toView), next: enc({ s: tail.at, k: attemptMember(tail) }) }
        : { data: full.map(toView) };
    }
    // Everything (or delivered only): the tenant's attempt minutes newest first, filtered.
    const out: AttemptRecord[] = [];
    let next: Pos | undefined;
    const scan = { cut: false };
    const recs = this.#newestFirst<AttemptRecord>(
      'attempts',
      tenantId,
      since,
      until,
      dec<Pos>(q.cursor),
      scan,
    );
    for await (const { rec, pos } of recs) {
      next = pos;
      const outside = rec.p !== endpointId || rec.at < since || rec.at > until;
      if (outside || (q.status !== undefined && (rec.o === 'delivered') !== (q.status === 'delivered')))
        continue;
      out.push(rec);
      if (out.length >= q.limit) {
        scan.cut = true;
        break;
      }
    }
    return scan.cut && next ? { data: out.map(toView), next: enc(next) } : { data: out.map(toView) };
  }

  /** Full records (excerpt, next time) for attempts known from a sorted set. */
  async #fill(tenantId: string, list: AttemptRecord[]): Promise<AttemptRecord[]> {
    const wanted = new Map(list.map((a) => [attemptKey(a), a]));
    const budget = { left: SCAN_RECORDS };
    for (const mm of new Set(list.map((a) => Math.floor(a.at / 60_000)))) {
      for (const m of await this.#minutes(tenantId, 'attempts', mm * 60_000, mm * 60_000)) {
        for (const { rec } of await this.#readMinute<AttemptRecord>('attempts', tenantId, m, budget)) {
          const k = attemptKey(rec);
          if (wanted.has(k)) wanted.set(k, rec);
        }
      }
    }
    return list.map((a) => wanted.get(attemptKey(a)) ?? a);
  }

  /**
   * Events whose delivery to the endpoint failed for good (dead-lettered) at or after `since` and
   * did not answer later (a retry or resend that delivered): what a recover resends.
   */
  async failedSince(tenantId: string, endpointId: string, from: number): Promise<string[]> {
    // An earlier incarnation's failures are not this endpoint's to recover.
    const since = Math.max(from, await this.#floor(tenantId, endpointId));
    const [failed, later] = await Promise.all([
      this.#redis.zrangebyscore(this.#keys.failedAttempts(tenantId, endpointId), since, '+inf'),
      this.#redis.zrangebyscore(this.#keys.laterAttempts(tenantId, endpointId), since, '+inf'),
    ]);
    const lastFail = new Map<string, number>();
    for (const m of failed) {
      const [i, , , , at, o] = JSON.parse(m) as AttemptMember;
      if (o === 'f') lastFail.set(i, Math.max(at, lastFail.get(i) ?? 0));
    }
    for (const m of later) {
      const [i, , , , at] = JSON.parse(m) as AttemptMember;
      if ((lastFail.get(i) ?? Number.POSITIVE_INFINITY) < at) lastFail.delete(i);
    }
    return [...lastFail.keys()];
  }

  async close(): Promise<void> {
    await this.#kafka.close();
  }
}

function logged(ev: EventRecord): Omit<LoggedEvent, 'status'> {
  return {
    id: ev.i,
    type: ev.y,
    receivedAt: new Date(ev.r).toISOString(),
    loggedAt: new Date(ev.at).toISOString(),
    endpoints: ev.p,
  };
}
