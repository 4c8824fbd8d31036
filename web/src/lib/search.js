// Turns a Search (GET /api/v1/searches/ID, docs/search.md) and its trials'
// metric points into the series of the search page's figures. Pure.
//
// The metric against steps has one series per trial that has points, in trial
// order: its jobs' points of the search's metric (one job per rung; a promoted
// trial's later rungs resume at the step the earlier ended), the mean over
// ranks at each step. The parameter figures have one scatter per searched
// key: each trial with a best metric is a point (its value of the key, its
// best metric); a key searched log-uniformly gets a log x axis. A key whose
// values are not numbers (a choice of names or lists) is drawn over its
// choices' positions, with the choices as tick labels.

import { num } from './format.js';

// The trial the search calls best, or null.
export function bestTrial(search) {
  const index = num(search?.best_trial ?? -1);
  if (index < 0 || search?.best_trial == null) return null;
  return (search.trials || []).find((t) => num(t.index) === index) || null;
}

// Every job of the trials, in trial and rung order.
export function trialJobs(search) {
  return (search?.trials || []).flatMap((t) => (t.job_ids || []).map(String)).filter((j) => num(j) > 0);
}

// points: MetricPoint[] (any ranks, one name) -> [{x: step, y: mean}] by step.
export function meanByStep(points) {
  const sums = new Map();
  for (const p of points || []) {
    const step = num(p.step);
    const v = Number(p.value);
    if (!Number.isFinite(v)) continue;
    const s = sums.get(step) || { sum: 0, n: 0 };
    s.sum += v;
    s.n += 1;
    sums.set(step, s);
  }
  return [...sums.entries()].sort((a, b) => a[0] - b[0]).map(([x, s]) => ({ x, y: s.sum / s.n }));
}

function parameterSpace(search, key) {
  return (search?.spec?.search?.parameters || []).find((p) => p.key === key) || null;
}

// The searched keys in the spec's order (then any other a trial names).
export function parameterKeys(search) {
  const keys = (search?.spec?.search?.parameters || []).map((p) => p.key);
  for (const t of search?.trials || []) {
    for (const k of Object.keys(t.parameters || {}).sort()) if (!keys.includes(k)) keys.push(k);
  }
  return keys;
}

// The x axis of a parameter's scatter: 'log' (loguniform), 'linear' (numbers)
// or 'category' (anything else; `labels` the choices in order).
export function parameterAxis(search, key) {
  const space = parameterSpace(search, key);
  if ((space?.loguniform || []).length) return { type: 'log' };
  const values = (search?.trials || []).map((t) => t.parameters?.[key]).filter((v) => v != null);
  const choices = (space?.choice || []).length ? space.choice.map(String) : [...new Set(values)];
  if ([...choices, ...values].every((v) => Number.isFinite(Number(v)) && String(v).trim() !== '')) {
    return { type: 'linear' };
  }
  return { type: 'category', labels: choices };
}

// The x range a parameter's scatter shows: its space (the spec's bounds or
// choices) and its points, with a margin so that no point sits on the edge.
export function parameterRange(search, scatter) {
  const space = parameterSpace(search, scatter.key) || {};
  if (scatter.axis.type === 'category') return { min: -0.5, max: scatter.axis.labels.length - 0.5 };
  const xs = [...scatter.points.map((p) => p.x), ...(space.loguniform || []), ...(space.uniform || []),
    ...(space.int_range || []).map(Number), ...(space.choice || []).map(Number)].filter(Number.isFinite);
  if (!xs.length) return {};
  const lo = Math.min(...xs);
  const hi = Math.max(...xs);
  if (scatter.axis.type === 'log') return { min: lo / 1.25, max: hi * 1.25 };
  const pad = hi > lo ? (hi - lo) * 0.06 : Math.abs(lo) * 0.1 || 0.5;
  return { min: lo - pad, max: hi + pad };
}

// metricsByJob: Map(job id string -> MetricPoint[] of the search's metric).
export function searchFigures(search, metricsByJob = new Map()) {
  const best = bestTrial(search);
  const curves = [];
  for (const t of search?.trials || []) {
    const points = meanByStep((t.job_ids || []).flatMap((j) => metricsByJob.get(String(j)) || []));
    if (!points.length) continue;
    curves.push({
      label: `trial ${num(t.index)}`, trial: num(t.index), promoted: !!t.promoted,
      best: best != null && num(best.index) === num(t.index), points,
    });
  }
  const scatters = parameterKeys(search).map((key) => {
    const axis = parameterAxis(search, key);
    const points = [];
    for (const t of search?.trials || []) {
      const value = t.parameters?.[key];
      if (value == null || t.best_metric == null) continue;
      const x = axis.type === 'category' ? axis.labels.indexOf(String(value)) : Number(value);
      if (!Number.isFinite(x) || (axis.type === 'category' && x < 0)) continue;
      if (axis.type === 'log' && !(x > 0)) continue;
      points.push({ x, y: Number(t.best_metric), trial: num(t.index) });
    }
    return { key, axis, points };
  });
  return { curves, scatters, best };
}
