import cliProgress from 'cli-progress';
import type { Command } from 'commander';
import { registerBenchCommand } from './bench.ts';
import { AdminClient, seg } from './client.ts';
import {
  DELIVERY_FLAG_KEYS,
  type DeliveryFlags,
  deliveryBody,
  deliveryRow,
  withDeliveryFlags,
} from './endpoint-options.ts';
import { printJson, printKv, printTable } from './output.ts';
import { secretInput } from './secret-input.ts';

interface GlobalOpts {
  url?: string;
  token?: string;
  tokenFile?: string;
  json?: boolean;
}

export type Row = Record<string, unknown>;

export function ctx(cmd: Command): { client: AdminClient; json: boolean } {
  const o = cmd.optsWithGlobals<GlobalOpts>();
  const token = secretInput('token', o.token, o.tokenFile);
  return {
    client: new AdminClient({ ...(o.url ? { url: o.url } : {}), ...(token ? { token } : {}) }),
    json: Boolean(o.json),
  };
}

/**
 * A subcommand that takes positional ids, makes one admin API call and prints its answer: JSON with
 * --json, else `print` (a table, key/values or one line).
 */
export function simple<R, O = Record<string, never>>(
  parent: Command,
  name: string,
  args: string[],
  run: (client: AdminClient, ids: string[], o: O, json: boolean) => Promise<R>,
  print: (r: R, ids: string[]) => void,
  description?: string,
): Command {
  const c = parent.command(name);
  for (const a of args) c.argument(`<${a}>`);
  if (description) c.description(description);
  return c.action(async (...params: unknown[]) => {
    const ids = params.slice(0, args.length) as string[];
    const { client, json } = ctx(params.at(-1) as Command);
    const r = await run(client, ids, params.at(-2) as O, json);
    json ? printJson(r) : print(r, ids);
  });
}

/** `/v1/tenants/<tenantId>[/<collection>/<id>...]`, every id URL-escaped. */
export const tenantPath = (tenantId: string, ...rest: string[]) =>
  `/v1/tenants/${seg(tenantId)}${rest.map((part, i) => `/${i % 2 ? seg(part) : part}`).join('')}`;

/** `<group> list <tid>`: one of a tenant's collections as a table. */
const listCommand = (parent: Command, collection: string, cols: string[], row: (r: Row) => Row = (r) => r) =>
  simple(
    parent,
    'list',
    ['tid'],
    (client, [tid]) => client.get<{ data: Row[] }>(tenantPath(tid!, collection)),
    (r) => printTable(r.data.map(row), cols),
  );

/** `<group> get <tid> <id>`: one item of a tenant's collection. */
const getCommand = (parent: Command, collection: string, idArg: string, show: (r: Row) => void) =>
  simple(
    parent,
    'get',
    ['tid', idArg],
    (client, [tid, id]) => client.get<Row>(tenantPath(tid!, collection, id!)),
    show,
  );

/** `delete`: prints `deleted <what> <id>` (JSON `{id, deleted: true}`). */
function deleteCommand(parent: Command, what: string, args: string[], verb = 'delete'): Command {
  const done = verb === 'delete' ? 'deleted' : `${verb}d`;
  return simple(
    parent,
    verb,
    args,
    async (client, ids) => {
      await client.delete(what === 'tenant' ? tenantPath(ids[0]!) : tenantPath(ids[0]!, `${what}s`, ids[1]!));
      return { id: ids.at(-1)!, [done]: true };
    },
    (r) => process.stdout.write(`${done} ${what === 'key' ? '' : `${what} `}${r.id}\n`),
  );
}

/** `pause` / `resume` of a tenant or an endpoint: prints `<what> <id> <status>`. */
function pauseResumeCommands(parent: Command, what: 'tenant' | 'endpoint', args: string[]): void {
  for (const action of ['pause', 'resume'] as const) {
    simple(
      parent,
      action,
      args,
      (client, ids) =>
        client.post<{ id: string; status: string }>(
          what === 'tenant' ? tenantPath(ids[0]!, action) : tenantPath(ids[0]!, 'endpoints', ids[1]!, action),
        ),
      (r) => process.stdout.write(`${what} ${r.id} ${r.status}\n`),
      what === 'endpoint'
        ? undefined
        : action === 'pause'
          ? 'stop deliveries (events are still accepted and kept)'
          : 'deliver again, backlog first',
    );
  }
}

export const int = (name: string) => (v: string) => {
  if (!/^\d+$/.test(v)) throw new Error(`${name} must be a whole number (got "${v}")`);
  return Number(v);
};
const num = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number (got "${v}")`);
  return n;
};
export const csv = (v: string) =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

export interface RateOpts {
  ratePerSecond?: number;
  rateBurst?: number;
}

function rateOf(o: RateOpts): { perSecond: number; burst: number } | undefined {
  if (o.ratePerSecond === undefined && o.rateBurst === undefined) return undefined;
  if (o.ratePerSecond === undefined) throw new Error('--rate-burst needs --rate-per-second');
  return { perSecond: o.ratePerSecond, burst: o.rateBurst ?? Math.max(1, Math.ceil(o.ratePerSecond)) };
}

/** `--event-rate 100` or `--event-rate 100:200` (perSecond[:burst]). */
const eventRate = (v: string) => {
  const m = /^(\d+(?:\.\d+)?)(?::(\d+))?$/.exec(v);
  const perSecond = Number(m?.[1]);
  if (!m || !(perSecond > 0)) throw new Error(`--event-rate must be <perSecond>[:<burst>] (got "${v}")`);
  return { perSecond, burst: m[2] ? Number(m[2]) : Math.max(1, Math.ceil(perSecond)) };
};

/** `--rate-per-second` and `--rate-burst` (`what`: delivery or ingest). */
export const withRate = (cmd: Command, what: string): Command =>
  cmd
    .option('--rate-per-second <n>', `${what} rate limit`, num('--rate-per-second'))
    .option('--rate-burst <n>', `${what} rate burst`, int('--rate-burst'));

/** A request body of the options that were given, plus `rate` when one was. */
export function bodyOf(o: RateOpts & object): Record<string, unknown> {
  const { ratePerSecond: _p, rateBurst: _b, ...rest } = o;
  const body: Record<string, unknown> = { ...rest, rate: rateOf(o) };
  for (const [k, v] of Object.entries(body)) if (v === undefined || v === '') delete body[k];
  return body;
}

const TENANT_COLS = ['id', 'status', 'maxInFlight', 'concurrency', 'rate', 'createdAt'];
const tenantRow = (t: Row) => {
  const l = t.limits as {
    maxInFlight: number;
    concurrency: number;
    rate?: { perSecond: number; burst: number };
  };
  return {
    id: t.id,
    status: t.status,
    maxInFlight: l.maxInFlight,
    concurrency: l.concurrency,
    rate: l.rate ? `${l.rate.perSecond}/s burst ${l.rate.burst}` : 'unlimited',
    createdAt: t.createdAt,
  };
};
const ENDPOINT_COLS = ['id', 'status', 'url', 'eventTypes', 'timeoutMs', 'rate'];
const endpointRow = (e: Row) => ({
  ...e,
  eventTypes: (e.eventTypes as string[]).join(','),
  rate: e.rate ? `${(e.rate as { perSecond: number }).perSecond}/s` : '-',
  status: e.disabledReason ? `${e.status} (${e.disabledReason})` : e.status,
});
export const SOURCE_COLS = ['id', 'kind', 'ingestPath', 'maxBodyBytes', 'allowCidrs'];
export const sourceRow = (s: Row) => ({
  ...s,
  allowCidrs: ((s.allowCidrs as string[] | undefined) ?? ['any']).join(','),
});

/** The operator subcommands: tenants, endpoints, sources, keys, events, dlq. */
export function registerOperatorCommands(program: Command): void {
  program
    .option('--url <url>', 'admin API base URL (default $SPILLWAY_ADMIN_URL or http://127.0.0.1:8081)')
    .option('--token <token>', 'admin token, or - to read it from stdin (default $SPILLWAY_ADMIN_TOKEN)')
    .option('--token-file <path>', 'read the admin token from a file (- = stdin)')
    .option('--json', 'print JSON instead of tables');

  // --- tenants -------------------------------------------------------------------------------
  const tenants = program.command('tenants').description('manage tenants');
  simple(
    tenants,
    'list',
    [],
    (client) => client.get<{ data: Row[] }>('/v1/tenants'),
    (r) => printTable(r.data.map(tenantRow), TENANT_COLS),
    'list tenants',
  );
  withRate(
    tenants
      .command('create')
      .description('create a tenant')
      .argument('[id]', 'tenant id (generated when absent)')
      .option('--max-in-flight <n>', 'credits held in a worker at once', int('--max-in-flight'))
      .option('--concurrency <n>', 'concurrent deliveries per worker', int('--concurrency'))
      .option('--events-per-day <n>', 'events API quota per UTC day', int('--events-per-day'))
      .option('--event-rate <perSecond[:burst]>', 'events API rate', eventRate),
    'delivery',
  ).action(
    async (
      id: string | undefined,
      o: RateOpts & { maxInFlight?: number; concurrency?: number; eventsPerDay?: number; eventRate?: object },
      cmd,
    ) => {
      const { client, json } = ctx(cmd);
      const limits = bodyOf(o);
      const body: RateOpts & { id?: string; limits?: object } = { id };
      if (Object.keys(limits).length) body.limits = limits;
      const t = await client.post<Row>('/v1/tenants', bodyOf(body));
      json ? printJson(t) : printKv(tenantRow(t));
    },
  );
  simple(
    tenants,
    'get',
    ['tid'],
    (client, [tid]) => client.get<Row>(tenantPath(tid!)),
    (t) => printKv(tenantRow(t)),
    'show one tenant',
  );
  deleteCommand(tenants, 'tenant', ['tid']).description(
    'delete a tenant with its endpoints, sources and API keys',
  );
  pauseResumeCommands(tenants, 'tenant', ['tid']);
  tenants
    .command('inspect')
    .argument('<tid>')
    .option('--workers', 'per-worker counters')
    .description('tenant, live stats, endpoints with breaker state, sources')
    .action(async (tid: string, o: { workers?: boolean }, cmd: Command) => {
      const { client, json } = ctx(cmd);
      const t = seg(tid);
      const [tenant, endpoints, sources] = await Promise.all([
        client.get<Row>(`/v1/tenants/${t}`),
        client.get<{ data: Row[] }>(`/v1/tenants/${t}/endpoints`),
        client.get<{ data: Row[] }>(`/v1/tenants/${t}/sources`),
      ]);
      // Stats need live router services; a tenant is still worth inspecting without them.
      let stats: Row | undefined;
      let statsError: string | undefined;
      try {
        stats = await client.get<Row>(`/v1/tenants/${t}/stats${o.workers ? '?detail=workers' : ''}`);
      } catch (err) {
        statsError = (err as Error).message;
      }
      if (json) {
        printJson({
          tenant,
          stats: stats ?? null,
          ...(statsError ? { statsError } : {}),
          endpoints: endpoints.data,
          sources: sources.data,
        });
        return;
      }
      process.stdout.write('Tenant\n');
      printKv(tenantRow(tenant));
      process.stdout.write('\nStats\n');
      if (stats) {
        const c = stats.credits as { used: number; limit: number };
        printKv({
          status: stats.status,
          credits: `${c.used}/${c.limit}`,
          queued: stats.queued,
          inFlight: stats.inFlight,
          spilled: stats.spilled,
          retrying: stats.retrying,
          dlq: stats.dlq,
          delivered: stats.delivered,
          failed: stats.failed,
        });
      } else process.stdout.write(`  unavailable: ${statsError}\n`);
      const perEp = new Map(((stats?.endpoints as Row[] | undefined) ?? []).map((e) => [e.id, e]));
      process.stdout.write('\nEndpoints\n');
      printTable(
        endpoints.data.map((e) => ({
          ...endpointRow(e),
          breaker: perEp.get(e.id)?.breaker ?? '-',
          delivered: perEp.get(e.id)?.delivered ?? '-',
          failed: perEp.get(e.id)?.failed ?? '-',
        })),
        ['id', 'status', 'url', 'eventTypes', 'breaker', 'delivered', 'failed'],
      );
      process.stdout.write('\nSources\n');
      printTable(sources.data.map(sourceRow), SOURCE_COLS);
      if (o.workers && Array.isArray(stats?.workers)) {
        process.stdout.write('\nWorkers\n');
        printTable(
          (stats.workers as Row[]).map((w) => ({
            ...w,
            credits: `${(w.credits as { used: number }).used}/${(w.credits as { limit: number }).limit}`,
          })),
          ['workerId', 'credits', 'queued', 'inFlight', 'spilled', 'retrying', 'delivered', 'failed'],
        );
      }
    });

  // --- tenant API keys -----------------------------------------------------------------------
  const keys = program.command('keys').description('tenant-scoped API keys (events and own stats only)');
  simple<Row, { name?: string }>(
    keys,
    'create',
    ['tid'],
    (client, [tid], o) => client.post<Row>(tenantPath(tid!, 'keys'), o.name ? { name: o.name } : {}),
    (k) => printKv(k),
    'create a key; it is shown only this once',
  ).option('--name <name>', 'a label');
  listCommand(keys, 'keys', ['id', 'name', 'createdAt']);
  deleteCommand(keys, 'key', ['tid', 'keyId'], 'revoke');

  // --- endpoints -----------------------------------------------------------------------------
  const endpoints = program.command('endpoints').description("manage a tenant's delivery endpoints");
  listCommand(endpoints, 'endpoints', ['tenantId', ...ENDPOINT_COLS], endpointRow);
  type EndpointOpts = RateOpts &
    DeliveryFlags & {
      id?: string;
      url?: string;
      eventTypes?: string[];
      secret?: string;
      secretFile?: string;
      timeoutMs?: number;
    };
  /**
   * The body of the flags given: the plain fields and rate as before, the delivery options by their
   * rules; secrets and credentials may come from stdin or a file (./secret-input.ts).
   */
  const endpointBody = (o: EndpointOpts) => {
    const { secretFile, ...plain }: Record<string, unknown> = { ...o };
    for (const k of DELIVERY_FLAG_KEYS) delete plain[k];
    plain.secret = secretInput('secret', o.secret, secretFile as string | undefined);
    const flags: DeliveryFlags = {
      ...o,
      basicAuth: secretInput('basic-auth', o.basicAuth, o.basicAuthFile),
      bearerToken: secretInput('bearer-token', o.bearerToken, o.bearerTokenFile),
    };
    return { ...bodyOf(plain), ...deliveryBody(flags) };
  };
  /** `endpoints create|update`: `own` options, then subscriptions, timeout, rate and the delivery options. */
  const endpointCommand = (
    name: 'create' | 'update',
    second: [string, string?],
    own: (c: Command) => Command,
    description: string,
  ) =>
    withDeliveryFlags(
      withRate(
        own(
          endpoints
            .command(name)
            .argument('<tid>')
            .argument(...second),
        )
          .option('--event-types <list>', 'comma-separated: *, order.*, order.created', csv)
          .option('--timeout-ms <n>', 'delivery timeout', int('--timeout-ms'))
          .description(description),
        'delivery',
      ),
      name === 'update',
    );
  endpointCommand(
    'create',
    ['<url>', 'http(s) URL receiving the webhooks'],
    (c) =>
      c
        .option('--id <id>', 'endpoint id (generated when absent)')
        .option('--secret <whsec>', 'signing secret, or - to read it from stdin (generated when absent)')
        .option('--secret-file <path>', 'read the signing secret from a file (- = stdin)'),
    'create an endpoint (prints its secret)',
  ).action(async (tid: string, url: string, o: EndpointOpts, cmd: Command) => {
    const { client, json } = ctx(cmd);
    const e = await client.post<Row>(tenantPath(tid, 'endpoints'), { url, ...endpointBody(o) });
    json ? printJson(e) : printKv({ ...endpointRow(e), ...deliveryRow(e), secret: e.secret });
  });
  endpointCommand(
    'update',
    ['<eid>'],
    (c) => c.option('--url <url>', 'new URL'),
    "change an endpoint's URL, subscriptions, limits or delivery options",
  ).action(async (tid: string, eid: string, o: EndpointOpts, cmd: Command) => {
    const { client, json } = ctx(cmd);
    const body = endpointBody(o);
    if (Object.keys(body).length === 0) throw new Error('nothing to update: give at least one option');
    const e = await client.patch<Row>(tenantPath(tid, 'endpoints', eid), body);
    json ? printJson(e) : printKv({ ...endpointRow(e), ...deliveryRow(e) });
  });
  getCommand(endpoints, 'endpoints', 'eid', (e) =>
    printKv({ ...endpointRow(e), ...deliveryRow(e), createdAt: e.createdAt }),
  );
  simple(
    endpoints,
    'public-key',
    ['tid', 'eid'],
    (client, [tid, eid]) => client.get<Row>(tenantPath(tid!, 'endpoints', eid!, 'public-key')),
    (k) => process.stdout.write(`${k.publicKey}\n${k.publicKeyPem}`),
    'the Ed25519 public key receivers verify v1a signatures with (whpk_ and PEM)',
  );
  deleteCommand(endpoints, 'endpoint', ['tid', 'eid']);
  pauseResumeCommands(endpoints, 'endpoint', ['tid', 'eid']);

  // --- sources -------------------------------------------------------------------------------
  const sources = program.command('sources').description("manage a tenant's incoming provider webhooks");
  listCommand(sources, 'sources', SOURCE_COLS, sourceRow);
  withRate(
    sources
      .command('create')
      .argument('<tid>')
      .requiredOption('--kind <kind>', 'github, stripe, shopify or standard')
      .option('--secret <secret>', "the provider's signing secret, or - to read it from stdin")
      .option('--secret-file <path>', "read the provider's signing secret from a file (- = stdin)")
      .option('--id <id>', 'source id (generated when absent)')
      .option('--allow-cidrs <list>', 'comma-separated CIDRs allowed to post', csv)
      .option('--max-body-bytes <n>', 'largest body accepted', int('--max-body-bytes')),
    'ingest',
  ).action(
    async (
      tid: string,
      o: RateOpts & {
        kind: string;
        secret?: string;
        secretFile?: string;
        id?: string;
        allowCidrs?: string[];
        maxBodyBytes?: number;
      },
      cmd: Command,
    ) => {
      const { secretFile, ...rest } = o;
      const fields = { ...rest, secret: secretInput('secret', rest.secret, secretFile) };
      if (!fields.secret) throw new Error('sources create needs --secret or --secret-file');
      const { client, json } = ctx(cmd);
      const src = await client.post<Row>(tenantPath(tid, 'sources'), bodyOf(fields));
      json ? printJson(src) : printKv(sourceRow(src));
    },
  );
  getCommand(sources, 'sources', 'sid', (src) => printKv(sourceRow(src)));
  deleteCommand(sources, 'source', ['tid', 'sid']);

  // --- events --------------------------------------------------------------------------------
  const events = program.command('events').description('send an event, or see where one went');
  simple<
    { id: string; duplicate?: boolean },
    { type: string; payload: string; id?: string; orderingKey?: string }
  >(
    events,
    'send',
    ['tid'],
    (client, [tid], o) => {
      let payload: unknown;
      try {
        payload = JSON.parse(o.payload);
      } catch {
        throw new Error('--payload must be JSON');
      }
      return client.post(tenantPath(tid!, 'events'), {
        type: o.type,
        payload,
        ...(o.id ? { id: o.id } : {}),
        ...(o.orderingKey ? { orderingKey: o.orderingKey } : {}),
      });
    },
    (r) => process.stdout.write(`${r.duplicate ? 'duplicate' : 'accepted'} ${r.id}\n`),
  )
    .requiredOption('--type <type>', 'event type, e.g. order.created')
    .option('--payload <json>', 'JSON payload', '{}')
    .option('--id <id>', 'event id (dedup key; generated when absent)')
    .option(
      '--ordering-key <key>',
      'per-key ordered endpoints get events sharing it one at a time, in order',
    );
  getCommand(events, 'events', 'eventId', (e) => {
    printKv({ id: e.id, type: e.type, receivedAt: e.receivedAt });
    printTable(e.deliveries as Row[], ['endpointId', 'status', 'attempts', 'lastStatus', 'lastError']);
  });

  // --- dead letters --------------------------------------------------------------------------
  const dlq = program.command('dlq').description("a tenant's dead letters");
  simple<
    { data: Row[]; next?: string; total: number },
    { endpoint?: string; limit?: number; cursor?: string }
  >(
    dlq,
    'list',
    ['tid'],
    (client, [tid], o) =>
      client.get(`${dlqPath(tid!, o.endpoint, o.limit ?? 100)}${o.cursor ? `&cursor=${seg(o.cursor)}` : ''}`),
    (r) => {
      printTable(r.data, ['eventId', 'endpointId', 'attempts', 'lastError', 'failedAt']);
      process.stdout.write(`${r.total} in the DLQ${r.next ? `; more: --cursor ${r.next}` : ''}\n`);
    },
  )
    .option('--endpoint <eid>', 'only this endpoint')
    .option('--limit <n>', 'at most this many (1-1000)', int('--limit'))
    .option('--cursor <c>', 'the page after this one');
  simple<{ purged: number }, { endpoint?: string }>(
    dlq,
    'purge',
    ['tid'],
    (client, [tid], o) =>
      client.delete(
        `/v1/tenants/${seg(tid!)}/dlq${o.endpoint ? `?endpointId=${seg(o.endpoint)}` : ''}`,
      ) as Promise<{
        purged: number;
      }>,
    (r) => process.stdout.write(`purged ${r.purged}\n`),
    'delete dead letters for good (all, or one endpoint)',
  ).option('--endpoint <eid>', 'only this endpoint');
  simple<{ replayed: number }, { endpoint?: string }>(
    dlq,
    'replay',
    ['tid'],
    async (client, [tid], o, json) => ({
      replayed: await replayWithProgress(client, tid!, o.endpoint, !json),
    }),
    (r) => process.stdout.write(`replayed ${r.replayed}\n`),
    'send dead letters again with a fresh attempt schedule (shows progress)',
  ).option('--endpoint <eid>', 'only this endpoint');

  registerBenchCommand(program, ctx);
}

function dlqPath(tid: string, endpoint: string | undefined, limit: number): string {
  const q = new URLSearchParams({ limit: String(limit), ...(endpoint ? { endpointId: endpoint } : {}) });
  return `/v1/tenants/${seg(tid)}/dlq?${q}`;
}

/**
 * The replay is one request; the bar is driven by polling the DLQ while it runs (entries leave the
 * DLQ as they are handed back to delivery), then set to the count the API reports.
 */
async function replayWithProgress(
  client: AdminClient,
  tid: string,
  endpoint: string | undefined,
  show: boolean,
): Promise<number> {
  // The DLQ's own count (past 1,000 too), not the length of one page.
  const pending = async () => (await client.get<{ total: number }>(dlqPath(tid, endpoint, 1))).total;
  const total = await pending();
  const bar = show
    ? new cliProgress.SingleBar(
        {
          format: 'replaying [{bar}] {value}/{total}',
          noTTYOutput: true,
          notTTYSchedule: 250,
          stream: process.stderr,
        },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  bar?.start(total, 0);
  let done = false;
  const request = client
    .post<{ replayed: number }>(
      `/v1/tenants/${seg(tid)}/dlq/replay`,
      endpoint ? { endpointId: endpoint } : {},
    )
    .finally(() => {
      done = true;
    });
  const poll = (async () => {
    // Bounded: the request itself times out; the poll stops with it.
    while (!done && bar) {
      await new Promise((r) => setTimeout(r, 200));
      if (done) break;
      const left = await pending().catch(() => undefined);
      if (left !== undefined) bar.update(Math.max(0, total - left));
    }
  })();
  try {
    const { replayed } = await request;
    if (bar) {
      bar.setTotal(Math.max(total, replayed));
      bar.update(replayed);
    }
    return replayed;
  } finally {
    await poll;
    bar?.stop();
  }
}
