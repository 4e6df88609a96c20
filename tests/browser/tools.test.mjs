// Tools as a person meets them in the web UI (SPEC §11, §13): the real server-filesystem on
// a temp dir, mock_llm asking for calls. Each call shows inline with its status; a question
// waits with Allow / Always / Deny, survives a reload (shown once), and its answer is kept;
// hostile arguments and results stay text; the question fits a phone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { harness, ask, shots } from './harness.mjs';

const root = resolve(import.meta.dirname, '..', '..');
const fsServer = join(root, 'tests/mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js');
const dir = realpathSync(mkdtempSync(join(tmpdir(), 'brain-ui-tools-')));
const config = join(dir, 'mcp.json');
writeFileSync(config, JSON.stringify({ mcpServers: { fs: { command: 'node', args: [fsServer, dir] } } }));

const skip = existsSync(fsServer) ? false : 'server-filesystem is missing: run .ci/mcp-deps';
const h = harness({ serveArgs: ['--mcp-config', config] });

const PHONE = [{ width: 390, height: 844 }, { isMobile: true, hasTouch: true, deviceScaleFactor: 2 }];

const write = (id, path, content) => ({ id, name: 'fs__write_file', arguments: JSON.stringify({ path, content }) });
// The model's first step asks for `calls`; its second (unscripted) quotes the results.
const step = (calls, text = 'On it.') => h.mock({ kind: 'stream', text, tool_calls: calls });
// The answer is over and saved: the transcript was re-read (no live bubble left).
const answered = (p, n = 1) => p.waitForFunction((n) => document.querySelectorAll('#transcript .msg.assistant:not(.streaming):not(.step)').length >= n
  && !document.querySelector('#transcript .msg.streaming'), n, { timeout: 30000 });

test('a call that asks: Allow runs it, the file is written, the call shows ok and opens to its result', { skip }, async () => {
  const p = await h.page();
  await p.goto(h.base + '/');
  const file = join(dir, 'allowed.txt');
  await step([write('call_allow', file, 'hello, disk')]);
  await ask(p, 'write a note');
  await p.waitForSelector('.permission.pending', { timeout: 30000 });
  const buttons = await p.$$eval('.permission.pending button', (bs) => bs.map((b) => b.textContent));
  assert.deepEqual(buttons, ['Allow', 'Always', 'Deny']);
  assert.equal(await p.textContent('.permission.pending .permission-q'), 'Allow fs__write_file?');
  // The question shows the arguments as the tool gets them (parsed; keys in order).
  const shown = await p.textContent('.permission.pending .permission-args');
  assert.match(shown, /"content": "hello, disk"/);
  assert.match(shown, /"path": ".*allowed\.txt"/);
  assert.equal(await p.textContent('#status'), 'Waiting for your answer…');
  assert.equal(await p.textContent('.tool .tool-status'), 'waiting for your answer');
  assert.ok(!existsSync(file), 'nothing runs before the answer');
  await p.click('.permission.pending button.allow-once');
  await answered(p);
  assert.equal(readFileSync(file, 'utf8'), 'hello, disk');
  assert.equal(await p.textContent('.permission .permission-answer'), 'You allowed this call.');
  assert.equal(await p.textContent('.tool .tool-status'), 'ok');
  assert.match(await p.textContent('.tool .tool-time'), /^\d+(\.\d)? m?s$/);
  assert.equal(await p.isVisible('.tool pre.tool-result'), false, 'the result opens on click');
  await p.click('.tool summary');
  assert.match(await p.textContent('.tool pre.tool-result'), /Successfully wrote to .*allowed\.txt/);
  assert.match(await p.textContent('.tool pre.tool-full-args'), /"content": "hello, disk"/);
  await p.screenshot({ path: join(shots, 'tool-call-open.png') });
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

// What the transcript shows, in order: each item's kind, and a step's or answer's text.
// (Rows shown from live frames have no `data-kind` yet.)
const order = (p) => p.$$eval('#transcript .msg, #transcript .tool, #transcript .permission', (ns) => ns.filter((n) => !n.closest('[hidden]'))
  .map((n) => {
    const text = () => ': ' + n.querySelector('.md').textContent.trim();
    if (n.matches('.msg.step')) return 'step' + text();
    if (n.matches('.msg.assistant')) return 'assistant' + text();
    return ['user', 'permission', 'tool'].find((k) => n.matches('.' + k)) || n.className;
  }));

test('text written before a call is shown before it: live, once saved, and after a reload', { skip }, async () => {
  const p = await h.page();
  await p.goto(h.base + '/');
  await step([write('call_order', join(dir, 'order.txt'), 'in order')], 'First I write the note.');
  await ask(p, 'write it, then tell me');
  await p.waitForSelector('.permission.pending', { timeout: 30000 });
  // Live: the step's text stays above its call and the question, not in the answer below.
  assert.deepEqual((await order(p)).slice(0, 4), ['user', 'step: First I write the note.', 'permission', 'tool']);
  await p.click('.permission.pending button.allow-once');
  await answered(p);
  const saved = await order(p);
  assert.deepEqual(saved.slice(0, 4), ['user', 'step: First I write the note.', 'permission', 'tool']);
  assert.equal(saved.length, 5);
  assert.match(saved[4], /^assistant: /);
  assert.ok(!saved[4].includes('First I write'), 'the answer does not repeat the step: ' + saved[4]);
  await p.reload();
  await p.waitForSelector('.msg.assistant:not(.step)');
  assert.deepEqual(await order(p), saved);
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('a reload while the question waits shows it once, and Deny works', { skip }, async () => {
  const p = await h.page();
  await p.goto(h.base + '/');
  const file = join(dir, 'denied.txt');
  await step([write('call_deny', file, 'never')]);
  await ask(p, 'write something I will refuse');
  await p.waitForSelector('.permission.pending', { timeout: 30000 });
  await p.reload();
  // The question from the transcript, then /live's replay of the call and the question.
  await p.waitForSelector('.permission.pending');
  await p.waitForSelector('.tool[data-status="asking"]', { timeout: 30000 });
  assert.equal(await p.locator('.permission').count(), 1, 'one question, not the item plus the replayed frame');
  assert.equal(await p.locator('.tool').count(), 1);
  // The step's text, saved before its call ran, is above it once (the replay adds none).
  assert.deepEqual((await order(p)).slice(0, 4), ['user', 'step: On it.', 'permission', 'tool']);
  assert.equal(await p.locator('.msg.step').count(), 1);
  assert.equal(await p.textContent('#status'), 'Waiting for your answer…');
  await p.click('.permission.pending button.deny');
  await answered(p);
  assert.ok(!existsSync(file), 'a denied call does not run');
  assert.equal(await p.locator('.permission').count(), 1);
  assert.equal(await p.textContent('.permission .permission-answer'), 'You denied this call.');
  assert.equal(await p.textContent('.tool .tool-status'), 'denied');
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('Always: the next call of that tool in the session does not ask', { skip }, async () => {
  const p = await h.page();
  await p.goto(h.base + '/');
  await step([write('call_first', join(dir, 'first.txt'), 'one')]);
  await ask(p, 'first write');
  await p.waitForSelector('.permission.pending button.allow-always', { timeout: 30000 });
  await p.click('.permission.pending button.allow-always');
  await answered(p, 1);
  assert.equal(await p.textContent('.permission .permission-answer'), 'You allowed this tool for the rest of the session.');
  await step([write('call_second', join(dir, 'second.txt'), 'two')]);
  await ask(p, 'second write');
  await answered(p, 2);
  assert.equal(readFileSync(join(dir, 'second.txt'), 'utf8'), 'two');
  assert.equal(await p.locator('.permission').count(), 1, 'the second call was not asked about');
  assert.deepEqual(await p.$$eval('.tool .tool-status', (s) => s.map((x) => x.textContent)), ['ok', 'ok']);
  // A reload shows the same: who decided, and both calls.
  await p.reload();
  await p.waitForSelector('.tool >> nth=1');
  assert.equal(await p.textContent('.permission .permission-answer'), 'You allowed this tool for the rest of the session.');
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('hostile arguments, names and results stay text', { skip }, async () => {
  const p = await h.page();
  await p.goto(h.base + '/');
  const hostile = '<img src=x onerror="window.__pwned=1">';
  const file = join(dir, '<img src=x onerror=window.__pwned=2>.txt');
  await step([
    write('call_h1', file, hostile + '<script>window.__pwned=3</script>'),
    { id: 'call_h2', name: 'fs__read_text_file', arguments: JSON.stringify({ path: file }) },
    { id: 'call_h3', name: '<img src=x onerror=window.__pwned=4>', arguments: '{"x": "<b>bold</b>"}' },
  ]);
  await ask(p, 'be hostile');
  await p.waitForSelector('.permission.pending', { timeout: 30000 });
  assert.match(await p.textContent('.permission.pending .permission-args'), /<img src=x onerror=window\.__pwned=2>\.txt/);
  await p.click('.permission.pending button.allow-once');
  await answered(p);
  await p.$$eval('.tool', (ds) => ds.forEach((d) => { d.open = true; }));
  const statuses = await p.$$eval('.tool .tool-status', (s) => s.map((x) => x.textContent));
  assert.deepEqual(statuses, ['ok', 'ok', 'error']);
  const results = await p.$$eval('.tool pre.tool-result', (s) => s.map((x) => x.textContent));
  assert.ok(results[1].includes(hostile + '<script>'), 'the file read back, as text: ' + results[1]);
  assert.match(results[2], /there is no tool named/);
  const names = await p.$$eval('.tool .tool-name', (s) => s.map((x) => x.textContent));
  assert.equal(names[2], '<img src=x onerror=window.__pwned=4>');
  assert.equal(await p.locator('#transcript img, #transcript script, #transcript b').count(), 0, 'no element from the model or the tool');
  assert.equal(await p.evaluate(() => window.__pwned), undefined);
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('a waiting question on a phone: the call and three buttons, big enough, nothing sideways', { skip }, async () => {
  const p = await h.page('light', ...PHONE);
  await p.goto(h.base + '/');
  const deep = join(dir, 'a-rather-long-directory-name-for-a-phone', 'and-a-long-file-name-too.txt');
  await step([write('call_phone', deep, 'x'.repeat(300))], 'I will write the file you asked for.');
  // A phone has no Shift+Enter: Send sends.
  await p.fill('#message', 'write a long one');
  await p.click('#send');
  await p.waitForSelector('.permission.pending', { timeout: 30000 });
  const boxes = await p.$$eval('.permission.pending button', (bs) => bs.map((b) => b.getBoundingClientRect().height));
  assert.equal(boxes.length, 3);
  for (const height of boxes) assert.ok(height >= 40, 'buttons at least 40 px tall: ' + boxes);
  const { sw, iw } = await p.evaluate(() => ({ sw: document.documentElement.scrollWidth, iw: window.innerWidth }));
  assert.ok(sw <= iw, 'nothing sideways: ' + sw + ' > ' + iw);
  const t = await p.evaluate(() => { const t = document.getElementById('transcript'); return { sw: t.scrollWidth, cw: t.clientWidth }; });
  assert.ok(t.sw <= t.cw, 'the transcript does not scroll sideways: ' + JSON.stringify(t));
  await p.screenshot({ path: join(shots, 'phone-tool-question.png') });
  await p.click('.permission.pending button.deny');
  await answered(p);
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});
