import type { Command } from 'commander';

/**
 * The delivery options of `endpoints create` and `endpoints update` (the admin API's retry,
 * headers, auth, signatures, ed25519PrivateKey, batch and ordering; docs/delivery.md). Each flag
 * maps onto one field of the request body; `--clear` sends null for the fields it names (update).
 */
export interface DeliveryFlags {
  retrySchedule?: string[];
  maxAttempts?: number;
  permanentStatuses?: number[];
  header?: string[];
  basicAuth?: string;
  basicAuthFile?: string;
  bearerToken?: string;
  bearerTokenFile?: string;
  signatures?: string[];
  ed25519PrivateKey?: string;
  batchMaxEvents?: number;
  batchMaxBytes?: number;
  batchLingerMs?: number;
  ordering?: string;
  clear?: string[];
}

const CLEARABLE = ['retry', 'headers', 'auth', 'batch'] as const;

const list = (v: string) =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
const whole = (name: string) => (v: string) => {
  if (!/^\d+$/.test(v)) throw new Error(`${name} must be a whole number (got "${v}")`);
  return Number(v);
};
const statuses = (v: string) =>
  list(v).map((s) => {
    if (!/^\d{3}$/.test(s))
      throw new Error(`--permanent-statuses takes HTTP statuses like 400,404 (got "${s}")`);
    return Number(s);
  });
const collect = (v: string, prev: string[] = []) => [...prev, v];

export function withDeliveryFlags(cmd: Command, update: boolean): Command {
  cmd
    .option('--retry-schedule <list>', 'delays between attempts, e.g. 10s,1m,10m', list)
    .option('--max-attempts <n>', 'attempts in all before the DLQ', whole('--max-attempts'))
    .option(
      '--permanent-statuses <list>',
      'statuses dead-lettered at once, e.g. 400,401,403,404,422',
      statuses,
    )
    .option('--header <name:value>', 'a static header sent with every delivery (repeatable)', collect)
    .option('--basic-auth <user:password>', 'send authorization: Basic with every delivery (- = stdin)')
    .option('--basic-auth-file <path>', 'read user:password from a file (- = stdin)')
    .option('--bearer-token <token>', 'send authorization: Bearer with every delivery (- = stdin)')
    .option('--bearer-token-file <path>', 'read the bearer token from a file (- = stdin)')
    .option('--signatures <list>', 'v1 (HMAC, default), v1a (Ed25519) or v1,v1a', list)
    .option('--ed25519-private-key <whsk>', 'import an Ed25519 key instead of having one generated')
    .option(
      '--batch-max-events <n>',
      'send up to n events per request (a JSON array)',
      whole('--batch-max-events'),
    )
    .option('--batch-max-bytes <n>', 'bytes a batch stays under', whole('--batch-max-bytes'))
    .option('--batch-linger-ms <n>', 'how long a partial batch waits for more', whole('--batch-linger-ms'))
    .option('--ordering <mode>', 'none or per-key (events sharing an orderingKey one at a time, in order)');
  if (update) cmd.option('--clear <list>', `remove options: ${CLEARABLE.join(', ')}`, list);
  return cmd;
}

/** The request body fields the flags ask for (nothing for flags not given). */
export function deliveryBody(o: DeliveryFlags): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (o.retrySchedule || o.maxAttempts !== undefined || o.permanentStatuses) {
    body.retry = {
      ...(o.retrySchedule ? { schedule: o.retrySchedule } : {}),
      ...(o.maxAttempts === undefined ? {} : { maxAttempts: o.maxAttempts }),
      ...(o.permanentStatuses ? { permanentStatuses: o.permanentStatuses } : {}),
    };
  }
  if (o.header) {
    const headers: Record<string, string> = {};
    for (const h of o.header) {
      const i = h.indexOf(':');
      if (i <= 0) throw new Error(`--header takes name:value (got "${h}")`);
      headers[h.slice(0, i).trim()] = h.slice(i + 1).trim();
    }
    body.headers = headers;
  }
  if (o.basicAuth !== undefined && o.bearerToken !== undefined)
    throw new Error('give either --basic-auth or --bearer-token, not both');
  if (o.basicAuth !== undefined) {
    const i = o.basicAuth.indexOf(':');
    if (i <= 0) throw new Error('--basic-auth takes user:password');
    body.auth = { type: 'basic', username: o.basicAuth.slice(0, i), password: o.basicAuth.slice(i + 1) };
  }
  if (o.bearerToken !== undefined) body.auth = { type: 'bearer', token: o.bearerToken };
  if (o.signatures) body.signatures = o.signatures;
  if (o.ed25519PrivateKey) body.ed25519PrivateKey = o.ed25519PrivateKey;
  if (o.batchMaxEvents !== undefined || o.batchMaxBytes !== undefined || o.batchLingerMs !== undefined) {
    if (o.batchMaxEvents === undefined)
      throw new Error('--batch-max-bytes and --batch-linger-ms need --batch-max-events');
    body.batch = {
      maxEvents: o.batchMaxEvents,
      ...(o.batchMaxBytes === undefined ? {} : { maxBytes: o.batchMaxBytes }),
      ...(o.batchLingerMs === undefined ? {} : { lingerMs: o.batchLingerMs }),
    };
  }
  if (o.ordering) body.ordering = o.ordering;
  for (const f of o.clear ?? []) {
    if (!(CLEARABLE as readonly string[]).includes(f))
      throw new Error(`--clear takes ${CLEARABLE.join(', ')} (got "${f}")`);
    if (f in body) throw new Error(`--clear ${f} contradicts the ${f} flags given`);
    body[f] = null;
  }
  return body;
}

/** Flag names as commander stores them, to keep them out of the other options' body. */
export const DELIVERY_FLAG_KEYS: readonly (keyof DeliveryFlags)[] = [
  'retrySchedule',
  'maxAttempts',
  'permanentStatuses',
  'header',
  'basicAuth',
  'basicAuthFile',
  'bearerToken',
  'bearerTokenFile',
  'signatures',
  'ed25519PrivateKey',
  'batchMaxEvents',
  'batchMaxBytes',
  'batchLingerMs',
  'ordering',
  'clear',
];

/** One line per option an endpoint has (for `endpoints get`). */
export function deliveryRow(e: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const retry = e.retry as
    | { schedule?: string[]; maxAttempts?: number; permanentStatuses?: number[] }
    | undefined;
  if (retry)
    out.retry = [
      retry.schedule ? `schedule ${retry.schedule.join(',') || '(none)'}` : undefined,
      retry.maxAttempts === undefined ? undefined : `max ${retry.maxAttempts} attempts`,
      retry.permanentStatuses ? `permanent ${retry.permanentStatuses.join(',')}` : undefined,
    ]
      .filter(Boolean)
      .join('; ');
  if (e.headers) out.headers = Object.keys(e.headers as object).join(', ');
  const auth = e.auth as { type: string; username?: string } | undefined;
  if (auth) out.auth = auth.type === 'basic' ? `basic (${auth.username})` : 'bearer';
  out.signatures = ((e.signatures as string[] | undefined) ?? ['v1']).join(',');
  const ed = e.ed25519 as { publicKey: string } | undefined;
  if (ed) out.publicKey = ed.publicKey;
  const batch = e.batch as { maxEvents: number; maxBytes: number; lingerMs: number } | undefined;
  if (batch) out.batch = `${batch.maxEvents} events, ${batch.maxBytes} bytes, linger ${batch.lingerMs}ms`;
  if (e.ordering) out.ordering = e.ordering;
  return out;
}
