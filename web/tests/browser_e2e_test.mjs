// End-to-end browser test of the dashboard: a real tessera-coordinator (which
// serves the embedded dashboard on --http), a real tessera-worker running
// tessera-train, jobs submitted with tessctl, and headless Debian Chromium
// driven by playwright-core.
//
//   node web/tests/browser_e2e_test.mjs --bin BUILD/bin --out BUILD/web
//
// Checks: the jobs page lists a job; its page's loss chart gets every loss
// point the API has; the other charts, the log tail, ranks and events fill
// in; cancel works (page and API agree on CANCELLED); a job named
// <img src=x onerror=alert(1)> shows as text; the workers page; a sweep page
// (world size x ZeRO stage: its figures, memory per rank one line per stage)
// when tessctl can submit sweeps; no console errors, CSP violations or
// dialogs anywhere. Screenshots go to OUT/screenshots/.
//
// --dist DIR serves that bundle through a local proxy in front of the
// coordinator's API instead of the coordinator's embedded copy (for working
// on the dashboard without relinking the coordinator).
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { extname, join } from 'node:path';
import {
  Processes, StepFailed, Steps, assert, assertClean, ensureDir, launchBrowser, parseArgs, waitFor,
  watch,
} from './browser_util.mjs';
import { Cluster, signIn } from './e2e_cluster.mjs';

const args = parseArgs(process.argv.slice(2), { bin: '', out: '', dist: '' });
if (!args.bin || !args.out) {
  console.error('usage: browser_e2e_test.mjs --bin BIN_DIR --out DIR [--dist DIST_DIR]');
  process.exit(2);
}
const XSS = '<img src=x onerror=alert(1)>';
const work = join(args.out, 'browser-e2e');
rmSync(work, { recursive: true, force: true });
ensureDir(work);
const shots = ensureDir(join(args.out, 'screenshots'));
const procs = new Processes(`${process.pid}-${Date.now()}`);
const steps = new Steps();
const cluster = new Cluster({ bin: args.bin, work, procs });
const api = (path) => cluster.api(path);

// A minimal server for --dist: the bundle at / and the asset paths, the rest
// proxied to the coordinator (streams included).
function startDistProxy(dist, target) {
  const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml' };
  const server = createServer((req, res) => {
    const path = req.url.split('?')[0];
    const file = path === '/' ? 'index.html' : path.slice(1);
    if (!path.startsWith('/api/') && /^[\w.-]+$/.test(file) && existsSync(join(dist, file))) {
      res.writeHead(200, {
        'Content-Type': types[extname(file)] || 'application/octet-stream',
        'Content-Security-Policy': "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
          "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
      });
      res.end(readFileSync(join(dist, file)));
      return;
    }
    const up = request({ host: '127.0.0.1', port: target, path: req.url, method: req.method, headers: req.headers },
      (r) => {
        res.writeHead(r.statusCode, r.headers);
        r.pipe(res);
      });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function jobYaml(name, trainer, worldSize = 2) {
  const lines = [`name: ${JSON.stringify(name)}`, `world_size: ${worldSize}`, 'trainer:'];
  for (const [k, v] of Object.entries(trainer)) lines.push(`  ${k}: ${v}`);
  return `${lines.join('\n')}\n`;
}

const SHORT = {
  model: 'vit-micro', dataset: 'synthetic', batch_size: 16, train_subset: 2048, test_subset: 256,
  epochs: 3, metrics_every: 5, threads: 1,
};

let browser;
let page;
let proxy;
try {
  let http;
  let base;
  let userToken = '';
  await steps.run('start coordinator and worker', async () => {
    await cluster.start();
    http = cluster.http;
    userToken = cluster.userToken;
    if (args.dist) {
      proxy = await startDistProxy(args.dist, cluster.httpPort);
      base = `http://127.0.0.1:${proxy.address().port}`;
      console.log(`    serving ${args.dist} through a proxy at ${base}`);
    } else {
      base = http;
    }
  });

  await steps.run('the coordinator serves the dashboard with its CSP', async () => {
    const r = await fetch(`${base}/`);
    const body = await r.text();
    assert(r.status === 200 && body.includes('/app.js'),
      `GET / answered ${r.status} ${JSON.stringify(body.slice(0, 120))}: the coordinator does not serve ` +
      'the embedded dashboard (tessera_web_assets, web/assets.h FindAsset) for non-/api GETs');
    assert(/^text\/html/.test(r.headers.get('content-type') || ''), `GET / content type ${r.headers.get('content-type')}`);
    const csp = r.headers.get('content-security-policy') || '';
    assert(csp.includes("script-src 'self'") && csp.includes("style-src 'self'"), `GET / CSP: ${JSON.stringify(csp)}`);
    for (const asset of ['/app.js', '/app.css', '/favicon.svg']) {
      const a = await fetch(`${base}${asset}`);
      assert(a.status === 200, `GET ${asset} answered ${a.status}`);
      await a.arrayBuffer();
    }
  });

  const submit = (name, yaml) => cluster.submitFile(['submit'], `${name.replace(/[^\w-]/g, '_')}.yaml`, yaml);
  const apiJob = async (id) => api(`/api/v1/jobs/${id}`);
  const authHeader = () => cluster.authHeader();
  const points = async (sel) => Number(await page.getAttribute(sel, 'data-points'));
  const badge = async () => (await page.textContent('#job-state')) || '';

  let shortId;
  await steps.run('submit a short 2-rank job', async () => {
    shortId = await submit('browser-e2e-short', jobYaml('browser-e2e short', SHORT));
    console.log(`    job ${shortId}`);
  });

  browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: 'dark' });
  const seen = await watch(context);
  page = await context.newPage();

  if (userToken) {
    await steps.run('the dashboard asks for a user token and signs in with it', async () => {
      await page.goto(`${base}/#/jobs`);
      await page.waitForSelector('#signin', { state: 'visible', timeout: 15000 });
      assert(await page.locator('#jobs-table tr[data-job-id]').count() === 0, 'jobs listed without a token');
      await signIn(page, userToken);
      // Reads before signing in were refused; Chromium logs each as a failed load.
      seen.errors = seen.errors.filter((e) => !/status of 401/.test(e));
    });
  }

  await steps.run('jobs page lists the job', async () => {
    await page.goto(`${base}/#/jobs`);
    await page.waitForSelector(`#jobs-table tr[data-job-id="${shortId}"]`, { timeout: 20000 });
    const name = await page.textContent(`#jobs-table tr[data-job-id="${shortId}"] .job-name`);
    assert(name === 'browser-e2e short', `row shows name ${JSON.stringify(name)}`);
    await waitFor('live stream', async () => (await page.textContent('#live')) === 'live', { timeoutMs: 10000 });
  });

  await steps.run("job page's loss chart gets points", async () => {
    await page.click(`#jobs-table tr[data-job-id="${shortId}"] .job-name`);
    await page.waitForSelector('#job-name');
    await waitFor('loss points', async () => (await points('[data-chart="loss"]')) > 0, { timeoutMs: 240000, intervalMs: 500 });
    console.log(`    ${await points('[data-chart="loss"]')} loss points while ${await badge()}`);
  });

  await steps.run('the job finishes and every panel fills in', async () => {
    await waitFor('SUCCEEDED', async () => {
      const s = await badge();
      if (s === 'FAILED' || s === 'CANCELLED') throw new Error(`job ended ${s}: ${await page.textContent('#job-reason')}`);
      return s === 'SUCCEEDED';
    }, { timeoutMs: 420000, intervalMs: 1000 });
    const loss = await api(`/api/v1/jobs/${shortId}/metrics?name=loss&limit=100000`);
    const lossSteps = new Set(loss.points.map((p) => p.step)).size;
    await waitFor(`all ${lossSteps} loss steps in the chart`, async () => (await points('[data-chart="loss"]')) === lossSteps,
      { timeoutMs: 10000 });
    assert(await points('[data-chart="accuracy"]') >= 1, 'test accuracy chart is empty');
    assert(await points('[data-chart="throughput"]') > 0, 'throughput chart is empty');
    assert(await points('[data-chart="breakdown"]') === 2, 'breakdown should have a bar per rank (2)');
    assert(await points('[data-chart="heatmap"]') > 0, 'heatmap is empty');
    await waitFor('rank 0 log', async () => (await page.textContent('#log-text')).trim().length > 20, { timeoutMs: 15000 });
    const reasons = await page.locator('#ranks-table td.reason').allTextContents();
    assert(reasons.length === 2 && reasons.every((r) => r.length > 0), `rank exit reasons: ${JSON.stringify(reasons)}`);
    const events = await page.locator('#events-table tbody tr').allTextContents();
    assert(events.some((e) => e.includes('SUCCEEDED')), `events: ${JSON.stringify(events)}`);
    await page.screenshot({ path: join(shots, 'job.png'), fullPage: true });
    await page.click('#theme');
    await page.waitForTimeout(300);
    await page.screenshot({ path: join(shots, 'job-light.png'), fullPage: true });
    await page.click('#theme');
  });

  await steps.run('workers page shows w1 alive with its slots', async () => {
    await page.goto(`${base}/#/workers`);
    const row = '#workers-table tr[data-worker="w1"]';
    await page.waitForSelector(row);
    assert((await page.textContent(`${row} .badge`)) === 'alive', 'w1 is not shown alive');
    await waitFor('w1 slots 0/2 after the job', async () => (await page.textContent(`${row} .meter-text`)) === '0/2',
      { timeoutMs: 15000 });
    assert(/s ago$/.test(await page.textContent(`${row} [data-ago]`)), 'no heartbeat age');
    await page.screenshot({ path: join(shots, 'workers.png'), fullPage: true });
  });

  let xssId;
  await steps.run('a job named <img src=x onerror=alert(1)> is shown as text', async () => {
    xssId = await submit('xss', jobYaml(XSS, { ...SHORT, max_steps: 10, epochs: 1 }, 1));
    await page.goto(`${base}/#/jobs`);
    const cell = `#jobs-table tr[data-job-id="${xssId}"] .job-name`;
    await page.waitForSelector(cell);
    assert((await page.textContent(cell)) === XSS, `jobs table shows ${JSON.stringify(await page.textContent(cell))}`);
    assert(await page.locator('img').count() === 0, 'an <img> element was created on the jobs page');
    await page.goto(`${base}/#/jobs/${xssId}`);
    await waitFor('job name heading', async () => (await page.textContent('#job-name')) === XSS);
    assert(await page.locator('img').count() === 0, 'an <img> element was created on the job page');
    assert((await page.title()).includes(XSS), `title ${JSON.stringify(await page.title())}`);
    assert(seen.dialogs.length === 0, `a dialog opened: ${seen.dialogs}`);
  });

  await steps.run('cancel: confirm, then CANCELLED in the page and the API', async () => {
    const longId = await submit('browser-e2e-long',
      jobYaml('browser-e2e long', { ...SHORT, epochs: 1000, max_steps: 1000000 }));
    await page.goto(`${base}/#/jobs/${longId}`);
    await waitFor('RUNNING', async () => (await badge()) === 'RUNNING', { timeoutMs: 240000, intervalMs: 500 });
    await page.click('#cancel');
    await page.waitForSelector('#cancel-confirm', { state: 'visible' });
    assert((await apiJob(longId)).state === 'JOB_STATE_RUNNING', 'job changed state before confirming');
    await page.click('#cancel-confirm');
    await waitFor('CANCELLED in the page', async () => (await badge()) === 'CANCELLED', { timeoutMs: 30000 });
    const job = await apiJob(longId);
    assert(job.state === 'JOB_STATE_CANCELLED', `API says ${job.state}`);
    await waitFor('CANCELLED event', async () =>
      (await page.locator('#events-table tbody tr').allTextContents()).some((e) => e.includes('CANCELLED')));
    assert(await page.isDisabled('#cancel'), 'Cancel stays enabled after cancelling');
    await waitFor('every rank exited with a reason', async () => {
      const j = await apiJob(longId);
      return j.ranks.length === 2 && j.ranks.every((r) => r.state === 'exited' && r.exit_reason);
    }, { timeoutMs: 60000, intervalMs: 500 });
    await waitFor('rank exit reasons in the page', async () =>
      (await page.locator('#ranks-table td.reason').allTextContents()).every((r) => r.length > 0));
    await page.screenshot({ path: join(shots, 'job-cancelled.png'), fullPage: true });
  });

  await steps.run('with every stream slot taken (503) the job page loads by GET', async () => {
    // Hold streams open until the coordinator refuses one. Streams the page
    // closed earlier still hold their slots until the coordinator's next write
    // to them fails (a keepalive every 5 s; up to two writes). Were one of them
    // freed while the job page below opens its stream, the page would get the
    // slot and go live instead of polling. So top up until two rounds 6 s apart
    // gain no slot, and keep topping up while the page loads.
    const hogs = [];
    const topUp = async () => {
      for (let gained = 0; hogs.length < 64; gained++) {
        const abort = new AbortController();
        const timer = setTimeout(() => abort.abort(), 10000);
        let r;
        try {
          r = await fetch(`${http}/api/v1/stream/workers`, { signal: abort.signal, headers: authHeader() });
        } catch (e) {
          throw new Error(`stream request ${hogs.length + 1} got no answer in 10 s (${e.name}) after ${hogs.length} ` +
            'streams were accepted: docs/api.md says a stream over --http-max-streams gets 503 ' +
            'and plain requests keep being served');
        } finally {
          clearTimeout(timer);
        }
        if (r.status === 503) {
          abort.abort();
          return gained;
        }
        assert(r.status === 200, `stream answered ${r.status}`);
        // Keep the response: fetch closes the connection of a response that is
        // garbage collected with its body unread, which gave the slot back.
        hogs.push({ abort, response: r });
      }
      return 0;
    };
    let keepToppingUp = true;
    let toppingUp = null;
    try {
      const rounds = [await topUp()];
      for (let quiet = 0; quiet < 2 && rounds.length < 9;) {
        await new Promise((resolve) => setTimeout(resolve, 6000));
        rounds.push(await topUp());
        quiet = rounds.at(-1) === 0 ? quiet + 1 : 0;
      }
      console.log(`    stream slots taken per round: ${rounds.join(', ')}`);
      assert(hogs.length > 0 && hogs.length < 64, `held ${hogs.length} streams without a 503`);
      toppingUp = (async () => {
        while (keepToppingUp) {
          await topUp();
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      })();
      const gets = [];
      const onRequest = (r) => {
        if (r.url().includes(`/api/v1/jobs/${shortId}/metrics`)) gets.push(r.url());
      };
      page.on('request', onRequest);
      await page.goto(`${base}/#/jobs`);
      await page.goto(`${base}/#/jobs/${shortId}`);
      // Generous: under a parallel test run the page's fallback poll and the
      // coordinator's remaining threads share two busy cores.
      await waitFor('metrics fetched by GET', async () => gets.length > 0, { timeoutMs: 45000 });
      await waitFor('loss points by GET', async () => (await points('[data-chart="loss"]')) > 0, { timeoutMs: 45000 });
      page.off('request', onRequest);
    } finally {
      keepToppingUp = false;
      await toppingUp?.catch(() => {});
      for (const h of hogs) h.abort.abort();
    }
    // The coordinator notices a closed stream at its next write (an event or
    // the 5 s keepalive); wait until streams are served again, so the next
    // pages are live rather than polling.
    await waitFor('stream slots given back', async () => {
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), 5000);
      try {
        const r = await fetch(`${http}/api/v1/stream/workers`, { signal: abort.signal, headers: authHeader() });
        return r.status === 200;
      } finally {
        clearTimeout(timer);
        abort.abort();
      }
    }, { timeoutMs: 40000, intervalMs: 1000 });
    // Chromium logs each refused stream as a failed load; nothing else may fail.
    seen.errors = seen.errors.filter((e) => !/status of 503/.test(e));
  });

  await steps.run('sweep page (when tessctl can submit sweeps)', async () => {
    const file = join(work, 'sweep.yaml');
    writeFileSync(file, [
      'name: browser-e2e sweep', 'repeats: 1', 'max_parallel: 1',
      'grid:', '  world_size: [1, 2]', '  batch_size: [16]', '  zero_stage: [0, 1]',
      'base:', '  trainer:',
      ...Object.entries({ ...SHORT, epochs: 1, train_subset: 1024 }).map(([k, v]) => `    ${k}: ${v}`), ''].join('\n'));
    const r = await cluster.tessctl(['sweep', file]);
    if (r.code !== 0) {
      console.log(`    SKIPPED: tessctl sweep exited ${r.code}: ${(r.stderr || r.stdout).trim().split('\n')[0]}`);
      return;
    }
    const m = /(\d+)\D*$/.exec(r.stdout.trim().split('\n').pop() || '');
    assert(m, `no sweep id in: ${r.stdout}`);
    const sweepId = m[1];
    await page.goto(`${base}/#/sweeps`);
    await page.waitForSelector(`#sweeps-table tr[data-sweep-id="${sweepId}"]`);
    await page.goto(`${base}/#/sweeps/${sweepId}`);
    await waitFor('sweep ends', async () => /SUCCEEDED|FAILED|CANCELLED/.test(await page.textContent('#sweep-state')),
      { timeoutMs: 300000, intervalMs: 1000 });
    const state = await page.textContent('#sweep-state');
    const report = await api(`/api/v1/sweeps/${sweepId}/report`);
    const done = report.rows.filter((r) => r.runs > 0).length;
    if (state !== 'SUCCEEDED') {
      console.log(`    note: sweep ended ${state}: ${await page.textContent('.reason-line')}; ` +
        `${done} of ${report.rows.length} points have a successful run`);
    }
    assert(done >= 1, `no point of the sweep succeeded (${state})`);
    for (const key of ['epoch-time', 'speedup', 'efficiency', 'comm-share', 'final-accuracy']) {
      await waitFor(`${key} figure with ${done} points`, async () => (await points(`[data-chart="${key}"]`)) === done,
        { timeoutMs: 20000 });
    }
    assert(await page.locator('#report-table tbody tr').count() === report.rows.length,
      `report table should have ${report.rows.length} rows`);
    assert(await page.locator('#points-table tbody tr').count() === 4, 'points table should have 4 rows');
    // Memory per rank: one line per ZeRO stage of the rows whose ranks
    // reported a measured peak (CPU ranks: peak RSS; the API leaves
    // unreported figures out), one point per such row, beside the counted
    // optimizer state and gradient bytes.
    const withMemory = report.rows.filter((r) => r.runs > 0 && r.peak_memory_bytes_per_rank != null);
    const stages = new Set(withMemory.map((r) => Number(r.zero_stage || 0)));
    assert(state !== 'SUCCEEDED' || stages.size === 2,
      `the rows of a successful sweep should carry both stages' peaks, got stages [${[...stages]}]`);
    for (const r of withMemory) {
      assert(r.memory_source === 'rss', `CPU ranks' peak should be their RSS, got ${r.memory_source}`);
      assert(r.optimizer_state_bytes_per_rank != null && r.gradient_bytes_per_rank != null,
        `a row with a measured peak keeps its counted bytes: ${JSON.stringify(r)}`);
      assert(r.peak_memory_bytes_per_rank > r.optimizer_state_bytes_per_rank + r.gradient_bytes_per_rank,
        `a rank's peak RSS holds more than its optimizer state and gradients: ${JSON.stringify(r)}`);
    }
    const memory = '[data-chart="memory-per-rank"]';
    await waitFor(`memory-per-rank figure with ${stages.size} series`,
      async () => (await page.getAttribute(memory, 'data-series')) === String(stages.size), { timeoutMs: 20000 });
    assert(await points(memory) === withMemory.length,
      `memory-per-rank figure should have ${withMemory.length} points`);
    await page.screenshot({ path: join(shots, 'sweep.png'), fullPage: true });
  });

  await steps.run('no console errors, CSP violations or dialogs', async () => assertClean(seen));
  await context.close();
} catch (e) {
  if (!(e instanceof StepFailed)) {
    steps.failed++;
    console.log(`not ok - ${e.stack || e}`);
  }
  if (page) await page.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
  console.log(cluster.logs());
} finally {
  if (browser) await browser.close().catch(() => {});
  if (proxy) proxy.close();
  await procs.stopAll();
  console.log(`screenshots in ${shots}`);
  steps.summary();
}
process.exit(steps.failed ? 1 : 0);
