/**
 * One request through the IngestHandler, the same for node:http and node:http2 (./h1.ts, ./h2.ts):
 * the hard cap on a declared length, `begin`, the body streamed into the sink under its cap (never
 * truncated), the answer once the sink has made the event durable. What differs — how an answer is
 * sent, and how a connection or stream is let go when its body was not read — is the caller's.
 */
import type { Readable } from 'node:stream';
import { errors } from '@spillway/shared';
import { errorResponse } from '../errors.ts';
import type { IngestHandler, IngestResponse, RequestHead } from '../server.ts';

/**
 * `unread`: answered before the body was read to its end (refused on the headers, or past its cap);
 * `done`: the body was read and the sink answered; `failed`: the sink failed after the body was read.
 */
export type AnswerKind = 'unread' | 'done' | 'failed';

export interface Exchange {
  /** The request body as it arrives (an IncomingMessage, an Http2Stream). */
  body: Readable;
  answer(r: IngestResponse, kind: AnswerKind): void;
  /** The client went away while `begin` was deciding. */
  gone(): boolean;
  /** Why the body stopped early when it closed before its end (default `client_gone`). */
  closedReason?(): string;
}

const tooLarge = (limit: number): IngestResponse =>
  errorResponse(errors.tooLarge(`body over ${limit} bytes`));
const internal = (): IngestResponse => errorResponse(errors.internal('ingest failed'));

export async function serveExchange(
  handler: IngestHandler,
  head: RequestHead,
  hardMax: number,
  ex: Exchange,
): Promise<void> {
  if (head.contentLength !== undefined && head.contentLength > hardMax)
    return ex.answer(tooLarge(hardMax), 'unread');
  let decision: Awaited<ReturnType<IngestHandler['begin']>>;
  try {
    decision = await handler.begin(head);
  } catch {
    // The pipeline answers its own failures; this is a bug, answered honestly.
    return ex.answer(internal(), 'unread');
  }
  if ('reject' in decision) return ex.answer(decision.reject, 'unread');
  const sink = decision.accept;
  if (ex.gone()) return sink.abort('client_gone');
  const limit = Math.min(sink.maxBodyBytes, hardMax);
  const { body } = ex;
  let received = 0;
  let finished = false;
  const onData = (chunk: Buffer) => {
    if (finished) return;
    received += chunk.length;
    if (received > limit) {
      // Never truncated: the request is refused whole.
      finished = true;
      body.off('data', onData);
      sink.abort('too_large');
      ex.answer(tooLarge(limit), 'unread');
      return;
    }
    // node:http's chunks are views into its read buffers (64 KiB a read, pipelined requests and
    // other bodies in the same one): the sink keeps what it is given (BodySink.write), so it gets
    // the body's own bytes, and a read buffer is not held alive by a slice of it.
    sink.write(Buffer.from(chunk));
  };
  body.on('data', onData);
  body.once('end', () => {
    if (finished) return;
    finished = true;
    sink.end().then(
      (r) => ex.answer(r, 'done'),
      () => ex.answer(internal(), 'failed'),
    );
  });
  body.once('close', () => {
    // 'close' also follows a normal 'end'; only a body that stopped short aborts.
    if (finished) return;
    finished = true;
    sink.abort(ex.closedReason?.() ?? 'client_gone');
  });
  body.once('error', () => {
    if (finished) return;
    finished = true;
    sink.abort('error');
  });
}
