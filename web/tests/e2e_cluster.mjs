// The real cluster of the browser end-to-end tests: a tessera-coordinator
// serving the embedded dashboard on --http, and one tessera-worker "w1" with
// two CPU slots running tessera-train, all on 127.0.0.1 with ports the
// coordinator picks. Also tessctl and the HTTP API with the user's token.
//
// When the coordinator has authentication (its `token` command exists), the
// worker joins with a join token and there is a user token named after this
// process's account (ranks run as that account), plus one per name in
// `otherUsers`; without it everything runs without tokens.
//
// The worker allows trainer.checkpoint_dir under `checkpointRoot`
// (WORK/checkpoints). Processes are started through the caller's
// `Processes` (browser_util.mjs), which stops them.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { userInfo } from 'node:os';
import { assert, ensureDir, waitFor } from './browser_util.mjs';

const BINARIES = ['tessera-coordinator', 'tessera-worker', 'tessera-train', 'tessctl'];

// The last `lines` lines of a log file, indented for a test's output.
export function tail(file, lines = 30) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).map((l) => `    | ${l}`).join('\n');
  } catch {
    return `    (no ${file})`;
  }
}

// Runs a command to its end: {code, stdout, stderr}; never throws.
export function run(cmd, argv) {
  return new Promise((resolve) => {
    execFile(cmd, argv, { timeout: 60000 },
      (error, stdout, stderr) => resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr }));
  });
}

async function waitPortFile(file, proc) {
  return waitFor(`port file ${file}`, () => {
    if (proc.exited) throw new Error(`${proc.name} exited (${proc.code}):\n${tail(proc.log)}`);
    if (!existsSync(file)) return null;
    const port = Number(readFileSync(file, 'utf8').trim());
    return port > 0 ? port : null;
  }, { timeoutMs: 30000 });
}

// Waits until the open page asks for a token (its first read was refused),
// enters the token, and waits until the sign-in banner is gone (the token was
// accepted and the page mounted again). Entering it before the refusal
// arrives would race the page's first read.
export async function signIn(page, token) {
  await page.waitForSelector('#signin', { state: 'visible', timeout: 15000 });
  await page.fill('#token', token);
  await page.press('#token', 'Enter');
  await page.waitForSelector('#signin', { state: 'hidden', timeout: 15000 });
}

export class Cluster {
  constructor({ bin, work, procs, otherUsers = [] }) {
    this.binDir = bin;
    this.work = work;
    this.procs = procs;
    this.otherUsers = otherUsers;
    this.checkpointRoot = ensureDir(join(work, 'checkpoints'));
    this.userToken = '';
    this.otherTokens = {};  // name -> token
    this.coordinator = null;
    this.worker = null;
    this.grpc = '';  // host:port
    this.http = '';  // http://host:port
    this.httpPort = 0;
  }

  bin(name) {
    return join(this.binDir, name);
  }

  // Creates the tokens, starts the coordinator and the worker, and waits
  // until the worker is registered and alive.
  async start() {
    const missing = BINARIES.filter((b) => !existsSync(this.bin(b)));
    assert(!missing.length, `missing in ${this.binDir}: ${missing.join(', ')} (build them first)`);
    const db = join(this.work, 'db.sqlite');
    const joinArgs = [];
    const join1 = await run(this.bin('tessera-coordinator'), ['--db', db, 'token', 'create', '--kind', 'join', '--name', 'w1']);
    if (join1.code === 0) {
      const joinFile = join(this.work, 'join-token');
      writeFileSync(joinFile, `${join1.stdout.trim().split('\n').pop()}\n`, { mode: 0o600 });
      joinArgs.push('--join-token-file', joinFile);
      this.userToken = await this.createUserToken(db, userInfo().username);
      for (const name of this.otherUsers) this.otherTokens[name] = await this.createUserToken(db, name);
    } else {
      console.log('    (no token command: running without authentication)');
    }
    this.coordinator = this.procs.start('coordinator', this.bin('tessera-coordinator'), [
      '--listen', '127.0.0.1:0', '--port-file', join(this.work, 'grpc.port'),
      '--http', '127.0.0.1:0', '--http-port-file', join(this.work, 'http.port'),
      '--db', db], { log: this.coordinatorLog });
    const grpcPort = await waitPortFile(join(this.work, 'grpc.port'), this.coordinator);
    this.httpPort = await waitPortFile(join(this.work, 'http.port'), this.coordinator);
    this.grpc = `127.0.0.1:${grpcPort}`;
    this.http = `http://127.0.0.1:${this.httpPort}`;
    this.worker = this.procs.start('worker', this.bin('tessera-worker'), [
      '--coordinator', this.grpc, '--name', 'w1', '--cpu-slots', '2', '--work-dir', join(this.work, 'w1'),
      '--trainer', this.bin('tessera-train'), '--no-cgroups', '--checkpoint-root', this.checkpointRoot,
      ...joinArgs,
      // A root worker runs jobs as root only when allowed to.
      ...(process.getuid() === 0 ? ['--allow-root-jobs'] : [])], { log: this.workerLog });
    await waitFor('worker w1 registered', async () => {
      if (this.worker.exited) throw new Error(`worker exited (${this.worker.code}):\n${tail(this.workerLog)}`);
      const body = await this.api('/api/v1/workers');
      return (body.workers || []).some((w) => w.name === 'w1' && w.alive);
    });
  }

  async createUserToken(db, name) {
    const r = await run(this.bin('tessera-coordinator'), ['--db', db, 'token', 'create', '--name', name]);
    assert(r.code === 0, `token create --name ${name} exited ${r.code}: ${r.stderr}`);
    return r.stdout.trim().split('\n').pop();
  }

  get coordinatorLog() {
    return join(this.work, 'coordinator.log');
  }

  get workerLog() {
    return join(this.work, 'worker.log');
  }

  // GET from the coordinator's API as the user (or with `token`); the body as
  // JSON, or an error naming the status.
  async api(path, { token = this.userToken } = {}) {
    const r = await this.apiResponse(path, { token });
    if (!r.ok) throw new Error(`GET ${path} answered ${r.status}: ${await r.text()}`);
    return r.json();
  }

  apiResponse(path, { token = this.userToken } = {}) {
    return fetch(`${this.http}${path}`, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  }

  authHeader() {
    return this.userToken ? { Authorization: `Bearer ${this.userToken}` } : {};
  }

  // tessctl against the coordinator as the user.
  tessctl(argv) {
    const token = this.userToken ? ['--token', this.userToken] : [];
    return run(this.bin('tessctl'), ['--coordinator', this.grpc, ...token, ...argv]);
  }

  // Writes `yaml` to WORK/`file` and runs `tessctl ...command FILE`; the id
  // on tessctl's last line.
  async submitFile(command, file, yaml) {
    const path = join(this.work, file);
    writeFileSync(path, yaml);
    const r = await this.tessctl([...command, path]);
    assert(r.code === 0, `tessctl ${command.join(' ')} ${path} exited ${r.code}:\n${r.stdout}${r.stderr}`);
    const last = r.stdout.trim().split('\n').pop() || '';
    const m = /(\d+)\s*$/.exec(last);
    assert(m, `no id on tessctl's last line: ${JSON.stringify(last)}`);
    return m[1];
  }

  // The coordinator's and the worker's last log lines, for a failure.
  logs() {
    return `coordinator log (${this.coordinatorLog}):\n${tail(this.coordinatorLog)}\n` +
      `worker log (${this.workerLog}):\n${tail(this.workerLog)}`;
  }
}
