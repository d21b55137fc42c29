import cliProgress from 'cli-progress';
import type { Command } from 'commander';
import { type AdminClient, seg } from './client.ts';
// The shared ctx: --token, --token - and --token-file (secret-input.ts), like every other command.
import { ctx } from './commands.ts';
import { printJson, printKv, printTable } from './output.ts';

/**
 * The history commands: the event log, attempts, resend, recover, operations, test send
 * (docs/operations.md, "History").
 */
type Row = Record<string, unknown>;
interface Page {
  data: Row[];
  next?: string;
}
interface Operation extends Row {
  id: string;
  state: string;
  total: number;
  enqueued: number;
  delivered: number;
  failed: number;
}

const t = (tid: string) => `/v1/tenants/${seg(tid)}`;

/** `--since 2h` (that long ago) or an ISO-8601 time, as the API takes it. */
export function timeArg(v: string): string {
  const ago = /^(\d+)(m|h|d)$/.exec(v);
  if (ago) {
    const unit = { m: 60_000, h: 3_600_000, d: 86_400_000 }[ago[2] as 'm' | 'h' | 'd'];
    return new Date(Date.now() - Number(ago[1]) * unit).toISOString();
  }
  if (Number.isNaN(Date.parse(v))) throw new Error(`"${v}" is not a time: use ISO-8601 or 30m, 2h, 3d (ago)`);
  return new Date(Date.parse(v)).toISOString();
}

const query = (o: Record<string, string | number | undefined>) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) if (v !== undefined) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
};

/** Prints a page (or every page with --all). */
async function pages(
  client: AdminClient,
  json: boolean,
  path: (cursor?: string) => string,
  cols: string[],
  all: boolean,
): Promise<void> {
  const rows: Row[] = [];
  let cursor: string | undefined;
  let last: Page;
  do {
    last = await client.get<Page>(path(cursor));
    rows.push(...last.data);
    cursor = last.next;
  } while (all && cursor);
  if (json) printJson(all ? { data: rows } : last);
  else {
    printTable(rows, cols);
    if (!all && last.next) process.stdout.write(`more: --cursor ${last.next}\n`);
  }
}

/** Polls an operation until everything it enqueued has ended, with a progress bar on stderr. */
export async function followOperation(
  client: AdminClient,
  tid: string,
  op: Operation,
  show: boolean,
  timeoutMs = 600_000,
): Promise<Operation> {
  const bar = show
    ? new cliProgress.SingleBar(
        {
          format: `${op.kind ?? 'operation'} [{bar}] {value}/{total} delivered {delivered} failed {failed} ({state})`,
          noTTYOutput: true,
          notTTYSchedule: 500,
          stream: process.stderr,
        },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  bar?.start(Math.max(op.total, 1), 0, { delivered: 0, failed: 0, state: op.state });
  const until = Date.now() + timeoutMs;
  let cur = op;
  try {
    for (;;) {
      const ended = cur.delivered + cur.failed;
      bar?.setTotal(Math.max(cur.total, 1));
      bar?.update(ended, { delivered: cur.delivered, failed: cur.failed, state: cur.state });
      if (cur.state === 'failed' || (cur.state === 'enqueued' && ended >= cur.total) || Date.now() > until)
        return cur;
      await new Promise((r) => setTimeout(r, 300));
      cur = await client.get<Operation>(`${t(tid)}/operations/${seg(op.id)}`);
    }
  } finally {
    bar?.stop();
  }
}

/** Starts a resend or recover and follows it to the end (progress bar on stderr unless --json). */
async function startOperation(cmd: Command, tid: string, path: string, body: object): Promise<void> {
  const { client, json } = ctx(cmd);
  const op = await client.post<Operation>(path, body);
  const end = await followOperation(client, tid, op, !json);
  json
    ? printJson(end)
    : printKv({ operation: end.id, total: end.total, delivered: end.delivered, failed: end.failed });
}

const ATTEMPT_COLS = [
  'at',
  'eventId',
  'endpointId',
  'attempt',
  'status',
  'httpStatus',
  'error',
  'latencyMs',
  'response',
];
const attemptRow = (a: Row) => ({
  ...a,
  response: typeof a.response === 'string' ? a.response.slice(0, 60).replace(/\s+/g, ' ') : undefined,
});

/** `<group> <name> <tid> <item>`: a command about one thing of a tenant. */
const tenantItemCommand = (group: Command, name: string, item: string) =>
  group.command(name).argument('<tid>').argument(item);

export function registerHistoryCommands(program: Command): void {
  const events = program.commands.find((c) => c.name() === 'events') ?? program.command('events');
  const endpoints = program.commands.find((c) => c.name() === 'endpoints') ?? program.command('endpoints');

  events
    .command('list')
    .argument('<tid>')
    .description('the event log, newest first')
    .option('--since <time>', 'ISO-8601, or 30m / 2h / 3d ago', timeArg)
    .option('--until <time>', 'ISO-8601, or 30m / 2h / 3d ago', timeArg)
    .option('--type <type>', 'only this event type')
    .option('--status <status>', 'pending, delivered, retrying or failed')
    .option('--limit <n>', 'per page (1-100)', '50')
    .option('--cursor <c>', 'the page after this one')
    .option('--all', 'every page')
    .action(async (tid: string, o: Record<string, string | undefined> & { all?: boolean }, cmd: Command) => {
      const { client, json } = ctx(cmd);
      await pages(
        client,
        json,
        (cursor) =>
          `${t(tid)}/events${query({ since: o.since, until: o.until, type: o.type, status: o.status, limit: o.limit, cursor: cursor ?? o.cursor })}`,
        ['id', 'type', 'status', 'receivedAt', 'endpoints'],
        Boolean(o.all),
      );
    });

  tenantItemCommand(events, 'attempts', '<eventId>')
    .description("every attempt of one event, newest first (status, latency, the endpoint's answer)")
    .option('--all', 'every page')
    .action(async (tid: string, eid: string, o: { all?: boolean }, cmd: Command) => {
      const { client, json } = ctx(cmd);
      const rows: Row[] = [];
      let cursor: string | undefined;
      do {
        const p = await client.get<Page>(
          `${t(tid)}/events/${seg(eid)}/attempts${query({ cursor, limit: 100 })}`,
        );
        rows.push(...p.data);
        cursor = p.next;
      } while (o.all && cursor);
      json ? printJson({ data: rows }) : printTable(rows.map(attemptRow), ATTEMPT_COLS);
    });

  tenantItemCommand(events, 'resend', '<eventId>')
    .description('send an event again, to one endpoint or to every endpoint it went to (shows progress)')
    .option('--endpoint <eid>', 'only this endpoint')
    .option('--request-id <id>', 'idempotency key: the same id never resends twice')
    .action((tid: string, eid: string, o: { endpoint?: string; requestId?: string }, cmd: Command) =>
      startOperation(cmd, tid, `${t(tid)}/events/${seg(eid)}/resend`, {
        ...(o.endpoint ? { endpointId: o.endpoint } : {}),
        ...(o.requestId ? { requestId: o.requestId } : {}),
      }),
    );

  tenantItemCommand(endpoints, 'attempts', '<eid>')
    .description("an endpoint's attempts, newest first")
    .option('--status <status>', 'delivered or failed')
    .option('--since <time>', 'ISO-8601, or 30m / 2h / 3d ago', timeArg)
    .option('--until <time>', 'ISO-8601, or 30m / 2h / 3d ago', timeArg)
    .option('--limit <n>', 'per page (1-100)', '50')
    .option('--cursor <c>', 'the page after this one')
    .option('--all', 'every page')
    .action(
      async (
        tid: string,
        eid: string,
        o: Record<string, string | undefined> & { all?: boolean },
        cmd: Command,
      ) => {
        const { client, json } = ctx(cmd);
        await pages(
          client,
          json,
          (cursor) =>
            `${t(tid)}/endpoints/${seg(eid)}/attempts${query({ status: o.status, since: o.since, until: o.until, limit: o.limit, cursor: cursor ?? o.cursor })}`,
          ATTEMPT_COLS,
          Boolean(o.all),
        );
      },
    );

  tenantItemCommand(endpoints, 'recover', '<eid>')
    .requiredOption(
      '--since <time>',
      'resend what failed for good since then: ISO-8601, or 30m / 2h / 3d ago',
      timeArg,
    )
    .option('--request-id <id>', 'idempotency key: the same id never recovers twice')
    .description('resend every event that failed for this endpoint since a time (shows progress)')
    .action((tid: string, eid: string, o: { since: string; requestId?: string }, cmd: Command) =>
      startOperation(cmd, tid, `${t(tid)}/endpoints/${seg(eid)}/recover`, {
        since: o.since,
        ...(o.requestId ? { requestId: o.requestId } : {}),
      }),
    );

  tenantItemCommand(endpoints, 'test', '<eid>')
    .description('send a signed example event now and show what the endpoint answered')
    .action(async (tid: string, eid: string, _o: unknown, cmd: Command) => {
      const { client, json } = ctx(cmd);
      const a = await client.post<Row>(`${t(tid)}/endpoints/${seg(eid)}/test`);
      json ? printJson(a) : printKv(a);
    });

  const operations = program.command('operations').description('resend and recover operations');
  tenantItemCommand(operations, 'get', '<operationId>')
    .option('--follow', 'poll until it is done (progress bar)')
    .action(async (tid: string, id: string, o: { follow?: boolean }, cmd: Command) => {
      const { client, json } = ctx(cmd);
      let op = await client.get<Operation>(`${t(tid)}/operations/${seg(id)}`);
      if (o.follow) op = await followOperation(client, tid, op, !json);
      json ? printJson(op) : printKv(op);
    });
}
