// brain's web UI: plain JavaScript modules, no build step. This entry wires the page's
// controls and routes `/sessions/{id}`.
import { $, state, setStatus } from './js/dom.js';
import { api } from './js/api.js';
import { loadSessions, onSearch } from './js/sessions.js';
import { initLayout, contextToggled } from './js/layout.js';
import { openSession, renderHeader, retry, send, sendEdit, refreshContext, loadModels, startRename, onDelete, showEmpty } from './js/session.js';
import { initVersions } from './js/versions.js';
import { initImport } from './js/import.js';

// On a touch screen there is no Shift+Enter: Enter makes a new line and Send sends.
const touch = window.matchMedia('(pointer: coarse)');

function init() {
  initLayout();
  initImport();
  // A fork opens at once and joins the list.
  initVersions({ edit: sendEdit, retry, open: async (id) => { await openSession(id, true); loadSessions(true); } });
  if (touch.matches) $('message').placeholder = 'Message brain…';
  $('composer').addEventListener('submit', send);
  $('message').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !touch.matches) { e.preventDefault(); send(); }
  });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && state.streaming && state.id) api('/v1/sessions/' + state.id + '/stop', { method: 'POST' }).catch(() => {}); });
  $('stop').addEventListener('click', () => api('/v1/sessions/' + state.id + '/stop', { method: 'POST' }).catch((e) => setStatus(e.message)));
  $('new-chat').addEventListener('click', () => { setStatus(''); state.id = null; state.session = null; history.pushState({}, '', '/'); showEmpty(); renderHeader(); $('message').focus(); });
  $('search').addEventListener('input', onSearch);
  $('search-recent').addEventListener('change', onSearch);
  $('show-archived').addEventListener('change', () => loadSessions(true));
  $('session-title').addEventListener('click', startRename);
  $('archive').addEventListener('click', async () => {
    try { state.session = await api('/v1/sessions/' + state.id, { method: 'PATCH', body: { archived: !state.session.archived } }); renderHeader(); loadSessions(true); } catch (e) { setStatus(e.message); }
  });
  $('delete').addEventListener('click', onDelete);
  $('toggle-context').addEventListener('click', () => { $('context-panel').hidden = !$('context-panel').hidden; contextToggled(); refreshContext(); });
  $('token-form').addEventListener('submit', (e) => { e.preventDefault(); localStorage.setItem('brain.token', $('token').value.trim()); $('token-gate').hidden = true; boot(); });
  new IntersectionObserver((entries) => { if (entries.some((x) => x.isIntersecting)) loadSessions(false); }).observe($('list-sentinel'));
  window.addEventListener('popstate', () => route());
  // A `#seq-N` typed or followed on the open session shows that item (loading earlier pages).
  window.addEventListener('hashchange', () => { if (/^#seq-\d+$/.test(location.hash)) route(); });
  boot();
}

function route() {
  const m = location.pathname.match(/^\/sessions\/([0-9a-fA-F-]{36})$/);
  const at = location.hash.match(/^#seq-(\d+)$/);
  if (m) openSession(m[1].toLowerCase(), false, at ? Number(at[1]) : undefined).catch((e) => setStatus(e.message));
}

function boot() {
  loadSessions(true);
  loadModels();
  route();
}

init();
