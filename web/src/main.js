// Tessera dashboard entry point: theme, token setting, hash router, the live
// indicator, and the clock that advances "3 s ago" and running durations.
//
// Routes (URL fragments, so the server only ever serves "/" and the assets):
//   #/jobs  #/jobs/ID  #/workers  #/sweeps  #/sweeps/ID  #/searches/ID

import './app.css';
import { applyChartTheme } from './charts.js';
import { h, setChildren } from './lib/dom.js';
import { fmtAgo, fmtDuration } from './lib/format.js';
import { signIn, signOut } from './lib/api.js';
import {
  DEFAULT_TOKEN, getToken, hasStoredToken, initTheme, setToken,
} from './lib/settings.js';
import { mountJob } from './pages/job.js';
import { mountJobs } from './pages/jobs.js';
import { mountSearch } from './pages/search.js';
import { mountSweep } from './pages/sweep.js';
import { mountSweeps } from './pages/sweeps.js';
import { mountWorkers } from './pages/workers.js';

const ROUTES = [
  [/^\/jobs\/?$/, 'jobs', mountJobs, () => ({})],
  [/^\/jobs\/(\d+)\/?$/, 'jobs', mountJob, (m) => ({ id: m[1] })],
  [/^\/workers\/?$/, 'workers', mountWorkers, () => ({})],
  [/^\/sweeps\/?$/, 'sweeps', mountSweeps, () => ({})],
  [/^\/sweeps\/(\d+)\/?$/, 'sweeps', mountSweep, (m) => ({ id: m[1] })],
  [/^\/searches\/(\d+)\/?$/, 'searches', mountSearch, (m) => ({ id: m[1] })],
];

const LIVE_TEXT = {
  idle: '',
  connecting: 'connecting…',
  live: 'live',
  reconnecting: 'reconnecting…',
  polling: 'polling every 5 s',
  offline: 'offline',
  signin: 'sign-in needed',
  ended: 'finished',
};

// Shown while the coordinator refuses reads without a user token.
const signinBanner = h('div', { id: 'signin', class: 'signin-banner', role: 'alert', hidden: true },
  h('strong', null, 'This coordinator needs a user token. '),
  'Enter it under API token (top right). An operator creates one with ',
  h('code', null, 'tessera-coordinator --db PATH token create --name YOU'), '.',
  h('span', { class: 'signin-error' }));

function setLive(status, detail = '') {
  const el = document.getElementById('live');
  if (!el) return;
  el.dataset.state = status;
  el.textContent = LIVE_TEXT[status] ?? status;
  el.title = detail || (status === 'live' ? 'Updates arrive over Server-Sent Events' : '');
  if (status === 'signin') {
    signinBanner.hidden = false;
    document.getElementById('token')?.classList.add('attention');
  }
}

let current = null;
let mounts = 0;

function route() {
  const main = document.getElementById('main');
  const path = (window.location.hash || '').replace(/^#/, '') || '/jobs';
  if (current) {
    try {
      current.unmount();
    } catch (e) {
      console.warn('unmount failed', e);
    }
    current = null;
  }
  setLive('idle');
  window.scrollTo(0, 0);
  const found = ROUTES.map(([re, nav, mount, params]) => {
    const m = re.exec(path);
    return m ? { nav, mount, params: params(m) } : null;
  }).find(Boolean);
  for (const a of document.querySelectorAll('[data-nav]')) {
    a.classList.toggle('active', !!found && a.dataset.nav === found.nav);
  }
  const root = h('div', { class: 'page' });
  setChildren(main, root);
  main.dataset.mounts = String(++mounts);  // lets tests wait for a page to be rebuilt
  const ctx = {
    setLive,
    setTitle: (t) => {
      document.title = t ? `${t} · Tessera` : 'Tessera';
    },
  };
  if (!found) {
    ctx.setTitle('Not found');
    setChildren(root, h('div', { class: 'page-head' }, h('h1', null, 'Not found')),
      h('p', null, 'No page at ', h('code', null, path), '. ', h('a', { href: '#/jobs' }, 'Go to the jobs.')));
    return;
  }
  current = found.mount(root, found.params, ctx) || null;
}

// Sends the token to /api/v1/session (see lib/api.js) and, once accepted,
// mounts the page again so its stream starts with the new session.
async function useToken(token, { remount }) {
  const input = document.getElementById('token');
  const error = signinBanner.querySelector('.signin-error');
  try {
    if (!(await signIn(token))) {
      signinBanner.hidden = false;
      input.classList.add('attention');
      error.textContent = ' That token was not accepted.';
      return false;
    }
  } catch (e) {
    error.textContent = ` Signing in failed: ${e.message || e}`;
    return false;
  }
  error.textContent = '';
  signinBanner.hidden = true;
  input.classList.remove('attention');
  if (remount) route();
  return true;
}

function setupTopbar() {
  const token = document.getElementById('token');
  token.value = getToken();
  token.placeholder = DEFAULT_TOKEN;
  let applied = token.value;
  token.addEventListener('change', async () => {
    const value = token.value.trim();
    if (value === applied) return;
    applied = value;
    setToken(value);
    if (value) {
      await useToken(value, { remount: true });
    } else {
      await signOut().catch(() => {});
      token.value = getToken();
      applied = token.value;
      route();
    }
  });
  const themeButton = document.getElementById('theme');
  const label = () => {
    const dark = document.documentElement.dataset.theme === 'dark';
    themeButton.textContent = dark ? 'Light' : 'Dark';
    themeButton.title = `Switch to the ${dark ? 'light' : 'dark'} theme`;
  };
  const theme = initTheme(() => {
    label();
    applyChartTheme();
  });
  label();
  themeButton.addEventListener('click', () => theme.toggle());
}

// Elements with data-ago="unix ms" show "N s ago"; data-since="unix ms" a
// running duration. One clock for the whole page.
function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll('[data-ago]')) {
    const s = fmtAgo(Number(el.dataset.ago), now);
    if (el.textContent !== s) el.textContent = s;
  }
  for (const el of document.querySelectorAll('[data-since]')) {
    const s = fmtDuration(now - Number(el.dataset.since));
    if (el.textContent !== s) el.textContent = s;
  }
}

async function start() {
  document.querySelector('.topbar').after(signinBanner);
  setupTopbar();
  applyChartTheme();
  window.addEventListener('hashchange', route);
  if (!window.location.hash) window.history.replaceState(null, '', '#/jobs');
  // A token entered earlier renews the session cookie (it lasts as long as
  // the browser session) before the first page asks for data.
  if (hasStoredToken()) await useToken(getToken(), { remount: false });
  route();
  setInterval(tick, 1000);
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
