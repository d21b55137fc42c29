import { hash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  errors,
  type Intake,
  isSpillwayError,
  type Keys,
  type Logger,
  liveSecrets,
  type RateGate,
  type Source,
  type SourceDirectory,
  type SpillwayEvent,
  type SubmitResult,
} from '@spillway/shared';
import ipaddr from 'ipaddr.js';
import { BodyBudget, SharedBodyBudget } from './budget.ts';
import { errorResponse } from './errors.ts';
import { ingestMetrics } from './metrics.ts';
import { PreAuthLimiter, type PreAuthRate } from './preauth.ts';
import type {
  BodySink,
  HeadDecision,
  IngestHandler,
  IngestResponse,
  RequestHead,
  RouteSpec,
} from './server.ts';
import { prepareVerifier, type Verifier } from './verify/index.ts';

export interface PipelineOptions {
  /** Sources by id (the router's ConfigCache: cached, dropped on change). */
  sources: SourceDirectory;
  /** The router's durable, deduplicating intake: resolves only once the event is durable. */
  intake: Intake;
  /**
   * Per-source ingest rate (429 past it), spent only by verified requests. Absent: sources' `rate`
   * is not enforced.
   */
  limiter?: RateGate;
  /**
   * Refused requests (bad signature, unknown source, ...) one client address may make, per process;
   * past it the address gets 429 before anything is looked up. Default 20/s, burst 100.
   */
  preAuthRate?: PreAuthRate;
  keys: Keys;
  logger: Logger;
  /** Request-body bytes this process holds at once; past it new requests get 503 + Retry-After. */
  bodyBudgetBytes: number;
  /** Most of the budget one source's requests may hold at once. Default: half the budget. */
  sourceBudgetBytes?: number;
  /**
   * Most of the budget one client address (IPv6: its /64) may hold at once. Default: an eighth of
   * the budget.
   */
  clientBudgetBytes?: number;
  /**
   * A body that has not averaged this many bytes per second once `minBodyRateGraceMs` have passed
   * loses what it holds and is answered 408 (it would otherwise hold budget until the request
   * timeout). Default 16 KiB/s; 0 turns the check off.
   */
  minBodyBytesPerSecond?: number;
  /** Time a body has before the minimum rate applies. Default 2000 ms. */
  minBodyRateGraceMs?: number;
  /** Unix milliseconds (tests move time to check timestamp tolerances). */
  clock?: () => number;
  /** Retry-After (seconds) sent with 503 when the intake or the body budget cannot take more. */
  retryAfterSeconds?: number;
}

export interface IngestPipeline extends IngestHandler {
  /** Body bytes held by requests in flight (returns to 0 when all are answered or aborted). */
  readonly inFlightBodyBytes: number;
  /**
   * The paths this pipeline serves for `sources`, each with its source's maxBodyBytes and the kind
   * and live secrets that verify it (at most two: a backend verifies no more): the table for
   * `IngestServer.setRoutes`, so a backend can refuse an oversize body before `begin` and HMAC the
   * body on its own thread. Only the route format lives here; ids the route could not match are
   * left out.
   */
  routeCaps(sources: Iterable<Source>): Map<string, RouteSpec>;
}

const ROUTE = /^\/ingest\/([^/?#]{1,200})\/?$/;
const SOURCE_ID = /^[A-Za-z0-9._~-]{1,128}$/;
/** Metric label for requests that did not name a known source (never the raw path: unbounded). */
const NO_SOURCE = '-';

type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];
const parsedCidrs = new WeakMap<Source, Cidr[]>();

/** An IPv4 address in dotted-decimal form as the kernel writes it (no leading zeros). */
const PLAIN_IPV4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

/** The key a client's share is counted under: its address, or for IPv6 its /64. */
function clientKey(remote: string): string {
  // What ipaddr would give back for it, without parsing it into an object on every request.
  if (PLAIN_IPV4.test(remote)) return remote;
  try {
    const addr = ipaddr.process(remote);
    if (addr.kind() === 'ipv4') return addr.toString();
    const parts = (addr as ipaddr.IPv6).parts;
    return `${parts
      .slice(0, 4)
      .map((p) => p.toString(16))
      .join(':')}::/64`;
  } catch {
    return remote;
  }
}

/** The same keys, in any order. */
function sameKeys(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((k) => b.includes(k));
}

/** A verifier's refusal as a catalog error: 401 unauthorized, 400 invalid_body. */
function verifyError(status: 400 | 401, message: string) {
  return status === 401 ? errors.unauthorized(message) : errors.invalidBody(message);
}

/**
 * The shared ingest pipeline (docs/ingest.md). Everything that can be decided from the request line
 * and headers is decided in `begin`, before a body byte is read, cheapest first: route, method,
 * source, allowCidrs, Content-Length, signature header and timestamp, source rate (one Redis call),
 * body budget. Only then does the body stream, through the HMAC, into memory reserved from the
 * budget; the event goes to the intake and the answer waits until it is durable.
 */
export function createPipeline(opts: PipelineOptions): IngestPipeline {
  const { sources, intake, limiter, keys, logger } = opts;
  const clock = opts.clock ?? Date.now;
  const retryAfter = opts.retryAfterSeconds ?? 1;
  const m = ingestMetrics();
  const budget = new BodyBudget(opts.bodyBudgetBytes, (d) => m.inflightBodyBytes.inc(d));
  const shared = new SharedBodyBudget(
    budget,
    opts.sourceBudgetBytes ?? Math.ceil(opts.bodyBudgetBytes / 2),
    opts.clientBudgetBytes ?? Math.ceil(opts.bodyBudgetBytes / 8),
  );
  const minRate = opts.minBodyBytesPerSecond ?? 16 * 1024;
  const rateGraceMs = opts.minBodyRateGraceMs ?? 2000;
  /** Bodies still arriving, for the minimum-rate sweep. */
  const reading = new Set<{ started: number; received: number; tooSlow(): void }>();
  if (minRate > 0) {
    const sweep = setInterval(
      () => {
        const now = performance.now();
        for (const r of reading) {
          const elapsed = now - r.started;
          if (elapsed > rateGraceMs && r.received < (minRate * elapsed) / 1000) r.tooSlow();
        }
      },
      Math.max(50, Math.min(1000, rateGraceMs / 2)),
    );
    sweep.unref();
  }

  const preAuth = new PreAuthLimiter(opts.preAuthRate ?? { perSecond: 20, burst: 100 });
  /** Answers that say the client sent something we refuse: they spend its pre-auth allowance. */
  const REFUSED = new Set([
    'not_found',
    'method_not_allowed',
    'forbidden',
    'too_large',
    'unauthorized',
    'invalid',
    'too_slow',
  ]);

  /** `kind`: the source's kind, or NO_SOURCE; never its id (metric labels are not secret). */
  const answerFor = (kind: string, outcome: string, r: IngestResponse, client?: string): IngestResponse => {
    m.requests.inc({ kind, outcome });
    if (client !== undefined && REFUSED.has(outcome)) preAuth.spend(client);
    return r;
  };

  function allowed(src: Source, remote: string): boolean {
    let cidrs = parsedCidrs.get(src);
    if (!cidrs) {
      cidrs = [];
      for (const c of src.allowCidrs ?? []) {
        try {
          cidrs.push(ipaddr.parseCIDR(c));
        } catch {
          logger.warn({ source: src.id, cidr: c }, 'ignoring an invalid allowCidrs entry');
        }
      }
      parsedCidrs.set(src, cidrs);
    }
    let addr: ipaddr.IPv4 | ipaddr.IPv6;
    try {
      // process() turns an IPv4-mapped IPv6 address (::ffff:1.2.3.4, what a dual-stack listener
      // reports for IPv4 clients) into the IPv4 address, so IPv4 CIDRs match it.
      addr = ipaddr.process(remote);
    } catch {
      return false;
    }
    return cidrs.some(([range, bits]) => range.kind() === addr.kind() && addr.match(range, bits));
  }

  async function begin(head: RequestHead): Promise<HeadDecision> {
    const client = clientKey(head.remoteAddress);
    const reject = (kind: string, outcome: string, r: IngestResponse): HeadDecision => ({
      reject: answerFor(kind, outcome, r, client),
    });
    // First stage, before any lookup: an address that keeps sending what we refuse waits.
    const wait = preAuth.retryAfterMs(client);
    if (wait > 0) {
      return reject(
        NO_SOURCE,
        'pre_auth_limited',
        errorResponse(
          errors.rateLimited('too many refused requests from this address', {
            retryAfter: Math.max(1, Math.ceil(wait / 1000)),
          }),
        ),
      );
    }
    const route = ROUTE.exec(head.url.split('?', 1)[0] ?? '');
    let sourceId: string | undefined;
    try {
      sourceId = route ? decodeURIComponent(route[1]!) : undefined;
    } catch {
      sourceId = undefined;
    }
    if (!sourceId || !SOURCE_ID.test(sourceId))
      return reject(NO_SOURCE, 'not_found', errorResponse(errors.notFound('no such route')));
    if (head.method !== 'POST') {
      return reject(
        NO_SOURCE,
        'method_not_allowed',
        errorResponse(errors.methodNotAllowed('use POST'), { headers: { allow: 'POST' } }),
      );
    }

    let source: Source | undefined;
    try {
      source = await sources.get(sourceId);
    } catch (err) {
      logger.warn({ err, source: sourceId }, 'source lookup failed');
      return reject(
        NO_SOURCE,
        'unavailable',
        errorResponse(errors.unavailable('configuration store unavailable', { retryAfter })),
      );
    }
    if (!source)
      return reject(NO_SOURCE, 'not_found', errorResponse(errors.notFound(`unknown source ${sourceId}`)));

    if (source.allowCidrs && source.allowCidrs.length > 0 && !allowed(source, head.remoteAddress)) {
      return reject(
        source.kind,
        'forbidden',
        errorResponse(errors.forbidden('client address not allowed for this source')),
      );
    }
    const max = source.maxBodyBytes;
    if (head.contentLength !== undefined && head.contentLength > max) {
      return reject(
        source.kind,
        'too_large',
        errorResponse(errors.tooLarge(`body over ${max} bytes`), { close: true }),
      );
    }

    const now = clock();
    const secrets = liveSecrets(source, now);
    const prepared = prepareVerifier(source, head.headers, now, secrets);
    if (!prepared.ok) {
      m.verifyFailures.inc({ kind: source.kind, reason: prepared.reason });
      return reject(
        source.kind,
        'unauthorized',
        errorResponse(verifyError(prepared.status, prepared.message)),
      );
    }

    // Nothing is reserved yet: bytes are taken from the budget as they arrive (a declared length
    // costs nothing until it is sent; issue 15: 64 header-only requests declaring 1 MiB each held
    // the whole budget). A budget with no room at all is refused before the body is read.
    if (budget.used >= budget.limit) {
      return reject(
        source.kind,
        'over_budget',
        errorResponse(errors.unavailable('ingest is holding too many body bytes', { retryAfter })),
      );
    }
    // The backend HMACs the body itself (io_uring) under exactly the keys this request is held to:
    // then its verdict stands in for ours. Under any other keys (a table not yet refreshed after a
    // rotation, an overlap that just ended) we verify as if it had not.
    const native =
      head.nativeMac !== undefined &&
      head.nativeMac.kind === source.kind &&
      sameKeys(head.nativeMac.secrets, secrets);
    return { accept: createSink(source, head, prepared.verifier, client, native) };
  }

  /** The source's rate, spent only once the request is verified. null: admitted. */
  async function sourceRate(source: Source): Promise<IngestResponse | null> {
    if (!source.rate || !limiter) return null;
    try {
      const took = await limiter.tryTake(keys.rate(source.tenantId, `src:${source.id}`), source.rate);
      if (took.ok) return null;
      const secs = Math.max(1, Math.ceil(took.retryAfterMs / 1000));
      return errorResponse(errors.rateLimited('source over its ingest rate', { retryAfter: secs }));
    } catch (err) {
      // Fail open: the limiter shares Redis with the intake, which decides durability and answers
      // 503 itself if Redis is really gone; refusing here would only add a second failure mode.
      logger.warn({ err, source: source.id }, 'source rate check failed; admitting');
      return null;
    }
  }

  /**
   * What a GitHub or Shopify event is deduplicated on: its body, per source. Their id header is
   * not covered by the signature, so a replayer could send a seen body under any id
   * (docs/ingest.md, "Replays"); the provider's own redelivery repeats the body too. Other kinds
   * sign their id (in the body or the signed string): they are deduplicated on it.
   */
  function dedupKeyOf(source: Source, body: Buffer): string | undefined {
    if (source.kind !== 'github' && source.kind !== 'shopify') return undefined;
    return `b:${source.id}:${hash('sha256', body, 'base64url')}`;
  }

  function createSink(
    source: Source,
    head: RequestHead,
    verifier: Verifier,
    client: string,
    native: boolean,
  ): BodySink {
    const sid = source.id;
    const max = source.maxBodyBytes;
    let reserved = 0;
    let received = 0;
    let state: 'reading' | 'too_large' | 'over_budget' | 'too_slow' | 'done' = 'reading';
    let chunks: Buffer[] = [];

    const releaseAll = () => {
      shared.release(sid, client, reserved);
      reserved = 0;
      chunks = [];
      reading.delete(progress);
    };
    const progress = {
      started: performance.now(),
      received: 0,
      tooSlow() {
        if (state !== 'reading') return;
        state = 'too_slow';
        releaseAll();
      },
    };
    reading.add(progress);

    return {
      maxBodyBytes: max,
      write(chunk) {
        if (state !== 'reading') return;
        received += chunk.length;
        if (received > max) {
          // The backend stops at maxBodyBytes; this guards a backend that does not.
          state = 'too_large';
          releaseAll();
          return;
        }
        if (!shared.tryReserve(sid, client, chunk.length)) {
          state = 'over_budget';
          releaseAll();
          return;
        }
        reserved += chunk.length;
        progress.received = received;
        chunks.push(chunk); // the backend's to give (BodySink.write)
      },
      async end(macOk) {
        const answer = (_sid: string, outcome: string, r: IngestResponse) =>
          answerFor(source.kind, outcome, r, client);
        m.bodyBytes.inc({ kind: source.kind }, received);
        const was = state;
        state = 'done';
        reading.delete(progress);
        if (was === 'too_slow')
          return answer(
            sid,
            'too_slow',
            errorResponse(errors.requestTimeout('body arrived too slowly'), { close: true }),
          );
        if (was === 'too_large')
          return answer(
            sid,
            'too_large',
            errorResponse(errors.tooLarge(`body over ${max} bytes`), { close: true }),
          );
        if (was === 'over_budget') {
          return answer(
            sid,
            'over_budget',
            errorResponse(errors.unavailable('ingest is holding too many body bytes', { retryAfter }), {
              close: true,
            }),
          );
        }
        if (was === 'done')
          return answer(sid, 'aborted', errorResponse(errors.invalidBody('request already finished')));
        try {
          const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received);
          const ring = native && macOk !== undefined;
          m.verified.inc({ kind: source.kind, where: ring ? 'ring' : 'js' });
          // The JS HMAC runs here, over the whole body, not per chunk as it arrives: a body that
          // ends over its cap, over the budget or too slowly is never hashed (oversized junk was
          // hashed up to the cap on the event loop, docs/benchmarks/ingest-profile.md).
          if (!native) verifier.update(body);
          const v = ring
            ? verifier.finish(body, macOk)
            : native
              ? jsVerify(source, head, body)
              : verifier.finish(body);
          if (!v.ok) {
            m.verifyFailures.inc({ kind: source.kind, reason: v.reason });
            return answer(
              sid,
              v.status === 401 ? 'unauthorized' : 'invalid',
              errorResponse(verifyError(v.status, v.message)),
            );
          }
          // The source's rate is asked by the intake once the event is known not to be a
          // duplicate (a replay or a redelivery spends none of it); it adds the event only if
          // the rate says go.
          let limited: Promise<IngestResponse | null> | undefined;
          const gate = () => {
            limited = sourceRate(source);
            return limited.then((r) => r === null);
          };
          const event: SpillwayEvent = {
            tenantId: source.tenantId,
            id: v.id,
            type: v.type,
            receivedAt: clock(),
            contentType: head.headers['content-type'] || 'application/json',
            body,
            sourceId: sid,
          };
          const t0 = performance.now();
          let result: SubmitResult | undefined;
          let err: unknown;
          try {
            result = await intake.submit(event, { gate, dedupKey: dedupKeyOf(source, body) });
          } catch (e) {
            err = e;
          }
          const refused = limited && (await limited);
          if (refused) return answer(sid, 'rate_limited', refused);
          if (result?.withdrawn) {
            // Withdrawn with another submit of the same id whose own check said no (Intake.submit).
            return answer(
              sid,
              'unavailable',
              errorResponse(
                errors.unavailable('the same event id is being accepted by another request', { retryAfter }),
              ),
            );
          }
          if (result === undefined) {
            m.enqueueSeconds.observe({ outcome: 'error' }, (performance.now() - t0) / 1000);
            if (isSpillwayError(err) && err.status >= 400 && err.status < 500) {
              return answer(sid, 'invalid', errorResponse(err));
            }
            // Durable storage could not take it: never a 2xx. Anything unexpected is answered the
            // same way so the provider retries, and logged loudly.
            if (isSpillwayError(err, 'SPW_ERR_UNAVAILABLE'))
              logger.warn({ err, source: sid }, 'intake unavailable');
            else logger.error({ err, source: sid }, 'intake failed');
            const ra = isSpillwayError(err) && err.retryAfter !== undefined ? err.retryAfter : retryAfter;
            return answer(
              sid,
              'unavailable',
              errorResponse(
                errors.unavailable('durable storage cannot take the event now', {
                  retryAfter: ra,
                  cause: err,
                }),
              ),
            );
          }
          m.enqueueSeconds.observe(
            { outcome: result.duplicate ? 'duplicate' : 'accepted' },
            (performance.now() - t0) / 1000,
          );
          if (result.duplicate)
            return answer(sid, 'duplicate', { status: 200, body: { id: result.id, duplicate: true } });
          return answer(sid, 'accepted', { status: 202, body: { id: result.id } });
        } finally {
          releaseAll();
        }
      },
      abort(reason) {
        if (state === 'done') return;
        state = 'done';
        releaseAll();
        m.requests.inc({ kind: source.kind, outcome: 'aborted' });
        logger.debug({ source: sid, reason }, 'ingest request aborted');
      },
    };
  }

  /** A body the backend said it would verify but handed up without a verdict: verified here, whole. */
  function jsVerify(source: Source, head: RequestHead, body: Buffer) {
    const p = prepareVerifier(source, head.headers, clock());
    if (!p.ok) return p;
    p.verifier.update(body);
    return p.verifier.finish(body);
  }

  function routeCaps(all: Iterable<Source>): Map<string, RouteSpec> {
    const caps = new Map<string, RouteSpec>();
    const now = clock();
    for (const src of all) {
      if (!SOURCE_ID.test(src.id)) continue;
      const secrets = liveSecrets(src, now);
      const spec: RouteSpec = {
        maxBodyBytes: src.maxBodyBytes,
        ...(secrets.length <= 2 ? { verify: { kind: src.kind, secrets } } : {}),
      };
      // Both spellings ROUTE accepts; a percent-encoded id misses the table and is capped by the sink.
      caps.set(`/ingest/${src.id}`, spec);
      caps.set(`/ingest/${src.id}/`, spec);
    }
    return caps;
  }

  return {
    begin,
    routeCaps,
    get inFlightBodyBytes() {
      return budget.used;
    },
  };
}
