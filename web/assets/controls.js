// Buttons that act, then render the current view again; a button opening a dialog.

import { h } from "./format.js";
import { banner } from "./api.js";
import { route } from "./nav.js";

/** A button that runs `action`, then re-renders the current view; errors go to the banner. */
export function button(label, action, attrs = {}) {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      if (await action() === false) return;
      await route();
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
