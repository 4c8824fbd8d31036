// #/jobs/ID: one job. Header with state, reason and attempts; live charts of
// loss, test accuracy and throughput; the per-rank step-time breakdown
// (compute vs exposed communication) with each rank's device memory; a rank x step heatmap of step time;
// the log tail per rank; ranks with their exit reasons; the state events; and
// Cancel. Live from /api/v1/stream/jobs/ID (events job, metrics, log).

import { ApiError, getJSON, postJSON } from '../lib/api.js';
import { h, setChildren, setText, table } from '../lib/dom.js';
import {
  fmtBytes, fmtDuration, fmtNum, fmtPct, fmtShortTime, fmtTime, isTerminal, num, stateName,
} from '../lib/format.js';
import { LiveSource } from '../lib/live.js';
import { LogBuffer } from '../lib/logs.js';
import { MetricStore } from '../lib/metrics.js';
import { getToken } from '../lib/settings.js';
import {
  ChartPanel, PHASE_COLORS, color, heatColor, lineDatasets, lineOptions,
} from '../charts.js';
import { confirmAction, errorBox, facts, panel, stateBadge } from '../ui.js';

const CHART_INTERVAL_MS = 500;
const HEAT_COLUMNS = 100;

export function mountJob(root, { id }, ctx) {
  ctx.setTitle(`Job ${id}`);
  let job = null;
  let notFound = false;
  const store = new MetricStore();
  const logs = new Map();           // `${attempt}:${rank}` -> LogBuffer
  let logChoice = null;             // key the user picked, or null: follow rank 0 of the current attempt

  // ---- header ----
  const nameEl = h('h1', { id: 'job-name', class: 'job-title' }, '');
  const badgeSlot = h('span', { id: 'job-state' });
  const reasonEl = h('p', { id: 'job-reason', class: 'reason-line', hidden: true });
  const factsSlot = h('div');
  const notice = h('div');
  const cancelButton = h('button', { type: 'button', class: 'danger-outline', id: 'cancel' }, 'Cancel job…');
  const confirm = confirmAction(cancelButton, {
    id: 'cancel',
    question: () => `Cancel job ${id}${job?.name ? ` (${job.name})` : ''}? Its ranks are stopped.`,
    yes: 'Cancel job',
    no: 'Keep running',
    action: async () => {
      try {
        const r = await postJSON(`/api/v1/jobs/${encodeURIComponent(id)}/cancel`, getToken());
        if (job && r.state) {
          job = { ...job, state: r.state };
          renderHeader();
        }
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) {
          throw new Error(`${e.message} — set the API token in the top bar`);
        }
        throw e;
      }
    },
  });

  // ---- charts ----
  const lossPanel = new ChartPanel('loss', 'Training loss', { note: 'mean over ranks' });
  const accPanel = new ChartPanel('accuracy', 'Test accuracy', { emptyText: 'Measured at each epoch end' });
  const ipsPanel = new ChartPanel('throughput', 'Throughput', { note: 'images/s, all ranks' });
  const breakdownPanel = new ChartPanel('breakdown', 'Step time per rank', {
    note: 'latest report', size: 'wide',
  });
  const heatMode = h('select', { class: 'small', 'aria-label': 'Heatmap colour' },
    h('option', { value: 'ratio' }, 'vs step median'),
    h('option', { value: 'abs' }, 'absolute'));
  const heatPanel = new ChartPanel('heatmap', 'Step time, rank × step', {
    size: 'wide', tools: heatMode,
  });
  const heatLegend = h('div', { class: 'heat-legend' },
    h('span', { class: 'heat-lo' }), h('span', { class: 'heat-swatch' }), h('span', { class: 'heat-hi' }));
  heatPanel.el.append(heatLegend);
  // Ranks flagged slower than their peers (the coordinator's straggler check).
  const stragglersEl = h('ul', { id: 'stragglers', class: 'stragglers', hidden: true });
  heatPanel.el.append(stragglersEl);
  // Each rank's newest device memory figures, under its step breakdown.
  const memoryEl = h('ul', { id: 'rank-memory', class: 'rank-memory', hidden: true });
  breakdownPanel.el.append(memoryEl);

  // ---- ranks, logs, events ----
  const ranksTable = table([['Rank', 'num'], 'Worker', ['Slot', 'num'], 'State', ['Step', 'num'], 'Phase', ['PID', 'num'],
    ['Exit', 'num'], 'Signal', 'Exit reason', ['Test acc.', 'num'], 'Param hash'], 'ranks-table');
  ranksTable.el.id = 'ranks-table';
  const eventsTable = table(['Time', 'Transition', 'Reason'], 'events-table');
  eventsTable.el.id = 'events-table';
  const logSelect = h('select', { id: 'log-rank', class: 'small', 'aria-label': 'Log of rank' });
  const logFollow = h('label', { class: 'check' }, h('input', { type: 'checkbox', checked: true }), 'follow');
  const logText = h('pre', { id: 'log-text', class: 'log', tabindex: '0' });
  const specBox = h('pre', { class: 'spec' });
  // An eval job's result (ranks[0].eval): totals, per-class accuracy, confusion.
  const evalFacts = h('div', { id: 'eval-facts' });
  const evalClasses = table(['Class', ['Accuracy', 'num'], ['Samples', 'num']], 'eval-classes');
  evalClasses.el.id = 'eval-classes';
  const evalConfusion = h('div', { id: 'eval-confusion', class: 'table-wrap' });
  const evalPanel = panel('Evaluation', h('div', null, evalFacts,
    h('div', { class: 'grid grid-2' }, evalClasses.wrap, evalConfusion)), { className: 'flush' });
  evalPanel.id = 'eval-panel';
  evalPanel.hidden = true;

  const head = h('div', { class: 'page-head job-head' },
    nameEl, badgeSlot, h('div', { class: 'spacer' }), cancelButton, confirm);
  const content = h('div', null,
    factsSlot,
    h('div', { class: 'grid grid-3' }, lossPanel.el, accPanel.el, ipsPanel.el),
    h('div', { class: 'grid grid-2' }, breakdownPanel.el, heatPanel.el),
    evalPanel,
    panel('Ranks', ranksTable.wrap, { className: 'flush' }),
    panel('Log', logText, { tools: h('span', { class: 'tools' }, logSelect, logFollow) }),
    panel('Events', eventsTable.wrap, { className: 'flush' }),
    h('details', { class: 'panel spec-panel' }, h('summary', null, 'Job spec (YAML)'), specBox));
  setChildren(root,
    h('nav', { class: 'crumbs' }, h('a', { href: '#/jobs' }, 'Jobs'), ' / ', `#${id}`),
    head, reasonEl, notice, content);

  // ---- rendering ----
  function renderHeader() {
    if (!job) return;
    const name = job.name || '(unnamed)';
    setText(nameEl, name);
    ctx.setTitle(`${name} · job ${id}`);
    const state = stateName(job.state);
    if (badgeSlot.dataset.state !== state) {
      badgeSlot.dataset.state = state;
      setChildren(badgeSlot, stateBadge(job.state),
        job.not_stored ? h('span', { class: 'muted' }, ' not yet stored') : null);
    }
    const reason = [job.reason, job.pending_reason && `pending: ${job.pending_reason}`]
      .filter(Boolean).join(' · ');
    reasonEl.hidden = !reason;
    setText(reasonEl, reason);
    const terminal = isTerminal(job.state);
    cancelButton.disabled = terminal;
    if (terminal) {
      confirm.hidden = true;
      cancelButton.hidden = false;
    }
    const tr = job.spec?.trainer || {};
    const created = num(job.created_unix_ms);
    const duration = terminal
      ? h('span', null, fmtDuration(num(job.updated_unix_ms) - created))
      : h('span', { dataset: { since: String(created) } }, fmtDuration(Date.now() - created));
    setChildren(factsSlot, facts([
      ['Attempt', `${num(job.attempt)}${num(job.spec?.max_restarts) ? ` of ${num(job.spec.max_restarts) + 1}` : ''}`],
      ['Ranks', String(num(job.spec?.world_size))],
      job.owner ? ['Owner', job.owner] : null,
      job.slurm_allocation ? ['Slurm', `allocation ${job.slurm_allocation}`] : null,
      num(job.preemptions) ? ['Preempted', `${num(job.preemptions)} (not counted as restarts)`] : null,
      job.not_stored
        ? ['Stored', 'not yet: the database is failing writes; this is the coordinator\'s current state']
        : null,
      num(job.metrics_not_stored) || num(job.log_lines_not_stored)
        ? ['Not stored', `${num(job.metrics_not_stored)} metric rows, ${num(job.log_lines_not_stored)} log lines (the database's disk was below its reserve)`]
        : null,
      ['Model', `${tr.model || '–'} · ${tr.dataset || '–'}`],
      ['Batch', `${num(tr.batch_size)}/rank`],
      ['Created', h('span', { title: fmtTime(created) }, fmtShortTime(created))],
      ['Duration', duration],
      ...progressFacts(),
      num(job.sweep_id) > 0
        ? ['Sweep', h('a', { href: `#/sweeps/${encodeURIComponent(job.sweep_id)}` },
          `#${job.sweep_id} point ${num(job.sweep_point)}`)]
        : null,
    ]));
    if (specBox.textContent !== (job.spec_yaml || '')) specBox.textContent = job.spec_yaml || '';
  }

  function progressFacts() {
    const out = [];
    const total = store.latest('total_steps', 0)?.value ?? store.latest('total_steps')?.value;
    const step = store.maxStep;
    if (step >= 0) out.push(['Step', total ? `${step} / ${total}` : String(step)]);
    const epoch = store.latest('epoch');
    if (epoch) out.push(['Epoch', fmtNum(epoch.value, 3)]);
    const loss = store.latest('loss');
    if (loss) out.push(['Loss', fmtNum(loss.value, 4)]);
    const acc = store.latest('test_accuracy', 0) ?? store.latest('test_accuracy');
    if (acc) out.push(['Test acc.', fmtPct(acc.value)]);
    const ips = store.sumByStep('images_per_sec', num(job?.spec?.world_size));
    if (ips.length) out.push(['Images/s', fmtNum(ips[ips.length - 1].y, 4)]);
    return out;
  }

  function renderRanks() {
    const ranks = [...(job?.ranks || [])].sort((a, b) => num(a.rank) - num(b.rank));
    if (!ranks.length) {
      setChildren(ranksTable.tbody, h('tr', null, h('td', { colspan: 12, class: 'empty' },
        job && stateName(job.state) === 'QUEUED' ? 'Not placed yet.' : 'No ranks.')));
      return;
    }
    setChildren(ranksTable.tbody, ranks.map((r) => {
      const exited = r.state === 'exited';
      return h('tr', { dataset: { rank: String(num(r.rank)) } },
        h('td', { class: 'num' }, String(num(r.rank))),
        h('td', null, r.worker || ''),
        h('td', { class: 'num' }, String(num(r.slot))),
        h('td', null, h('span', { class: `badge rank-${String(r.state || 'none').replace(/[^a-z]/g, '')}` },
          r.state || '–')),
        h('td', { class: 'num' }, r.progress ? String(num(r.progress.step)) : ''),
        h('td', { class: r.straggler ? 'phase straggler' : 'phase' }, phaseText(r)),
        h('td', { class: 'num' }, num(r.pid) ? String(num(r.pid)) : ''),
        h('td', { class: 'num' }, exited && !num(r.signal) ? String(num(r.exit_code)) : ''),
        h('td', null, num(r.signal) ? `signal ${num(r.signal)}` : ''),
        h('td', { class: 'reason', title: r.exit_reason || '' }, r.exit_reason || ''),
        h('td', { class: 'num' }, r.has_result ? fmtPct(r.test_accuracy) : ''),
        h('td', { class: 'mono hash', title: r.param_hash || '' }, r.param_hash || ''));
    }));
  }

  function renderEval() {
    const rank0 = (job?.ranks || []).find((r) => num(r.rank) === 0);
    const e = rank0?.eval;
    evalPanel.hidden = !e || !num(e.samples);
    if (evalPanel.hidden) return;
    setChildren(evalFacts, facts([
      ['Top-1', fmtPct(e.top1)], ['Top-5', fmtPct(e.top5)], ['Loss', fmtNum(num(e.loss), 4)],
      ['Split', e.split || 'test'], ['Samples', String(num(e.samples))],
      ['Checkpoint', num(e.step) ? `step ${num(e.step)}` : 'weights file'],
    ]));
    const names = e.class_names || [];
    setChildren(evalClasses.tbody, names.map((name, c) => h('tr', null,
      h('td', null, name),
      h('td', { class: 'num' }, fmtPct((e.class_accuracy || [])[c])),
      h('td', { class: 'num' }, String(num((e.class_samples || [])[c]))))));
    const k = names.length;
    const cells = (e.confusion || []).map(num);
    if (!k || cells.length !== k * k) {
      setChildren(evalConfusion, h('p', { class: 'muted' }, 'No confusion matrix (over 100 classes).'));
      return;
    }
    // Rows: true class; columns: predicted; shaded by the share of the row.
    const rows = names.map((name, r) => {
      const row = cells.slice(r * k, (r + 1) * k);
      const total = row.reduce((a, b) => a + b, 0) || 1;
      return h('tr', null, h('th', null, name), row.map((v) => {
        const td = h('td', { class: 'num' }, String(v));
        td.style.backgroundColor = heatColor(v / total);  // CSSOM: allowed by the CSP
        return td;
      }));
    });
    setChildren(evalConfusion, h('table', { class: 'table confusion' },
      h('thead', null, h('tr', null, h('th', null, 'true \\ predicted'),
        names.map((name) => h('th', null, name)))),
      h('tbody', null, rows)));
  }

  function renderStragglers() {
    const list = job?.stragglers || [];
    stragglersEl.hidden = list.length === 0;
    setChildren(stragglersEl, list.map((s) => h('li', null, `Straggler: ${s}`)));
  }

  function renderEvents() {
    const events = job?.events || [];
    if (!events.length) {
      setChildren(eventsTable.tbody, h('tr', null, h('td', { colspan: 3, class: 'empty' }, 'No events.')));
      return;
    }
    setChildren(eventsTable.tbody, events.map((e) => h('tr', null,
      h('td', { class: 'nowrap', title: fmtTime(e.unix_ms) }, fmtTime(e.unix_ms)),
      h('td', { class: 'nowrap' },
        stateName(e.from_state) === 'UNSPECIFIED' ? h('span', { class: 'muted' }, 'submitted') : stateBadge(e.from_state),
        h('span', { class: 'arrow' }, ' → '),
        stateBadge(e.to_state)),
      h('td', { class: 'reason-full' }, e.reason || ''))));
  }

  // ---- logs ----
  function logKey(attempt, rank) {
    return `${num(attempt)}:${num(rank)}`;
  }

  function currentLogKey() {
    if (logChoice && logs.has(logChoice)) return logChoice;
    const attempt = num(job?.attempt);
    if (logs.has(logKey(attempt, 0))) return logKey(attempt, 0);
    const keys = [...logs.keys()];
    return keys.length ? keys[keys.length - 1] : null;
  }

  let logOptionsKey = null;
  function renderLogOptions() {
    const attempts = new Set([...logs.keys()].map((k) => k.split(':')[0]));
    const keys = [...logs.keys()].sort((a, b) => {
      const [aa, ar] = a.split(':').map(Number);
      const [ba, br] = b.split(':').map(Number);
      return ba - aa || ar - br;
    });
    const sig = keys.join(',');
    if (sig !== logOptionsKey) {
      logOptionsKey = sig;
      setChildren(logSelect, keys.length
        ? keys.map((k) => {
          const [a, r] = k.split(':');
          return h('option', { value: k }, attempts.size > 1 ? `rank ${r} · attempt ${a}` : `rank ${r}`);
        })
        : h('option', { value: '' }, 'no output yet'));
    }
    const key = currentLogKey();
    if (key && logSelect.value !== key) logSelect.value = key;
  }

  function renderLog() {
    renderLogOptions();
    const key = currentLogKey();
    const text = (key ? logs.get(key).text : '') ||
      (job && isTerminal(job.state) ? '(no output)' : 'Waiting for output…');
    const atBottom = logText.scrollHeight - logText.scrollTop - logText.clientHeight < 24;
    if (logText.textContent !== text) {
      logText.textContent = text;
      if (logFollow.firstChild.checked || atBottom) logText.scrollTop = logText.scrollHeight;
    }
  }

  function addLog(attempt, rank, offset, data) {
    const key = logKey(attempt, rank);
    let buf = logs.get(key);
    if (!buf) {
      buf = new LogBuffer();
      logs.set(key, buf);
    }
    return buf.add(offset, data);
  }

  logSelect.addEventListener('change', () => {
    logChoice = logSelect.value || null;
    renderLog();
  });

  // ---- charts ----
  function initCharts() {
    lossPanel.init({ type: 'line', data: { datasets: [] },
      options: lineOptions({ xTitle: 'step', yTitle: 'loss', decimate: true }) });
    accPanel.init({ type: 'line', data: { datasets: [] },
      options: lineOptions({ xTitle: 'step', yTitle: '%', xMin: 0, legend: false }) });
    ipsPanel.init({ type: 'line', data: { datasets: [] },
      options: lineOptions({ xTitle: 'step', yTitle: 'images/s', yMin: 0, legend: false, decimate: true }) });
    breakdownPanel.init({
      type: 'bar',
      data: { labels: [], datasets: [] },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        interaction: { mode: 'index', intersect: false },
        scales: {
          x: { stacked: true, grid: { display: false } },
          y: { stacked: true, beginAtZero: true, title: { display: true, text: 'ms per step' } },
        },
        plugins: {
          legend: { position: 'bottom' },
          tooltip: {
            callbacks: {
              label: (item) => `${item.dataset.label}: ${fmtNum(item.raw, 3)} ms`,
              footer: (items) => {
                const total = items.reduce((s, i) => s + Number(i.raw || 0), 0);
                return `step: ${fmtNum(total, 3)} ms`;
              },
            },
          },
        },
      },
    });
  }

  const heat = { cols: [], ranks: [], min: 0, max: 0 };
  function heatT(raw) {
    if (!raw) return 0;
    if (heatMode.value === 'abs') return heat.max > heat.min ? (raw.v - heat.min) / (heat.max - heat.min) : 0;
    return (raw.ratio - 1) / 0.5;  // median and below: cool; 1.5x the median: hot
  }

  function initHeatmap() {
    heatPanel.init({
      type: 'matrix',
      data: { datasets: [{
        data: [],
        borderWidth: 0,
        backgroundColor: (c) => heatColor(heatT(c.raw)),
        width: ({ chart }) => Math.max(1, (chart.chartArea?.width || 0) / Math.max(1, heat.cols.length) - 1),
        height: ({ chart }) => Math.max(1, (chart.chartArea?.height || 0) / Math.max(1, heat.ranks.length) - 1),
      }] },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        scales: {
          x: {
            type: 'linear', offset: false, min: -0.5, max: 0.5,
            grid: { display: false },
            title: { display: true, text: 'step' },
            // One tick per few columns, on column centres, labelled with the step.
            afterBuildTicks: (scale) => {
              const n = heat.cols.length;
              const every = Math.max(1, Math.ceil(n / 8));
              scale.ticks = heat.cols.map((_, i) => i).filter((i) => i % every === 0).map((value) => ({ value }));
            },
            ticks: { callback: (v) => (heat.cols[v] ? heat.cols[v].step : '') },
          },
          y: {
            type: 'linear', offset: false, reverse: true, min: -0.5, max: 0.5,
            grid: { display: false },
            title: { display: true, text: 'rank' },
            afterBuildTicks: (scale) => {
              const n = heat.ranks.length;
              const every = Math.max(1, Math.ceil(n / 16));
              scale.ticks = heat.ranks.map((_, i) => i).filter((i) => i % every === 0).map((value) => ({ value }));
            },
            ticks: { autoSkip: false, callback: (v) => (heat.ranks[v] != null ? String(heat.ranks[v]) : '') },
          },
        },
        plugins: {
          legend: { display: false },
          tooltip: {
            callbacks: {
              title: (items) => {
                const r = items[0]?.raw;
                if (!r) return '';
                return `rank ${r.rank}, step ${r.step}${r.last !== r.step ? `–${r.last}` : ''}`;
              },
              label: (item) => `${fmtNum(item.raw.v, 4)} ms/step, ${item.raw.ratio.toFixed(2)}× the step median`,
            },
          },
        },
      },
    });
  }

  function renderCharts() {
    const ws = num(job?.spec?.world_size) || store.ranks.size;
    // Loss: mean over ranks; the test loss at epoch ends on the same axes.
    const loss = store.meanByStep('loss');
    const testLoss = store.rankOrMean('test_loss', 0);
    lossPanel.chart.data.datasets = lineDatasets([
      { label: 'train loss', points: loss, color: color(0) },
      ...(testLoss.length ? [{ label: 'test loss', points: testLoss, color: color(1), markers: true }] : []),
    ]);
    lossPanel.chart.update('none');
    lossPanel.setPoints(loss.length);
    if (loss.length) lossPanel.setNote(`mean over ranks · last ${fmtNum(loss[loss.length - 1].y, 4)}`);

    const acc = store.rankOrMean('test_accuracy', 0).map((p) => ({ x: p.x, y: 100 * p.y }));
    accPanel.chart.data.datasets = lineDatasets([
      { label: 'test accuracy', points: acc, color: color(2), markers: true }]);
    accPanel.chart.update('none');
    accPanel.setPoints(acc.length);
    if (acc.length) accPanel.setNote(`last ${acc[acc.length - 1].y.toFixed(2)}%`);

    const ips = store.sumByStep('images_per_sec', ws);
    ipsPanel.chart.data.datasets = lineDatasets([{ label: 'images/s', points: ips, color: color(4) }]);
    ipsPanel.chart.update('none');
    ipsPanel.setPoints(ips.length);
    if (ips.length) ipsPanel.setNote(`images/s, all ${ws} ranks · last ${fmtNum(ips[ips.length - 1].y, 4)}`);

    const b = store.breakdown();
    const bc = breakdownPanel.chart;
    bc.data.labels = b.ranks.map((r) => `rank ${r}`);
    bc.data.datasets = b.phases.map((p) => ({
      label: p.label, data: p.values, backgroundColor: PHASE_COLORS[p.key], stack: 'step',
      borderWidth: 0, maxBarThickness: 56,
    }));
    bc.update('none');
    breakdownPanel.setPoints(b.ranks.length);
    if (b.ranks.length) {
      const comm = b.phases.find((p) => p.key === 'time_comm_ms').values.reduce((s, v) => s + v, 0);
      const all = b.phases.reduce((s, p) => s + p.values.reduce((t, v) => t + v, 0), 0);
      const steps = [...new Set(b.steps)];
      breakdownPanel.setNote(`step ${steps.length === 1 ? steps[0] : `${Math.min(...steps)}–${Math.max(...steps)}`}` +
        ` · exposed comm ${all > 0 ? fmtPct(comm / all, 1) : '–'}`);
    }
    renderMemory();
    renderHeatmap();
  }

  function renderMemory() {
    const byRank = store.memoryByRank();
    memoryEl.hidden = byRank.size === 0;
    setChildren(memoryEl, [...byRank].map(([rank, figures]) => h('li', { dataset: { rank: String(rank) } },
      `rank ${rank}: ${figures.map(([label, bytes]) => `${label} ${fmtBytes(bytes)}`).join(', ')}`)));
  }

  function renderHeatmap() {
    const hm = store.heatmap('time_step_ms', HEAT_COLUMNS);
    heat.cols = hm.cols;
    heat.ranks = hm.ranks;
    heat.min = hm.min;
    heat.max = hm.max;
    const rankIndex = new Map(hm.ranks.map((r, i) => [r, i]));
    const c = heatPanel.chart;
    c.data.datasets[0].data = hm.cells.map((cell) => ({
      x: cell.col, y: rankIndex.get(cell.rank), v: cell.v, ratio: cell.ratio, rank: cell.rank,
      step: hm.cols[cell.col].step, last: hm.cols[cell.col].last,
    }));
    c.options.scales.x.max = Math.max(0.5, hm.cols.length - 0.5);
    c.options.scales.y.max = Math.max(0.5, hm.ranks.length - 0.5);
    c.update('none');
    heatPanel.setPoints(hm.cells.length);
    heatLegend.hidden = !hm.cells.length;
    const [lo, hi] = heatLegend.querySelectorAll('.heat-lo, .heat-hi');
    if (heatMode.value === 'abs') {
      setText(lo, `${fmtNum(hm.min, 3)} ms`);
      setText(hi, `${fmtNum(hm.max, 3)} ms`);
    } else {
      setText(lo, '≤ step median');
      setText(hi, '≥ 1.5× median');
    }
    const first = hm.cols[0];
    heatPanel.setNote(first && first.last !== first.step
      ? `each column averages steps ${first.step}–${first.last}, …` : '');
  }

  heatMode.addEventListener('change', renderHeatmap);

  // Charts are redrawn at most every CHART_INTERVAL_MS, or less often when a
  // redraw is slow (a long job with many ranks), so the page stays responsive.
  let chartTimer = null;
  let chartVersion = -1;
  let lastChartAt = 0;
  let chartInterval = CHART_INTERVAL_MS;
  function scheduleCharts() {
    if (chartTimer) return;
    const wait = Math.max(0, chartInterval - (Date.now() - lastChartAt));
    chartTimer = setTimeout(() => {
      chartTimer = null;
      lastChartAt = Date.now();
      if (store.version === chartVersion) return;
      chartVersion = store.version;
      renderCharts();
      renderHeader();
      chartInterval = Math.max(CHART_INTERVAL_MS, 5 * (Date.now() - lastChartAt));
    }, wait);
  }

  // ---- data ----
  function setJob(j) {
    job = j;
    notFound = false;
    setChildren(notice);
    head.hidden = false;
    content.hidden = false;
    renderHeader();
    renderRanks();
    renderEval();
    renderStragglers();
    renderEvents();
    renderLog();
  }

  function addMetrics(body) {
    if (store.add(body.points)) scheduleCharts();
  }

  function onLog(ev) {
    if (addLog(ev.attempt, ev.rank, ev.offset, ev.data)) renderLog();
  }

  async function poll() {
    try {
      setJob(await getJSON(`/api/v1/jobs/${encodeURIComponent(id)}`));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        notFound = true;
        setChildren(notice, errorBox(`Job ${id} not found.`));
        head.hidden = true;
        content.hidden = true;
        return;
      }
      throw e;
    }
    // Points of the last steps again: a slower rank's report of a step may
    // arrive after a faster rank's; merging is idempotent.
    for (let page = 0; page < 10; page++) {
      const after = Math.max(-1, store.maxStep - 200);
      const body = await getJSON(`/api/v1/jobs/${encodeURIComponent(id)}/metrics?after_step=${after}&limit=100000`);
      addMetrics(body);
      if ((body.points || []).length < 100000) break;
    }
    const attempt = num(job.attempt);
    for (const r of job.ranks || []) {
      const key = logKey(attempt, r.rank);
      const offset = logs.get(key)?.end ?? 0;
      const body = await getJSON(`/api/v1/jobs/${encodeURIComponent(id)}/logs?rank=${num(r.rank)}` +
        `&attempt=${attempt}&offset=${offset}&max_bytes=262144`);
      if (body.data) addLog(body.attempt || attempt, r.rank, offset, body.data);
    }
    renderLog();
  }

  initCharts();
  initHeatmap();
  renderRanks();
  renderEvents();
  renderLog();
  const live = new LiveSource({
    url: `/api/v1/stream/jobs/${encodeURIComponent(id)}`,
    events: { job: setJob, metrics: addMetrics, log: onLog },
    poll,
    onStatus: ctx.setLive,
    done: () => notFound || (job != null && isTerminal(job.state)),
  }).start();

  return {
    unmount() {
      live.stop();
      clearTimeout(chartTimer);
      for (const p of [lossPanel, accPanel, ipsPanel, breakdownPanel, heatPanel]) p.destroy();
    },
  };
}

// What a running rank is doing, from its last progress report: "collective
// allreduce #31 (bucket 2) · 12 s", "forward", with "silent 9 s" when the
// report is old and "straggler" when flagged.
export function phaseText(rank) {
  const p = rank.progress;
  if (!p) return '';
  const parts = [p.phase || '?'];
  if (p.collective) parts[0] += ` ${p.collective}`;
  const inPhase = (num(p.phase_elapsed_ms) + num(rank.progress_age_ms)) / 1000;
  if (inPhase >= 1) parts.push(`${Math.round(inPhase)} s`);
  if (num(rank.progress_age_ms) >= 5000) parts.push(`silent ${Math.round(num(rank.progress_age_ms) / 1000)} s`);
  if (rank.straggler) parts.push('straggler');
  return parts.join(' · ');
}
