// Code blocks in rendered markdown: a head with the language and a copy button, and syntax
// highlighting by the vendored highlight.js. It runs on the already sanitised DOM, and its
// output (spans with classes around escaped text) goes through DOMPurify again, so no markup
// from a message can come back in through the highlighter.
import { el } from './dom.js';

const HIGHLIGHT_ONLY = { ALLOWED_TAGS: ['span'], ALLOWED_ATTR: ['class'] };

// Copies `text`, then says so on the button for a moment.
export function copyButton(label, text) {
  const b = el('button', 'copy', label);
  b.type = 'button';
  b.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text());
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

// Decorates every `pre > code` under `box` (a sanitised markdown box).
export function enhanceCode(box) {
  for (const code of box.querySelectorAll('pre > code')) {
    const pre = code.parentElement;
    const m = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
    const language = m ? m[1].toLowerCase() : '';
    const text = code.textContent;
    highlight(code, language);
    const wrap = el('div', 'code-block');
    const head = el('div', 'code-head');
    head.append(el('span', 'code-lang', language || 'text'), copyButton('Copy', () => text));
    pre.replaceWith(wrap);
    wrap.append(head, pre);
  }
}
