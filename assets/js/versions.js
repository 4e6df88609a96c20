// Edit, regenerate and fork in the transcript (README: "Edit, branch and versions"). The items are rendered flat
// (each with its `data-seq`, so `#seq-N` links, search hits and paging keep working); after
// every change to the list, `regroup` arranges them by `tree.js` into version groups (an
// edited message's versions, each with the conversation that followed it) and attempt
// groups (the answers of one turn), each paged `‹ n/m ›`, newest first shown. Abandoned
// branches are shown as earlier versions, never dropped. User text stays text.
import { $, el, state, setStatus } from './dom.js';
import { api } from './api.js';
import { tree } from './tree.js';

// Which panel each group shows, by session and group key; absent = the newest.
const chosen = new Map();
const choiceKey = (key) => state.id + ':' + key;

// session.js's stream and open, given by `initVersions` (so this module imports neither).
let hooks = null;

const GROUPS = '.versions, .attempts';

// The item nodes of the transcript in document order, out of any group, and the groups
// gone. What is not an item (the top row, notices of a stream, the live answer) stays put.
export function flatten(t) {
  for (const g of [...t.querySelectorAll(GROUPS)].reverse()) {
    const nodes = [...g.querySelectorAll(':scope > .panel > :not(.panel-note)')];
    g.replaceWith(...nodes);
  }
  t.querySelectorAll('.beyond, .superseded').forEach((n) => n.classList.remove('beyond', 'superseded'));
}

function entry(n) {
  const d = n.dataset;
  const num = (v) => (v === undefined || v === '' ? null : Number(v));
  return { seq: Number(d.seq), kind: d.kind, turn: num(d.turn), attempt: num(d.attempt), editedSeq: num(d.editedSeq), callId: d.callId || null };
}

// Groups the transcript's items (flat or grouped before) and shows the chosen panels.
export function regroup(t) {
  flatten(t);
  const nodes = [...t.children].filter((n) => n.dataset.kind && Number(n.dataset.seq) > 0 && !n.matches('.streaming'));
  if (!nodes.length) return;
  const anchor = document.createComment('items');
  nodes[0].before(anchor);
  const built = tree(nodes.map(entry)).map((x) => build(x, nodes));
  // Whatever else sat between items (only a stream's own nodes) ends up after them.
  anchor.replaceWith(...built);
  markEditable(t);
  show(t);
}

function build(node, nodes) {
  if (node.type === 'item') return nodes[node.at];
  const versions = node.type === 'versions';
  const g = el('div', node.type);
  g.dataset.key = node.key;
  const bar = el('div', 'pager');
  const prev = el('button', 'pager-prev', '‹');
  const next = el('button', 'pager-next', '›');
  prev.type = next.type = 'button';
  const what = versions ? 'version' : 'attempt';
  prev.setAttribute('aria-label', 'Previous ' + what);
  next.setAttribute('aria-label', 'Next ' + what);
  const label = el('span', 'pager-label');
  bar.append(prev, label, next);
  g.append(bar);
  node.panels.forEach((panel, i) => {
    const p = el('div', 'panel');
    const last = i === node.panels.length - 1;
    if (versions && !last) p.append(el('div', 'panel-note', 'Earlier version · the model no longer sees this branch'));
    p.append(...panel.map((x) => build(x, nodes)));
    g.append(p);
  });
  return g;
}

// Shows each group's chosen panel; after a version group showing an earlier version, what
// follows it in the same list belongs to the newest version, so it is hidden meanwhile.
function show(t) {
  for (const g of t.querySelectorAll(GROUPS)) {
    const panels = [...g.querySelectorAll(':scope > .panel')];
    const want = chosen.get(choiceKey(g.dataset.key));
    const at = want === undefined || want >= panels.length ? panels.length - 1 : want;
    panels.forEach((p, i) => { p.hidden = i !== at; });
    g.dataset.shown = at;
    const what = g.matches('.versions') ? 'version' : 'attempt';
    g.querySelector(':scope > .pager .pager-label').textContent = (at + 1) + '/' + panels.length;
    g.querySelector(':scope > .pager .pager-label').title = what + ' ' + (at + 1) + ' of ' + panels.length;
    g.querySelector(':scope > .pager .pager-prev').disabled = at === 0;
    g.querySelector(':scope > .pager .pager-next').disabled = at === panels.length - 1;
    g.classList.toggle('showing-earlier', at < panels.length - 1);
  }
  for (const list of [t, ...t.querySelectorAll('.versions > .panel')]) {
    let hide = false;
    for (const n of list.children) {
      n.classList.toggle('beyond', hide);
      if (n.matches('.versions.showing-earlier')) hide = true;
    }
  }
}

function page(g, step) {
  const panels = g.querySelectorAll(':scope > .panel').length;
  const at = Math.max(0, Math.min(panels - 1, Number(g.dataset.shown) + step));
  if (at === panels - 1) chosen.delete(choiceKey(g.dataset.key)); else chosen.set(choiceKey(g.dataset.key), at);
  show($('transcript'));
}

// Switches every pager on the way to `node` so that it is shown (a link or a search hit
// into an abandoned branch or an older attempt).
export function showNode(node) {
  const t = $('transcript');
  for (let n = node; n && n !== t; n = n.parentElement) {
    for (let s = n.previousElementSibling; s; s = s.previousElementSibling) {
      if (s.matches('.versions')) chosen.delete(choiceKey(s.dataset.key));
    }
    const g = n.parentElement;
    if (n.matches('.panel') && g && g.matches(GROUPS)) {
      const at = [...g.querySelectorAll(':scope > .panel')].indexOf(n);
      chosen.set(choiceKey(g.dataset.key), at);
    }
  }
  show(t);
}

// Every group shows its newest panel again (after a new answer or an edit).
export function showNewest() { for (const k of [...chosen.keys()]) if (k.startsWith(state.id + ':')) chosen.delete(k); }

// A user message can be edited when it is in the current branch (not abandoned) and after
// the newest visible compaction's boundary (SPEC §14).
function markEditable(t) {
  let boundary = 0;
  for (const c of t.querySelectorAll('[data-kind="compaction"]')) {
    if (c.dataset.abandoned !== 'true') boundary = Math.max(boundary, Number(c.dataset.replacesThroughSeq) || 0);
  }
  for (const u of t.querySelectorAll('.msg.user[data-kind]')) {
    const b = u.querySelector('.edit-message');
    if (b) b.hidden = u.dataset.abandoned === 'true' || Number(u.dataset.seq) <= boundary;
  }
  // The newest exchange shows its actions without a hover; an answer can be written again
  // where its question could be edited, and always on the newest turn (a retry).
  const newest = newestTurn(t);
  t.querySelectorAll('.msg.newest').forEach((n) => n.classList.remove('newest'));
  for (const n of t.querySelectorAll('.msg.user[data-kind], .msg.assistant[data-kind]:not(.step)')) {
    const turn = n.matches('.msg.user') ? Number(n.dataset.seq) : Number(n.dataset.turn);
    if (turn === newest) n.classList.add('newest');
    const b = n.querySelector('.regenerate');
    if (b) b.hidden = n.dataset.abandoned === 'true' || (turn !== newest && turn <= boundary);
  }
}

// The seq of the newest question of the current branch (what a retry answers again).
function newestTurn(t) {
  const seqs = [...t.querySelectorAll('.msg.user[data-kind]')]
    .filter((u) => u.dataset.abandoned !== 'true' && Number(u.dataset.seq) > 0).map((u) => Number(u.dataset.seq));
  return seqs.length ? Math.max(...seqs) : null;
}

// "Regenerate" on an answer: the newest turn is answered again (a new attempt, paged with
// the others); an earlier one by sending its question again as an edit (a new version, the
// old one kept and paged), as a regenerate further up means the conversation goes on from
// there.
function regenerate(answer) {
  if (state.streaming) return;
  const t = $('transcript');
  const turn = Number(answer.dataset.turn);
  if (turn === newestTurn(t)) { hooks.retry(); return; }
  const question = t.querySelector('.msg.user[data-seq="' + turn + '"]');
  if (!question) { setStatus('The question of this answer is not loaded; scroll up to it and try again.'); return; }
  hooks.edit(turn, question.querySelector('.user-text').textContent, {
    accepted: () => hideFrom(question),
    refused: (e) => setStatus('Could not regenerate: ' + e.message),
  });
}

// The text area that replaces a user message's text while it is edited.
function startEdit(msg) {
  if (msg.querySelector('.edit-box') || state.streaming) return;
  const text = msg.querySelector('.user-text');
  const box = el('div', 'edit-box');
  const area = el('textarea', 'edit-text');
  area.value = text.textContent;
  area.rows = Math.min(10, Math.max(2, area.value.split('\n').length));
  area.setAttribute('aria-label', 'Edit this message');
  const save = el('button', 'edit-save', 'Save & send');
  const cancel = el('button', 'edit-cancel', 'Cancel');
  save.type = 'submit';
  cancel.type = 'button';
  const error = el('div', 'edit-error');
  error.hidden = true;
  const row = el('div', 'edit-actions');
  row.append(cancel, save);
  box.append(area, error, row);
  text.hidden = true;
  msg.querySelector('.msg-actions').hidden = true;
  text.after(box);
  const close = () => { box.remove(); text.hidden = false; msg.querySelector('.msg-actions').hidden = false; msg.querySelector('.edit-message')?.focus(); };
  cancel.addEventListener('click', close);
  area.addEventListener('keydown', (e) => {
    // Escape cancels the edit (and is not the page's "stop the answer").
    if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); close(); }
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); submit(); }
  });
  const submit = () => {
    const message = area.value;
    if (!message.trim() || state.streaming) return;
    error.hidden = true;
    save.disabled = true;
    hooks.edit(Number(msg.dataset.seq), message, {
      // Accepted: the old version and what followed it make way for the new one.
      accepted: () => { hideFrom(msg); box.remove(); text.hidden = false; msg.querySelector('.msg-actions').hidden = false; },
      // Refused (409 `not_editable`, a turn running…): said in place, the text kept.
      refused: (e) => { save.disabled = false; error.textContent = e.message; error.hidden = false; area.focus(); },
    });
  };
  save.addEventListener('click', submit);
  area.focus();
  area.setSelectionRange(area.value.length, area.value.length);
}

// Hides `node` and everything after it in the transcript, at every level of grouping.
function hideFrom(node) {
  const t = $('transcript');
  for (let n = node; n && n !== t; n = n.parentElement) {
    if (n === node) n.classList.add('superseded');
    for (let s = n.nextElementSibling; s; s = s.nextElementSibling) s.classList.add('superseded');
  }
}

// "Branch from here": a new session with this session's events through the item.
async function fork(item) {
  let through = Number(item.dataset.seq);
  // An interrupted answer sits at its first checkpoint; its later ones come before the
  // next item.
  if (item.matches('.msg.interrupted')) {
    const later = [...$('transcript').querySelectorAll('[data-kind]')].map((n) => Number(n.dataset.seq)).filter((s) => s > through);
    through = later.length ? Math.min(...later) - 1 : undefined;
  }
  try {
    const s = await api('/v1/sessions/' + state.id + '/fork', { method: 'POST', body: through === undefined ? {} : { through_seq: through } });
    await hooks.open(s.id);
  } catch (e) { setStatus('Could not branch: ' + e.message); }
}

// The transcript's clicks on pagers, edit and branch buttons (one listener for all items,
// also those loaded later). `h.edit(seq, text, {accepted, refused})` sends an edit;
// `h.open(id)` opens a session and lists it; `h.retry()` answers the newest turn again.
export function initVersions(h) {
  hooks = h;
  $('transcript').addEventListener('click', (e) => {
    const b = e.target.closest('button');
    if (!b) return;
    if (b.matches('.pager-prev, .pager-next')) page(b.closest(GROUPS), b.matches('.pager-prev') ? -1 : 1);
    else if (b.matches('.edit-message')) startEdit(b.closest('.msg.user'));
    else if (b.matches('.fork-here')) fork(b.closest('[data-kind]'));
    else if (b.matches('.regenerate')) regenerate(b.closest('[data-kind]'));
  });
  // A tap on a message shows its actions (a phone has no hover); another tap hides them.
  $('transcript').addEventListener('click', (e) => {
    if (e.target.closest('button, a, summary, textarea, input, pre')) return;
    const msg = e.target.closest('.msg[data-kind]');
    if (msg && !window.getSelection().toString()) msg.classList.toggle('actions-open');
  });
}

// The "Regenerate" button of an answer.
export function regenerateButton() {
  const b = el('button', 'regenerate', 'Regenerate');
  b.type = 'button';
  b.title = 'Write this answer again (this one is kept: page back to it)';
  return b;
}

// The "Branch from here" button of an item.
export function forkButton() {
  const b = el('button', 'fork-here', 'Branch from here');
  b.type = 'button';
  b.title = 'Start a new session with this conversation up to here';
  return b;
}

// A user message: its text (always text), and Edit / Branch from here.
export function userElement(item) {
  const node = el('div', 'msg user');
  node.append(el('div', 'user-text', item.text));
  if (item.seq > 0) {
    const actions = el('div', 'msg-actions');
    const edit = el('button', 'edit-message', 'Edit');
    edit.type = 'button';
    edit.title = 'Edit this message and send it again';
    actions.append(edit, forkButton());
    node.append(actions);
  }
  return node;
}
