// Display formatting of API values.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  fmtAgo, fmtBytes, fmtDuration, fmtNum, fmtPct, isTerminal, num, stateName,
} from '../../src/lib/format.js';

test('state names lose their enum prefix', () => {
  assert.equal(stateName('JOB_STATE_RUNNING'), 'RUNNING');
  assert.equal(stateName('SWEEP_STATE_CANCELLED'), 'CANCELLED');
  assert.equal(stateName(undefined), 'UNSPECIFIED');
  assert.ok(isTerminal('JOB_STATE_FAILED'));
  assert.ok(!isTerminal('JOB_STATE_SCHEDULED'));
});

test('int64 strings become numbers', () => {
  assert.equal(num('12'), 12);
  assert.equal(num(undefined), 0);
  assert.equal(num('x'), 0);
});

test('durations and ages', () => {
  assert.equal(fmtDuration(950), '950 ms');
  assert.equal(fmtDuration(12300), '12.3 s');
  assert.equal(fmtDuration(185000), '3m 05s');
  assert.equal(fmtDuration(7.4e6), '2h 03m');
  assert.equal(fmtAgo(10000, 13000), '3 s ago');
  assert.equal(fmtAgo(0), 'never');
  assert.equal(fmtAgo(0 + 1, 1 + 5 * 60000), '5 min ago');
});

test('numbers and percentages', () => {
  assert.equal(fmtNum(0.012345), '0.0123');
  assert.equal(fmtNum(1234.5), '1,235');
  assert.equal(fmtNum(NaN), '–');
  assert.equal(fmtPct(0.8612), '86.12%');
});

test('bytes read in binary units', () => {
  assert.equal(fmtBytes(512), '512 B');
  assert.equal(fmtBytes(1536), '1.5 KiB');
  assert.equal(fmtBytes(1.5 * 2 ** 30), '1.5 GiB');
  assert.equal(fmtBytes('3221225472'), '3.0 GiB');
  assert.equal(fmtBytes(undefined), '–');
});
