/**
 * A test-only certificate authority and a server certificate it signed, made with `openssl req` in
 * a temporary directory: for 127.0.0.1, ::1 and localhost, valid for `days`. Clients trust `ca`
 * (curl `--cacert caPath`, node `ca:`); the server gets `cert`/`key` (or the paths, as
 * SPILLWAY_TLS_CERT/SPILLWAY_TLS_KEY). `remove()` deletes the directory.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestCerts {
  dir: string;
  caPath: string;
  certPath: string;
  keyPath: string;
  ca: string;
  cert: string;
  key: string;
  remove(): void;
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** `cn` names the leaf (tests that swap certificates tell them apart by it). */
export function makeTestCerts(cn = 'spillway-test', days = 2): TestCerts {
  const dir = mkdtempSync(join(tmpdir(), 'spw-tls-'));
  writeFileSync(
    join(dir, 'leaf.ext'),
    'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n',
  );
  const curve = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    [
      'req',
      '-x509',
      ...curve,
      '-keyout',
      'ca.key',
      '-out',
      'ca.pem',
      '-days',
      String(days),
      '-subj',
      '/CN=spillway test CA',
    ],
    dir,
  );
  openssl(['req', ...curve, '-keyout', 'key.pem', '-out', 'leaf.csr', '-subj', `/CN=${cn}`], dir);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      'leaf.csr',
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      'cert.pem',
      '-days',
      String(days),
      '-extfile',
      'leaf.ext',
    ],
    dir,
  );
  const caPath = join(dir, 'ca.pem');
  const certPath = join(dir, 'cert.pem');
  const keyPath = join(dir, 'key.pem');
  return {
    dir,
    caPath,
    certPath,
    keyPath,
    ca: readFileSync(caPath, 'utf8'),
    cert: readFileSync(certPath, 'utf8'),
    key: readFileSync(keyPath, 'utf8'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
