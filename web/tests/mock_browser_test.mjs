// Browser tests of the dashboard against the simulated API (mock_server.mjs):
// what a real coordinator shows only under load or by chance: streams refused
// with 503 (fallback to GET every 5 s), markup in every kind of server text,
// theme switching, narrow layouts. Headless Debian Chromium via playwright-core.
//
//   node web/tests/mock_browser_test.mjs --dist BUILD/web/dist --out DIR
import { join } from 'node:path';
import {
  StepFailed, Steps, assert, assertClean, ensureDir, launchBrowser, parseArgs, waitFor, watch,
} from './browser_util.mjs';
import { startMockServer } from './mock_server.mjs';

const args = parseArgs(process.argv.slice(2), { dist: '', out: '' });
if (!args.dist || !args.out) {
  console.error('usage: mock_browser_test.mjs --dist DIR --out DIR');
  process.exit(2);
}
const shots = ensureDir(join(args.out, 'screenshots'));
const XSS = '<img src=x onerror=alert(1)>';
const steps = new Steps();
let browser;
const servers = [];

async function dataPoints(page, key) {
  return Number(await page.getAttribute(`[data-chart="${key}"]`, 'data-points'));
}

try {
  const mock = await startMockServer({ dist: args.dist, tickMs: 200 });
  servers.push(mock);
  const base = `http://127.0.0.1:${mock.port}`;
  browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: 'dark' });
  const seen = await watch(context);
  const page = await context.newPage();

  await steps.run('jobs page lists every job live over SSE, names as text', async () => {
    await page.goto(`${base}/#/jobs`);
    await page.waitForSelector('#jobs-table tr[data-job-id="4"]');
    assert(await page.locator('#jobs-table tbody tr').count() === 5, 'expected 5 job rows');
    const name = await page.textContent('#jobs-table tr[data-job-id="4"] .job-name');
    assert(name === XSS, `job 4 name shows as ${JSON.stringify(name)}`);
    assert(await page.locator('img').count() === 0, 'an <img> element was created');
    await waitFor('live indicator', async () => (await page.textContent('#live')) === 'live');
  });

  await steps.run('state filter and search narrow the table', async () => {
    await page.selectOption('#job-state-filter', 'FAILED');
    await waitFor('one FAILED row', async () => (await page.locator('#jobs-table tbody tr').count()) === 1);
    assert(await page.locator('#jobs-table tr[data-job-id="3"]').count() === 1, 'job 3 not shown for FAILED');
    await page.selectOption('#job-state-filter', '');
    await page.fill('#job-search', 'FMNIST');
    await waitFor('search result', async () => (await page.locator('#jobs-table tbody tr').count()) === 1);
    assert(await page.locator('#jobs-table tr[data-job-id="2"]').count() === 1, 'search did not find job 2');
    await page.fill('#job-search', 'onerror');
    await waitFor('search by markup text', async () =>
      (await page.locator('#jobs-table tr[data-job-id="4"]').count()) === 1);
  });

  await steps.run('job page draws loss, throughput, breakdown and heatmap live', async () => {
    await page.goto(`${base}/#/jobs/1`);
    await waitFor('loss points', async () => (await dataPoints(page, 'loss')) >= 5, { timeoutMs: 20000 });
    const before = await dataPoints(page, 'loss');
    await waitFor('more loss points', async () => (await dataPoints(page, 'loss')) > before, { timeoutMs: 10000 });
    assert(await dataPoints(page, 'throughput') > 0, 'throughput chart is empty');
    assert(await dataPoints(page, 'breakdown') === 4, 'breakdown should have one bar per rank (4)');
    assert(await dataPoints(page, 'heatmap') > 0, 'heatmap is empty');
    assert((await page.textContent('#live')) === 'live', 'job page is not on the stream');
  });

  await steps.run('job page shows a memory line per rank beside the step breakdown', async () => {
    await waitFor('memory lines', async () => (await page.locator('#rank-memory li').count()) === 4);
    const lines = await page.locator('#rank-memory li').allTextContents();
    assert(lines[0] === 'rank 0: peak 3.0 GiB, GPU used 5.5 GiB', `memory: ${lines[0]}`);
    assert(lines[1] === 'rank 1: peak 3.3 GiB, GPU used 5.5 GiB', `memory: ${lines[1]}`);
    assert(await page.locator('[data-chart="breakdown"] #rank-memory').count() === 1,
      'the memory lines are not in the breakdown panel');
  });

  await steps.run('job page names the straggler next to the heatmap and shows each rank\'s phase', async () => {
    await page.waitForSelector('#stragglers li');
    const text = await page.textContent('#stragglers');
    assert(text.includes('rank 3 on w2: 1.9x the median step work'), `stragglers: ${text}`);
    assert(await page.locator('#stragglers b').count() === 0, 'a <b> element was created in the stragglers');
    const phases = await page.locator('#ranks-table td.phase').allTextContents();
    assert(phases[0].startsWith('collective allreduce #240 (bucket 1)'), `phases: ${JSON.stringify(phases)}`);
    assert(phases[3].includes('straggler'), `rank 3 not marked: ${JSON.stringify(phases)}`);
  });

  await steps.run('log tail and reasons show markup as text', async () => {
    await waitFor('log text', async () => (await page.textContent('#log-text')).includes('<script>x</script>'));
    assert(await page.locator('#log-text script, #log-text *').count() === 0, 'log text produced elements');
    const reasons = await page.locator('#events-table td.reason-full').allTextContents();
    assert(reasons.includes('all 4 ranks joined <b>rendezvous</b>'), `events: ${JSON.stringify(reasons)}`);
    assert(await page.locator('#events-table b').count() === 0, 'a <b> element was created in the events');
    await page.selectOption('#log-rank', '1:3');
    await waitFor('rank 3 log', async () => (await page.textContent('#log-text')).includes('rank 3'));
  });

  await steps.run('an eval job\'s page shows top-1, per-class accuracy and the confusion matrix', async () => {
    await page.goto(`${base}/#/jobs/5`);
    await waitFor('evaluation panel', async () => page.isVisible('#eval-panel'));
    const facts = await page.textContent('#eval-facts');
    assert(facts.includes('75.00%') && facts.includes('step 300'), `eval facts: ${facts}`);
    const classes = await page.locator('#eval-classes tbody tr').allTextContents();
    assert(classes.length === 2 && classes[0].includes('<b>cat</b>'), `classes: ${classes}`);
    const cells = await page.locator('#eval-confusion tbody td').allTextContents();
    assert(cells.join(',') === '4,0,2,2', `confusion: ${cells}`);
    await page.goto(`${base}/#/jobs/1`);
    assert(!(await page.isVisible('#eval-panel')), 'a training job shows no evaluation panel');
  });

  await steps.run('job page screenshots, dark and light', async () => {
    await page.screenshot({ path: join(shots, 'mock-job-dark.png'), fullPage: true });
    const bgDark = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    await page.click('#theme');
    assert(await page.evaluate(() => document.documentElement.dataset.theme) === 'light', 'theme did not switch');
    const bgLight = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    assert(bgDark !== bgLight, 'background colour did not change with the theme');
    await page.screenshot({ path: join(shots, 'mock-job-light.png'), fullPage: true });
    await page.reload();
    await page.waitForSelector('#job-name');
    assert(await page.evaluate(() => document.documentElement.dataset.theme) === 'light', 'theme choice not kept');
  });

  await steps.run('job page fits a narrow window', async () => {
    await page.setViewportSize({ width: 760, height: 900 });
    await page.waitForTimeout(300);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert(overflow <= 1, `page is ${overflow}px wider than a 760px window`);
    await page.screenshot({ path: join(shots, 'mock-job-narrow.png'), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  await steps.run('workers page: slots, heartbeat age, liveness; names as text', async () => {
    await page.goto(`${base}/#/workers`);
    await page.waitForSelector('#workers-table tr[data-worker="w1"]');
    const dead = page.locator('#workers-table tr[data-worker="<b>w3</b>"]');
    assert(await dead.count() === 1, 'worker <b>w3</b> not shown by its literal name');
    assert((await dead.locator('.badge').textContent()) === 'dead', 'w3 should be dead');
    assert((await page.textContent('#workers-table tr[data-worker="w1"] .badge')) === 'alive', 'w1 should be alive');
    assert(/s ago$/.test(await page.textContent('#workers-table tr[data-worker="w1"] [data-ago]')), 'no "s ago"');
    assert(await page.locator('#workers-table b').count() === 0, 'a <b> element was created');
  });

  await steps.run('sweep page draws the five figures and the report', async () => {
    await page.goto(`${base}/#/sweeps/1`);
    for (const key of ['epoch-time', 'speedup', 'efficiency', 'comm-share', 'final-accuracy']) {
      await waitFor(`${key} points`, async () => (await dataPoints(page, key)) === 8);
    }
    assert(await page.locator('#report-table tbody tr').count() === 8, 'report should have 8 rows');
    assert(await page.locator('#points-table tbody tr').count() === 16, 'points table should have 16 rows');
    await page.screenshot({ path: join(shots, 'mock-sweep.png'), fullPage: true });
  });

  await steps.run('search page: trials, metric vs steps per trial, a scatter per key, the best', async () => {
    await page.goto(`${base}/#/searches/1`);
    // Trials 0, 1, 3 and 4 have points (5, 5+10+30, 5+10 and 2 steps); 1 and 3 were promoted.
    await waitFor('metric curves', async () => (await dataPoints(page, 'search-metric')) === 67);
    const metric = '[data-chart="search-metric"]';
    assert(await page.getAttribute(metric, 'data-series') === '4', 'expected 4 trial curves');
    assert(await page.getAttribute(metric, 'data-promoted') === '2', 'expected 2 promoted curves');
    assert(await page.getAttribute(metric, 'data-best') === '1', 'trial 1 is the best');
    // One point per trial with a best metric (0, 1, 3); lr is searched log-uniformly.
    for (const [key, scale] of [['lr', 'log'], ['weight_decay', 'linear'], ['optimizer', 'category']]) {
      const chart = `[data-chart="param-${key}"]`;
      assert(await dataPoints(page, `param-${key}`) === 3, `${key}: expected 3 points`);
      assert(await page.getAttribute(chart, 'data-series') === '1', `${key}: expected one series`);
      assert(await page.getAttribute(chart, 'data-scale') === scale, `${key}: expected a ${scale} axis`);
    }
    const title = await page.getAttribute('[data-chart="param-lr"] canvas', 'aria-label');
    assert(title === 'lr vs val_accuracy', `lr chart: ${title}`);
    assert(await page.locator('#trials-table tbody tr').count() === 5, 'expected 5 trial rows');
    assert(await page.locator('#trials-table tr.best[data-trial="1"]').count() === 1, 'trial 1 not marked best');
    const best = await page.textContent('#best-trial');
    assert(best.startsWith('trial 1: val_accuracy 0.88 at rung 2, step 900.'), `best trial: ${best}`);
    assert((await page.textContent('#search-name')) === 'vit-micro <b>asha</b>', 'name not shown as text');
    await page.screenshot({ path: join(shots, 'mock-search.png'), fullPage: true });
  });

  await steps.run('a search page left while it reads does not change the next page', async () => {
    // Hold the search page's metric reads until the workers page is live.
    let release;
    const held = new Promise((resolve) => {
      release = resolve;
    });
    let holding = 0;
    let finished = 0;
    const hold = async (route) => {
      holding++;
      await held;
      await route.continue().catch(() => {});
    };
    const onDone = (r) => {
      if (/\/api\/v1\/jobs\/\d+\/metrics/.test(r.url())) finished++;
    };
    await page.route(/\/api\/v1\/jobs\/\d+\/metrics/, hold);
    page.on('requestfinished', onDone);
    page.on('requestfailed', onDone);
    try {
      await page.goto(`${base}/#/searches/1`);
      await waitFor('a held metrics read', async () => holding > 0);
      await page.goto(`${base}/#/workers`);
      await page.waitForSelector('#workers-table tr[data-worker="w1"]');
      await page.waitForSelector('#live[data-state="live"]');
      release();
      await waitFor('the held reads answered', async () => finished >= holding);
      // The left page's code runs on in the tasks after its reads' answers.
      await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 200)));
      const live = await page.getAttribute('#live', 'data-state');
      const title = await page.getAttribute('#live', 'title');
      assert(live === 'live', `the workers page's status became ${live} (${title})`);
    } finally {
      release();
      page.off('requestfinished', onDone);
      page.off('requestfailed', onDone);
      await page.unroute(/\/api\/v1\/jobs\/\d+\/metrics/, hold);
    }
  });

  await steps.run('sweep page of a ZeRO study: measured memory per rank, one line per stage', async () => {
    await page.goto(`${base}/#/sweeps/2`);
    const chart = '[data-chart="memory-per-rank"]';
    // Three stages over 1-8 ranks; the 8-rank stage-0 point reported no figures.
    await waitFor('memory points', async () => (await dataPoints(page, 'memory-per-rank')) === 11);
    assert(await page.getAttribute(chart, 'data-series') === '3', 'memory chart should draw 3 series');
    const labels = await page.getAttribute(chart, 'data-series-labels');
    assert(labels === 'ZeRO 0 (baseline)|ZeRO 1 (P_os)|ZeRO 2 (P_os+g)', `memory series labels: ${labels}`);
    const note = await page.textContent(`${chart} .chart-note`);
    assert(note === 'measured peak (RSS)', `memory note: ${note}`);
    // Beside the epoch time: the same row of the page.
    const [timeBox, memBox] = await Promise.all(['[data-chart="epoch-time"]', chart]
      .map((sel) => page.locator(sel).boundingBox()));
    assert(Math.abs(timeBox.y - memBox.y) < 2 && memBox.x > timeBox.x, 'memory chart is not beside the epoch time');
    assert(await dataPoints(page, 'epoch-time') === 12, 'epoch time should draw all 12 points');
    assert(await page.getAttribute('[data-chart="epoch-time"]', 'data-series') === '3', 'one epoch-time line per stage');
    // The measured peak with its source, then the counted bytes as its breakdown.
    const rowCells = (i) => page.locator('#report-table tbody tr').nth(i).locator('td').allTextContents();
    const peakCell = (i) => page.locator('#report-table tbody tr').nth(i).locator('td[data-key="peak-memory"]');
    const cells = await rowCells(0);
    assert(cells.includes('4.0 GiB (RSS)') && cells.includes('2.0 GiB') && cells.includes('1.0 GiB'),
      `stage 0 row: ${cells.join(' | ')}`);
    const title0 = await peakCell(0).getAttribute('title');
    assert(title0 === '4.0 GiB (optimizer 2.0 GiB, gradients 1.0 GiB, parameters 512.0 MiB)',
      `stage 0 breakdown: ${title0}`);
    const last0 = await rowCells(3);
    assert(last0.filter((c) => c === '–').length >= 4, `unreported figures should show –: ${last0.join(' | ')}`);
    const z2 = await rowCells(11);
    assert(z2.includes('1.4 GiB (RSS)') && z2.includes('256.0 MiB') && z2.includes('128.0 MiB'),
      `stage 2 at 8 ranks: ${z2.join(' | ')}`);
    await page.screenshot({ path: join(shots, 'mock-sweep-zero.png'), fullPage: true });
  });

  await steps.run('cancel asks first, sends the bearer token, and shows CANCELLED', async () => {
    await page.goto(`${base}/#/jobs/1`);
    await page.waitForSelector('#job-name');
    const mounts = Number(await page.getAttribute('#main', 'data-mounts'));
    await page.fill('#token', 's3cret');
    await page.press('#token', 'Enter');
    // A new token signs in again and rebuilds the page.
    await waitFor('page rebuilt', async () => Number(await page.getAttribute('#main', 'data-mounts')) > mounts);
    await page.waitForSelector('#cancel:not([disabled])');
    const auth = [];
    page.on('request', (r) => {
      if (r.method() === 'POST') auth.push(r.headers().authorization);
    });
    await page.click('#cancel');
    assert(await page.isVisible('#cancel-confirm'), 'no confirmation step');
    await page.click('#cancel-abort');
    assert(!(await page.isVisible('#cancel-confirm')), 'confirmation did not close');
    assert(auth.length === 0, 'cancelled without confirmation');
    await page.click('#cancel');
    await page.click('#cancel-confirm');
    await waitFor('CANCELLED badge', async () => (await page.textContent('#job-state')) === 'CANCELLED');
    assert(auth.length === 1 && auth[0] === 'Bearer s3cret', `authorization headers sent: ${JSON.stringify(auth)}`);
    assert(await page.isDisabled('#cancel'), 'Cancel stays enabled on a cancelled job');
    assert(mock.world.jobs[0].state === 'JOB_STATE_CANCELLED', 'the server did not cancel job 1');
  });

  await steps.run('no console errors, CSP violations or dialogs', async () => assertClean(seen));
  await context.close();

  // A coordinator at its stream limit answers 503: pages fall back to GET.
  const refusing = await startMockServer({ dist: args.dist, refuseStreams: true, tickMs: 200 });
  servers.push(refusing);
  const context2 = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const seen2 = await watch(context2);
  const page2 = await context2.newPage();
  await steps.run('with streams refused (503) the job page polls every 5 s', async () => {
    await page2.goto(`http://127.0.0.1:${refusing.port}/#/jobs/1`);
    await waitFor('polling indicator', async () => (await page2.textContent('#live')) === 'polling every 5 s');
    await waitFor('loss points by GET', async () => (await dataPoints(page2, 'loss')) > 0, { timeoutMs: 15000 });
    const first = await dataPoints(page2, 'loss');
    await waitFor('a later poll', async () => (await dataPoints(page2, 'loss')) > first, { timeoutMs: 15000 });
    await waitFor('log by GET', async () => (await page2.textContent('#log-text')).includes('step '));
    await page2.goto(`http://127.0.0.1:${refusing.port}/#/workers`);
    await page2.waitForSelector('#workers-table tr[data-worker="w1"]');
  });
  // The refused streams are logged by Chromium as failed loads; nothing else may be.
  seen2.errors = seen2.errors.filter((e) => !/status of 503/.test(e));
  await steps.run('fallback: no other console errors, CSP violations or dialogs', async () => assertClean(seen2));
  await context2.close();

  // A coordinator with authentication: reads need a user token.
  const TOKEN = 'tsr_user_1_s3cret';
  const locked = await startMockServer({ dist: args.dist, userToken: TOKEN, tickMs: 200 });
  servers.push(locked);
  const context3 = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const seen3 = await watch(context3);
  const page3 = await context3.newPage();
  const lockedBase = `http://127.0.0.1:${locked.port}`;
  await steps.run('without a token the page asks to sign in', async () => {
    await page3.goto(`${lockedBase}/#/jobs`);
    await page3.waitForSelector('#signin', { state: 'visible' });
    await waitFor('sign-in status', async () => (await page3.textContent('#live')) === 'sign-in needed');
    assert(await page3.locator('#jobs-table tr[data-job-id]').count() === 0, 'jobs shown without a token');
  });
  await steps.run('a wrong token is refused, the right one loads the page live', async () => {
    await page3.fill('#token', 'tsr_user_1_wrong');
    await page3.press('#token', 'Enter');
    await waitFor('refusal', async () => (await page3.textContent('#signin .signin-error')).includes('not accepted'));
    await page3.fill('#token', TOKEN);
    await page3.press('#token', 'Enter');
    await page3.waitForSelector('#jobs-table tr[data-job-id="1"]', { timeout: 10000 });
    assert(await page3.isHidden('#signin'), 'sign-in banner still shown');
    await waitFor('live over the session cookie', async () => (await page3.textContent('#live')) === 'live');
  });
  await steps.run('the stored token signs in again after a reload; cancel sends it', async () => {
    await page3.reload();
    await page3.goto(`${lockedBase}/#/jobs/1`);
    await waitFor('loss points', async () => (await dataPoints(page3, 'loss')) > 0, { timeoutMs: 15000 });
    assert((await page3.textContent('#live')) === 'live', 'not live after reload');
    await page3.click('#cancel');
    await page3.click('#cancel-confirm');
    await waitFor('CANCELLED', async () => (await page3.textContent('#job-state')) === 'CANCELLED');
  });
  // The refused requests before signing in are logged by Chromium as failed loads.
  seen3.errors = seen3.errors.filter((e) => !/status of 401/.test(e));
  await steps.run('sign-in: no other console errors, CSP violations or dialogs', async () => assertClean(seen3));
  await context3.close();
} catch (e) {
  if (!(e instanceof StepFailed)) {
    steps.failed++;
    console.log(`not ok - ${e.stack || e}`);
  }
} finally {
  if (browser) await browser.close().catch(() => {});
  for (const s of servers) s.close();
  steps.summary();
}
process.exit(steps.failed ? 1 : 0);
