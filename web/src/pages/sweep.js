// #/sweeps/ID: one sweep. Its points (grid coordinates, job, state), the
// paper-style figures from its report (epoch time and the measured peak memory
// per rank, one line per ZeRO stage, against world size, the counted optimizer
// state, gradient and parameter bytes in the memory figure's tooltips; speedup and efficiency against
// world size with the ideal lines; communication share and final accuracy
// against batch size) and the report table. Live from
// /api/v1/stream/sweeps/ID (events sweep, report).

import { ApiError, getJSON, postJSON } from '../lib/api.js';
import { h, setChildren, setText, table } from '../lib/dom.js';
import {
  fmtBytes, fmtNum, fmtPct, fmtSeconds, fmtShortTime, fmtTime, isTerminal, num,
} from '../lib/format.js';
import { LiveSource } from '../lib/live.js';
import { getToken } from '../lib/settings.js';
import {
  bytesOf, memoryBreakdown, memoryTickStep, peakMemoryCell, rowMemoryBreakdown, sweepFigures,
} from '../lib/sweep.js';
import { ChartPanel, color, lineDatasets, lineOptions } from '../charts.js';
import { confirmAction, errorBox, facts, meter, panel, stateBadge } from '../ui.js';

function jobLink(jobId) {
  return num(jobId) > 0 ? h('a', { href: `#/jobs/${encodeURIComponent(jobId)}` }, `#${jobId}`) : '';
}

export function mountSweep(root, { id }, ctx) {
  ctx.setTitle(`Sweep ${id}`);
  let sweep = null;
  let report = null;
  let notFound = false;

  const nameEl = h('h1', { id: 'sweep-name' }, '');
  const badgeSlot = h('span', { id: 'sweep-state' });
  const reasonEl = h('p', { class: 'reason-line', hidden: true });
  const factsSlot = h('div');
  const notice = h('div');
  const cancelButton = h('button', { type: 'button', class: 'danger-outline', id: 'cancel-sweep' }, 'Cancel sweep…');
  const confirm = confirmAction(cancelButton, {
    id: 'cancel-sweep',
    question: () => `Cancel sweep ${id}? Its running points are cancelled and no more are submitted.`,
    yes: 'Cancel sweep',
    no: 'Keep running',
    action: async () => {
      const r = await postJSON(`/api/v1/sweeps/${encodeURIComponent(id)}/cancel`, getToken());
      if (sweep && r.state) {
        sweep = { ...sweep, state: r.state };
        renderHeader();
      }
    },
  });

  const timePanel = new ChartPanel('epoch-time', 'Epoch time vs ranks',
    { note: 'mean ± std over runs', emptyText: 'No finished point yet' });
  const memoryPanel = new ChartPanel('memory-per-rank', 'Memory per rank vs ranks',
    { note: 'measured peak', emptyText: 'No point reported memory figures yet' });
  const speedupPanel = new ChartPanel('speedup', 'Speedup vs ranks',
    { note: 'dashed: ideal n/n0', emptyText: 'No finished point yet' });
  const effPanel = new ChartPanel('efficiency', 'Efficiency vs ranks',
    { note: 'dashed: ideal 1.0', emptyText: 'No finished point yet' });
  const commPanel = new ChartPanel('comm-share', 'Exposed communication vs batch size',
    { note: '% of step time', emptyText: 'No finished point yet' });
  const accPanel = new ChartPanel('final-accuracy', 'Final accuracy vs batch size',
    { emptyText: 'No finished point yet' });
  const panels = [timePanel, memoryPanel, speedupPanel, effPanel, commPanel, accPanel];

  const pointsTable = table([['#', 'num'], ['Ranks', 'num'], ['Batch', 'num'], ['ZeRO', 'num'],
    'Scaling', 'Shape', ['Repeat', 'num'], 'Job', 'State']);
  pointsTable.el.id = 'points-table';
  const reportTable = table([['Ranks', 'num'], ['Batch', 'num'], ['ZeRO', 'num'], 'Scaling', 'Shape',
    ['Runs', 'num'], ['Epoch time', 'num'], ['± std', 'num'], ['Train time', 'num'],
    ['Images/s', 'num'], ['Speedup', 'num'], ['Efficiency', 'num'], ['n0', 'num'],
    ['Comm share', 'num'], ['Final acc.', 'num'], ['Memory/rank', 'num'], ['Optimizer/rank', 'num'],
    ['Gradients/rank', 'num'], ['Parameters/rank', 'num'], 'Jobs']);
  reportTable.el.id = 'report-table';
  const specBox = h('pre', { class: 'spec' });

  const head = h('div', { class: 'page-head' }, nameEl, badgeSlot, h('div', { class: 'spacer' }),
    cancelButton, confirm);
  const content = h('div', null,
    factsSlot,
    h('div', { class: 'grid grid-2' }, timePanel.el, memoryPanel.el),
    h('div', { class: 'grid grid-2' }, speedupPanel.el, effPanel.el),
    h('div', { class: 'grid grid-2' }, commPanel.el, accPanel.el),
    panel('Report', reportTable.wrap, { className: 'flush' }),
    panel('Points', pointsTable.wrap, { className: 'flush' }),
    h('details', { class: 'panel spec-panel' }, h('summary', null, 'Sweep spec (YAML)'), specBox));
  setChildren(root,
    h('nav', { class: 'crumbs' }, h('a', { href: '#/sweeps' }, 'Sweeps'), ' / ', `#${id}`),
    head, reasonEl, notice, content);

  const xRanks = { xTitle: 'ranks (world size)', xMin: 0, xInteger: true };
  const xBatch = { xTitle: 'batch size per rank', xInteger: true };
  timePanel.init({ type: 'line', data: { datasets: [] },
    options: lineOptions({ ...xRanks, yTitle: 'epoch time (s)', yMin: 0 }) });
  // The memory series drawn, for the tooltips' breakdown (one dataset each).
  let memorySeries = [];
  const memoryOptions = lineOptions({ ...xRanks, yTitle: 'peak bytes per rank', yMin: 0, yTick: fmtBytes });
  memoryOptions.plugins.tooltip.callbacks = {
    label: (c) => {
      const p = memorySeries[c.datasetIndex]?.points[c.dataIndex];
      return `${c.dataset.label}: ${memoryBreakdown(c.parsed.y, p?.optimizer, p?.gradients, p?.parameters)}`;
    },
  };
  memoryPanel.init({ type: 'line', data: { datasets: [] }, options: memoryOptions });
  speedupPanel.init({ type: 'line', data: { datasets: [] },
    options: lineOptions({ ...xRanks, yTitle: 'speedup', yMin: 0 }) });
  effPanel.init({ type: 'line', data: { datasets: [] },
    options: lineOptions({ ...xRanks, yTitle: 'efficiency', yMin: 0 }) });
  commPanel.init({ type: 'line', data: { datasets: [] },
    options: lineOptions({ ...xBatch, yTitle: '% of step time', yMin: 0 }) });
  accPanel.init({ type: 'line', data: { datasets: [] },
    options: lineOptions({ ...xBatch, yTitle: 'test accuracy (%)' }) });

  function renderHeader() {
    if (!sweep) return;
    const name = sweep.name || '(unnamed)';
    setText(nameEl, name);
    ctx.setTitle(`${name} · sweep ${id}`);
    setChildren(badgeSlot, stateBadge(sweep.state));
    reasonEl.hidden = !sweep.reason;
    setText(reasonEl, sweep.reason || '');
    const terminal = isTerminal(sweep.state);
    cancelButton.disabled = terminal;
    if (terminal) {
      confirm.hidden = true;
      cancelButton.hidden = false;
    }
    const points = sweep.points || [];
    const done = points.filter((p) => isTerminal(p.state)).length;
    const ok = points.filter((p) => String(p.state).endsWith('SUCCEEDED')).length;
    const base = sweep.spec?.base || {};
    setChildren(factsSlot, facts([
      ['Points', meter(done, points.length, `${done}/${points.length} done, ${ok} succeeded`, { fullIsBusy: false })],
      ['Model', `${base.trainer?.model || '–'} · ${base.trainer?.dataset || '–'}`],
      ['Repeats', String(num(sweep.spec?.repeats) || 1)],
      ['In parallel', String(num(sweep.spec?.max_parallel) || 1)],
      ['Created', h('span', { title: fmtTime(sweep.created_unix_ms) }, fmtShortTime(sweep.created_unix_ms))],
    ]));
    if (specBox.textContent !== (sweep.spec_yaml || '')) specBox.textContent = sweep.spec_yaml || '';
  }

  function renderPoints() {
    const points = [...(sweep?.points || [])].sort((a, b) => num(a.index) - num(b.index));
    setChildren(pointsTable.tbody, points.length ? points.map((p) => h('tr', null,
      h('td', { class: 'num' }, String(num(p.index))),
      h('td', { class: 'num' }, String(num(p.world_size))),
      h('td', { class: 'num' }, String(num(p.batch_size))),
      h('td', { class: 'num' }, String(num(p.zero_stage))),
      h('td', null, p.scaling || ''),
      h('td', null, p.shape || ''),
      h('td', { class: 'num' }, String(num(p.repeat))),
      h('td', null, jobLink(p.job_id)),
      h('td', null, num(p.job_id) > 0 ? stateBadge(p.state) : h('span', { class: 'muted' }, 'not submitted'))))
      : h('tr', null, h('td', { colspan: 9, class: 'empty' }, 'No points.')));
  }

  function renderReport() {
    const rows = report?.rows || [];
    setChildren(reportTable.tbody, rows.length ? rows.map((r) => h('tr', null,
      h('td', { class: 'num' }, String(num(r.world_size))),
      h('td', { class: 'num' }, String(num(r.batch_size))),
      h('td', { class: 'num' }, String(num(r.zero_stage))),
      h('td', null, r.scaling || ''),
      h('td', null, r.shape || ''),
      h('td', { class: 'num' }, String(num(r.runs))),
      h('td', { class: 'num' }, fmtSeconds(r.epoch_time_mean_s)),
      h('td', { class: 'num' }, num(r.runs) > 1 ? fmtSeconds(r.epoch_time_std_s) : ''),
      h('td', { class: 'num' }, fmtSeconds(r.total_time_mean_s)),
      h('td', { class: 'num' }, num(r.images_per_sec) > 0 ? fmtNum(r.images_per_sec, 4) : '–'),
      h('td', { class: 'num' }, num(r.speedup) > 0 ? fmtNum(r.speedup, 3) : '–'),
      h('td', { class: 'num' }, num(r.efficiency) > 0 ? fmtPct(r.efficiency, 1) : '–'),
      h('td', { class: 'num' }, num(r.baseline_world_size) ? String(num(r.baseline_world_size)) : ''),
      h('td', { class: 'num' }, num(r.runs) > 0 ? fmtPct(r.comm_share, 1) : '–'),
      h('td', { class: 'num' }, num(r.final_accuracy) > 0 ? fmtPct(r.final_accuracy) : '–'),
      // The measured peak, then the counted bytes as its breakdown; fmtBytes
      // shows a figure no rank reported (null) as '–'.
      h('td', {
        class: 'num',
        dataset: { key: 'peak-memory' },
        // Hover: the breakdown the code counts.
        title: bytesOf(r, 'peak_memory_bytes_per_rank') == null ? null : rowMemoryBreakdown(r),
      }, peakMemoryCell(r)),
      h('td', { class: 'num' }, fmtBytes(bytesOf(r, 'optimizer_state_bytes_per_rank'))),
      h('td', { class: 'num' }, fmtBytes(bytesOf(r, 'gradient_bytes_per_rank'))),
      h('td', { class: 'num' }, fmtBytes(bytesOf(r, 'parameter_bytes_per_rank'))),
      h('td', { class: 'links' }, (r.job_ids || []).map((j, i) => [i ? ' ' : '', jobLink(j)]))))
      : h('tr', null, h('td', { colspan: 20, class: 'empty' }, 'No report yet.')));
    renderFigures();
  }

  // data-series and data-series-labels on the panel: how many measured lines
  // it draws and their labels joined by '|' (the browser tests read them, as
  // they read data-points).
  function setLines(p, series) {
    p.chart.data.datasets = lineDatasets(series);
    p.chart.update('none');
    const measured = series.filter((s) => !s.ideal);
    p.setPoints(measured.reduce((c, s) => c + s.points.length, 0));
    p.el.dataset.series = String(measured.length);
    p.el.dataset.seriesLabels = measured.map((s) => s.label).join('|');
  }

  function renderFigures() {
    const f = sweepFigures(report);
    const mark = (list) => list.map((s, i) => ({ ...s, color: color(i), markers: true }));
    setLines(timePanel, mark(f.epochTime).map((s) => ({ ...s, band: s.points.some((p) => p.hi > p.lo) })));
    memoryPanel.chart.options.scales.y.ticks.stepSize = memoryTickStep(f.memory);
    memoryPanel.setNote(f.memorySource ? `measured peak (${f.memorySource})` : 'measured peak');
    // A stage keeps its colour whichever stages the sweep has; batch sizes
    // after the smallest are dashed.
    memorySeries = f.memory;
    setLines(memoryPanel, f.memory.map((s) => ({
      ...s, color: color(s.stage), markers: true, dash: s.batchIndex > 0 ? [6, 3] : undefined,
    })));
    const ideal = f.idealSpeedup.map((s) => ({ ...s, ideal: true, dash: [5, 4], color: '#888888', width: 1.2 }));
    setLines(speedupPanel, [...mark(f.speedup), ...ideal]);
    const ws = f.worldSizes;
    const idealEff = ws.length
      ? [{ label: 'ideal', ideal: true, dash: [5, 4], color: '#888888', width: 1.2,
        points: [{ x: ws[0], y: 1 }, { x: ws[ws.length - 1], y: 1 }] }]
      : [];
    setLines(effPanel, [...mark(f.efficiency), ...idealEff]);
    setLines(commPanel, mark(f.commShare));
    setLines(accPanel, mark(f.accuracy));
  }

  const setSweep = (s) => {
    sweep = s;
    notFound = false;
    setChildren(notice);
    head.hidden = false;
    content.hidden = false;
    renderHeader();
    renderPoints();
  };
  const setReport = (r) => {
    report = r;
    renderReport();
  };

  async function poll() {
    try {
      setSweep(await getJSON(`/api/v1/sweeps/${encodeURIComponent(id)}`));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        notFound = true;
        setChildren(notice, errorBox(`Sweep ${id} not found.`));
        head.hidden = true;
        content.hidden = true;
        return;
      }
      throw e;
    }
    setReport(await getJSON(`/api/v1/sweeps/${encodeURIComponent(id)}/report`));
  }

  renderPoints();
  renderReport();
  const live = new LiveSource({
    url: `/api/v1/stream/sweeps/${encodeURIComponent(id)}`,
    events: { sweep: setSweep, report: setReport },
    poll,
    onStatus: ctx.setLive,
    done: () => notFound || (sweep != null && isTerminal(sweep.state) && report != null),
  }).start();
  return {
    unmount() {
      live.stop();
      for (const p of panels) p.destroy();
    },
  };
}
