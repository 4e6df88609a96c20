// The web UI on a phone (390×844, touch) and the state a new user sees in the first minute:
// the drawer, the action menu, the context sheet, nothing scrolling sideways, a new chat in
// the list at once, the automatic title in the header, and the first-run banner.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { harness, ask, line, shots } from './harness.mjs';

const WIDE = '01930000-0000-7000-8000-0000000000a1';
const PLAIN = '01930000-0000-7000-8000-0000000000a2';
const at = (s) => `2026-11-30T10:00:${String(s).padStart(2, '0')}.000000Z`;

function seed() {
  const cols = Array.from({ length: 12 }, (_, i) => 'column number ' + i);
  const table = '| ' + cols.join(' | ') + ' |\n|' + cols.map(() => '---').join('|') + '|\n| ' + cols.map((_, i) => 'value' + i).join(' | ') + ' |';
  const code = '```js\nconst averyveryverylongidentifier = [' + Array.from({ length: 40 }, (_, i) => i * 1000).join(', ') + '];\n```';
  const longWord = 'x'.repeat(160);
  const answer = 'Here is the table:\n\n' + table + '\n\nAnd the code:\n\n' + code + '\n\nA long word: ' + longWord;
  const turn = (id, title, question, text) => [
    ['session_started', { title, system: 'You are a test.' }],
    ['user_message', { text: question }],
    ['assistant_turn', { turn: 2, attempt: 1, text, provider: 'mock', model: 'm', finish_reason: 'stop', usage: {}, duration_ms: 5 }],
  ].map(([kind, payload], i) => line(id, i + 1, kind, payload, at(i)));
  return [
    ...turn(WIDE, 'Wide table session', 'Show me a wide table', answer),
    ...turn(PLAIN, 'Plain session about ferries', 'Where is the ferry?', 'At **pier 4**.'),
  ];
}

const h = harness({ seed: seed() });
const PHONE = [{ width: 390, height: 844 }, { isMobile: true, hasTouch: true, deviceScaleFactor: 2 }];
const phone = (scheme = 'light') => h.page(scheme, ...PHONE);

// Nothing on the page scrolls sideways.
async function noSideways(p, where) {
  const { sw, iw } = await p.evaluate(() => ({ sw: document.documentElement.scrollWidth, iw: window.innerWidth }));
  assert.ok(sw <= iw, `${where}: the page is ${sw} px wide in a ${iw} px viewport`);
}

// The element's box lies inside the viewport, with a non-zero size.
async function inViewport(p, selector) {
  const box = await p.locator(selector).boundingBox();
  assert.ok(box && box.width > 0 && box.height > 0, selector + ' has a size');
  const vp = p.viewportSize();
  assert.ok(box.x >= 0 && box.y >= 0 && box.x + box.width <= vp.width + 0.5 && box.y + box.height <= vp.height + 0.5,
    `${selector} is inside the viewport: ${JSON.stringify(box)}`);
  return box;
}

test('phone: the empty screen fits, the title shows, the composer is on screen, targets are finger-sized', async () => {
  const p = await phone();
  await p.goto(h.base + '/');
  await p.waitForSelector('#session-list .session-link', { state: 'attached' });
  await noSideways(p, 'empty screen');
  assert.equal(await p.locator('#provider-banner').isVisible(), false, 'no first-run banner when the provider answers');
  const title = await inViewport(p, '#session-title');
  assert.ok(title.width > 40, 'the title has room');
  await inViewport(p, '#message');
  await inViewport(p, '#send');
  for (const sel of ['#menu-toggle', '#more', '#send']) {
    const box = await p.locator(sel).boundingBox();
    assert.ok(box.height >= 40 && box.width >= 40, `${sel} is ${box.width}×${box.height}`);
  }
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('phone: a wide table and a long code line scroll in their own box, not the page', async () => {
  const p = await phone();
  await p.goto(h.base + '/sessions/' + WIDE);
  await p.waitForSelector('.msg.assistant .md table');
  await noSideways(p, 'session with a wide table');
  const inner = await p.evaluate(() => {
    const t = document.querySelector('.md table');
    const pre = document.querySelector('.md pre');
    return { table: t.scrollWidth > t.clientWidth, pre: pre.scrollWidth > pre.clientWidth };
  });
  assert.deepEqual(inner, { table: true, pre: true }, 'the table and the code scroll inside their boxes');
  const title = await inViewport(p, '#session-title');
  assert.ok(title.width > 40);
  assert.equal(await p.locator('#session-title').innerText(), 'Wide table session');
  await p.context().close();
});

test('phone: the drawer lists the sessions and closes on a choice', async () => {
  mkdirSync(shots, { recursive: true });
  const p = await phone();
  await p.goto(h.base + '/');
  assert.equal(await p.locator('#sidebar').isVisible(), false, 'the list is a closed drawer');
  await p.click('#menu-toggle');
  const link = p.locator('#session-list .session-link', { hasText: 'Plain session about ferries' });
  await link.waitFor({ state: 'visible' });
  await p.waitForFunction(() => { const r = document.getElementById('sidebar').getBoundingClientRect(); return r.left >= 0 && r.width > 200; });
  assert.equal(await p.locator('#scrim').isVisible(), true);
  await p.screenshot({ path: join(shots, 'phone-drawer.png') });
  await link.click();
  await p.waitForSelector('.msg.assistant >> text=pier 4');
  await p.waitForFunction(() => getComputedStyle(document.getElementById('sidebar')).visibility === 'hidden');
  assert.equal(await p.locator('#scrim').isVisible(), false);
  assert.equal(await p.locator('#session-title').innerText(), 'Plain session about ferries');
  // Escape closes it too, and focus goes back to the button that opened it.
  await p.click('#menu-toggle');
  await link.waitFor({ state: 'visible' });
  await p.keyboard.press('Escape');
  await p.waitForFunction(() => !document.body.classList.contains('drawer-open'));
  assert.equal(await p.evaluate(() => document.activeElement.id), 'menu-toggle');
  await p.context().close();
});

test('phone: the menu holds the actions and the context sheet opens over the transcript', async () => {
  const p = await phone();
  await p.goto(h.base + '/sessions/' + PLAIN);
  await p.waitForSelector('.msg.assistant >> text=pier 4');
  assert.equal(await p.locator('#toggle-context').isVisible(), false, 'actions are folded');
  await p.click('#more');
  for (const sel of ['#model', '#archive', '#delete', '#toggle-context']) {
    await inViewport(p, sel);
    const box = await p.locator(sel).boundingBox();
    assert.ok(box.height >= 40, `${sel} is ${box.height} px high`);
  }
  mkdirSync(shots, { recursive: true });
  await p.screenshot({ path: join(shots, 'phone-menu.png') });
  await p.click('#toggle-context');
  await p.waitForSelector('#context-body .bar');
  assert.equal(await p.locator('#actions').isVisible(), false, 'the menu closed');
  const sheet = await inViewport(p, '#context-panel');
  const transcript = await p.locator('#transcript').boundingBox();
  assert.ok(sheet.y < transcript.y + transcript.height && sheet.width >= 380, 'the sheet lies over the transcript, full width');
  // The sheet is on top: the point at its middle belongs to it.
  const onTop = await p.evaluate(([x, y]) => !!document.elementFromPoint(x, y).closest('#context-panel'), [sheet.x + sheet.width / 2, sheet.y + 20]);
  assert.ok(onTop, 'nothing covers the sheet');
  await noSideways(p, 'context sheet');
  await p.screenshot({ path: join(shots, 'phone-sheet.png') });
  await p.click('#close-context');
  await p.waitForSelector('#context-panel', { state: 'hidden' });
  await p.context().close();
});

test('phone: send a message and read the answer, composer on screen', async () => {
  const p = await phone();
  await p.goto(h.base + '/');
  // A phone has no Shift+Enter: Enter is a new line there, and Send sends.
  await p.fill('#message', 'two');
  await p.press('#message', 'Enter');
  assert.equal(await p.inputValue('#message'), 'two\n');
  await p.fill('#message', 'hello from a phone');
  await p.click('#send');
  await p.waitForSelector('.msg.assistant:not(.streaming) >> text=to: hello from a phone', { timeout: 15000 });
  await inViewport(p, '#message');
  await inViewport(p, '#send');
  await noSideways(p, 'after an answer');
  // An on-screen keyboard takes half the screen: the composer stays above it.
  await p.focus('#message');
  await p.setViewportSize({ width: 390, height: 420 });
  await p.waitForFunction(() => document.getElementById('send').getBoundingClientRect().bottom <= window.visualViewport.height);
  await inViewport(p, '#message');
  await inViewport(p, '#session-title');
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('desktop: a new chat is in the list at once, and the header follows its automatic title', async () => {
  const p = await h.page();
  await p.goto(h.base + '/');
  await p.waitForSelector('#session-list .session-link');
  // The title arrives seconds after the answer, as from a busy local model.
  await fetch(h.mockUrl.replace(/\/v1$/, '') + '/_mock/defaults', { method: 'POST', body: JSON.stringify({ title: { text: 'Lighthouse Keeping', headers_delay_ms: 2500 } }) });
  await h.mock({ kind: 'stream', text: Array.from({ length: 20 }, (_, i) => 'word' + i).join(' '), delay_ms: 150 });
  await ask(p, 'tell me about lighthouses');
  await p.waitForSelector('.msg.assistant.streaming >> text=word1', { timeout: 15000 });
  const id = new URL(p.url()).pathname.split('/').pop();
  const entry = p.locator(`.session-link.active[data-id="${id}"]`);
  await entry.waitFor({ timeout: 5000 });
  assert.equal(await p.locator('.msg.assistant.streaming').count(), 1, 'the entry is there while the answer streams');
  await p.waitForSelector('.msg.assistant:not(.streaming) >> text=word19', { timeout: 15000 });
  await p.waitForFunction(() => document.getElementById('session-title').textContent === 'Lighthouse Keeping', null, { timeout: 25000 });
  await p.waitForFunction(() => document.title.startsWith('Lighthouse Keeping'));
  await p.waitForSelector(`.session-link.active[data-id="${id}"] >> text=Lighthouse Keeping`);
  // Restore the mock's default titles for later tests.
  await fetch(h.mockUrl.replace(/\/v1$/, '') + '/_mock/defaults', { method: 'POST', body: JSON.stringify({ title: { text: 'Mock title' } }) });
  await p.context().close();
});

test('desktop: an old status clears on the next action; the favicon is served', async () => {
  const p = await h.page();
  await p.goto(h.base + '/sessions/' + PLAIN);
  await p.waitForSelector('.msg.assistant >> text=pier 4');
  await h.mock({ kind: 'stream', status: 500, text: 'boom' });
  await ask(p, 'this one fails');
  await p.waitForFunction(() => document.getElementById('status').textContent.length > 0 && document.getElementById('stop').hidden, null, { timeout: 15000 });
  await p.click('#new-chat');
  await p.waitForFunction(() => document.getElementById('status').textContent === '');
  assert.equal(await p.locator('.session-link.active').count(), 0, 'no entry is highlighted for a new chat');
  await p.waitForSelector('#transcript .empty', { timeout: 5000 });
  const ico = await fetch(h.base + '/favicon.ico');
  assert.equal(ico.status, 200, 'the icon browsers ask for by default');
  const icon = await p.evaluate(() => document.querySelector('link[rel="icon"]').href);
  const res = await fetch(icon);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /image\/svg\+xml/);
  await p.context().close();
});

test('screenshots at desktop and phone size, light and dark', async () => {
  mkdirSync(shots, { recursive: true });
  for (const scheme of ['light', 'dark']) {
    const d = await h.page(scheme);
    await d.goto(h.base + '/sessions/' + WIDE);
    await d.waitForSelector('.md table');
    await d.click('#toggle-context');
    await d.waitForSelector('#context-body .bar');
    await d.screenshot({ path: join(shots, `desktop-${scheme}.png`) });
    await d.context().close();
    const p = await phone(scheme);
    await p.goto(h.base + '/sessions/' + WIDE);
    await p.waitForSelector('.md table');
    await p.screenshot({ path: join(shots, `phone-${scheme}.png`) });
    await p.context().close();
  }
});

// A second brain whose provider is a closed port: the first run of a new user.
const none = harness({ providerUrl: 'http://127.0.0.1:1/v1' });

test('first run with no provider: the empty screen explains --provider-url', async () => {
  for (const [name, size, opts] of [['desktop', { width: 1280, height: 800 }, {}], ['phone', ...PHONE]]) {
    const p = await none.page('light', size, opts);
    await p.goto(none.base + '/');
    const banner = p.locator('#provider-banner');
    await banner.waitFor({ state: 'visible', timeout: 15000 });
    const text = await banner.innerText();
    assert.match(text, /--provider-url/);
    assert.match(text, /llama-server/);
    for (const url of ['127.0.0.1:8080/v1', '127.0.0.1:11434/v1', '127.0.0.1:8000/v1', '127.0.0.1:1234/v1']) assert.ok(text.includes(url), url);
    const models = await (await fetch(none.base + '/v1/models')).json();
    assert.equal(models.provider.status, 'unreachable');
    assert.ok(text.includes(models.provider.url), 'the URL brain tried');
    assert.match(text, /No model server answered/);
    if (name === 'phone') await p.screenshot({ path: join(shots, 'phone-first-run.png') });
    // The picker's label is not cut off.
    if (name === 'phone') await p.click('#more');
    const cut = await p.evaluate(() => { const s = document.getElementById('model'); return s.scrollWidth > s.clientWidth; });
    assert.equal(cut, false, name + ': the model picker is not cut off');
    await noSideways(p, name + ' first run');
    await p.context().close();
  }
});
