// The HTTP API: JSON calls and SSE streams (read with fetch, so the bearer header is sent).
import { $ } from './dom.js';

export function headers(json) {
  const h = {};
  const token = localStorage.getItem('brain.token');
  if (token) h.Authorization = 'Bearer ' + token;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

export async function api(path, opts = {}) {
  const res = await fetch(path, {
    method: opts.method || 'GET',
    headers: headers(opts.body !== undefined),
    body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
  });
  if (res.status === 401) { askToken(); throw new Error('an API token is needed'); }
  if (res.status === 204) return null;
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw Object.assign(new Error(data.message || ('HTTP ' + res.status)), { code: data.error, data });
  return data;
}

// Reads an SSE response (fetch, so the bearer header can be sent) frame by frame.
export async function readFrames(res, onFrame) {
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

export function askToken() {
  $('token-gate').hidden = false;
  $('token').focus();
}

