// Edit, regenerate and fork in the web UI (SPEC §11, §14): an edited message's versions and
// a turn's attempts paged `‹ n/m ›` (newest first shown, earlier ones kept), the model's
// context without the abandoned branch, "Branch from here", a refused edit, hostile text in
// an edit, links into an earlier version, and the phone layout.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { harness, ask, shots } from './harness.mjs';

const h = harness();
const PHONE = [{ width: 390, height: 844 }, { isMobile: true, hasTouch: true, deviceScaleFactor: 2 }];
const HOSTILE = 'second, edited <img src=x onerror="window.pwned=1"><script>window.pwned=2</script>';

const get = async (path) => (await fetch(h.base + path)).json();
const sessionId = (p) => new URL(p.url()).pathname.split('/').pop();
// Whether a message's action is shown (hidden ones are transparent and take no taps).
const shownAction = (loc) => loc.evaluate((b) => getComputedStyle(b.parentElement).opacity === '1' && !b.hidden);

// Waits for an answer to `question` to be shown, saved, and the page idle again.
async function answered(p, question) {
  await p.locator('.msg.assistant:not(.streaming)', { hasText: 'to: ' + question }).first().waitFor();
  await p.waitForFunction(() => !document.querySelector('#send').disabled && !document.querySelector('.msg.streaming'));
}

// The user message whose own text is exactly `text` (a `.user-text` inside it).
const userMsg = (p, text) => p.locator('.msg.user').filter({ has: p.locator('.user-text', { hasText: text }) });

// A three-turn session made in the page; its second message then edited (hostile text).
let edited = null;
async function editedSession() {
  if (edited) return edited;
  const p = await h.page();
  await p.goto(h.base + '/');
  for (const q of ['first message', 'second message', 'third message']) {
    await ask(p, q);
    await answered(p, q);
  }
  const id = sessionId(p);
  const second = userMsg(p, 'second message');
  // An earlier message's actions show on hover.
  await second.hover();
  await second.locator('.edit-message').click();
  const area = second.locator('textarea.edit-text');
  assert.equal(await area.inputValue(), 'second message', 'the edit starts from the text');
  await area.fill(HOSTILE);
  await second.locator('.edit-save').click();
  await answered(p, 'second, edited');
  edited = { p, id };
  return edited;
}

test('an edit: the later turn leaves the model context but stays an earlier version, paged ‹ n/m ›', async () => {
  const { p, id } = await editedSession();
  const context = await get('/v1/sessions/' + id + '/context');
  const sent = context.messages.map((m) => m.content).join('\n');
  assert.ok(!sent.includes('third message'), 'the third message left the context: ' + sent);
  assert.ok(!sent.includes('second message'), 'the old second message left the context');
  assert.ok(sent.includes('first message') && sent.includes(HOSTILE), 'the first and the edited second are there');

  const group = p.locator('.versions');
  assert.equal(await group.count(), 1, 'one version group');
  assert.equal(await group.locator('.pager-label').innerText(), '2/2', 'the newest version is shown');
  assert.equal(await userMsg(p, 'third message').count(), 1, 'the third message is still in the page');
  assert.equal(await userMsg(p, 'third message').isVisible(), false, 'but not shown with the newest version');
  assert.ok(await userMsg(p, 'second, edited').isVisible());

  await group.locator('.pager-prev').click();
  assert.equal(await group.locator('.pager-label').innerText(), '1/2');
  assert.ok(await userMsg(p, 'second message').isVisible(), 'the first version');
  assert.ok(await userMsg(p, 'third message').isVisible(), 'and the conversation that followed it');
  assert.ok(await group.locator('.panel-note').first().isVisible(), 'marked as an earlier version');
  assert.equal(await userMsg(p, 'second, edited').isVisible(), false);
  assert.equal(await p.locator('.msg.assistant', { hasText: 'to: second, edited' }).isVisible(), false, 'the newest version\'s answer is hidden meanwhile');
  assert.equal(await userMsg(p, 'second message').locator('.edit-message').evaluate((b) => b.hidden), true, 'an abandoned message has no edit');

  await group.locator('.pager-next').click();
  assert.equal(await group.locator('.pager-label').innerText(), '2/2');
  assert.ok(await p.locator('.msg.assistant', { hasText: 'to: second, edited' }).isVisible());
  assert.deepEqual(p.errors || [], []);
});

test('hostile text in an edited message stays text', async () => {
  const { p } = await editedSession();
  const msg = userMsg(p, 'second, edited');
  assert.equal(await msg.locator('.user-text').innerText(), HOSTILE);
  assert.equal(await p.locator('#transcript img, #transcript script').count(), 0, 'no element from the message');
  assert.equal(await p.evaluate(() => window.pwned), undefined);
});

test('the newest items carry the ones shown; a reload shows the same versions', async () => {
  const { id } = await editedSession();
  const p = await h.page();
  await p.goto(h.base + '/sessions/' + id);
  await p.waitForSelector('.versions .pager-label');
  assert.equal(await p.locator('.versions .pager-label').innerText(), '2/2');
  assert.equal(await userMsg(p, 'third message').isVisible(), false);
  await p.context().close();
});

test('a link into an earlier version switches the pager to it', async () => {
  const { id } = await editedSession();
  const { items } = await get('/v1/sessions/' + id);
  const third = items.find((i) => i.kind === 'user' && i.text === 'third message');
  assert.equal(third.abandoned, true, 'the API flags it');
  const p = await h.page();
  await p.goto(h.base + '/sessions/' + id + '#seq-' + third.seq);
  await p.waitForSelector('.msg.user.found');
  assert.equal(await p.locator('.versions .pager-label').innerText(), '1/2');
  assert.ok(await userMsg(p, 'third message').isVisible());
  // A search hit there says so, and opens it the same way.
  const q = await h.page();
  await q.goto(h.base + '/');
  await q.fill('#search', 'third');
  const hit = q.locator('.hit', { hasText: 'third message' }).first();
  await hit.waitFor();
  assert.match(await hit.innerText(), /earlier version/);
  await hit.click();
  await q.waitForSelector('.msg.user.found');
  assert.equal(await q.locator('.versions .pager-label').innerText(), '1/2');
  assert.ok(await userMsg(q, 'third message').isVisible());
  await q.context().close();
  await p.context().close();
});

test('Escape cancels an edit; an edit the server refuses says why, in place', async () => {
  const { id } = await editedSession();
  const p = await h.page();
  await p.goto(h.base + '/sessions/' + id);
  const first = userMsg(p, 'first message');
  // By keyboard: a hidden action is reachable and shows once focused.
  await first.locator('.edit-message').focus();
  assert.equal(await shownAction(first.locator('.edit-message')), true);
  await p.keyboard.press('Enter');
  const area = first.locator('textarea.edit-text');
  await area.waitFor();
  await area.fill('never sent');
  await area.press('Escape');
  assert.equal(await area.count(), 0, 'the edit box is gone');
  assert.equal(await first.locator('.user-text').innerText(), 'first message');

  // Another tab edits the first message meanwhile: this tab's edit of it is refused.
  const other = await h.page();
  await other.goto(h.base + '/sessions/' + id);
  await userMsg(p, 'first message').hover();
  await userMsg(p, 'first message').locator('.edit-message').click();
  await first.locator('textarea.edit-text').fill('a stale edit');
  await userMsg(other, 'first message').hover();
  await userMsg(other, 'first message').locator('.edit-message').click();
  await userMsg(other, 'first message').locator('textarea.edit-text').fill('first, edited elsewhere');
  await userMsg(other, 'first message').locator('.edit-save').click();
  await answered(other, 'first, edited elsewhere');
  await first.locator('.edit-save').click();
  const error = first.locator('.edit-error');
  await error.waitFor();
  assert.match(await error.innerText(), /cannot be edited/, 'the reason is shown');
  assert.equal(await first.locator('textarea.edit-text').inputValue(), 'a stale edit', 'the text is kept');
  // The refused edit left nothing behind.
  const { items } = await get('/v1/sessions/' + id);
  assert.ok(!items.some((i) => i.kind === 'user' && i.text === 'a stale edit'));
  await p.context().close();
  await other.context().close();
});

test('regenerate twice: the attempts are paged, 3/3 shown first, back to 1/3', async () => {
  const p = await h.page();
  await p.goto(h.base + '/');
  await ask(p, 'retry me');
  await answered(p, 'retry me');
  for (const n of [2, 3]) {
    // The newest answer shows its actions without a hover.
    await p.locator('.msg.assistant.newest:visible .regenerate').click();
    await p.locator('.attempts .pager-label', { hasText: n + '/' + n }).waitFor();
    await p.waitForFunction(() => !document.querySelector('#send').disabled && !document.querySelector('.msg.streaming'));
  }
  const group = p.locator('.attempts');
  assert.equal(await group.count(), 1);
  const shown = () => group.locator('.panel:not([hidden]) .msg.assistant .md').innerText();
  const third = await shown();
  await group.locator('.pager-prev').click();
  await group.locator('.pager-prev').click();
  assert.equal(await group.locator('.pager-label').innerText(), '1/3');
  const first = await shown();
  assert.notEqual(first, third, 'another attempt is shown');
  assert.equal(await group.locator('.pager-prev').isDisabled(), true);
  assert.equal(await p.locator('.msg.assistant:visible').count(), 1, 'one attempt at a time');
  // A link to the first attempt (as a search hit gives) after a reload shows it.
  const id = sessionId(p);
  const { items } = await get('/v1/sessions/' + id);
  const one = items.find((i) => i.kind === 'assistant' && i.attempt === 1);
  const q = await h.page();
  await q.goto(h.base + '/sessions/' + id + '#seq-' + one.seq);
  await q.waitForSelector('.msg.assistant.found');
  assert.equal(await q.locator('.attempts .pager-label').innerText(), '1/3');
  await q.context().close();
  await p.context().close();
});

test('Regenerate on an earlier answer sends its question again: a new version, the old one paged', async () => {
  const p = await h.page();
  await p.goto(h.base + '/');
  for (const q of ['alpha question', 'bravo question']) {
    await ask(p, q);
    await answered(p, q);
  }
  const id = sessionId(p);
  // Every answer has the control, the earlier one on hover, the newest always.
  assert.equal(await p.locator('.msg.assistant .regenerate').count(), 2);
  assert.equal(await shownAction(p.locator('.msg.assistant.newest .regenerate')), true);
  assert.equal(await shownAction(p.locator('.msg.assistant:not(.newest) .regenerate')), false);
  const first = p.locator('.msg.assistant', { hasText: 'to: alpha question' });
  await first.hover();
  await first.locator('.regenerate').click();
  await p.locator('.versions .pager-label', { hasText: '2/2' }).waitFor();
  await p.waitForFunction(() => !document.querySelector('#send').disabled && !document.querySelector('.msg.streaming'));
  const { items } = await get('/v1/sessions/' + id);
  const asked = items.filter((i) => i.kind === 'user').map((i) => [i.text, i.abandoned]);
  assert.deepEqual(asked, [['alpha question', true], ['bravo question', true], ['alpha question', false]]);
  assert.equal(items.filter((i) => i.kind === 'assistant' && !i.abandoned).length, 1, 'one answer in the branch the model sees');
  // The earlier version is one click back.
  await p.locator('.versions > .pager .pager-prev').click();
  await p.locator('.msg.user:visible', { hasText: 'bravo question' }).waitFor();
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('Branch from here opens the new session with the transcript through that item', async () => {
  const { p, id } = await editedSession();
  const answer = p.locator('.msg.assistant', { hasText: 'to: first message' });
  // An earlier answer's actions wait for the pointer: shown on hover, not before.
  assert.equal(await shownAction(answer.locator('.fork-here')), false, 'Branch from here is not on every item');
  await answer.hover();
  await answer.locator('.fork-here').click();
  await p.waitForFunction((old) => location.pathname.startsWith('/sessions/') && !location.pathname.endsWith(old), id);
  const fork = sessionId(p);
  await p.locator('.session-link.active').waitFor();
  assert.match(await p.locator('.session-link.active').innerText(), /\(fork\)/);
  await userMsg(p, 'first message').waitFor();
  assert.equal(await p.locator('.msg.user').count(), 1, 'only the first turn was copied');
  assert.equal(await p.locator('.msg.assistant').count(), 1);
  const { items } = await get('/v1/sessions/' + fork);
  assert.deepEqual(items.filter((i) => i.kind === 'user').map((i) => i.text), ['first message']);
  // The fork goes on by itself; the source is untouched.
  await ask(p, 'only in the fork');
  await answered(p, 'only in the fork');
  const source = await get('/v1/sessions/' + id);
  assert.ok(!source.items.some((i) => i.text === 'only in the fork'));
});

test('phone: the pagers and the edit controls fit; nothing scrolls sideways', async () => {
  const { id } = await editedSession();
  const p = await h.page('light', ...PHONE);
  await p.goto(h.base + '/sessions/' + id);
  await p.waitForSelector('.versions .pager-label');
  const vp = p.viewportSize();
  const inside = async (loc, what) => {
    await loc.scrollIntoViewIfNeeded();
    const b = await loc.boundingBox();
    assert.ok(b && b.x >= 0 && b.x + b.width <= vp.width + 0.5, `${what} fits: ${JSON.stringify(b)}`);
  };
  const sideways = async (where) => {
    const { sw, iw } = await p.evaluate(() => ({ sw: document.documentElement.scrollWidth, iw: window.innerWidth }));
    assert.ok(sw <= iw, `${where}: ${sw} px wide in ${iw}`);
    const t = await p.evaluate(() => { const t = document.getElementById('transcript'); return t.scrollWidth - t.clientWidth; });
    assert.ok(t <= 0, `${where}: the transcript scrolls sideways by ${t} px`);
  };
  // Two groups by now (the first message was edited in another tab): the outer one shows.
  const group = p.locator('.versions').first();
  await inside(group.locator(':scope > .pager'), 'the version pager');
  for (const b of await group.locator(':scope > .pager button').all()) {
    const box = await b.boundingBox();
    assert.ok(box.width >= 32 && box.height >= 24, 'pager buttons are finger-sized: ' + JSON.stringify(box));
  }
  await sideways('session with versions');
  const msg = p.locator('.msg.user:visible').last();
  await inside(msg.locator('.edit-message'), 'the edit button');
  await inside(msg.locator('.msg-actions .fork-here'), 'the branch button');
  await msg.locator('.edit-message').click();
  await inside(msg.locator('textarea.edit-text'), 'the edit box');
  await inside(msg.locator('.edit-save'), 'Save & send');
  await inside(msg.locator('.edit-cancel'), 'Cancel');
  await sideways('editing');
  mkdirSync(shots, { recursive: true });
  await p.screenshot({ path: join(shots, 'versions-phone-edit.png') });
  await msg.locator('.edit-cancel').click();
  await group.locator(':scope > .pager .pager-prev').click();
  await sideways('an earlier version');
  // A phone has no hover: a tap on an earlier message shows its actions.
  const earlier = p.locator('.msg.user:visible:not(.newest):has(.fork-here)').first();
  assert.equal(await shownAction(earlier.locator('.fork-here')), false);
  await earlier.locator('.user-text').tap();
  assert.equal(await shownAction(earlier.locator('.fork-here')), true);
  await inside(earlier.locator('.msg-actions .fork-here'), 'the branch button after a tap');
  await p.screenshot({ path: join(shots, 'versions-phone-earlier.png') });
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});
