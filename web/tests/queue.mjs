// Browser test of a `concurrency: queue` job, run by tests/tests/it/features/ui.rs while the job's first
// run holds the lock and later ticks wait: the job page lists the queue (oldest first, each
// with what it waits behind), and the editor offers the queue and its `max_queue`.
//   node queue.mjs <master url> <screenshot dir>
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, launch, open } from "./lib.mjs";

const { base, shots } = args("queue.mjs");
const browser = await launch();
try {
  const { page, check } = await open(browser, base);
  await page.goto(`${base}/#/job/queued`);
  const items = page.locator("#queue li");
  await items.first().waitFor({ timeout: 20_000 });
  // What the page lists is what the API lists, in the same order.
  const job = await call(base, "GET", "/api/jobs/queued");
  assert.ok(job.body.queue.length >= 1, JSON.stringify(job.body.queue));
  const shown = await items.allInnerTexts();
  const ids = job.body.queue.map((q) => q.execution_id);
  for (const [i, id] of ids.slice(0, shown.length).entries()) {
    assert.ok(shown[i].includes(id), `${shown[i]} names ${id}`);
  }
  assert.match(await page.locator("h2", { hasText: "Queue" }).innerText(), /^Queue \(\d+ of 3\)$/);
  assert.match(shown[0], /behind queued@\d+#1/);
  await page.screenshot({ path: path.join(shots, "queue.png"), fullPage: true });

  // The editor: the queue is a concurrency, with its limit.
  await page.goto(`${base}/#/edit/queued`);
  const concurrency = page.locator('select[name="concurrency"]');
  await concurrency.waitFor();
  // The form is filled once the job is read.
  await page.waitForFunction(() => document.querySelector('input[name="name"]')?.value === "queued", null, { timeout: 10_000 });
  assert.equal(await concurrency.inputValue(), "queue");
  assert.equal(await page.locator('input[name="max_queue"]').inputValue(), "3");
  check();
  console.log("queue: ok");
} finally {
  await browser.close();
}
