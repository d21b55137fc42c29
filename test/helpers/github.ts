/**
 * Signed GitHub deliveries for ingest tests: as request headers, or sent with the real curl (whose
 * flags choose HTTP/1.1, HTTP/2, TLS).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { sign as githubSign } from '@octokit/webhooks-methods';

const run = promisify(execFile);

/** The headers of a GitHub delivery of `body` signed with `secret` (a fresh delivery id unless given). */
export async function githubHeaders(
  secret: string,
  body: string,
  delivery = `d-${randomBytes(8).toString('hex')}`,
): Promise<Record<string, string>> {
  return {
    'content-type': 'application/json',
    'x-hub-signature-256': await githubSign(secret, body),
    'x-github-event': 'push',
    'x-github-delivery': delivery,
  };
}

/**
 * One signed POST of a fresh body with curl; resolves with `<status> <http version>` (e.g.
 * `202 2`, `202 1.1`). `flags`: curl's own (`--http2`, `--http1.1`, `--cacert ca.pem`, ...).
 */
export async function curlGithub(
  flags: string[],
  url: string,
  secret: string,
  delivery?: string,
): Promise<string> {
  const body = `{"n":"${randomBytes(6).toString('hex')}"}`;
  const headers = await githubHeaders(secret, body, delivery);
  const { stdout } = await run('curl', [
    '-sS',
    ...flags,
    '-o',
    '/dev/null',
    '-w',
    '%{http_code} %{http_version}',
    ...Object.entries(headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]),
    '--data-binary',
    body,
    url,
  ]);
  return stdout;
}
