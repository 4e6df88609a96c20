// The conversation tree of the web UI (assets/js/tree.js) as a pure function: versions of
// edited messages (edits of edits, edits inside an abandoned branch) and attempts of a turn.
// No browser needed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tree } from '../../assets/js/tree.js';

const u = (seq) => ({ seq, kind: 'user' });
const a = (seq, turn, attempt = 1) => ({ seq, kind: 'assistant', turn, attempt });
const w = (seq, editedSeq) => ({ seq, kind: 'rewind', editedSeq });

// The tree with each item named by its seq: [seq, …, {v|t: [[panel], …]}].
function shape(entries) {
  const name = (n) => n.type === 'item' ? entries[n.at].seq : { [n.type === 'versions' ? 'v' : 't']: n.panels.map((p) => p.map(name)) };
  return tree(entries).map(name);
}

test('no edits and one attempt each: the items as they are', () => {
  assert.deepEqual(shape([u(2), a(3, 2), u(4), a(5, 4)]), [2, 3, 4, 5]);
});

test('an edit: the old version holds what followed it; the new one is followed by the rest', () => {
  // 2 3 4 5, then edit of 4: rewind 6 {to 3, edited 4}, 7, 8.
  assert.deepEqual(shape([u(2), a(3, 2), u(4), a(5, 4), w(6, 4), u(7), a(8, 7)]),
    [2, 3, { v: [[4, 5, 6], [7]] }, 8]);
});

test('an edit of the first message: the whole later conversation is its first version', () => {
  assert.deepEqual(shape([u(2), a(3, 2), u(4), a(5, 4), w(6, 2), u(7), a(8, 7)]),
    [{ v: [[2, 3, 4, 5, 6], [7]] }, 8]);
});

test('an edit of an edit chains: three versions of one message', () => {
  // 2 3; edit 2 → 4 {to 1, edited 2}, 5, 6; edit 5 → 7 {to 4, edited 5}, 8, 9.
  assert.deepEqual(shape([u(2), a(3, 2), w(4, 2), u(5), a(6, 5), w(7, 5), u(8), a(9, 8)]),
    [{ v: [[2, 3, 4], [5, 6, 7], [8]] }, 9]);
});

test('an edit inside what a later edit abandoned nests in that version', () => {
  // 2 3 4 5; edit 4 → 6, 7, 8; edit 2 → 9, 10, 11.
  assert.deepEqual(shape([u(2), a(3, 2), u(4), a(5, 4), w(6, 4), u(7), a(8, 7), w(9, 2), u(10), a(11, 10)]),
    [{ v: [[2, 3, { v: [[4, 5, 6], [7]] }, 8, 9], [10]] }, 11]);
});

test('attempts of a turn are one group, in attempt order; a title between them follows it', () => {
  const title = { seq: 4, kind: 'title' };
  const err = { seq: 3, kind: 'error', turn: 2, attempt: 1 };
  assert.deepEqual(shape([u(2), err, title, a(5, 2, 2), a(6, 2, 3), u(7), a(8, 7)]),
    [2, { t: [[3], [5], [6]] }, 4, 7, 8]);
});

test('a tool call and its question go with their attempt', () => {
  const tool = (seq, attempt) => ({ seq, kind: 'tool', turn: 2, attempt, callId: 'c' + seq });
  const question = { seq: 5, kind: 'permission', callId: 'c6' };
  assert.deepEqual(shape([u(2), tool(3, 1), a(4, 2, 1), question, tool(6, 2), a(7, 2, 2)]),
    [2, { t: [[3, 4], [5, 6, 7]] }]);
});

test('attempts inside an earlier version are grouped there', () => {
  assert.deepEqual(shape([u(2), a(3, 2, 1), a(4, 2, 2), w(5, 2), u(6), a(7, 6)]),
    [{ v: [[2, { t: [[3], [4]] }, 5], [6]] }, 7]);
});

test('a rewind whose edited message is not loaded (an earlier page) leaves the items flat', () => {
  assert.deepEqual(shape([a(5, 4), w(6, 2), u(7), a(8, 7)]), [5, 6, 7, 8]);
});

test('a rewind whose new message is not there yet ends the chain', () => {
  assert.deepEqual(shape([u(2), a(3, 2), w(4, 2)]), [{ v: [[2, 3, 4]] }]);
});
