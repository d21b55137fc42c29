import { errors } from '@spillway/shared';
import type { Kafka } from 'kafkajs';
import { historyReadRecordsTotal } from '../metrics.ts';

/** One record read back from a history topic. */
export interface RangeRecord {
  offset: bigint;
  key: string;
  value: Buffer;
}

interface Broker {
  fetch(req: object): Promise<{
    responses: {
      partitions: {
        errorCode: number;
        highWatermark: string;
        messages: { offset: string; key: Buffer | null; value: Buffer | null }[];
      }[];
    }[];
  }>;
}
interface Cluster {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  addTargetTopic(topic: string): Promise<void>;
  refreshMetadata(): Promise<void>;
  findLeaderForPartitions(topic: string, partitions: number[]): Record<string, number[]>;
  findBroker(q: { nodeId: string }): Promise<Broker>;
}

/** Bytes one fetch asks for per partition: a page of history is read in a few of them. */
const FETCH_BYTES = 1024 * 1024;

/**
 * Reads an offset range of one partition back from Kafka: a bounded Fetch at a fixed offset, no
 * consumer group (joining one costs a rebalance per lookup). kafkajs has no public API for it, so
 * this uses the cluster client its Kafka object creates for its own consumers (same brokers, SSL
 * and SASL settings): `broker.fetch` of the protocol layer. kafkajs 2.2 is frozen, so this holds.
 */
export class KafkaRangeReader {
  readonly #kafka: Kafka;
  #cluster: Promise<Cluster> | undefined;
  readonly #topics = new Set<string>();

  constructor(kafka: Kafka) {
    this.#kafka = kafka;
  }

  #connect(): Promise<Cluster> {
    this.#cluster ??= (async () => {
      const create = Object.getOwnPropertySymbols(this.#kafka).find(
        (s) => s.description === 'private:Kafka:createCluster',
      );
      if (!create) throw new Error('kafkajs has no cluster factory (expected kafkajs 2.x)');
      const factory = (this.#kafka as unknown as Record<symbol, (o: object) => Cluster>)[create]!;
      const cluster = factory({ metadataMaxAge: 60_000, allowAutoTopicCreation: false, isolationLevel: 1 });
      try {
        await cluster.connect();
      } catch (err) {
        this.#cluster = undefined;
        throw err;
      }
      return cluster;
    })();
    return this.#cluster;
  }

  /**
   * Calls `visit` for every record in [from, to] of the partition, in offset order, until it
   * returns false or `maxRecords` were visited. Resolves with how many were visited.
   */
  async read(...args: Parameters<KafkaRangeReader['readOnce']>): Promise<number> {
    try {
      return await this.readOnce(...args);
    } catch (err) {
      // The history is on Kafka: when it cannot be read, the API says so (503), it does not fail.
      throw errors.unavailable(`the history cannot be read from Kafka now: ${(err as Error).message}`, {
        cause: err,
        retryAfter: 1,
      });
    }
  }

  /** read() without the error mapping. */
  async readOnce(
    topic: string,
    partition: number,
    from: bigint,
    to: bigint,
    visit: (r: RangeRecord) => unknown,
    maxRecords = Number.POSITIVE_INFINITY,
  ): Promise<number> {
    const cluster = await this.#connect();
    if (!this.#topics.has(topic)) {
      await cluster.addTargetTopic(topic);
      this.#topics.add(topic);
    }
    let next = from;
    let visited = 0;
    for (let tries = 0; next <= to && visited < maxRecords; ) {
      let broker: Broker;
      try {
        const leaders = cluster.findLeaderForPartitions(topic, [partition]);
        const nodeId = Object.keys(leaders)[0];
        if (nodeId === undefined) throw new Error(`no leader for ${topic}/${partition}`);
        broker = await cluster.findBroker({ nodeId });
      } catch (err) {
        if (++tries > 2) throw err;
        await cluster.refreshMetadata();
        continue;
      }
      const res = await broker.fetch({
        replicaId: -1,
        isolationLevel: 1,
        maxWaitTime: 0,
        minBytes: 0,
        maxBytes: FETCH_BYTES,
        topics: [{ topic, partitions: [{ partition, fetchOffset: next.toString(), maxBytes: FETCH_BYTES }] }],
      });
      const p = res.responses[0]?.partitions[0];
      if (!p) break;
      // 1: OFFSET_OUT_OF_RANGE (aged out by retention): nothing left to read there.
      if (p.errorCode !== 0) {
        if (p.errorCode === 1) break;
        if (++tries > 2)
          throw new Error(`kafka fetch of ${topic}/${partition} failed (error ${p.errorCode})`);
        await cluster.refreshMetadata();
        continue;
      }
      let progressed = false;
      for (const m of p.messages) {
        const offset = BigInt(m.offset);
        // A fetch answers whole record batches: skip what lies before the asked offset.
        if (offset < next) continue;
        if (offset > to) return visited;
        progressed = true;
        next = offset + 1n;
        visited++;
        historyReadRecordsTotal.inc();
        if (m.value && visit({ offset, key: m.key?.toString() ?? '', value: m.value }) === false)
          return visited;
        if (visited >= maxRecords) return visited;
      }
      if (!progressed) {
        // Nothing more up to the high watermark (compacted or aged-out gaps end here).
        if (BigInt(p.highWatermark) <= next) break;
        next += 1n;
      }
    }
    return visited;
  }

  async close(): Promise<void> {
    const c = this.#cluster;
    this.#cluster = undefined;
    await c?.then((x) => x.disconnect()).catch(() => {});
  }
}
