import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readYaml } from './kustomize.ts';
import { buildImage, podman, ROOT } from './podman.ts';

/**
 * The edge DaemonSet's least capabilities, checked for real: the image's `spillway edge attach`
 * run in a container as root with exactly the capabilities the DaemonSet grants (read from the
 * manifest), its own network namespace (XDP on that namespace's lo, nothing on the host's
 * interfaces), the host's bpffs and tracefs mounted as in the manifest, and seccomp as the
 * manifest says. It attaches; without any one of the capabilities, or under podman's default
 * seccomp profile, it is refused.
 */

interface Container {
  name: string;
  securityContext: { capabilities: { add: string[]; drop: string[] }; readOnlyRootFilesystem: boolean };
}
const ds = readYaml(join(ROOT, 'deploy/k8s/components/edge/daemonset.yaml'))[0] as {
  spec: {
    template: {
      spec: { securityContext: { seccompProfile: { type: string } }; initContainers: Container[] };
    };
  };
};
const attach = ds.spec.template.spec.initContainers.find((c) => c.name === 'attach')!;
const CAPS = attach.securityContext.capabilities.add;

describe('edge DaemonSet capabilities (podman, own network namespace)', () => {
  let ref: string;
  const pins: string[] = [];

  beforeAll(async () => {
    ref = await buildImage();
  }, 300_000);

  afterAll(() => {
    // The programs die with the container's namespace; the pinned maps stay on bpffs until removed.
    for (const p of pins) rmSync(p, { recursive: true, force: true });
  });

  const tryAttach = async (caps: string[], seccomp: string) => {
    const pin = `/sys/fs/bpf/spw-test-caps-${randomBytes(3).toString('hex')}`;
    pins.push(pin);
    const args = [
      'run',
      '--rm',
      '--runtime',
      'runc',
      '--network',
      'none',
      '--ulimit',
      'host',
      '--user',
      '0',
      '--cap-drop',
      'ALL',
      ...(caps.length ? ['--cap-add', caps.join(',')] : []),
      '--security-opt',
      'no-new-privileges',
      ...(seccomp === 'Unconfined' ? ['--security-opt', 'seccomp=unconfined'] : []),
      ...(attach.securityContext.readOnlyRootFilesystem ? ['--read-only'] : []),
      '-v',
      '/sys/fs/bpf:/sys/fs/bpf',
      '-v',
      '/sys/kernel/tracing:/sys/kernel/tracing:ro',
      '--entrypoint',
      '/usr/local/bin/node',
      ref,
      '/app/packages/router/bin/spillway.mjs',
      'edge',
      'attach',
      '--dev',
      'lo',
      '--port',
      '8080',
      '--mode',
      'monitor',
      '--pin-root',
      pin,
    ];
    try {
      const out = await podman(args, 120_000);
      return { ok: true, out };
    } catch (err) {
      return { ok: false, out: (err as Error).message };
    }
  };

  it('grants exactly BPF, NET_ADMIN and PERFMON, and they are enough to attach', async () => {
    expect([...CAPS].sort()).toEqual(['BPF', 'NET_ADMIN', 'PERFMON']);
    expect(attach.securityContext.capabilities.drop).toEqual(['ALL']);
    const r = await tryAttach(CAPS, ds.spec.template.spec.securityContext.seccompProfile.type);
    expect(r.ok, r.out).toBe(true);
    const status = JSON.parse(r.out) as { xdp?: unknown };
    expect(status).toBeTypeOf('object');
  }, 150_000);

  for (const missing of ['BPF', 'NET_ADMIN', 'PERFMON']) {
    it(`is refused without ${missing}`, async () => {
      const r = await tryAttach(
        CAPS.filter((c) => c !== missing),
        'Unconfined',
      );
      expect(r.ok).toBe(false);
      expect(r.out).toMatch(/not permitted|CAP_/);
    }, 150_000);
  }

  it("is refused under podman's default seccomp profile (hence Unconfined in the manifest)", async () => {
    const r = await tryAttach(CAPS, 'RuntimeDefault');
    expect(r.ok).toBe(false);
    expect(r.out).toMatch(/not permitted/);
  }, 150_000);
});
