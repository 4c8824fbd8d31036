// searchFigures: a Search and its jobs' metric points -> the search page's series.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  bestTrial, meanByStep, parameterAxis, parameterKeys, parameterRange, searchFigures, trialJobs,
} from '../../src/lib/search.js';
import { searchStudy } from '../mock_server.mjs';

const { search, metrics } = searchStudy(0, { model: 'vit-micro' });

test('the best trial is the one best_trial names; none before any metric', () => {
  assert.equal(bestTrial(search).index, 1);
  assert.equal(bestTrial({ ...search, best_trial: -1 }), null);
  assert.deepEqual(trialJobs(search), ['101', '102', '105', '107', '103', '104', '106', '108']);
});

test('points are averaged over ranks by step, in step order', () => {
  const points = [
    { step: '40', rank: 0, value: 1 }, { step: '20', rank: 1, value: 3 },
    { step: '20', rank: 0, value: 1 }, { step: '40', rank: 1, value: 'NaN' },
  ];
  assert.deepEqual(meanByStep(points), [{ x: 20, y: 2 }, { x: 40, y: 1 }]);
});

test('one curve per trial with points, its rungs joined, promoted and best flagged', () => {
  const f = searchFigures(search, metrics);
  assert.deepEqual(f.curves.map((c) => c.trial), [0, 1, 3, 4]);
  assert.deepEqual(f.curves.map((c) => c.promoted), [false, true, true, false]);
  assert.deepEqual(f.curves.map((c) => c.best), [false, true, false, false]);
  const t1 = f.curves[1].points;
  assert.equal(t1.length, 45);
  assert.equal(t1[0].x, 20);
  assert.equal(t1[t1.length - 1].x, 900);
  assert.ok(Math.abs(t1[0].y - (0.5 + 20 / 3000 + 0.005 - 0.04)) < 1e-12);
});

test('a scatter per key in the spec order, log for loguniform, categories for names', () => {
  assert.deepEqual(parameterKeys(search), ['lr', 'weight_decay', 'optimizer']);
  assert.deepEqual(parameterAxis(search, 'lr'), { type: 'log' });
  assert.deepEqual(parameterAxis(search, 'weight_decay'), { type: 'linear' });
  assert.deepEqual(parameterAxis(search, 'optimizer'), { type: 'category', labels: ['adamw', 'lamb'] });
  const f = searchFigures(search, metrics);
  assert.deepEqual(f.scatters.map((s) => s.key), ['lr', 'weight_decay', 'optimizer']);
  assert.deepEqual(f.scatters[0].points, [
    { x: 0.0003, y: 0.6, trial: 0 }, { x: 0.002, y: 0.88, trial: 1 }, { x: 0.001, y: 0.75, trial: 3 }]);
  assert.deepEqual(f.scatters[2].points.map((p) => p.x), [0, 1, 1]);
});

test('no metric points yet: no curves; scatters from the rung metrics alone', () => {
  const f = searchFigures(search);
  assert.equal(f.curves.length, 0);
  assert.equal(f.scatters[1].points.length, 3);
});

test('scatter ranges cover the space with a margin; categories one slot each', () => {
  const f = searchFigures(search, metrics);
  const lr = parameterRange(search, f.scatters[0]);
  assert.ok(Math.abs(lr.min - 0.0001 / 1.25) < 1e-15 && Math.abs(lr.max - 0.01 * 1.25) < 1e-15);
  const wd = parameterRange(search, f.scatters[1]);
  assert.ok(wd.min < 0 && wd.max > 0.1);
  assert.deepEqual(parameterRange(search, f.scatters[2]), { min: -0.5, max: 1.5 });
});
