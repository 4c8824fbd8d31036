// MetricStore: the points of one job, merged from stream events or GET
// responses, and the series the job page draws from them. Pure (no DOM), so it
// is unit-tested under node (web/tests/unit).
//
// A point is keyed by (name, rank, step). Merging is idempotent: a reconnected
// stream resends every point, and a later attempt (a restart resuming from a
// checkpoint) replaces the earlier attempt's value at the same step.

import { num } from './format.js';

export const PHASES = [
  ['time_data_ms', 'data'],
  ['time_forward_ms', 'forward'],
  ['time_backward_ms', 'backward'],
  ['time_comm_ms', 'exposed comm'],
  ['time_optimizer_ms', 'optimizer'],
];

// The device memory figures a rank reports (common/device_figures.h) and how
// its memory line names them, in the order shown.
export const MEMORY_FIGURES = [
  ['cuda_allocated_bytes', 'allocated'],
  ['cuda_peak_allocated_bytes', 'peak'],
  ['cuda_reserved_bytes', 'reserved'],
  ['gpu_memory_used_bytes', 'GPU used'],
  ['peak_rss_bytes', 'peak RSS'],
];

export class MetricStore {
  constructor() {
    this.byName = new Map();  // name -> Map(`${rank}:${step}` -> point)
    this.ranks = new Set();
    this.maxStep = -1;
    this.size = 0;
    this.version = 0;         // bumped on every change
  }

  // points: MetricPoint JSON objects ({rank, step: "12", name, value, attempt, unix_ms}).
  // Returns how many points were new or changed.
  add(points) {
    let changed = 0;
    for (const p of points || []) {
      const name = String(p.name ?? '');
      const value = Number(p.value);
      if (!name || !Number.isFinite(value)) continue;
      const rank = num(p.rank);
      const step = num(p.step);
      const attempt = num(p.attempt);
      let series = this.byName.get(name);
      if (!series) {
        series = new Map();
        this.byName.set(name, series);
      }
      const key = `${rank}:${step}`;
      const old = series.get(key);
      if (old && (old.attempt > attempt || (old.attempt === attempt && old.value === value))) continue;
      if (!old) this.size++;
      series.set(key, { rank, step, value, attempt, t: num(p.unix_ms) });
      this.ranks.add(rank);
      if (step > this.maxStep) this.maxStep = step;
      changed++;
    }
    if (changed) this.version++;
    return changed;
  }

  has(name) {
    return this.byName.has(name);
  }

  names() {
    return [...this.byName.keys()].sort();
  }

  // Points of one metric, sorted by (step, rank).
  points(name) {
    const series = this.byName.get(name);
    if (!series) return [];
    return [...series.values()].sort((a, b) => a.step - b.step || a.rank - b.rank);
  }

  // Per step, the values of every rank that reported: [{step, values: Map(rank -> v)}].
  byStep(name) {
    const steps = new Map();
    for (const p of this.points(name)) {
      let m = steps.get(p.step);
      if (!m) {
        m = new Map();
        steps.set(p.step, m);
      }
      m.set(p.rank, p.value);
    }
    return [...steps.entries()].map(([step, values]) => ({ step, values }));
  }

  // [{x: step, y: mean over the ranks that reported}].
  meanByStep(name) {
    return this.byStep(name).map(({ step, values }) => {
      let s = 0;
      for (const v of values.values()) s += v;
      return { x: step, y: s / values.size };
    });
  }

  // [{x: step, y: sum over ranks}], only for steps where `ranks` ranks reported
  // (a step whose last rank has not arrived yet would show a false dip).
  sumByStep(name, ranks) {
    const want = Math.max(1, ranks || this.ranks.size);
    return this.byStep(name)
      .filter(({ values }) => values.size >= want)
      .map(({ step, values }) => {
        let s = 0;
        for (const v of values.values()) s += v;
        return { x: step, y: s };
      });
  }

  // One rank's series, or rank 0's when `rank` is omitted and it reported;
  // otherwise the mean over ranks.
  rankOrMean(name, rank = 0) {
    const mine = this.points(name).filter((p) => p.rank === rank);
    if (mine.length) return mine.map((p) => ({ x: p.step, y: p.value }));
    return this.meanByStep(name);
  }

  // Per rank, the point at the highest step: Map(rank -> {step, value}).
  latestByRank(name) {
    const out = new Map();
    for (const p of this.byName.get(name)?.values() ?? []) {
      const cur = out.get(p.rank);
      if (!cur || p.step > cur.step) out.set(p.rank, { step: p.step, value: p.value });
    }
    return out;
  }

  // The mean over ranks at the highest step that has the metric: {step, value}
  // or null; with `rank`, that rank's latest point.
  latest(name, rank = null) {
    const byRank = this.latestByRank(name);
    if (rank != null) return byRank.get(rank) ?? null;
    let step = -Infinity;
    for (const p of byRank.values()) step = Math.max(step, p.step);
    if (step === -Infinity) return null;
    let s = 0;
    let n = 0;
    for (const p of this.byName.get(name).values()) {
      if (p.step === step) {
        s += p.value;
        n++;
      }
    }
    return { step, value: s / n };
  }

  // Per rank, its newest memory figures: Map(rank -> [[label, bytes], ...]) in
  // MEMORY_FIGURES order, ranks sorted; a rank that reported none is absent.
  memoryByRank() {
    const out = new Map();
    for (const [name, label] of MEMORY_FIGURES) {
      for (const [rank, p] of this.latestByRank(name)) {
        if (!out.has(rank)) out.set(rank, []);
        out.get(rank).push([label, p.value]);
      }
    }
    return new Map([...out].sort((a, b) => a[0] - b[0]));
  }

  // Figure-6 style breakdown: for each rank, the latest reported mean time of
  // each phase, plus "other" (step time not covered by the phases).
  // Returns {ranks: [0, 1, ...], steps: [step per rank], phases: [{key, label, values: []}]}.
  breakdown() {
    const latest = new Map(PHASES.map(([key]) => [key, this.latestByRank(key)]));
    const total = this.latestByRank('time_step_ms');
    const ranks = [...this.ranks].sort((a, b) => a - b).filter((r) =>
      PHASES.some(([key]) => latest.get(key).has(r)));
    const phases = PHASES.map(([key, label]) => ({
      key, label, values: ranks.map((r) => latest.get(key).get(r)?.value ?? 0),
    }));
    const other = ranks.map((r, i) => {
      const t = total.get(r)?.value;
      if (t == null) return 0;
      const covered = phases.reduce((s, p) => s + p.values[i], 0);
      return Math.max(0, t - covered);
    });
    phases.push({ key: 'other', label: 'other', values: other });
    const steps = ranks.map((r) => total.get(r)?.step ??
      latest.get('time_forward_ms').get(r)?.step ?? 0);
    return { ranks, steps, phases };
  }

  // Rank x step grid of one metric (time_step_ms) for the straggler heatmap.
  // Columns are steps, or runs of consecutive steps averaged when there are
  // more than maxCols. Each cell carries its value and its ratio to the median
  // of its column, so a slow rank stands out whatever the absolute speed.
  // Returns {cols: [{step, last}], ranks: [..], cells: [{col, rank, v, ratio}], min, max}.
  heatmap(name = 'time_step_ms', maxCols = 120) {
    const rows = this.byStep(name);
    const ranks = [...new Set(rows.flatMap((r) => [...r.values.keys()]))].sort((a, b) => a - b);
    const per = Math.max(1, Math.ceil(rows.length / maxCols));
    const cols = [];
    const cells = [];
    let min = Infinity;
    let max = -Infinity;
    for (let start = 0; start < rows.length; start += per) {
      const group = rows.slice(start, start + per);
      const col = cols.length;
      cols.push({ step: group[0].step, last: group[group.length - 1].step });
      const colCells = [];
      for (const rank of ranks) {
        let s = 0;
        let n = 0;
        for (const r of group) {
          if (r.values.has(rank)) {
            s += r.values.get(rank);
            n++;
          }
        }
        if (n) colCells.push({ col, rank, v: s / n });
      }
      const med = median(colCells.map((c) => c.v));
      for (const c of colCells) {
        c.ratio = med > 0 ? c.v / med : 1;
        min = Math.min(min, c.v);
        max = Math.max(max, c.v);
        cells.push(c);
      }
    }
    return { cols, ranks, cells, min: cells.length ? min : 0, max: cells.length ? max : 0 };
  }
}

export function median(values) {
  if (!values.length) return 0;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}
