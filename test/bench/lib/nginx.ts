/** The ceiling peer: nginx answering `return 202` from a generated config in a temp dir. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../helpers/ports.ts';
import { waitFor } from '../../helpers/wait.ts';
import { type Proc, run } from './procs.ts';

export interface Nginx {
  port: number;
  proc: Proc;
  close(): Promise<void>;
}

export interface NginxTls {
  certPath: string;
  keyPath: string;
  /** The CA that signed the certificate (to check that nginx answers). */
  ca: string;
}

/** One POST to nginx, over TLS when `ca` is given; resolves with the status or 0. */
function probe(port: number, ca?: string): Promise<number> {
  if (!ca)
    return fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: 'x' }).then(
      (r) => r.status,
      () => 0,
    );
  return new Promise((resolve) => {
    const req = https.request({ host: '127.0.0.1', port, path: '/', method: 'POST', ca }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve(0));
    req.end('x');
  });
}

/**
 * One worker process, like one Spillway ingest process and one node:http process: the comparison is
 * per process on the same cores. Access log off; the request body is read and discarded. `tls`: the
 * same over HTTPS (TLS 1.2/1.3, the defaults of nginx's OpenSSL, session cache off like Spillway's
 * node:tls default), the peer of "Spillway ingest over TLS".
 */
export async function startNginx(workers = 1, tls?: NginxTls): Promise<Nginx> {
  const dir = mkdtempSync(join(tmpdir(), 'spw-nginx-'));
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `daemon off;
master_process on;
worker_processes ${workers};
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  client_max_body_size 2m;
  client_body_buffer_size 64k;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:${port}${tls ? ' ssl' : ''};
${
  tls
    ? `    ssl_certificate ${tls.certPath};
    ssl_certificate_key ${tls.keyPath};
    ssl_protocols TLSv1.2 TLSv1.3;
`
    : ''
}    location / {
      default_type application/json;
      return 202 '{"id":"nginx"}';
    }
  }
}
`,
  );
  const proc = run('nginx', ['-c', conf, '-p', dir]);
  await waitFor(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`nginx exited: ${proc.err()}`);
      return (await probe(port, tls?.ca)) === 202;
    },
    'nginx to answer',
    10_000,
  );
  return {
    port,
    proc,
    async close() {
      // SIGQUIT = graceful in nginx; the master then stops its worker.
      await proc.stop(3000);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
