// Code blocks in rendered markdown: a head with the language and a copy button, and syntax
// highlighting by the vendored highlight.js. It runs on the already sanitised DOM, and its
// output (spans with classes around escaped text) goes through DOMPurify again, so no markup
// from a message can come back in through the highlighter.
import { el } from './dom.js';

const HIGHLIGHT_ONLY = { ALLOWED_TAGS: ['span'], ALLOWED_ATTR: ['class'] };

// The Clipboard API exists only in a secure context (https or localhost); a phone on the
// LAN reaches brain over plain http, where the older copy command still works.
async function writeClipboard(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = el('textarea', 'copy-buffer');
  area.value = text;
  area.setAttribute('readonly', '');
  document.body.append(area);
  area.select();
  const done = document.execCommand('copy');
  area.remove();
  if (!done) throw new Error('copy refused');
}

// Copies `text`, then says so on the button for a moment.
export function copyButton(label, text) {
  const b = el('button', 'copy', label);
  b.type = 'button';
  b.addEventListener('click', async () => {
    try {
      await writeClipboard(text());
      b.textContent = 'Copied';
    } catch {
      b.textContent = 'Copy failed';
    }
    setTimeout(() => { b.textContent = label; }, 1500);
  });
  return b;
}

function highlight(code, language) {
  const hljs = window.hljs;
  if (!hljs || !language || !hljs.getLanguage(language) || !window.DOMPurify) return;
  const html = hljs.highlight(code.textContent, { language, ignoreIllegals: true }).value;
  code.innerHTML = window.DOMPurify.sanitize(html, HIGHLIGHT_ONLY);
  code.classList.add('hljs');
}

// Decorates every `pre > code` under `box` (a sanitised markdown box). `highlighting` is
// off while an answer streams: highlighting the whole answer on every frame would freeze
// the page on a long one; it runs once when the answer is complete.
export function enhanceCode(box, highlighting = true) {
  for (const code of box.querySelectorAll('pre > code')) {
    const pre = code.parentElement;
    const m = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
    const language = m ? m[1].toLowerCase() : '';
    const text = code.textContent;
    if (highlighting) highlight(code, language);
    const wrap = el('div', 'code-block');
    const head = el('div', 'code-head');
    head.append(el('span', 'code-lang', language || 'text'), copyButton('Copy', () => text));
    pre.replaceWith(wrap);
    wrap.append(head, pre);
  }
}
