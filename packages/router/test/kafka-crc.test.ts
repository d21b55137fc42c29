import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

// kafkajs as the router loads it, with patches/kafkajs@2.2.4.patch applied by pnpm install.
const require = createRequire(new URL('../src/index.ts', import.meta.url));
const kafkajsDir = require.resolve('kafkajs').replace(/index\.js$/, '');
const crc32C = require(`${kafkajsDir}src/protocol/recordBatch/crc32C/index.js`) as ((b: Buffer) => number) & {
  native: boolean;
  ofList: (bs: Buffer[]) => number;
};
const jsCrc32C = require(`${kafkajsDir}src/protocol/recordBatch/crc32C/crc32C.js`) as (b: Buffer) => number;

describe('kafkajs record batch CRC-32C (patched to native code)', () => {
  it("uses @node-rs/crc32 and agrees with kafkajs's own JavaScript on every input", () => {
    expect(crc32C.native).toBe(true);
    // The CRC-32C check value (RFC 3720, B.4): "123456789" → 0xE3069283.
    expect(crc32C(Buffer.from('123456789'))).toBe(0xe3069283);
    expect(crc32C(Buffer.alloc(0))).toBe(0);
    for (const n of [1, 7, 8, 63, 64, 1000, 65_537, 1 << 20]) {
      const b = randomBytes(n);
      expect(crc32C(b)).toBe(jsCrc32C(b) >>> 0);
    }
  });

  it('computes the CRC of a list of buffers as of their concatenation (a record batch in parts)', () => {
    const parts = [randomBytes(5), randomBytes(9000), Buffer.alloc(0), randomBytes(100_001)];
    expect(crc32C.ofList(parts)).toBe(crc32C(Buffer.concat(parts)));
    expect(crc32C.ofList([Buffer.from('1234'), Buffer.from('56789')])).toBe(0xe3069283);
  });
});
