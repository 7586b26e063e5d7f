// Browser test of the jobs list, run by tests/tests/ui.rs against a real cluster:
//   node jobs.mjs <master url> <screenshot dir>
// The harness has created: nightly-report (labels team=data, one succeeded run), paused-job
// (enabled: false) and mars-only (selector region=mars, no worker matches); worker w1 runs.
import assert from "node:assert/strict";
import path from "node:path";
import { args, launch, open } from "./lib.mjs";

const { base, shots } = args("jobs.mjs");
const browser = await launch();
try {
  const { context, page, check } = await open(browser, base);

  await page.goto(base + "/");
  const rows = page.locator("tbody tr");
  await rows.first().waitFor();
  assert.equal(await rows.count(), 3);
  const row = (name) => page.locator(`tr[data-job="${name}"]`);
  assert.match(await row("nightly-report").innerText(), /enabled/);
  assert.match(await row("nightly-report").innerText(), /succeeded/);
  assert.match(await row("paused-job").innerText(), /paused/);
  assert.match(await row("paused-job").innerText(), /disabled in its spec/);
  assert.match(await row("mars-only").innerText(), /no live worker matches/);
  await page.screenshot({ path: path.join(shots, "jobs-1280.png"), fullPage: true });

  // Filter by label; the filter lives in the URL, so the deep link shows the same list.
  const filter = page.getByLabel("Filter jobs");
  await filter.fill("team=data");
  await filter.press("Enter");
  await page.waitForFunction(() => location.hash === "#/jobs?q=team%3Ddata");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 1);
  assert.equal(await rows.first().getAttribute("data-job"), "nightly-report");
  const deep = await context.newPage();
  await deep.goto(base + "/#/jobs?q=team%3Ddata");
  await deep.locator("tbody tr").first().waitFor();
  assert.equal(await deep.locator("tbody tr").count(), 1);

  // Keyboard: "/" focuses the filter, Enter applies it; actions are buttons that Enter presses.
  await page.goto(base + "/#/jobs");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 3);
  await page.keyboard.press("/");
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute("aria-label")), "Filter jobs");
  await page.keyboard.type("nightly");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => location.hash === "#/jobs?q=nightly");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 1);
  await page.getByRole("button", { name: "Run nightly-report now" }).focus();
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/api/jobs/nightly-report/run") && r.status() === 202),
    page.keyboard.press("Enter"),
  ]);

  // Phone width and dark scheme stay readable (screenshots are kept as test artifacts).
  const { page: small } = await open(browser, base, { width: 375, height: 740, colorScheme: "dark" });
  await small.goto(base + "/");
  await small.locator("tbody tr").first().waitFor();
  await small.screenshot({ path: path.join(shots, "jobs-375-dark.png"), fullPage: true });

  // Workers: the live one with its labels, and the job nobody matches.
  await page.goto(base + "/#/workers");
  await page.locator('tr[data-worker="w1"]').waitFor();
  assert.match(await page.locator('tr[data-worker="w1"]').innerText(), /0 \/ 64/);
  assert.match(await page.locator("#unmatched").innerText(), /mars-only needs region=mars/);
  await page.screenshot({ path: path.join(shots, "workers-1280.png"), fullPage: true });

  check();
  console.log("jobs list: ok");
} finally {
  await browser.close();
}
