import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { testEnv } from '../helpers/env.ts';
import { dropSpillTopic } from '../helpers/router-fixtures.ts';
import { type Spawned, spawnSpillway } from '../helpers/spawn.ts';
import { waitFor } from '../helpers/wait.ts';
import { readYaml } from './kustomize.ts';
import { ROOT } from './podman.ts';
import { type Selector, selectors } from './promql.ts';

/**
 * deploy/prometheus and deploy/grafana: the alert rules pass their promtool unit tests, every
 * PromQL expression (rules, dashboard panels and variables) parses, and every metric they, the
 * worker HPA and the metrics-adapter rule read is one that running Spillway roles export — scraped
 * from a real ingest, worker and admin process started against the suite's Redis and Kafka.
 */

const PROM = join(ROOT, 'deploy/prometheus');
/** Series that Prometheus itself or the blackbox exporter make, not Spillway. */
const NOT_SPILLWAY: Record<string, string> = {
  up: 'made by Prometheus for every scrape target',
  probe_success: 'made by the blackbox exporter probing /readyz (job spillway-readyz)',
};

function promtool(args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile('promtool', args, { cwd: ROOT }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 127) : 0;
      resolve({ code, out: `${stdout}${stderr}` });
    });
  });
}

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
}
const rules = (readYaml(join(PROM, 'alerts.yaml'))[0] as { groups: { rules: Rule[] }[] }).groups.flatMap(
  (g) => g.rules,
);

interface Panel {
  title: string;
  type: string;
  targets?: { expr: string }[];
  panels?: Panel[];
}
const dashboard = JSON.parse(readFileSync(join(ROOT, 'deploy/grafana/spillway.json'), 'utf8')) as {
  panels: Panel[];
  templating: { list: { name: string; type: string; query?: { query: string } }[] };
};
const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
/** Grafana's variables replaced by values PromQL accepts. */
const dashExpr = (e: string) =>
  e.replaceAll('$__rate_interval', '5m').replaceAll('$namespace', '.*').replaceAll('$tenant', '.*');
const dashboardExprs = [
  ...panels.flatMap((p) =>
    (p.targets ?? []).map((t) => ({ where: `panel "${p.title}"`, expr: dashExpr(t.expr) })),
  ),
  ...dashboard.templating.list
    .filter((v) => v.type === 'query')
    .map((v) => {
      // label_values(<selector>, <label>) is Grafana's; the selector inside is PromQL.
      const m = /^label_values\((.*),\s*\w+\)$/.exec(v.query!.query);
      if (!m) throw new Error(`variable ${v.name}: not label_values(...)`);
      return { where: `variable ${v.name}`, expr: dashExpr(m[1]!) };
    }),
];

describe('alert rules (promtool)', () => {
  it('pass their unit tests', async () => {
    const r = await promtool(['test', 'rules', 'deploy/prometheus/tests/alerts.test.yaml']);
    expect(r.out).toMatch(/SUCCESS/);
    expect(r.code, r.out).toBe(0);
  });

  it('cover backlog, DLQ, breakers, ingest 503s, Redis/Kafka reachability and worker memory', () => {
    const alerts = rules.map((r) => r.alert);
    for (const a of [
      'SpillwaySpillBacklogGrowing',
      'SpillwayDLQGrowing',
      'SpillwayBreakerOpen',
      'SpillwayIngest503Rate',
      'SpillwayRedisUnreachable',
      'SpillwayDependencyUnreachable',
      'SpillwayWorkerMemoryNearBudget',
    ])
      expect(alerts).toContain(a);
    // Every alert has at least one firing case in the unit tests.
    const tests = readFileSync(join(PROM, 'tests/alerts.test.yaml'), 'utf8');
    for (const a of alerts)
      expect(tests, a).toMatch(new RegExp(`alertname: ${a}\\n\\s+exp_alerts:\\n\\s+- exp_labels`));
  });

  it('alert on the worker memory limit the worker Deployment sets', () => {
    const worker = readYaml(join(ROOT, 'deploy/k8s/base/worker.yaml')).find(
      (o) => (o as { kind: string }).kind === 'Deployment',
    ) as { spec: { template: { spec: { containers: { resources: { limits: { memory: string } } }[] } } } };
    const limit = worker.spec.template.spec.containers[0]!.resources.limits.memory;
    expect(limit).toBe('1Gi');
    const rss = rules.find((r) => r.alert === 'SpillwayWorkerMemoryNearBudget')!;
    expect(rss.expr).toContain(`* ${1024 ** 3}`);
  });

  it('the scrape configuration is valid (kubernetes_sd swapped for static targets: Debian builds promtool without it)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'spw-prom-'));
    try {
      const config = parse(readFileSync(join(PROM, 'prometheus.yaml'), 'utf8')) as {
        scrape_configs: Record<string, unknown>[];
      };
      for (const sc of config.scrape_configs) {
        expect(sc.kubernetes_sd_configs).toBeDefined();
        delete sc.kubernetes_sd_configs;
        sc.static_configs = [{ targets: ['127.0.0.1:8081'] }];
      }
      writeFileSync(join(dir, 'prometheus.yaml'), stringify(config));
      copyFileSync(join(PROM, 'alerts.yaml'), join(dir, 'alerts.yaml'));
      const r = await promtool(['check', 'config', join(dir, 'prometheus.yaml')]);
      expect(r.code, r.out).toBe(0);
      expect(r.out).toMatch(/SUCCESS: 8 rules found/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('dashboard', () => {
  it('has panels for ingest, delivery, backlog, breakers, limiter and kernel drops', () => {
    const titles = panels.filter((p) => p.type === 'row').map((p) => p.title);
    expect(titles).toEqual([
      'Ingest',
      'Delivery',
      'Backlog',
      'Breakers and limiter',
      'Kernel edge',
      'Processes',
    ]);
    expect(panels.filter((p) => p.type === 'timeseries').length).toBeGreaterThanOrEqual(20);
  });

  it('every query parses as PromQL (promtool, as recording rules)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'spw-dash-'));
    try {
      const file = join(dir, 'dashboard-rules.yaml');
      const groups = [
        {
          name: 'dashboard',
          rules: dashboardExprs.map((d, i) => ({ record: `dashboard:q${i}`, expr: d.expr })),
        },
      ];
      writeFileSync(file, stringify({ groups }));
      const r = await promtool(['check', 'rules', file]);
      expect(r.code, r.out).toBe(0);
      expect(r.out).toContain(`SUCCESS: ${dashboardExprs.length} rules found`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('metric names used by rules, dashboard and HPA are exported by running Spillway roles', () => {
  const env = testEnv({ SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32', SPILLWAY_INGEST_BACKEND: 'node' });
  const procs: Record<string, Spawned> = {};
  /** role → metric name → its TYPE (counter, gauge, histogram, summary, untyped). */
  const exported: Record<string, Map<string, string>> = {};

  beforeAll(async () => {
    for (const role of ['ingest', 'worker', 'admin'])
      procs[role] = spawnSpillway(['start', '--role', role], env);
    for (const [role, p] of Object.entries(procs)) {
      const port = await waitFor(
        () => {
          if (p.child.exitCode !== null) throw new Error(`${role} exited: ${p.stderr()}`);
          return /admin:\s+http:\/\/[\d.]+:(\d+)/.exec(p.stdout())?.[1];
        },
        `${role} to start`,
        60_000,
      );
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const types = new Map<string, string>();
      for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) types.set(m[1]!, m[2]!);
      exported[role] = types;
    }
  }, 120_000);

  afterAll(async () => {
    for (const p of Object.values(procs)) {
      p.child.kill('SIGTERM');
      await p.exited;
    }
    await dropSpillTopic(env.SPILLWAY_KAFKA_BROKERS!.split(','), env.SPILLWAY_SPILL_TOPIC!);
  }, 60_000);

  /** Is `name` (or the histogram/summary it is a series of) exported by `role`, or by any role? */
  const exports = (name: string, role?: string) =>
    Object.entries(exported).some(([r, types]) => {
      if (role && r !== role) return false;
      if (types.has(name)) return true;
      const base = /^(.*)_(bucket|sum|count)$/.exec(name)?.[1];
      const t = base ? types.get(base) : undefined;
      return t === 'histogram' || (t === 'summary' && !name.endsWith('_bucket'));
    });

  const used = (): { where: string; sel: Selector }[] => {
    const adapter = readYaml(join(PROM, 'adapter-rules.yaml'))[0] as { rules: { seriesQuery: string }[] };
    const hpa = readYaml(join(ROOT, 'deploy/k8s/base/worker.yaml')).find(
      (o) => (o as { kind: string }).kind === 'HorizontalPodAutoscaler',
    ) as { spec: { metrics: { type: string; pods?: { metric: { name: string } } }[] } };
    return [
      ...rules.flatMap((r) => selectors(r.expr).map((sel) => ({ where: `alert ${r.alert}`, sel }))),
      ...dashboardExprs.flatMap((d) => selectors(d.expr).map((sel) => ({ where: d.where, sel }))),
      ...adapter.rules.flatMap((r) =>
        selectors(r.seriesQuery).map((sel) => ({ where: 'adapter rule', sel })),
      ),
      ...hpa.spec.metrics
        .filter((m) => m.type === 'Pods')
        .map((m) => ({ where: 'worker HPA', sel: { name: m.pods!.metric.name, labels: {} } })),
    ];
  };

  it('finds the metric selectors (the extraction is not vacuous)', () => {
    const names = new Set(used().map((u) => u.sel.name));
    expect(names.size).toBeGreaterThan(30);
    expect(names).toContain('spillway_ingest_enqueue_seconds_bucket');
    expect(names).toContain('spillway_kernel_drops_total');
    expect(names).not.toContain('rate');
    expect(names).not.toContain('outcome');
    // A name no role exports is caught.
    expect(exports('spillway_no_such_metric_total')).toBe(false);
  });

  it('every name is exported (by the role its selector names, when it names one)', () => {
    const missing: string[] = [];
    for (const { where, sel } of used()) {
      if (sel.name in NOT_SPILLWAY) continue;
      const role = sel.labels.role;
      if (!exports(sel.name, role)) missing.push(`${where}: ${sel.name}${role ? ` (role ${role})` : ''}`);
    }
    expect(missing).toEqual([]);
  });
});
