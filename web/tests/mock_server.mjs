// A stand-in for the coordinator's HTTP API (docs/api.md) with simulated
// data, for developing the dashboard and for the browser tests that need
// behaviour a real coordinator shows only under load (streams refused with
// 503). Serves the bundled dashboard from --dist with the coordinator's CSP.
//
//   node web/tests/mock_server.mjs --dist build/web/dist [--port 8090] [--refuse-streams]
//                                  [--user-token TOKEN]
//
// Prints "listening on PORT" once ready. Exported startMockServer() does the
// same for tests.
import { readFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join } from 'node:path';

export const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
  "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

const S = (n) => String(n);  // int64 fields are strings in proto3 JSON

function makeWorld(now) {
  const trainer = { model: 'vit-micro', dataset: 'synthetic', batch_size: 16, epochs: 3 };
  const job = (id, name, state, extra = {}) => ({
    id: S(id), name, state: `JOB_STATE_${state}`, reason: '', pending_reason: '', attempt: 1,
    spec: { name, world_size: 4, trainer, priority: 0, max_restarts: 0 },
    created_unix_ms: S(now - id * 60000), updated_unix_ms: S(now - id * 30000),
    ranks: [], spec_yaml: `name: ${JSON.stringify(name)}\nworld_size: 4\n`, events: [],
    sweep_id: '0', sweep_point: 0, ...extra,
  });
  const jobs = [
    job(1, 'vit-micro 4 ranks', 'RUNNING'),
    job(2, 'fmnist baseline', 'SUCCEEDED', { reason: 'all ranks exited 0' }),
    job(3, 'broken run', 'FAILED', { reason: 'rank 1 exited with code 3', attempt: 2 }),
    job(4, '<img src=x onerror=alert(1)>', 'QUEUED', { pending_reason: 'needs 8 slots; 6 registered', attempt: 0 }),
    job(5, 'pets eval', 'SUCCEEDED', { reason: 'all ranks exited 0' }),
  ];
  // An eval job (tessctl eval of a pets job): rank 0's result, int64s as JSON strings.
  jobs[4].spec.kind = 'eval';
  jobs[4].ranks = [{
    rank: 0, worker: 'w1', slot: 0, state: 'exited', pid: 0, exit_code: 0, signal: 0,
    param_hash: '', test_accuracy: 0.75, has_result: true, exit_reason: 'exited with code 0',
    eval: {
      split: 'test', step: '300', samples: '8', top1: 0.75, top5: 1, loss: 0.61,
      class_names: ['<b>cat</b>', 'dog'], class_accuracy: [1, 0.5], class_samples: ['4', '4'],
      confusion: ['4', '0', '2', '2'],
    },
  }];
  jobs[0].ranks = [0, 1, 2, 3].map((r) => ({
    rank: r, worker: r < 2 ? 'w1' : 'w2', slot: r % 2, state: 'running', pid: 4000 + r,
    exit_code: 0, signal: 0, param_hash: '', test_accuracy: 0, has_result: false, exit_reason: '',
    progress: r === 3
      ? { step: 120, phase: 'forward', phase_elapsed_ms: 300 }
      : { step: 120, phase: 'collective', collective: 'allreduce #240 (bucket 1)', phase_elapsed_ms: 1200 },
    progress_age_ms: 400, straggler: r === 3,
  }));
  jobs[0].stragglers = ['rank 3 on w2: 1.9x the median step work of its peers (forward <b>190</b> ms vs 50 ms per step)'];
  jobs[0].events = [
    { unix_ms: S(now - 60000), from_state: 'JOB_STATE_UNSPECIFIED', to_state: 'JOB_STATE_QUEUED', reason: 'submitted' },
    { unix_ms: S(now - 59000), from_state: 'JOB_STATE_QUEUED', to_state: 'JOB_STATE_SCHEDULED', reason: 'placed on w1, w2' },
    { unix_ms: S(now - 58000), from_state: 'JOB_STATE_SCHEDULED', to_state: 'JOB_STATE_RUNNING', reason: 'all 4 ranks joined <b>rendezvous</b>' },
  ];
  jobs[2].ranks = [0, 1].map((r) => ({
    rank: r, worker: 'w1', slot: r, state: 'exited', pid: 0, exit_code: r === 1 ? 3 : 0,
    signal: r === 0 ? 15 : 0, param_hash: '', test_accuracy: 0, has_result: false,
    exit_reason: r === 1 ? 'exited with code 3' : 'stopped: another rank failed (SIGTERM)',
  }));
  const workers = [
    { name: 'w1', hostname: 'node-a', slots: 2, slots_used: 2, alive: true, last_seen_unix_ms: S(now), epoch: '3', device_kind: 'cpu' },
    { name: 'w2', hostname: 'node-b', slots: 4, slots_used: 2, alive: true, last_seen_unix_ms: S(now), epoch: '1', device_kind: 'cuda' },
    { name: '<b>w3</b>', hostname: 'node-c', slots: 2, slots_used: 0, alive: false, last_seen_unix_ms: S(now - 600000), epoch: '2', device_kind: 'cpu' },
  ];
  const rows = [];
  for (const bs of [32, 64]) {
    const t1 = bs === 32 ? 120 : 100;
    for (const n of [1, 2, 4, 8]) {
      const t = t1 / n * (1 + 0.08 * Math.log2(n) * (bs === 32 ? 1.5 : 1));
      rows.push({
        world_size: n, batch_size: bs, scaling: 'strong', shape: '', runs: 2,
        epoch_time_mean_s: t, epoch_time_std_s: t * 0.04, total_time_mean_s: t * 3,
        images_per_sec: 60000 / t, speedup: t1 / t, efficiency: t1 / t / n, baseline_world_size: 1,
        comm_share: n === 1 ? 0 : 0.05 * Math.log2(n) * (bs === 32 ? 1.6 : 1),
        final_accuracy: 0.88 - 0.01 * Math.log2(n) - (bs === 64 ? 0.01 : 0), job_ids: [S(10 + n), S(20 + n)],
      });
    }
  }
  const points = rows.flatMap((r, i) => [0, 1].map((rep) => ({
    index: i * 2 + rep, world_size: r.world_size, batch_size: r.batch_size, scaling: 'strong', shape: '',
    repeat: rep, job_id: S(10 + i * 2 + rep), state: 'JOB_STATE_SUCCEEDED',
  })));
  const sweeps = [{
    id: '1', name: 'cifar strong scaling', state: 'SWEEP_STATE_SUCCEEDED', reason: '',
    spec: { name: 'cifar strong scaling', base: { trainer }, grid: { world_size: [1, 2, 4, 8], batch_size: [32, 64], scaling: ['strong'], shape: [] }, repeats: 2, max_parallel: 1 },
    spec_yaml: 'name: cifar strong scaling\n', created_unix_ms: S(now - 3600000), updated_unix_ms: S(now - 60000), points,
  }];
  const zero = zeroStudy(now, trainer);
  sweeps.push(zero.sweep);
  const study = searchStudy(now, trainer);
  return {
    jobs, workers, sweeps, reports: { 1: { sweep_id: '1', rows }, 2: zero.report },
    searches: [study.search], metrics: study.metrics, logs: new Map(),
  };
}

// Search 1: ASHA (eta 3; rungs of 100, 300 and 900 steps) over lr
// (loguniform), weight_decay (numbers) and optimizer (names). Trial 1 was
// promoted twice and is the best, trial 3 once; trial 2 failed; trial 4 runs
// its first rung and has points but no rung metric yet. Each job reports
// val_accuracy every 20 steps from 2 ranks. Jobs 101-108 are not in the job
// list.
// Where a trial's best rung metric was recorded: that rung, its job and the
// step it stopped at.
function bestOf(rungMetrics, jobIds) {
  const rung = rungMetrics.indexOf(Math.max(...rungMetrics));
  return { best_metric: rungMetrics[rung], best_rung: rung, best_job_id: jobIds[rung],
    best_step: S([100, 300, 900][rung]) };
}

export function searchStudy(now, trainer) {
  const trials = [
    [0, '0.0003', '0', 'adamw', 'paused', 0, ['101'], [0.6]],
    [1, '0.002', '0.05', 'lamb', 'completed', 2, ['102', '105', '107'], [0.7, 0.8, 0.88]],
    [2, '0.009', '0.1', 'adamw', 'failed', 0, ['103'], []],
    [3, '0.001', '0', 'lamb', 'paused', 1, ['104', '106'], [0.68, 0.75]],
    [4, '0.0001', '0.05', 'adamw', 'running', 0, ['108'], []],
  ].map(([index, lr, wd, optimizer, status, rung, jobIds, rungMetrics]) => ({
    index, parameters: { lr, weight_decay: wd, optimizer }, rung,
    steps: S([100, 300, 900][rung] * (rungMetrics.length > rung ? 1 : 0)),
    job_ids: jobIds, state: status === 'running' ? 'JOB_STATE_RUNNING'
      : status === 'failed' ? 'JOB_STATE_FAILED' : 'JOB_STATE_SUCCEEDED',
    status, rung_metrics: rungMetrics, promoted: rung > 0,
    ...(rungMetrics.length ? bestOf(rungMetrics, jobIds) : {}),
  }));
  // job: [trial, first step, last step]; trial t's accuracy is 0.04 t below trial 0's.
  const spans = { 101: [0, 20, 100], 102: [1, 20, 100], 105: [1, 120, 300], 107: [1, 320, 900],
    104: [3, 20, 100], 106: [3, 120, 300], 108: [4, 20, 40] };
  const metrics = new Map();
  for (const [job, [trial, from, to]] of Object.entries(spans)) {
    const points = [];
    for (let step = from; step <= to; step += 20) {
      for (const rank of [0, 1]) {
        points.push({ attempt: 1, rank, step: S(step), name: 'val_accuracy',
          value: 0.5 + step / 3000 + rank * 0.01 - 0.04 * trial, unix_ms: S(now - 100000 + step) });
      }
    }
    metrics.set(job, points);
  }
  const search = {
    id: '1', name: 'vit-micro <b>asha</b>', state: 'SEARCH_STATE_RUNNING', reason: 'submitted',
    owner: 'alice', best_trial: 1, trials,
    spec: {
      name: 'vit-micro asha', base: { world_size: 1, trainer },
      search: {
        method: 'asha', seed: '1', metric: 'val_accuracy', mode: 'max', max_trials: 9,
        max_concurrent: 2, max_length: '900', length_unit: 'steps',
        parameters: [
          { key: 'lr', choice: [], uniform: [], loguniform: [0.0001, 0.01], int_range: [] },
          { key: 'weight_decay', choice: ['0', '0.05', '0.1'], uniform: [], loguniform: [], int_range: [] },
          { key: 'optimizer', choice: ['adamw', 'lamb'], uniform: [], loguniform: [], int_range: [] },
        ],
        asha: { reduction_factor: 3, min_length: '100', max_rungs: 0 },
      },
    },
    spec_yaml: 'name: vit-micro asha\n', created_unix_ms: S(now - 600000), updated_unix_ms: S(now - 1000),
  };
  return { search, metrics };
}

// Sweep 2: world size x ZeRO stage, each row with the measured peak memory
// per rank (CPU ranks' peak RSS: 512 MiB of parameters, 512 MiB of the rest,
// plus what the stage keeps) and its breakdown, the optimizer state, gradient
// and parameter bytes per rank (stage 1 shards the optimizer state, stage 2
// the gradients too).
// The 8-rank stage-0 point did not report them: its row leaves the figures
// out, as the coordinator's JSON does.
function zeroStudy(now, trainer) {
  const S = String;
  const opt = 2 * 1024 ** 3;
  const grad = 1024 ** 3;
  const rows = [];
  for (const stage of [0, 1, 2]) {
    for (const n of [1, 2, 4, 8]) {
      const t = 100 / n * (1 + 0.03 * stage);
      const row = {
        world_size: n, batch_size: 64, zero_stage: stage, scaling: 'strong', shape: 'pack', runs: 1,
        epoch_time_mean_s: t, epoch_time_std_s: 0, total_time_mean_s: t * 3, images_per_sec: 60000 / t,
        speedup: 100 / t / (1 + 0.03 * stage), efficiency: 100 / t / (1 + 0.03 * stage) / n,
        baseline_world_size: 1, comm_share: 0.1, final_accuracy: 0.85, job_ids: [S(100 + rows.length)],
      };
      if (!(stage === 0 && n === 8)) {
        row.optimizer_state_bytes_per_rank = stage >= 1 ? opt / n : opt;
        row.gradient_bytes_per_rank = stage === 2 ? grad / n : grad;
        row.peak_memory_bytes_per_rank = 1024 ** 3 + row.optimizer_state_bytes_per_rank +
          row.gradient_bytes_per_rank;
        row.memory_source = 'rss';
        row.parameter_bytes_per_rank = 512 * 1024 ** 2;
      } else {
        row.memory_source = '';
      }
      rows.push(row);
    }
  }
  const points = rows.map((r, i) => ({
    index: i, world_size: r.world_size, batch_size: 64, zero_stage: r.zero_stage, scaling: 'strong',
    shape: 'pack', repeat: 0, job_id: r.job_ids[0], state: 'JOB_STATE_SUCCEEDED',
  }));
  const sweep = {
    id: '2', name: 'zero study', state: 'SWEEP_STATE_SUCCEEDED', reason: '',
    spec: { name: 'zero study', base: { trainer }, grid: { world_size: [1, 2, 4, 8], batch_size: [64], zero_stage: [0, 1, 2] }, repeats: 1, max_parallel: 1 },
    spec_yaml: 'name: zero study\n', created_unix_ms: S(now - 1800000), updated_unix_ms: S(now - 30000), points,
  };
  return { sweep, report: { sweep_id: '2', rows } };
}

// With `userToken`, /api/ requests need it, as the coordinator's
// authentication does: reads by the session cookie that POST /api/v1/session
// sets or by the header, changes by the header.
export async function startMockServer({ dist, port = 0, refuseStreams = false, tickMs = 400, userToken = '' }) {
  const now = Date.now();
  const world = makeWorld(now);
  const listeners = new Set();  // (kind) => void
  const notify = (kind) => {
    for (const l of listeners) l(kind);
  };
  const jobPoints = (id) => {
    if (!world.metrics.has(id)) world.metrics.set(id, []);
    return world.metrics.get(id);
  };
  const logOf = (id, rank) => {
    const k = `${id}:${rank}`;
    if (!world.logs.has(k)) world.logs.set(k, '');
    return k;
  };

  // Simulates job 1: 4 ranks, rank 3 a straggler from step 100 on.
  let step = 0;
  const simulate = () => {
    const j = world.jobs[0];
    if (j.state !== 'JOB_STATE_RUNNING') return;
    const pts = jobPoints('1');
    const t = Date.now();
    for (let r = 0; r < 4; r++) {
      const slow = r === 3 && step >= 100 ? 1.6 : 1;
      const data = 2 + r * 0.1;
      const fwd = 14 * slow;
      const bwd = 27 * slow;
      const comm = r === 3 ? 1 : 6 + 9 * (slow > 1 ? 1 : 0);
      const opt = 3;
      const add = (name, value) => pts.push({ rank: r, step: S(step), name, value, unix_ms: S(t), attempt: 1 });
      if (step === 0) add('total_steps', 400);
      add('loss', 2.3 * Math.exp(-step / 150) + 0.2 + 0.03 * Math.sin(step / 7 + r));
      add('images_per_sec', 16 * 1000 / (data + fwd + bwd + comm + opt));
      add('time_data_ms', data);
      add('time_forward_ms', fwd);
      add('time_backward_ms', bwd);
      add('time_comm_ms', comm);
      add('time_optimizer_ms', opt);
      add('time_step_ms', data + fwd + bwd + comm + opt + 0.5);
      add('epoch', step / 128);
      add('cuda_peak_allocated_bytes', (3 + r * 0.25) * 2 ** 30);
      add('gpu_memory_used_bytes', 5.5 * 2 ** 30);
      if (step > 0 && step % 128 === 0) add('test_accuracy', 0.5 + 0.3 * (1 - Math.exp(-step / 200)));
      const k = logOf('1', r);
      world.logs.set(k, world.logs.get(k) + `step ${step} rank ${r} loss ${(2.3 * Math.exp(-step / 150)).toFixed(4)} <script>x</script>\n`);
    }
    step += 5;
    if (step > 400) {
      j.state = 'JOB_STATE_SUCCEEDED';
      j.reason = 'all ranks exited 0';
      j.updated_unix_ms = S(Date.now());
      j.ranks = j.ranks.map((r) => ({ ...r, state: 'exited', exit_reason: 'exited with code 0', has_result: true, test_accuracy: 0.83, param_hash: 'a1b2c3d4e5f6' }));
      notify('job');
    }
    notify('metrics');
  };
  const sim = setInterval(simulate, tickMs);
  const heartbeat = setInterval(() => {
    for (const w of world.workers) if (w.alive) w.last_seen_unix_ms = S(Date.now());
    notify('workers');
  }, 1000);

  const send = (res, status, body, type = 'application/json') => {
    res.writeHead(status, {
      ...(res.getHeader('Set-Cookie') ? { 'Set-Cookie': res.getHeader('Set-Cookie') } : {}), 'Content-Type': type, 'Content-Security-Policy': CSP, 'X-Content-Type-Options': 'nosniff', 'Referrer-Policy': 'no-referrer' });
    res.end(typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body));
  };
  const notFound = (res, what) => send(res, 404, { error: `${what} not found`, code: 'NOT_FOUND' });

  const stream = (req, res, open) => {
    if (refuseStreams) return send(res, 503, { error: 'too many event streams open (16)', code: 'UNAVAILABLE' });
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', 'Content-Security-Policy': CSP });
    const emit = (event, data) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    const close = () => res.end();
    const listener = open(emit, close);
    listeners.add(listener);
    const keep = setInterval(() => res.write(': keepalive\n\n'), 15000);
    req.on('close', () => {
      listeners.delete(listener);
      clearInterval(keep);
    });
  };

  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const p = url.pathname;
    let m;
    const bearer = /^Bearer (\S+)$/.exec(req.headers.authorization || '')?.[1] || '';
    const cookie = /(?:^|;\s*)tessera_token=([^;]*)/.exec(req.headers.cookie || '')?.[1] || '';
    const unauthenticated = (what) => send(res, 401, { error: what, code: 'UNAUTHENTICATED' });
    if (p === '/api/v1/session') {
      if (req.method === 'DELETE') {
        res.setHeader('Set-Cookie', 'tessera_token=; Path=/api/; HttpOnly; SameSite=Strict; Max-Age=0');
        return send(res, 200, {});
      }
      if (!bearer || (userToken && bearer !== userToken)) return unauthenticated('token not accepted');
      res.setHeader('Set-Cookie', `tessera_token=${bearer}; Path=/api/; HttpOnly; SameSite=Strict`);
      return send(res, 200, {});
    }
    if (userToken && p.startsWith('/api/') && (req.method === 'GET' ? (bearer || cookie) : bearer) !== userToken) {
      return unauthenticated('sign in: send a user token');
    }
    if (req.method === 'POST') {
      if (!bearer) return unauthenticated('missing bearer token');
      if ((m = /^\/api\/v1\/jobs\/(\d+)\/cancel$/.exec(p))) {
        const j = world.jobs.find((x) => x.id === m[1]);
        if (!j) return notFound(res, `job ${m[1]}`);
        if (/SUCCEEDED|FAILED|CANCELLED/.test(j.state)) return send(res, 409, { error: `job ${m[1]} already ended`, code: 'FAILED_PRECONDITION' });
        j.events.push({ unix_ms: S(Date.now()), from_state: j.state, to_state: 'JOB_STATE_CANCELLED', reason: 'cancelled by user' });
        j.state = 'JOB_STATE_CANCELLED';
        j.reason = 'cancelled by user';
        j.updated_unix_ms = S(Date.now());
        notify('job');
        return send(res, 200, { state: 'JOB_STATE_CANCELLED' });
      }
      return send(res, 405, { error: 'method not allowed', code: 'METHOD_NOT_ALLOWED' });
    }
    if (p === '/healthz') return send(res, 200, 'ok\n', 'text/plain');
    if (p === '/api/v1/jobs') return send(res, 200, { jobs: world.jobs.map((j) => ({ ...j, events: [] })) });
    if ((m = /^\/api\/v1\/jobs\/(\d+)$/.exec(p))) {
      const j = world.jobs.find((x) => x.id === m[1]);
      return j ? send(res, 200, j) : notFound(res, `job ${m[1]}`);
    }
    if ((m = /^\/api\/v1\/jobs\/(\d+)\/metrics$/.exec(p))) {
      const after = Number(url.searchParams.get('after_step') || -1);
      const name = url.searchParams.get('name') || '';
      return send(res, 200, {
        points: jobPoints(m[1]).filter((x) => (Number(x.step) > after || after <= 0) && (!name || x.name === name)),
      });
    }
    if ((m = /^\/api\/v1\/jobs\/(\d+)\/logs$/.exec(p))) {
      const text = world.logs.get(logOf(m[1], Number(url.searchParams.get('rank') || 0)));
      const off = Number(url.searchParams.get('offset') || 0);
      const data = Buffer.from(text).subarray(off).toString();
      return send(res, 200, { data, next_offset: S(off + Buffer.byteLength(data)), attempt: 1, complete: false });
    }
    if (p === '/api/v1/workers') return send(res, 200, { workers: world.workers });
    if (p === '/api/v1/searches') return send(res, 200, { searches: world.searches });
    if ((m = /^\/api\/v1\/searches\/(\d+)$/.exec(p))) {
      const s = world.searches.find((x) => x.id === m[1]);
      return s ? send(res, 200, s) : notFound(res, `search ${m[1]}`);
    }
    if (p === '/api/v1/sweeps') return send(res, 200, { sweeps: world.sweeps });
    if ((m = /^\/api\/v1\/sweeps\/(\d+)$/.exec(p))) {
      const s = world.sweeps.find((x) => x.id === m[1]);
      return s ? send(res, 200, s) : notFound(res, `sweep ${m[1]}`);
    }
    if ((m = /^\/api\/v1\/sweeps\/(\d+)\/report$/.exec(p))) {
      return world.reports[m[1]] ? send(res, 200, world.reports[m[1]]) : notFound(res, `sweep ${m[1]}`);
    }
    if (p === '/api/v1/stream/jobs') {
      return stream(req, res, (emit) => {
        emit('jobs', { jobs: world.jobs });
        return (kind) => kind === 'job' && emit('jobs', { jobs: world.jobs });
      });
    }
    if ((m = /^\/api\/v1\/stream\/jobs\/(\d+)$/.exec(p))) {
      const j = world.jobs.find((x) => x.id === m[1]);
      if (!j) return notFound(res, `job ${m[1]}`);
      return stream(req, res, (emit, close) => {
        let sent = 0;
        const offsets = new Map();
        const flush = () => {
          const pts = jobPoints(j.id);
          if (pts.length > sent || sent === 0) emit('metrics', { points: pts.slice(sent) });
          sent = pts.length;
          for (const r of j.ranks) {
            const k = logOf(j.id, r.rank);
            const text = Buffer.from(world.logs.get(k));
            const from = offsets.get(k) ?? Math.max(0, text.length - 65536);
            if (text.length > from) emit('log', { rank: r.rank, attempt: j.attempt, offset: S(from), data: text.subarray(from).toString() });
            offsets.set(k, text.length);
          }
        };
        emit('job', j);
        flush();
        if (/SUCCEEDED|FAILED|CANCELLED/.test(j.state)) setTimeout(close, 100);
        return (kind) => {
          if (kind === 'job') emit('job', j);
          flush();
          if (/SUCCEEDED|FAILED|CANCELLED/.test(j.state)) setTimeout(close, 100);
        };
      });
    }
    if (p === '/api/v1/stream/workers') {
      return stream(req, res, (emit) => {
        emit('workers', { workers: world.workers });
        return (kind) => kind === 'workers' && emit('workers', { workers: world.workers });
      });
    }
    if ((m = /^\/api\/v1\/stream\/sweeps\/(\d+)$/.exec(p))) {
      const s = world.sweeps.find((x) => x.id === m[1]);
      if (!s) return notFound(res, `sweep ${m[1]}`);
      return stream(req, res, (emit) => {
        emit('sweep', s);
        emit('report', world.reports[s.id]);
        return () => {};
      });
    }
    if (p.startsWith('/api/')) return notFound(res, `route ${p}`);
    const file = p === '/' ? 'index.html' : p.slice(1);
    const full = join(dist, file);
    if (!/^[\w.-]+$/.test(file) || !existsSync(full)) return notFound(res, p);
    return send(res, 200, readFileSync(full), TYPES[extname(file)] || 'application/octet-stream');
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    world,
    close: () => {
      clearInterval(sim);
      clearInterval(heartbeat);
      server.closeAllConnections?.();
      server.close();
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const opt = (name, def) => (args.includes(name) ? args[args.indexOf(name) + 1] : def);
  const s = await startMockServer({
    dist: opt('--dist', 'dist'), port: Number(opt('--port', 0)), refuseStreams: args.includes('--refuse-streams'),
    userToken: opt('--user-token', ''),
  });
  console.log(`listening on ${s.port}`);
}
