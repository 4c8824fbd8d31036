// #/searches/ID: one hyperparameter search (docs/search.md). Its best trial;
// the search's metric against steps for every trial (each trial's jobs'
// points through /api/v1/jobs/ID/metrics), promoted trials drawn bold and
// the best one marked; each searched key against the trials' best metric as
// a scatter (a log x axis for a loguniform key); and the trials table.
// Searches have no event stream: the page reads GET /api/v1/searches/ID and
// the metrics of the jobs still running every 5 s until the search ends.

import { ApiError, getJSON, postJSON } from '../lib/api.js';
import { h, setChildren, setText, table } from '../lib/dom.js';
import { fmtNum, fmtShortTime, fmtTime, isTerminal, num, stateName } from '../lib/format.js';
import { POLL_MS } from '../lib/live.js';
import { bestTrial, parameterKeys, parameterRange, searchFigures } from '../lib/search.js';
import { getToken } from '../lib/settings.js';
import { ChartPanel, alpha, color, lineOptions } from '../charts.js';
import { confirmAction, errorBox, facts, meter, panel, stateBadge } from '../ui.js';

const METRIC_POINTS_LIMIT = 100000;

function jobLink(jobId) {
  return num(jobId) > 0 ? h('a', { href: `#/jobs/${encodeURIComponent(jobId)}` }, `#${jobId}`) : '';
}

function describeValues(search, trial) {
  return parameterKeys(search).filter((k) => trial.parameters?.[k] != null)
    .map((k) => `${k}=${trial.parameters[k]}`).join(', ');
}

// The metric-vs-steps datasets: promoted trials bold, the others thin and
// faded, the best trial on top with markers.
function curveDatasets(curves) {
  return curves.map((c, i) => {
    const base = color(i);
    return {
      label: c.best ? `${c.label} (best)` : c.label,
      data: c.points,
      borderColor: c.best || c.promoted ? base : alpha(base, 0.45),
      backgroundColor: base,
      borderWidth: c.best ? 3 : c.promoted ? 2 : 1,
      pointRadius: c.best ? 2 : 0,
      order: c.best ? 0 : c.promoted ? 1 : 2,
      promoted: c.promoted,
    };
  });
}

// Metric ticks without binary-fraction noise ("0.7", not "0.7000000000000001").
const metricTick = (v) => fmtNum(v, 4);

function scatterOptions(s, metric) {
  const options = lineOptions({ xTitle: s.key, yTitle: metric, legend: false, yTick: metricTick });
  options.interaction = { mode: 'nearest', intersect: true };
  options.scales.x.type = s.axis.type === 'log' ? 'logarithmic' : 'linear';
  options.scales.y.grace = '8%';
  if (s.axis.type === 'category') {
    // A tick at each choice's position, labelled with the choice.
    options.scales.x.afterBuildTicks = (axis) => {
      axis.ticks = s.axis.labels.map((_, i) => ({ value: i }));
    };
    options.scales.x.ticks.callback = (v) => s.axis.labels[v] ?? '';
  }
  options.plugins.tooltip.callbacks = {
    label: (c) => `trial ${c.raw.trial}: ${s.key}=${s.axis.type === 'category'
      ? s.axis.labels[c.raw.x] : c.raw.x}, ${metric} ${fmtNum(c.raw.y, 4)}`,
  };
  return options;
}

export function mountSearch(root, { id }, ctx) {
  ctx.setTitle(`Search ${id}`);
  let search = null;
  let stopped = false;
  // Set by unmount: a read in flight then must not draw into destroyed charts
  // nor set the status of the page shown next.
  let unmounted = false;
  let timer = null;
  // job id -> its points of the metric; jobs that ended are not read again.
  const metrics = new Map();
  const endedJobs = new Set();

  const nameEl = h('h1', { id: 'search-name' }, '');
  const badgeSlot = h('span', { id: 'search-state' });
  const reasonEl = h('p', { class: 'reason-line', hidden: true });
  const factsSlot = h('div');
  const notice = h('div');
  const bestSlot = h('div', { id: 'best-trial' });
  const cancelButton = h('button', { type: 'button', class: 'danger-outline', id: 'cancel-search' }, 'Cancel search…');
  const confirm = confirmAction(cancelButton, {
    id: 'cancel-search',
    question: () => `Cancel search ${id}? Its running trials are cancelled and no more start.`,
    yes: 'Cancel search',
    no: 'Keep running',
    action: async () => {
      await postJSON(`/api/v1/searches/${encodeURIComponent(id)}/cancel`, getToken());
      await refresh();
    },
  });
  const metricPanel = new ChartPanel('search-metric', 'Metric vs steps, every trial',
    { size: 'wide', note: 'bold: promoted', emptyText: 'No trial reported the metric yet' });
  const paramsGrid = h('div', { class: 'grid grid-2', id: 'search-parameters' });
  let paramPanels = [];
  const trialsTable = table([['Trial', 'num'], 'Values', 'Status', ['Rung', 'num'], ['Steps', 'num'],
    ['Best metric', 'num'], 'Rung metrics', 'Jobs']);
  trialsTable.el.id = 'trials-table';

  const head = h('div', { class: 'page-head' }, nameEl, badgeSlot, h('div', { class: 'spacer' }),
    cancelButton, confirm);
  const content = h('div', null, factsSlot, panel('Best trial', bestSlot), metricPanel.el, paramsGrid,
    panel('Trials', trialsTable.wrap, { className: 'flush' }));
  setChildren(root, h('nav', { class: 'crumbs' }, 'Searches / ', `#${id}`), head, reasonEl, notice, content);
  metricPanel.init({ type: 'line', data: { datasets: [] },
    options: lineOptions({ xTitle: 'step', yTitle: 'metric', xMin: 0, yTick: metricTick }) });

  function renderHeader() {
    const cfg = search.spec?.search || {};
    setText(nameEl, search.name || '(unnamed)');
    ctx.setTitle(`${search.name || 'search'} · search ${id}`);
    setChildren(badgeSlot, stateBadge(search.state));
    reasonEl.hidden = !search.reason;
    setText(reasonEl, search.reason || '');
    cancelButton.disabled = isTerminal(search.state);
    const trials = search.trials || [];
    const ended = trials.filter((t) => ['completed', 'stopped', 'failed'].includes(t.status)).length;
    const total = cfg.method === 'grid' ? trials.length : num(cfg.max_trials) || trials.length;
    setChildren(factsSlot, facts([
      ['Method', cfg.method || '–'],
      ['Metric', `${cfg.metric || '–'} (${cfg.mode || 'default'})`],
      ['Trials', meter(trials.length, total, `${trials.length}/${total} started, ${ended} ended`,
        { fullIsBusy: false })],
      ['Created', h('span', { title: fmtTime(search.created_unix_ms) }, fmtShortTime(search.created_unix_ms))],
    ]));
  }

  function renderBest() {
    const best = bestTrial(search);
    const metric = search.spec?.search?.metric || 'metric';
    setChildren(bestSlot, best
      ? [h('strong', null, `trial ${num(best.index)}`), `: ${metric} ${fmtNum(best.best_metric, 4)}`,
        ` at rung ${num(best.best_rung)}, step ${num(best.best_step)}. `, describeValues(search, best), ' ',
        ...(best.job_ids || []).map((j, i) => [i ? ' ' : '', jobLink(j)])]
      : h('span', { class: 'muted' }, 'No trial has a metric yet.'));
  }

  function renderTrials() {
    const best = bestTrial(search);
    const rows = (search.trials || []).map((t) => h('tr', {
      class: best && num(best.index) === num(t.index) ? 'best' : null,
      dataset: { trial: String(num(t.index)), status: t.status || '' },
    },
    h('td', { class: 'num' }, `${num(t.index)}${best && num(best.index) === num(t.index) ? ' ★' : ''}`),
    h('td', null, describeValues(search, t)),
    h('td', null, t.status || stateName(t.state)),
    h('td', { class: 'num' }, String(num(t.rung))),
    h('td', { class: 'num' }, String(num(t.steps))),
    h('td', { class: 'num' }, t.best_metric == null ? '–' : fmtNum(t.best_metric, 4)),
    h('td', null, (t.rung_metrics || []).map((m) => fmtNum(m, 4)).join(' → ')),
    h('td', { class: 'links' }, (t.job_ids || []).map((j, i) => [i ? ' ' : '', jobLink(j)]))));
    setChildren(trialsTable.tbody, rows.length ? rows
      : h('tr', null, h('td', { colspan: 8, class: 'empty' }, 'No trial started yet.')));
  }

  // One scatter panel per searched key, built once the keys are known.
  function ensureParamPanels(scatters, metric) {
    if (paramPanels.length === scatters.length) return;
    for (const p of paramPanels) p.destroy();
    paramPanels = scatters.map((s) => {
      const p = new ChartPanel(`param-${s.key}`, `${s.key} vs ${metric}`,
        { note: s.axis.type === 'log' ? 'log scale' : '', emptyText: 'No trial has a metric yet' });
      p.el.dataset.scale = s.axis.type;
      return p;
    });
    setChildren(paramsGrid, paramPanels.map((p) => p.el));
    paramPanels.forEach((p, i) => p.init({ type: 'scatter', data: { datasets: [] },
      options: scatterOptions(scatters[i], metric) }));
  }

  function renderFigures() {
    const metric = search.spec?.search?.metric || 'metric';
    const f = searchFigures(search, metrics);
    metricPanel.chart.options.scales.y.title.text = metric;
    metricPanel.chart.options.scales.y.grace = '5%';
    metricPanel.chart.data.datasets = curveDatasets(f.curves);
    metricPanel.chart.update('none');
    metricPanel.setPoints(f.curves.reduce((n, c) => n + c.points.length, 0));
    metricPanel.el.dataset.series = String(f.curves.length);
    metricPanel.el.dataset.promoted = String(f.curves.filter((c) => c.promoted).length);
    metricPanel.el.dataset.best = f.best ? String(num(f.best.index)) : '';
    ensureParamPanels(f.scatters, metric);
    f.scatters.forEach((s, i) => {
      const p = paramPanels[i];
      Object.assign(p.chart.options.scales.x, parameterRange(search, s));
      p.chart.data.datasets = [{
        label: s.key,
        data: s.points,
        pointRadius: s.points.map((pt) => (f.best && pt.trial === num(f.best.index) ? 6 : 3.5)),
        backgroundColor: s.points.map((pt) => (f.best && pt.trial === num(f.best.index) ? color(3) : color(0))),
      }];
      p.chart.update('none');
      p.setPoints(s.points.length);
      p.el.dataset.series = '1';
    });
  }

  // Reads the metric of every job not read since it ended.
  async function readMetrics() {
    const name = search.spec?.search?.metric;
    if (!name) return;
    const states = new Map();
    for (const t of search.trials || []) {
      const jobs = t.job_ids || [];
      jobs.forEach((j, i) => states.set(String(j), i < jobs.length - 1 || t.status !== 'running'));
    }
    await Promise.all([...states.entries()].filter(([j]) => num(j) > 0 && !endedJobs.has(j))
      .map(async ([j, ended]) => {
        const r = await getJSON(`/api/v1/jobs/${encodeURIComponent(j)}/metrics?name=${encodeURIComponent(name)}` +
          `&limit=${METRIC_POINTS_LIMIT}`);
        metrics.set(j, r.points || []);
        if (ended) endedJobs.add(j);
      }));
  }

  async function refresh() {
    try {
      search = await getJSON(`/api/v1/searches/${encodeURIComponent(id)}`);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        setChildren(notice, errorBox(`Search ${id} not found.`));
        head.hidden = true;
        content.hidden = true;
        stopped = true;
        return;
      }
      throw e;
    }
    renderHeader();
    renderBest();
    renderTrials();
    await readMetrics();
    if (unmounted) return;
    renderFigures();
    root.dataset.loaded = 'true';
  }

  async function loop() {
    let status;
    let detail = '';
    try {
      await refresh();
      status = search && isTerminal(search.state) ? 'ended' : 'polling';
    } catch (e) {
      status = e instanceof ApiError && e.status === 401 ? 'signin' : 'offline';
      detail = String(e.message || e);
    }
    if (unmounted) return;
    ctx.setLive(status, detail);
    if (!stopped && !(search && isTerminal(search.state))) timer = setTimeout(loop, POLL_MS);
  }
  loop();
  return {
    unmount() {
      unmounted = true;
      stopped = true;
      clearTimeout(timer);
      metricPanel.destroy();
      for (const p of paramPanels) p.destroy();
    },
  };
}
