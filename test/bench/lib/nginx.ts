/** The ceiling peer: nginx answering `return 202` from a generated config in a temp dir. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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

/**
 * One worker process, like one Spillway ingest process and one node:http process: the comparison is
 * per process on the same cores. Access log off; the request body is read and discarded.
 */
export async function startNginx(workers = 1): Promise<Nginx> {
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
    listen 127.0.0.1:${port};
    location / {
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
      try {
        const r = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: 'x' });
        return r.status === 202;
      } catch {
        return false;
      }
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
