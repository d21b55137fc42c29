/**
 * The conformance suite's client, one per transport the ingest port speaks: HTTP/1.1 in the clear
 * (fetch), HTTP/1.1 over TLS (node:https, ALPN http/1.1), HTTP/2 over TLS (node:http2, ALPN h2) and
 * prior-knowledge h2c (node:http2 on http://). Every one trusts only the test CA it is given.
 */
import http2 from 'node:http2';
import https from 'node:https';

export type Transport = 'http1' | 'tls-http1' | 'tls-h2' | 'h2c';

export interface Reply {
  status: number;
  headers: Headers;
  json: Record<string, unknown> | undefined;
}

export interface Client {
  /** Base URL of a server listening on `port`. */
  base(port: number): string;
  post(url: string, body: Buffer | string, headers?: Record<string, string>, method?: string): Promise<Reply>;
  close(): void;
}

function parse(text: string): Record<string, unknown> | undefined {
  try {
    return text ? (JSON.parse(text) as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function toHeaders(h: Record<string, string | string[] | number | undefined>): Headers {
  const out = new Headers();
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || k.startsWith(':')) continue;
    for (const one of Array.isArray(v) ? v : [v]) out.append(k, String(one));
  }
  return out;
}

const fetchClient: Client = {
  base: (port) => `http://127.0.0.1:${port}`,
  async post(url, body, headers = {}, method = 'POST') {
    const res = await fetch(url, {
      method,
      body: method === 'GET' ? undefined : body,
      headers: { 'content-type': 'application/json', ...headers },
    });
    return { status: res.status, headers: res.headers, json: parse(await res.text()) };
  },
  close() {},
};

function httpsClient(ca: string): Client {
  const agent = new https.Agent({ keepAlive: true, ca, ALPNProtocols: ['http/1.1'] });
  return {
    base: (port) => `https://127.0.0.1:${port}`,
    post(url, body, headers = {}, method = 'POST') {
      return new Promise((resolve, reject) => {
        const req = https.request(
          url,
          { method, agent, headers: { 'content-type': 'application/json', ...headers } },
          (res) => {
            if (res.socket && (res.socket as { alpnProtocol?: string | false }).alpnProtocol !== 'http/1.1')
              return reject(new Error('the TLS client did not negotiate http/1.1'));
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (d: string) => {
              text += d;
            });
            res.on('end', () =>
              resolve({ status: res.statusCode ?? 0, headers: toHeaders(res.headers), json: parse(text) }),
            );
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.end(method === 'GET' ? undefined : body);
      });
    },
    close: () => agent.destroy(),
  };
}

/** One HTTP/2 session per origin, reused by every request (the way providers' clients do). */
function h2Client(scheme: 'https' | 'http', ca?: string): Client {
  const sessions = new Map<string, http2.ClientHttp2Session>();
  const session = (origin: string) => {
    let s = sessions.get(origin);
    if (!s || s.closed || s.destroyed) {
      s = http2.connect(origin, ca ? { ca } : {});
      s.on('error', () => {});
      sessions.set(origin, s);
    }
    return s;
  };
  return {
    base: (port) => `${scheme}://127.0.0.1:${port}`,
    post(url, body, headers = {}, method = 'POST') {
      const u = new URL(url);
      return new Promise((resolve, reject) => {
        const s = session(u.origin);
        const req = s.request({
          ':method': method,
          ':path': `${u.pathname}${u.search}`,
          'content-type': 'application/json',
          ...headers,
        });
        let status = 0;
        let respHeaders: Headers = new Headers();
        let text = '';
        req.setEncoding('utf8');
        req.on('response', (h) => {
          status = Number(h[':status']);
          respHeaders = toHeaders(h);
        });
        req.on('data', (d: string) => {
          text += d;
        });
        req.on('end', () => {
          if (scheme === 'https' && s.alpnProtocol !== 'h2')
            return reject(new Error('the TLS client did not negotiate h2'));
          resolve({ status, headers: respHeaders, json: parse(text) });
        });
        req.on('error', reject);
        req.end(method === 'GET' ? undefined : body);
      });
    },
    close() {
      for (const s of sessions.values()) s.close();
      sessions.clear();
    },
  };
}

/** The client for `transport`; the TLS ones need the test CA (`ca`). */
export function makeClient(transport: Transport, ca?: string): Client {
  switch (transport) {
    case 'http1':
      return fetchClient;
    case 'tls-http1':
      return httpsClient(ca ?? '');
    case 'tls-h2':
      return h2Client('https', ca);
    case 'h2c':
      return h2Client('http');
  }
}
