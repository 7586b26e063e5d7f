// Browser test of a running task's progress, run by tests/tests/it/features/ui.rs: the execution page of a
// task that reports by `::etcron` lines shows its progress as a bar and its stored checkpoint,
// moving as the stream brings new reports, and keeps the last ones once the run has ended. The
// master closes a quiet stream after 4 s (`--stream-quiet-limit 4s`): the page says so and
// follows again on a click.
//   node progress.mjs <master url> <screenshot dir>
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { args, call, launch, open } from "./lib.mjs";

const { base, shots } = args("progress.mjs");
// The task waits for a gate file after its reports; the test opens it once it has followed again.
const gate = path.join(shots, "progress-gate");
const command = [
  "echo '::etcron progress 30 step one'",
  "sleep 2",
  "echo '::etcron progress 60 step two'",
  `echo '::etcron checkpoint {"offset":60}'`,
  `while [ ! -e '${gate}' ]; do sleep 0.05; done`,
  "echo done",
].join("; ");
const saved = await call(base, "PUT", "/api/jobs/reporting", { schedule: "@yearly", task: { kind: "shell", command } });
assert.ok(saved.status === 200 || saved.status === 201, JSON.stringify(saved.body));

const browser = await launch();
try {
  const { page, check } = await open(browser, base);
  // The run starts once the browser is up, so the page sees it while it runs.
  const run = await call(base, "POST", "/api/jobs/reporting/run");
  assert.equal(run.status, 202, JSON.stringify(run.body));
  const id = run.body.execution_id;
  // "No record yet" pages look again every 2 s: the running page then follows the stream.
  await page.goto(`${base}/#/execution/${encodeURIComponent(id)}`);
  const bar = page.locator("#progress progress");
  await page.waitForFunction(() => document.querySelector("#progress progress")?.value === 60, null, { timeout: 20_000 });
  assert.match(await page.locator("#progress").innerText(), /60% · step two/);
  await page.waitForFunction(() => document.querySelector("#checkpoint")?.textContent === '{"offset":60}', null, { timeout: 10_000 });
  assert.ok(await page.locator(".live").isVisible(), "still running: the output is live");
  await page.screenshot({ path: path.join(shots, "progress-running.png"), fullPage: true });
  // Nothing new for 4 s: the master closes the stream, the page offers to follow again.
  const again = page.locator("#follow-again");
  await again.waitFor({ timeout: 20_000 });
  assert.match(await page.locator(".live").innerText(), /following paused/);
  await again.click();
  await page.locator(".live").waitFor({ timeout: 10_000 });
  fs.writeFileSync(gate, "");
  // The run ends: the page shows the record, which keeps the last progress and checkpoint.
  await page.locator(".status-succeeded").waitFor({ timeout: 20_000 });
  assert.equal(await bar.evaluate((el) => el.value), 60);
  assert.equal(await page.locator("#checkpoint").innerText(), '{"offset":60}');
  const record = await call(base, "GET", `/api/executions/${encodeURIComponent(id)}`);
  assert.deepEqual(record.body.checkpoint, { offset: 60 });
  assert.equal(record.body.progress.message, "step two");
  await page.screenshot({ path: path.join(shots, "progress-done.png"), fullPage: true });
  check();
  console.log("progress: ok");
} finally {
  await browser.close();
}
