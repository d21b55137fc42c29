import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { serveExchange } from '../src/backends/exchange.ts';
import type { BodySink, IngestHandler, IngestResponse, RequestHead } from '../src/server.ts';

const head: RequestHead = {
  method: 'POST',
  url: '/ingest/src_x',
  headers: { 'content-type': 'application/json' },
  remoteAddress: '127.0.0.1',
  contentLength: undefined,
};

describe('serveExchange (node:http and node:http2 bodies)', () => {
  it("hands the sink a copy of each chunk: the sink keeps what it is given, and node's chunks are views of its read buffers", async () => {
    const written: Buffer[] = [];
    const sink: BodySink = {
      maxBodyBytes: 1024,
      write: (c) => void written.push(c),
      end: async () => ({ status: 202, body: { ok: true } }),
      abort: () => {},
    };
    const handler: IngestHandler = { begin: () => ({ accept: sink }) };
    const body = new PassThrough();
    const answered = new Promise<IngestResponse>((resolve) => {
      void serveExchange(handler, head, 1 << 20, {
        body,
        answer: (r) => resolve(r),
        gone: () => false,
      });
    });
    // One read buffer holding this body's bytes between other bytes, as a pipelined read does.
    const read = Buffer.alloc(11); // its own ArrayBuffer, as a socket read's is
    read.write('xx{"a":1}yy');
    const view = read.subarray(2, 9);
    await new Promise((r) => setImmediate(r));
    body.end(view);
    expect((await answered).status).toBe(202);
    expect(written).toHaveLength(1);
    expect(written[0]!.toString()).toBe('{"a":1}');
    // Its own bytes, not a view that keeps the read buffer alive or changes with it.
    expect(written[0]!.buffer).not.toBe(read.buffer);
    read.fill(0x20);
    expect(written[0]!.toString()).toBe('{"a":1}');
  });
});
