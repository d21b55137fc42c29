import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { ROLES } from '@spillway/router';
import { DEFAULTS, loadConfig, requireAdminToken, secretBoxOf } from '@spillway/shared';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { type Container, type K8sObject, podSpecOf, type Rendered, render } from './kustomize.ts';
import { ROOT } from './podman.ts';

/**
 * deploy/k8s, rendered the way kustomize renders it (test/deploy/kustomize.ts), checked against the
 * Kubernetes OpenAPI schemas shipped by the `kubernetes-models` package twice: its compiled JSON
 * Schema validators (types, required fields, formats), and its TypeScript interfaces with excess
 * property checks (a misspelt or misplaced field fails, as with kubeconform -strict). Then what the
 * issue asks of the manifests, and that the configuration they give each role is one Spillway
 * accepts.
 */

const K8S = join(ROOT, 'deploy/k8s');
const KUSTOMIZATIONS = ['base', 'overlays/example'];
const rendered: Record<string, Rendered> = Object.fromEntries(
  KUSTOMIZATIONS.map((k) => [k, render(join(K8S, k))]),
);
const example = rendered['overlays/example']!.objects;

const find = (objects: K8sObject[], kind: string, name: string) => {
  const o = objects.find((x) => x.kind === kind && x.metadata.name === name);
  if (!o) throw new Error(`no ${kind}/${name}`);
  return o;
};
// biome-ignore lint/suspicious/noExplicitAny: manifests are checked against the schemas, then walked freely
type Any = any;

async function modelClass(o: K8sObject): Promise<{ new (data: unknown): { validate(): void } }> {
  const mod = (await import(/* @vite-ignore */ `kubernetes-models/${o.apiVersion}/${o.kind}`)) as Record<
    string,
    unknown
  >;
  const cls = mod[o.kind];
  if (typeof cls !== 'function') throw new Error(`kubernetes-models has no ${o.apiVersion} ${o.kind}`);
  return cls as never;
}

/** Type-checks the objects against kubernetes-models' interfaces in memory; returns the diagnostics. */
function typecheck(objects: K8sObject[]): string[] {
  const file = join(ROOT, 'test/deploy/__rendered_manifests__.ts');
  const lines = objects.map(
    (o, i) =>
      `const o${i}: import('kubernetes-models/${o.apiVersion}/${o.kind}').I${o.kind} = ${JSON.stringify(o)};\nvoid o${i};`,
  );
  const source = `export {};\n${lines.join('\n')}\n`;
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, onError, create) =>
    name === file ? ts.createSourceFile(name, source, lang) : getSourceFile(name, lang, onError, create);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
    const obj = where >= 1 ? objects[Math.floor((where - 1) / 2)] : undefined;
    return `${obj ? `${obj.kind}/${obj.metadata.name}: ` : ''}${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
  });
}

describe('deploy/k8s', () => {
  it('uses every file under deploy/k8s in some kustomization', () => {
    const all = (readdirSync(K8S, { recursive: true }) as string[])
      .filter((f) => f.endsWith('.yaml'))
      .map((f) => join(K8S, f));
    const used = new Set(Object.values(rendered).flatMap((r) => [...r.files]));
    expect(all.filter((f) => !used.has(f)).map((f) => relative(ROOT, f))).toEqual([]);
  });

  for (const k of KUSTOMIZATIONS) {
    it(`${k}: every object passes the Kubernetes schema validators of kubernetes-models`, async () => {
      const objects = rendered[k]!.objects;
      expect(objects.length).toBeGreaterThan(5);
      for (const o of objects) {
        const Model = await modelClass(o);
        expect(() => new Model(o).validate(), `${o.kind}/${o.metadata.name}`).not.toThrow();
      }
    });

    it(`${k}: every object type-checks against the Kubernetes API types, unknown fields refused`, () => {
      expect(typecheck(rendered[k]!.objects)).toEqual([]);
    });
  }

  it('the schema checks can fail: a wrong type, a missing field and a misspelt field are each caught', async () => {
    const worker = structuredClone(find(example, 'Deployment', 'spillway-worker')) as Any;
    const Model = await modelClass(worker);
    const wrongType = structuredClone(worker);
    wrongType.spec.replicas = 'three';
    expect(() => new Model(wrongType).validate()).toThrow(/replicas/);
    const missing = structuredClone(worker);
    delete missing.spec.template.spec.containers[0].readinessProbe.httpGet.port;
    expect(() => new Model(missing).validate()).toThrow(/port/);
    const misspelt = structuredClone(worker);
    misspelt.spec.template.spec.containers[0].livenesProbe = { httpGet: { path: '/healthz', port: 8081 } };
    expect(typecheck([misspelt]).join('\n')).toMatch(/livenesProbe/);
  });

  it('runs ingest, worker and admin as separate Deployments of the image with their role, hardened', () => {
    for (const role of ['ingest', 'worker', 'admin']) {
      const d = find(example, 'Deployment', `spillway-${role}`) as Any;
      const pod = podSpecOf(d) as Any;
      expect(d.spec.selector.matchLabels['app.kubernetes.io/component']).toBe(role);
      expect(pod.automountServiceAccountToken).toBe(false);
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 10001 });
      expect(pod.securityContext.seccompProfile.type).toBe('RuntimeDefault');
      const [c] = pod.containers as Container[] as Any[];
      expect(c.image).toBe('registry.example.com/spillway:0.1.0');
      // The image's entrypoint is `spillway start`: the args pick the role.
      expect(c.args).toEqual(['--role', role]);
      expect(ROLES).toContain(role);
      expect(c.securityContext).toMatchObject({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ['ALL'] },
      });
      const admin = (c.ports as Any[]).find((p) => p.name === 'admin');
      expect(admin.containerPort).toBe(8081);
      expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'admin' });
      expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'admin' });
      expect(c.resources.requests.cpu).toBeDefined();
      expect(c.resources.requests.memory).toBeDefined();
      expect(c.resources.limits.memory).toBeDefined();
      expect(c.lifecycle.preStop.sleep.seconds).toBeGreaterThan(0);
      expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(c.lifecycle.preStop.sleep.seconds);
      // A read-only root needs a writable /tmp.
      expect(c.volumeMounts).toContainEqual({ name: 'tmp', mountPath: '/tmp' });
    }
  });

  it('gives every Deployment a PodDisruptionBudget and every Service a matching Deployment port', () => {
    const deployments = example.filter((o) => o.kind === 'Deployment') as Any[];
    const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
      Object.entries(selector).every(([k, v]) => labels[k] === v);
    for (const d of deployments) {
      const labels = d.spec.template.metadata.labels;
      const pdbs = example.filter(
        (o: Any) => o.kind === 'PodDisruptionBudget' && matches(o.spec.selector.matchLabels, labels),
      ) as Any[];
      expect(pdbs.length, d.metadata.name).toBe(1);
      expect(pdbs[0].spec.maxUnavailable ?? 0, d.metadata.name).toBeLessThan(d.spec.replicas);
    }
    for (const s of example.filter((o) => o.kind === 'Service') as Any[]) {
      const d = deployments.find((x) => matches(s.spec.selector, x.spec.template.metadata.labels));
      expect(d, s.metadata.name).toBeDefined();
      const names = d.spec.template.spec.containers.flatMap((c: Any) => c.ports.map((p: Any) => p.name));
      for (const p of s.spec.ports) expect(names, s.metadata.name).toContain(p.targetPort);
    }
  });

  it('autoscales workers on a Spillway metric, never past the spill partitions', () => {
    const hpa = find(example, 'HorizontalPodAutoscaler', 'spillway-worker') as Any;
    expect(hpa.spec.scaleTargetRef).toEqual({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      name: 'spillway-worker',
    });
    const pods = hpa.spec.metrics.find((m: Any) => m.type === 'Pods');
    expect(pods.pods.metric.name).toMatch(/^spillway_/);
    const config = find(example, 'ConfigMap', 'spillway-config') as Any;
    expect(hpa.spec.maxReplicas).toBeLessThanOrEqual(Number(config.data.SPILLWAY_SPILL_PARTITIONS));
    expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
  });

  it('gives each role a configuration Spillway accepts, with the tokens from the Secret', () => {
    const config = find(example, 'ConfigMap', 'spillway-config') as Any;
    const secret = find(example, 'Secret', 'spillway-secrets') as Any;
    expect(Object.keys(secret.stringData).sort()).toEqual(['SPILLWAY_ADMIN_TOKEN', 'SPILLWAY_SECRET_KEY']);
    const known = new Set([...Object.keys(DEFAULTS), 'SPILLWAY_ADMIN_TOKEN', 'SPILLWAY_SECRET_KEY']);
    for (const key of Object.keys(config.data)) expect(known, key).toContain(key);
    for (const role of ['ingest', 'worker', 'admin']) {
      const c = (podSpecOf(find(example, 'Deployment', `spillway-${role}`)) as Any).containers[0];
      const from = c.envFrom.map((e: Any) => e.configMapRef?.name ?? e.secretRef?.name);
      expect(from).toEqual(['spillway-config', 'spillway-secrets']);
      const env: Record<string, string> = { ...config.data, ...secret.stringData };
      for (const e of c.env ?? []) env[e.name] = e.value;
      for (const key of Object.keys(env)) expect(known, `${role}: ${key}`).toContain(key);
      // The shipped placeholders are refused at start, each naming its variable.
      expect(() => loadConfig(env)).toThrow(/^SPILLWAY_SECRET_KEY must be 32 random bytes/);
      const key = randomBytes(32).toString('base64');
      const loaded = loadConfig({ ...env, SPILLWAY_SECRET_KEY: key });
      expect(loaded.redis).toBeDefined();
      expect(loaded.kafkaBrokers.length, role).toBe(3);
      expect(secretBoxOf(loaded).encrypted).toBe(true);
      expect(secretBoxOf(loaded).box.keyIds).toHaveLength(1);
      expect(() => requireAdminToken(loaded)).toThrow(/SPILLWAY_ADMIN_TOKEN/);
      expect(
        requireAdminToken(
          loadConfig({ ...env, SPILLWAY_SECRET_KEY: key, SPILLWAY_ADMIN_TOKEN: 'x'.repeat(32) }),
        ),
      ).toHaveLength(32);
    }
  });

  it('runs the optional edge as a DaemonSet with three capabilities, not privileged', () => {
    const ds = find(example, 'DaemonSet', 'spillway-edge') as Any;
    const pod = ds.spec.template.spec;
    expect(pod.hostNetwork).toBe(true);
    expect(pod.hostPID).toBeUndefined();
    for (const c of [...pod.initContainers, ...pod.containers]) {
      expect(c.securityContext.privileged, c.name).toBeUndefined();
      expect(c.securityContext.allowPrivilegeEscalation, c.name).toBe(false);
      expect(c.securityContext.capabilities, c.name).toEqual({
        drop: ['ALL'],
        add: ['BPF', 'NET_ADMIN', 'PERFMON'],
      });
    }
    expect(pod.initContainers.map((c: Any) => c.args.slice(0, 2))).toEqual([
      ['edge', 'attach'],
      ['edge', 'allow'],
    ]);
    expect(rendered.base!.objects.some((o) => o.kind === 'DaemonSet')).toBe(false);
  });
});
