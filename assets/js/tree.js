// The conversation tree in the transcript (SPEC §14), as a pure function of the items shown:
// which items are versions of one edited message, and which are attempts of one turn. No DOM
// here, so it is tested with plain node.
//
// The log is linear; an edit appends `rewind {to_seq: S − 1, edited_seq: S}` (at seq W) and
// the new user message right after it. So the versions of a message are a chain: S, the
// first user item after W, and, when that one was edited in turn, the first user item after
// its rewind, and so on. Version k (but the last) holds its message and the conversation
// that followed it, up to and including the rewind that ended it; the last version holds
// only its message, because what follows it is simply the rest of the enclosing list.

// An entry: {seq, kind, turn, attempt, editedSeq, callId}, in transcript order.
// A tree node: {type: 'item', at} (the entry's index), {type: 'versions', key, panels},
// or {type: 'attempts', key, panels}; a panel is a list of nodes.
export function tree(entries) {
  const all = entries.map((e, at) => ({ ...e, at }));
  return attempts(versions(all));
}

// Splits `list` into items and version groups (recursively inside every panel).
function versions(list) {
  const rewindOf = new Map();
  for (const e of list) if (e.kind === 'rewind' && e.editedSeq) rewindOf.set(e.editedSeq, e);
  const out = [];
  let i = 0;
  while (i < list.length) {
    const e = list[i];
    if (!(e.kind === 'user' && rewindOf.has(e.seq))) { out.push(e); i++; continue; }
    const panels = [];
    let cur = i;
    for (;;) {
      const w = rewindOf.get(list[cur].seq);
      const end = w ? list.indexOf(w, cur) : -1;
      if (end < 0) { panels.push([item(list[cur])]); i = cur + 1; break; }
      panels.push([item(list[cur]), ...attempts(versions(list.slice(cur + 1, end + 1)))]);
      const next = list.findIndex((x, j) => j > end && x.kind === 'user');
      // The new message is not loaded (or not there): the chain ends with the rewind.
      if (next < 0) { i = end + 1; break; }
      cur = next;
    }
    out.push({ type: 'versions', key: 'v' + e.seq, panels });
  }
  return out;
}

function item(e) { return e.type ? e : { type: 'item', at: e.at, entry: e }; }

// Groups the attempts of each turn with two or more attempts in `list` (entries and version
// groups): from the turn's first item to its last, each item of the turn goes to its
// attempt's panel, a permission question to the attempt of the call it asks about (else the
// item before it); anything else in that span (a title, a compaction) follows the group.
function attempts(list) {
  const seen = new Map();
  for (const e of list) {
    if (e.type || e.turn == null || e.attempt == null) continue;
    if (!seen.has(e.turn)) seen.set(e.turn, new Set());
    seen.get(e.turn).add(e.attempt);
  }
  const out = [];
  let i = 0;
  while (i < list.length) {
    const e = list[i];
    if (e.type || e.turn == null || !seen.has(e.turn) || seen.get(e.turn).size < 2) { out.push(item(e)); i++; continue; }
    const turn = e.turn;
    let last = i;
    list.forEach((x, j) => { if (!x.type && x.turn === turn) last = j; });
    const span = list.slice(i, last + 1);
    const byAttempt = new Map();
    // A question comes before its call's end: its attempt is known from the call's item.
    const callAttempt = new Map();
    for (const x of span) if (!x.type && x.turn === turn && x.callId) callAttempt.set(x.callId, x.attempt);
    const after = [];
    let prev = e.attempt;
    for (const x of span) {
      let a = null;
      if (!x.type && x.turn === turn) a = x.attempt;
      else if (!x.type && x.kind === 'permission') a = callAttempt.get(x.callId) ?? prev;
      if (a == null) { after.push(item(x)); continue; }
      prev = a;
      if (!byAttempt.has(a)) byAttempt.set(a, []);
      byAttempt.get(a).push(item(x));
    }
    const order = [...byAttempt.keys()].sort((p, q) => p - q);
    out.push({ type: 'attempts', key: 't' + turn, panels: order.map((a) => byAttempt.get(a)) }, ...after);
    i = last + 1;
  }
  return out;
}
