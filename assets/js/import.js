// Importing history from the sidebar: the file picked goes to POST /v1/import with
// XMLHttpRequest (its upload has progress events), the server's progress lines show as
// they arrive (Accept: application/x-ndjson), then its report, and the list is refreshed.
import { $, el } from './dom.js';
import { askToken } from './api.js';
import { loadSessions } from './sessions.js';

export function initImport() {
  $('import').addEventListener('click', () => $('import-file').click());
  $('import-file').addEventListener('change', () => {
    const file = $('import-file').files[0];
    // Cleared, so picking the same file again imports it again.
    $('import-file').value = '';
    if (file) upload(file);
  });
}

function plural(n, word) { return n + ' ' + word + (n === 1 ? '' : 's'); }

// The report in words, as `brain sessions import` prints it.
export function describe(r) {
  if (r.nothing) return 'Nothing to import: ' + r.nothing + '.';
  if (r.source === 'brain') {
    return `Imported ${plural(r.sessions, 'session')}: ${r.created} created, ${r.extended} extended, ${r.unchanged} unchanged.`;
  }
  const lines = [`Imported ${plural(r.conversations, 'conversation')} from ${r.source}: ${r.created} created, ${r.extended} extended, ${r.unchanged} unchanged, ${r.forked.length} forked; ${plural(r.messages, 'message')}.`];
  const left = Object.entries(r.skipped || {}).map(([k, n]) => n + ' ' + k);
  if (left.length) lines.push('Left out: ' + left.join(', ') + '.');
  for (const f of r.forked) lines.push(`“${f.title || f.conversation}” differs from its earlier import: kept as a new session.`);
  return lines.join('\n');
}

function show(kind, text, bar) {
  const box = $('import-status');
  box.hidden = false;
  box.className = 'import-status' + (kind === 'error' ? ' error' : '');
  box.textContent = '';
  if (kind !== 'busy') {
    const close = el('button', 'import-close', '×');
    close.type = 'button';
    close.setAttribute('aria-label', 'Close the import report');
    close.addEventListener('click', () => { box.hidden = true; });
    box.append(close);
  }
  const p = el('div', 'import-text', text);
  p.style.whiteSpace = 'pre-line';
  box.append(p);
  if (bar) box.append(bar);
}

function upload(file) {
  $('import').disabled = true;
  const bar = el('progress');
  bar.max = file.size || 1;
  bar.value = 0;
  show('busy', 'Sending ' + file.name + '…', bar);
  const xhr = new XMLHttpRequest();
  xhr.open('POST', '/v1/import');
  const token = localStorage.getItem('brain.token');
  if (token) xhr.setRequestHeader('Authorization', 'Bearer ' + token);
  xhr.setRequestHeader('Accept', 'application/x-ndjson');
  xhr.upload.onprogress = (e) => { if (e.lengthComputable) { bar.max = e.total; bar.value = e.loaded; } };
  // Sent: the server reads it now; the bar has no end it can show until it says.
  xhr.upload.onload = () => { show('busy', 'Importing ' + file.name + '…', bar); bar.removeAttribute('value'); };
  let seen = 0;
  let last = null;
  const lines = () => {
    const text = xhr.responseText;
    let cut;
    while ((cut = text.indexOf('\n', seen)) >= 0) {
      const line = text.slice(seen, cut);
      seen = cut + 1;
      let v;
      try { v = JSON.parse(line); } catch { continue; }
      if (v.progress) {
        show('busy', `Importing ${file.name}… ${plural(v.progress.conversations, 'conversation')}`, bar);
        if (v.progress.total) { bar.max = v.progress.total; bar.value = v.progress.bytes; }
      } else last = v;
    }
  };
  xhr.onprogress = lines;
  xhr.onload = () => {
    $('import').disabled = false;
    if (xhr.status === 401) { $('import-status').hidden = true; askToken(); return; }
    if (xhr.status !== 200) {
      let data = {};
      try { data = JSON.parse(xhr.responseText); } catch { /* not JSON: the status says it */ }
      show('error', 'The import failed: ' + (data.message || ('HTTP ' + xhr.status)));
      return;
    }
    lines();
    if (last && last.report) {
      show('done', describe(last.report));
      loadSessions(true);
    } else show('error', 'The import failed: ' + ((last && last.message) || 'the server ended it without a report.'));
  };
  xhr.onerror = () => { $('import').disabled = false; show('error', 'The file could not be sent: the server did not answer.'); };
  xhr.send(file);
}
