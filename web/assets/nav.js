// Rendering the current view again: the router's `route` for the views (which the router
// imports, so they do not import it) and the timer that refreshes a view every few seconds.

import { app } from "./format.js";

/** The router's `route`, registered by router.js when it loads. */
let current = null;
export const setRoute = (fn) => { current = fn; };
/** Renders the view of the current hash again: router.js's `route`. */
export const route = (...args) => current(...args);

/** Re-renders the current view after `ms` unless the operator navigated, is typing or has a
 * menu open. */
export let refreshTimer = null;
export function autoRefresh(ms) {
  clearTimeout(refreshTimer);
  const hash = location.hash;
  refreshTimer = setTimeout(() => {
    if (location.hash !== hash) return;
    const active = document.activeElement;
    const typing = active && ["INPUT", "TEXTAREA", "SELECT"].includes(active.tagName) && app().contains(active);
    if (typing || app().querySelector(".menu:not([hidden])")) {
      autoRefresh(ms);
      return;
    }
    route({ quiet: true });
  }, ms);
}
