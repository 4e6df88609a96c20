// brain's web UI: plain JavaScript, no build step. Message text is untrusted: user text
// is shown as text; model text is rendered by marked (raw HTML escaped, images turned
// into links) and sanitised by DOMPurify before it reaches the page.
'use strict';

const $ = (id) => document.getElementById(id);
const state = { id: null, session: null, cursor: null, more: true, loading: false, streaming: false, models: null };

// ---- API -------------------------------------------------------------------------

function headers(json) {
  const h = {};
  const token = localStorage.getItem('brain.token');
  if (token) h.Authorization = 'Bearer ' + token;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

async function api(path, opts = {}) {
  const res = await fetch(path, {
    method: opts.method || 'GET',
    headers: headers(opts.body !== undefined),
    body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
  });
  if (res.status === 401) { askToken(); throw new Error('an API token is needed'); }
  if (res.status === 204) return null;
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data.message || ('HTTP ' + res.status));
  return data;
}

// Reads an SSE response (fetch, so the bearer header can be sent) frame by frame.
async function readFrames(res, onFrame) {
  if (res.status === 401) { askToken(); return; }
  if (!res.ok) {
    const data = await res.json().catch(() => ({}));
    throw new Error(data.message || ('HTTP ' + res.status));
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
      if (data) { try { onFrame(JSON.parse(data)); } catch (e) { console.error(e); } }
    }
  }
}

function askToken() {
  $('token-gate').hidden = false;
  $('token').focus();
}

// ---- Rendering ----------------------------------------------------------------------

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

let markedReady = false;
function setupMarkdown() {
  if (markedReady || !window.marked || !window.DOMPurify) return;
  const escape = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
  window.marked.use({
    gfm: true,
    breaks: true,
    renderer: {
      // Raw HTML in a message is text, never markup.
      html(token) { return escape(token.text || token.raw || ''); },
      // Images are links, never fetched.
      image(token) { return '<a href="' + escape(token.href || '') + '">' + escape(token.text || token.href || 'image') + '</a>'; },
    },
  });
  window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A') { node.setAttribute('target', '_blank'); node.setAttribute('rel', 'noopener noreferrer nofollow'); }
  });
  markedReady = true;
}

function markdown(text) {
  const box = el('div', 'md');
  setupMarkdown();
  if (!markedReady) { box.textContent = text; box.style.whiteSpace = 'pre-wrap'; return box; }
  const html = window.marked.parse(text || '');
  box.innerHTML = window.DOMPurify.sanitize(html, {
    ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
    FORBID_TAGS: ['img', 'style', 'iframe', 'form', 'input', 'button', 'svg', 'math', 'video', 'audio'],
    FORBID_ATTR: ['style', 'srcset'],
  });
  return box;
}

function tokens(n) { return (n || 0).toLocaleString(); }

function itemElement(item) {
  let node;
  switch (item.kind) {
    case 'user':
      node = el('div', 'msg user', item.text);
      break;
    case 'assistant': {
      node = el('div', 'msg assistant');
      if (item.reasoning) {
        const d = el('details', 'reasoning');
        d.append(el('summary', null, 'Reasoning'), el('div', null, item.reasoning));
        node.append(d);
      }
      node.append(markdown(item.text));
      const u = item.usage || {};
      node.append(el('div', 'meta', [item.model, tokens(u.input_tokens) + ' in', tokens(u.cache_read_tokens) + ' cached',
        tokens(u.output_tokens) + ' out', (item.duration_ms / 1000).toFixed(1) + ' s',
        item.attempt > 1 ? 'attempt ' + item.attempt : null, item.finish_reason === 'length' ? 'cut at the token limit' : null]
        .filter(Boolean).join(' · ')));
      break;
    }
    case 'interrupted':
      node = el('div', 'msg assistant interrupted');
      node.append(el('span', 'badge', 'interrupted'), markdown(item.text));
      node.append(el('div', 'meta', 'The answer was cut off here' + (item.attempt > 1 ? ' (attempt ' + item.attempt + ')' : '') + '. Send a message to continue, or retry.'));
      break;
    case 'error':
      node = el('div', 'notice error', 'No answer: ' + item.code + ' — ' + item.message);
      break;
    case 'compaction': {
      // An extractive digest stands in when no model could summarise: say so on the divider.
      const extractive = item.method === 'extractive';
      node = el('details', extractive ? 'compaction extractive' : 'compaction');
      const head = el('summary', null, (extractive ? 'Earlier messages condensed · ' : 'Earlier messages summarised · ')
        + tokens(item.tokens_before) + ' → ' + tokens(item.tokens_after) + ' tokens');
      if (extractive) {
        const badge = el('span', 'badge', 'extractive digest');
        badge.title = 'No summary could be written; this keeps the first sentence of each earlier message.';
        head.append(' ', badge);
      }
      node.append(head, markdown(item.summary));
      break;
    }
    case 'title':
      node = el('div', 'notice', 'Renamed to “' + item.title + '”' + (item.by === 'auto' ? ' (automatic)' : ''));
      break;
    case 'tool': {
      node = el('details', 'notice tool');
      node.append(el('summary', null, 'Tool ' + item.name + ' · ' + item.status), el('pre', null, JSON.stringify(item.args, null, 2)));
      break;
    }
    default:
      node = el('div', 'notice unreadable', 'An event this version cannot show (' + (item.event_kind || item.kind) + ')');
  }
  node.dataset.seq = item.seq;
  return node;
}

// ---- Sessions list ---------------------------------------------------------------------

function dayLabel(iso) {
  const d = new Date(iso);
  const today = new Date();
  const diff = Math.floor((new Date(today.toDateString()) - new Date(d.toDateString())) / 86400000);
  if (diff === 0) return 'Today';
  if (diff === 1) return 'Yesterday';
  return d.toLocaleDateString(undefined, { year: 'numeric', month: 'short', day: 'numeric' });
}

async function loadSessions(reset) {
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
function onSearch() {
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

// The snippet as text nodes with <mark> around the highlight ranges (in characters).
function highlighted(snippet, ranges) {
  const chars = Array.from(snippet);
  const span = el('span');
  let at = 0;
  for (const [from, to] of ranges) {
    span.append(document.createTextNode(chars.slice(at, from).join('')), el('mark', null, chars.slice(from, to).join('')));
    at = to;
  }
  span.append(document.createTextNode(chars.slice(at).join('')));
  return span;
}

// ---- A session ---------------------------------------------------------------------------

function setStatus(text) { $('status').textContent = text || ''; }

function setStreaming(on) {
  state.streaming = on;
  $('stop').hidden = !on;
  $('send').disabled = on;
  $('retry').disabled = on || !state.id;
}

async function openSession(id, push, seq) {
  state.id = id;
  if (push) history.pushState({ id }, '', '/sessions/' + id);
  document.querySelectorAll('.session-link').forEach((a) => a.classList.toggle('active', a.dataset.id === id));
  const data = await api('/v1/sessions/' + id + '?limit=1000');
  state.session = data.session;
  renderHeader();
  const t = $('transcript');
  t.textContent = '';
  // The running attempt's checkpoints are its answer so far: one live bubble, which
  // `/live` continues (never a cut-off copy plus a second live one).
  let live = null;
  for (const item of data.items) {
    if (item.kind === 'streaming') { live = liveBubble(item); t.append(live.box); }
    else t.append(itemElement(item));
  }
  const target = seq && t.querySelector('[data-seq="' + seq + '"]');
  if (target) { target.scrollIntoView({ block: 'center' }); target.classList.add('found'); } else t.scrollTop = t.scrollHeight;
  setStreaming(false);
  refreshContext();
  // A `streaming` item with no active turn means it ended just now: `/live` still has it.
  if (data.session.turn_active || live) attachLive(id, live);
}

function renderHeader() {
  const s = state.session;
  $('session-title').textContent = s ? (s.title || 'Untitled') : 'New chat';
  document.title = s && s.title ? s.title + ' · brain' : 'brain';
  $('archive').disabled = !s;
  $('delete').disabled = !s;
  $('retry').disabled = !s || state.streaming;
  $('archive').textContent = s && s.archived ? 'Unarchive' : 'Archive';
}

// The bubble of an answer being streamed, at the bottom of the transcript. On load it is
// built from the `streaming` item (the running attempt's checkpoints); `/live` then replays
// the attempt from its first frame, so the bubble is rebuilt from the frames rather than
// appended to, and keeps showing the checkpoint text until the replay has caught up with it.
function liveBubble(item) {
  const box = el('div', 'msg assistant streaming');
  const reasoning = el('details', 'reasoning');
  const reasoningText = el('div');
  reasoning.append(el('summary', null, 'Reasoning'), reasoningText);
  let body = el('div', 'md');
  box.append(reasoning, body);
  const b = { box, turn: item ? item.turn : null, attempt: item ? item.attempt : null, text: '', floor: 0, pending: false };
  const render = () => {
    b.pending = false;
    if (b.text.length < b.floor) return;
    const next = markdown(b.text);
    box.replaceChild(next, body);
    body = next;
    const t = $('transcript');
    t.scrollTop = t.scrollHeight;
  };
  const schedule = () => { if (!b.pending) { b.pending = true; requestAnimationFrame(render); } };
  b.setReasoning = (r) => { reasoningText.textContent = r; reasoning.hidden = !r; };
  b.addReasoning = (r) => b.setReasoning(reasoningText.textContent + r);
  b.addText = (text) => { b.text += text; schedule(); };
  // The attempt starts over from its first frame: what is shown stays until the rebuilt
  // text is as long, so a reload never shows the answer shrink and grow back.
  b.restart = () => { b.floor = b.text.length; b.text = ''; reasoningText.textContent = ''; };
  b.finish = () => { b.floor = 0; schedule(); };
  b.setReasoning(item && item.reasoning ? item.reasoning : '');
  if (item) { box.dataset.seq = item.seq; b.text = item.text || ''; render(); }
  return b;
}

// Follows one attempt's frames into a live bubble: `adopted` (the `streaming` item shown on
// load) when the frames are that attempt's, else a new one at the bottom of the transcript.
function streamInto(adopted) {
  const t = $('transcript');
  let bubble = null;
  return (f) => {
    if (f.type === 'turn') {
      if (adopted && adopted.turn === f.turn && adopted.attempt === f.attempt) { bubble = adopted; bubble.restart(); }
      else { bubble = liveBubble(); t.append(bubble.box); }
    }
    else if (f.type === 'status') setStatus({ compacting: 'Compacting earlier messages…', waiting: 'Waiting for the model…', streaming: 'Answering…' }[f.phase] || '');
    else if (f.type === 'chunk') { if (bubble) bubble.addText(f.text); }
    else if (f.type === 'reasoning') { if (bubble) bubble.addReasoning(f.text); }
    else if (f.type === 'error') t.append(el('div', 'notice error', f.code + ': ' + f.message));
    else if (f.type === 'end') {
      if (bubble) bubble.finish();
      setStatus(f.status === 'completed' ? '' : 'The answer ' + (f.status === 'interrupted' ? 'was interrupted' : 'failed') + '.');
    }
  };
}

async function runStream(path, body, id, adopted) {
  setStreaming(true);
  try {
    const res = await fetch(path, { method: body ? 'POST' : 'GET', headers: headers(!!body), body: body ? JSON.stringify(body) : undefined });
    await readFrames(res, streamInto(adopted));
  } catch (e) { setStatus(e.message); }
  setStreaming(false);
  if (state.id === id) await openSession(id, false);
  loadSessions(true);
}

function attachLive(id, adopted) { runStream('/v1/sessions/' + id + '/live', null, id, adopted); }

async function send(event) {
  if (event) event.preventDefault();
  const text = $('message').value;
  if (!text.trim() || state.streaming) return;
  try {
    if (!state.id) {
      const s = await api('/v1/sessions', { method: 'POST', body: {} });
      state.id = s.id;
      history.pushState({ id: s.id }, '', '/sessions/' + s.id);
      state.session = s;
      renderHeader();
      $('transcript').textContent = '';
    }
  } catch (e) { setStatus(e.message); return; }
  $('message').value = '';
  $('transcript').append(itemElement({ kind: 'user', text, seq: 0 }));
  const model = $('model').value || undefined;
  runStream('/v1/sessions/' + state.id + '/messages', { message: text, model }, state.id);
}

async function refreshContext() {
  const panel = $('context-body');
  if (!state.id || $('context-panel').hidden) return;
  try {
    const [c, u] = await Promise.all([api('/v1/sessions/' + state.id + '/context'), api('/v1/usage?session_id=' + state.id)]);
    panel.textContent = '';
    const pct = (n) => Math.min(100, (100 * n) / Math.max(1, c.window)) + '%';
    const bar = el('div', 'bar');
    const fill = el('div', 'fill'); fill.style.width = pct(c.tokens);
    const trig = el('div', 'trigger'); trig.style.left = pct(c.trigger_tokens);
    bar.append(fill, trig);
    panel.append(el('div', null, tokens(c.tokens) + ' of ' + tokens(c.window) + ' tokens (' + (c.model || 'no model') + ')'), bar,
      el('div', 'muted', 'Compaction at ' + tokens(c.trigger_tokens) + ' tokens · ' + c.messages.length + ' messages'));
    const prompt = u.input_tokens + u.cache_read_tokens;
    const kv = el('div', 'kv');
    for (const [k, v] of [['Provider calls', u.calls], ['Input tokens', u.input_tokens], ['Cache reads', u.cache_read_tokens],
      ['Output tokens', u.output_tokens], ['Served from cache', prompt ? Math.round((100 * u.cache_read_tokens) / prompt) + '%' : '—']]) {
      kv.append(el('span', 'muted', k), el('span', null, typeof v === 'number' ? tokens(v) : v));
    }
    panel.append(el('h2', null, 'Usage'), kv);
  } catch (e) { panel.textContent = e.message; }
}

async function loadModels() {
  try {
    const m = await api('/v1/models');
    const sel = $('model');
    sel.textContent = '';
    for (const x of m.models) {
      const o = el('option', null, x.id + ' (' + tokens(x.window) + ')');
      o.value = x.id;
      if (x.id === m.chat_model) o.selected = true;
      sel.append(o);
    }
    if (!m.models.length) sel.append(el('option', null, 'no models: is the provider running?'));
  } catch (e) { setStatus(e.message); }
}

function startRename() {
  if (!state.session) return;
  const h = $('session-title');
  const input = el('input', 'rename');
  input.value = state.session.title || '';
  h.replaceWith(input);
  input.focus();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    input.replaceWith(h);
    if (save && input.value.trim() && input.value.trim() !== state.session.title) {
      try { state.session = await api('/v1/sessions/' + state.id, { method: 'PATCH', body: { title: input.value.trim() } }); loadSessions(true); } catch (e) { setStatus(e.message); }
    }
    renderHeader();
  };
  input.addEventListener('keydown', (e) => { if (e.key === 'Enter') finish(true); if (e.key === 'Escape') finish(false); });
  input.addEventListener('blur', () => finish(true));
}

let deleteArmed = null;
async function onDelete() {
  if (!state.id) return;
  if (!deleteArmed) {
    $('delete').textContent = 'Really delete?';
    deleteArmed = setTimeout(() => { deleteArmed = null; $('delete').textContent = 'Delete'; }, 4000);
    return;
  }
  clearTimeout(deleteArmed); deleteArmed = null; $('delete').textContent = 'Delete';
  try {
    await api('/v1/sessions/' + state.id, { method: 'DELETE' });
    state.id = null; state.session = null;
    history.pushState({}, '', '/');
    $('transcript').textContent = '';
    renderHeader();
    loadSessions(true);
  } catch (e) { setStatus(e.message); }
}

function init() {
  $('composer').addEventListener('submit', send);
  $('message').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && state.streaming && state.id) api('/v1/sessions/' + state.id + '/stop', { method: 'POST' }).catch(() => {}); });
  $('stop').addEventListener('click', () => api('/v1/sessions/' + state.id + '/stop', { method: 'POST' }).catch((e) => setStatus(e.message)));
  $('retry').addEventListener('click', () => state.id && runStream('/v1/sessions/' + state.id + '/retry', {}, state.id));
  $('new-chat').addEventListener('click', () => { state.id = null; state.session = null; history.pushState({}, '', '/'); $('transcript').textContent = ''; renderHeader(); $('message').focus(); });
  $('search').addEventListener('input', onSearch);
  $('show-archived').addEventListener('change', () => loadSessions(true));
  $('session-title').addEventListener('click', startRename);
  $('archive').addEventListener('click', async () => {
    try { state.session = await api('/v1/sessions/' + state.id, { method: 'PATCH', body: { archived: !state.session.archived } }); renderHeader(); loadSessions(true); } catch (e) { setStatus(e.message); }
  });
  $('delete').addEventListener('click', onDelete);
  $('toggle-context').addEventListener('click', () => { $('context-panel').hidden = !$('context-panel').hidden; refreshContext(); });
  $('token-form').addEventListener('submit', (e) => { e.preventDefault(); localStorage.setItem('brain.token', $('token').value.trim()); $('token-gate').hidden = true; boot(); });
  new IntersectionObserver((entries) => { if (entries.some((x) => x.isIntersecting)) loadSessions(false); }).observe($('list-sentinel'));
  window.addEventListener('popstate', () => route());
  boot();
}

function route() {
  const m = location.pathname.match(/^\/sessions\/([0-9a-fA-F-]{36})$/);
  if (m) openSession(m[1].toLowerCase(), false).catch((e) => setStatus(e.message));
}

function boot() {
  loadSessions(true);
  loadModels();
  route();
}

init();
