// Turns a SweepReport into the series of the paper-style figures. Pure.
//
// Series of the scaling figures are the rows that share (batch_size, scaling,
// shape kind, ZeRO stage), drawn against world size; series of the batch-size
// figures share (world_size, scaling, ZeRO stage). The memory figure has one
// series per ZeRO stage (and batch size, where the sweep has several): the
// measured peak memory per rank against world size, as the ZeRO paper draws
// it, with the optimizer state, gradient and parameter bytes the code counts
// as each point's breakdown. Rows without a successful run are left out.

import { fmtBytes, num } from './format.js';

// "pack"/"spread"/"" stay; "2x4" (nodes x ranks per node) becomes "x4/node",
// so 1x4, 2x4, 4x4 form one series over the number of nodes.
export function shapeKind(shape) {
  const s = String(shape ?? '');
  const m = /^(\d+)x(\d+)$/.exec(s);
  return m ? `x${m[2]}/node` : s;
}

function usable(rows) {
  return (rows || []).filter((r) => num(r.runs) > 0);
}

function group(rows, keyOf) {
  const groups = new Map();
  for (const r of rows) {
    const k = keyOf(r);
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(r);
  }
  return groups;
}

function scalingOf(r) {
  return r.scaling || 'strong';
}

function stageOf(r) {
  return num(r.zero_stage);
}

// What each ZeRO stage partitions across the ranks, in the paper's terms.
const STAGE_NAMES = ['baseline', 'P_os', 'P_os+g'];

export function stageLabel(stage) {
  const name = STAGE_NAMES[stage];
  return name ? `ZeRO ${stage} (${name})` : `ZeRO ${stage}`;
}

// A byte figure of a report row, or null when no rank reported it (the API
// leaves unset figures out).
export function bytesOf(r, key) {
  const v = r?.[key];
  if (v == null || v === '') return null;
  const x = Number(v);
  return Number.isFinite(x) ? x : null;
}

// The measured peak memory per rank: the highest rank's peak RSS (CPU ranks)
// or CUDA allocator peak (GPU ranks); null when no rank reported one. The
// counted bytes (optimizer state, gradients, parameters) are its breakdown,
// not the figure.
export function memoryPerRank(r) {
  return bytesOf(r, 'peak_memory_bytes_per_rank');
}

// What measured a row's peak, in words: "RSS", "CUDA", or '' when unknown.
export function memorySourceLabel(source) {
  const s = String(source ?? '').toLowerCase();
  return s === 'rss' ? 'RSS' : s === 'cuda' ? 'CUDA' : s.toUpperCase();
}

// "1.9 GiB (optimizer 341.0 MiB, gradients 171.0 MiB, parameters 341.0 MiB)":
// the measured peak and those of the counted bytes that are reported; '–'
// without a peak.
export function memoryBreakdown(peak, optimizer, gradients, parameters = null) {
  if (peak == null) return '–';
  const parts = [];
  if (optimizer != null) parts.push(`optimizer ${fmtBytes(optimizer)}`);
  if (gradients != null) parts.push(`gradients ${fmtBytes(gradients)}`);
  if (parameters != null) parts.push(`parameters ${fmtBytes(parameters)}`);
  return parts.length ? `${fmtBytes(peak)} (${parts.join(', ')})` : fmtBytes(peak);
}

// A row's breakdown: memoryBreakdown of its measured peak and counted bytes.
export function rowMemoryBreakdown(r) {
  return memoryBreakdown(memoryPerRank(r), bytesOf(r, 'optimizer_state_bytes_per_rank'),
    bytesOf(r, 'gradient_bytes_per_rank'), bytesOf(r, 'parameter_bytes_per_rank'));
}

// A row's measured peak as the report table shows it: "1.9 GiB (RSS)".
export function peakMemoryCell(r) {
  const peak = memoryPerRank(r);
  if (peak == null) return '–';
  const source = memorySourceLabel(r.memory_source);
  return source ? `${fmtBytes(peak)} (${source})` : fmtBytes(peak);
}

function meanOrNull(values) {
  const xs = values.filter((v) => v != null);
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
}

// Labels say only what differs between series: "bs 64 strong", or "bs 64"
// when every row has the same scaling, shape and ZeRO stage.
function scalingSeries(rows) {
  const scalings = new Set(rows.map(scalingOf));
  const shapes = new Set(rows.map((r) => shapeKind(r.shape)));
  const stages = new Set(rows.map(stageOf));
  const groups = group(rows,
    (r) => `${num(r.batch_size)}|${scalingOf(r)}|${shapeKind(r.shape)}|${stageOf(r)}`);
  return [...groups.values()]
    .map((rs) => {
      const r0 = rs[0];
      const parts = [`bs ${num(r0.batch_size)}`];
      if (scalings.size > 1) parts.push(scalingOf(r0));
      if (shapes.size > 1 && shapeKind(r0.shape)) parts.push(shapeKind(r0.shape));
      if (stages.size > 1) parts.push(`z${stageOf(r0)}`);
      return {
        label: parts.join(' '),
        batchSize: num(r0.batch_size),
        scaling: scalingOf(r0),
        baseline: num(r0.baseline_world_size),
        rows: [...rs].sort((a, b) => num(a.world_size) - num(b.world_size)),
      };
    })
    .sort((a, b) => a.batchSize - b.batchSize || a.label.localeCompare(b.label));
}

function batchSeries(rows) {
  const scalings = new Set(rows.map(scalingOf));
  const stages = new Set(rows.map(stageOf));
  const groups = group(rows, (r) => `${num(r.world_size)}|${scalingOf(r)}|${stageOf(r)}`);
  return [...groups.values()]
    .map((rs) => {
      const r0 = rs[0];
      const n = num(r0.world_size);
      return {
        label: `${n} rank${n === 1 ? '' : 's'}${scalings.size > 1 ? ` ${scalingOf(r0)}` : ''}` +
          `${stages.size > 1 ? ` z${stageOf(r0)}` : ''}`,
        worldSize: n,
        rows: [...rs].sort((a, b) => num(a.batch_size) - num(b.batch_size)),
      };
    })
    .sort((a, b) => a.worldSize - b.worldSize || a.label.localeCompare(b.label));
}

// One series per ZeRO stage and batch size (activations grow with the batch;
// "bs N" is in the label only where the sweep has several): the measured peak
// per rank against world size, the highest of the series' rows at each world
// size (scaling and shape do not change what a rank holds), each point with
// the mean counted optimizer state, gradient and parameter bytes as its
// breakdown (null where unreported). Rows without a measured peak are left out, and so are
// series without any.
function memorySeries(rows) {
  const withMemory = rows.filter((r) => memoryPerRank(r) != null);
  const batches = [...new Set(withMemory.map((r) => num(r.batch_size)))].sort((a, b) => a - b);
  return [...group(withMemory, (r) => `${stageOf(r)}|${num(r.batch_size)}`).values()]
    .map((rs) => {
      const stage = stageOf(rs[0]);
      const batchSize = num(rs[0].batch_size);
      const bySize = group(rs, (r) => num(r.world_size));
      const points = [...bySize.entries()].sort(([a], [b]) => a - b).map(([n, at]) => ({
        x: n,
        y: Math.max(...at.map(memoryPerRank)),
        optimizer: meanOrNull(at.map((r) => bytesOf(r, 'optimizer_state_bytes_per_rank'))),
        gradients: meanOrNull(at.map((r) => bytesOf(r, 'gradient_bytes_per_rank'))),
        parameters: meanOrNull(at.map((r) => bytesOf(r, 'parameter_bytes_per_rank'))),
      }));
      return {
        label: batches.length > 1 ? `${stageLabel(stage)} bs ${batchSize}` : stageLabel(stage),
        stage,
        batchSize,
        batchIndex: batches.indexOf(batchSize),
        points,
      };
    })
    .sort((a, b) => a.stage - b.stage || a.batchSize - b.batchSize);
}

// What measured the peaks of the memory figure's rows: "RSS", "CUDA" or both
// ("CUDA, RSS"); '' when none did.
function memorySources(rows) {
  const sources = rows.filter((r) => memoryPerRank(r) != null)
    .map((r) => memorySourceLabel(r.memory_source)).filter(Boolean);
  return [...new Set(sources)].sort().join(', ');
}

// A y-axis step for the memory figure in whole powers of two bytes (256 KiB,
// 1 GiB, ...), about five steps up to the largest value; undefined for an
// empty figure. Decimal steps would label the ticks 976.6 KiB and the like.
export function memoryTickStep(memory) {
  const max = Math.max(0, ...(memory || []).flatMap((s) => s.points.map((p) => p.y)));
  return max > 0 ? 2 ** Math.max(0, Math.ceil(Math.log2(max / 5))) : undefined;
}

// Returns {epochTime, speedup, efficiency, idealSpeedup, commShare, accuracy,
// memory, memorySource, worldSizes} where each figure is a list of {label,
// points: [{x, y, lo?, hi?}]} (memory's points also carry {optimizer,
// gradients, parameters}) and memorySource says what measured the memory figure.
export function sweepFigures(report) {
  const rows = usable(report?.rows);
  const scaling = scalingSeries(rows);
  const byBatch = batchSeries(rows);
  const worldSizes = [...new Set(rows.map((r) => num(r.world_size)))].sort((a, b) => a - b);

  const epochTime = scaling.map((s) => ({
    label: s.label,
    points: s.rows.map((r) => {
      const y = num(r.epoch_time_mean_s);
      const sd = num(r.epoch_time_std_s);
      return { x: num(r.world_size), y, lo: Math.max(0, y - sd), hi: y + sd };
    }),
  }));
  const speedup = scaling.map((s) => ({
    label: s.label,
    points: s.rows.filter((r) => num(r.speedup) > 0)
      .map((r) => ({ x: num(r.world_size), y: num(r.speedup) })),
  }));
  const efficiency = scaling.map((s) => ({
    label: s.label,
    points: s.rows.filter((r) => num(r.efficiency) > 0)
      .map((r) => ({ x: num(r.world_size), y: num(r.efficiency) })),
  }));
  // The ideal speedup n/n0, once per baseline world size n0.
  const baselines = [...new Set(scaling.map((s) => s.baseline || s.rows[0]?.world_size || 1))]
    .map(num).filter((n) => n > 0).sort((a, b) => a - b);
  const idealSpeedup = baselines.map((n0) => ({
    label: baselines.length > 1 ? `ideal (n0 = ${n0})` : 'ideal',
    points: worldSizes.filter((n) => n >= n0).map((n) => ({ x: n, y: n / n0 })),
  }));
  const commShare = byBatch.map((s) => ({
    label: s.label,
    points: s.rows.map((r) => ({ x: num(r.batch_size), y: 100 * num(r.comm_share) })),
  }));
  const accuracy = byBatch.map((s) => ({
    label: s.label,
    points: s.rows.filter((r) => num(r.final_accuracy) > 0)
      .map((r) => ({ x: num(r.batch_size), y: 100 * num(r.final_accuracy) })),
  }));
  const memory = memorySeries(rows);
  const memorySource = memorySources(rows);
  return {
    epochTime, speedup, efficiency, idealSpeedup, commShare, accuracy, memory, memorySource, worldSizes,
  };
}
