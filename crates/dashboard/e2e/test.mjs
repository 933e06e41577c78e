// The dashboard in a real browser (Debian's chromium, driven by playwright-core): sign in,
// the overview, a deployment scaled 1→3 with its new pods appearing live, a pod's logs, the
// YAML editor (apply, then a conflict), a live list, delete with confirmation, and a user
// without permissions seeing the API server's 403 messages.
//
// With SCENARIO=logs instead: a pod on a real kubelet whose two containers print a line every
// half second; its logs are followed live — across a change of the host's addresses, which
// makes the browser drop the open stream — and the container picker switches streams.
//
// Run by crates/capstan/tests/dashboard.rs, with:
//   DASHBOARD_URL   the dashboard (https, self-signed)
//   ADMIN_TOKEN     a token bound to cluster-admin
//   NOBODY_TOKEN    a token with no permissions beyond discovery (main scenario)
//   NAMESPACE       where the deployment `web` (1 replica) or the pod `ticker` runs
//   SCREENSHOT_DIR  where to write the PNGs
//   SCENARIO        `logs` for the second scenario
// Exits non-zero with a message (and failure-SCENARIO.png) on the first failed check.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const URL = env('DASHBOARD_URL').replace(/\/$/, '');
const ADMIN = env('ADMIN_TOKEN');
const SCENARIO = process.env.SCENARIO || 'main';
const NOBODY = SCENARIO === 'main' ? env('NOBODY_TOKEN') : '';
const NS = env('NAMESPACE');
const SHOTS = env('SCREENSHOT_DIR');
const TIMEOUT = 30_000;

mkdirSync(SHOTS, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'capstan-dashboard-chromium-'));

const step = (what) => console.log(`• ${what}`);

async function until(what, f, timeout = TIMEOUT) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await f();
      if (v) return v;
    } catch (e) { last = e; }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  ignoreHTTPSErrors: true,
  viewport: { width: 1400, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = context.pages()[0] || await context.newPage();
page.setDefaultTimeout(TIMEOUT);
const jsErrors = [];
page.on('pageerror', (e) => jsErrors.push(e.message));

// An API call from the page, as the admin (to set things up and check what the UI did).
async function api(method, path, body, contentType = 'application/json') {
  return page.evaluate(async ({ method, path, body, contentType, token }) => {
    const r = await fetch(path, {
      method,
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': contentType, Accept: 'application/json' },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* logs are text */ }
    return { status: r.status, json, text };
  }, { method, path, body, contentType, token: ADMIN });
}

const text = (sel) => page.locator(sel).innerText();

// Navigate; Chromium aborts loads in flight when the machine's network interfaces change
// (other tests' bridges and veths), so that one error is retried.
async function navigate(load) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await load();
    } catch (e) {
      if (attempt >= 5 || !/ERR_NETWORK_CHANGED/.test(String(e && e.message))) throw e;
    }
  }
}
const goto = (url) => navigate(() => page.goto(url));

async function signIn(token) {
  await page.locator('#token').fill(token);
  await page.locator('#sign-in').click();
}

async function mainScenario() {
  step('the sign-in page, and a wrong token bounced with the API server\'s message');
  await goto(`${URL}/`);
  await page.locator('#token').waitFor();
  if (!page.url().endsWith('#/login')) throw new Error(`expected #/login, got ${page.url()}`);
  await signIn('not-a-valid-token');
  await until('the 401 message', async () => /Unauthorized/i.test(await text('#login-message')));

  step('signing in; the overview');
  await signIn(ADMIN);
  await page.waitForURL(/#\/overview$/);
  await until('node n1 Ready on the overview', async () => {
    const row = page.locator('section:has(h2:text-is("Nodes")) tr', { hasText: 'n1' });
    return (await row.count()) === 1 && /Ready/.test(await row.innerText());
  });
  await until('the deployment web on the overview, 1/1 and healthy', async () => {
    const row = page.locator('section:has(h2:text-is("Workloads")) tr', { hasText: 'web' });
    const t = (await row.count()) === 1 ? await row.innerText() : '';
    return /Deployment/.test(t) && /1\/1/.test(t) && /Healthy/.test(t);
  });
  await until('the namespaces card', async () => /namespaces/i.test(await text('.cards')));
  await page.screenshot({ path: join(SHOTS, 'overview.png'), fullPage: true });

  step('opening the deployment');
  await page.locator('section:has(h2:text-is("Workloads")) a', { hasText: 'web' }).click();
  await page.waitForURL(/#\/r\/apps\/deployments\/[^/]+\/web$/);
  const podRows = page.locator('section:has(h2:text-is("Pods")) tbody tr');
  await until('one pod of web', async () => (await podRows.count()) === 1);
  await until('the deployment\'s events', async () => /ScalingReplicaSet/.test(await text('section:has(h2:text-is("Events"))')));

  step('scaling 1 → 3: the new pods appear live');
  await page.evaluate(() => { window.notReloaded = true; });
  await page.locator('#scale').click();
  await page.locator('#replicas').fill('3');
  await page.locator('.dialog button', { hasText: 'Scale' }).click();
  await page.locator('.dialog').waitFor({ state: 'detached' });
  await until('three pods listed', async () => (await podRows.count()) === 3);
  await until('three pods Running and the deployment 3/3 ready', async () => {
    const t = await text('section:has(h2:text-is("Pods"))');
    return (t.match(/Running/g) || []).length === 3 && /3\/3 ready/.test(await text('.page-head'));
  }, 60_000);
  if (!(await page.evaluate(() => window.notReloaded))) throw new Error('the page reloaded');
  const scaled = await api('GET', `/apis/apps/v1/namespaces/${NS}/deployments/web`);
  if (scaled.json.spec.replicas !== 3) throw new Error(`spec.replicas is ${scaled.json.spec.replicas}`);
  await page.screenshot({ path: join(SHOTS, 'deployment-detail.png'), fullPage: true });

  step('a pod\'s logs');
  const podName = (await podRows.first().locator('a').innerText()).trim();
  await podRows.first().locator('a').click();
  await page.waitForURL(new RegExp(`#/r/core/pods/${NS}/${podName}$`));
  await page.locator('#tab-logs').click();
  await page.locator('#log-container').waitFor();
  const container = await page.locator('#log-container').inputValue();
  if (!container) throw new Error('no container picked');
  const shown = await until('logs or the API server\'s error', async () => {
    const err = (await text('#log-error')).trim();
    const out = (await text('#log-output')).trim();
    return err || out ? { err, out } : null;
  });
  const direct = await api('GET', `/api/v1/namespaces/${NS}/pods/${podName}/log?container=${container}&tailLines=500`);
  if (direct.status >= 400) {
    // Hollow nodes serve no logs: the UI shows exactly the API server's Status message.
    const message = direct.json && direct.json.message;
    if (!message) throw new Error(`the log error has no Status message: ${direct.text}`);
    if (!shown.err.includes(message)) throw new Error(`the UI shows ${JSON.stringify(shown.err)}, the API said ${JSON.stringify(message)}`);
    console.log(`  (no logs from hollow nodes; the UI shows the API's message: ${message})`);
  } else if (!shown.out.includes(direct.text.trim().split('\n')[0])) {
    throw new Error(`the UI shows ${JSON.stringify(shown.out.slice(0, 200))}, the API gave ${JSON.stringify(direct.text.slice(0, 200))}`);
  }
  await page.screenshot({ path: join(SHOTS, 'pod-logs.png'), fullPage: true });

  step('the YAML editor: apply an edit');
  await goto(`${URL}/#/r/apps/deployments/${NS}/web/yaml`);
  const editor = page.locator('#yaml');
  await until('the deployment as YAML', async () => /kind: Deployment/.test(await editor.inputValue()));
  const original = await editor.inputValue();
  if (/managedFields/.test(original)) throw new Error('managedFields shown');
  const edited = original.replace(/\n {2}labels:\n/, '\n  labels:\n    edited-by: dashboard\n');
  if (edited === original) throw new Error(`no labels block in:\n${original}`);
  await editor.fill(edited);
  await page.locator('#apply').click();
  await until('the apply succeeded', async () => /Applied/.test(await text('#yaml-message')));
  const after = await api('GET', `/apis/apps/v1/namespaces/${NS}/deployments/web`);
  if (after.json.metadata.labels['edited-by'] !== 'dashboard') throw new Error(`labels: ${JSON.stringify(after.json.metadata.labels)}`);
  if (after.json.spec.replicas !== 3) throw new Error('the edit changed replicas');

  step('the YAML editor: a conflicting edit shows the API server\'s conflict');
  const mine = (await editor.inputValue()).replace('edited-by: dashboard', 'edited-by: dashboard-again');
  await editor.fill(mine);
  const patched = await api('PATCH', `/apis/apps/v1/namespaces/${NS}/deployments/web`,
    { metadata: { annotations: { 'changed-by': 'someone-else' } } }, 'application/merge-patch+json');
  if (patched.status !== 200) throw new Error(`patch: ${patched.text}`);
  await until('the changed-on-server notice', async () => /changed on the server/.test(await text('#yaml-changed')));
  await page.locator('#apply').click();
  await until('the conflict message', async () => /the object has been modified/.test(await text('#yaml-message')));
  await page.screenshot({ path: join(SHOTS, 'yaml-edit.png'), fullPage: true });

  step('lists: the server\'s columns, and objects appearing live');
  await goto(`${URL}/#/r/apps/deployments`);
  await until('the deployments table', async () => {
    const head = await text('table.grid thead');
    return /Up-to-date/i.test(head) && /Available/i.test(head) && /Age/i.test(head) && /web/.test(await text('table.grid tbody'));
  });
  await goto(`${URL}/#/r/core/configmaps`);
  await until('the configmaps list', async () => /kube-root-ca\.crt/.test(await text('.list-body')));
  await page.evaluate(() => { window.notReloaded = true; });
  const created = await api('POST', `/api/v1/namespaces/${NS}/configmaps`,
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'from-test' }, data: { greeting: 'hello' } });
  if (created.status !== 201) throw new Error(`create: ${created.text}`);
  await until('the new configmap listed', async () => (await page.locator('tr[data-name="from-test"]').count()) === 1);
  if (!(await page.evaluate(() => window.notReloaded))) throw new Error('the page reloaded');

  step('delete with confirmation');
  await page.locator('tr[data-name="from-test"] a').click();
  await until('the configmap\'s data', async () => /hello/.test(await text('.detail-body')));
  await page.locator('#delete').click();
  await page.locator('.dialog button', { hasText: 'Cancel' }).click();
  if ((await api('GET', `/api/v1/namespaces/${NS}/configmaps/from-test`)).status !== 200) throw new Error('cancel deleted it');
  await page.locator('#delete').click();
  await page.locator('.dialog button', { hasText: 'Delete' }).click();
  await page.waitForURL(/#\/r\/core\/configmaps$/);
  await until('the configmap gone', async () => (await api('GET', `/api/v1/namespaces/${NS}/configmaps/from-test`)).status === 404);
  await until('the configmap gone from the list', async () => (await page.locator('tr[data-name="from-test"]').count()) === 0
    && /kube-root-ca\.crt/.test(await text('.list-body')));

  step('a user without permissions sees the 403 messages');
  await page.locator('#sign-out').click();
  await page.locator('#token').waitFor();
  await signIn(NOBODY);
  await page.waitForURL(/#\/overview$/);
  await until('the Forbidden message for nodes', async () => {
    const t = await text('section:has(h2:text-is("Nodes"))');
    return /nodes is forbidden: User "system:serviceaccount:[^"]+:nobody" cannot list resource "nodes"/.test(t) && /403/.test(t);
  });
  await page.screenshot({ path: join(SHOTS, 'forbidden.png'), fullPage: true });
  await goto(`${URL}/#/r/apps/deployments/${NS}/web`);
  await until('the Forbidden message for the deployment', async () => /deployments\.apps is forbidden/.test(await text('.detail-body')));
  await goto(`${URL}/#/r/core/secrets`);
  await until('the Forbidden message for secrets', async () => /secrets is forbidden/.test(await text('.list-body')));

  step('a revoked session goes back to the sign-in page with the message');
  await page.evaluate(() => sessionStorage.setItem('capstan.token', 'revoked'));
  await navigate(() => page.reload());
  await page.locator('#token').waitFor();
  await until('the 401 message', async () => /Unauthorized/i.test(await text('#login-message')));

}

async function logsScenario() {
  step('signing in');
  await goto(`${URL}/`);
  await signIn(ADMIN);
  await page.waitForURL(/#\/overview$/);

  step('following the logs of the first container');
  await goto(`${URL}/#/r/core/pods/${NS}/ticker/logs`);
  await page.locator('#log-container').waitFor();
  if ((await page.locator('#log-container').inputValue()) !== 'ticker') throw new Error('the first container is not picked');
  if (!(await page.locator('#log-follow').isChecked())) throw new Error('follow is off');
  const out = page.locator('#log-output');
  const ticks = async () => ((await out.innerText()).match(/^tick \d+$/gm) || []).length;
  await until('the first lines', async () => (await ticks()) >= 2);
  const before = await ticks();
  await page.evaluate(() => { window.notReloaded = true; });
  // New lines arrive on the open stream.
  await until('more lines, streamed', async () => (await ticks()) >= before + 4);
  if (!(await page.evaluate(() => window.notReloaded))) throw new Error('the page reloaded');
  if (!/Following/.test(await page.locator('#log-status').innerText())) throw new Error('not following');
  await page.screenshot({ path: join(SHOTS, 'pod-logs-follow.png'), fullPage: true });

  step('the host\'s addresses change (the browser drops open requests): the stream resumes, no line lost or repeated');
  await page.evaluate(() => {
    window.statuses = [];
    const s = document.getElementById('log-status');
    new MutationObserver(() => window.statuses.push(s.textContent)).observe(s, { childList: true, subtree: true, characterData: true });
  });
  const changed = await ticks();
  const dummy = `capdash${process.pid % 100000}`;
  execFileSync('ip', ['link', 'add', dummy, 'type', 'bridge']);
  try {
    execFileSync('ip', ['addr', 'add', '198.18.250.1/32', 'dev', dummy]);
    execFileSync('ip', ['link', 'set', dummy, 'up']);
    await until('lines after the change', async () => (await ticks()) >= changed + 4);
  } finally {
    execFileSync('ip', ['link', 'del', dummy]);
  }
  const numbers = ((await out.innerText()).match(/^tick \d+$/gm) || []).map((l) => Number(l.slice(5)));
  numbers.forEach((n, i) => {
    if (n !== numbers[0] + i) throw new Error(`lines lost or repeated across the change: ${numbers.join(' ')}`);
  });
  const statuses = await page.evaluate(() => window.statuses);
  // Chromium aborts requests in flight on an address change: the resume above really ran.
  if (!statuses.some((t) => /reconnecting/.test(t))) throw new Error(`the stream was not dropped and resumed: ${JSON.stringify(statuses)}`);

  step('the container picker switches the stream');
  await page.locator('#log-container').selectOption('other');
  await until('the other container\'s lines', async () => /^other \d+$/m.test(await out.innerText()));
  const now = await out.innerText();
  if (/tick/.test(now)) throw new Error(`the first container's lines are still shown:\n${now}`);

  step('without follow: the lines so far');
  await page.locator('#log-follow').uncheck();
  await until('the lines so far, counted', async () => /\d+ lines/.test(await page.locator('#log-status').innerText())
    && /^other \d+$/m.test(await out.innerText()));
}

let ok = false;
try {
  if (SCENARIO === 'logs') await logsScenario();
  else await mainScenario();
  if (jsErrors.length) throw new Error(`JavaScript errors on the page: ${jsErrors.join('; ')}`);
  ok = true;
  console.log(`dashboard browser test (${SCENARIO}) passed`);
} catch (e) {
  console.error(`FAILED: ${e.stack || e}`);
  try { await page.screenshot({ path: join(SHOTS, `failure-${SCENARIO}.png`), fullPage: true }); } catch { /* the page is gone */ }
  try { console.error(`page URL: ${page.url()}\npage text:\n${(await page.locator('body').innerText()).slice(0, 4000)}`); } catch { /* idem */ }
  if (jsErrors.length) console.error(`JavaScript errors: ${jsErrors.join('; ')}`);
} finally {
  await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
process.exit(ok ? 0 : 1);
