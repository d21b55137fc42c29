/**
 * The lab's own distributed engines, on loopback ports of their own (never the shared 6390/9092):
 * a 3-broker Apache Kafka 4.x KRaft cluster (each JVM broker + controller, small heaps, the jars of
 * infra/local/kafka) and a Redis Cluster of 3 masters and 3 replicas (`redis-cli --cluster create
 * --cluster-replicas 1`). Every process is our child, so the lab can `kill -9` any of them.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Proc, run, runToEnd } from '../bench/lib/procs.ts';
import { freePort } from '../helpers/ports.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

const KAFKA_DIR = fileURLToPath(new URL('../../infra/local/kafka/', import.meta.url));
const LIB = join(KAFKA_DIR, 'target/lib');
const java = process.env.JAVA_HOME ? join(process.env.JAVA_HOME, 'bin/java') : 'java';

async function kafkaJars(): Promise<void> {
  if (existsSync(LIB) && (await runToEnd('bash', ['-c', `ls ${LIB}/kafka_2.13-*.jar`], 5000)).code === 0)
    return;
  const r = await runToEnd(
    'mvn',
    [
      '-q',
      '-B',
      '-f',
      join(KAFKA_DIR, 'pom.xml'),
      'dependency:copy-dependencies',
      `-DoutputDirectory=${LIB}`,
      '-DincludeScope=runtime',
    ],
    600_000,
  );
  if (r.code !== 0) throw new Error(`fetching the Kafka jars failed: ${r.err.slice(-400)}`);
}

export interface Broker {
  id: number;
  port: number;
  cport: number;
  dir: string;
  proc?: Proc;
}

export class LabKafka {
  readonly dir = mkdtempSync(join(tmpdir(), 'spw-lab-kafka-'));
  readonly brokers: Broker[] = [];

  get bootstrap(): string {
    return this.brokers.map((b) => `127.0.0.1:${b.port}`).join(',');
  }

  async start(n = 3): Promise<void> {
    await kafkaJars();
    for (let id = 1; id <= n; id++)
      this.brokers.push({
        id,
        port: await freePort(),
        cport: await freePort(),
        dir: join(this.dir, `b${id}`),
      });
    const voters = this.brokers.map((b) => `${b.id}@127.0.0.1:${b.cport}`).join(',');
    const cid = (
      await runToEnd(java, ['-cp', `${LIB}/*`, 'kafka.tools.StorageTool', 'random-uuid'], 60_000)
    ).out
      .trim()
      .split('\n')
      .at(-1)!;
    for (const b of this.brokers) {
      mkdirSync(join(b.dir, 'data'), { recursive: true });
      writeFileSync(
        join(b.dir, 'server.properties'),
        [
          'process.roles=broker,controller',
          `node.id=${b.id}`,
          `controller.quorum.voters=${voters}`,
          `listeners=PLAINTEXT://127.0.0.1:${b.port},CONTROLLER://127.0.0.1:${b.cport}`,
          `advertised.listeners=PLAINTEXT://127.0.0.1:${b.port}`,
          'controller.listener.names=CONTROLLER',
          'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT',
          'inter.broker.listener.name=PLAINTEXT',
          `log.dirs=${join(b.dir, 'data')}`,
          // Every topic, the internal ones included, on all three brokers; a write needs two.
          'default.replication.factor=3',
          'min.insync.replicas=2',
          'offsets.topic.replication.factor=3',
          'offsets.topic.num.partitions=4',
          'transaction.state.log.replication.factor=3',
          'transaction.state.log.min.isr=2',
          'share.coordinator.state.topic.replication.factor=3',
          'share.coordinator.state.topic.min.isr=2',
          'group.initial.rebalance.delay.ms=0',
          'auto.create.topics.enable=false',
          'unclean.leader.election.enable=false',
          'log.retention.hours=2',
          '',
        ].join('\n'),
      );
      const f = await runToEnd(
        java,
        [
          '-cp',
          `${LIB}/*`,
          `-Dlog4j2.configurationFile=${join(KAFKA_DIR, 'log4j2.yaml')}`,
          'kafka.tools.StorageTool',
          'format',
          '-t',
          cid,
          '-c',
          join(b.dir, 'server.properties'),
        ],
        60_000,
      );
      if (f.code !== 0) throw new Error(`kafka storage format of broker ${b.id} failed: ${f.out}${f.err}`);
    }
    await Promise.all(this.brokers.map((b) => this.startBroker(b)));
  }

  async startBroker(b: Broker): Promise<void> {
    b.proc = run(java, [
      '-Xms128m',
      '-Xmx384m',
      '-XX:+UseG1GC',
      '-XX:TieredStopAtLevel=1',
      '-Djava.awt.headless=true',
      `-Dlog4j2.configurationFile=${join(KAFKA_DIR, 'log4j2.yaml')}`,
      '-cp',
      `${LIB}/*`,
      'kafka.Kafka',
      join(b.dir, 'server.properties'),
    ]);
    await waitFor(
      async () => {
        if (b.proc!.child.exitCode !== null)
          throw new Error(`broker ${b.id} exited: ${b.proc!.out().slice(-800)}`);
        const r = await runToEnd(
          process.execPath,
          [join(KAFKA_DIR, '../kafka-ready.mjs'), `127.0.0.1:${b.port}`],
          10_000,
        );
        return r.code === 0;
      },
      `kafka broker ${b.id}`,
      120_000,
      500,
    );
  }

  async kill9(b: Broker): Promise<void> {
    await b.proc?.kill9();
  }

  async close(): Promise<void> {
    await Promise.all(this.brokers.map((b) => b.proc?.stop(10_000)));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export interface RedisNode {
  port: number;
  proc?: Proc;
}

const cli = (port: number, ...args: string[]) => runToEnd('redis-cli', ['-p', String(port), ...args], 10_000);
/** A node whose process runs (a kill -9'd child has a signalCode and no exitCode). */
const alive = (n: RedisNode) =>
  !!n.proc && n.proc.child.exitCode === null && n.proc.child.signalCode === null;

export class LabRedisCluster {
  readonly dir = mkdtempSync(join(tmpdir(), 'spw-lab-redis-'));
  readonly nodes: RedisNode[] = [];
  /** Node timeout: how long a master may be silent before its replica is promoted. */
  readonly nodeTimeoutMs: number;

  constructor(nodeTimeoutMs = 3000) {
    this.nodeTimeoutMs = nodeTimeoutMs;
  }

  get url(): string {
    return `redis+cluster://${this.nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`;
  }

  async start(masters = 3, replicasPerMaster = 1): Promise<void> {
    for (let i = 0; i < masters * (1 + replicasPerMaster); i++) this.nodes.push({ port: await freePort() });
    await Promise.all(this.nodes.map((n) => this.startNode(n)));
    const r = await runToEnd(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...this.nodes.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas',
        String(replicasPerMaster),
        '--cluster-yes',
      ],
      60_000,
    );
    if (r.code !== 0) throw new Error(`redis-cli --cluster create failed: ${r.out}${r.err}`);
    await this.waitHealthy(masters);
  }

  async startNode(n: RedisNode): Promise<void> {
    // Production settings: AOF everysec, noeviction. The bus port is the client port + 10000.
    n.proc = run('redis-server', [
      '--port',
      String(n.port),
      '--bind',
      '127.0.0.1',
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      `nodes-${n.port}.conf`,
      '--cluster-node-timeout',
      String(this.nodeTimeoutMs),
      '--dir',
      this.dir,
      '--appendonly',
      'yes',
      '--appendfsync',
      'everysec',
      '--appendfilename',
      `aof-${n.port}.aof`,
      '--appenddirname',
      `aof-${n.port}`,
      '--save',
      '',
      '--maxmemory-policy',
      'noeviction',
    ]);
    await waitFor(
      async () => (await cli(n.port, 'ping')).out.includes('PONG'),
      `redis ${n.port}`,
      20_000,
      100,
    );
  }

  /** Waits until the cluster is ok with `masters` masters, each with a connected replica. */
  async waitHealthy(masters = 3, timeoutMs = 60_000): Promise<void> {
    await waitFor(
      async () => {
        for (const n of this.nodes) {
          if (!alive(n)) continue;
          const info = (await cli(n.port, 'cluster', 'info')).out;
          if (!info.includes('cluster_state:ok')) return false;
        }
        const roles = await this.roles();
        const m = roles.filter((r) => r.role === 'master');
        return m.length === masters && m.every((x) => roles.some((r) => r.masterPort === x.port));
      },
      'redis cluster healthy',
      timeoutMs,
      250,
    );
  }

  /** Role of every live node, from `cluster nodes` of the first live one. */
  async roles(): Promise<{ port: number; role: 'master' | 'replica'; masterPort?: number; slots: string }[]> {
    const live = this.nodes.find(alive);
    if (!live) return [];
    const lines = (await cli(live.port, 'cluster', 'nodes')).out.trim().split('\n');
    const byId = new Map<string, number>();
    for (const l of lines) {
      const [id, addr] = l.split(' ');
      byId.set(id!, Number(addr!.split('@')[0]!.split(':')[1]));
    }
    return lines
      .filter((l) => !l.includes('fail') && !l.includes('noaddr'))
      .map((l) => {
        const f = l.split(' ');
        const port = Number(f[1]!.split('@')[0]!.split(':')[1]);
        const role = f[2]!.includes('master') ? 'master' : 'replica';
        return {
          port,
          role,
          masterPort: role === 'replica' ? byId.get(f[3]!) : undefined,
          slots: f.slice(8).join(' '),
        };
      });
  }

  /** The master serving the slot of `key` (e.g. the hash tag of Spillway's intake queue). */
  async masterOf(key: string): Promise<RedisNode> {
    const any = this.nodes.find(alive)!;
    const slot = Number((await cli(any.port, 'cluster', 'keyslot', key)).out.trim());
    for (const r of await this.roles()) {
      if (r.role !== 'master') continue;
      for (const range of r.slots.split(' ')) {
        const [a, b] = range.split('-').map(Number);
        if (slot >= a! && slot <= (b ?? a!)) return this.nodes.find((n) => n.port === r.port)!;
      }
    }
    throw new Error(`no master for slot ${slot}`);
  }

  async close(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.proc?.stop(5000)));
    await sleep(100);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
