// Browser test of the workers page, run by tests/tests/it/features/ui.rs with two live workers:
// each row says its state and who its tasks and its process run as; Drain, Cordon and Uncordon
// change its state (as the API then says too).
//   node workers.mjs <master url> <screenshot dir> [departed]
// `departed`: both workers have run the job `everywhere`, then w2 was stopped: the page lists
// w1's recent runs, and w2 under "Recently departed".
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, launch, open, waitRows } from "./lib.mjs";

const { base, shots, rest: [phase] } = args("workers.mjs");
const browser = await launch();

/** The state word of worker `id`'s row, once it reads `want` (the page reloads after an action). */
async function stateOf(page, id, want) {
  const cell = page.locator(`tr[data-worker="${id}"] [data-state]`);
  await page.waitForFunction(([sel, w]) => document.querySelector(sel)?.dataset.state === w,
    [`tr[data-worker="${id}"] [data-state]`, want], { timeout: 20_000 });
  return cell.innerText();
}

/** The cordon of worker `id` as the API shows it (null: ready). */
async function cordonOf(id) {
  const { body } = await call(base, "GET", "/api/workers");
  return body.workers.find((w) => w.id === id).cordon ?? null;
}

/** After w2 stopped: w1's recent runs, and w2 among the departed workers. */
async function departed(page) {
  await waitRows(page, base, "#/workers", "tr[data-worker]", 1);
  const recent = page.locator('tr[data-worker="w1"] .recent-runs li');
  const shown = await recent.count();
  assert.ok(shown >= 1 && shown <= 5, `w1's recent runs: ${shown}`);
  assert.match(await recent.first().innerText(), /^succeeded everywhere /);
  assert.match(await recent.first().locator("a").first().getAttribute("href"), /^#\/execution\/everywhere%40/);
  const gone = page.locator('#departed tr[data-departed="w2"]');
  await gone.waitFor();
  assert.match(await gone.innerText(), /w2[\s\S]*everywhere/);
  assert.equal(await page.locator('#departed tr[data-departed="w1"]').count(), 0, "a live worker has not departed");
  await page.screenshot({ path: path.join(shots, "workers-departed.png"), fullPage: true });
}

try {
  const { page, check } = await open(browser, base);
  if (phase === "departed") await departed(page); else await cordons(page);
  check();
  console.log(`workers page${phase ? `, ${phase}` : ""}: ok`);
} finally {
  await browser.close();
}

/** With both workers live: drain, cordon and uncordon them. */
async function cordons(page) {
  await waitRows(page, base, "#/workers", "tr[data-worker]", 2);
  assert.equal(await stateOf(page, "w1", "ready"), "ready");
  // Who tasks run as, and who the worker process itself is (as its registration says).
  const registered = (await call(base, "GET", "/api/workers")).body.workers.find((w) => w.id === "w1");
  assert.match(registered.os_user, /^\S+ \(uid \d+\)$/);
  assert.equal(await page.locator('tr[data-worker="w1"] .os-user').innerText(), `worker process: ${registered.os_user}`);

  // Drain w1: nothing runs on it, so it is drained at once.
  page.once("dialog", (d) => d.accept());
  await page.getByRole("button", { name: "Drain w1" }).click();
  assert.equal(await stateOf(page, "w1", "drained"), "drained");
  assert.equal((await cordonOf("w1")).state, "draining");
  assert.match(await page.locator('tr[data-worker="w1"]').innerText(), /by anonymous/);
  await page.screenshot({ path: path.join(shots, "workers-drained.png"), fullPage: true });

  // A dismissed confirm changes nothing; an accepted one cordons w2.
  page.once("dialog", (d) => d.dismiss());
  await page.getByRole("button", { name: "Cordon w2" }).click();
  await page.waitForTimeout(500);
  assert.equal(await cordonOf("w2"), null);
  page.once("dialog", (d) => d.accept());
  await page.getByRole("button", { name: "Cordon w2" }).click();
  assert.equal(await stateOf(page, "w2", "cordoned"), "cordoned");
  assert.equal((await cordonOf("w2")).state, "cordoned");

  // Uncordon both.
  await page.getByRole("button", { name: "Uncordon w1" }).click();
  assert.equal(await stateOf(page, "w1", "ready"), "ready");
  await page.getByRole("button", { name: "Uncordon w2" }).click();
  assert.equal(await stateOf(page, "w2", "ready"), "ready");
  assert.equal(await cordonOf("w1"), null);
  assert.equal(await cordonOf("w2"), null);
}
