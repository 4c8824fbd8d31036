// #/sweeps: every sweep, newest first. There is no stream of the sweep list;
// the page follows /api/v1/stream/jobs instead (a sweep changes only when one
// of its jobs does) and reloads the list when a jobs event arrives, at most
// once every 2 s.

import { getJSON } from '../lib/api.js';
import { h, setChildren, table } from '../lib/dom.js';
import { fmtShortTime, fmtTime, isTerminal, num } from '../lib/format.js';
import { LiveSource } from '../lib/live.js';
import { errorBox, meter, stateBadge } from '../ui.js';

const RELOAD_MIN_MS = 2000;

export function mountSweeps(root, _params, ctx) {
  ctx.setTitle('Sweeps');
  let sweeps = null;
  let error = null;
  const summary = h('span', { class: 'muted' });
  const t = table([['ID', 'num'], 'Name', 'State', 'Points done', 'Grid', 'Created', 'Reason']);
  t.el.id = 'sweeps-table';
  const status = h('div');
  setChildren(root,
    h('div', { class: 'page-head' }, h('h1', null, 'Sweeps'), summary),
    status,
    h('section', { class: 'panel flush' }, t.wrap));

  function gridText(spec) {
    const g = spec?.grid || {};
    const parts = [];
    if (g.world_size?.length) parts.push(`ranks ${g.world_size.join(',')}`);
    if (g.batch_size?.length) parts.push(`batch ${g.batch_size.join(',')}`);
    if (g.scaling?.length) parts.push(g.scaling.join(','));
    if (g.shape?.length) parts.push(`shape ${g.shape.join(',')}`);
    if (num(spec?.repeats) > 1) parts.push(`×${num(spec.repeats)}`);
    return parts.join(' · ');
  }

  function render() {
    setChildren(status, error ? errorBox(`Cannot load sweeps: ${error}`) : null);
    if (!sweeps) {
      setChildren(t.tbody, h('tr', null, h('td', { colspan: 7, class: 'empty' }, 'Loading…')));
      return;
    }
    summary.textContent = `${sweeps.length} sweep${sweeps.length === 1 ? '' : 's'}`;
    if (!sweeps.length) {
      setChildren(t.tbody, h('tr', null, h('td', { colspan: 7, class: 'empty' },
        'No sweeps yet. Submit one with tessctl sweep FILE.yaml.')));
      return;
    }
    setChildren(t.tbody, sweeps.map((s) => {
      const href = `#/sweeps/${encodeURIComponent(s.id)}`;
      const points = s.points || [];
      const done = points.filter((p) => isTerminal(p.state)).length;
      return h('tr', { dataset: { sweepId: String(s.id) } },
        h('td', { class: 'num' }, h('a', { href }, String(s.id))),
        h('td', { class: 'name' }, h('a', { href }, s.name || '(unnamed)')),
        h('td', null, stateBadge(s.state)),
        h('td', null, points.length ? meter(done, points.length, undefined, { fullIsBusy: false }) : ''),
        h('td', { class: 'muted' }, gridText(s.spec)),
        h('td', { title: fmtTime(s.created_unix_ms) }, fmtShortTime(s.created_unix_ms)),
        h('td', { class: 'reason', title: s.reason || '' }, s.reason || ''));
    }));
  }

  let loading = null;
  let lastLoad = 0;
  let reloadTimer = null;
  async function load() {
    lastLoad = Date.now();
    try {
      const body = await getJSON('/api/v1/sweeps');
      sweeps = body.sweeps || [];
      error = null;
    } catch (e) {
      if (e.status !== 401) error = e.message;  // 401: main.js asks to sign in
      throw e;
    } finally {
      render();
    }
  }
  // Coalesces bursts of job events into one reload.
  function reloadSoon() {
    if (reloadTimer || loading) return;
    reloadTimer = setTimeout(() => {
      reloadTimer = null;
      loading = load().catch(() => {}).finally(() => {
        loading = null;
      });
    }, Math.max(0, RELOAD_MIN_MS - (Date.now() - lastLoad)));
  }

  render();
  const live = new LiveSource({
    url: '/api/v1/stream/jobs',
    events: { jobs: reloadSoon },
    poll: load,
    onStatus: ctx.setLive,
  }).start();
  return {
    unmount() {
      clearTimeout(reloadTimer);
      live.stop();
    },
  };
}
