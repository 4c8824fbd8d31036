// #/jobs: every job, newest first, with a state filter and a free-text search
// (both client-side). Live from /api/v1/stream/jobs.

import { getJSON } from '../lib/api.js';
import { h, setChildren, table } from '../lib/dom.js';
import {
  JOB_STATES, fmtDuration, fmtShortTime, fmtTime, isTerminal, num, stateName,
} from '../lib/format.js';
import { LiveSource } from '../lib/live.js';
import { errorBox, stateBadge } from '../ui.js';

const MAX_ROWS = 1000;

// What the search box matches against.
function haystack(job) {
  return [job.id, job.name, stateName(job.state), job.reason, job.pending_reason,
    job.spec?.trainer?.model, job.spec?.trainer?.dataset]
    .map((s) => String(s ?? '').toLowerCase()).join('\u0000');
}

function durationCell(job) {
  const created = num(job.created_unix_ms);
  if (isTerminal(job.state)) {
    return h('td', { class: 'num' }, fmtDuration(num(job.updated_unix_ms) - created));
  }
  // Ticks every second (main.js updates [data-since]).
  return h('td', { class: 'num', dataset: { since: String(created) } },
    fmtDuration(Date.now() - created));
}

export function mountJobs(root, _params, ctx) {
  ctx.setTitle('Jobs');
  let jobs = null;
  let error = null;
  const filter = { state: '', q: '' };

  const stateSelect = h('select', { id: 'job-state-filter', 'aria-label': 'Filter by state' });
  const search = h('input', {
    id: 'job-search', type: 'search', placeholder: 'Search id, name, reason…',
    'aria-label': 'Search jobs', spellcheck: 'false', autocomplete: 'off',
  });
  const summary = h('span', { class: 'muted' });
  const t = table([['ID', 'num'], 'Name', 'State', ['Attempt', 'num'], ['Ranks', 'num'],
    'Created', ['Duration', 'num'], 'Reason'], 'jobs-table');
  t.el.id = 'jobs-table';
  const status = h('div');

  setChildren(root,
    h('div', { class: 'page-head' }, h('h1', null, 'Jobs'), summary),
    h('div', { class: 'toolbar' }, stateSelect, search),
    status,
    h('section', { class: 'panel flush' }, t.wrap));

  let optionLabels = '';
  function renderStateOptions() {
    const counts = new Map();
    for (const j of jobs || []) counts.set(stateName(j.state), (counts.get(stateName(j.state)) || 0) + 1);
    const labels = [['', `All states (${(jobs || []).length})`]];
    for (const s of JOB_STATES) labels.push([s, `${s[0]}${s.slice(1).toLowerCase()} (${counts.get(s) || 0})`]);
    // Rebuilding the options would close the list while the user has it open.
    const key = JSON.stringify(labels);
    if (key === optionLabels) return;
    optionLabels = key;
    setChildren(stateSelect, labels.map(([value, label]) => h('option', { value }, label)));
    stateSelect.value = filter.state;
  }

  function render() {
    renderStateOptions();
    if (error) setChildren(status, errorBox(`Cannot load jobs: ${error}`));
    else setChildren(status);
    if (!jobs) {
      setChildren(t.tbody, h('tr', null, h('td', { colspan: 8, class: 'empty' }, 'Loading…')));
      return;
    }
    const q = filter.q.trim().toLowerCase();
    const shown = jobs.filter((j) => (!filter.state || stateName(j.state) === filter.state) &&
      (!q || haystack(j).includes(q)));
    summary.textContent = shown.length === jobs.length
      ? `${jobs.length} job${jobs.length === 1 ? '' : 's'}`
      : `${shown.length} of ${jobs.length} jobs`;
    if (!shown.length) {
      setChildren(t.tbody, h('tr', null, h('td', { colspan: 8, class: 'empty' },
        jobs.length ? 'No job matches the filter.' : 'No jobs yet. Submit one with tessctl submit.')));
      return;
    }
    setChildren(t.tbody, shown.slice(0, MAX_ROWS).map((j) => {
      const href = `#/jobs/${encodeURIComponent(j.id)}`;
      const reason = j.pending_reason || j.reason || '';
      const sweep = num(j.sweep_id) > 0
        ? h('a', { class: 'tag', href: `#/sweeps/${encodeURIComponent(j.sweep_id)}` },
          `sweep ${j.sweep_id}`)
        : null;
      return h('tr', { dataset: { jobId: String(j.id) } },
        h('td', { class: 'num' }, h('a', { href }, String(j.id))),
        h('td', { class: 'name' }, h('a', { href, class: 'job-name' }, j.name || '(unnamed)'), sweep),
        h('td', null, stateBadge(j.state),
          j.not_stored ? h('span', { class: 'muted', title: 'the database is failing writes; this is the coordinator\'s current state' }, ' not yet stored') : null),
        h('td', { class: 'num' }, String(num(j.attempt))),
        h('td', { class: 'num' }, String(num(j.spec?.world_size))),
        h('td', { title: fmtTime(j.created_unix_ms) }, fmtShortTime(j.created_unix_ms)),
        durationCell(j),
        h('td', { class: 'reason', title: reason }, reason));
    }));
    if (shown.length > MAX_ROWS) {
      t.tbody.append(h('tr', null, h('td', { colspan: 8, class: 'empty' },
        `${shown.length - MAX_ROWS} more not shown: narrow the filter.`)));
    }
  }

  stateSelect.addEventListener('change', () => {
    filter.state = stateSelect.value;
    render();
  });
  search.addEventListener('input', () => {
    filter.q = search.value;
    render();
  });

  const setJobs = (body) => {
    jobs = body.jobs || [];
    error = null;
    render();
  };
  render();
  const live = new LiveSource({
    url: '/api/v1/stream/jobs',
    events: { jobs: setJobs },
    poll: async () => {
      try {
        setJobs(await getJSON('/api/v1/jobs'));
      } catch (e) {
        if (e.status !== 401) error = e.message;  // 401: main.js asks to sign in
        render();
        throw e;
      }
    },
    onStatus: ctx.setLive,
  }).start();
  return { unmount: () => live.stop() };
}
