// Chart.js setup shared by the pages: registration of the pieces used
// (tree-shaken by esbuild), theme colours read from the CSS custom properties,
// and ChartPanel, a titled chart box that exposes how many points it draws in
// its data-points attribute (the browser tests read it).
//
// Chart.js draws on <canvas> and styles elements only through element.style
// from script, which the dashboard's CSP (style-src 'self') allows.

import {
  BarController, BarElement, CategoryScale, Chart, Decimation, Filler, Legend, LinearScale,
  LineController, LineElement, LogarithmicScale, PointElement, ScatterController, Tooltip,
} from 'chart.js';
import { MatrixController, MatrixElement } from 'chartjs-chart-matrix';
import { h } from './lib/dom.js';

Chart.register(BarController, BarElement, CategoryScale, Decimation, Filler, Legend, LinearScale,
  LineController, LineElement, LogarithmicScale, PointElement, ScatterController, Tooltip,
  MatrixController, MatrixElement);

// Tableau 10: distinguishable on both themes.
export const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948',
  '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

export const PHASE_COLORS = {
  time_data_ms: '#8cb0d9',
  time_forward_ms: '#4e79a7',
  time_backward_ms: '#2f5f8a',
  time_comm_ms: '#e15759',
  time_optimizer_ms: '#59a14f',
  other: '#bab0ac',
};

export function color(i) {
  return PALETTE[i % PALETTE.length];
}

export function alpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

export const theme = { heat: ['#dbe9f6', '#f2c14e', '#d9412e'], text: '#333', grid: '#ddd' };
const panels = new Set();

// Reads the theme's colours into Chart.js defaults and redraws every chart.
export function applyChartTheme() {
  theme.text = cssVar('--fg-muted', '#555');
  theme.grid = cssVar('--grid', '#e3e6ea');
  theme.heat = [cssVar('--heat-0', '#dbe9f6'), cssVar('--heat-1', '#f2c14e'),
    cssVar('--heat-2', '#d9412e')];
  Chart.defaults.color = theme.text;
  Chart.defaults.borderColor = theme.grid;
  Chart.defaults.font.family = cssVar('--font-sans', 'system-ui, sans-serif');
  Chart.defaults.font.size = 11;
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.plugins.legend.labels.boxWidth = 10;
  Chart.defaults.plugins.legend.labels.boxHeight = 10;
  Chart.defaults.plugins.tooltip.backgroundColor = cssVar('--tooltip-bg', 'rgba(20,24,30,.92)');
  Chart.defaults.plugins.tooltip.titleColor = cssVar('--tooltip-fg', '#fff');
  Chart.defaults.plugins.tooltip.bodyColor = cssVar('--tooltip-fg', '#fff');
  for (const p of panels) {
    if (!p.chart) continue;
    // Scale options copy the defaults when the chart is built: set them again.
    for (const scale of Object.values(p.chart.options.scales || {})) {
      if (scale.ticks) scale.ticks.color = theme.text;
      if (scale.title) scale.title.color = theme.text;
      if (scale.grid) scale.grid.color = theme.grid;
      if (scale.border) scale.border.color = theme.grid;
    }
    if (p.chart.options.plugins?.legend?.labels) p.chart.options.plugins.legend.labels.color = theme.text;
    p.chart.update('none');
  }
}

// Linear interpolation through the theme's three heat colours, t in [0, 1].
export function heatColor(t) {
  const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0));
  const [a, b] = x < 0.5 ? [theme.heat[0], theme.heat[1]] : [theme.heat[1], theme.heat[2]];
  const f = x < 0.5 ? x * 2 : (x - 0.5) * 2;
  const pa = parseInt(a.slice(1), 16);
  const pb = parseInt(b.slice(1), 16);
  const ch = (shift) => Math.round(((pa >> shift) & 255) * (1 - f) + ((pb >> shift) & 255) * f);
  return `rgb(${ch(16)}, ${ch(8)}, ${ch(0)})`;
}

// A titled box holding one chart. `key` becomes data-chart; the number of data
// points drawn is kept in data-points; an empty chart shows `emptyText`.
export class ChartPanel {
  constructor(key, title, { note = '', size = '', emptyText = 'No data yet', tools = null } = {}) {
    this.canvas = h('canvas', { role: 'img', 'aria-label': title });
    this.empty = h('div', { class: 'chart-empty' }, emptyText);
    this.noteEl = h('span', { class: 'chart-note' }, note);
    this.el = h('section', {
      class: `panel chart ${size}`.trim(),
      dataset: { chart: key, points: '0' },
    },
    h('header', { class: 'panel-head' }, h('h3', null, title), this.noteEl, tools),
    h('div', { class: 'chart-canvas' }, this.canvas, this.empty));
    this.chart = null;
    panels.add(this);
  }

  // Builds the chart on first use.
  init(config) {
    if (!this.chart) this.chart = new Chart(this.canvas, config);
    return this.chart;
  }

  setNote(text) {
    if (this.noteEl.textContent !== text) this.noteEl.textContent = text;
  }

  setPoints(n) {
    this.el.dataset.points = String(n);
    this.empty.hidden = n > 0;
  }

  destroy() {
    panels.delete(this);
    if (this.chart) this.chart.destroy();
    this.chart = null;
  }
}

// Options of an x/y line chart over linear axes.
// xInteger: the x values are counts (ranks, batch sizes): whole-number ticks.
export function lineOptions({
  xTitle, yTitle, yTick, legend = true, xMin, yMin, yMax, decimate = false, xInteger = false,
}) {
  return {
    responsive: true,
    maintainAspectRatio: false,
    animation: false,
    parsing: decimate ? false : undefined,
    normalized: decimate,
    interaction: { mode: 'nearest', axis: 'x', intersect: false },
    elements: { point: { radius: 0, hitRadius: 6 }, line: { borderWidth: 1.6, tension: 0 } },
    scales: {
      x: {
        type: 'linear',
        title: { display: !!xTitle, text: xTitle, color: theme.text },
        ticks: { color: theme.text, maxTicksLimit: 8, precision: xInteger ? 0 : undefined },
        grid: { color: theme.grid },
        min: xMin,
      },
      y: {
        type: 'linear',
        title: { display: !!yTitle, text: yTitle, color: theme.text },
        ticks: { color: theme.text, maxTicksLimit: 6, callback: yTick },
        grid: { color: theme.grid },
        min: yMin,
        max: yMax,
      },
    },
    plugins: {
      legend: {
        display: legend,
        position: 'bottom',
        labels: {
          color: theme.text,
          filter: (item, data) => !data.datasets[item.datasetIndex]?.band,
        },
      },
      tooltip: { filter: (item) => !item.dataset.band },
      decimation: decimate ? { enabled: true, algorithm: 'lttb', samples: 600, threshold: 1200 } : { enabled: false },
    },
  };
}

// series: [{label, points: [{x, y, lo?, hi?}], color?, dash?, band?: bool}].
// A series with band draws its lo..hi range as a shaded area under the line.
export function lineDatasets(series) {
  const out = [];
  series.forEach((s, i) => {
    const c = s.color || color(i);
    if (s.band) {
      out.push({
        label: `${s.label} low`, band: true, data: s.points.map((p) => ({ x: p.x, y: p.lo })),
        borderWidth: 0, pointRadius: 0, fill: false, borderColor: 'transparent',
      });
      out.push({
        label: `${s.label} high`, band: true, data: s.points.map((p) => ({ x: p.x, y: p.hi })),
        borderWidth: 0, pointRadius: 0, fill: '-1', borderColor: 'transparent',
        backgroundColor: alpha(c, 0.18),
      });
    }
    out.push({
      label: s.label,
      data: s.points.map((p) => ({ x: p.x, y: p.y })),
      borderColor: c,
      backgroundColor: c,
      borderDash: s.dash || [],
      pointRadius: s.markers ? 3 : 0,
      pointHoverRadius: 4,
      borderWidth: s.width || 1.6,
    });
  });
  return out;
}
