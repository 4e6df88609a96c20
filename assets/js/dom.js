// Small DOM helpers and the page's shared state.
export const $ = (id) => document.getElementById(id);
export const state = { id: null, session: null, cursor: null, more: true, loading: false, streaming: false, models: null };

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

export function tokens(n) { return (n || 0).toLocaleString(); }

export function setStatus(text) { $('status').textContent = text || ''; }
