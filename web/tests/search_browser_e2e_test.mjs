// End-to-end browser test of the search page (#/searches/ID, docs/search.md):
// a small ASHA search submitted with `tessctl search FILE` to a real
// coordinator and worker (e2e_cluster.mjs), followed to its end in headless
// Chromium, then compared with what the API and `tessctl search report -o
// json` say.
//
//   node web/tests/search_browser_e2e_test.mjs --bin BUILD/bin --out BUILD/web
//
// Checks: the trials table has a row per trial with its values and status;
// the metric-vs-steps figure has a line per trial that reported, as many
// points as the trials' jobs reported steps, the promoted trials drawn bold
// and the best one marked; a scatter per searched key, the loguniform one on
// a log axis; the best trial is tessctl's; another user's token does not see
// the search; no console errors, CSP violations or dialogs. Screenshot:
// OUT/screenshots/search.png.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import {
  Processes, StepFailed, Steps, assert, assertClean, ensureDir, launchBrowser, parseArgs, waitFor,
  watch,
} from './browser_util.mjs';
import { Cluster, signIn } from './e2e_cluster.mjs';

const args = parseArgs(process.argv.slice(2), { bin: '', out: '' });
if (!args.bin || !args.out) {
  console.error('usage: search_browser_e2e_test.mjs --bin BIN_DIR --out DIR');
  process.exit(2);
}
const work = join(args.out, 'browser-search-e2e');
rmSync(work, { recursive: true, force: true });
ensureDir(work);
const shots = ensureDir(join(args.out, 'screenshots'));
const procs = new Processes(`${process.pid}-${Date.now()}`);
const steps = new Steps();
const OTHER_USER = 'browser-e2e-other';
const cluster = new Cluster({ bin: args.bin, work, procs, otherUsers: [OTHER_USER] });

// ASHA over 4 trials, eta 2, rungs of 4 and 8 steps, 2 at a time: once two
// trials have a rung-0 result, the better one is promoted, so at least one
// trial is. lr is searched log-uniformly (a log axis), weight_decay over
// number choices (a linear one). The trainer reports val_accuracy every 2
// steps, so every trial draws a line.
const KEYS = ['lr', 'weight_decay'];
const searchYaml = (checkpointDir) => `name: browser-e2e asha
search:
  method: asha
  seed: 5
  metric: val_accuracy
  mode: max
  max_trials: 4
  max_concurrent: 2
  max_length: 8
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
    weight_decay: {choice: [0, 0.05]}
  asha:
    reduction_factor: 2
    max_rungs: 2
base:
  world_size: 1
  trainer:
    model: vit-micro
    dataset: synthetic
    device: cpu
    threads: 1
    seed: 3
    batch_size: 16
    train_subset: 320
    test_subset: 64
    val_fraction: 0.2
    eval_every: 2
    metrics_every: 2
    checkpoint_dir: ${checkpointDir}
`;

const TERMINAL = /^(SUCCEEDED|FAILED|CANCELLED)$/;

let browser;
let page;
try {
  await steps.run('start coordinator and worker', () => cluster.start());

  let searchId;
  await steps.run('tessctl search FILE submits an ASHA search', async () => {
    searchId = await cluster.submitFile(['search'], 'search.yaml', searchYaml(join(cluster.checkpointRoot, 'asha')));
    console.log(`    search ${searchId}`);
  });

  browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: 'dark' });
  const seen = await watch(context);
  page = await context.newPage();
  const url = `${cluster.http}/#/searches/${searchId}`;

  await steps.run('the search page follows the search to its end', async () => {
    await page.goto(url);
    if (cluster.userToken) {
      await signIn(page, cluster.userToken);
      // Reads before signing in were refused; Chromium logs each as a failed load.
      seen.errors = seen.errors.filter((e) => !/status of 401/.test(e));
    }
    await page.waitForSelector('#search-name');
    assert((await page.textContent('#search-name')) === 'browser-e2e asha',
      `heading ${JSON.stringify(await page.textContent('#search-name'))}`);
    // The page polls every 5 s until the search ends.
    await waitFor('the search to end in the page', async () => TERMINAL.test(await page.textContent('#search-state')),
      { timeoutMs: 240000, intervalMs: 1000 });
    // The state badge is drawn before the last metrics are read; "finished"
    // comes after the figures.
    await page.waitForSelector('#live[data-state="ended"]', { timeout: 10000 });
  });

  let report;
  let search;
  await steps.run('it ended SUCCEEDED, as tessctl search report -o json says', async () => {
    const r = await cluster.tessctl(['search', 'report', searchId, '-o', 'json']);
    assert(r.code === 0, `tessctl search report exited ${r.code}:\n${r.stdout}${r.stderr}`);
    report = JSON.parse(r.stdout);
    search = await cluster.api(`/api/v1/searches/${searchId}`);
    const trials = report.trials.map((t) => `trial ${t.trial} ${t.status} rung ${t.rung} jobs [${t.job_ids}] ` +
      `metrics [${t.rung_metrics}]`);
    console.log(`    ${report.state}, best trial ${report.best_trial}\n${trials.map((t) => `      ${t}`).join('\n')}`);
    assert(report.state === 'SUCCEEDED', `search ended ${report.state}: ${search.reason}`);
    assert((await page.textContent('#search-state')) === 'SUCCEEDED', 'the page does not show SUCCEEDED');
    assert(report.trials.length === 4, `ASHA should start all 4 trials, started ${report.trials.length}`);
    const failed = report.trials.filter((t) => t.status === 'failed').map((t) => t.trial);
    assert(!failed.length, `trials failed: ${failed}`);
  });

  await steps.run('the trials table: a row per trial with its values and status', async () => {
    const rows = page.locator('#trials-table tbody tr');
    assert(await rows.count() === report.trials.length,
      `${await rows.count()} rows for ${report.trials.length} trials`);
    for (const t of report.trials) {
      const row = page.locator(`#trials-table tbody tr[data-trial="${t.trial}"]`);
      assert(await row.count() === 1, `no row for trial ${t.trial}`);
      const cells = await row.locator('td').allTextContents();
      const values = KEYS.map((k) => `${k}=${t.parameters[k]}`).join(', ');
      assert(cells[1] === values, `trial ${t.trial} values ${JSON.stringify(cells[1])}, tessctl: ${values}`);
      assert(cells[2] === t.status && (await row.getAttribute('data-status')) === t.status,
        `trial ${t.trial} status ${JSON.stringify(cells[2])}, tessctl: ${t.status}`);
      assert(Number(cells[3]) === t.rung && Number(cells[4]) === t.steps,
        `trial ${t.trial} rung/steps ${cells[3]}/${cells[4]}, tessctl: ${t.rung}/${t.steps}`);
      assert(await row.locator('td.links a').count() === t.job_ids.length,
        `trial ${t.trial} should link its ${t.job_ids.length} jobs`);
    }
  });

  await steps.run('metric vs steps: a line per trial, the promoted bold, the best marked', async () => {
    // Independently of the page: the steps at which each trial's jobs
    // reported the metric (a promoted trial's later rung resumes its first).
    const stepsOf = new Map();
    for (const t of search.trials) {
      const stepSet = new Set();
      for (const j of t.job_ids || []) {
        const m = await cluster.api(`/api/v1/jobs/${j}/metrics?name=val_accuracy&limit=100000`);
        for (const p of m.points || []) stepSet.add(Number(p.step));
      }
      stepsOf.set(Number(t.index ?? 0), stepSet);
    }
    const reported = report.trials.filter((t) => stepsOf.get(t.trial).size > 0);
    const promoted = reported.filter((t) => t.promoted);
    const points = reported.reduce((n, t) => n + stepsOf.get(t.trial).size, 0);
    assert(reported.length === report.trials.length, 'every trial reported val_accuracy');
    assert(promoted.length >= 1, 'ASHA promoted no trial');
    assert(promoted.every((t) => t.rung === 1 && t.steps === 8), 'a promoted trial trains to max_length (8)');
    const chart = '[data-chart="search-metric"]';
    assert(await page.getAttribute(chart, 'data-series') === String(reported.length),
      `metric figure draws ${await page.getAttribute(chart, 'data-series')} lines, ${reported.length} trials reported`);
    assert(await page.getAttribute(chart, 'data-points') === String(points),
      `metric figure has ${await page.getAttribute(chart, 'data-points')} points, the jobs reported ${points} steps`);
    assert(await page.getAttribute(chart, 'data-promoted') === String(promoted.length),
      `metric figure draws ${await page.getAttribute(chart, 'data-promoted')} lines bold, ` +
      `${promoted.length} trials were promoted`);
    assert(await page.getAttribute(chart, 'data-best') === String(report.best_trial),
      `metric figure marks trial ${await page.getAttribute(chart, 'data-best')}, tessctl's best is ${report.best_trial}`);
    assert(await page.isHidden(`${chart} .chart-empty`), 'the metric figure says it is empty');
  });

  await steps.run('a scatter per searched key, lr on a log axis', async () => {
    const withMetric = report.trials.filter((t) => t.best_metric != null).length;
    for (const [key, scale] of [['lr', 'log'], ['weight_decay', 'linear']]) {
      const chart = `[data-chart="param-${key}"]`;
      assert(await page.locator(chart).count() === 1, `no scatter for ${key}`);
      assert(await page.getAttribute(chart, 'data-scale') === scale,
        `${key}: a ${await page.getAttribute(chart, 'data-scale')} axis, expected ${scale}`);
      assert(await page.getAttribute(chart, 'data-points') === String(withMetric),
        `${key}: ${await page.getAttribute(chart, 'data-points')} points for ${withMetric} trials with a metric`);
      const title = await page.getAttribute(`${chart} canvas`, 'aria-label');
      assert(title === `${key} vs val_accuracy`, `${key} scatter titled ${JSON.stringify(title)}`);
    }
    assert(await page.locator('#search-parameters [data-chart]').count() === KEYS.length,
      `expected one scatter per key (${KEYS.length})`);
    assert((await page.textContent('[data-chart="param-lr"] .chart-note')) === 'log scale', 'lr scatter not noted log');
  });

  await steps.run("the best trial is tessctl's", async () => {
    const best = report.trials.find((t) => t.best);
    assert(best && best.trial === report.best_trial, `tessctl report: best_trial ${report.best_trial}`);
    const text = await page.textContent('#best-trial');
    const m = /^trial (\d+): val_accuracy ([\d.e+-]+) at rung (\d+), step (\d+)\./.exec(text);
    assert(m, `best trial panel: ${JSON.stringify(text)}`);
    assert(Number(m[1]) === best.trial, `the page names trial ${m[1]}, tessctl ${best.trial}`);
    assert(Math.abs(Number(m[2]) - best.best_metric) <= 5e-4 * Math.max(1, Math.abs(best.best_metric)),
      `the page's best val_accuracy ${m[2]}, tessctl ${best.best_metric}`);
    assert(Number(m[3]) === best.best_rung && Number(m[4]) === best.best_step,
      `rung/step ${m[3]}/${m[4]}, tessctl ${best.best_rung}/${best.best_step}`);
    for (const k of KEYS) {
      assert(text.includes(`${k}=${best.parameters[k]}`), `best trial panel lacks ${k}=${best.parameters[k]}`);
    }
    const starred = page.locator('#trials-table tbody tr.best');
    assert(await starred.count() === 1 && (await starred.getAttribute('data-trial')) === String(best.trial),
      'the trials table should mark the best trial, only it');
    assert((await starred.locator('td').first().textContent()).endsWith('★'), 'no star on the best row');
    await page.screenshot({ path: join(shots, 'search.png'), fullPage: true });
  });

  if (cluster.userToken) {
    await steps.run('another user does not see the search', async () => {
      const other = cluster.otherTokens[OTHER_USER];
      const r = await cluster.apiResponse(`/api/v1/searches/${searchId}`, { token: other });
      await r.arrayBuffer();
      assert(r.status === 404, `GET the search as ${OTHER_USER} answered ${r.status}`);
      const ctx2 = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      const seen2 = await watch(ctx2);
      const page2 = await ctx2.newPage();
      await page2.goto(url);
      await signIn(page2, other);
      await waitFor('"not found"', async () =>
        (await page2.locator('.notice.error').allTextContents()).includes(`Search ${searchId} not found.`),
      { timeoutMs: 15000 });
      assert(await page2.isHidden('#trials-table'), 'the trials table is shown');
      assert(await page2.locator('#trials-table tbody tr[data-trial]').count() === 0, 'trials are listed');
      assert(await page2.locator('#search-name').isHidden(), 'the search name is shown');
      // The refused reads (401 before signing in, 404 after) are the only
      // failed loads.
      seen2.errors = seen2.errors.filter((e) => !/status of (401|404)/.test(e));
      assertClean(seen2);
      await ctx2.close();
    });
  }

  await steps.run('no console errors, CSP violations or dialogs', async () => assertClean(seen));
  await context.close();
} catch (e) {
  if (!(e instanceof StepFailed)) {
    steps.failed++;
    console.log(`not ok - ${e.stack || e}`);
  }
  if (page) await page.screenshot({ path: join(shots, 'search-failure.png'), fullPage: true }).catch(() => {});
  console.log(cluster.logs());
} finally {
  if (browser) await browser.close().catch(() => {});
  await procs.stopAll();
  console.log(`screenshots in ${shots}`);
  steps.summary();
}
process.exit(steps.failed ? 1 : 0);
