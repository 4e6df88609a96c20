// What an outside review of the web UI found, each kept as a test: a failed page load that
// was asked for again 60 times a second, a finished answer shown twice, a stream writing
// into the session the reader switched to, copy buttons on a plain-http LAN address, a
// link to a deleted session, highlighting run on every frame of a streaming answer, and a
// `#seq-N` past the end highlighting the newest item.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { harness, line, ask } from './harness.mjs';

const LONG = '01930000-0000-7000-8000-0000000000d1';
const A = '01930000-0000-7000-8000-0000000000d2';
const B = '01930000-0000-7000-8000-0000000000d3';
const CODE = '01930000-0000-7000-8000-0000000000d4';
const start = Date.UTC(2026, 10, 30, 9, 0, 0);
const at = (i) => new Date(start + i * 1000).toISOString().replace('Z', '000Z');
const answer = (turn, text) => ({ turn, attempt: 1, text, provider: 'mock', model: 'm', finish_reason: 'stop', usage: {}, duration_ms: 5 });
const session = (id, events) => events.map(([kind, payload], i) => line(id, i + 1, kind, payload, at(i)));

function seed() {
  const long = [['session_started', { title: 'Long', system: 's' }]];
  for (let n = 1; n <= 400; n++) {
    const seq = long.length + 1;
    long.push(['user_message', { text: 'long question ' + n }]);
    long.push(['assistant_turn', answer(seq, 'long reply ' + n + ' with words enough to give it some height')]);
  }
  const short = (title) => [['session_started', { title, system: 's' }], ['user_message', { text: title + ' question' }], ['assistant_turn', answer(2, title + ' reply')]];
  const code = [['session_started', { title: 'Code here', system: 's' }], ['user_message', { text: 'code please' }],
    ['assistant_turn', answer(2, '```python\nprint("copied from the LAN")\n```\n')]];
  return [...session(LONG, long), ...session(A, short('Alpha')), ...session(B, short('Bravo')), ...session(CODE, code)];
}

const h = harness({ seed: seed(), serveArgs: ['--allowed-host', 'brain.test'] });

// Waits for `n` animation frames: time passing, measured by the page, not a sleep.
const frames = (p, n) => p.evaluate((n) => new Promise((ok) => { let i = 0; const f = () => (++i >= n ? ok() : requestAnimationFrame(f)); requestAnimationFrame(f); }), n);

test('a page that fails to load is not asked for again and again; the row offers a retry', async () => {
  const p = await h.page();
  const asked = [];
  p.on('request', (r) => { if (/before_seq=/.test(r.url())) asked.push(r.url()); });
  await p.goto(h.base + '/sessions/' + LONG);
  await p.waitForSelector('.msg.assistant >> text=long reply 400');
  // Another client deletes the session; the reader scrolls up for more.
  await fetch(h.base + '/v1/sessions/' + LONG, { method: 'DELETE' });
  await p.evaluate(() => { document.getElementById('transcript').scrollTop = 0; });
  await p.waitForSelector('.transcript-top.failed .load-again', { timeout: 10000 });
  const after = asked.length;
  await frames(p, 90);
  await p.evaluate(() => { document.getElementById('transcript').scrollTop = 0; });
  await frames(p, 30);
  assert.equal(asked.length, after, 'no more requests after the failure: ' + asked.length);
  assert.ok(after <= 2, 'the failed page was asked for once: ' + after);
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('switching sessions while an answer streams: the other session gets none of it', async () => {
  const p = await h.page();
  await p.goto(h.base + '/sessions/' + A);
  await p.waitForSelector('.msg.assistant >> text=Alpha reply');
  const words = Array.from({ length: 30 }, (_, i) => 'alphaword' + i).join(' ');
  await h.mock({ kind: 'stream', text: words, delay_ms: 80, cut_after: 20 });
  await ask(p, 'stream in alpha');
  await p.waitForSelector('.msg.assistant.streaming >> text=alphaword1', { timeout: 15000 });
  await p.click('.session-link[data-id="' + B + '"]');
  await p.waitForSelector('.msg.assistant >> text=Bravo reply');
  // A's attempt ends (cut) while B is shown.
  for (const until = Date.now() + 20000; ;) {
    const { session } = await (await fetch(h.base + '/v1/sessions/' + A)).json();
    if (!session.turn_active) break;
    assert.ok(Date.now() < until, 'the attempt in A did not end');
    await new Promise((ok) => setTimeout(ok, 50));
  }
  await frames(p, 20);
  const text = await p.textContent('#transcript');
  assert.ok(!/alphaword|connection to the model/.test(text), 'nothing of A in B: ' + text);
  assert.equal(await p.textContent('#status'), '', 'no status about A');
  assert.equal(await p.isHidden('#stop'), true);
  assert.equal(await p.isEnabled('#send'), true);
  await p.context().close();
});

test('a finished answer in a long session is shown once, and highlighting waits for its end', async () => {
  const p = await h.page();
  await p.goto(h.base + '/sessions/' + CODE);
  await p.waitForSelector('.msg.assistant >> text=copied from the LAN');
  const code = '```python\n' + Array.from({ length: 40 }, (_, i) => 'value_' + i + ' = ' + i).join('\n') + '\n```';
  await h.mock({ kind: 'stream', text: 'Here:\n\n' + code + '\n\nDone.', chunks: 40, delay_ms: 60 });
  await ask(p, 'more code');
  await p.waitForSelector('.msg.assistant.streaming >> text=value_5', { timeout: 15000 });
  assert.equal(await p.locator('.msg.assistant.streaming .hljs').count(), 0, 'no highlighting while it streams');
  await p.waitForSelector('.msg.assistant:not(.streaming) >> text=Done.', { timeout: 20000 });
  await p.waitForFunction(() => document.querySelector('#stop').hidden);
  assert.equal(await p.locator('.msg.assistant >> text=Done.').count(), 1, 'the answer once');
  assert.equal(await p.locator('.msg.assistant.streaming').count(), 0);
  assert.ok(await p.locator('.msg.assistant:not(.streaming) .hljs').count() > 0, 'highlighted once complete');
  await p.context().close();
});

test('copy works on a plain-http LAN address (no Clipboard API there)', async () => {
  const port = new URL(h.base).port;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--host-resolver-rules=MAP brain.test 127.0.0.1'],
  });
  try {
    const p = await (await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] })).newPage();
    await p.goto('http://brain.test:' + port + '/sessions/' + CODE);
    await p.waitForSelector('.code-head .copy');
    assert.equal(await p.evaluate(() => window.isSecureContext), false);
    await p.click('.code-head .copy');
    await p.waitForSelector('.code-head .copy >> text=Copied');
  } finally {
    await browser.close();
  }
});

test('a link to a deleted session opens a new chat and says why', async () => {
  const p = await h.page();
  await p.goto(h.base + '/sessions/01930000-0000-7000-8000-0000000000ff');
  await p.waitForFunction(() => /could not be opened/.test(document.getElementById('status').textContent));
  assert.equal(new URL(p.url()).pathname, '/');
  assert.equal(await p.textContent('#session-title'), 'New chat');
  await p.context().close();
});

test('#seq-N past the end highlights nothing', async () => {
  const p = await h.page();
  await p.goto(h.base + '/sessions/' + B + '#seq-600');
  await p.waitForSelector('.msg.assistant >> text=Bravo reply');
  await frames(p, 20);
  assert.equal(await p.locator('.found').count(), 0);
  await p.goto(h.base + '/sessions/' + B + '#seq-3');
  await p.waitForSelector('.msg.assistant.found');
  await p.context().close();
});
