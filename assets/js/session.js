// One session: its transcript, the live answer, send / stop / retry, the context panel,
// the model picker, rename and delete.
import { $, el, state, tokens, setStatus } from './dom.js';
import { api, headers, readFrames } from './api.js';
import { failureNotice, itemElement, markdown } from './render.js';
import { loadSessions } from './sessions.js';
import { providerBanner } from './layout.js';
import { followTitle } from './title.js';
import { renderItems, startPaging, reveal, isOpen, offerRetry, arrange } from './transcript.js';
import { flatten, showNewest } from './versions.js';
import { toolFrames, expireQuestions, lastQuestion } from './tools.js';


// Within this many pixels of the end counts as "at the bottom".
const BOTTOM_SLACK_PX = 80;
function atBottom(t) { return t.scrollHeight - t.scrollTop - t.clientHeight <= BOTTOM_SLACK_PX; }

// The empty screen of a new chat (the first-run banner sits above it when shown).
export function showEmpty() {
  $('transcript').replaceChildren(el('p', 'empty', 'Ask anything. Every word is kept: answers, interruptions, failures and summaries.'));
}

// Bumped whenever another session (or none) is shown: a stream started before writes
// nothing more to the page, and does not touch its buttons.
let view = 0;
export function newView() { view++; return view; }

function setStreaming(on) {
  state.streaming = on;
  $('stop').hidden = !on;
  $('send').disabled = on;
  document.querySelectorAll('#transcript .regenerate').forEach((b) => { b.disabled = on; });
  if (on) document.querySelectorAll('.inline-retry').forEach((b) => b.remove());
}

export function retry() {
  if (state.id && !state.streaming) runStream('/v1/sessions/' + state.id + '/retry', {}, state.id);
}

// Opens session `id` at its newest page, or, with `seq`, at that item (loading the earlier
// pages it needs) highlighted.
export async function openSession(id, push, seq) {
  // Another session: the last one's status line is not about this one.
  if (id !== state.id) setStatus('');
  if (push) history.pushState({ id }, '', '/sessions/' + id + (seq ? '#seq-' + seq : ''));
  if (seq && state.id === id && isOpen(id)) { await reveal(seq); return; }
  const mine = newView();
  state.id = id;
  document.querySelectorAll('.session-link').forEach((a) => a.classList.toggle('active', a.dataset.id === id));
  let data;
  try {
    data = await api('/v1/sessions/' + id);
  } catch (e) {
    if (view !== mine) return;
    // A deleted session, or a stale link: back to a new chat, saying why, rather than a
    // page whose Send would go to a session that is not there.
    state.id = null; state.session = null;
    history.replaceState({}, '', '/');
    showEmpty();
    renderHeader();
    setStreaming(false);
    setStatus('That session could not be opened: ' + e.message);
    return;
  }
  if (state.id !== id || view !== mine) return;
  state.session = data.session;
  renderHeader();
  const t = $('transcript');
  t.textContent = '';
  // The running attempt's checkpoints are its answer so far: one live bubble, which
  // `/live` continues (never a cut-off copy plus a second live one).
  let live = null;
  t.append(renderItems(data.items, (item) => { live = liveBubble(item); return live.box; }));
  // The running answer goes below its attempt's tool calls and questions, where the saved
  // answer will be (and where the frames `/live` replays put new calls: before it).
  if (live) t.append(live.box);
  // Only the running attempt can still wait on a question: the newest one.
  expireQuestions(t, data.session.turn_active ? lastQuestion(t) : null);
  startPaging(id, data.items, data.more);
  t.scrollTop = t.scrollHeight;
  if (seq) await reveal(seq);
  setStreaming(false);
  if (!data.session.turn_active && !live) offerRetry(retry);
  refreshContext();
  // A `streaming` item with no active turn means it ended just now: `/live` still has it.
  if (data.session.turn_active || live) attachLive(id, live);
}

// After an answer ends: the newest page again, in place of what it covers (the live bubble,
// the question shown before it was saved), keeping the earlier pages the reader loaded
// and their place on screen.
async function refreshTail(id) {
  const t = $('transcript');
  const data = await api('/v1/sessions/' + id).catch(() => null);
  if (!data || state.id !== id) return;
  const mine = view;
  const first = data.items.length ? data.items[0].seq : Infinity;
  // Out of their version and attempt groups, to be sorted and grouped again below.
  flatten(t);
  // Replaced: items the new page holds again, and what the stream showed before it was
  // saved (the question at seq 0, the live bubble, error notices: no seq of their own).
  const children = [...t.children].filter((n) => !n.matches('.transcript-top, .empty'));
  const stale = children.filter((n) => !n.dataset.seq || Number(n.dataset.seq) === 0 || Number(n.dataset.seq) >= first);
  const kept = children.length - stale.length;
  // Nothing earlier kept, or another answer already running (only a full open adopts it).
  if (!kept || !isOpen(id) || data.session.turn_active || data.items.some((i) => i.kind === 'streaming')) {
    await openSession(id, false);
    return;
  }
  if (view !== mine) return;
  const follow = atBottom(t);
  state.session = data.session;
  renderHeader();
  stale.forEach((n) => n.remove());
  t.append(renderItems(data.items));
  expireQuestions(t, null);
  arrange(t);
  if (follow) t.scrollTop = t.scrollHeight;
  if (!data.session.turn_active) offerRetry(retry);
  refreshContext();
}

export function renderHeader() {
  const s = state.session;
  $('session-title').textContent = s ? (s.title || 'Untitled') : 'New chat';
  document.title = s && s.title ? s.title + ' · brain' : 'brain';
  $('archive').disabled = !s;
  $('delete').disabled = !s;
  $('archive').textContent = s && s.archived ? 'Unarchive' : 'Archive';
  document.body.classList.toggle('no-session', !s);
  document.querySelectorAll('.session-link').forEach((a) => a.classList.toggle('active', a.dataset.id === state.id));
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
  let done = false;
  const render = () => {
    b.pending = false;
    if (b.text.length < b.floor) return;
    // Follow the answer only while the reader is at the bottom: one who scrolled up to
    // read (or was taken to a search hit) stays where they are.
    const t = $('transcript');
    const follow = atBottom(t);
    const next = markdown(b.text, done);
    box.replaceChild(next, body);
    body = next;
    if (follow) t.scrollTop = t.scrollHeight;
  };
  const schedule = () => { if (!b.pending) { b.pending = true; requestAnimationFrame(render); } };
  b.setReasoning = (r) => { reasoningText.textContent = r; reasoning.hidden = !r; };
  b.addReasoning = (r) => b.setReasoning(reasoningText.textContent + r);
  b.addText = (text) => { b.text += text; schedule(); };
  // The attempt starts over from its first frame: what is shown stays until the rebuilt
  // text is as long, so a reload never shows the answer shrink and grow back.
  b.restart = () => { b.floor = b.text.length; b.text = ''; reasoningText.textContent = ''; };
  b.finish = () => { b.floor = 0; done = true; schedule(); };
  // A step called tools: its text so far stays above its calls, as the saved transcript
  // shows it (a `step` item), and the bubble goes on with the next step's. A step the page
  // shows already (the attempt replayed after a reload) is not shown twice.
  b.endStep = (step, anchor) => {
    const t = $('transcript');
    const shown = t.querySelector('.msg.step[data-turn="' + Number(b.turn) + '"][data-attempt="' + Number(b.attempt) + '"][data-step="' + Number(step) + '"]');
    if (!shown && (b.text.trim() || reasoningText.textContent)) {
      const node = itemElement({ kind: 'step', turn: b.turn, attempt: b.attempt, step, text: b.text, reasoning: reasoningText.textContent, seq: 0 });
      t.insertBefore(node, anchor && anchor.isConnected ? anchor : box);
    }
    b.text = ''; b.floor = 0; reasoningText.textContent = ''; reasoning.hidden = true; schedule();
  };
  const shown = item ? item.last_step || item : null;
  b.setReasoning(shown && shown.reasoning ? shown.reasoning : '');
  if (item) { box.dataset.seq = item.seq; b.text = shown.text || ''; render(); }
  return b;
}

// Where a step's text goes when its call `f` arrives: before the question or the row of
// that call if the page shows one already (a replay), else just above the live answer.
function stepAnchor(t, turn, attempt, f) {
  const mine = (n) => n.dataset.callId === f.call_id && Number(n.dataset.turn) === turn && Number(n.dataset.attempt) === attempt;
  return [...t.querySelectorAll('.permission, .tool')].find(mine) || null;
}

// Follows one attempt's frames into a live bubble: `adopted` (the `streaming` item shown on
// load) when the frames are that attempt's, else a new one at the bottom of the transcript.
function streamInto(adopted, mine) {
  const t = $('transcript');
  let bubble = null;
  const tools = toolFrames(t, state.id, (node) => { if (bubble && bubble.box.isConnected) t.insertBefore(node, bubble.box); else t.append(node); });
  return (f) => {
    if (view !== mine) return;
    if (f.type === 'tool_call' && bubble) bubble.endStep(f.step, stepAnchor(t, bubble.turn, bubble.attempt, f));
    if (tools(f) && f.type !== 'turn') return;
    if (f.type === 'turn') {
      if (adopted && adopted.turn === f.turn && adopted.attempt === f.attempt) { bubble = adopted; bubble.restart(); }
      else { bubble = liveBubble(); t.append(bubble.box); }
      bubble.turn = f.turn; bubble.attempt = f.attempt;
    }
    else if (f.type === 'status') setStatus({ compacting: 'Compacting earlier messages…', waiting: 'Waiting for the model…', streaming: 'Answering…', tool: 'Running a tool…', permission: 'Waiting for your answer…' }[f.phase] || '');
    else if (f.type === 'chunk') { if (bubble) bubble.addText(f.text); }
    else if (f.type === 'reasoning') { if (bubble) bubble.addReasoning(f.text); }
    else if (f.type === 'error') t.append(failureNotice(f.code, f.message, !!(bubble && bubble.text)));
    else if (f.type === 'end') {
      if (bubble) bubble.finish();
      setStatus(f.status === 'completed' ? '' : 'The answer ' + (f.status === 'interrupted' ? 'was interrupted' : 'failed') + '.');
    }
  };
}

// `opts.accepted()` runs once the server took the request; `opts.refused(error)` when it did
// not (an HTTP error before any frame): then nothing on the page changes but what it does.
export async function runStream(path, body, id, adopted, opts = {}) {
  const mine = view;
  setStreaming(true);
  // A new message, answer or edit (not a re-attach): every pager shows the newest again.
  if (body) showNewest();
  let accepted = false;
  try {
    const res = await fetch(path, { method: body ? 'POST' : 'GET', headers: headers(!!body), body: body ? JSON.stringify(body) : undefined });
    if (res.ok) { accepted = true; if (opts.accepted) opts.accepted(); }
    await readFrames(res, streamInto(adopted, mine));
  } catch (e) {
    if (!accepted && opts.refused) {
      if (view === mine) { setStreaming(false); opts.refused(e); }
      return;
    }
    if (view === mine) setStatus(e.message);
  }
  loadSessions(true);
  // The reader went to another session meanwhile: this stream's end is not that page's.
  if (view !== mine) return;
  setStreaming(false);
  if (state.id === id) await refreshTail(id);
  // The automatic title is written after the answer, in the background.
  if (state.id === id && state.session && !state.session.title) {
    followTitle(id, (s) => { state.session = s; renderHeader(); loadSessions(true); });
  }
}

function attachLive(id, adopted) { runStream('/v1/sessions/' + id + '/live', null, id, adopted); }

// Sends an edit of user message `seq` (SPEC §14): the new version and its answer stream in
// below, like a new message.
export function sendEdit(seq, text, opts) {
  if (!state.id || state.streaming) return;
  setStatus('');
  const id = state.id;
  const model = $('model').value || undefined;
  runStream('/v1/sessions/' + id + '/messages', { message: text, edit_of: seq, model }, id, null, {
    accepted: () => {
      opts.accepted();
      const t = $('transcript');
      t.append(itemElement({ kind: 'user', text, seq: 0 }));
      t.scrollTop = t.scrollHeight;
    },
    refused: opts.refused,
  });
}

export async function send(event) {
  if (event) event.preventDefault();
  const text = $('message').value;
  if (!text.trim() || state.streaming) return;
  setStatus('');
  try {
    if (!state.id) {
      const s = await api('/v1/sessions', { method: 'POST', body: {} });
      state.id = s.id;
      history.pushState({ id: s.id }, '', '/sessions/' + s.id);
      state.session = s;
      renderHeader();
      $('transcript').textContent = '';
      // The new chat is in the list, highlighted, while its first answer streams.
      loadSessions(true);
    }
  } catch (e) { setStatus(e.message); return; }
  $('message').value = '';
  const t = $('transcript');
  t.querySelector(':scope > .empty')?.remove();
  t.append(itemElement({ kind: 'user', text, seq: 0 }));
  // The one who just sent is reading the end.
  t.scrollTop = t.scrollHeight;
  const model = $('model').value || undefined;
  runStream('/v1/sessions/' + state.id + '/messages', { message: text, model }, state.id);
}

export async function refreshContext() {
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

export async function loadModels() {
  try {
    const m = await api('/v1/models');
    providerBanner(m, loadModels);
    const sel = $('model');
    sel.textContent = '';
    for (const x of m.models) {
      const o = el('option', null, x.id + ' (' + tokens(x.window) + ')');
      o.value = x.id;
      if (x.id === m.chat_model) o.selected = true;
      sel.append(o);
    }
    if (!m.models.length) sel.append(el('option', null, 'no models'));
  } catch (e) { setStatus(e.message); }
}

export function startRename() {
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
export async function onDelete() {
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
    showEmpty();
    renderHeader();
    loadSessions(true);
  } catch (e) { setStatus(e.message); }
}

