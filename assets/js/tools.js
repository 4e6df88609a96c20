// Tool calls and permission questions in the transcript (SPEC §11, §13): each call inline
// where it happened (name, short arguments, status in words, time; the full arguments and
// the result preview open on click), and a waiting question with Allow / Always / Deny that
// survives a reload. Arguments, previews and tool names come from the model or the tool:
// untrusted, so always text (textContent), never markup.
import { el } from './dom.js';
import { api } from './api.js';

// Characters of the arguments shown on the call's row; the rest opens on click.
const SHORT_ARGS_CHARS = 60;

const STATUS_WORDS = {
  ok: 'ok', error: 'error', denied: 'denied', timeout: 'timed out', cancelled: 'cancelled',
  running: 'running…', asking: 'waiting for your answer',
};

// The arguments on one line (compact JSON when they parse), cut with an ellipsis.
export function shortArgs(args) {
  let s = args || '';
  try { s = JSON.stringify(JSON.parse(s)); } catch { /* shown as sent */ }
  const chars = Array.from(s);
  return chars.length > SHORT_ARGS_CHARS ? chars.slice(0, SHORT_ARGS_CHARS).join('') + '…' : s;
}

function fullArgs(args) {
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch { return args || ''; }
}

function duration(ms) { return ms < 1000 ? ms + ' ms' : (ms / 1000).toFixed(1) + ' s'; }

// Identifies a call across the transcript item and the frames replayed by `/live`.
function callKey(turn, attempt, step, callId) { return [turn, attempt, step, callId].join('/'); }

// One call: `call` is a transcript `tool` item, or a `tool_call` frame with its turn and
// attempt (status `running` until its `tool_result`).
export function toolElement(call) {
  const node = el('details', 'tool');
  node.dataset.callId = call.call_id;
  node.dataset.key = callKey(call.turn, call.attempt, call.step, call.call_id);
  const summary = el('summary');
  summary.append(el('span', 'tool-label', 'Tool'), el('code', 'tool-name', call.name), el('code', 'tool-args', shortArgs(call.args)),
    el('span', 'tool-status'), el('span', 'tool-time'));
  const args = el('pre', 'tool-full-args', fullArgs(call.args));
  node.append(summary, el('div', 'tool-heading', 'Arguments'), args);
  setResult(node, call);
  return node;
}

// Shows how a call ended (or that it runs / waits): status in words, time, and the result
// preview or the error under the arguments.
export function setResult(node, r) {
  const status = r.status || 'running';
  node.dataset.status = status;
  const s = node.querySelector('.tool-status');
  s.textContent = STATUS_WORDS[status] || status;
  s.className = 'tool-status status-' + status;
  node.querySelector('.tool-time').textContent = r.duration_ms !== undefined && !['running', 'asking'].includes(status) ? duration(r.duration_ms) : '';
  node.querySelectorAll('.tool-result, .tool-result-heading').forEach((n) => n.remove());
  const preview = r.result_digest ? r.result_digest.preview : r.preview;
  if (preview) {
    const bytes = r.result_digest && r.result_digest.bytes > preview.length ? ' (first ' + preview.length + ' characters of ' + r.result_digest.bytes.toLocaleString() + ' bytes)' : '';
    node.append(el('div', 'tool-heading tool-result-heading', 'Result' + bytes), el('pre', 'tool-result', preview));
  } else if (r.error) {
    node.append(el('div', 'tool-heading tool-result-heading', 'Error'), el('pre', 'tool-result error', r.error));
  }
}

// Who decided, in words.
function decisionWords(decision, by, remember) {
  if (decision === 'allow') return remember ? 'You allowed this tool for the rest of the session.' : 'You allowed this call.';
  if (by === 'timeout') return 'Denied: nobody answered in time.';
  if (by === 'stop') return 'Not run: the answer was stopped.';
  if (by === 'shutdown') return 'Not run: brain shut down.';
  if (by === 'restart') return 'Not run: brain restarted before anyone answered.';
  if (by === 'user') return 'You denied this call.';
  return 'Denied.';
}

function settle(node, words, cls) {
  node.classList.remove('pending');
  node.classList.add(cls);
  node.querySelector('.permission-buttons')?.remove();
  node.querySelector('.permission-answer').textContent = words;
}

export function showDecision(node, decision, by, remember) {
  settle(node, decisionWords(decision, by, remember), decision === 'allow' ? 'allowed' : 'denied');
}

// A question about a call: a transcript `permission` item, or a `permission` frame. While
// it waits it offers Allow, Always (remember) and Deny.
export function permissionElement(item, sessionId) {
  const node = el('div', 'permission');
  node.dataset.callId = item.call_id;
  node.dataset.seq = item.seq;
  // A call id names a call only within its attempt (`call_0` may come every turn).
  if (item.turn != null) node.dataset.turn = item.turn;
  if (item.attempt != null) node.dataset.attempt = item.attempt;
  // The whole arguments: they are what the person decides about (a path, a command).
  const q = el('div', 'permission-q');
  q.append('Allow ', el('code', 'tool-name', item.name), '?');
  node.append(q, el('pre', 'permission-args', fullArgs(item.args)), el('div', 'permission-answer'));
  if (item.decision) { showDecision(node, item.decision, item.by, item.remember); return node; }
  node.classList.add('pending');
  const buttons = el('div', 'permission-buttons');
  const choices = [['Allow', 'allow', false, 'allow-once'], ['Always', 'allow', true, 'allow-always'], ['Deny', 'deny', false, 'deny']];
  for (const [label, decision, remember, cls] of choices) {
    const b = el('button', cls, label);
    b.type = 'button';
    if (remember) b.title = 'Allow ' + item.name + ' for the rest of this session';
    b.addEventListener('click', async () => {
      buttons.querySelectorAll('button').forEach((x) => { x.disabled = true; });
      const answer = node.querySelector('.permission-answer');
      answer.textContent = '';
      try {
        await api('/v1/sessions/' + sessionId + '/permissions/' + encodeURIComponent(item.call_id), { method: 'POST', body: { decision, remember } });
        showDecision(node, decision, 'user', remember);
      } catch (e) {
        // Decided first elsewhere (another tab, the terminal, the timeout): say what stands.
        if (e.code === 'already_decided') { showDecision(node, e.data.decision, e.data.by, false); return; }
        answer.textContent = 'Could not answer: ' + e.message;
        buttons.querySelectorAll('button').forEach((x) => { x.disabled = false; });
      }
    });
    buttons.append(b);
  }
  node.append(buttons);
  return node;
}

// Questions left unanswered by an attempt that is no longer running (brain was killed while
// asking): nothing waits for them, so they offer no buttons. `keep` is one still waiting.
export function expireQuestions(root, keep) {
  for (const n of root.querySelectorAll('.permission.pending')) {
    if (n !== keep) settle(n, 'Not answered: the answer it belonged to ended.', 'denied');
  }
}

// The newest waiting question in `root`, if any (the one a running attempt may wait on).
export function lastQuestion(root) {
  const all = root.querySelectorAll('.permission.pending');
  return all.length ? all[all.length - 1] : null;
}

// The newest question in `t` about `callId` of the attempt (`turn`, `attempt`) (`sel`
// narrows it: pending ones only), never one of an earlier turn with the same call id.
function questionOf(t, sel, callId, turn, attempt) {
  const mine = (n) => n.dataset.callId === callId && (turn == null || n.dataset.turn == null
    || (Number(n.dataset.turn) === turn && Number(n.dataset.attempt) === attempt));
  return [...t.querySelectorAll(sel)].filter(mine).pop();
}

// Follows one attempt's tool frames into the transcript `t`: rows go before the live answer
// (`place(node)`), as the transcript shows them once the answer is saved. `/live` replays
// the attempt from its start, so what the transcript already shows (the call by its turn,
// attempt, step and id; the question by its seq) is updated, never shown twice.
export function toolFrames(t, sessionId, place) {
  let turn = null;
  let attempt = null;
  const calls = new Map();
  return (f) => {
    if (f.type === 'turn') { turn = f.turn; attempt = f.attempt; calls.clear(); return true; }
    if (f.type === 'tool_call') {
      const key = callKey(turn, attempt, f.step, f.call_id);
      let node = [...t.querySelectorAll('.tool')].find((n) => n.dataset.key === key);
      if (!node) { node = toolElement({ ...f, turn, attempt, status: 'running' }); place(node); }
      calls.set(f.call_id, node);
      return true;
    }
    if (f.type === 'permission') {
      const shown = t.querySelector('.permission[data-seq="' + Number(f.seq) + '"]');
      const call = calls.get(f.call_id);
      if (call && call.dataset.status === 'running') setResult(call, { status: 'asking' });
      if (shown) return true;
      const node = permissionElement({ ...f, turn, attempt, decision: null }, sessionId);
      if (call && call.isConnected) call.before(node); else place(node);
      return true;
    }
    if (f.type === 'permission_resolved') {
      // Answered here, in another tab, in the terminal, or by the timeout: say who decided.
      const q = questionOf(t, '.permission', f.call_id, turn, attempt);
      if (q) showDecision(q, f.decision, f.by, f.remember);
      return true;
    }
    if (f.type === 'tool_result') {
      const node = calls.get(f.call_id);
      const saved = f.seq != null ? t.querySelector('.tool[data-seq="' + Number(f.seq) + '"]') : null;
      if (node && saved && saved !== node) node.remove();
      else if (node) { setResult(node, f); if (f.seq != null) node.dataset.seq = f.seq; }
      // Answered elsewhere (another tab, the terminal): the question says how it ended.
      const q = questionOf(t, '.permission.pending', f.call_id, turn, attempt);
      if (q) {
        if (f.status === 'cancelled') settle(q, 'Not run: the answer was stopped.', 'denied');
        else showDecision(q, f.status === 'denied' ? 'deny' : 'allow', null, false);
      }
      return true;
    }
    return false;
  };
}
