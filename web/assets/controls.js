// Buttons that act, then render the current view again; a button opening a dialog; a menu of
// buttons and links (a job's actions).

import { h } from "./format.js";
import { banner } from "./api.js";
import { route } from "./nav.js";

/** A button that runs `action`, then re-renders the current view (unless the action went to
 * another page, which renders by itself: a second render could land over the page the
 * operator moved on to); errors go to the banner. */
export function button(label, action, attrs = {}) {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    const at = location.hash;
    try {
      if (await action() === false) return;
      if (location.hash === at) await route();
    } catch (e) {
      banner(`${label} failed: ${e.message}`);
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

/** A button opening the dialog `make()` builds; the dialog goes when it closes. */
export const dialogButton = (label, make, attrs) => button(label, () => {
  const dialog = make();
  document.body.append(dialog);
  dialog.addEventListener("close", () => dialog.remove());
  dialog.showModal();
  return false;
}, attrs);

/** The open menu's close, so opening one closes another (and a click elsewhere closes it). */
let openMenu = null;
document.addEventListener("click", (ev) => { if (openMenu && !openMenu.holds(ev.target)) openMenu.close(false); });
window.addEventListener("resize", () => { if (openMenu) openMenu.close(false); });
// Scrolling moves an open menu with its button, and closes it once its button is out of sight.
document.addEventListener("scroll", () => { if (openMenu) openMenu.follow(); }, true);

/** Places `list` (fixed) under `trigger`, right-aligned, kept inside the viewport: above the
 * trigger when there is no room below. */
function placeMenu(list, trigger) {
  const at = trigger.getBoundingClientRect();
  const margin = 8;
  const width = list.offsetWidth;
  const height = list.offsetHeight;
  const left = Math.min(Math.max(margin, at.right - width), window.innerWidth - width - margin);
  const below = at.bottom + 4;
  const top = below + height <= window.innerHeight - margin ? below : Math.max(margin, at.top - height - 4);
  list.style.left = `${Math.max(margin, left)}px`;
  list.style.top = `${top}px`;
}

/**
 * A menu button (`label`, e.g. "⋯"; `attrs` its aria-label) opening `items` (buttons and
 * links, each a `menuitem`): a click, Enter, Space or ArrowDown opens it on the first item, ArrowUp/ArrowDown
 * move, Escape (or Tab, or a click elsewhere) closes it, back on its button; choosing an item
 * closes it. Empty items ("") are left out.
 */
export function menu(label, items, attrs = {}) {
  const trigger = h("button", { type: "button", class: "menu-button", "aria-haspopup": "menu", "aria-expanded": "false", ...attrs }, label);
  const list = h("div", { class: "menu", role: "menu", hidden: true, "aria-label": attrs["aria-label"] || label });
  const entries = items.flat().filter((i) => i instanceof Node);
  for (const item of entries) {
    item.setAttribute("role", "menuitem");
    item.setAttribute("tabindex", "-1");
    list.append(item);
  }
  const wrap = h("span", { class: "menu-wrap" }, trigger, list);
  const focusAt = (i) => entries[(i + entries.length) % entries.length].focus();
  const state = {
    holds: (node) => wrap.contains(node),
    follow() {
      const at = trigger.getBoundingClientRect();
      if (!trigger.isConnected || at.bottom < 0 || at.top > window.innerHeight) state.close(false); else placeMenu(list, trigger);
    },
    close(refocus = true) {
      list.hidden = true;
      trigger.setAttribute("aria-expanded", "false");
      if (openMenu === state) openMenu = null;
      if (refocus) trigger.focus();
    },
  };
  const open = (first) => {
    if (openMenu && openMenu !== state) openMenu.close(false);
    list.hidden = false;
    trigger.setAttribute("aria-expanded", "true");
    openMenu = state;
    placeMenu(list, trigger);
    focusAt(first);
  };
  trigger.addEventListener("click", () => (list.hidden ? open(0) : state.close()));
  trigger.addEventListener("keydown", (ev) => {
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") { ev.preventDefault(); open(ev.key === "ArrowDown" ? 0 : -1); }
  });
  list.addEventListener("keydown", (ev) => {
    const at = entries.indexOf(document.activeElement);
    if (ev.key === "Escape") { ev.preventDefault(); state.close(); }
    else if (ev.key === "Tab") state.close(false);
    else if (ev.key === "ArrowDown") { ev.preventDefault(); focusAt(at + 1); }
    else if (ev.key === "ArrowUp") { ev.preventDefault(); focusAt(at - 1); }
    else if (ev.key === "Home") { ev.preventDefault(); focusAt(0); }
    else if (ev.key === "End") { ev.preventDefault(); focusAt(-1); }
  });
  // An item chosen closes the menu (its action goes on: a dialog, a confirm, a request).
  list.addEventListener("click", (ev) => { if (ev.target.closest("[role=menuitem]")) state.close(false); });
  return wrap;
}
