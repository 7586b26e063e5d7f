// etcron console: a dependency-free single-page app over the JSON API, in native ES modules
// (no bundler; web/README.md lists them). Views are chosen by the URL hash (#/jobs, #/job/NAME,
// #/history/NAME, #/edit/NAME, #/new, #/executions?…, #/execution/ID, #/workers, #/calendars,
// #/pools[/NAME], #/overview), so deep links work without server-side routing: router.js maps a hash to its
// view, one module each. Charts are hand-drawn SVG. This module starts the page.

import { app } from "./format.js";
import { checkMembers, checkSpecs, checkStorage } from "./api.js";
import { route } from "./router.js";

/** "/" focuses the page's search field, as in most consoles. */
document.addEventListener("keydown", (ev) => {
  if (ev.key !== "/" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const t = ev.target;
  if (t && (["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName) || t.isContentEditable)) return;
  const search = app().querySelector('[data-shortcut="/"]');
  if (search) { ev.preventDefault(); search.focus(); }
});

window.addEventListener("hashchange", () => { route().then(() => { if (!app().contains(document.activeElement)) app().focus({ preventScroll: true }); }); });
window.addEventListener("DOMContentLoaded", () => {
  route();
  checkStorage();
  setInterval(checkStorage, 30000);
  checkSpecs();
  setInterval(checkSpecs, 60000);
  checkMembers();
  setInterval(checkMembers, 5000);
});
