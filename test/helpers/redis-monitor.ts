import { once } from 'node:events';
import { connect, type Socket } from 'node:net';

/**
 * Redis's MONITOR on a plain socket (ioredis's monitor mode trips over replies of its own ready
 * check): `onCommand` gets every command the server runs, lower-case name first, each argument
 * as MONITOR quotes it (`"key"`). Tests count the commands that name their own keys, so other
 * tests running on the same Redis do not disturb them. `stop()` closes the socket. A password in
 * the URL is sent first (inline AUTH: the test Redis's passwords carry no spaces). Resolves once
 * Redis answered MONITOR's `+OK`: a command sent after that is seen (one sent before could be missed).
 */
export async function monitorRedis(
  url: string,
  onCommand: (args: string[]) => void,
): Promise<{ stop: () => void }> {
  const u = new URL(url);
  const socket: Socket = connect(Number(u.port || 6379), u.hostname);
  await once(socket, 'connect');
  if (u.password)
    socket.write(`AUTH ${decodeURIComponent(u.username || 'default')} ${decodeURIComponent(u.password)}\r\n`);
  socket.write('MONITOR\r\n');
  /** `+OK`s still to come: AUTH's, then MONITOR's. */
  let oks = u.password ? 2 : 1;
  const monitoring = Promise.withResolvers<void>();
  let rest = '';
  socket.on('data', (chunk: Buffer) => {
    const lines = (rest + chunk.toString('latin1')).split('\r\n');
    rest = lines.pop() ?? '';
    for (const line of lines) {
      if (line === '+OK' && oks > 0 && --oks === 0) monitoring.resolve();
      const at = line.indexOf('] ');
      if (at < 0) continue;
      const args = line.slice(at + 2).split(' ');
      args[0] = args[0]!.toLowerCase();
      onCommand(args);
    }
  });
  socket.on('error', () => {});
  await monitoring.promise;
  return { stop: () => socket.destroy() };
}
