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
 *   3. an endpoint fails → the event page shows the failed deliveries with the endpoint's status;
 *      fix the URL, replay its DLQ (paged, with progress) → the event is delivered
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

  it('3. a failing endpoint: the event shows its failures; fix the URL, replay its DLQ, it is delivered', async () => {
    await page.locator('#new-ep-url').fill(`${receiver.base}/fail`);
    await page.locator('#new-ep-id').fill('ep-bad');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    await page.locator('tr[data-endpoint="ep-bad"]').waitFor();

    const bad = ids('order', 30);
    await sendEvents(bad);
    await waitForText(page, '#stats [data-field="dlq"]', '30');

    // Event lookup from the tenant page.
    await page.getByLabel('Event id').fill('order-7');
    await page.getByRole('button', { name: 'Find event' }).click();
    await page.getByRole('heading', { name: 'Event order-7' }).waitFor();
    const badRow = 'tr[data-endpoint="ep-bad"]';
    await waitForText(page, `${badRow} td[data-field="status"]`, 'failed');
    await waitForText(page, `${badRow} td[data-field="lastStatus"]`, '422');
    await waitForText(page, `${badRow} td[data-field="attempts"]`, '2');
    await waitForText(page, 'tr[data-endpoint="ep-ok"] td[data-field="status"]', 'delivered');
    await screenshot(page, 'event');
    expect(await seriousA11yViolations(page)).toEqual([]);

    // Back on the tenant page: the DLQ is paged (25 a page), filterable per endpoint.
    await page.getByRole('link', { name: `← Tenant ${TID}` }).click();
    await page.getByRole('heading', { name: `Tenant ${TID}` }).waitFor();
    await waitForText(page, '#dlq-info', 'Entries 1–25 of 30');
    expect(await page.locator('#dlq-table tbody tr').count()).toBe(25);
    // A few seconds of the throughput chart (rates need two snapshots) before the screenshot.
    await page.waitForFunction(
      // biome-ignore lint/suspicious/noExplicitAny: runs in the page
      () => (globalThis as any).document.querySelectorAll('.chart canvas').length > 0,
      undefined,
      { timeout: 30_000 },
    );
    await page.waitForTimeout(2500);
    await screenshot(page, 'tenant');
    expect(await seriousA11yViolations(page)).toEqual([]);
    await page.getByRole('button', { name: 'Next page' }).click();
    await waitForText(page, '#dlq-info', 'Entries 26–30 of 30');
    expect(await page.locator('#dlq-table tbody tr').count()).toBe(5);

    // Fix the endpoint's URL, then replay its dead letters (confirmed) with a progress bar.
    await page.getByRole('textbox', { name: 'URL of endpoint ep-bad' }).fill(`${receiver.base}/fixed`);
    await page.getByRole('button', { name: 'Save URL of endpoint ep-bad' }).click();
    await page.getByText(`Endpoint ep-bad now delivers to ${receiver.base}/fixed`).waitFor();
    await page.locator('#dlq-endpoint').selectOption('ep-bad');
    await page.getByRole('button', { name: 'Replay', exact: true }).click();
    await confirm('Replay');
    await waitForText(page, '#dlq-progress-text', 'Replayed 30 of 30.');
    expect(
      await page
        .locator('#dlq-progress')
        .evaluate(
          (el) =>
            (el as unknown as { value: number; max: number }).value / (el as unknown as { max: number }).max,
        ),
    ).toBe(1);
    await waitForText(page, '#stats [data-field="dlq"]', '0');
    await waitFor(
      () => (receiver.got.get('/fixed')?.length ?? 0) >= 30,
      'the replayed events at /fixed',
      30_000,
    );
    expect(new Set(receiver.got.get('/fixed'))).toEqual(new Set(bad));

    await page.getByLabel('Event id').fill('order-7');
    await page.getByRole('button', { name: 'Find event' }).click();
    await waitForText(page, `${badRow} td[data-field="status"]`, 'delivered');

    // Recover from the event page itself: the endpoint breaks again, one event fails, the URL is
    // fixed, and "Replay DLQ" on that event's failed delivery brings it to delivered.
    expect(
      (await api('PATCH', `/v1/tenants/${TID}/endpoints/ep-bad`, { url: `${receiver.base}/fail` })).status,
    ).toBe(200);
    await sendEvents(['single-1']);
    // Its record exists once a worker fanned it out (202 means durable, not yet fanned out).
    await waitFor(
      async () => (await api('GET', `/v1/tenants/${TID}/events/single-1`)).status === 200,
      'single-1 fanned out',
      60_000,
    );
    await page.goto(`${spillway.base}/console#/tenants/${TID}/events/single-1`);
    await page.getByRole('heading', { name: 'Event single-1' }).waitFor();
    await waitForText(page, `${badRow} td[data-field="status"]`, 'failed');
    expect(
      (await api('PATCH', `/v1/tenants/${TID}/endpoints/ep-bad`, { url: `${receiver.base}/fixed` })).status,
    ).toBe(200);
    await page.getByRole('button', { name: 'Replay DLQ of endpoint ep-bad' }).click();
    await confirm('Replay');
    await page.getByText('Replayed 1 entries of ep-bad.').waitFor();
    await waitForText(page, `${badRow} td[data-field="status"]`, 'delivered');
    await waitFor(() => receiver.got.get('/fixed')?.includes('single-1'), 'single-1 at /fixed', 30_000);

    // Pause and resume one endpoint from the tenant page.
    await page.getByRole('link', { name: `← Tenant ${TID}` }).click();
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
      // 30 + 20 to ep-ok, then 31 to each endpoint (ep-bad's after the replays).
      await waitForText(tpage, '#stats [data-field="delivered"]', '112');
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
