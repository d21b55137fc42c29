import { existsSync, mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import axe from 'axe-core';
import { type Browser, chromium, type Page } from 'playwright-core';
import { type Spawned, spawnSpillway } from '../helpers/spawn.ts';
import { waitFor } from '../helpers/wait.ts';

/** Where the tests write the console's screenshots (linked from the README). */
export const SHOTS_DIR = fileURLToPath(new URL('../../docs/console/', import.meta.url));

/**
 * Debian's `chromium` (infra/local/deps.sh installs it). Playwright's own browser downloads cannot
 * be fetched here, so playwright-core drives the system one; SPILLWAY_CHROMIUM overrides the path.
 */
export async function launchChromium(): Promise<Browser> {
  const executablePath = process.env.SPILLWAY_CHROMIUM ?? '/usr/bin/chromium';
  if (!existsSync(executablePath))
    throw new Error(
      `no Chromium at ${executablePath}: run infra/local/deps.sh (installs Debian's chromium) or set SPILLWAY_CHROMIUM`,
    );
  // --no-sandbox: the suite runs as root, where Chromium's sandbox refuses to start.
  return chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}

/**
 * A real `spillway start` child process; resolves once it printed its admin URL (and, for a role
 * with ingest, its ingest URL: the two lines are separate writes and may arrive apart).
 */
export interface RunningSpillway {
  proc: Spawned;
  base: string;
  ingestPort: number | undefined;
  stop(): Promise<void>;
}

export async function startSpillway(env: Record<string, string>, role = 'all'): Promise<RunningSpillway> {
  const proc = spawnSpillway(['start', '--role', role], env);
  const withIngest = role === 'all' || role === 'ingest';
  const m = (await waitFor(
    () => {
      if (proc.child.exitCode !== null)
        throw new Error(`spillway start exited ${proc.child.exitCode}: ${proc.stderr()}${proc.stdout()}`);
      const out = proc.stdout();
      if (withIngest && !/ingest:\s+http:\/\/[^:]+:\d+/.test(out)) return null;
      return /admin:\s+(http:\/\/\S+)/.exec(out);
    },
    'spillway start to print its URLs',
    60_000,
  )) as RegExpExecArray;
  const ingest = /ingest:\s+http:\/\/[^:]+:(\d+)/.exec(proc.stdout());
  return {
    proc,
    base: m[1]!,
    ingestPort: ingest ? Number(ingest[1]) : undefined,
    async stop() {
      if (proc.child.exitCode !== null) return;
      proc.child.kill('SIGTERM');
      const killer = setTimeout(() => proc.child.kill('SIGKILL'), 15_000);
      await proc.exited;
      clearTimeout(killer);
    },
  };
}

/**
 * A webhook receiver on 127.0.0.1:0: `/fail...` answers 422 with a body, anything else 200. A 4xx is
 * retried and dead-lettered like a 5xx but does not trip the endpoint's breaker (which would hold
 * the remaining deliveries for its 30 s reset), so a test can fill the DLQ in a second.
 */
export interface Receiver {
  base: string;
  /** path → webhook-ids answered 2xx there, in arrival order. */
  got: Map<string, string[]>;
  /** webhook-ids answered 422 on /fail. */
  failed: string[];
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const got = new Map<string, string[]>();
  const failed: string[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const id = String(req.headers['webhook-id']);
      const path = (req.url ?? '/').split('?')[0]!;
      if (path.startsWith('/fail')) {
        failed.push(id);
        res.writeHead(422, { 'content-type': 'text/plain' }).end('unknown field "total"');
        return;
      }
      got.set(path, [...(got.get(path) ?? []), id]);
      res.writeHead(200).end('ok');
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    got,
    failed,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** The admin API, as the test's own (non-browser) client. */
export function apiClient(base: string, token: string) {
  // biome-ignore lint/suspicious/noExplicitAny: test code reads whatever JSON the route answers
  return async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const res = await fetch(base + path, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  };
}

/** Waits until the element matching `selector` has exactly `text` (trimmed). */
export async function waitForText(
  page: Page,
  selector: string,
  text: string,
  timeout = 60_000,
): Promise<void> {
  try {
    await page.waitForFunction(
      // Runs in the page (the repo's tsconfig has no DOM lib).
      // biome-ignore lint/suspicious/noExplicitAny: see above
      ([sel, want]) => (globalThis as any).document.querySelector(sel)?.textContent?.trim() === want,
      [selector, text],
      { timeout, polling: 100 },
    );
  } catch (err) {
    const now = await page
      .locator(selector)
      .first()
      .textContent({ timeout: 1000 })
      .catch(() => '(absent)');
    throw new Error(`${selector} never read "${text}" (it reads "${now}"): ${(err as Error).message}`);
  }
}

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: number;
}

/**
 * Runs axe-core (npm, injected into the page) and returns violations of impact serious or critical.
 * Injected by evaluation, not a <script> tag, so the page keeps its real Content-Security-Policy.
 */
export async function seriousA11yViolations(page: Page): Promise<AxeViolation[]> {
  await page.evaluate(axe.source);
  const result = await page.evaluate(async () => {
    // biome-ignore lint/suspicious/noExplicitAny: axe is a global the injected script defines
    const g = globalThis as any;
    const r = await g.axe.run(g.document, { resultTypes: ['violations'] });
    return r.violations.map((v: { id: string; impact: string | null; help: string; nodes: unknown[] }) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.length,
    }));
  });
  return (result as AxeViolation[]).filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SHOTS_DIR, { recursive: true });
  await page.screenshot({ path: `${SHOTS_DIR}${name}.png`, fullPage: true });
}
