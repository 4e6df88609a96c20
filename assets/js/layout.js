// The page's layout on small screens: the session drawer, the header's action menu, the
// context sheet, the app's height under an on-screen keyboard, and the first-run banner.
import { $ } from './dom.js';

const narrow = window.matchMedia('(max-width: 760px)');

function drawerOpen() { return document.body.classList.contains('drawer-open'); }
function menuOpen() { return $('session-head').classList.contains('menu-open'); }
function sheetOpen() { return narrow.matches && !$('context-panel').hidden; }

// The scrim covers the page behind whichever overlay is open on a phone.
function syncScrim() { $('scrim').hidden = !(drawerOpen() || sheetOpen()); }

export function openDrawer() {
  document.body.classList.add('drawer-open');
  $('menu-toggle').setAttribute('aria-expanded', 'true');
  // The page behind the drawer takes no focus or clicks while it is open.
  $('main').inert = true;
  syncScrim();
  // Focus the current session (or New chat), never the search box: that would raise the
  // keyboard over the list the reader came to see.
  const target = document.querySelector('#session-list .session-link.active') || $('new-chat');
  target.focus({ preventScroll: false });
}

export function closeDrawer(restoreFocus) {
  if (!drawerOpen()) return;
  document.body.classList.remove('drawer-open');
  $('menu-toggle').setAttribute('aria-expanded', 'false');
  $('main').inert = false;
  syncScrim();
  if (restoreFocus) $('menu-toggle').focus();
}

function openMenu() {
  $('session-head').classList.add('menu-open');
  $('more').setAttribute('aria-expanded', 'true');
  const first = $('actions').querySelector('select, button:not(:disabled)');
  if (first) first.focus();
}

function closeMenu(restoreFocus) {
  if (!menuOpen()) return;
  $('session-head').classList.remove('menu-open');
  $('more').setAttribute('aria-expanded', 'false');
  if (restoreFocus) $('more').focus();
}

export function closeSheet() {
  $('context-panel').hidden = true;
  $('main').inert = false;
  syncScrim();
}

// Called after the Context button toggled the panel. On a phone the panel is a sheet over
// the transcript: what is behind it takes no focus while it is open.
export function contextToggled() {
  syncScrim();
  $('main').inert = narrow.matches && !$('context-panel').hidden;
  if (!$('context-panel').hidden) $('close-context').focus();
}

// Keeps `--app-h` equal to the visible viewport, so the composer sits above an on-screen
// keyboard (iOS shrinks only the visual viewport), and keeps a transcript that was at its
// end at its end.
function followViewport() {
  const vv = window.visualViewport;
  if (!vv) return;
  let frame = 0;
  const apply = () => {
    frame = 0;
    // Pinch-zoom also shrinks the visual viewport; only the keyboard should resize the app.
    if (Math.abs(vv.scale - 1) > 0.01) return;
    const t = $('transcript');
    const atEnd = t.scrollHeight - t.scrollTop - t.clientHeight < 40;
    document.documentElement.style.setProperty('--app-h', Math.round(vv.height) + 'px');
    // iOS scrolls the page to show the focused field; the app is already the right size.
    if (window.scrollY) window.scrollTo(0, 0);
    if (atEnd) t.scrollTop = t.scrollHeight;
  };
  const schedule = () => { if (!frame) frame = requestAnimationFrame(apply); };
  vv.addEventListener('resize', schedule);
  vv.addEventListener('scroll', schedule);
  apply();
}

const BANNER_RECHECK_MS = 10000;
let bannerTimer = null;

// The first-run banner on the empty screen: shown when the provider is unreachable or
// lists no models, with the URL brain tried when the server says it.
export function providerBanner(m, recheck) {
  const p = m && m.provider;
  const down = !!p && p.status !== 'ok';
  const show = down || !(m && m.models && m.models.length);
  $('provider-banner').hidden = !show;
  // A model server started after the page loaded: looked for again until it answers.
  clearTimeout(bannerTimer);
  if (show && recheck) bannerTimer = setTimeout(recheck, BANNER_RECHECK_MS);
  if (!show) return;
  $('provider-banner-title').textContent = down ? 'No model server answered'
    : p ? 'The model server lists no models' : 'No models: is a model server running?';
  $('provider-url').textContent = p && p.url ? p.url : '';
  $('provider-tried').hidden = !(p && p.url);
}

export function initLayout() {
  $('menu-toggle').addEventListener('click', () => (drawerOpen() ? closeDrawer(true) : openDrawer()));
  $('more').addEventListener('click', () => (menuOpen() ? closeMenu(true) : openMenu()));
  $('scrim').addEventListener('click', () => { closeDrawer(true); if (sheetOpen()) closeSheet(); });
  $('close-context').addEventListener('click', () => { closeSheet(); $(narrow.matches ? 'more' : 'toggle-context').focus(); });
  // Choosing a session, a search hit or New chat closes the drawer.
  $('sidebar').addEventListener('click', (e) => {
    if (e.target.closest('.session-link, .hit, #new-chat')) closeDrawer(false);
  });
  // An action closes the menu; Delete asks twice, so its menu stays for the second press.
  $('actions').addEventListener('click', (e) => {
    const b = e.target.closest('button');
    if (b && b.id !== 'delete') closeMenu(false);
  });
  $('model').addEventListener('change', () => closeMenu(true));
  document.addEventListener('click', (e) => {
    if (menuOpen() && !e.target.closest('#actions, #more')) closeMenu(false);
  });
  // Escape closes the topmost overlay; registered before app.js's Escape-stops-the-answer.
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape') return;
    if (menuOpen()) closeMenu(true);
    else if (drawerOpen()) closeDrawer(true);
    else if (sheetOpen()) { closeSheet(); $('more').focus(); }
    else return;
    // Closing an overlay is all this Escape does: it does not also stop the answer.
    e.stopImmediatePropagation();
  });
  // Back at desktop width, no overlay state is left behind.
  narrow.addEventListener('change', () => { closeDrawer(false); closeMenu(false); $('main').inert = false; syncScrim(); });
  followViewport();
}
