// sweepFigures: SweepReport rows -> the series of the paper-style figures.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  memoryBreakdown, memoryPerRank, memorySourceLabel, memoryTickStep, peakMemoryCell,
  rowMemoryBreakdown, shapeKind, stageLabel, sweepFigures,
} from '../../src/lib/sweep.js';

const row = (world_size, batch_size, extra = {}) => ({
  world_size, batch_size, scaling: 'strong', shape: '', runs: 1,
  epoch_time_mean_s: 100 / world_size, epoch_time_std_s: 2, total_time_mean_s: 300 / world_size,
  images_per_sec: 10 * world_size, speedup: world_size * 0.9, efficiency: 0.9,
  baseline_world_size: 1, comm_share: 0.01 * world_size, final_accuracy: 0.8, job_ids: ['1'],
  ...extra,
});

test('scaling series group by batch size and run over world size in order', () => {
  const f = sweepFigures({ rows: [row(4, 32), row(1, 32), row(2, 32), row(1, 64), row(2, 64)] });
  assert.deepEqual(f.epochTime.map((s) => s.label), ['bs 32', 'bs 64']);
  assert.deepEqual(f.epochTime[0].points.map((p) => p.x), [1, 2, 4]);
  assert.deepEqual(f.epochTime[0].points[0], { x: 1, y: 100, lo: 98, hi: 102 });
  assert.deepEqual(f.worldSizes, [1, 2, 4]);
});

test('the ideal speedup is n/n0 from the baseline world size', () => {
  const f = sweepFigures({ rows: [row(2, 32, { baseline_world_size: 2 }), row(4, 32, { baseline_world_size: 2 }),
    row(8, 32, { baseline_world_size: 2 })] });
  assert.equal(f.idealSpeedup.length, 1);
  assert.deepEqual(f.idealSpeedup[0].points, [{ x: 2, y: 1 }, { x: 4, y: 2 }, { x: 8, y: 4 }]);
});

test('batch-size figures have one series per world size, in percent', () => {
  const f = sweepFigures({ rows: [row(1, 64), row(1, 32), row(2, 32), row(2, 64, { final_accuracy: 0.75 })] });
  assert.deepEqual(f.commShare.map((s) => s.label), ['1 rank', '2 ranks']);
  assert.deepEqual(f.commShare[1].points, [{ x: 32, y: 2 }, { x: 64, y: 2 }]);
  assert.deepEqual(f.accuracy[1].points, [{ x: 32, y: 80 }, { x: 64, y: 75 }]);
});

test('rows without a successful run are left out', () => {
  const f = sweepFigures({ rows: [row(1, 32), row(2, 32, { runs: 0, epoch_time_mean_s: 0 })] });
  assert.deepEqual(f.epochTime[0].points.map((p) => p.x), [1]);
});

test('labels name the scaling and shape only when they differ between series', () => {
  const f = sweepFigures({ rows: [row(1, 32), row(2, 32, { scaling: 'weak' }), row(1, 32, { scaling: 'weak' })] });
  assert.deepEqual(f.speedup.map((s) => s.label).sort(), ['bs 32 strong', 'bs 32 weak']);
  assert.equal(shapeKind('2x4'), 'x4/node');
  assert.equal(shapeKind('spread'), 'spread');
});

test('an empty or missing report gives empty figures', () => {
  for (const r of [null, {}, { rows: [] }]) {
    const f = sweepFigures(r);
    assert.deepEqual([f.epochTime, f.speedup, f.commShare, f.idealSpeedup], [[], [], [], []]);
  }
});

test('memory per rank: one series per ZeRO stage over world size, the measured peak', () => {
  // The counted bytes shrink by more than the measured peak does: the figure
  // is the peak, the counted bytes only its breakdown.
  const mem = (n, stage, peak, opt, grad) => row(n, 32, {
    zero_stage: stage, peak_memory_bytes_per_rank: peak, memory_source: 'rss',
    optimizer_state_bytes_per_rank: opt, gradient_bytes_per_rank: grad,
  });
  const f = sweepFigures({ rows: [
    mem(1, 0, 5000, 800, 400), mem(2, 0, 5100, 800, 400), mem(4, 0, 5200, 800, 400),
    mem(1, 1, 5000, 800, 400), mem(2, 1, 4800, 400, 400), mem(4, 1, 4700, 200, 400),
    mem(1, 2, 5000, 800, 400), mem(2, 2, 4600, 400, 200), mem(4, 2, 4400, 200, 100),
  ] });
  assert.deepEqual(f.memory.map((s) => s.label), ['ZeRO 0 (baseline)', 'ZeRO 1 (P_os)', 'ZeRO 2 (P_os+g)']);
  assert.deepEqual(f.memory.map((s) => s.stage), [0, 1, 2]);
  assert.deepEqual(f.memory[0].points.map((p) => p.y), [5000, 5100, 5200]);
  assert.deepEqual(f.memory[1].points.map((p) => p.y), [5000, 4800, 4700]);
  assert.deepEqual(f.memory[2].points, [
    { x: 1, y: 5000, optimizer: 800, gradients: 400, parameters: null },
    { x: 2, y: 4600, optimizer: 400, gradients: 200, parameters: null },
    { x: 4, y: 4400, optimizer: 200, gradients: 100, parameters: null },
  ]);
  assert.equal(f.memorySource, 'RSS');
  // The scaling figures keep the stages apart.
  assert.deepEqual(f.epochTime.map((s) => s.label), ['bs 32 z0', 'bs 32 z1', 'bs 32 z2']);
});

test('memory per rank: rows of one world size take the highest peak; batch sizes are their own lines', () => {
  const f = sweepFigures({ rows: [
    row(2, 32, { zero_stage: 1, peak_memory_bytes_per_rank: 4000, memory_source: 'cuda' }),
    row(2, 32, { zero_stage: 1, scaling: 'weak', peak_memory_bytes_per_rank: 4200, memory_source: 'cuda' }),
    row(2, 64, { zero_stage: 1, peak_memory_bytes_per_rank: 6000, memory_source: 'cuda' }),
  ] });
  assert.deepEqual(f.memory.map((s) => s.label), ['ZeRO 1 (P_os) bs 32', 'ZeRO 1 (P_os) bs 64']);
  assert.deepEqual(f.memory.map((s) => s.batchIndex), [0, 1]);
  assert.deepEqual(f.memory[0].points, [{ x: 2, y: 4200, optimizer: null, gradients: null, parameters: null }]);
  assert.deepEqual(f.memory[1].points.map((p) => p.y), [6000]);
  assert.equal(f.memorySource, 'CUDA');
});

test('memory per rank leaves out rows without a measured peak, whatever bytes they counted', () => {
  const f = sweepFigures({ rows: [
    row(1, 32, { zero_stage: 1, peak_memory_bytes_per_rank: '1500', memory_source: 'rss',
      optimizer_state_bytes_per_rank: 100, gradient_bytes_per_rank: 50, parameter_bytes_per_rank: 200 }),
    row(2, 32, { zero_stage: 1, optimizer_state_bytes_per_rank: 50, gradient_bytes_per_rank: 50 }),
    row(1, 32, { zero_stage: 0, optimizer_state_bytes_per_rank: 100, gradient_bytes_per_rank: 50 }),
  ] });
  assert.equal(f.memory.length, 1);
  assert.deepEqual(f.memory[0].points, [{ x: 1, y: 1500, optimizer: 100, gradients: 50, parameters: 200 }]);
  assert.equal(memoryPerRank({ peak_memory_bytes_per_rank: '0' }), 0);
  assert.equal(memoryPerRank({ optimizer_state_bytes_per_rank: 10, gradient_bytes_per_rank: 10 }), null);
  assert.equal(stageLabel(3), 'ZeRO 3');
  assert.deepEqual(sweepFigures({ rows: [row(1, 32)] }).memory, []);
  assert.equal(sweepFigures({ rows: [row(1, 32)] }).memorySource, '');
});

test('the measured peak shows with its source, and the counted bytes as its breakdown', () => {
  const gib = 2 ** 30;
  assert.equal(peakMemoryCell({ peak_memory_bytes_per_rank: 2 * gib, memory_source: 'rss' }), '2.0 GiB (RSS)');
  assert.equal(peakMemoryCell({ peak_memory_bytes_per_rank: 3 * gib, memory_source: 'cuda' }), '3.0 GiB (CUDA)');
  assert.equal(peakMemoryCell({ peak_memory_bytes_per_rank: 3 * gib }), '3.0 GiB');
  assert.equal(peakMemoryCell({ optimizer_state_bytes_per_rank: gib }), '–');
  assert.equal(memoryBreakdown(1.2 * gib, 341 * 2 ** 20, 171 * 2 ** 20),
    '1.2 GiB (optimizer 341.0 MiB, gradients 171.0 MiB)');
  assert.equal(memoryBreakdown(gib, 2 ** 20, null), '1.0 GiB (optimizer 1.0 MiB)');
  assert.equal(memoryBreakdown(gib, null, null), '1.0 GiB');
  assert.equal(memoryBreakdown(null, 2 ** 20, 2 ** 20), '–');
  assert.equal(rowMemoryBreakdown({
    peak_memory_bytes_per_rank: 2 * gib, optimizer_state_bytes_per_rank: gib / 2,
    gradient_bytes_per_rank: gib / 4, parameter_bytes_per_rank: gib / 4,
  }), '2.0 GiB (optimizer 512.0 MiB, gradients 256.0 MiB, parameters 256.0 MiB)');
  assert.equal(rowMemoryBreakdown({ optimizer_state_bytes_per_rank: gib }), '–');
  assert.equal(memorySourceLabel('rss'), 'RSS');
  assert.equal(memorySourceLabel(''), '');
});

test('the memory axis steps in powers of two bytes, about five up to the largest value', () => {
  const at = (...ys) => [{ points: ys.map((y, i) => ({ x: i + 1, y })) }];
  assert.equal(memoryTickStep(at(3 * 2 ** 30, 2 ** 30)), 2 ** 30);
  assert.equal(memoryTickStep(at(1.1 * 2 ** 20)), 256 * 1024);
  assert.equal(memoryTickStep(at(3)), 1);
  assert.equal(memoryTickStep([]), undefined);
  assert.equal(memoryTickStep(undefined), undefined);
});
