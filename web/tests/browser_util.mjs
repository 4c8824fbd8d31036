// Helpers shared by the browser tests: launching Debian's Chromium through
// playwright-core, watching a page for console errors, CSP violations and
// dialogs, a tiny step runner, and child processes that are always cleaned up.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, readdirSync } from 'node:fs';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.TESSERA_CHROMIUM || '/usr/bin/chromium';

export function parseArgs(argv, spec) {
  const out = { ...spec };
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in spec)) throw new Error(`unknown argument ${argv[i]}`);
    if (typeof spec[key] === 'boolean') out[key] = true;
    else out[key] = argv[++i];
  }
  return out;
}

export async function launchBrowser() {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} not found: install the Debian package chromium ` +
      '(scripts/setup.sh does), or point TESSERA_CHROMIUM at a Chromium binary');
  }
  // No sandbox: the tests may run as root. No background networking: this
  // machine has no network, and Chromium would keep trying.
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-dev-shm-usage'],
  });
}

// Records what must never happen on a dashboard page: console errors,
// uncaught exceptions, CSP violations and dialogs (alert() from injected
// markup would open one). Dialogs are dismissed.
export async function watch(context) {
  const seen = { errors: [], csp: [], dialogs: [] };
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      // Reported through the console, which the test reads.
      console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || 'inline'} ` +
        `(${e.sourceFile || ''}:${e.lineNumber || 0})`);
    });
  });
  context.on('page', (page) => attach(page, seen));
  for (const page of context.pages()) attach(page, seen);
  return seen;
}

function attach(page, seen) {
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const text = m.text();
    (/Content Security Policy|CSP violation/.test(text) ? seen.csp : seen.errors).push(`${page.url()}: ${text}`);
  });
  page.on('pageerror', (e) => seen.errors.push(`${page.url()}: uncaught ${e.message}`));
  page.on('dialog', (d) => {
    seen.dialogs.push(`${d.type()}: ${d.message()}`);
    d.dismiss().catch(() => {});
  });
}

export function assertClean(seen) {
  const problems = [
    ...seen.errors.map((e) => `console error: ${e}`),
    ...seen.csp.map((e) => `CSP: ${e}`),
    ...seen.dialogs.map((e) => `dialog opened: ${e}`),
  ];
  if (problems.length) throw new Error(problems.join('\n'));
}

export function assert(cond, message) {
  if (!cond) throw new Error(message);
}

// Runs named steps in order, printing one line each, and a closing summary
// line "N passed, N failed". A failed step stops the run unless `keepGoing`.
export class Steps {
  constructor() {
    this.passed = 0;
    this.failed = 0;
    this.started = Date.now();
  }

  async run(name, fn, { keepGoing = false } = {}) {
    const t0 = Date.now();
    try {
      await fn();
      this.passed++;
      console.log(`ok - ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
      return true;
    } catch (e) {
      this.failed++;
      console.log(`not ok - ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
      console.log(String(e && e.stack ? e.stack : e).split('\n').map((l) => `    ${l}`).join('\n'));
      if (!keepGoing) throw new StepFailed(name);
      return false;
    }
  }

  summary() {
    console.log(`browser: ${this.passed} passed, ${this.failed} failed`);
    console.log(`${this.passed} passed, ${this.failed} failed`);
    console.log(`total ${((Date.now() - this.started) / 1000).toFixed(1)} s`);
  }
}

export class StepFailed extends Error {}

// Child processes, each in its own process group, all stopped on exit: on
// success, failure, an exception, or SIGINT/SIGTERM/SIGHUP from ctest.
// Descendants that leave the group (the worker's ranks run in their own
// groups) are found by an environment tag every child inherits.
export class Processes {
  constructor(tag) {
    this.tag = tag;
    // Everything this test starts inherits the tag, the browser included.
    process.env.TESSERA_BROWSER_TEST_TAG = tag;
    this.children = [];
    this.stopped = false;
    const onSignal = (sig) => {
      console.log(`received ${sig}: stopping child processes`);
      this.stopAllSync();
      process.exit(1);
    };
    for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, onSignal);
    process.on('exit', () => this.stopAllSync());
  }

  start(name, cmd, args, { log, cwd } = {}) {
    const fd = openSync(log, 'a');
    const child = spawn(cmd, args, {
      cwd, detached: true, stdio: ['ignore', fd, fd],
      env: process.env,
    });
    child.on('error', (e) => console.log(`${name}: ${e.message}`));
    const entry = { name, child, log, exited: false, code: null };
    child.on('exit', (code, signal) => {
      entry.exited = true;
      entry.code = code ?? signal;
    });
    this.children.push(entry);
    return entry;
  }

  // Pids of live processes carrying our tag (descendants included).
  tagged() {
    const pids = [];
    for (const d of readdirSync('/proc')) {
      if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
      try {
        const env = readFileSync(`/proc/${d}/environ`, 'latin1');
        if (env.includes(`TESSERA_BROWSER_TEST_TAG=${this.tag}\0`)) pids.push(Number(d));
      } catch {
        // gone, or not ours to read
      }
    }
    return pids;
  }

  // SIGTERM every group (the worker stops its ranks on SIGTERM), wait up to
  // `graceMs`, then SIGKILL whatever carries the tag.
  async stopAll(graceMs = 10000) {
    if (this.stopped) return;
    for (const e of [...this.children].reverse()) {
      if (!e.exited) signalGroup(e.child.pid, 'SIGTERM');
    }
    const deadline = Date.now() + graceMs;
    while (Date.now() < deadline && (this.children.some((e) => !e.exited) || this.tagged().length)) {
      await new Promise((r) => setTimeout(r, 100));
    }
    this.stopAllSync();
  }

  stopAllSync() {
    if (this.stopped) return;
    this.stopped = true;
    for (const e of this.children) if (!e.exited) signalGroup(e.child.pid, 'SIGKILL');
    for (const pid of this.tagged()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}

function signalGroup(pid, sig) {
  try {
    process.kill(-pid, sig);
  } catch {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
}

export function ensureDir(dir) {
  mkdirSync(dir, { recursive: true });
  return dir;
}

export async function waitFor(what, fn, { timeoutMs = 30000, intervalMs = 200 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}${last ? ` (last error: ${last.message})` : ''}`);
}
