// The sidebar's Import button (issue 34, item 8): a file picked in the chooser (set with
// CDP's DOM.setFileInputFiles, which playwright's setFiles uses) is sent to the running
// server with progress, its report shows, and the new sessions join the list, at 1280 px
// and on a phone (390 px); a truncated file shows its error and adds nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { harness, shots } from './harness.mjs';

const h = harness();
const fixtures = resolve(import.meta.dirname, '..', 'fixtures', 'import');

// Clicks Import and picks `path` in the file chooser it opens.
async function importFile(p, path) {
  const [chooser] = await Promise.all([p.waitForEvent('filechooser'), p.click('#import')]);
  await chooser.setFiles(path);
}

test('Import: a ChatGPT export is sent, its report shows and its sessions join the list', async () => {
  mkdirSync(shots, { recursive: true });
  const p = await h.page();
  await p.goto(h.base + '/');
  await p.waitForSelector('#import');
  await importFile(p, join(fixtures, 'chatgpt.json'));
  const report = p.locator('#import-status .import-text', { hasText: 'Imported 2 conversations from chatgpt' });
  await report.waitFor({ state: 'visible' });
  assert.match(await report.innerText(), /2 created, 0 extended, 0 unchanged, 0 forked; 10 messages/);
  await p.locator('#session-list .session-link', { hasText: 'Branches & tools ☕' }).waitFor();
  await p.locator('#session-list .session-link', { hasText: 'Only pictures, no times' }).waitFor();
  await p.screenshot({ path: join(shots, 'import-report.png') });
  // Again: nothing new, and it says so.
  await importFile(p, join(fixtures, 'chatgpt.json'));
  await p.locator('#import-status .import-text', { hasText: '0 created, 0 extended, 2 unchanged' }).waitFor();
  assert.equal(await p.locator('#import').isDisabled(), false, 'the button is back once the import ends');
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});

test('Import on a phone: from the drawer, a Claude export; a truncated file says so', async () => {
  const p = await h.page('light', { width: 390, height: 844 }, { isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await p.goto(h.base + '/');
  await p.click('#menu-toggle');
  await p.locator('#import').waitFor({ state: 'visible' });
  const box = await p.locator('#import').boundingBox();
  assert.ok(box.height >= 40 && box.x + box.width <= 390, `Import is ${JSON.stringify(box)}`);
  await importFile(p, join(fixtures, 'claude.json'));
  await p.locator('#import-status .import-text', { hasText: 'from claude: 2 created' }).waitFor({ state: 'visible' });
  await p.locator('#session-list .session-link', { hasText: 'Naming a boat ⛵' }).waitFor();
  const { sw, iw } = await p.evaluate(() => ({ sw: document.documentElement.scrollWidth, iw: window.innerWidth }));
  assert.ok(sw <= iw, `the page is ${sw} px wide in a ${iw} px viewport`);
  await p.screenshot({ path: join(shots, 'phone-import-report.png') });

  const text = readFileSync(join(fixtures, 'chatgpt.json'), 'utf8');
  const cut = join(h.dir, 'cut.json');
  writeFileSync(cut, text.slice(0, text.indexOf('Only pictures') + 40));
  const before = await p.locator('#session-list .session-link').count();
  await importFile(p, cut);
  const error = p.locator('#import-status.error .import-text', { hasText: 'the file is truncated' });
  await error.waitFor({ state: 'visible' });
  assert.match(await error.innerText(), /nothing was imported/);
  await p.screenshot({ path: join(shots, 'phone-import-truncated.png') });
  assert.equal(await p.locator('#session-list .session-link').count(), before, 'nothing joined the list');
  await p.click('#import-status .import-close');
  assert.equal(await p.locator('#import-status').isVisible(), false);
  assert.deepEqual(p.errors || [], []);
  await p.context().close();
});
