// The session list (day groups, infinite scroll) and search across sessions.
import { $, el, state, setStatus } from './dom.js';
import { api } from './api.js';
import { highlighted } from './render.js';
import { openSession } from './session.js';

function dayLabel(iso) {
  const d = new Date(iso);
  const today = new Date();
  const diff = Math.floor((new Date(today.toDateString()) - new Date(d.toDateString())) / 86400000);
  if (diff === 0) return 'Today';
  if (diff === 1) return 'Yesterday';
  return d.toLocaleDateString(undefined, { year: 'numeric', month: 'short', day: 'numeric' });
}

export async function loadSessions(reset) {
  if (state.loading || (!reset && !state.more)) return;
  state.loading = true;
  try {
    if (reset) { state.cursor = null; state.more = true; $('session-list').textContent = ''; }
    const q = new URLSearchParams({ limit: '50', archived: $('show-archived').checked ? 'include' : 'exclude' });
    if (state.cursor) { q.set('before', state.cursor.before); q.set('before_id', state.cursor.before_id); }
    const page = await api('/v1/sessions?' + q);
    const list = $('session-list');
    for (const s of page.sessions) {
      const label = dayLabel(s.updated_at);
      if (list.dataset.lastDay !== label || reset) { list.append(el('div', 'day', label)); list.dataset.lastDay = label; reset = false; }
      const a = el('a', 'session-link' + (s.id === state.id ? ' active' : ''), s.title || 'Untitled');
      a.href = '/sessions/' + s.id;
      a.dataset.id = s.id;
      if (s.archived) a.append(el('span', 'archived', 'archived'));
      if (s.turn_active) a.append(el('span', 'live', '●'));
      a.addEventListener('click', (e) => { e.preventDefault(); openSession(s.id, true); });
      list.append(a);
    }
    state.cursor = page.next;
    state.more = !!page.next;
  } catch (e) { setStatus(e.message); } finally { state.loading = false; }
}

let searchTimer = null;
export function onSearch() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(async () => {
    const q = $('search').value.trim();
    const box = $('search-results');
    if (!q) { box.hidden = true; box.textContent = ''; return; }
    try {
      const { hits } = await api('/v1/search?' + new URLSearchParams({ q, limit: '20' }));
      box.textContent = '';
      if (!hits.length) box.append(el('div', 'muted', 'No matches'));
      for (const h of hits) {
        const a = el('a', 'hit');
        a.href = '/sessions/' + h.session_id;
        a.append(el('span', 't', h.title || 'Untitled'), highlighted(h.snippet, h.highlights));
        a.addEventListener('click', (e) => { e.preventDefault(); openSession(h.session_id, true, h.seq); });
        box.append(a);
      }
      box.hidden = false;
    } catch (e) { setStatus(e.message); }
  }, 250);
}

