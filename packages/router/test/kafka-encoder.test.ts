import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/helpers/env.ts';

// kafkajs's encoder as the router loads it, with patches/kafkajs@2.2.4.patch applied by pnpm install.
const require = createRequire(createRequire(new URL('../src/index.ts', import.meta.url)).resolve('kafkajs'));
const BROKERS = (process.env.SPILLWAY_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
type Enc = {
  buf: Buffer;
  buffer: Buffer;
  size(): number;
  bufferList(): Buffer[];
  writeVarInt(v: number): Enc;
  writeInt32(v: number): Enc;
  writeBuffer(b: Buffer): Enc;
  writeEncoder(e: Enc): Enc;
  writeArray(a: Enc[]): Enc;
};
const Encoder = require('./src/protocol/encoder.js') as new (size?: number) => Enc;
const Decoder = require('./src/protocol/decoder.js') as new (
  buf: Buffer,
) => { readVarInt(): number; readInt32(): number };

describe('kafkajs encoder (patched: pooled buffers, varints written in place, large parts embedded by reference)', () => {
  it("takes its buffers from Node's pool instead of a fresh zeroed ArrayBuffer each", () => {
    // Unpatched, Buffer.alloc: one ArrayBuffer of exactly the encoder's size per encoder (kafkajs
    // makes several per record). allocUnsafe slices small sizes out of the shared pool.
    const e = new Encoder();
    expect(e.buf.buffer.byteLength).toBe(Buffer.poolSize);
  });

  it('writes varints as the Kafka protocol defines them (zig-zag LEB128)', () => {
    const cases: [number, number[]][] = [
      [0, [0x00]],
      [-1, [0x01]],
      [1, [0x02]],
      [63, [0x7e]],
      [-64, [0x7f]],
      [64, [0x80, 0x01]],
      [150, [0xac, 0x02]],
      [300, [0xd8, 0x04]],
      [2 ** 31 - 1, [0xfe, 0xff, 0xff, 0xff, 0x0f]],
      [-(2 ** 31), [0xff, 0xff, 0xff, 0xff, 0x0f]],
    ];
    for (const [v, bytes] of cases) {
      const e = new Encoder(1).writeVarInt(v);
      expect([...e.buffer], String(v)).toEqual(bytes);
      expect(new Decoder(e.buffer).readVarInt()).toBe(v);
    }
    // Many varints past the initial size: the buffer grows and keeps what was written.
    const e = new Encoder(1);
    for (let i = 0; i < 2000; i++) e.writeVarInt(i * 977 - 500_000).writeInt32(i);
    const d = new Decoder(e.buffer);
    for (let i = 0; i < 2000; i++) {
      expect(d.readVarInt()).toBe(i * 977 - 500_000);
      expect(d.readInt32()).toBe(i);
    }
  });

  it('embeds a large encoder by reference and yields the same bytes as copying would', () => {
    // Unpatched, every writeEncoder copied the child's bytes (eight copies of a history message
    // on its way to the socket); patched, a child of 8 KiB or more is taken as it is.
    const big = new Encoder().writeBuffer(Buffer.alloc(20_000, 7));
    const small = new Encoder().writeInt32(42);
    const outer = new Encoder().writeInt32(1).writeEncoder(big).writeInt32(2).writeEncoder(small);
    const array = new Encoder().writeArray([outer, small]);
    const top = new Encoder().writeInt32(array.size()).writeEncoder(array);
    const expected = Buffer.concat([
      Buffer.from([0, 0, 0, 0]), // the size, written below
      Buffer.from([0, 0, 0, 2]), // array length
      Buffer.from([0, 0, 0, 1]),
      Buffer.alloc(20_000, 7),
      Buffer.from([0, 0, 0, 2, 0, 0, 0, 42]),
      Buffer.from([0, 0, 0, 42]),
    ]);
    expected.writeInt32BE(expected.length - 4, 0);
    expect(top.size()).toBe(expected.length);
    expect(top.buffer.equals(expected)).toBe(true);
    expect(Buffer.concat(top.bufferList()).equals(expected)).toBe(true);
    // The large part was not copied: one of the top's buffers is the child's own memory.
    expect(top.bufferList().some((b) => b.buffer === big.buf.buffer)).toBe(true);
    // Small encoders are still copied into one buffer.
    const flat = new Encoder().writeInt32(3).writeEncoder(small);
    expect(flat.bufferList()).toHaveLength(1);
  });

  it('produces records the broker accepts (it checks every batch) and reads back the same', async () => {
    const { Kafka, logLevel } = require('./index.js') as typeof import('kafkajs');
    const kafka = new Kafka({ clientId: randomPrefix('enc'), brokers: BROKERS, logLevel: logLevel.NOTHING });
    const topic = randomPrefix('enc-topic');
    const admin = kafka.admin();
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    const consumer = kafka.consumer({ groupId: randomPrefix('enc-g') });
    try {
      await admin.connect();
      await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
      await producer.connect();
      // Sizes across the encoder's initial 512 bytes, its pool limit and varint widths.
      const sizes = [0, 1, 63, 64, 127, 128, 300, 511, 512, 4095, 4096, 9000, 100_000];
      const sent = sizes.map((n, i) => ({
        key: `t-${i}`,
        value: Buffer.from(Array.from({ length: n }, (_, k) => (k * 31 + i) & 0xff)),
        headers: { h: `v${i}` },
      }));
      await producer.send({ topic, acks: -1, messages: sent });
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      const got: { key: string; value: Buffer; h: string }[] = [];
      await new Promise<void>((resolve, reject) => {
        consumer
          .run({
            eachMessage: async ({ message }) => {
              got.push({
                key: message.key!.toString(),
                value: message.value!,
                h: message.headers!.h!.toString(),
              });
              if (got.length === sent.length) resolve();
            },
          })
          .catch(reject);
      });
      expect(got.map((g) => g.key)).toEqual(sent.map((m) => m.key));
      got.forEach((g, i) => {
        expect(g.value.equals(sent[i]!.value), `record ${i}`).toBe(true);
        expect(g.h).toBe(`v${i}`);
      });
    } finally {
      await consumer.disconnect().catch(() => {});
      await producer.disconnect().catch(() => {});
      await admin.deleteTopics({ topics: [topic] }).catch(() => {});
      await admin.disconnect().catch(() => {});
    }
  }, 60_000);
});
