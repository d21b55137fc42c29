import { randomBytes } from 'node:crypto';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { freePort } from '../helpers/ports.ts';
import { dropSpillTopic } from '../helpers/router-fixtures.ts';
import { sleep, waitFor } from '../helpers/wait.ts';
import {
  apiClient,
  launchChromium,
  type Receiver,
  type RunningSpillway,
  screenshot,
  seriousA11yViolations,
  startReceiver,
  startSpillway,
  waitForText,
} from './support.ts';

/**
 * The operator console in a real browser (Debian's chromium driven by playwright-core) against a
 * real `spillway start` on the project's Redis and Kafka. The scenarios run in order on one
 * Spillway and share its tenants, as one operator's session would:
 *   1. sign in, create a tenant and an endpoint, send events, watch the counters move
 *   2. pause (confirmed) → spilled shows; resume → it drains
 *   3. an endpoint fails → the event page shows its failed attempts with the endpoint's answer;
 *      fix the URL, "recover since T" (with progress) → the attempts succeed. Also the event log's
 *      filters, the DLQ's server paging, resend, replay and purge
 *   4. a tenant key sees only its tenant; a forged URL to another tenant shows "forbidden"
 * Scenario 5 (Redis stopped → banner) is console-redis.test.ts, on a private redis-server.
 */
const SUFFIX = randomBytes(4).toString('hex');
const TID = `acme-${SUFFIX}`;
const OTHER = `other-${SUFFIX}`;
let env: Record<string, string>;
let TOKEN: string;

let spillway: RunningSpillway;
let receiver: Receiver;
let browser: Browser;
let ctx: BrowserContext;
let page: Page;
let api: ReturnType<typeof apiClient>;
const pageErrors: string[] = [];

beforeAll(async () => {
  env = testEnv({
    SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
    // Two attempts 300 ms apart, then the DLQ: scenario 3 fills it in about a second.
    SPILLWAY_RETRY_SCHEDULE: '300ms',
    SPILLWAY_INGEST_BACKEND: 'node',
    // A fixed port, as in production, so the console can show full ingest URLs.
    SPILLWAY_INGEST_PORT: String(await freePort()),
  });
  TOKEN = env.SPILLWAY_ADMIN_TOKEN!;
  receiver = await startReceiver();
  spillway = await startSpillway(env);
  api = apiClient(spillway.base, TOKEN);
  browser = await launchChromium();
  ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  // CI runs this beside the rest of the suite on 2 cores: be patient with each step.
  ctx.setDefaultTimeout(60_000);
  page = await ctx.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
}, 120_000);

afterAll(async () => {
  await browser?.close().catch(() => {});
  await spillway?.stop();
  await receiver?.close();
  if (env) await dropSpillTopic(env.SPILLWAY_KAFKA_BROKERS!.split(','), env.SPILLWAY_SPILL_TOPIC!);
});

async function sendEvents(ids: string[], type = 'order.created'): Promise<void> {
  for (const id of ids) {
    const r = await api('POST', `/v1/tenants/${TID}/events`, { id, type, payload: { id } });
    expect(r.status).toBe(202);
  }
}

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

async function confirm(button: string): Promise<void> {
  const dialog = page.getByRole('dialog');
  await dialog.waitFor({ state: 'visible' });
  await dialog.getByRole('button', { name: button, exact: true }).click();
  await dialog.waitFor({ state: 'hidden' });
}

describe('operator console', { timeout: 240_000 }, () => {
  it('1. sign in, create a tenant and an endpoint, send events: the counters move', async () => {
    await page.goto(`${spillway.base}/console`);
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    expect(await seriousA11yViolations(page)).toEqual([]);
    // A wrong token is refused in the API's own words.
    await page.getByLabel('Admin token or tenant API key').fill('not-the-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('bad token').waitFor();

    await page.getByLabel('Admin token or tenant API key').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: /^Tenants/ }).waitFor();
    // The token is in this tab's sessionStorage, never in the URL.
    expect(page.url()).not.toContain(TOKEN);
    expect(await page.evaluate(() => sessionStorage.getItem('spillway.console.token'))).toBe(TOKEN);

    await page.getByLabel('New tenant id').fill(TID);
    await page.getByLabel('Max in flight').fill('50');
    await page.getByRole('button', { name: 'Create tenant' }).click();
    await page.getByRole('heading', { name: `Tenant ${TID}` }).waitFor();
    expect(page.url()).toContain(`#/tenants/${TID}`);

    await page.locator('#new-ep-url').fill(`${receiver.base}/ok`);
    await page.locator('#new-ep-id').fill('ep-ok');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    await page.locator('tr[data-endpoint="ep-ok"]').waitFor();
    await page.getByText('Its signing secret (shown once here)').waitFor();

    // A provider source: its full ingest URL is listed.
    await page.locator('#new-src-kind').selectOption('github');
    await page.locator('#new-src-id').fill(`gh-${TID}`);
    await page.locator('#new-src-secret').fill('a-github-webhook-secret');
    await page.getByRole('button', { name: 'Add source' }).click();
    await waitForText(
      page,
      `tr[data-source="gh-${TID}"] td[data-field="ingestUrl"]`,
      `http://127.0.0.1:${spillway.ingestPort}/ingest/gh-${TID}`,
    );

    await sendEvents(ids('first', 30));
    // The live stats (SSE) on the tenant page reach 30 delivered without a reload.
    await waitForText(page, '#stats [data-field="delivered"]', '30');
    await waitForText(page, 'tr[data-endpoint="ep-ok"] td[data-field="delivered"]', '30');
    await waitForText(page, '#stats [data-field="credits"]', '0 / 50');
    // The tenant stream carries the delivery latency of each second's attempts (from the history).
    await page
      .locator('#latency-chart-now')
      .filter({ hasText: /^last: p50 \d+ ms, p95 \d+ ms, max \d+ ms over \d+ attempts$/ })
      .waitFor();
    expect(await seriousA11yViolations(page)).toEqual([]);

    // The overview shows the same numbers for the tenant's row.
    await page.getByRole('link', { name: 'Tenants', exact: true }).click();
    await waitForText(page, `tr[data-tenant="${TID}"] td[data-field="delivered"]`, '30');
    await waitForText(page, `tr[data-tenant="${TID}"] td[data-field="status"]`, 'active');

    // An API error is shown as the API words it.
    await page.getByLabel('New tenant id').fill(TID);
    await page.getByRole('button', { name: 'Create tenant' }).click();
    await page.getByText(`tenant ${TID} already exists`).waitFor();
    await page.getByText('(conflict)').waitFor();

    // Another tenant with steady traffic for a few seconds, so the overview shows rates and trends.
    await api('POST', '/v1/tenants', { id: OTHER });
    await api('POST', `/v1/tenants/${OTHER}/endpoints`, { id: 'ep', url: `${receiver.base}/other` });
    await page.locator(`tr[data-tenant="${OTHER}"]`).waitFor();
    for (let i = 0; i < 40; i++) {
      expect(
        (await api('POST', `/v1/tenants/${OTHER}/events`, { id: `o-${i}`, type: 'x', payload: {} })).status,
      ).toBe(202);
      await sleep(100); // pacing: the events arrive over 4 s, so the page shows them live
    }
    await waitForText(page, `tr[data-tenant="${OTHER}"] td[data-field="delivered"]`, '40');
    await screenshot(page, 'overview');
    expect(await seriousA11yViolations(page)).toEqual([]);
    expect(receiver.got.get('/ok')).toHaveLength(30);
  });

  it('2. pause (confirmed): spilled work shows; resume: it drains', async () => {
    await page.getByRole('link', { name: TID, exact: true }).click();
    await page.getByRole('heading', { name: `Tenant ${TID}` }).waitFor();

    // Cancel in the confirmation changes nothing.
    await page.getByRole('button', { name: 'Pause tenant' }).click();
    await confirm('Cancel');
    expect((await api('GET', `/v1/tenants/${TID}`)).body.status).toBe('active');

    await page.getByRole('button', { name: 'Pause tenant' }).click();
    await confirm('Pause');
    await waitForText(page, '#tenant-status', 'paused');
    expect((await api('GET', `/v1/tenants/${TID}`)).body.status).toBe('paused');
    // A pause reaches every worker within 1 s (CONTRACT); events sent after that are all held.
    // Deliberate: waits out that bound (the workers' view of the pause is not observable here).
    await sleep(1500);

    await sendEvents(ids('paused', 20));
    await waitForText(page, '#stats [data-field="spilled"]', '20');
    await waitForText(page, '#stats [data-field="delivered"]', '30');
    expect(receiver.got.get('/ok')).toHaveLength(30);

    await page.getByRole('button', { name: 'Resume tenant' }).click();
    await confirm('Resume');
    await waitForText(page, '#tenant-status', 'active');
    await waitForText(page, '#stats [data-field="spilled"]', '0');
    await waitForText(page, '#stats [data-field="delivered"]', '50');
    expect(new Set(receiver.got.get('/ok'))).toEqual(new Set([...ids('first', 30), ...ids('paused', 20)]));
  });

  it('3. an endpoint fails: the event shows its failed attempts and answer; fix the URL, recover since T, they succeed', async () => {
    await page.locator('#new-ep-url').fill(`${receiver.base}/fail`);
    await page.locator('#new-ep-id').fill('ep-bad');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    await page.locator('tr[data-endpoint="ep-bad"]').waitFor();

    // T: just before the endpoint starts failing.
    const T = Date.now() - 1000;
    const bad = ids('order', 30);
    await sendEvents(bad, 'order.placed');
    await waitForText(page, '#stats [data-field="dlq"]', '30');

    // The event log, filtered by type and status, newest first, paged on the server (25 a page).
    await page.locator('#events-type').fill('order.placed');
    await page.locator('#events-status').selectOption('failed');
    await page.getByRole('button', { name: 'Show events' }).click();
    await waitForText(
      page,
      '#events-info',
      'Newest events (type order.placed, status failed): 25 shown, more on the next page',
    );
    const listed = () =>
      page
        .locator('#events-table tbody tr')
        .evaluateAll((rs) => rs.map((r) => (r as unknown as { dataset: { event: string } }).dataset.event));
    const first = await listed();
    expect(first).toHaveLength(25);
    await waitForText(page, '#events-table tbody tr:first-child td[data-field="status"]', 'failed');
    await page.getByRole('button', { name: 'Next page of events' }).click();
    await waitForText(page, '#events-info', 'Older events (type order.placed, status failed): 5 shown');
    expect(new Set([...first, ...(await listed())])).toEqual(new Set(bad));

    // The DLQ, paged on the server (25 a page, cursor), filterable per endpoint.
    await waitForText(page, '#dlq-info', 'Entries 1–25 of 30');
    expect(await page.locator('#dlq-table tbody tr').count()).toBe(25);
    await page.getByRole('button', { name: 'Next page of dead letters' }).click();
    await waitForText(page, '#dlq-info', 'Entries 26–30 of 30');
    expect(await page.locator('#dlq-table tbody tr').count()).toBe(5);
    // A few seconds of the throughput and latency charts (rates need two snapshots) for the screenshot.
    await page.waitForFunction(
      // biome-ignore lint/suspicious/noExplicitAny: runs in the page
      () => (globalThis as any).document.querySelectorAll('.chart canvas').length === 2,
      undefined,
      { timeout: 30_000 },
    );
    await screenshot(page, 'tenant');
    expect(await seriousA11yViolations(page)).toEqual([]);

    // Open the event: each endpoint's attempts, with the failing endpoint's answer.
    await page.locator('#lookup-event').fill('order-7');
    await page.getByRole('button', { name: 'Find event' }).click();
    await page.getByRole('heading', { name: 'Event order-7' }).waitFor();
    const badRow = '#deliveries-table tr[data-endpoint="ep-bad"]';
    await waitForText(page, `${badRow} td[data-field="status"]`, 'failed');
    await waitForText(page, `${badRow} td[data-field="lastStatus"]`, '422');
    await waitForText(page, `${badRow} td[data-field="attempts"]`, '2');
    await waitForText(
      page,
      '#deliveries-table tr[data-endpoint="ep-ok"] td[data-field="status"]',
      'delivered',
    );
    const badAttempts = page.locator('#attempts-table tbody tr[data-endpoint="ep-bad"]');
    await waitFor(async () => (await badAttempts.count()) === 2, 'two attempts of ep-bad', 30_000);
    for (const row of await badAttempts.all()) {
      expect((await row.locator('td[data-field="response"]').textContent())?.trim()).toBe(
        'unknown field "total"',
      );
      expect((await row.locator('td[data-field="answer"]').textContent())?.trim()).toBe('422');
    }
    // Newest first: the second attempt went to the DLQ.
    await waitForText(
      page,
      '#attempts-table tbody tr[data-endpoint="ep-bad"] td[data-field="outcome"]',
      'failed · dead-lettered',
    );
    await waitForText(
      page,
      '#attempts-table tbody tr[data-endpoint="ep-ok"] td[data-field="outcome"]',
      'delivered',
    );
    expect(await seriousA11yViolations(page)).toEqual([]);

    // Fix the URL on the endpoint's page (its attempts are listed there too).
    await page.locator(badRow).getByRole('link', { name: 'ep-bad' }).click();
    await page.getByRole('heading', { name: /^Endpoint ep-bad/ }).waitFor();
    await page.locator('#endpoint-attempts-table tbody tr').first().waitFor();
    expect(await seriousA11yViolations(page)).toEqual([]);
    await page.getByLabel('URL', { exact: true }).fill(`${receiver.base}/fixed`);
    await page.getByRole('button', { name: 'Save URL' }).click();
    await page.getByText(`Endpoint ep-bad now delivers to ${receiver.base}/fixed`).waitFor();
    await page.goBack();
    await page.getByRole('heading', { name: 'Event order-7' }).waitFor();

    // Recover since T (confirmed), from the event page, with progress.
    const local = await page.evaluate((ms) => {
      const d = new Date(ms);
      const p = (n: number) => String(n).padStart(2, '0');
      return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
    }, T);
    await page.locator('#recover-since-ep-bad').fill(local);
    await page.getByRole('button', { name: 'Recover ep-bad' }).click();
    await confirm('Recover');
    await page.getByText(/^Recover console-[0-9a-f]+ started\.$/).waitFor();
    await page.getByText(/: done, 30 delivered, 0 failed again, of 30\.$/).waitFor();
    expect(
      await page
        .locator('#op-progress')
        .evaluate(
          (el) =>
            (el as unknown as { value: number; max: number }).value / (el as unknown as { max: number }).max,
        ),
    ).toBe(1);
    // The attempts succeed: the newest attempt of ep-bad is delivered, by the recover.
    await waitForText(page, `${badRow} td[data-field="status"]`, 'delivered');
    await waitForText(
      page,
      '#attempts-table tbody tr[data-endpoint="ep-bad"] td[data-field="outcome"]',
      'delivered',
    );
    expect(
      await page.locator('#attempts-table tbody tr[data-endpoint="ep-bad"][data-outcome="failed"]').count(),
    ).toBe(2);
    await waitFor(
      () => (receiver.got.get('/fixed')?.length ?? 0) >= 30,
      'the recovered events at /fixed',
      30_000,
    );
    expect(new Set(receiver.got.get('/fixed'))).toEqual(new Set(bad));
    expect((await api('GET', `/v1/tenants/${TID}/stats`)).body.dlq).toBe(0);

    // Resend to one endpoint (confirmed, idempotent request id): ep-ok gets order-7 again.
    await page.getByRole('button', { name: 'Resend to endpoint ep-ok' }).click();
    await confirm('Resend');
    await page.getByText(/^Resend of order-7 to ep-ok: done, 1 delivered, 0 failed again, of 1\.$/).waitFor();
    await waitFor(
      () => receiver.got.get('/ok')?.filter((x) => x === 'order-7').length === 2,
      'order-7 resent to /ok',
      30_000,
    );
    await screenshot(page, 'event');
    expect(await seriousA11yViolations(page)).toEqual([]);

    // Replay with progress, then purge (each confirmed): 3 failures replayed, 2 purged.
    expect(
      (await api('PATCH', `/v1/tenants/${TID}/endpoints/ep-bad`, { url: `${receiver.base}/fail` })).status,
    ).toBe(200);
    await page.getByRole('link', { name: `← Tenant ${TID}` }).click();
    await page.getByRole('heading', { name: `Tenant ${TID}` }).waitFor();
    await sendEvents(ids('again', 3));
    await waitForText(page, '#stats [data-field="dlq"]', '3');
    await waitForText(page, '#dlq-info', 'Entries 1–3 of 3');
    await page.getByRole('textbox', { name: 'URL of endpoint ep-bad' }).fill(`${receiver.base}/fixed`);
    await page.getByRole('button', { name: 'Save URL of endpoint ep-bad' }).click();
    await page.getByText(`Endpoint ep-bad now delivers to ${receiver.base}/fixed`).waitFor();
    await page.locator('#dlq-endpoint').selectOption('ep-bad');
    await page.getByRole('button', { name: 'Replay', exact: true }).click();
    await confirm('Replay');
    await waitForText(page, '#dlq-progress-text', 'Replayed 3 of 3.');
    await waitForText(page, '#stats [data-field="dlq"]', '0');
    await waitFor(
      () => ids('again', 3).every((x) => receiver.got.get('/fixed')?.includes(x)),
      'the replayed events at /fixed',
      30_000,
    );
    expect(
      (await api('PATCH', `/v1/tenants/${TID}/endpoints/ep-bad`, { url: `${receiver.base}/fail` })).status,
    ).toBe(200);
    await sendEvents(ids('dropped', 2));
    await waitForText(page, '#stats [data-field="dlq"]', '2');
    await page.getByRole('button', { name: 'Purge', exact: true }).click();
    await confirm('Cancel');
    expect((await api('GET', `/v1/tenants/${TID}/dlq`)).body.total).toBe(2);
    await page.getByRole('button', { name: 'Purge', exact: true }).click();
    await confirm('Purge');
    await page.getByText('Purged 2 entries.').waitFor();
    await waitForText(page, '#stats [data-field="dlq"]', '0');
    expect((await api('GET', `/v1/tenants/${TID}/dlq`)).body.total).toBe(0);
    expect(
      (await api('PATCH', `/v1/tenants/${TID}/endpoints/ep-bad`, { url: `${receiver.base}/fixed` })).status,
    ).toBe(200);

    // Pause and resume one endpoint from the tenant page.
    await page.getByRole('button', { name: 'Pause endpoint ep-ok' }).click();
    await waitForText(page, 'tr[data-endpoint="ep-ok"] td[data-field="status"]', 'paused');
    expect((await api('GET', `/v1/tenants/${TID}/endpoints/ep-ok`)).body.status).toBe('paused');
    await page.getByRole('button', { name: 'Resume endpoint ep-ok' }).click();
    await waitForText(page, 'tr[data-endpoint="ep-ok"] td[data-field="status"]', 'active');
    expect((await api('GET', `/v1/tenants/${TID}/endpoints/ep-ok`)).body.status).toBe('active');

    // Edit the limits: the API has them, and the live credit limit follows.
    await page.getByLabel('Max in flight (credits)').fill('60');
    await page.getByLabel('Rate per second (empty = unlimited)').fill('500');
    await page.getByLabel('Burst').fill('800');
    await page.getByRole('button', { name: 'Save limits' }).click();
    await page.getByText('Saved: max in flight 60, concurrency 16, rate 500/s (burst 800).').waitFor();
    expect((await api('GET', `/v1/tenants/${TID}`)).body.limits).toEqual({
      maxInFlight: 60,
      concurrency: 16,
      rate: { perSecond: 500, burst: 800 },
    });
    await waitForText(page, '#stats [data-field="credits"]', '0 / 60');
    await page.getByLabel('Rate per second (empty = unlimited)').fill('');
    await page.getByRole('button', { name: 'Save limits' }).click();
    await page.getByText('Saved: max in flight 60, concurrency 16, rate unlimited.').waitFor();
    expect((await api('GET', `/v1/tenants/${TID}`)).body.limits.rate).toBeUndefined();
    expect(pageErrors).toEqual([]);
  });

  it('4. a tenant key sees only its tenant, read-only; a forged URL to another tenant shows forbidden', async () => {
    await page.goto(`${spillway.base}/console#/tenants/${TID}`);
    await page.getByRole('heading', { name: `Tenant ${TID}` }).waitFor();
    await page.getByLabel('Name', { exact: true }).fill('console test');
    await page.getByRole('button', { name: 'Create key' }).click();
    const key = (await page.locator('#new-key-value').textContent())!;
    expect(key).toMatch(/^spk_/);

    // A fresh context: its own sessionStorage, as another person's browser.
    const tctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    // CI runs this beside the rest of the suite on 2 cores: be patient with each step.
    tctx.setDefaultTimeout(60_000);
    const tpage = await tctx.newPage();
    try {
      await tpage.goto(`${spillway.base}/console`);
      await tpage.getByLabel('Admin token or tenant API key').fill(key);
      await tpage.getByRole('button', { name: 'Sign in' }).click();
      await tpage.getByRole('heading', { name: `Tenant ${TID}` }).waitFor();
      // 50 to ep-ok, 30 to each endpoint, the resend, then 3 to each and 2 to ep-ok.
      expect((await api('GET', `/v1/tenants/${TID}/stats`)).body.delivered).toBe(119);
      await waitForText(tpage, '#stats [data-field="delivered"]', '119');
      // Its event log.
      await tpage.locator('#events-table tbody tr').first().waitFor();
      // Read-only: no pause, no limits, keys or DLQ controls; no list of all tenants.
      expect(await tpage.getByRole('button', { name: /Pause tenant|Resume tenant/ }).count()).toBe(0);
      expect(await tpage.locator('#limits, #keys, #dlq').count()).toBe(0);
      expect(await tpage.getByRole('link', { name: 'Tenants', exact: true }).count()).toBe(0);
      await tpage.goto(`${spillway.base}/console#/`);
      await tpage.waitForURL(`**/console#/tenants/${TID}`);
      // It can open its own events.
      await tpage.goto(`${spillway.base}/console#/tenants/${TID}/events/order-7`);
      await tpage.getByRole('heading', { name: 'Event order-7' }).waitFor();
      await waitForText(tpage, 'tr[data-endpoint="ep-bad"] td[data-field="status"]', 'delivered');
      // Read-only, plus resend: no "recover since"; resend to all endpoints works.
      expect(await tpage.locator('#recover').count()).toBe(0);
      await tpage.getByRole('button', { name: 'Resend to all endpoints' }).click();
      const tdialog = tpage.getByRole('dialog');
      await tdialog.getByRole('button', { name: 'Resend', exact: true }).click();
      await tpage.getByText(/^Resend of order-7: done, 2 delivered, 0 failed again, of 2\.$/).waitFor();
      await waitFor(
        () => receiver.got.get('/fixed')?.filter((x) => x === 'order-7').length === 2,
        'order-7 resent to /fixed',
        30_000,
      );

      // Forged URLs to another tenant's pages.
      await tpage.goto(`${spillway.base}/console#/tenants/${OTHER}`);
      await tpage.getByRole('heading', { name: 'Forbidden' }).waitFor();
      await tpage.getByText('a tenant API key can only reach its own tenant').waitFor();
      await tpage.goto(`${spillway.base}/console#/tenants/${OTHER}/events/order-7`);
      await tpage.getByRole('heading', { name: 'Forbidden' }).waitFor();
      // And the overview stream refuses a tenant key outright.
      const r = await fetch(`${spillway.base}/console/api/stream`, {
        headers: { authorization: `Bearer ${key}` },
      });
      expect(r.status).toBe(403);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('forbidden');

      // The admin revokes the key (confirmed): the tenant's console is signed out with the API's words.
      const keyId = (await page.locator('#keys-table tbody tr').last().getAttribute('data-key'))!;
      await page.getByRole('button', { name: `Revoke key ${keyId}` }).click();
      await confirm('Revoke');
      await page.getByText(`Key ${keyId} revoked.`).waitFor();
      expect(await page.locator(`tr[data-key="${keyId}"]`).count()).toBe(0);
      await tpage.goto(`${spillway.base}/console#/tenants/${TID}`);
      await tpage.getByRole('heading', { name: 'Sign in' }).waitFor();
      await tpage.getByText('bad token').waitFor();
      expect(await tpage.evaluate(() => sessionStorage.getItem('spillway.console.token'))).toBeNull();
    } finally {
      await tctx.close();
    }
  });
});
