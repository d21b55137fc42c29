import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import {
  type Config,
  createKeys,
  createLogger,
  createRedis,
  errors,
  type Keys,
  type Logger,
  packageLogger,
  type RedisClient,
  retryDelayMs,
  type SecretBox,
  secretBoxOf,
  sleep,
} from '@spillway/shared';
import kafkajs, { Kafka, logLevel as kafkaLogLevel } from 'kafkajs';

// kafkajs is CommonJS and Node's ESM loader cannot see this one as a named export.
const { ConfigResourceTypes } = kafkajs;

/** What every role of one process shares: config, keys, logger and the connections. */
export interface Runtime {
  readonly config: Readonly<Config>;
  readonly keys: Keys;
  readonly logger: Logger;
  /** Commands (not blocking). */
  readonly redis: RedisClient;
  readonly kafka: Kafka;
  /** Seals and opens stored endpoint/source secrets (SPILLWAY_SECRET_KEY); the config store uses it. */
  readonly secrets: SecretBox;
  /** Unique per process: names this worker's published counters. */
  readonly workerId: string;
  /** Closes the shared connections (roles close their own first). */
  close(): Promise<void>;
}

export function createRuntime(
  config: Readonly<Config>,
  root: Logger = createLogger(config.logLevel),
): Runtime {
  const { box: secrets, encrypted } = secretBoxOf(config);
  // The router's logs carry pkg=router; packages handed this logger take their own child (packageLogger).
  const logger = packageLogger(root, 'router');
  if (!encrypted)
    logger.warn(
      'SPILLWAY_SECRET_KEY is not set: endpoint and source secrets are stored unencrypted in Redis (set it to 32 bytes as hex or base64 to encrypt them)',
    );
  const keys = createKeys(config.prefix);
  const redis = createRedis(config.redis, { maxRetriesPerRequest: 2 });
  redis.on('error', (err: Error) => logger.warn({ err }, 'redis connection error'));
  const kafka = new Kafka({
    clientId: `spillway-${process.pid}`,
    brokers: config.kafkaBrokers,
    logLevel: kafkaLogLevel.NOTHING,
    retry: { retries: 8, initialRetryTime: 200, maxRetryTime: 5000 },
  });
  const workerId = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  return {
    config,
    keys,
    logger,
    redis,
    kafka,
    secrets,
    workerId,
    async close() {
      redis.disconnect();
    },
  };
}

/** Redis ≥ 7.0.8 with noeviction; AOF off is allowed but logged loudly. */
export async function checkRedis(rt: Runtime): Promise<void> {
  let info: string;
  try {
    info = String(await rt.redis.info('server'));
  } catch (err) {
    throw errors.unavailable(`Redis at SPILLWAY_REDIS_URL does not answer: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const version = /redis_version:(\S+)/.exec(info)?.[1] ?? '0.0.0';
  const [a = 0, b = 0, c = 0] = version.split('.').map(Number);
  if (a * 1e6 + b * 1e3 + c < 7_000_008)
    throw errors.config(`SPILLWAY_REDIS_URL: Redis ${version} is too old; Spillway needs >= 7.0.8`);
  const policy = (await rt.redis.config('GET', 'maxmemory-policy')) as string[];
  if (policy[1] !== 'noeviction') {
    throw errors.config(
      `SPILLWAY_REDIS_URL: Redis maxmemory-policy is ${policy[1]}; set it to noeviction (queued events must never be evicted)`,
    );
  }
  if (rt.config.redisWaitReplicas > 0) {
    // The node of the intake queue's slot is the one whose replicas each commit waits for.
    const key = rt.keys.intakeQueueKey;
    const res = await rt.redis.pipeline().exists(key).info('replication').exec();
    const replicas = Number(/connected_slaves:(\d+)/.exec(String(res?.[1]?.[1] ?? ''))?.[1] ?? 0);
    if (replicas < rt.config.redisWaitReplicas)
      rt.logger.warn(
        `SPILLWAY_REDIS_WAIT_REPLICAS is ${rt.config.redisWaitReplicas} but the intake queue's Redis node has ${replicas} replicas: group commits are not replicated (nothing to wait for) until one is connected`,
      );
  }
  const aof = (await rt.redis.config('GET', 'appendonly')) as string[];
  if (aof[1] !== 'yes') {
    rt.logger.warn(
      'Redis has AOF off (appendonly no): a Redis restart loses accepted events. Use appendonly yes, appendfsync everysec',
    );
  }
}

/**
 * Largest spill record the topic takes: a 64 MiB body (the largest maxBodyBytes a source may
 * have) is ~85 MiB once base64'd into the task's JSON. The broker default (1 MiB) would wedge any
 * larger event in its intake job forever.
 */
export const SPILL_MAX_MESSAGE_BYTES = 96 * 1024 * 1024;

/**
 * Kafka reachable and the spill topic present: created with SPILLWAY_SPILL_PARTITIONS partitions
 * (or `partitions`), SPILLWAY_SPILL_REPLICATION replicas (default min(3, brokers)) and
 * `min.insync.replicas` one less than that (at least 1), so an acknowledged spill (acks=-1) survives
 * the loss of a broker. An existing topic keeps its settings; if they are weaker than asked, one
 * warning line names the variable. Its `max.message.bytes` is raised to SPILL_MAX_MESSAGE_BYTES if smaller.
 */
export async function ensureSpillTopic(rt: Runtime, partitions = rt.config.spillPartitions): Promise<void> {
  // A topic created a moment ago (by this call or a peer starting at the same time) can answer
  // "does not host this topic-partition" until its leaders settle: a retriable error, retried for
  // up to ENSURE_TOPIC_MS before start gives up.
  const deadline = Date.now() + ENSURE_TOPIC_MS;
  for (let n = 0; ; n++) {
    try {
      return await ensureSpillTopicOnce(rt, partitions);
    } catch (err) {
      const cause = (err as { cause?: { retriable?: boolean } }).cause;
      if (!cause?.retriable || Date.now() + retryDelayMs(n) > deadline) throw err;
      await sleep(retryDelayMs(n));
    }
  }
}

const ENSURE_TOPIC_MS = 30_000;

async function ensureSpillTopicOnce(rt: Runtime, partitions: number): Promise<void> {
  const admin = rt.kafka.admin({ retry: { retries: 3, initialRetryTime: 300 } });
  const topic = rt.config.spillTopic;
  const maxMessage = { name: 'max.message.bytes', value: String(SPILL_MAX_MESSAGE_BYTES) };
  try {
    await admin.connect();
    const brokers = (await admin.describeCluster()).brokers.length;
    const replication = rt.config.spillReplication ?? Math.min(3, brokers);
    if (replication > brokers)
      throw errors.config(
        `SPILLWAY_SPILL_REPLICATION: ${replication} replicas asked, but the Kafka cluster has ${brokers} broker(s)`,
      );
    const minIsr = { name: 'min.insync.replicas', value: String(Math.max(1, replication - 1)) };
    const topics = await admin.listTopics();
    if (!topics.includes(topic)) {
      await admin.createTopics({
        waitForLeaders: true,
        topics: [
          {
            topic,
            numPartitions: partitions,
            replicationFactor: replication,
            configEntries: [maxMessage, minIsr],
          },
        ],
      });
      rt.logger.info({ topic, partitions, replication, minIsr: minIsr.value }, 'created spill topic');
    } else {
      const [described, meta] = await Promise.all([
        admin.describeConfigs({
          includeSynonyms: false,
          resources: [
            { type: ConfigResourceTypes.TOPIC, name: topic, configNames: [maxMessage.name, minIsr.name] },
          ],
        }),
        admin.fetchTopicMetadata({ topics: [topic] }),
      ]);
      const entry = (name: string) =>
        Number(described.resources[0]?.configEntries.find((e) => e.configName === name)?.configValue);
      const haveReplicas = Math.min(...(meta.topics[0]?.partitions ?? []).map((p) => p.replicas.length));
      const haveIsr = entry(minIsr.name);
      if (haveReplicas < replication || !(haveIsr >= Number(minIsr.value)))
        rt.logger.warn(
          `SPILLWAY_SPILL_REPLICATION: spill topic ${topic} exists with ${haveReplicas} replica(s) and min.insync.replicas ${haveIsr}, weaker than the ${replication} and ${minIsr.value} asked; reassign its partitions to make spills survive a broker loss`,
        );
      if (!(entry(maxMessage.name) >= SPILL_MAX_MESSAGE_BYTES)) {
        await admin.alterConfigs({
          validateOnly: false,
          resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [maxMessage] }],
        });
        rt.logger.info(
          { topic, maxMessageBytes: SPILL_MAX_MESSAGE_BYTES },
          "raised the spill topic's max.message.bytes",
        );
      }
    }
  } catch (err) {
    if ((err as { code?: string }).code === 'SPW_ERR_CONFIG') throw err;
    throw errors.unavailable(`Kafka at SPILLWAY_KAFKA_BROKERS does not answer: ${(err as Error).message}`, {
      cause: err,
    });
  } finally {
    await admin.disconnect().catch(() => {});
  }
}
