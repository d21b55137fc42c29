/**
 * The allowlist that keeps itself current (docs/edge.md, "The refresher"). Provider ranges are
 * fetched from URLs (GitHub's `/meta`, Stripe's webhook IP list) or read from files on an
 * interval, joined with every source's `allowCidrs`, and the union is swapped into the XDP
 * allowlist as a new generation in one step (the loader's `ranges`: fill the inactive generation,
 * flip the active byte). A range list that cannot be fetched or parsed keeps its last good copy;
 * a swap that fails keeps the generation in force. Nothing is half-applied.
 */
import { readFile } from 'node:fs/promises';
import { getOrCreateMetric, registry } from '@spillway/shared';
import ipaddr from 'ipaddr.js';
import { Counter, Gauge, type Registry } from 'prom-client';

/** Largest range document read (GitHub's full `/meta` is ~200 KiB). */
const MAX_BYTES = 4 * 1024 * 1024;
const FETCH_TIMEOUT_MS = 15_000;

/**
 * CIDRs of one range document: GitHub meta (`hooks` only: the other lists are GitHub's own
 * services, not where webhooks come from), Stripe (`WEBHOOKS`), a JSON array of strings, or lines
 * of CIDRs and addresses with `#` comments. Addresses become /32 or /128; IPv4-mapped IPv6 become
 * IPv4. Throws on a document of no known shape or any entry that is not an address (the whole
 * document is refused: a half-read list would drop senders).
 */
export function parseRanges(text: string, where = 'ranges'): string[] {
  let entries: unknown[];
  const trimmed = text.trim();
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    let doc: unknown;
    try {
      doc = JSON.parse(trimmed);
    } catch (err) {
      throw new Error(`${where}: not valid JSON (${(err as Error).message})`);
    }
    if (Array.isArray(doc)) entries = doc;
    else if (doc && typeof doc === 'object' && Array.isArray((doc as { hooks?: unknown }).hooks))
      entries = (doc as { hooks: unknown[] }).hooks;
    else if (doc && typeof doc === 'object' && Array.isArray((doc as { WEBHOOKS?: unknown }).WEBHOOKS))
      entries = (doc as { WEBHOOKS: unknown[] }).WEBHOOKS;
    else throw new Error(`${where}: JSON without a "hooks" or "WEBHOOKS" list`);
  } else {
    entries = text
      .split('\n')
      .map((l) => l.replace(/#.*/, '').trim())
      .filter(Boolean);
  }
  return entries.map((e) => normalise(e, where));
}

function normalise(entry: unknown, where: string): string {
  if (typeof entry !== 'string') throw new Error(`${where}: entry ${JSON.stringify(entry)} is not a string`);
  try {
    if (entry.includes('/')) {
      const [addr, bits] = ipaddr.parseCIDR(entry);
      if (addr.kind() === 'ipv6' && (addr as ipaddr.IPv6).isIPv4MappedAddress() && bits >= 96)
        return `${(addr as ipaddr.IPv6).toIPv4Address().toString()}/${bits - 96}`;
      return `${addr.toString()}/${bits}`;
    }
    const addr = ipaddr.process(entry);
    return `${addr.toString()}/${addr.kind() === 'ipv4' ? 32 : 128}`;
  } catch {
    throw new Error(`${where}: "${entry}" is not an IP address or CIDR`);
  }
}

/** Reads a range document from an http(s) URL (status 200, bounded size and time) or a file. */
export async function readRangeDocument(where: string): Promise<string> {
  if (!/^https?:\/\//.test(where)) return readFile(where, 'utf8');
  const res = await fetch(where, {
    signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
    headers: { accept: 'application/json, text/plain' },
  });
  if (res.status !== 200) {
    await res.body?.cancel();
    throw new Error(`${where}: HTTP ${res.status}`);
  }
  const declared = Number(res.headers.get('content-length') ?? 0);
  if (declared > MAX_BYTES) {
    await res.body?.cancel();
    throw new Error(`${where}: ${declared} bytes, more than ${MAX_BYTES}`);
  }
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of res.body ?? []) {
    n += (chunk as Uint8Array).length;
    if (n > MAX_BYTES) throw new Error(`${where}: more than ${MAX_BYTES} bytes`);
    chunks.push(Buffer.from(chunk as Uint8Array));
  }
  return Buffer.concat(chunks).toString('utf8');
}

export interface Generation {
  /** 1, 2, ... one per set swapped in by this refresher. */
  readonly number: number;
  readonly cidrs: readonly string[];
  /** Unix ms of the swap. */
  readonly at: number;
}

export interface RefreshResult {
  /** `ok`: every list read; `stale`: some kept their last good copy; `failed`: nothing swapped. */
  outcome: 'ok' | 'stale' | 'failed';
  /** True when a new generation went in (false also when the set did not change). */
  swapped: boolean;
  generation: Generation | undefined;
  errors: string[];
}

export interface AllowlistRefresherOptions {
  /** Range documents: http(s) URLs or file paths. */
  ranges: readonly string[];
  /** How often to refresh. */
  intervalMs: number;
  /** Every source's allowCidrs (read at each refresh). */
  sourceCidrs: () => Promise<readonly string[]>;
  /**
   * Swaps the set in, atomically: readers see the old set or the new, never a mix (the XDP maps
   * through the loader). Rejects or returns `{ ok: false }` when it could not; the old set stays.
   */
  apply: (cidrs: readonly string[]) => Promise<{ ok: boolean; reason?: string }>;
  /** Errors are reported here (one line each). */
  onError?: (message: string) => void;
  registry?: Registry;
}

export interface AllowlistRefresher {
  /**
   * Reads every list now and swaps in the union if it changed. Refreshes never overlap: asked
   * during one, it runs once more after it (and resolves with that one's result).
   */
  refresh(): Promise<RefreshResult>;
  /** Refreshes now, then every intervalMs. */
  start(): void;
  stop(): void;
  readonly current: Generation | undefined;
}

interface RefresherMetrics {
  ranges: Gauge<'origin'>;
  generation: Gauge;
  lastRefresh: Gauge;
  refreshes: Counter<'outcome'>;
}

function metricsOn(reg: Registry): RefresherMetrics {
  const get = <T>(name: string, make: () => T): T => getOrCreateMetric(reg, name, make);
  const registers = [reg];
  return {
    ranges: get(
      'spillway_edge_allowlist_ranges',
      () =>
        new Gauge({
          name: 'spillway_edge_allowlist_ranges',
          help: 'CIDRs in the XDP allowlist generation in force, by origin (provider lists, sources allowCidrs, total)',
          labelNames: ['origin'] as const,
          registers,
        }),
    ),
    generation: get(
      'spillway_edge_allowlist_generation',
      () =>
        new Gauge({
          name: 'spillway_edge_allowlist_generation',
          help: 'Allowlist generations this process has swapped in',
          registers,
        }),
    ),
    lastRefresh: get(
      'spillway_edge_allowlist_last_refresh_timestamp_seconds',
      () =>
        new Gauge({
          name: 'spillway_edge_allowlist_last_refresh_timestamp_seconds',
          help: 'When every range list was last read and the allowlist is current (unix seconds)',
          registers,
        }),
    ),
    refreshes: get(
      'spillway_edge_allowlist_refreshes_total',
      () =>
        new Counter({
          name: 'spillway_edge_allowlist_refreshes_total',
          help: 'Allowlist refreshes: ok, stale (a list kept its last good copy), failed (nothing swapped)',
          labelNames: ['outcome'] as const,
          registers,
        }),
    ),
  };
}

export function createAllowlistRefresher(opts: AllowlistRefresherOptions): AllowlistRefresher {
  const m = metricsOn(opts.registry ?? registry);
  /** The last good parse of each list. */
  const lastGood = new Map<string, string[]>();
  let current: Generation | undefined;
  let running: Promise<RefreshResult> | undefined;
  let timer: NodeJS.Timeout | undefined;
  const report = (msg: string) => opts.onError?.(msg);

  const once = async (): Promise<RefreshResult> => {
    const errors: string[] = [];
    for (const where of opts.ranges) {
      try {
        lastGood.set(where, parseRanges(await readRangeDocument(where), where));
      } catch (err) {
        const kept = lastGood.has(where) ? 'keeping its last good copy' : 'no copy of it yet';
        errors.push(`${(err as Error).message}; ${kept}`);
      }
    }
    let fromSources: string[] = [];
    try {
      fromSources = (await opts.sourceCidrs()).map((c) => normalise(c, 'allowCidrs'));
    } catch (err) {
      errors.push(`sources' allowCidrs: ${(err as Error).message}`);
    }
    // A list never read yet: swapping without it would drop that provider's senders (enforce).
    const missing = opts.ranges.filter((w) => !lastGood.has(w));
    if (missing.length > 0) {
      for (const e of errors) report(`allowlist: ${e}`);
      report(`allowlist: not swapped until ${missing.join(', ')} has been read once`);
      m.refreshes.inc({ outcome: 'failed' });
      return { outcome: 'failed', swapped: false, generation: current, errors };
    }
    const provider = new Set([...lastGood.values()].flat());
    const union = [...new Set([...provider, ...fromSources])].sort();
    const stale = errors.length > 0;
    const unchanged =
      current !== undefined &&
      current.cidrs.length === union.length &&
      current.cidrs.every((c, i) => c === union[i]);
    let swapped = false;
    if (!unchanged) {
      let applied: { ok: boolean; reason?: string };
      try {
        applied = await opts.apply(union);
      } catch (err) {
        applied = { ok: false, reason: (err as Error).message };
      }
      if (!applied.ok) {
        errors.push(`swap failed: ${applied.reason ?? 'unknown'}; generation ${current?.number ?? 0} stays`);
        for (const e of errors) report(`allowlist: ${e}`);
        m.refreshes.inc({ outcome: 'failed' });
        return { outcome: 'failed', swapped: false, generation: current, errors };
      }
      current = { number: (current?.number ?? 0) + 1, cidrs: union, at: Date.now() };
      swapped = true;
      m.generation.set(current.number);
      m.ranges.set({ origin: 'provider' }, provider.size);
      m.ranges.set({ origin: 'sources' }, new Set(fromSources).size);
      m.ranges.set({ origin: 'total' }, union.length);
    }
    for (const e of errors) report(`allowlist: ${e}`);
    if (!stale) m.lastRefresh.set(Date.now() / 1000);
    m.refreshes.inc({ outcome: stale ? 'stale' : 'ok' });
    return { outcome: stale ? 'stale' : 'ok', swapped, generation: current, errors };
  };

  // One refresh at a time; asked again meanwhile (a source changed), one more runs right after.
  let again = false;
  const refresh = (): Promise<RefreshResult> => {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      let r: RefreshResult;
      do {
        again = false;
        r = await once();
      } while (again);
      return r;
    })().finally(() => {
      running = undefined;
    });
    return running;
  };

  return {
    refresh,
    start() {
      if (timer) return;
      void refresh();
      timer = setInterval(() => void refresh(), opts.intervalMs);
      timer.unref();
    },
    stop() {
      clearInterval(timer);
      timer = undefined;
    },
    get current() {
      return current;
    },
  };
}
