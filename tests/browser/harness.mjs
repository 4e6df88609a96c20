// Shared by the browser tests: starts mock_llm and brain (on a fresh database, optionally
// seeded by `brain sessions import`) for one test file, and opens pages in headless Chromium.
import { before, after } from 'node:test';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const root = resolve(import.meta.dirname, '..', '..');
const target = process.env.CARGO_TARGET_DIR || join(root, 'target');
export const brainBin = process.env.BRAIN_BIN || join(target, 'debug', 'brain');
const mockBin = process.env.MOCK_BIN || join(target, 'debug', 'examples', 'mock_llm');
export const shots = process.env.SCREENSHOT_DIR || join(target, 'screenshots');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

function firstLine(child) {
  return new Promise((ok, fail) => {
    const rl = createInterface({ input: child.stdout });
    rl.once('line', ok);
    child.once('exit', (code) => fail(new Error('exited with ' + code)));
  });
}

/// One brain + mock_llm + Chromium for the calling test file. `seed` is a list of JSONL
/// lines imported before the server starts; `serveArgs` are added to `brain serve`;
/// `providerUrl` replaces the mock as brain's provider (e.g. a closed port: no provider).
/// Returns an object whose fields (`base`, `mockUrl`, `db`, `browser`) are set in `before`.
export function harness({ seed = [], serveArgs = [], providerUrl = null } = {}) {
  const h = { children: [] };
  const start = async (bin, args) => {
    const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    h.children.push(child);
    return firstLine(child);
  };
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'brain-ui-'));
    h.dir = dir;
    h.db = join(dir, 'brain.db');
    if (seed.length) {
      const seedFile = join(dir, 'seed.jsonl');
      writeFileSync(seedFile, seed.join('\n') + '\n');
      execFileSync(brainBin, ['--db', h.db, 'sessions', 'import', seedFile]);
    }
    h.mockUrl = (await start(mockBin, ['--port', '0'])).split(' ').pop();
    const line = await start(brainBin, ['--db', h.db, 'serve', '--listen', '127.0.0.1:0', '--provider-url', providerUrl || h.mockUrl, '--distill', 'off', ...serveArgs]);
    h.base = line.split(' ')[2];
    h.browser = await chromium.launch({
      executablePath: chromiumPath,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });
  after(async () => {
    if (h.browser) await h.browser.close();
    for (const c of h.children) c.kill('SIGKILL');
  });
  /// Scripts the mock's next answer (see examples/mock_llm.rs).
  h.mock = async (step) => {
    await fetch(h.mockUrl.replace(/\/v1$/, '') + '/_mock/script', { method: 'POST', body: JSON.stringify(step) });
  };
  /// A fresh browser context and page; dialogs are recorded and dismissed, page errors kept.
  h.page = async (colorScheme = 'light', viewport = { width: 1280, height: 800 }, options = {}) => {
    const context = await h.browser.newContext({ colorScheme, viewport, ...options });
    const p = await context.newPage();
    p.dialogs = [];
    p.on('dialog', (d) => { p.dialogs.push(d.message()); d.dismiss(); });
    p.on('pageerror', (e) => { p.errors = (p.errors || []).concat(String(e)); });
    return p;
  };
  return h;
}

/// One JSONL line of this project's export format.
export function line(sessionId, seq, kind, payload, createdAt) {
  return JSON.stringify({ session_id: sessionId, seq, kind, payload, created_at: createdAt });
}

/// Types a message and sends it with Enter.
export async function ask(p, text) {
  await p.fill('#message', text);
  await p.press('#message', 'Enter');
}
