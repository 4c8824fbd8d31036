// Formatting of API values for display. Pure functions, no DOM.

export const JOB_STATES = ['QUEUED', 'SCHEDULED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

// "JOB_STATE_RUNNING" -> "RUNNING", "SWEEP_STATE_FAILED" -> "FAILED",
// "SEARCH_STATE_SUCCEEDED" -> "SUCCEEDED".
export function stateName(state) {
  const s = String(state ?? '');
  return s.replace(/^(JOB|SWEEP|SEARCH)_STATE_/, '') || 'UNSPECIFIED';
}

export function isTerminal(state) {
  return TERMINAL.has(stateName(state));
}

// int64 fields arrive as strings ("12"); int32 and doubles as numbers.
export function num(v) {
  if (v == null || v === '') return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}

function pad(n, w = 2) {
  return String(n).padStart(w, '0');
}

// Local "2026-11-21 13:05:09"; "" for 0.
export function fmtTime(ms) {
  const t = num(ms);
  if (t <= 0) return '';
  const d = new Date(t);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// "13:05:09" today, "11-20 13:05" otherwise.
export function fmtShortTime(ms, now = Date.now()) {
  const t = num(ms);
  if (t <= 0) return '';
  const d = new Date(t);
  const today = new Date(now);
  if (d.toDateString() === today.toDateString()) {
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  return `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// 950 -> "950 ms", 12300 -> "12.3 s", 185000 -> "3m 05s", 7.4e6 -> "2h 03m".
export function fmtDuration(ms) {
  const t = Math.max(0, num(ms));
  if (t < 1000) return `${Math.round(t)} ms`;
  const s = t / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${pad(Math.floor(s % 60))}s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr}h ${pad(m % 60)}m`;
  return `${Math.floor(hr / 24)}d ${pad(hr % 24)}h`;
}

// "3 s ago", "5 min ago", "2 h ago", "4 d ago"; "never" for 0.
export function fmtAgo(ms, now = Date.now()) {
  const t = num(ms);
  if (t <= 0) return 'never';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 90) return `${s} s ago`;
  const m = Math.round(s / 60);
  if (m < 90) return `${m} min ago`;
  const hr = Math.round(m / 60);
  if (hr < 36) return `${hr} h ago`;
  return `${Math.round(hr / 24)} d ago`;
}

// Bytes in binary units: 512 -> "512 B", 1610612736 -> "1.5 GiB".
export function fmtBytes(v) {
  const x = Number(v);
  if (v == null || v === '' || !Number.isFinite(x)) return '–';
  if (Math.abs(x) < 1024) return `${Math.round(x)} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let y = x / 1024;
  let i = 0;
  while (Math.abs(y) >= 1024 && i < units.length - 1) {
    y /= 1024;
    i += 1;
  }
  return `${y.toFixed(1)} ${units[i]}`;
}

// Significant-figure formatting that stays compact: 0.01234 -> "0.0123",
// 1234.5 -> "1,235", 12.345 -> "12.3".
export function fmtNum(v, digits = 3) {
  if (v == null || v === '' || !Number.isFinite(Number(v))) return '–';
  const x = Number(v);
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1000) return Math.round(x).toLocaleString('en-US');
  if (a >= 1e-3) return String(Number(x.toPrecision(digits)));
  return x.toExponential(1);
}

// 0.8612 -> "86.12%".
export function fmtPct(fraction, digits = 2) {
  if (fraction == null || !Number.isFinite(Number(fraction))) return '–';
  return `${(Number(fraction) * 100).toFixed(digits)}%`;
}

export function fmtSeconds(s) {
  if (s == null || !Number.isFinite(Number(s)) || Number(s) <= 0) return '–';
  return fmtDuration(Number(s) * 1000);
}
