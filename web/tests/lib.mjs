// Shared by the browser tests: Debian's Chromium through playwright-core, pages that record
// script errors and any request leaving the master, and a poll that reloads a view until it
// shows what the test waits for (deadline, never a bare sleep).
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

/** `node script.mjs <master url> <screenshot dir> [args…]`. */
export function args(script) {
  const [base, shots, ...rest] = process.argv.slice(2);
  assert.ok(base && shots, `usage: node ${script} <master url> <screenshot dir>`);
  return { base, shots, rest };
}

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
}

/**
 * A page in a new context. `token`: put into the tab's session storage before any script runs,
 * as the console's token prompt would. `errors` collects script errors and `external` requests
 * to anywhere but `base`; `check()` asserts both are empty.
 */
export async function open(browser, base, { width = 1280, height = 800, colorScheme = "light", token } = {}) {
  const context = await browser.newContext({ viewport: { width, height }, colorScheme });
  // about:blank (which waitRows loads between views) has no storage: nothing to put there.
  if (token) await context.addInitScript((t) => { if (location.protocol !== "about:") sessionStorage.setItem("etcron-token", t); }, token);
  const page = await context.newPage();
  const errors = [];
  const external = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("request", (r) => { if (!r.url().startsWith(base) && !r.url().startsWith("about:")) external.push(r.url()); });
  const check = () => {
    assert.deepEqual(errors, [], "no script errors");
    assert.deepEqual(external, [], "no requests outside the master");
  };
  return { context, page, errors, external, check };
}

/** Loads `hash` afresh until `selector` matches `count` elements (or `count(n)` holds), or fails after 30 s. */
export async function waitRows(page, base, hash, selector, count) {
  const ok = typeof count === "function" ? count : (n) => n === count;
  const deadline = Date.now() + 30_000;
  for (;;) {
    // A full load each time: going to the same hash again would not re-render the view.
    await page.goto("about:blank");
    await page.goto(`${base}/${hash}`);
    await page.waitForFunction(() => !document.querySelector("main").textContent.includes("Loading"));
    await page.locator("main h1").waitFor();
    if (ok(await page.locator(selector).count())) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${selector} at ${hash}`);
    await page.waitForTimeout(250);
  }
}

/** Calls the API the way another operator (or etcronctl) would, outside the browser. */
export async function call(base, method, path, body, token) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const resp = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  return { status: resp.status, body: text ? JSON.parse(text) : null };
}

/** Opens the actions menu of job `job` (its row in the jobs list, or its page) and chooses the
 * item named `item` (its accessible name, e.g. "Run nightly-report now"). */
export async function jobAction(page, job, item) {
  await page.getByRole("button", { name: `Actions for ${job}` }).click();
  await page.getByRole("menuitem", { name: item, exact: true }).click();
}
