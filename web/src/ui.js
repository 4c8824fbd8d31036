// Small UI pieces shared by the pages.

import { h } from './lib/dom.js';
import { stateName } from './lib/format.js';

// Coloured badge for a job or sweep state ("JOB_STATE_RUNNING" -> RUNNING).
export function stateBadge(state) {
  const name = stateName(state);
  return h('span', { class: `badge state-${name.toLowerCase()}`, dataset: { state: name } }, name);
}

export function badge(text, kind) {
  return h('span', { class: `badge ${kind}` }, text);
}

// A thin horizontal bar: used/total. `fullIsBusy` colours a full bar as a
// warning (all slots taken) rather than as done.
export function meter(used, total, label, { fullIsBusy = true } = {}) {
  const fill = h('span', { class: 'meter-fill' });
  const frac = total > 0 ? Math.min(1, Math.max(0, used / total)) : 0;
  fill.style.width = `${(frac * 100).toFixed(1)}%`;
  if (frac >= 1) fill.classList.add(fullIsBusy ? 'full' : 'done');
  return h('span', { class: 'meter-wrap' },
    h('span', { class: 'meter', title: label ?? `${used} / ${total}` }, fill),
    h('span', { class: 'meter-text' }, label ?? `${used}/${total}`));
}

export function errorBox(message) {
  return h('div', { class: 'notice error', role: 'alert' }, message);
}

// Key/value pairs as a compact definition list.
export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) =>
    h('div', { class: 'fact' }, h('dt', null, k), h('dd', null, v))));
}

// A panel: titled section.
export function panel(title, body, { tools = null, className = '' } = {}) {
  return h('section', { class: `panel ${className}`.trim() },
    h('header', { class: 'panel-head' }, h('h3', null, title), tools), body);
}

// Inline two-step confirmation: the first click on `button` reveals a bar
// asking `question`; "yes" runs action() (async) and shows its error, if any.
export function confirmAction(button, { question, yes, no = 'Keep it', action, id }) {
  const message = h('span', { class: 'confirm-text' });
  const error = h('span', { class: 'confirm-error', role: 'alert' });
  const yesButton = h('button', { type: 'button', class: 'danger', id: `${id}-confirm` }, yes);
  const noButton = h('button', { type: 'button', class: 'ghost', id: `${id}-abort` }, no);
  const bar = h('div', { class: 'confirm', hidden: true, role: 'group' }, message, yesButton, noButton, error);
  const close = () => {
    bar.hidden = true;
    button.hidden = false;
  };
  button.addEventListener('click', () => {
    message.textContent = typeof question === 'function' ? question() : question;
    error.textContent = '';
    bar.hidden = false;
    button.hidden = true;
    yesButton.disabled = false;
    yesButton.focus();
  });
  noButton.addEventListener('click', close);
  yesButton.addEventListener('click', async () => {
    yesButton.disabled = true;
    error.textContent = '';
    try {
      await action();
      close();
    } catch (e) {
      error.textContent = String(e.message || e);
      yesButton.disabled = false;
    }
  });
  return bar;
}
