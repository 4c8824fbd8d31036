// LogBuffer: log pieces with byte offsets, repeated or overlapping after a reconnect.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LogBuffer, utf8Length } from '../../src/lib/logs.js';

test('consecutive pieces are appended', () => {
  const b = new LogBuffer();
  assert.ok(b.add(0, 'hello\n'));
  assert.ok(b.add(6, 'world\n'));
  assert.equal(b.text, 'hello\nworld\n');
  assert.equal(b.end, 12);
});

test('a piece already held is ignored and an overlapping one adds only its new bytes', () => {
  const b = new LogBuffer();
  b.add(0, 'abcdef');
  assert.equal(b.add(0, 'abcdef'), false);
  assert.equal(b.add(2, 'cd'), false);
  assert.ok(b.add(3, 'defgh'));
  assert.equal(b.text, 'abcdefgh');
});

test('offsets count UTF-8 bytes, not characters', () => {
  const b = new LogBuffer();
  b.add(0, 'é→');  // 2 + 3 bytes
  assert.equal(b.end, 5);
  assert.ok(b.add(2, '→x'));
  assert.equal(b.text, 'é→x');
  assert.equal(utf8Length('é→x'), 6);
});

test('a tail that starts late and a gap are marked', () => {
  const b = new LogBuffer();
  b.add(1000, 'tail\n');
  assert.match(b.text, /^\[… 1000 earlier bytes not shown\]\ntail\n$/);
  b.add(1100, 'later\n');
  assert.match(b.text, /tail\n\n\[… 95 bytes not shown\]\nlater\n$/);
});

test('the buffer keeps only about maxBytes of the tail', () => {
  const b = new LogBuffer(1000);
  let off = 0;
  for (let i = 0; i < 200; i++) {
    const line = `line ${i} ${'x'.repeat(40)}\n`;
    b.add(off, line);
    off += line.length;
  }
  assert.ok(b.text.length <= 1300, `kept ${b.text.length} characters`);
  assert.match(b.text, /^\[… older output dropped\]\n/);
  assert.match(b.text, /line 199 x+\n$/);
});
