// The open transcript's older pages: the newest page is shown first; earlier ones are
// fetched (`before_seq`, `more`) as the reader scrolls up and prepended without moving what
// is on screen. A link or search hit to an early item loads pages until it is present.
import { $, el } from './dom.js';
import { api } from './api.js';
import { itemElement } from './render.js';
import { flatten, regroup, showNode } from './versions.js';

const PAGE = 200;
// Start fetching the previous page this far before the reader reaches the top.
const AHEAD_PX = 600;

const pager = { id: null, before: null, more: false, loading: null, gen: 0, failed: false };
let top = null;
let observer = null;

// The row at the top of the transcript: the observed sentinel, and the loading notice.
function topRow() {
  if (!top) {
    top = el('div', 'transcript-top');
    top.append(el('span', 'muted loading-note', 'Loading earlier messages…'));
    // After a failed page the reader asks again; nothing is fetched on its own meanwhile.
    const again = el('button', 'load-again', 'Could not load earlier messages. Try again');
    again.type = 'button';
    again.addEventListener('click', () => { pager.failed = false; top.classList.remove('failed'); loadEarlier().catch(() => {}); });
    top.append(again);
    observer = new IntersectionObserver((entries) => {
      if (entries.some((x) => x.isIntersecting)) loadEarlier().catch(() => {});
    }, { root: $('transcript'), rootMargin: AHEAD_PX + 'px 0px 0px 0px' });
    observer.observe(top);
  }
  return top;
}

function showLoading(on) { top.classList.toggle('loading', on); }

// Renders items in seq order; `streaming` (the running attempt) goes through `live`.
export function renderItems(items, live) {
  const frag = document.createDocumentFragment();
  for (const item of items) frag.append(item.kind === 'streaming' && live ? live(item) : itemElement(item));
  return frag;
}

// Shows a freshly opened session's newest page (already rendered into the transcript).
export function startPaging(id, items, more) {
  pager.gen++;
  pager.id = id;
  pager.before = items.length ? items[0].seq : null;
  pager.more = !!more && pager.before !== null;
  pager.loading = null;
  pager.failed = false;
  const t = $('transcript');
  const row = topRow();
  row.classList.remove('failed');
  showLoading(false);
  row.hidden = !pager.more;
  t.prepend(row);
  arrange(t);
}

// Puts the loaded items in place: automatic titles after their answer, then versions and
// attempts grouped (versions.js).
export function arrange(t) {
  flatten(t);
  placeTitles(t);
  regroup(t);
}

// Fetches and prepends the page before the oldest loaded item; one fetch at a time.
export function loadEarlier() {
  if (pager.loading) return pager.loading;
  if (!pager.more || pager.failed || !top || !top.isConnected) return Promise.resolve();
  const gen = pager.gen;
  const { id, before } = pager;
  showLoading(true);
  pager.loading = (async () => {
    const data = await api('/v1/sessions/' + id + '?' + new URLSearchParams({ before_seq: before, limit: PAGE }));
    if (gen !== pager.gen) return;
    const t = $('transcript');
    // Keep what the reader sees where it is: the added height goes above the viewport.
    const height = t.scrollHeight;
    const scrolled = t.scrollTop;
    top.after(renderItems(data.items));
    arrange(t);
    t.scrollTop = scrolled + (t.scrollHeight - height);
    pager.before = data.items.length ? data.items[0].seq : pager.before;
    pager.more = data.more && data.items.length > 0;
    top.hidden = !pager.more;
  })().then(() => {
    if (gen !== pager.gen) return;
    pager.loading = null;
    showLoading(false);
    // Still at the top (a short page): the observer will not fire again by itself.
    const t = $('transcript');
    if (pager.more && t.scrollTop <= AHEAD_PX) requestAnimationFrame(() => loadEarlier().catch(() => {}));
  }, (e) => {
    if (gen !== pager.gen) return;
    // A failed page is not asked for again and again: the row says so and offers a retry.
    pager.loading = null;
    pager.failed = true;
    showLoading(false);
    top.classList.add('failed');
    throw e;
  });
  return pager.loading;
}

// Loads pages until item `seq` (or the item holding it) is present, then shows it
// highlighted.
export async function reveal(seq) {
  const gen = pager.gen;
  const t = $('transcript');
  while (gen === pager.gen && pager.more && pager.before !== null && pager.before > seq) {
    const before = pager.before;
    try { await loadEarlier(); } catch { break; }
    if (pager.before === before) break;
  }
  if (gen !== pager.gen) return;
  // The item at `seq`, else the interrupted answer that holds it (it sits at its first
  // checkpoint; a hit may name a later one). A seq with neither shows nothing.
  let best = null;
  for (const n of t.querySelectorAll('[data-seq]')) {
    const s = Number(n.dataset.seq);
    if (s > 0 && s <= seq && (!best || s > Number(best.dataset.seq))) best = n;
  }
  if (best && Number(best.dataset.seq) !== seq && !best.matches('.msg.interrupted, .msg.streaming, .msg.step')) best = null;
  t.querySelectorAll('.found').forEach((n) => n.classList.remove('found'));
  if (!best) return;
  best.classList.add('found');
  showNode(best);
  best.scrollIntoView({ block: 'center' });
}

export function isOpen(id) { return pager.id === id && !!top && top.isConnected; }

// An automatic title is written while the first answer streams, so its seq falls between
// the question and the answer: shown after the answer instead (the seq stays on the node).
// A tool-using answer's steps, calls and questions come before it: they are passed over.
const ANSWER = '.msg.assistant:not(.step), .msg.interrupted, .notice.error';
const BEFORE_ANSWER = '.msg.step, .tool, .permission';
export function placeTitles(t) {
  for (const n of t.querySelectorAll('.notice.title-auto')) {
    let question = n.previousElementSibling;
    while (question && question.matches(BEFORE_ANSWER)) question = question.previousElementSibling;
    if (!question || !question.matches('.msg.user')) continue;
    const turn = question.dataset.seq;
    let answer = n.nextElementSibling;
    while (answer && answer.matches(BEFORE_ANSWER) && answer.dataset.turn === turn) answer = answer.nextElementSibling;
    if (answer && answer.matches(ANSWER) && answer.dataset.turn === turn) answer.after(n);
  }
}

// An inline Retry on the newest answer when it failed or was cut off (retry only ever
// applies to the newest question's latest attempt).
export function offerRetry(onRetry) {
  const t = $('transcript');
  t.querySelectorAll('.inline-retry').forEach((b) => b.remove());
  const turns = t.querySelectorAll('.msg.user, .msg.assistant:not(.step), .msg.interrupted, .notice.error[data-turn]');
  const last = turns[turns.length - 1];
  if (!last || !last.matches('.msg.interrupted, .notice.error') || last.matches('.streaming')) return;
  const b = el('button', 'inline-retry', 'Retry');
  b.type = 'button';
  b.addEventListener('click', () => { b.remove(); onRetry(); });
  (last.querySelector('.state') || last).append(b);
}
