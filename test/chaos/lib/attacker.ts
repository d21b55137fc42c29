/**
 * The attacker of the slow-loris scenario, forked as its own process so that its sockets and
 * multi-MiB uploads do not slow the event loop that measures the real traffic's latency.
 *   node attacker.ts <port> <path> <swarm> <durationMs>   → sends its figures over IPC and exits.
 */
import { connect, type Socket } from 'node:net';
import { Readable } from 'node:stream';
import { Agent, request } from 'undici';
import { sleep } from '../../helpers/wait.ts';

const MiB = 1024 * 1024;
/**
 * The attacker's own loopback address: ingest limits refused requests per client address (issue 15),
 * and the real traffic it is measured against comes from 127.0.0.1, as a provider and an attacker
 * come from different addresses.
 */
const FROM = '127.0.0.2';

export interface AttackResult {
  bursts: number;
  statuses: Record<string, number>;
  swarmOpen: number;
  swarmClosed: number;
  /** The attacker's own CPU over the attack (user + system), ms. */
  cpuMs: number;
}

/** Opens `n` connections that send a request line and then one header line per second, forever. */
function swarm(port: number, path: string, n: number) {
  const sockets: Socket[] = [];
  let closedByServer = 0;
  let stopping = false;
  for (let i = 0; i < n; i++) {
    const s = connect({ port, host: '127.0.0.1', localAddress: FROM });
    s.on('error', () => {});
    s.on('close', () => {
      if (!stopping) closedByServer++;
    });
    s.once('connect', () =>
      s.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n`),
    );
    sockets.push(s);
  }
  let k = 0;
  const t = setInterval(() => {
    k++;
    for (const s of sockets) if (!s.destroyed && s.writable) s.write(`X-Trickle-${k}: ${'a'.repeat(8)}\r\n`);
  }, 1000);
  return {
    closedByServer: () => closedByServer,
    open: () => sockets.filter((s) => !s.destroyed).length,
    stop() {
      stopping = true;
      clearInterval(t);
      for (const s of sockets) s.destroy();
    },
  };
}

/** One oversized request: a declared `Content-Length` past the cap, or a chunked body of `bytes`. */
async function oversized(agent: Agent, url: string, bytes: number, chunked: boolean): Promise<string> {
  let sent = 0;
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  const body = Readable.from(
    (async function* () {
      while (sent < bytes) {
        sent += chunk.length;
        yield chunk;
      }
    })(),
  );
  try {
    const res = await request(url, {
      method: 'POST',
      dispatcher: agent,
      body,
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': `big-${Math.random()}`,
        // Well-formed but wrong: a malformed header is refused (401) before the body is read, and
        // this has to reach the body cap (413) instead.
        'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
        ...(chunked ? {} : { 'content-length': String(bytes) }),
      },
    });
    await res.body.dump();
    return String(res.statusCode);
  } catch (err) {
    return `error:${(err as { code?: string }).code ?? 'other'}`;
  }
}

export async function attack(
  port: number,
  path: string,
  n: number,
  durationMs: number,
): Promise<AttackResult> {
  const agent = new Agent({
    connections: 64,
    headersTimeout: 20_000,
    bodyTimeout: 20_000,
    connect: { localAddress: FROM },
  });
  const cpu0 = process.cpuUsage();
  const sw = swarm(port, path, n);
  const statuses: Record<string, number> = {};
  let bursts = 0;
  try {
    await sleep(1500);
    const url = `http://127.0.0.1:${port}${path}`;
    const end = Date.now() + durationMs;
    for (let i = 0; i < 1000 && Date.now() < end; i++) {
      // A burst: 20 declared 8 MiB bodies and 10 chunked 4 MiB bodies at once.
      const burst = [
        ...Array.from({ length: 20 }, () => oversized(agent, url, 8 * MiB, false)),
        ...Array.from({ length: 10 }, () => oversized(agent, url, 4 * MiB, true)),
      ];
      const answers = await Promise.all(burst);
      // Keyed by kind: a declared-length body and a chunked one hit different guards.
      answers.forEach((s, k) => {
        const key = `${k < 20 ? 'cl' : 'chunked'}-${s}`;
        statuses[key] = (statuses[key] ?? 0) + 1;
      });
      bursts++;
      await sleep(1000);
    }
    const cpu = process.cpuUsage(cpu0);
    return {
      bursts,
      statuses,
      swarmOpen: sw.open(),
      swarmClosed: sw.closedByServer(),
      cpuMs: (cpu.user + cpu.system) / 1000,
    };
  } finally {
    sw.stop();
    await agent.close().catch(() => {});
  }
}

if (import.meta.main) {
  const [port, path, n, ms] = process.argv.slice(2);
  const r = await attack(Number(port), path!, Number(n), Number(ms));
  process.send?.(r, () => process.exit(0));
}
