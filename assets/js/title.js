// The automatic title is written in the background after the first answer: the header, the
// tab's title and the list follow it by re-reading the session for a short while.
import { state } from './dom.js';
import { api } from './api.js';

const EVERY_MS = 1500;
const FOR_MS = 20000;
let following = null;

// Polls session `id` until it has a title or FOR_MS has passed; `onTitle(session)` runs
// once when the title arrives (if the session is still the open one).
export function followTitle(id, onTitle) {
  if (following === id) return;
  following = id;
  const until = Date.now() + FOR_MS;
  const tick = async () => {
    if (following !== id || state.id !== id || Date.now() > until) { if (following === id) following = null; return; }
    try {
      const data = await api('/v1/sessions/' + id + '?limit=1');
      if (data.session.title) {
        following = null;
        if (state.id === id) onTitle(data.session);
        return;
      }
    } catch (e) { /* a failed poll is retried on the next tick */ }
    setTimeout(tick, EVERY_MS);
  };
  setTimeout(tick, EVERY_MS);
}
