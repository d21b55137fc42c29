/**
 * What a new connection on the ingest port speaks, decided from its first bytes (docs/ingest.md,
 * "One port"). The io_uring core makes the same first cut in C (`spw_classify_first` in ring.c):
 * printable ASCII (HTTP/1.1) stays on the ring, anything else comes here.
 */

/** The HTTP/2 connection preface a prior-knowledge (h2c) client opens with (RFC 9113 §3.4). */
export const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/** How an SSH identification string starts (RFC 4253 §4.2). */
const SSH = Buffer.from('SSH-', 'latin1');

export type ConnectionClass =
  /** A TLS handshake record (0x16, version 3.x): a ClientHello. */
  | 'tls'
  /** The HTTP/2 preface in the clear. */
  | 'h2c'
  /**
   * Printable ASCII: a request line, or text the HTTP/1.1 parser answers with 400 (a client
   * speaking broken HTTP is told so; only bytes that are not text at all are closed unanswered).
   */
  | 'http1'
  /** An SSH identification string (`SSH-2.0-...`): someone scanning the port. */
  | 'ssh'
  /** Anything else: a first byte that is not printable ASCII. */
  | 'unknown';

/**
 * Classifies the first bytes of a connection; `undefined` when they could still be more than one
 * thing (wait for more, bounded by the caller's headers timeout). Decided on at most 24 bytes.
 */
export function classifyFirstBytes(data: Buffer): ConnectionClass | undefined {
  if (data.length === 0) return undefined;
  if (data[0] === 0x16) {
    if (data.length < 2) return undefined;
    return data[1] === 0x03 ? 'tls' : 'unknown';
  }
  const n = Math.min(data.length, H2_PREFACE.length);
  if (data.subarray(0, n).equals(H2_PREFACE.subarray(0, n))) return n < H2_PREFACE.length ? undefined : 'h2c';
  const k = Math.min(data.length, SSH.length);
  if (data.subarray(0, k).equals(SSH.subarray(0, k))) return k < SSH.length ? undefined : 'ssh';
  return data[0]! >= 0x20 && data[0]! <= 0x7e ? 'http1' : 'unknown';
}
