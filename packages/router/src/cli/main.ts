import { isSpillwayError, VERSION } from '@spillway/shared';
import { Command, Option } from 'commander';
import { ROLES, type Role, start } from '../roles/start.ts';
import { registerOperatorCommands } from './commands.ts';
import { registerEdgeCommands } from './edge.ts';

/** The `spillway` command. Operator subcommands talk to the admin API (SPILLWAY_ADMIN_URL). */
export function buildProgram(): Command {
  const program = new Command('spillway').version(VERSION).description('Multi-tenant webhook fan-out router');

  program
    .command('start')
    .description('run Spillway roles in this process')
    .addOption(new Option('--role <role>', 'which role to run').choices(ROLES).default('all'))
    .action(async (opts: { role: Role }) => {
      const s = await start(opts.role);
      const host = s.rt.config.host === '0.0.0.0' ? '127.0.0.1' : s.rt.config.host;
      process.stdout.write(
        `spillway ${opts.role} running\n  admin:  http://${host}:${s.adminPort}  (/v1, /healthz, /readyz, /metrics)\n`,
      );
      if (opts.role === 'all' || opts.role === 'admin')
        process.stdout.write(
          `  console: http://${host}:${s.adminPort}/console  (sign in with the admin token)\n`,
        );
      if (s.ingestPort !== undefined)
        process.stdout.write(`  ingest: http://${host}:${s.ingestPort}/ingest/<sourceId>\n`);
      const stop = (sig: string) => {
        s.rt.logger.info({ sig }, 'shutting down');
        s.close().then(
          () => process.exit(0),
          () => process.exit(1),
        );
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });

  registerOperatorCommands(program);
  registerEdgeCommands(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    // Configuration and startup failures: one line naming the variable, non-zero exit.
    const message = isSpillwayError(err) ? err.message : (err as Error).message;
    process.stderr.write(`spillway: ${message}\n`);
    process.exit(1);
  }
}

if (import.meta.main) await main(process.argv);
