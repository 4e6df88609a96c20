// Rendering of transcript items. Message text is untrusted: user text is shown as text;
// model text is rendered by marked (raw HTML escaped, images turned into links) and
// sanitised by DOMPurify before it reaches the page.
import { el, tokens, state } from './dom.js';
import { toolElement, permissionElement } from './tools.js';
import { enhanceCode, copyButton } from './code.js';
import { userElement, forkButton, regenerateButton } from './versions.js';

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

export function markdown(text, highlighting = true) {
  const box = el('div', 'md');
  setupMarkdown();
  if (!markedReady) { box.textContent = text; box.style.whiteSpace = 'pre-wrap'; return box; }
  const html = window.marked.parse(text || '');
  box.innerHTML = window.DOMPurify.sanitize(html, {
    ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
    FORBID_TAGS: ['img', 'style', 'iframe', 'form', 'input', 'button', 'svg', 'math', 'video', 'audio'],
    FORBID_ATTR: ['style', 'srcset'],
  });
  enhanceCode(box, highlighting);
  return box;
}


export function itemElement(item) {
  let node;
  switch (item.kind) {
    case 'user':
      node = userElement(item);
      break;
    case 'step':
      // What the model wrote before this step's tool calls, shown before them.
      node = el('div', 'msg assistant step');
      node.append(...answerBody(item));
      break;
    case 'assistant': {
      node = el('div', 'msg assistant');
      node.append(...answerBody(item.last_step || item));
      const u = item.usage || {};
      // An imported answer knows no usage or time: none is shown rather than zeros.
      const counted = (u.input_tokens || 0) + (u.output_tokens || 0) > 0;
      node.append(el('div', 'meta', [item.model, counted ? tokens(u.input_tokens) + ' in' : null,
        counted ? tokens(u.cache_read_tokens) + ' cached' : null, counted ? tokens(u.output_tokens) + ' out' : null,
        item.duration_ms > 0 ? (item.duration_ms < 1000 ? item.duration_ms + ' ms' : (item.duration_ms / 1000).toFixed(1) + ' s') : null,
        item.attempt > 1 ? 'attempt ' + item.attempt : null, item.finish_reason === 'length' ? 'cut at the token limit' : null]
        .filter(Boolean).join(' · ')));
      node.append(answerActions(item));
      break;
    }
    case 'interrupted': {
      node = el('div', 'msg assistant interrupted');
      node.append(el('span', 'badge', 'interrupted'), ...answerBody(item.last_step || item));
      const [words, detail] = endedWords(item.ended);
      node.append(stateLine(words + (item.attempt > 1 ? ' (attempt ' + item.attempt + ')' : '') + '.', detail));
      node.append(answerActions(item));
      break;
    }
    case 'error':
      node = failureNotice(item.code, item.message, false);
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
      node.append(head, markdown(item.summary), actionsRow());
      break;
    }
    case 'title':
      // A quiet line: a rename is a fact about the session, not part of the conversation.
      node = el('div', item.by === 'auto' ? 'notice rename title-auto' : 'notice rename', (item.by === 'auto' ? 'Titled “' : 'Renamed to “') + item.title + '”');
      break;
    case 'tool':
      node = toolElement(item);
      break;
    case 'permission':
      node = permissionElement(item, state.id);
      break;
    case 'rewind':
      // An edit's mark: its versions are paged where the message is (versions.js).
      node = el('div', 'rewind-mark');
      node.hidden = true;
      break;
    default:
      node = el('div', 'notice unreadable', 'An event this version cannot show (' + (item.event_kind || item.kind) + ')');
  }
  // What versions.js groups by: kind, turn and attempt, edits, the branch an item is on.
  const d = node.dataset;
  d.seq = item.seq;
  d.kind = item.kind;
  if (item.turn != null) d.turn = item.turn;
  if (item.attempt != null) d.attempt = item.attempt;
  if (item.kind === 'step') d.step = item.step;
  if (item.kind === 'rewind') d.editedSeq = item.edited_seq;
  if (item.kind === 'compaction') d.replacesThroughSeq = item.replaces_through_seq;
  if (item.abandoned) { d.abandoned = 'true'; node.classList.add('abandoned'); }
  return node;
}

// An answer's (or a step's) reasoning, folded, and its text as markdown.
export function answerBody(part, highlighting = true) {
  const out = [];
  if (part.reasoning) {
    const d = el('details', 'reasoning');
    d.append(el('summary', null, 'Reasoning'), el('div', null, part.reasoning));
    out.push(d);
  }
  out.push(markdown(part.text, highlighting));
  return out;
}

function actionsRow() {
  const row = el('div', 'item-actions');
  row.append(forkButton());
  return row;
}

// What ended an interrupted answer, from its `ended` ({code, message}, or null when brain
// recorded no end: the process was killed): the headline, and the detail in small print.
function endedWords(ended) {
  if (!ended) return ['brain stopped before this answer finished (the text so far was saved)', ''];
  if (ended.code === 'stopped') return ['You stopped this answer', ''];
  if (ended.code === 'shutdown') return ['The server stopped while answering', ''];
  const detail = [ended.code, ended.message].filter(Boolean).join(': ');
  if (ended.code === 'provider_malformed') return ['The model sent something brain could not read, so the answer stops here', detail];
  if (ended.code === 'internal') return ['brain could not finish this answer (see its log)', detail];
  if (ended.code === 'idle_timeout') return ['The model went silent, so the answer stops here', detail];
  return ['The connection to the model was cut', detail];
}

// A failed attempt (no text at all), in words; the code and message go in the detail.
const FAILED = {
  provider_unreachable: 'brain could not reach the model server',
  first_token_timeout: 'The model did not start answering in time',
  empty_answer: 'The model sent an empty answer',
  context_overflow: 'The conversation is too long for the model’s context window',
  stopped: 'You stopped this answer before it began',
  shutdown: 'The server stopped before the answer began',
  provider_cut: 'The connection to the model was cut before any text arrived',
  idle_timeout: 'The model went silent before any text arrived',
  provider_timeout: 'The model server did not answer in time',
  provider_error: 'The model server reported an error',
  provider_http_error: 'The model server answered with an HTTP error',
  provider_malformed: 'The model server sent a reply brain could not read',
  unavailable: 'brain is out of resources (too many open files); try again shortly',
  internal: 'brain hit an internal error',
};

// A failed or cut-off attempt as a notice (also for a stream's `error` frame, where text may
// already have arrived).
export function failureNotice(code, message, hadText) {
  const node = el('div', 'notice error');
  const words = hadText ? endedWords({ code, message })[0] : FAILED[code] || 'No answer: the call to the model failed';
  node.append(stateLine(words, [code, message].filter(Boolean).join(': ')));
  return node;
}

function stateLine(words, detail) {
  const line = el('div', 'state');
  line.append(el('span', 'state-words', words));
  if (detail) line.append(el('span', 'state-detail', detail));
  return line;
}

// The actions under an answer: copy its markdown source (all of it, every step's text),
// write it again, branch from it. Shown on hover, focus or a tap, and always on the newest
// exchange (versions.js marks it).
function answerActions(item) {
  const bar = el('div', 'answer-actions');
  const copy = copyButton('Copy', () => item.text || '');
  copy.classList.add('copy-answer');
  copy.title = 'Copy this answer as markdown';
  bar.append(copy, regenerateButton(), forkButton());
  return bar;
}

// The snippet as text nodes with <mark> around the highlight ranges (in characters).
export function highlighted(snippet, ranges) {
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

