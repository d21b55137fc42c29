import { isSpillwayError, VERSION } from '@spillway/shared';
import { Command, Option } from 'commander';
import { installHandover, SUPERVISOR_ENV, signalReady } from '../roles/handover.ts';
import { ROLES, type Role, start } from '../roles/start.ts';
import { registerOperatorCommands } from './commands.ts';
import { registerSecretCommands } from './commands-secrets.ts';
import { registerEdgeCommands } from './edge.ts';
import { registerHistoryCommands } from './history.ts';

/** The `spillway` command. Operator subcommands talk to the admin API (SPILLWAY_ADMIN_URL). */
export function buildProgram(): Command {
  const program = new Command('spillway').version(VERSION).description('Multi-tenant webhook fan-out router');

  program
    .command('start')
    .description('run Spillway roles in this process')
    .addOption(new Option('--role <role>', 'which role to run').choices(ROLES).default('all'))
    // Set by a predecessor handing over on SIGUSR2 (roles/handover.ts), never by hand.
    .addOption(new Option('--listen-fds <ingest,admin>', 'inherited listening sockets').hideHelp())
    .addOption(new Option('--ready-fd <n>', 'where to say ready').hideHelp())
    .action(async (opts: { role: Role; listenFds?: string; readyFd?: string }) => {
      const inherited = opts.listenFds?.split(',').map(Number);
      const s = await start(opts.role, process.env, {
        ...(inherited && { listenFds: { ingest: inherited[0], admin: inherited[1] } }),
      });
      const shown = (h: string) => (h === '0.0.0.0' || h === '::' ? '127.0.0.1' : h);
      const host = shown(s.rt.config.host);
      // One write: whoever waits for "running" on a pipe sees the whole banner with it.
      const banner = [
        `spillway ${opts.role} running (pid ${process.pid})`,
        `  admin:  http://${shown(s.rt.config.adminHost)}:${s.adminPort}  (/v1, /healthz, /readyz, /metrics)`,
      ];
      if (opts.role === 'all' || opts.role === 'admin')
        banner.push(`  console: http://${host}:${s.adminPort}/console  (sign in with the admin token)`);
      if (s.ingestPort !== undefined)
        banner.push(
          `  ingest: http${s.rt.config.tls ? 's' : ''}://${host}:${s.ingestPort}/ingest/<sourceId>${s.rt.config.tls ? '  (TLS with h2/http1.1, plain HTTP/1.1 and h2c on the same port)' : ''}`,
        );
      for (const note of s.notes) banner.push(`  ${note}`);
      process.stdout.write(`${banner.join('\n')}\n`);
      const stop = (sig: string) => {
        s.rt.logger.info({ sig }, 'shutting down');
        s.close().then(
          () => process.exit(0),
          () => process.exit(1),
        );
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      // A worker of an ingest supervisor (SPILLWAY_INGEST_WORKERS): one nobody restarts or stops
      // should not outlive it. Checked by pid, not by parentage: after a handover the worker is the
      // supervisor's grandchild, re-parented away.
      const supervisor = Number(process.env[SUPERVISOR_ENV]);
      if (supervisor > 0)
        setInterval(() => {
          try {
            process.kill(supervisor, 0);
          } catch {
            stop('supervisor gone');
          }
        }, 1000).unref();
      // SIGUSR2: hand the listening sockets to a successor and exit once it serves (docs/operations.md).
      installHandover({
        started: s,
        role: opts.role,
        logger: s.rt.logger,
        onHandedOver: () => process.exit(0),
      });
      if (opts.readyFd !== undefined) signalReady(Number(opts.readyFd));
    });

  registerOperatorCommands(program);
  registerHistoryCommands(program);
  registerSecretCommands(program);
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
