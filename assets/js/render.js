// Rendering of transcript items. Message text is untrusted: user text is shown as text;
// model text is rendered by marked (raw HTML escaped, images turned into links) and
// sanitised by DOMPurify before it reaches the page.
import { el, tokens } from './dom.js';

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

export function markdown(text) {
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


export function itemElement(item) {
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

