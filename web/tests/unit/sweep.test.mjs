// sweepFigures: SweepReport rows -> the series of the paper-style figures.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  memoryPerRank, memoryTickStep, shapeKind, stageLabel, sweepFigures,
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

test('memory per rank: one series per ZeRO stage over world size, optimizer state plus gradients', () => {
  const mem = (n, stage, opt, grad) => row(n, 32, {
    zero_stage: stage, optimizer_state_bytes_per_rank: opt, gradient_bytes_per_rank: grad,
  });
  const f = sweepFigures({ rows: [
    mem(1, 0, 800, 400), mem(2, 0, 800, 400), mem(4, 0, 800, 400),
    mem(1, 1, 800, 400), mem(2, 1, 400, 400), mem(4, 1, 200, 400),
    mem(1, 2, 800, 400), mem(2, 2, 400, 200), mem(4, 2, 200, 100),
    // A second batch size at stage 2 is averaged in, not a second line.
    row(4, 64, { zero_stage: 2, optimizer_state_bytes_per_rank: 300, gradient_bytes_per_rank: 200 }),
  ] });
  assert.deepEqual(f.memory.map((s) => s.label), ['ZeRO 0 (baseline)', 'ZeRO 1 (P_os)', 'ZeRO 2 (P_os+g)']);
  assert.deepEqual(f.memory.map((s) => s.stage), [0, 1, 2]);
  assert.deepEqual(f.memory[0].points, [{ x: 1, y: 1200 }, { x: 2, y: 1200 }, { x: 4, y: 1200 }]);
  assert.deepEqual(f.memory[1].points, [{ x: 1, y: 1200 }, { x: 2, y: 800 }, { x: 4, y: 600 }]);
  assert.deepEqual(f.memory[2].points, [{ x: 1, y: 1200 }, { x: 2, y: 600 }, { x: 4, y: 400 }]);
  // The scaling figures keep the stages apart.
  assert.deepEqual(f.epochTime.map((s) => s.label), ['bs 32 z0', 'bs 32 z1', 'bs 32 z2', 'bs 64 z2']);
});

test('memory per rank leaves out rows and stages without both byte figures', () => {
  const f = sweepFigures({ rows: [
    row(1, 32, { zero_stage: 1, optimizer_state_bytes_per_rank: 100, gradient_bytes_per_rank: 50 }),
    row(2, 32, { zero_stage: 1, optimizer_state_bytes_per_rank: 50 }),
    row(1, 32, { zero_stage: 0 }),
  ] });
  assert.equal(f.memory.length, 1);
  assert.deepEqual(f.memory[0].points, [{ x: 1, y: 150 }]);
  assert.equal(memoryPerRank({ optimizer_state_bytes_per_rank: '0', gradient_bytes_per_rank: 0 }), 0);
  assert.equal(memoryPerRank({ gradient_bytes_per_rank: 10 }), null);
  assert.equal(stageLabel(3), 'ZeRO 3');
  assert.deepEqual(sweepFigures({ rows: [row(1, 32)] }).memory, []);
});

test('the memory axis steps in powers of two bytes, about five up to the largest value', () => {
  const at = (...ys) => [{ points: ys.map((y, i) => ({ x: i + 1, y })) }];
  assert.equal(memoryTickStep(at(3 * 2 ** 30, 2 ** 30)), 2 ** 30);
  assert.equal(memoryTickStep(at(1.1 * 2 ** 20)), 256 * 1024);
  assert.equal(memoryTickStep(at(3)), 1);
  assert.equal(memoryTickStep([]), undefined);
  assert.equal(memoryTickStep(undefined), undefined);
});
