import cliProgress from 'cli-progress';
import type { Command } from 'commander';
import { registerBenchCommand } from './bench.ts';
import { AdminClient, seg } from './client.ts';
import { printJson, printKv, printTable } from './output.ts';

interface GlobalOpts {
  url?: string;
  token?: string;
  json?: boolean;
}

type Row = Record<string, unknown>;

function ctx(cmd: Command): { client: AdminClient; json: boolean } {
  const o = cmd.optsWithGlobals<GlobalOpts>();
  return {
    client: new AdminClient({ ...(o.url ? { url: o.url } : {}), ...(o.token ? { token: o.token } : {}) }),
    json: Boolean(o.json),
  };
}

/**
 * A subcommand that takes positional ids, makes one admin API call and prints its answer: JSON with
 * --json, else `print` (a table, key/values or one line).
 */
function simple<R, O = Record<string, never>>(
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
const tenantPath = (tenantId: string, ...rest: string[]) =>
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

const int = (name: string) => (v: string) => {
  if (!/^\d+$/.test(v)) throw new Error(`${name} must be a whole number (got "${v}")`);
  return Number(v);
};
const num = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number (got "${v}")`);
  return n;
};
const csv = (v: string) =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

interface RateOpts {
  ratePerSecond?: number;
  rateBurst?: number;
}

function rateOf(o: RateOpts): { perSecond: number; burst: number } | undefined {
  if (o.ratePerSecond === undefined && o.rateBurst === undefined) return undefined;
  if (o.ratePerSecond === undefined) throw new Error('--rate-burst needs --rate-per-second');
  return { perSecond: o.ratePerSecond, burst: o.rateBurst ?? Math.max(1, Math.ceil(o.ratePerSecond)) };
}

/** `--rate-per-second` and `--rate-burst` (`what`: delivery or ingest). */
const withRate = (cmd: Command, what: string): Command =>
  cmd
    .option('--rate-per-second <n>', `${what} rate limit`, num('--rate-per-second'))
    .option('--rate-burst <n>', `${what} rate burst`, int('--rate-burst'));

/** A request body of the options that were given, plus `rate` when one was. */
function bodyOf(o: RateOpts & object): Record<string, unknown> {
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
const SOURCE_COLS = ['id', 'kind', 'ingestPath', 'maxBodyBytes', 'allowCidrs'];
const sourceRow = (s: Row) => ({
  ...s,
  allowCidrs: ((s.allowCidrs as string[] | undefined) ?? ['any']).join(','),
});

/** The operator subcommands: tenants, endpoints, sources, keys, events, dlq. */
export function registerOperatorCommands(program: Command): void {
  program
    .option('--url <url>', 'admin API base URL (default $SPILLWAY_ADMIN_URL or http://127.0.0.1:8081)')
    .option('--token <token>', 'admin token (default $SPILLWAY_ADMIN_TOKEN)')
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
      .option('--concurrency <n>', 'concurrent deliveries per worker', int('--concurrency')),
    'delivery',
  ).action(
    async (id: string | undefined, o: RateOpts & { maxInFlight?: number; concurrency?: number }, cmd) => {
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
  withRate(
    endpoints
      .command('create')
      .argument('<tid>')
      .argument('<url>', 'http(s) URL receiving the webhooks')
      .option('--id <id>', 'endpoint id (generated when absent)')
      .option('--event-types <list>', 'comma-separated: *, order.*, order.created', csv)
      .option('--secret <whsec>', 'signing secret (generated when absent)')
      .option('--timeout-ms <n>', 'delivery timeout', int('--timeout-ms'))
      .description('create an endpoint (prints its secret)'),
    'delivery',
  ).action(
    async (
      tid: string,
      url: string,
      o: RateOpts & { id?: string; eventTypes?: string[]; secret?: string; timeoutMs?: number },
      cmd: Command,
    ) => {
      const { client, json } = ctx(cmd);
      const e = await client.post<Row>(tenantPath(tid, 'endpoints'), { url, ...bodyOf(o) });
      json ? printJson(e) : printKv({ ...endpointRow(e), secret: e.secret });
    },
  );
  getCommand(endpoints, 'endpoints', 'eid', (e) =>
    printKv({ ...endpointRow(e), secret: e.secret, createdAt: e.createdAt }),
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
      .requiredOption('--secret <secret>', "the provider's signing secret")
      .option('--id <id>', 'source id (generated when absent)')
      .option('--allow-cidrs <list>', 'comma-separated CIDRs allowed to post', csv)
      .option('--max-body-bytes <n>', 'largest body accepted', int('--max-body-bytes')),
    'ingest',
  ).action(
    async (
      tid: string,
      o: RateOpts & {
        kind: string;
        secret: string;
        id?: string;
        allowCidrs?: string[];
        maxBodyBytes?: number;
      },
      cmd: Command,
    ) => {
      const { client, json } = ctx(cmd);
      const src = await client.post<Row>(tenantPath(tid, 'sources'), bodyOf(o));
      json ? printJson(src) : printKv(sourceRow(src));
    },
  );
  getCommand(sources, 'sources', 'sid', (src) => printKv(sourceRow(src)));
  deleteCommand(sources, 'source', ['tid', 'sid']);

  // --- events --------------------------------------------------------------------------------
  const events = program.command('events').description('send an event, or see where one went');
  simple<{ id: string; duplicate?: boolean }, { type: string; payload: string; id?: string }>(
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
      });
    },
    (r) => process.stdout.write(`${r.duplicate ? 'duplicate' : 'accepted'} ${r.id}\n`),
  )
    .requiredOption('--type <type>', 'event type, e.g. order.created')
    .option('--payload <json>', 'JSON payload', '{}')
    .option('--id <id>', 'event id (dedup key; generated when absent)');
  getCommand(events, 'events', 'eventId', (e) => {
    printKv({ id: e.id, type: e.type, receivedAt: e.receivedAt });
    printTable(e.deliveries as Row[], ['endpointId', 'status', 'attempts', 'lastStatus', 'lastError']);
  });

  // --- dead letters --------------------------------------------------------------------------
  const dlq = program.command('dlq').description("a tenant's dead letters");
  simple<{ data: Row[] }, { endpoint?: string; limit?: number }>(
    dlq,
    'list',
    ['tid'],
    (client, [tid], o) => client.get(dlqPath(tid!, o.endpoint, o.limit ?? 100)),
    (r) => printTable(r.data, ['eventId', 'endpointId', 'attempts', 'lastError', 'failedAt']),
  )
    .option('--endpoint <eid>', 'only this endpoint')
    .option('--limit <n>', 'at most this many (1-1000)', int('--limit'));
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
  const pending = async () =>
    (await client.get<{ data: unknown[] }>(dlqPath(tid, endpoint, 1000))).data.length;
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
