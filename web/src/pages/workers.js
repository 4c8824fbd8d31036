// #/workers: each worker's devices, slot allocation, last heartbeat and
// liveness. Live from /api/v1/stream/workers; the "ago" column and the
// suspect state advance every second on their own.

import { getJSON } from '../lib/api.js';
import { h, setChildren, table } from '../lib/dom.js';
import { fmtAgo, fmtTime, num } from '../lib/format.js';
import { LiveSource } from '../lib/live.js';
import { badge, errorBox, meter } from '../ui.js';

// The coordinator's default --worker-suspect-after-ms: a worker silent this
// long gets no new ranks. The API reports only alive/dead, so the dashboard
// applies the default threshold to the last heartbeat for "suspect".
export const SUSPECT_AFTER_MS = 3000;

export function liveness(worker, now = Date.now()) {
  if (worker.drained) return 'drained';
  if (worker.draining) return 'draining';
  if (!worker.alive) return 'dead';
  if (now - num(worker.last_seen_unix_ms) > SUSPECT_AFTER_MS) return 'suspect';
  return 'alive';
}

export function mountWorkers(root, _params, ctx) {
  ctx.setTitle('Workers');
  let workers = null;
  let error = null;
  let liveCells = [];
  const summary = h('span', { class: 'muted' });
  const t = table(['Name', 'Host', 'Devices', 'Slots used', 'Last heartbeat', 'Liveness', ['Session', 'num']]);
  t.el.id = 'workers-table';
  const status = h('div');
  setChildren(root,
    h('div', { class: 'page-head' }, h('h1', null, 'Workers'), summary),
    status,
    h('section', { class: 'panel flush' }, t.wrap));

  function render() {
    setChildren(status, error ? errorBox(`Cannot load workers: ${error}`) : null);
    if (!workers) {
      setChildren(t.tbody, h('tr', null, h('td', { colspan: 7, class: 'empty' }, 'Loading…')));
      return;
    }
    const slots = workers.reduce((s, w) => s + num(w.slots), 0);
    const used = workers.reduce((s, w) => s + num(w.slots_used), 0);
    const alive = workers.filter((w) => w.alive).length;
    summary.textContent = `${workers.length} worker${workers.length === 1 ? '' : 's'}, ` +
      `${alive} alive · ${used} of ${slots} slots in use`;
    if (!workers.length) {
      setChildren(t.tbody, h('tr', null, h('td', { colspan: 7, class: 'empty' },
        'No workers registered. Start one with tessera-worker --coordinator HOST:PORT.')));
      return;
    }
    const sorted = [...workers].sort((a, b) => String(a.name).localeCompare(String(b.name)));
    liveCells = [];
    setChildren(t.tbody, sorted.map((w) => {
      const kind = w.device_kind || 'cpu';
      const cell = h('td');
      liveCells.push({ w, cell });
      return h('tr', { dataset: { worker: String(w.name) } },
        h('td', { class: 'name' }, w.name || ''),
        h('td', null, [w.hostname || '', w.pool ? `pool ${w.pool}` : '',
          w.slurm_job_id ? `Slurm job ${w.slurm_job_id}` : ''].filter(Boolean).join(' · ')),
        h('td', null, `${num(w.slots)} × ${kind === 'cuda' ? 'GPU' : 'CPU slot'}${num(w.slots) === 1 ? '' : 's'}`),
        h('td', null, meter(num(w.slots_used), num(w.slots))),
        h('td', { title: fmtTime(w.last_seen_unix_ms), dataset: { ago: String(num(w.last_seen_unix_ms)) } },
          fmtAgo(w.last_seen_unix_ms)),
        cell,
        h('td', { class: 'num muted' }, String(w.epoch ?? '')));
    }));
    updateLiveness();
  }

  // Only the badges whose state changed are replaced, so a selection in the
  // table survives the clock.
  function updateLiveness() {
    const now = Date.now();
    for (const { w, cell } of liveCells) {
      const state = liveness(w, now);
      if (cell.dataset.state === state) continue;
      cell.dataset.state = state;
      setChildren(cell, badge(state, `live-${state}`));
    }
  }

  const setWorkers = (body) => {
    workers = body.workers || [];
    error = null;
    render();
  };
  render();
  // Liveness depends on the clock, not only on events.
  const tick = setInterval(updateLiveness, 1000);
  const live = new LiveSource({
    url: '/api/v1/stream/workers',
    events: { workers: setWorkers },
    poll: async () => {
      try {
        setWorkers(await getJSON('/api/v1/workers'));
      } catch (e) {
        if (e.status !== 401) error = e.message;  // 401: main.js asks to sign in
        render();
        throw e;
      }
    },
    onStatus: ctx.setLive,
  }).start();
  return {
    unmount() {
      clearInterval(tick);
      live.stop();
    },
  };
}
