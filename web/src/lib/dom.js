// DOM building without HTML strings. Every piece of text goes in through
// text nodes or textContent, so data from the server (job names, metric names,
// reasons, log text) can never become markup. There is deliberately no way to
// set innerHTML or a style attribute through h().

const FORBIDDEN_PROPS = new Set(['innerHTML', 'outerHTML', 'style', 'srcdoc']);

// h('a', {href: '#/jobs/1', class: 'link'}, 'job ', name) -> <a>job NAME</a>.
// props: class, dataset {k: v}, text, on<event> handlers, title/href/... as
// attributes; null/undefined/false values are skipped. children: strings,
// numbers, nodes or (nested) arrays of them; null/false are skipped.
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value == null || value === false) continue;
      if (FORBIDDEN_PROPS.has(key) || key.toLowerCase().startsWith('on') && typeof value !== 'function') {
        throw new Error(`h(): property ${key} is not allowed`);
      }
      if (key === 'class') el.className = value;
      else if (key === 'text') el.textContent = String(value);
      else if (key === 'dataset') Object.assign(el.dataset, value);
      else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
      else if (key === 'value' && 'value' in el) el.value = value;
      else el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  appendChildren(el, children);
  return el;
}

export function appendChildren(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Replaces every child of el.
export function setChildren(el, ...children) {
  el.replaceChildren();
  return appendChildren(el, children);
}

// Sets textContent only when it changed, so live updates do not disturb a
// selection the user is making elsewhere on the page.
export function setText(el, text) {
  const s = String(text);
  if (el.textContent !== s) el.textContent = s;
}

// A table whose body is rebuilt from rows; head is a list of column titles
// (a string, or [title, className]).
export function table(head, className = '') {
  const tbody = h('tbody');
  const el = h('table', { class: `table ${className}`.trim() },
    h('thead', null, h('tr', null, head.map((c) => {
      const [title, cls] = Array.isArray(c) ? c : [c, null];
      return h('th', { class: cls }, title);
    }))),
    tbody);
  return { el, tbody, wrap: h('div', { class: 'table-wrap' }, el) };
}
