// The transcript in headless Chromium: paging back through a long session, links and search
// hits to early items, code blocks (copy, highlighting under the CSP), the wording of
// interrupted and failed answers, the inline Retry, and search results grouped by session.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { harness, line, shots, ask } from './harness.mjs';

const LONG = '01930000-0000-7000-8000-0000000000c1';
const CODE = '01930000-0000-7000-8000-0000000000c2';
const STATES = '01930000-0000-7000-8000-0000000000c3';
const RETRY = '01930000-0000-7000-8000-0000000000c4';
const TITLED = '01930000-0000-7000-8000-0000000000c5';
const GROWING = '01930000-0000-7000-8000-0000000000c6';
const HOSTEL = '01930000-0000-7000-8000-0000000000c7';
const HOSTEL_FORK = '01930000-0000-7000-8000-0000000000c8';

const start = Date.UTC(2026, 10, 30, 10, 0, 0);
const at = (i) => new Date(start + i * 1000).toISOString().replace('Z', '000Z');
const answer = (turn, text, attempt = 1) => ({ turn, attempt, text, provider: 'mock', model: 'm', finish_reason: 'stop', usage: {}, duration_ms: 5 });

// A session of events in order: [kind, payload] pairs, seq from 1.
function session(id, events) { return events.map(([kind, payload], i) => line(id, i + 1, kind, payload, at(i))); }

function seed() {
  // 1,500 items: 750 questions and their answers; message #3 (seq 6) has a unique word.
  const long = [['session_started', { title: 'A very long session', system: 's' }]];
  for (let n = 1; n <= 750; n++) {
    const seq = long.length + 1;
    long.push(['user_message', { text: n === 3 ? 'question 3 about the zanzibarquux' : 'question ' + n }]);
    long.push(['assistant_turn', answer(seq, 'reply number ' + n + ' with some words to give the item height')]);
  }
  const code = [
    ['session_started', { title: 'Code', system: 's' }],
    ['user_message', { text: 'show me code' }],
    ['assistant_turn', answer(2, 'Here:\n\n```python\ndef greet(name):\n    return "hi " + name  # a comment\n```\n\n> a quoted line\n\n```html\n<script>alert(1)</script>\n<img src=x onerror=alert(2)>\n```\n')],
  ];
  const ended = (code, message) => ({ code, message });
  const states = [
    ['session_started', { title: 'States', system: 's' }],
    ['user_message', { text: 'q1' }],
    ['pending_state', { turn: 2, attempt: 1, text: 'stopped text', ended: ended('stopped', 'stopped by the user') }],
    ['user_message', { text: 'q2' }],
    ['pending_state', { turn: 4, attempt: 1, text: 'shutdown text', ended: ended('shutdown', 'the server is shutting down') }],
    ['user_message', { text: 'q3' }],
    ['pending_state', { turn: 6, attempt: 1, text: 'cut text', ended: ended('provider_cut', 'the connection closed mid-stream') }],
    ['user_message', { text: 'q4' }],
    ['pending_state', { turn: 8, attempt: 1, text: 'killed text' }],
    ['user_message', { text: 'q5' }],
    ['turn_failed', { turn: 10, attempt: 1, code: 'provider_unreachable', message: 'cannot connect to http://127.0.0.1:9/v1' }],
    ['user_message', { text: 'q6' }],
    ['turn_failed', { turn: 12, attempt: 1, code: 'stopped', message: 'stopped before any text' }],
  ];
  const retry = [
    ['session_started', { title: 'Retry me', system: 's' }],
    ['user_message', { text: 'please answer' }],
    ['turn_failed', { turn: 2, attempt: 1, code: 'provider_unreachable', message: 'cannot connect' }],
  ];
  const titled = [
    ['session_started', { system: 's' }],
    ['user_message', { text: 'name me' }],
    ['session_titled', { title: 'Named automatically', by: 'auto' }],
    ['assistant_turn', answer(2, 'the first answer')],
  ];
  // 1,000 items, for a new turn at the end of a long session.
  const growing = [['session_started', { title: 'Growing', system: 's' }]];
  for (let n = 1; n <= 500; n++) {
    const seq = growing.length + 1;
    growing.push(['user_message', { text: 'old question ' + n }]);
    growing.push(['assistant_turn', answer(seq, 'old reply ' + n + ' with some words to give the item height')]);
  }
  // A session in markdown and its fork through the answer: the fork's copies keep the
  // seqs and times, and its own question follows.
  const hostel = [
    ['session_started', { title: 'Hostel plans', system: 's' }],
    ['user_message', { text: '## Trip\n- **Hostels** in `Porto`?' }],
    ['assistant_turn', answer(2, 'Book the **cheapest** [hostels](https://example.com/hostels) early')],
  ];
  const fork = [
    ['session_started', { title: 'Hostel plans (fork)', system: 's', forked_from: { session_id: HOSTEL, seq: 3 } }],
    ...hostel.slice(1),
    ['user_message', { text: 'more hostels for the fork' }],
  ];
  return [...session(HOSTEL, hostel), ...session(HOSTEL_FORK, fork), ...session(LONG, long), ...session(CODE, code), ...session(STATES, states), ...session(RETRY, retry), ...session(TITLED, titled), ...session(GROWING, growing)];
}

const h = harness({ seed: seed() });

// Records the transcript pages the page asks for, and CSP violations.
async function watched(options) {
  const p = await h.page('light', { width: 1280, height: 800 }, options);
  p.pages = [];
  p.on('request', (r) => { if (/before_seq=/.test(r.url())) p.pages.push(new URL(r.url()).searchParams.get('before_seq')); });
  await p.addInitScript(() => {
    window.violations = [];
    document.addEventListener('securitypolicyviolation', (e) => window.violations.push(e.violatedDirective + ' ' + e.blockedURI));
  });
  return p;
}

const offset = (p, seq) => p.evaluate((s) => {
  const t = document.getElementById('transcript');
  return document.querySelector('[data-seq="' + s + '"]').getBoundingClientRect().top - t.getBoundingClientRect().top;
}, seq);

test('scrolling up pages back to the first message, keeping the position', async () => {
  const p = await watched();
  await p.goto(h.base + '/sessions/' + LONG);
  await p.waitForSelector('.msg.assistant >> text=reply number 750');
  const oldest = () => p.evaluate(() => Math.min(...[...document.querySelectorAll('#transcript [data-seq]')].map((n) => Number(n.dataset.seq))));
  const first = await oldest();
  assert.ok(first > 2, 'only the newest page is loaded at first');
  // Bring the oldest loaded item near the top: the previous page is prepended above it.
  const before = await p.evaluate((s) => {
    const t = document.getElementById('transcript');
    const n = document.querySelector('[data-seq="' + s + '"]');
    t.scrollTop = n.offsetTop - t.offsetTop - 150;
    return n.getBoundingClientRect().top - t.getBoundingClientRect().top;
  }, first);
  await p.waitForFunction((s) => !!document.querySelector('[data-seq="' + (s - 1) + '"]'), first, { timeout: 15000 });
  const after = await offset(p, first);
  assert.ok(Math.abs(after - before) <= 3, `the item stays where it was (${before} → ${after})`);
  // Scroll to the top again and again until the first message is there.
  await p.waitForFunction(() => {
    document.getElementById('transcript').scrollTop = 0;
    return !!document.querySelector('[data-seq="2"]');
  }, null, { timeout: 60000, polling: 100 });
  await p.waitForSelector('.msg.user >> text="question 1"');
  const seqs = await p.evaluate(() => [...document.querySelectorAll('#transcript [data-seq]')].map((n) => n.dataset.seq));
  assert.equal(seqs.length, 1500, 'every item once');
  assert.equal(new Set(seqs).size, 1500, 'no item twice');
  assert.equal(new Set(p.pages).size, p.pages.length, 'no page asked for twice: ' + p.pages);
  await p.waitForFunction(() => document.querySelector('.transcript-top').hidden);
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('a search hit on an early message opens it highlighted', async () => {
  const p = await watched();
  await p.goto(h.base + '/');
  await p.fill('#search', 'zanzibarquux');
  const hit = p.locator('#search-results .hit').first();
  await hit.waitFor();
  assert.match(await p.locator('#search-results .hit-group').first().innerText(), /A very long session/);
  await hit.click();
  const found = p.locator('.msg.user.found');
  await found.waitFor({ timeout: 20000 });
  assert.match(await found.innerText(), /zanzibarquux/);
  assert.equal(await found.getAttribute('data-seq'), '6');
  assert.ok(await found.isVisible());
  await p.waitForFunction(() => {
    const n = document.querySelector('.found').getBoundingClientRect();
    return n.top >= 0 && n.bottom <= innerHeight;
  });
  assert.match(p.url(), /#seq-6$/);
  await p.context().close();
});

test('a link to #seq-N loads the pages it needs and highlights the item; so does a hash change', async () => {
  const p = await watched();
  await p.goto(h.base + '/sessions/' + LONG + '#seq-11');
  const found = p.locator('.found');
  await found.waitFor({ timeout: 20000 });
  assert.equal(await found.getAttribute('data-seq'), '11');
  assert.match(await found.innerText(), /reply number 5 /);
  await p.evaluate(() => { location.hash = '#seq-40'; });
  await p.waitForSelector('.found[data-seq="40"]');
  assert.equal(await p.locator('.found').count(), 1, 'one item highlighted');
  await p.context().close();
});

test('code blocks: language, highlighting, copy; hostile code stays text, under the CSP', async () => {
  const res = await fetch(h.base + '/sessions/' + CODE);
  const csp = res.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  const p = await watched({ permissions: ['clipboard-read', 'clipboard-write'] });
  await p.goto(h.base + '/sessions/' + CODE);
  const block = p.locator('.code-block').first();
  await block.waitFor();
  assert.equal(await block.locator('.code-lang').innerText(), 'python');
  assert.ok(await block.locator('code span.hljs-keyword').count() >= 1, 'highlighted');
  assert.ok(await block.locator('code span.hljs-comment').count() >= 1);
  await block.locator('button.copy').click();
  await p.waitForSelector('.code-block button.copy >> text=Copied');
  assert.equal(await p.evaluate(() => navigator.clipboard.readText()), 'def greet(name):\n    return "hi " + name  # a comment\n');
  // The answer's own copy action gives its markdown source.
  await p.click('.msg.assistant .answer-actions button.copy');
  await p.waitForFunction(async () => (await navigator.clipboard.readText()).startsWith('Here:\n\n```python'));
  // Highlighted HTML in a message is text.
  const html = p.locator('.code-block').nth(1);
  assert.equal(await html.locator('.code-lang').innerText(), 'html');
  assert.ok(await html.locator('code span[class^="hljs-"]').count() >= 1, 'highlighted');
  assert.match(await html.locator('code').innerText(), /<script>alert\(1\)<\/script>\n<img src=x onerror=alert\(2\)>/);
  const t = p.locator('#transcript');
  assert.equal(await t.locator('script, img, [onerror]').count(), 0);
  assert.equal(await p.locator('script:not([src])').count(), 0, 'no inline script on the page');
  await p.waitForSelector('.md blockquote >> text=a quoted line');
  assert.deepEqual(p.dialogs, []);
  assert.deepEqual(await p.evaluate(() => window.violations), [], 'no CSP violation');
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

// Needs the transcript's `ended` field (SPEC §4 as of issue 16).
test('interrupted answers say how they ended', async () => {
  const p = await watched();
  await p.goto(h.base + '/sessions/' + STATES);
  await p.waitForSelector('.notice.error');
  const words = async (text) => (await p.locator('.msg.interrupted', { hasText: text }).locator('.state-words').innerText()).trim();
  assert.equal(await words('stopped text'), 'You stopped this answer.');
  assert.equal(await words('shutdown text'), 'The server stopped while answering.');
  assert.equal(await words('cut text'), 'The connection to the model was cut.');
  assert.match(await p.locator('.msg.interrupted', { hasText: 'cut text' }).locator('.state-detail').innerText(), /provider_cut/);
  assert.equal(await words('killed text'), 'brain stopped before this answer finished (the text so far was saved).');
  await p.context().close();
});

test('failed answers say what happened in words; Retry only on the newest', async () => {
  const p = await watched();
  await p.goto(h.base + '/sessions/' + STATES);
  await p.waitForSelector('.notice.error');
  const errors = p.locator('.notice.error');
  assert.equal(await errors.nth(0).locator('.state-words').innerText(), 'brain could not reach the model server');
  assert.match(await errors.nth(0).locator('.state-detail').innerText(), /provider_unreachable: cannot connect to http:\/\/127\.0\.0\.1:9\/v1/);
  assert.equal(await errors.nth(1).locator('.state-words').innerText(), 'You stopped this answer before it began');
  assert.equal(await p.locator('.inline-retry').count(), 1, 'one Retry');
  assert.equal(await errors.nth(1).locator('.inline-retry').count(), 1, 'on the newest answer');
  await p.context().close();
});

test('Retry on the newest failed turn starts a new attempt', async () => {
  const p = await watched();
  await p.goto(h.base + '/sessions/' + RETRY);
  const retry = p.locator('.notice.error .inline-retry');
  await retry.waitFor();
  await h.mock({ kind: 'stream', text: 'the retried answer' });
  await retry.click();
  await p.waitForSelector('.msg.assistant:not(.streaming) >> text=the retried answer', { timeout: 15000 });
  assert.equal(await p.locator('.inline-retry').count(), 0, 'no Retry once the answer is there');
  await p.waitForSelector('.msg.assistant .meta >> text=attempt 2');
  await p.context().close();
});

test('an automatic title is shown after the answer, not between question and answer', async () => {
  const p = await watched();
  await p.goto(h.base + '/sessions/' + TITLED);
  await p.waitForSelector('.notice.title-auto');
  const order = await p.evaluate(() => [...document.querySelectorAll('#transcript [data-seq]')].map((n) => n.className.split(' ')[0] + ':' + n.dataset.seq));
  assert.deepEqual(order, ['msg:2', 'msg:4', 'notice:3']);
  // An imported answer knows no usage or time: its line names the model, no zeros.
  const meta = await p.textContent('.msg.assistant .meta');
  assert.doesNotMatch(meta, /\b0 (in|out|cached)\b|0\.0 s/, meta);
  // Said quietly: a small line with no box of its own, no button.
  const look = await p.$eval('.notice.title-auto', (n) => ({ bg: getComputedStyle(n).backgroundColor, size: parseFloat(getComputedStyle(n).fontSize), buttons: n.querySelectorAll('button').length }));
  assert.deepEqual(look, { bg: 'rgba(0, 0, 0, 0)', size: 11.5, buttons: 0 });
  await p.context().close();
});

test('search results are grouped by session with the kind in words', async () => {
  const p = await watched();
  await p.goto(h.base + '/');
  await p.fill('#search', 'reply');
  const group = p.locator('#search-results .hit-group').first();
  await group.waitFor();
  const text = await group.innerText();
  assert.match(text, /A very long session/);
  assert.match(text, /answer/);
  assert.doesNotMatch(await p.locator('#search-results').innerText(), /assistant_turn|user_message|_/);
  assert.equal(await group.locator('.hit').count(), 3, 'the best three');
  const more = group.locator('.hit-more');
  assert.match(await more.innerText(), /^\d+ more in this session$/);
  await more.click();
  assert.ok(await group.locator('.hit').count() > 3);
  await p.context().close();
});

test('search snippets show no markdown and a fork\'s copies are one hit', async () => {
  const p = await watched();
  await p.goto(h.base + '/');
  await p.fill('#search', 'hostels');
  await p.waitForSelector('#search-results .hit-also');
  const all = await p.locator('#search-results').innerText();
  assert.doesNotMatch(all, /\*\*|`|##|\]\(/, all);
  assert.match(all, /Hostels in Porto\?/);
  assert.match(await p.locator('#search-results mark').first().innerText(), /^hostels$/i);
  // The source's two hits each list the fork; the fork shows only its own message.
  const also = p.locator('#search-results .hit-also');
  assert.equal(await also.count(), 2);
  assert.match(await also.first().innerText(), /^also in Hostel plans \(fork\)$/);
  const forkHits = await p.locator(`#search-results a.hit[href^="/sessions/${HOSTEL_FORK}"]`).evaluateAll((as) => as.map((a) => a.getAttribute('href')));
  assert.deepEqual(forkHits, [`/sessions/${HOSTEL_FORK}#seq-4`]);
  await also.first().locator('a').click();
  await p.waitForURL(new RegExp(HOSTEL_FORK));
  await p.context().close();
});

test('a new answer keeps the earlier pages loaded, and a reader who scrolled up is not pulled down', async () => {
  const p = await watched();
  await p.goto(h.base + '/sessions/' + GROWING);
  await p.waitForSelector('.msg.assistant >> text=old reply 500');
  const seqs = () => p.evaluate(() => [...document.querySelectorAll('#transcript [data-seq]')].map((n) => Number(n.dataset.seq)).filter((s) => s > 0));
  const first = Math.min(...await seqs());
  // Load the page before the newest one.
  await p.waitForFunction((s) => {
    document.getElementById('transcript').scrollTop = 0;
    return !!document.querySelector('[data-seq="' + (s - 1) + '"]');
  }, first, { timeout: 15000, polling: 100 });
  const loaded = await seqs();
  // A slow answer; once it streams, the reader scrolls up to read something earlier.
  const words = Array.from({ length: 40 }, (_, i) => 'fresh' + i).join(' ');
  await h.mock({ kind: 'stream', text: words, delay_ms: 100 });
  await ask(p, 'one more question');
  await p.waitForSelector('.msg.assistant.streaming >> text=fresh2', { timeout: 15000 });
  const reading = await p.evaluate(() => {
    const t = document.getElementById('transcript');
    t.scrollTop = t.scrollHeight - t.clientHeight - 3000;
    return t.scrollTop;
  });
  await p.waitForSelector('.msg.assistant.streaming >> text=fresh12', { timeout: 15000 });
  const still = await p.evaluate(() => document.getElementById('transcript').scrollTop);
  assert.ok(Math.abs(still - reading) <= 2, `the reader stays where they scrolled (${reading} → ${still})`);
  await p.waitForSelector('.msg.assistant:not(.streaming) >> text=fresh39', { timeout: 20000 });
  await p.waitForFunction(() => document.querySelector('#stop').hidden);
  const after = await seqs();
  assert.ok(loaded.every((s) => after.includes(s)), 'every item loaded before is still there');
  const newest = Math.max(...loaded);
  assert.ok(after.includes(newest + 1) && after.includes(newest + 2), 'the question and its answer were added');
  assert.equal(new Set(after).size, after.length, 'no item twice');
  assert.equal(await p.locator('.msg.assistant >> text=fresh39').count(), 1, 'the answer once, not also its live bubble');
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('screenshots of code blocks and answer states, light and dark', async () => {
  mkdirSync(shots, { recursive: true });
  for (const scheme of ['light', 'dark']) {
    for (const [name, id, ready] of [['code', CODE, '.code-block span.hljs-keyword'], ['states', STATES, '.inline-retry']]) {
      const p = await h.page(scheme);
      await p.goto(h.base + '/sessions/' + id);
      await p.waitForSelector(ready);
      await p.screenshot({ path: join(shots, `transcript-${name}-${scheme}.png`) });
      await p.context().close();
    }
  }
});
