// brain's web UI in a real headless Chromium, against the real binary and mock_llm.
// Run by `cargo test` (tests/it/browser.rs passes the binaries' paths) once
// .ci/browser-deps has installed Chromium and playwright-core.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { harness, ask, shots } from './harness.mjs';

// A session with a compaction and an interrupted partial, imported before the server starts.
function seed() {
  const id = '01930000-0000-7000-8000-000000000001';
  const at = (s) => `2026-11-30T10:00:${String(s).padStart(2, '0')}.000000Z`;
  const lines = [
    ['session_started', { title: 'Seeded history', system: 'You are a test.' }],
    ['user_message', { text: 'What did we decide about the bridge?' }],
    ['assistant_turn', { turn: 2, attempt: 1, text: 'We decided to **repaint** it.', provider: 'mock', model: 'm', finish_reason: 'stop', usage: {}, duration_ms: 5 }],
    ['compaction_applied', { summary: 'The bridge will be repainted in May.', replaces_through_seq: 3, tokens_before: 900, tokens_after: 120, model: 'm' }],
    ['user_message', { text: 'And the budget?' }],
    ['pending_state', { turn: 5, attempt: 1, text: 'The budget is 40,000 eu' }],
  ].map(([kind, payload], i) => JSON.stringify({ session_id: id, seq: i + 1, kind, payload, created_at: at(i) }));
  // A session whose summarizer failed: its compaction is an extractive digest.
  const digested = [
    ['session_started', { title: 'Digested history', system: 'You are a test.' }],
    ['user_message', { text: 'Where is the ferry?' }],
    ['assistant_turn', { turn: 2, attempt: 1, text: 'At pier 4.', provider: 'mock', model: 'm', finish_reason: 'stop', usage: {}, duration_ms: 5 }],
    ['compaction_applied', { summary: 'User: Where is the ferry?\nAssistant: At pier 4.', replaces_through_seq: 3, tokens_before: 700, tokens_after: 90, model: 'm', method: 'extractive' }],
    ['user_message', { text: 'And when does it leave?' }],
  ].map(([kind, payload], i) => JSON.stringify({ session_id: DIGESTED, seq: i + 1, kind, payload, created_at: at(i) }));
  return lines.concat(digested);
}

const DIGESTED = '01930000-0000-7000-8000-000000000002';

const h = harness({ seed: seed() });
const page = (...a) => h.page(...a);
const mock = (step) => h.mock(step);

test('a chat streams its answer, survives a reload, and search finds it', async () => {
  const p = await page();
  await p.goto(h.base + '/');
  await ask(p, 'hello from the browser');
  await p.waitForSelector('.msg.assistant:not(.streaming) >> text=to: hello from the browser', { timeout: 15000 });
  assert.match(new URL(p.url()).pathname, /^\/sessions\/[0-9a-f-]{36}$/);
  await p.reload();
  await p.waitForSelector('.msg.user >> text=hello from the browser');
  await p.waitForSelector('.msg.assistant >> text=to: hello from the browser');
  await p.fill('#search', 'browser');
  await p.waitForSelector('#search-results .hit mark');
  // Newest first: the toggle asks for order=recent and still finds it.
  const recent = p.waitForRequest((r) => r.url().includes('order=recent'));
  await p.check('#search-recent');
  await recent;
  await p.waitForSelector('#search-results .hit mark');
  await p.click('#search-results .hit');
  await p.waitForSelector('.msg.user >> text=hello from the browser');
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('compaction dividers open to the summary and partials are marked', async () => {
  const p = await page();
  await p.goto(h.base + '/sessions/01930000-0000-7000-8000-000000000001');
  const divider = p.locator('details.compaction');
  await divider.waitFor();
  assert.match(await divider.locator('summary').innerText(), /900 → 120 tokens/);
  assert.equal(await divider.locator('.md').isVisible(), false);
  await divider.locator('summary').click();
  await p.waitForSelector('details.compaction .md >> text=repainted in May');
  await p.waitForSelector('.msg.interrupted .badge >> text=interrupted');
  await p.waitForSelector('.msg.interrupted >> text=The budget is 40,000 eu');
  assert.equal(await p.locator('.msg.assistant strong >> text=repaint').count(), 1, 'markdown is rendered');
  await p.context().close();
});

test('an extractive compaction is marked on its divider', async () => {
  const p = await page();
  await p.goto(h.base + '/sessions/' + DIGESTED);
  const divider = p.locator('details.compaction.extractive');
  await divider.waitFor();
  const head = await divider.locator('summary').innerText();
  assert.match(head, /condensed · 700 → 90 tokens/);
  assert.match(head, /extractive digest/);
  await divider.locator('summary').click();
  await p.waitForSelector('details.compaction.extractive .md >> text=At pier 4.');
  // The summarised one is not marked.
  await p.goto(h.base + '/sessions/01930000-0000-7000-8000-000000000001');
  await p.locator('details.compaction').waitFor();
  assert.equal(await p.locator('details.compaction.extractive').count(), 0);
  await p.context().close();
});

test('hostile message text renders as text: no element, no script, no dialog', async () => {
  const p = await page();
  await p.goto(h.base + '/');
  const evil = '<img src=x onerror=alert(1)> <script>alert(2)</script> [click](javascript:alert(3)) ![pic](http://127.0.0.1:1/x.png)';
  await mock({ kind: 'stream', text: 'Answer: ' + evil });
  await ask(p, 'user says ' + evil);
  await p.waitForSelector('.msg.assistant:not(.streaming) >> text=Answer:', { timeout: 15000 });
  await p.waitForTimeout(300);
  const t = p.locator('#transcript');
  assert.equal(await t.locator('img').count(), 0, 'no image element');
  assert.equal(await t.locator('script').count(), 0, 'no script element');
  assert.equal(await t.locator('a[href^="javascript"]').count(), 0, 'no javascript: link');
  assert.equal(await t.locator('[onerror]').count(), 0);
  assert.match(await t.locator('.msg.user').last().innerText(), /<img src=x onerror=alert\(1\)>/);
  assert.match(await t.locator('.msg.assistant').last().innerText(), /<script>alert\(2\)<\/script>/);
  await t.locator('.msg.assistant').last().locator('a').first().click({ trial: true }).catch(() => {});
  assert.deepEqual(p.dialogs, [], 'no dialog was raised');
  await p.context().close();
});

test('a reload mid-answer shows the answer once, continues it live, and it completes', async () => {
  const p = await page();
  // Every change of the page is checked: at no moment two answer bubbles, a cut-off mark,
  // or an item the page cannot show.
  await p.addInitScript(() => {
    window.seen = { answers: 0, interrupted: false, unreadable: false };
    new MutationObserver(() => {
      const t = document.getElementById('transcript');
      if (!t) return;
      window.seen.answers = Math.max(window.seen.answers, t.querySelectorAll('.msg.assistant').length);
      window.seen.interrupted ||= !!t.querySelector('.msg.interrupted') || /cut off/.test(t.textContent);
      window.seen.unreadable ||= !!t.querySelector('.unreadable');
    }).observe(document, { childList: true, subtree: true, characterData: true });
  });
  await p.goto(h.base + '/');
  // ~9 s of answer; its first checkpoint is written after 2 s.
  const words = Array.from({ length: 60 }, (_, i) => 'slow' + i).join(' ');
  await mock({ kind: 'stream', text: words, delay_ms: 150 });
  await ask(p, 'take your time');
  await p.waitForSelector('.msg.assistant.streaming >> text=slow2', { timeout: 15000 });
  const id = new URL(p.url()).pathname.split('/').pop();
  // Reload once the running attempt has a checkpoint (about 2-3 s in), as a reader would.
  for (const until = Date.now() + 15000; ;) {
    const { events } = await (await fetch(h.base + '/v1/sessions/' + id + '/events')).json();
    if (events.some((e) => e.kind === 'pending_state')) break;
    assert.ok(Date.now() < until, 'no checkpoint was written');
    await new Promise((ok) => setTimeout(ok, 50));
  }
  const { items } = await (await fetch(h.base + '/v1/sessions/' + id)).json();
  assert.deepEqual(items.map((i) => i.kind), ['user', 'streaming'], 'the API shows the running answer as streaming');
  await p.reload();
  await p.waitForSelector('.msg.assistant.streaming >> text=slow0');
  // Continued live: the same bubble grows past what the checkpoint held.
  const last = items[1].text.trim().split(' ').pop();
  const next = 'slow' + (Number(last.slice(4)) + 3);
  await p.waitForSelector('.msg.assistant.streaming >> text=' + next, { timeout: 15000 });
  assert.equal(await p.locator('.msg.assistant').count(), 1, 'one answer bubble while it streams');
  await p.waitForSelector('.msg.assistant:not(.streaming) >> text=slow59', { timeout: 20000 });
  await p.waitForFunction(() => document.querySelector('#stop').hidden);
  const answers = p.locator('.msg.assistant');
  assert.equal(await answers.count(), 1, 'one answer bubble when it completes');
  assert.equal((await answers.locator('.md').innerText()).trim(), words, 'the whole text, once');
  const seen = await p.evaluate(() => window.seen);
  assert.deepEqual(seen, { answers: 1, interrupted: false, unreadable: false }, 'never a second copy, a cut-off mark or an unknown item');
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('screenshots of the main screen, light and dark', async () => {
  mkdirSync(shots, { recursive: true });
  for (const scheme of ['light', 'dark']) {
    const p = await page(scheme);
    await p.goto(h.base + '/sessions/01930000-0000-7000-8000-000000000001');
    await p.waitForSelector('details.compaction');
    await p.click('details.compaction summary');
    await p.click('#toggle-context');
    await p.waitForSelector('#context-body .bar');
    await p.screenshot({ path: join(shots, `ui-${scheme}.png`) });
    await p.context().close();
  }
});
