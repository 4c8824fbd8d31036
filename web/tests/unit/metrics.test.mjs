// MetricStore: merging of stream/GET points and the series the job page draws.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MetricStore, median } from '../../src/lib/metrics.js';

const pt = (rank, step, name, value, attempt = 1) =>
  ({ rank, step: String(step), name, value, attempt, unix_ms: '1' });

test('merging the same points twice changes nothing (a reconnected stream resends them)', () => {
  const s = new MetricStore();
  const points = [pt(0, 5, 'loss', 2), pt(1, 5, 'loss', 3)];
  assert.equal(s.add(points), 2);
  const v = s.version;
  assert.equal(s.add(points), 0);
  assert.equal(s.version, v);
  assert.equal(s.size, 2);
});

test('a later attempt replaces an earlier one at the same step, never the reverse', () => {
  const s = new MetricStore();
  s.add([pt(0, 10, 'loss', 1.5, 1)]);
  s.add([pt(0, 10, 'loss', 1.2, 2)]);
  s.add([pt(0, 10, 'loss', 9.9, 1)]);
  assert.deepEqual(s.meanByStep('loss'), [{ x: 10, y: 1.2 }]);
});

test('non-finite values and nameless points are ignored', () => {
  const s = new MetricStore();
  assert.equal(s.add([pt(0, 1, 'loss', 'NaN'), pt(0, 2, '', 1), pt(0, 3, 'loss', 'Infinity')]), 0);
  assert.equal(s.size, 0);
});

test('loss is the mean over ranks per step, in step order', () => {
  const s = new MetricStore();
  s.add([pt(1, 10, 'loss', 4), pt(0, 10, 'loss', 2), pt(0, 5, 'loss', 6), pt(1, 5, 'loss', 8)]);
  assert.deepEqual(s.meanByStep('loss'), [{ x: 5, y: 7 }, { x: 10, y: 3 }]);
});

test('throughput sums ranks and leaves out a step whose last rank has not reported', () => {
  const s = new MetricStore();
  s.add([pt(0, 5, 'images_per_sec', 100), pt(1, 5, 'images_per_sec', 110), pt(0, 10, 'images_per_sec', 120)]);
  assert.deepEqual(s.sumByStep('images_per_sec', 2), [{ x: 5, y: 210 }]);
  s.add([pt(1, 10, 'images_per_sec', 90)]);
  assert.deepEqual(s.sumByStep('images_per_sec', 2), [{ x: 5, y: 210 }, { x: 10, y: 210 }]);
});

test('rankOrMean prefers rank 0 and falls back to the mean over ranks', () => {
  const s = new MetricStore();
  s.add([pt(0, 100, 'test_accuracy', 0.8), pt(1, 100, 'test_accuracy', 0.6)]);
  assert.deepEqual(s.rankOrMean('test_accuracy', 0), [{ x: 100, y: 0.8 }]);
  const t = new MetricStore();
  t.add([pt(1, 100, 'test_accuracy', 0.6), pt(2, 100, 'test_accuracy', 0.8)]);
  assert.equal(t.rankOrMean('test_accuracy', 0)[0].y.toFixed(2), '0.70');
});

test('latest gives the highest step, per rank or averaged', () => {
  const s = new MetricStore();
  s.add([pt(0, 5, 'loss', 3), pt(0, 10, 'loss', 2), pt(1, 10, 'loss', 4), pt(1, 15, 'loss', 1)]);
  assert.deepEqual(s.latest('loss', 0), { step: 10, value: 2 });
  assert.deepEqual(s.latest('loss'), { step: 15, value: 1 });
  assert.equal(s.latest('nothing'), null);
});

test('breakdown stacks the latest phase times of each rank and the uncovered rest', () => {
  const s = new MetricStore();
  for (const [rank, step, comm] of [[0, 5, 9], [0, 10, 4], [1, 10, 20]]) {
    s.add([pt(rank, step, 'time_data_ms', 1), pt(rank, step, 'time_forward_ms', 10),
      pt(rank, step, 'time_backward_ms', 20), pt(rank, step, 'time_comm_ms', comm),
      pt(rank, step, 'time_optimizer_ms', 2), pt(rank, step, 'time_step_ms', 40 + comm)]);
  }
  const b = s.breakdown();
  assert.deepEqual(b.ranks, [0, 1]);
  assert.deepEqual(b.steps, [10, 10]);
  const by = Object.fromEntries(b.phases.map((p) => [p.key, p.values]));
  assert.deepEqual(by.time_comm_ms, [4, 20]);
  assert.deepEqual(by.time_forward_ms, [10, 10]);
  assert.deepEqual(by.other, [7, 7]);  // 40 + comm - (1 + 10 + 20 + comm + 2)
});

test('heatmap marks a straggler by its ratio to the step median', () => {
  const s = new MetricStore();
  for (let step = 0; step < 30; step += 5) {
    for (let rank = 0; rank < 4; rank++) s.add([pt(rank, step, 'time_step_ms', rank === 2 ? 75 : 50)]);
  }
  const hm = s.heatmap('time_step_ms', 100);
  assert.equal(hm.cols.length, 6);
  assert.deepEqual(hm.ranks, [0, 1, 2, 3]);
  assert.equal(hm.cells.length, 24);
  for (const c of hm.cells) assert.equal(c.ratio, c.rank === 2 ? 1.5 : 1);
  assert.equal(hm.min, 50);
  assert.equal(hm.max, 75);
});

test('heatmap averages runs of steps when there are more steps than columns', () => {
  const s = new MetricStore();
  for (let step = 0; step < 100; step++) s.add([pt(0, step, 'time_step_ms', step)]);
  const hm = s.heatmap('time_step_ms', 10);
  assert.equal(hm.cols.length, 10);
  assert.deepEqual(hm.cols[0], { step: 0, last: 9 });
  assert.equal(hm.cells[0].v, 4.5);
});

test('median of even and odd lists', () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.equal(median([]), 0);
});

test('each rank\'s memory line holds its newest figures in the order shown', () => {
  const s = new MetricStore();
  s.add([pt(1, 10, 'cuda_reserved_bytes', 4), pt(1, 10, 'cuda_allocated_bytes', 1),
    pt(1, 20, 'cuda_allocated_bytes', 2), pt(0, 20, 'peak_rss_bytes', 7), pt(0, 20, 'loss', 1)]);
  assert.deepEqual([...s.memoryByRank()], [
    [0, [['peak RSS', 7]]],
    [1, [['allocated', 2], ['reserved', 4]]],
  ]);
  assert.equal(new MetricStore().memoryByRank().size, 0);
});
