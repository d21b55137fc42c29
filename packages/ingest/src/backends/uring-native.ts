/**
 * The one loader of the io_uring addon (native/build/Release/spillway_uring.node). It is loaded
 * lazily so importing the uring backend never fails on a machine without the build; operational
 * failures come back from the addon as negative errno numbers and become Errors only in
 * `uringError` below.
 */
import { createRequire } from 'node:module';
import { SpillwayError } from '@spillway/shared';

/** Tuning passed to the native core; every field is optional (defaults live in ring.c). */
export interface NativeOptions {
  host: string;
  port: number;
  reusePort?: boolean;
  maxBodyBytes?: number;
  maxHeadBytes?: number;
  maxHeaders?: number;
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  keepAliveTimeoutMs?: number;
  maxConnections?: number;
  /** Provided-buffer ring: number of buffers (power of two) and bytes per buffer. */
  bufCount?: number;
  bufSize?: number;
  ringEntries?: number;
  /** A complete request not answered within this gets 503 + close and an ABORT event. */
  answerTimeoutMs?: number;
  /** Adopt this listening socket instead of binding host:port. */
  listenFd?: number;
  /** Hand connections that do not open with an HTTP/1.1 request line up as EV_HANDOFF. */
  handoff?: boolean;
}

export const EV_HEAD = 1;
export const EV_BODY = 2;
export const EV_END = 3;
export const EV_ABORT = 4;
export const EV_CLOSED = 5;
export const EV_HANDOFF = 6;

/** Events as the glue builds them (binding.c call_js). Ids are slot * 2^32 + request sequence. */
export type NativeEvent =
  | [
      type: 1,
      id: number,
      method: string,
      url: string,
      remote: string,
      headers: string[],
      contentLength: number,
      chunked: boolean,
      /** The route key set this request's body is HMACed under on the ring thread; 0 none. */
      vset: number,
    ]
  | [type: 2, id: number, chunk: Buffer]
  /** verdict: 1 the body matched a signature, 2 it did not, 0 not verified on the ring thread. */
  | [type: 3, id: number, verdict: number]
  | [type: 4, id: number, reason: string]
  | [type: 5, id: number]
  /** A connection that is not HTTP/1.1 in the clear: its socket (now ours to close) and the bytes read. */
  | [type: 6, id: number, fd: number, initial: Buffer];

type Handle = object;

/** A route's verification as the addon takes it: [key set id ≥ 1, SPW_KIND_*, secrets (≤ 2)]. */
export type NativeVerify = [vset: number, kind: number, secrets: readonly string[]];

/** verify.h's SPW_KIND_* numbers. */
export const NATIVE_KINDS: Readonly<Record<string, number>> = {
  github: 1,
  stripe: 2,
  shopify: 3,
  standard: 4,
};

interface Binding {
  create(opts: Record<string, unknown>, onEvents: (events: NativeEvent[]) => void): Handle | number;
  listen(h: Handle): number;
  respond(h: Handle, id: number, data: Buffer, close: boolean, wake?: boolean): number;
  wake(h: Handle): number;
  cont(h: Handle, id: number, bodyCap: number): number;
  setRoutes(h: Handle, paths: string[], caps: number[], verify?: (NativeVerify | null)[]): number;
  close(h: Handle, graceMs: number, drain: boolean): number;
  listenFd(h: Handle): number;
  probe(): [number] | [number, string];
  strerror(errno: number): string;
  liveServers(): number;
}

const ADDON_PATH = '../../native/build/Release/spillway_uring.node';
let loaded: { binding: Binding } | { error: Error } | undefined;

/** The addon, or the reason it cannot be loaded (not built, wrong ABI, liburing missing). */
export function loadBinding(): { binding: Binding } | { error: Error } {
  if (!loaded) {
    try {
      loaded = { binding: createRequire(import.meta.url)(ADDON_PATH) as Binding };
    } catch (err) {
      loaded = { error: err instanceof Error ? err : new Error(String(err)) };
    }
  }
  return loaded;
}

function binding(): Binding {
  const b = loadBinding();
  if ('error' in b) {
    throw new SpillwayError(
      'SPW_ERR_URING_UNAVAILABLE',
      'internal',
      500,
      `io_uring addon not loadable (run pnpm run build): ${b.error.message}`,
      {
        cause: b.error,
      },
    );
  }
  return b.binding;
}

/** The single place an addon status code becomes an Error. */
export function uringError(op: string, rc: number): SpillwayError {
  const errno = -rc;
  const text = binding().strerror(errno);
  const err = new SpillwayError(
    'SPW_ERR_URING',
    'internal',
    500,
    `io_uring ${op} failed: ${text} (errno ${errno})`,
  );
  Object.defineProperty(err, 'errno', { value: errno, enumerable: true });
  return err;
}

function check(op: string, rc: number): number {
  if (rc < 0) throw uringError(op, rc);
  return rc;
}

/** errno of ENOTCONN on Linux: the server already stopped, so late answers are dropped quietly. */
const ENOTCONN = 107;

/** One native server instance; methods throw SpillwayError via uringError. */
export class NativeServer {
  readonly #b: Binding;
  readonly #h: Handle;

  constructor(opts: NativeOptions, onEvents: (events: NativeEvent[]) => void) {
    this.#b = binding();
    const h = this.#b.create(
      { ...opts, reusePort: opts.reusePort ? 1 : 0, handoff: opts.handoff ? 1 : 0 },
      onEvents,
    );
    if (typeof h === 'number') throw uringError('create', h);
    this.#h = h;
  }

  listen(): number {
    return check('listen', this.#b.listen(this.#h));
  }

  /**
   * Queues the answer; the ring thread is woken once for all answers given in this turn of the
   * event loop (at the next tick), not once per answer: a group commit answers tens of requests
   * at once, and each eventfd write cost a wake-up of the ring thread.
   */
  respond(id: number, data: Buffer, close: boolean): void {
    const rc = this.#b.respond(this.#h, id, data, close, false);
    if (rc !== -ENOTCONN) check('respond', rc);
    if (!this.#wakeQueued) {
      this.#wakeQueued = true;
      process.nextTick(this.#wake);
    }
  }

  #wakeQueued = false;
  readonly #wake = () => {
    this.#wakeQueued = false;
    // Not thrown from a tick (nothing could catch it): an eventfd write cannot fail short of a
    // closed server (ENOTCONN), and the next answer's wake would send these too.
    this.#b.wake(this.#h);
  };

  /** The request was accepted: body bytes flow past the pre-accept window, capped at `bodyCap` natively. */
  continue(id: number, bodyCap: number): void {
    const rc = this.#b.cont(this.#h, id, bodyCap);
    if (rc !== -ENOTCONN) check('continue', rc);
  }

  /** `verify[i]`: route i's key set id (≥ 1), its kind and live secrets; null: not verified natively. */
  setRoutes(paths: string[], caps: number[], verify?: (NativeVerify | null)[]): void {
    check('setRoutes', this.#b.setRoutes(this.#h, paths, caps, verify));
  }

  /**
   * Returns true when the server never listened (nothing will follow), false when CLOSED is coming.
   * `drain`: a handover (see CloseOptions.drain).
   */
  close(graceMs: number, drain = false): boolean {
    return check('close', this.#b.close(this.#h, graceMs, drain)) === 1;
  }

  /** The listening socket (-1 before listen or once closed). */
  listenFd(): number {
    return this.#b.listenFd(this.#h);
  }
}

/** Runs the addon's feature probe: a real ring, buffer ring registration and one multishot recv. */
export function nativeProbe(): { ok: true } | { ok: false; reason: string } {
  const b = loadBinding();
  if ('error' in b)
    return { ok: false, reason: `io_uring addon not loadable: ${b.error.message.split('\n')[0]}` };
  const [rc, step] = b.binding.probe();
  if (rc === 0) return { ok: true };
  return { ok: false, reason: `${step ?? 'probe'}: ${b.binding.strerror(-rc)} (errno ${-rc})` };
}
