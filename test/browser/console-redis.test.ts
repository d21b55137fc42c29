import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { PrivateRedis } from '../helpers/redis-server.ts';
import { dropSpillTopic } from '../helpers/router-fixtures.ts';
import {
  apiClient,
  launchChromium,
  type RunningSpillway,
  screenshot,
  seriousA11yViolations,
  startSpillway,
  waitForText,
} from './support.ts';

/**
 * Scenario 5: with Redis stopped, the console shows a "Redis unavailable, retrying" banner (not a
 * blank page), and the banner clears by itself when Redis is back. Runs a real `spillway start` on a
 * private redis-server (never the shared one) that the test stops and starts again.
 */
let redis: PrivateRedis;
let spillway: RunningSpillway;
let browser: Browser;
let env: Record<string, string>;

beforeAll(async () => {
  redis = new PrivateRedis(0, { aof: 'always' });
  await redis.start();
  env = testEnv({ SPILLWAY_REDIS_URL: redis.url, SPILLWAY_INGEST_BACKEND: 'node' });
  spillway = await startSpillway(env);
  browser = await launchChromium();
}, 120_000);

afterAll(async () => {
  await browser?.close().catch(() => {});
  await spillway?.stop();
  await redis?.destroy();
  if (env) await dropSpillTopic(env.SPILLWAY_KAFKA_BROKERS!.split(','), env.SPILLWAY_SPILL_TOPIC!);
});

describe('console with Redis down', { timeout: 240_000 }, () => {
  it('5. shows the "Redis unavailable, retrying" banner while Redis is stopped, and clears it when it is back', async () => {
    const token = env.SPILLWAY_ADMIN_TOKEN!;
    const api = apiClient(spillway.base, token);
    expect((await api('POST', '/v1/tenants', { id: 'redis-down' })).status).toBe(201);

    const ctx = await browser.newContext({ viewport: { width: 1280, height: 700 } });
    // CI runs this beside the rest of the suite on 2 cores: be patient with each step.
    ctx.setDefaultTimeout(60_000);
    const page = await ctx.newPage();
    await page.goto(`${spillway.base}/console`);
    await page.getByLabel('Admin token or tenant API key').fill(token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await waitForText(page, 'tr[data-tenant="redis-down"] td[data-field="status"]', 'active');
    const banner = page.locator('#banner');
    expect(await banner.isHidden()).toBe(true);

    await redis.stop();
    // The overview's stream reports the outage: banner up, last numbers still on screen.
    await banner.waitFor({ state: 'visible', timeout: 40_000 });
    expect(await banner.textContent()).toBe('Redis unavailable, retrying…');
    expect(await page.locator('tr[data-tenant="redis-down"]').isVisible()).toBe(true);
    expect(await seriousA11yViolations(page)).toEqual([]);
    await screenshot(page, 'redis-banner');

    // A page opened during the outage shows the API's words, not a blank page, and retries.
    await page.getByRole('link', { name: 'redis-down', exact: true }).click();
    await page.getByText('storage (Redis) is unavailable; retry shortly').waitFor({ timeout: 40_000 });
    expect(await banner.isVisible()).toBe(true);

    await redis.start();
    await page.getByRole('heading', { name: 'Tenant redis-down' }).waitFor({ timeout: 60_000 });
    await banner.waitFor({ state: 'hidden', timeout: 60_000 });
    await waitForText(page, '#stats [data-field="status"]', 'active');
    await ctx.close();
  });
});
