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

// What a hit is, in words (the API's `label`; the same mapping for a server without it).
const LABELS = { user_message: 'message', assistant_turn: 'answer', pending_state: 'interrupted answer', compaction_applied: 'summary', session_titled: 'title' };
function label(h) { return h.label || LABELS[h.kind] || String(h.kind || '').replace(/_/g, ' '); }

// Shown per session before "N more in this session".
const BEST = 3;

function hitLink(h) {
  const a = el('a', 'hit');
  a.href = '/sessions/' + h.session_id + '#seq-' + h.seq;
  a.append(el('span', 'kind', label(h)), highlighted(h.snippet, h.highlights));
  // A hit in a branch an edit left: it opens there (the pager switches to it).
  if (h.abandoned) a.append(' ', el('span', 'kind earlier', 'earlier version'));
  a.addEventListener('click', (e) => { e.preventDefault(); openSession(h.session_id, true, h.seq).catch((x) => setStatus(x.message)); });
  return a;
}

// A hit, then the forks holding a copy of the same event (the API's `also_in`: one hit
// per event, not one per fork), each a link to that fork's copy.
function hitItem(h) {
  const a = hitLink(h);
  if (!h.also_in || !h.also_in.length) return [a];
  const also = el('div', 'hit-also', h.also_in.length === 1 ? 'also in ' : 'also in ' + h.also_in.length + ' forks: ');
  h.also_in.forEach((c, i) => {
    const link = el('a', null, c.title || 'Untitled');
    link.href = '/sessions/' + c.session_id + '#seq-' + h.seq;
    link.addEventListener('click', (e) => { e.preventDefault(); openSession(c.session_id, true, h.seq).catch((x) => setStatus(x.message)); });
    also.append(i ? ', ' : '', link);
  });
  return [a, also];
}

// Hits grouped by session, in the order of each session's best hit.
function renderHits(box, hits) {
  const groups = new Map();
  for (const h of hits) {
    if (!groups.has(h.session_id)) groups.set(h.session_id, []);
    groups.get(h.session_id).push(h);
  }
  for (const [, list] of groups) {
    const g = el('div', 'hit-group');
    const head = el('div', 'hit-head');
    head.append(el('span', 't', list[0].title || 'Untitled'), el('span', 'when', dayLabel(list[0].created_at)));
    g.append(head);
    list.slice(0, BEST).forEach((h) => g.append(...hitItem(h)));
    if (list.length > BEST) {
      const more = el('button', 'hit-more', (list.length - BEST) + ' more in this session');
      more.type = 'button';
      more.addEventListener('click', () => { more.replaceWith(...list.slice(BEST).flatMap(hitItem)); });
      g.append(more);
    }
    box.append(g);
  }
}

let searchTimer = null;
// Answers to an older query that arrive after a newer one's are dropped.
let searchGen = 0;
export function onSearch() {
  clearTimeout(searchTimer);
  const gen = ++searchGen;
  searchTimer = setTimeout(async () => {
    const q = $('search').value.trim();
    const box = $('search-results');
    if (!q) { box.hidden = true; box.textContent = ''; return; }
    try {
      // Best first ranks the newest matches (RANK_WINDOW); newest first reaches them all.
      const order = $('search-recent').checked ? 'recent' : 'relevance';
      const { hits } = await api('/v1/search?' + new URLSearchParams({ q, limit: '50', order }));
      if (gen !== searchGen) return;
      box.textContent = '';
      if (!hits.length) box.append(el('div', 'muted', 'No matches'));
      renderHits(box, hits);
      box.hidden = false;
    } catch (e) { setStatus(e.message); }
  }, 250);
}
