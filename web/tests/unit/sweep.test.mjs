// sweepFigures: SweepReport rows -> the series of the paper-style figures.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shapeKind, sweepFigures } from '../../src/lib/sweep.js';

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
