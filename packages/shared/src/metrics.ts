import {
  Counter,
  type CounterConfiguration,
  collectDefaultMetrics,
  Gauge,
  type GaugeConfiguration,
  Histogram,
  type HistogramConfiguration,
  Registry,
} from 'prom-client';

/**
 * The process-wide Prometheus registry. Packages register their metrics on it (units in names:
 * `_seconds`, `_bytes`, `_total`); every role serves it on /metrics.
 */
export const registry = new Registry();
collectDefaultMetrics({ register: registry, prefix: 'spillway_' });

/**
 * Metrics are module-scoped and created once per process: tests and `--role all` run several
 * workers, intakes and dispatchers in one process, and a module loaded twice (two resolutions of one
 * package) must get the metric already registered instead of a "already registered" throw.
 */
export function getOrCreateMetric<M>(reg: Registry, name: string, make: () => M): M {
  return (reg.getSingleMetric(name) as M | undefined) ?? make();
}

const getOrCreate = <M>(name: string, make: () => M): M => getOrCreateMetric(registry, name, make);

export function counter<L extends string = string>(
  conf: Omit<CounterConfiguration<L>, 'registers'>,
): Counter<L> {
  return getOrCreate(conf.name, () => new Counter<L>({ ...conf, registers: [registry] }));
}

export function gauge<L extends string = string>(conf: Omit<GaugeConfiguration<L>, 'registers'>): Gauge<L> {
  return getOrCreate(conf.name, () => new Gauge<L>({ ...conf, registers: [registry] }));
}

export function histogram<L extends string = string>(
  conf: Omit<HistogramConfiguration<L>, 'registers'>,
): Histogram<L> {
  return getOrCreate(conf.name, () => new Histogram<L>({ ...conf, registers: [registry] }));
}

/**
 * A package's metric constructors bound to its help texts (one table, metric name → help), so a
 * declaration is one line: `counter('spillway_x_total', ['outcome'])`.
 */
export function metricFactory<N extends string>(help: Readonly<Record<N, string>>) {
  return {
    counter: <L extends string = string>(name: N, labelNames?: readonly L[]): Counter<L> =>
      counter<L>({ name, help: help[name], ...(labelNames ? { labelNames } : {}) }),
    gauge: <L extends string = string>(
      name: N,
      opts: Pick<GaugeConfiguration<L>, 'labelNames' | 'collect'> = {},
    ): Gauge<L> => gauge<L>({ name, help: help[name], ...opts }),
    histogram: <L extends string = string>(
      name: N,
      buckets: number[],
      labelNames?: readonly L[],
    ): Histogram<L> =>
      histogram<L>({ name, help: help[name], buckets, ...(labelNames ? { labelNames } : {}) }),
  };
}
