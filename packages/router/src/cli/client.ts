import { loadCliConfig } from '@spillway/shared';

/** The operator CLI's HTTP client for the admin API (SPILLWAY_ADMIN_URL, SPILLWAY_ADMIN_TOKEN via shared config). */

/** An error answer of the admin API, carrying its `{"error":{"code","message"}}`. */
export class AdminApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(`${code} (${status}): ${message}`);
    this.name = 'AdminApiError';
    this.status = status;
    this.code = code;
  }
}

export interface AdminClientOptions {
  url?: string;
  token?: string;
  /** Per request; the admin API answers in milliseconds, a replay may take longer. */
  timeoutMs?: number;
}

export class AdminClient {
  readonly url: string;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;

  constructor(opts: AdminClientOptions = {}) {
    const env = opts.url === undefined || opts.token === undefined ? loadCliConfig() : undefined;
    this.url = (opts.url ?? env?.adminUrl ?? '').replace(/\/+$/, '');
    this.#token = opts.token ?? env?.adminToken;
    this.#timeoutMs = opts.timeoutMs ?? 60_000;
  }

  async request<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
    if (!this.#token)
      throw new Error('SPILLWAY_ADMIN_TOKEN is not set (the admin API needs the bearer token)');
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.#token}`,
      accept: 'application/json',
    };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(this.url + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
      throw new Error(`cannot reach the admin API at ${this.url} (${cause}); set SPILLWAY_ADMIN_URL`);
    }
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      throw new AdminApiError(res.status, 'bad_response', `not JSON: ${text.slice(0, 200)}`);
    }
    if (!res.ok) {
      const e = (parsed as { error?: { code?: string; message?: string } } | undefined)?.error;
      throw new AdminApiError(res.status, e?.code ?? 'http_error', e?.message ?? res.statusText);
    }
    return parsed as T;
  }

  get<T = unknown>(path: string): Promise<T> {
    return this.request<T>('GET', path);
  }
  post<T = unknown>(path: string, body?: unknown): Promise<T> {
    return this.request<T>('POST', path, body);
  }
  patch<T = unknown>(path: string, body: unknown): Promise<T> {
    return this.request<T>('PATCH', path, body);
  }
  delete(path: string): Promise<unknown> {
    return this.request('DELETE', path);
  }
}

/** Path segment: ids are validated server-side, but never let one change the path's shape. */
export const seg = (s: string): string => encodeURIComponent(s);
