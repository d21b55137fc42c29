import { generateWhsec, parseDuration } from '@spillway/shared';
import type { Command } from 'commander';
import {
  bodyOf,
  csv,
  ctx,
  int,
  type RateOpts,
  type Row,
  SOURCE_COLS,
  simple,
  sourceRow,
  tenantPath,
  withRate,
} from './commands.ts';
import { printJson, printKv, printTable } from './output.ts';
import { secretInput } from './secret-input.ts';

interface SecretView {
  secret: string;
  previousSecrets: { secret: string; expiresAt: string }[];
}

/** `--secret <value|->` and `--secret-file <path|->` on `cmd`. */
const withSecret = (cmd: Command, what: string): Command =>
  cmd
    .option('--secret <secret>', `${what}, or - to read it from stdin`)
    .option('--secret-file <path>', `read ${what} from a file (- = stdin)`);

/** `--overlap 24h`: how long the replaced secret stays live, in whole seconds. */
function overlapSeconds(v: string): number {
  const ms = v === '0' ? 0 : parseDuration(v);
  if (ms === undefined || ms < 0)
    throw new Error(`--overlap must be a duration like 30m, 24h or 0 (got "${v}")`);
  return Math.round(ms / 1000);
}

const printSecret = (r: SecretView) => {
  process.stdout.write(`${r.secret}\n`);
  for (const p of r.previousSecrets)
    process.stderr.write(`previous (live until ${p.expiresAt}): ${p.secret}\n`);
};

/**
 * Commands that read or change secrets, and the key rotation: `endpoints secret|rotate-secret`,
 * `sources secret|patch|rotate-secret`, `secrets reencrypt`. Registered after the operator
 * commands (./commands.ts), onto their `endpoints` and `sources` groups.
 */
export function registerSecretCommands(program: Command): void {
  const group = (name: string) => {
    const g = program.commands.find((c) => c.name() === name);
    if (!g) throw new Error(`the ${name} command group is missing`);
    return g;
  };
  const endpoints = group('endpoints');
  const sources = group('sources');

  // --- endpoints -----------------------------------------------------------------------------
  simple<SecretView>(
    endpoints,
    'secret',
    ['tid', 'eid'],
    (client, [tid, eid]) => client.get(tenantPath(tid!, 'endpoints', eid!, 'secret')),
    printSecret,
    "print an endpoint's signing secret (previous ones still signing on stderr)",
  );
  withSecret(
    endpoints
      .command('rotate-secret')
      .argument('<tid>')
      .argument('<eid>')
      .description(
        'give an endpoint a new signing secret; the old one keeps signing for 24 h (prints the new one)',
      ),
    'the new secret (whsec_...; generated when absent)',
  ).action(async (tid: string, eid: string, o: { secret?: string; secretFile?: string }, cmd: Command) => {
    const secret = secretInput('secret', o.secret, o.secretFile) ?? generateWhsec(32);
    const { client, json } = ctx(cmd);
    const ep = await client.patch<Row>(tenantPath(tid, 'endpoints', eid), { secret });
    if (json) printJson({ ...ep, secret });
    else printSecret({ secret, previousSecrets: [] });
  });

  // --- sources -------------------------------------------------------------------------------
  simple<SecretView>(
    sources,
    'secret',
    ['tid', 'sid'],
    (client, [tid, sid]) => client.get(tenantPath(tid!, 'sources', sid!, 'secret')),
    printSecret,
    "print a source's verification secret (previous ones still verifying on stderr)",
  );
  withRate(
    sources
      .command('patch')
      .argument('<tid>')
      .argument('<sid>')
      .option('--allow-cidrs <list>', 'comma-separated CIDRs allowed to post', csv)
      .option('--any-address', 'remove the CIDR allowlist')
      .option('--max-body-bytes <n>', 'largest body accepted', int('--max-body-bytes'))
      .option('--remove-rate', 'remove the ingest rate limit')
      .description("change a source's allowlist, body cap or ingest rate"),
    'ingest',
  ).action(
    async (
      tid: string,
      sid: string,
      o: RateOpts & {
        allowCidrs?: string[];
        anyAddress?: boolean;
        maxBodyBytes?: number;
        removeRate?: boolean;
      },
      cmd: Command,
    ) => {
      const { anyAddress, removeRate, ...rest } = o;
      if (anyAddress && rest.allowCidrs) throw new Error('give --allow-cidrs or --any-address, not both');
      if (removeRate && (rest.ratePerSecond !== undefined || rest.rateBurst !== undefined))
        throw new Error('give --rate-per-second or --remove-rate, not both');
      const body = bodyOf(rest);
      if (anyAddress) body.allowCidrs = null;
      if (removeRate) body.rate = null;
      if (Object.keys(body).length === 0) throw new Error('nothing to change: give at least one option');
      const { client, json } = ctx(cmd);
      const src = await client.patch<Row>(tenantPath(tid, 'sources', sid), body);
      json ? printJson(src) : printKv(sourceRow(src));
    },
  );
  withSecret(
    sources
      .command('rotate-secret')
      .argument('<tid>')
      .argument('<sid>')
      .option(
        '--overlap <duration>',
        'how long the old secret keeps verifying (0 = stop now)',
        overlapSeconds,
      )
      .description("switch a source to the provider's new secret; the old one keeps verifying meanwhile"),
    "the provider's new secret",
  ).action(
    async (
      tid: string,
      sid: string,
      o: { secret?: string; secretFile?: string; overlap?: number },
      cmd: Command,
    ) => {
      const secret = secretInput('secret', o.secret, o.secretFile);
      if (!secret) throw new Error('sources rotate-secret needs --secret or --secret-file');
      const { client, json } = ctx(cmd);
      const src = await client.patch<Row>(tenantPath(tid, 'sources', sid), {
        secret,
        ...(o.overlap === undefined ? {} : { secretOverlapSeconds: o.overlap }),
      });
      if (json) return printJson(src);
      printTable([sourceRow(src)], SOURCE_COLS);
      const prev = (src.previousSecrets as { expiresAt: string }[] | undefined) ?? [];
      for (const p of prev) process.stdout.write(`previous secret verifies until ${p.expiresAt}\n`);
    },
  );

  // --- secrets -------------------------------------------------------------------------------
  const secrets = program.command('secrets').description('stored secrets and SPILLWAY_SECRET_KEY rotation');
  secrets
    .command('reencrypt')
    .description(
      're-seal every stored secret under the current SPILLWAY_SECRET_KEY (after a key rotation; exits 1 if any could not be opened)',
    )
    .action(async (_o: unknown, cmd: Command) => {
      const { client, json } = ctx(cmd);
      const r = await client.post<{
        keyId: string;
        endpoints: { scanned: number; reencrypted: number };
        sources: { scanned: number; reencrypted: number };
        failed: { kind: string; tenantId: string; id: string; message: string }[];
      }>('/v1/secrets/reencrypt');
      if (json) printJson(r);
      else {
        process.stdout.write(
          `re-encrypted under key ${r.keyId}: ${r.endpoints.reencrypted} of ${r.endpoints.scanned} endpoints, ${r.sources.reencrypted} of ${r.sources.scanned} sources\n`,
        );
        if (r.failed.length) printTable(r.failed, ['kind', 'tenantId', 'id', 'message']);
      }
      if (r.failed.length) process.exitCode = 1;
    });
}
