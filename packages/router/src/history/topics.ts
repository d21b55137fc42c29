import { createHash } from 'node:crypto';
import { type Config, errors, retryDelayMs, sleep } from '@spillway/shared';
import kafkajs, { type Kafka, type Producer } from 'kafkajs';

const { ConfigResourceTypes } = kafkajs;

/** The history's Kafka topics (docs/storage.md): time retention = SPILLWAY_RECORD_RETENTION. */
export interface HistoryTopics {
  /** One record per logged event: its body and where it was fanned out to. */
  events: string;
  /** One record per delivery attempt: time, number, status or error, latency, response excerpt. */
  attempts: string;
  /** Dead letters past a tenant's DLQ cap or TTL, with their tasks (bodies), oldest first. */
  dlq: string;
}

export function historyTopics(config: Pick<Config, 'historyTopic'>): HistoryTopics {
  const p = config.historyTopic;
  return { events: `${p}.events`, attempts: `${p}.attempts`, dlq: `${p}.dlq` };
}

/** The partition a tenant's history records go to (all of one tenant's records of a topic in one). */
export function historyPartition(tenantId: string, partitions: number): number {
  const k = `${partitions}:${tenantId}`;
  let p = partitionOf.get(k);
  if (p === undefined) {
    p = createHash('sha1').update(tenantId).digest().readUInt32BE(0) % partitions;
    // Every history record asks: a hash per record was 2 % of a delivering worker's samples.
    if (partitionOf.size >= PARTITION_CACHE_MAX) partitionOf.clear();
    partitionOf.set(k, p);
  }
  return p;
}
const partitionOf = new Map<string, number>();
const PARTITION_CACHE_MAX = 10_000;

/** Largest history record: an event with a 64 MiB body, base64'd (as the spill topic). */
const MAX_MESSAGE_BYTES = 96 * 1024 * 1024;

/**
 * Creates the history topics when missing (SPILLWAY_HISTORY_PARTITIONS partitions, replicas as the
 * spill topic: min(3, brokers), min.insync.replicas one less), sets their `retention.ms` to the
 * record retention, and returns each topic's partition count.
 */
export async function ensureHistoryTopics(
  kafka: Kafka,
  config: Pick<Config, 'historyTopic' | 'historyPartitions' | 'recordRetention' | 'spillReplication'>,
): Promise<Record<keyof HistoryTopics, number>> {
  const topics = historyTopics(config);
  const deadline = Date.now() + 30_000;
  for (let n = 0; ; n++) {
    const admin = kafka.admin({ retry: { retries: 3, initialRetryTime: 300 } });
    try {
      await admin.connect();
      const brokers = (await admin.describeCluster()).brokers.length;
      const replication = Math.min(config.spillReplication ?? 3, brokers);
      const entries = [
        { name: 'retention.ms', value: String(config.recordRetention.ms) },
        { name: 'max.message.bytes', value: String(MAX_MESSAGE_BYTES) },
        { name: 'min.insync.replicas', value: String(Math.max(1, replication - 1)) },
      ];
      const have = await admin.listTopics();
      const missing = Object.values(topics).filter((t) => !have.includes(t));
      if (missing.length)
        await admin
          .createTopics({
            waitForLeaders: true,
            topics: missing.map((topic) => ({
              topic,
              numPartitions: config.historyPartitions,
              replicationFactor: replication,
              configEntries: entries,
            })),
          })
          .catch((err: { type?: string }) => {
            if (err.type !== 'TOPIC_ALREADY_EXISTS') throw err;
          });
      const present = Object.values(topics).filter((t) => have.includes(t));
      if (present.length)
        await admin.alterConfigs({
          validateOnly: false,
          resources: present.map((name) => ({
            type: ConfigResourceTypes.TOPIC,
            name,
            configEntries: [entries[0]!],
          })),
        });
      const meta = await admin.fetchTopicMetadata({ topics: Object.values(topics) });
      const count = (t: string) => meta.topics.find((m) => m.name === t)?.partitions.length ?? 0;
      return { events: count(topics.events), attempts: count(topics.attempts), dlq: count(topics.dlq) };
    } catch (err) {
      const retriable = (err as { retriable?: boolean; cause?: { retriable?: boolean } }).retriable;
      if (
        !(retriable ?? (err as { cause?: { retriable?: boolean } }).cause?.retriable) ||
        Date.now() > deadline
      )
        throw errors.unavailable(
          `Kafka at SPILLWAY_KAFKA_BROKERS cannot hold the history topics: ${(err as Error).message}`,
          { cause: err },
        );
      await sleep(retryDelayMs(n));
    } finally {
      await admin.disconnect().catch(() => {});
    }
  }
}

/**
 * An idempotent producer connected on first use, for the history's writers (records, DLQ
 * archive): `get()` connects (a failed connect is tried again on the next call), `reset()` drops a
 * producer whose broker went away, `close()` disconnects.
 */
export function lazyProducer(kafka: Kafka): {
  get(): Promise<Producer>;
  reset(): Promise<void>;
  close(): Promise<void>;
} {
  let producer: Promise<Producer> | undefined;
  const drop = async () => {
    const old = producer;
    producer = undefined;
    await old?.then((p) => p.disconnect()).catch(() => {});
  };
  return {
    get() {
      producer ??= (async () => {
        const p = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
        try {
          await p.connect();
          return p;
        } catch (err) {
          producer = undefined;
          throw err;
        }
      })();
      return producer;
    },
    reset: drop,
    close: drop,
  };
}
