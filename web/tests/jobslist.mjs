// Browser test of the jobs list's scanning and of the job page's summary, run by
// tests/tests/it/features/ui.rs against a real cluster:
//   node jobslist.mjs <master url> <screenshot dir>
// The harness has created 12 jobs with varied schedules (long ones in words too), descriptions
// and labels; one of them, flaky-import (timeout 30s, concurrency forbid, label team=data, notify
// oncall on failure), has failed 3 times in a row; paused-reindex is disabled in its spec.
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, launch, open } from "./lib.mjs";

const { base, shots } = args("jobslist.mjs");
const browser = await launch();
try {
  const { page, check } = await open(browser, base, { width: 1366, height: 850 });
  const jobs = (await call(base, "GET", "/api/jobs")).body.jobs;
  assert.equal(jobs.length, 12);

  // Twelve jobs fit a laptop's screen: every row inside the viewport, no horizontal scroll.
  await page.goto(base + "/#/jobs");
  const rows = page.locator("tbody tr");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 12);
  const fit = await page.evaluate(() => {
    const all = document.querySelectorAll("tbody tr");
    return { bottom: all[all.length - 1].getBoundingClientRect().bottom, scroll: document.documentElement.scrollWidth, width: document.documentElement.clientWidth };
  });
  await page.screenshot({ path: path.join(shots, "jobs-12-fit.png") });
  assert.ok(fit.bottom <= 850, `the 12th row ends at ${fit.bottom}px, below the 850px viewport`);
  assert.ok(fit.scroll <= fit.width, `no horizontal scroll: ${fit.scroll}px wide in ${fit.width}px`);
  // A long schedule in words stays on one line, cut with an ellipsis, whole in its title.
  const words = page.locator('tr[data-job="weekday-business-hours-sync"] .schedule-words');
  const cut = await words.evaluate((el) => ({ nowrap: getComputedStyle(el).whiteSpace, over: el.scrollWidth > el.clientWidth, lines: Math.round(el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight)) }));
  assert.deepEqual(cut, { nowrap: "nowrap", over: true, lines: 1 });
  const described = jobs.find((j) => j.name === "weekday-business-hours-sync").schedule_description;
  assert.ok((await words.getAttribute("title")).startsWith(described), "the whole schedule in words in its title");
  // Its description (one muted line) and labels (chips) are under and beside its name.
  const billing = page.locator('tr[data-job="billing-nightly-export"]');
  assert.deepEqual(await billing.locator(".chip").allInnerTexts(), ["team=billing", "tier=critical"]);
  assert.match(await billing.locator(".description").getAttribute("title"), /^Exports the day's invoices/);

  // Sorting by a column: in the URL, said by aria-sort, the other way on a second click.
  const order = () => rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.job));
  const nextOf = (name) => { const n = (jobs.find((j) => j.name === name).next_runs || [])[0]; return n ? Date.parse(n) : Infinity; };
  await page.getByRole("button", { name: "Next run" }).click();
  await page.waitForFunction(() => location.hash === "#/jobs?sort=next");
  assert.equal(await page.locator("th.col-next").getAttribute("aria-sort"), "ascending");
  const ascending = await order();
  for (let i = 1; i < ascending.length; i++) assert.ok(nextOf(ascending[i - 1]) <= nextOf(ascending[i]), `next run order: ${ascending}`);
  assert.equal(ascending[ascending.length - 1], "paused-reindex", "a job without a next run last");
  await page.getByRole("button", { name: "Next run" }).click();
  await page.waitForFunction(() => location.hash === "#/jobs?sort=-next");
  assert.equal(await page.locator("th.col-next").getAttribute("aria-sort"), "descending");
  assert.equal((await order())[0], "paused-reindex");
  // Failures first by last result; the deep link sorts the same.
  await page.goto(base + "/#/jobs?sort=last");
  await page.waitForFunction(() => document.querySelector("th.col-last")?.getAttribute("aria-sort") === "ascending");
  assert.equal((await order())[0], "flaky-import");

  // Filtering as you type (the start of names, asked of the master): the list narrows, the URL
  // follows, the page is not reloaded and the focus stays in the field.
  await page.evaluate(() => { window.stillTheSamePage = true; });
  await page.keyboard.press("/");
  await page.keyboard.type("bill", { delay: 40 });
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 1);
  await page.waitForFunction(() => location.hash === "#/jobs?q=bill&sort=last");
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute("aria-label")), "Filter jobs");
  assert.equal(await page.evaluate(() => window.stillTheSamePage), true, "not reloaded");
  await page.keyboard.type("ing-zz", { delay: 20 });
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 0 && !document.querySelector(".empty").hidden);
  for (let i = 0; i < 6; i++) await page.keyboard.press("Backspace");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 1);
  // KEY=VALUE is a label, as is a chip's click.
  await page.getByLabel("Filter jobs").fill("tier=critical");
  await page.waitForFunction(() => [...document.querySelectorAll("tbody tr")].map((tr) => tr.dataset.job).sort().join() === "backup-verify,billing-nightly-export");
  await page.getByLabel("Filter jobs").fill("");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 12);
  await page.locator('tr[data-job="cache-warmup"] .chip').click();
  await page.waitForFunction(() => location.hash === "#/jobs?q=team%3Dweb&sort=last" && document.querySelectorAll("tbody tr").length === 1);
  assert.equal(await page.getByLabel("Filter jobs").inputValue(), "team=web");

  // One actions menu per row, from the keyboard: Enter opens it on its first item, the arrows
  // move, Escape closes it back on its button. Nothing runs: no Kill.
  await page.goto(base + "/#/jobs");
  await page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 12);
  const trigger = page.getByRole("button", { name: "Actions for billing-nightly-export" });
  assert.equal(await trigger.getAttribute("aria-haspopup"), "menu");
  await trigger.focus();
  await page.keyboard.press("Enter");
  assert.equal(await trigger.getAttribute("aria-expanded"), "true");
  const items = page.getByRole("menu", { name: "Actions for billing-nightly-export" }).getByRole("menuitem");
  assert.deepEqual(await items.allInnerTexts(), ["Run now", "Pause…", "Edit", "History", "Delete"]);
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Run now");
  await page.keyboard.press("ArrowDown");
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Pause…");
  await page.screenshot({ path: path.join(shots, "jobs-menu.png") });
  await page.keyboard.press("Escape");
  assert.equal(await trigger.getAttribute("aria-expanded"), "false");
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute("aria-label")), "Actions for billing-nightly-export");
  assert.equal(await page.locator(".menu:not([hidden])").count(), 0);
  // Edit, a link in the menu, opens the editor.
  await trigger.click();
  await page.getByRole("menuitem", { name: "Edit billing-nightly-export" }).click();
  await page.waitForFunction(() => location.hash === "#/edit/billing-nightly-export");

  // The job page's summary: its health first, then timeout, retries, concurrency, labels and
  // who hears of it.
  await page.goto(base + "/#/job/flaky-import");
  await page.locator("#health").waitFor();
  assert.equal(await page.locator("#health").innerText(), "3 failures in a row");
  assert.equal(await page.locator("#summary-timeout").innerText(), "30s");
  assert.equal(await page.locator("#summary-retries").innerText(), "none");
  assert.equal(await page.locator("#summary-concurrency").innerText(), "forbid");
  assert.equal(await page.locator("#summary-labels").innerText(), "team=data");
  assert.equal(await page.locator("#notify").innerText(), "oncall → failure");
  await page.screenshot({ path: path.join(shots, "job-summary.png") });
  await page.goto(base + "/#/job/log-rotate");
  await page.locator("h1", { hasText: "log-rotate" }).waitFor();
  assert.equal(await page.locator("#health").innerText(), "never run");
  await page.goto(base + "/#/job/cache-warmup");
  await page.locator("#health").filter({ hasText: "healthy: last run succeeded" }).waitFor();

  // Phone width: the actions menu opens inside the screen, on the list and on a job's page;
  // the page never scrolls sideways.
  const phone = await open(browser, base, { width: 390, height: 844 });
  const inside = async (p, job, shot) => {
    await p.getByRole("button", { name: `Actions for ${job}` }).click();
    const menu = p.getByRole("menu", { name: `Actions for ${job}` });
    await menu.waitFor();
    const box = await menu.boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 390 && box.y >= 0 && box.y + box.height <= 844, `menu inside the screen: ${JSON.stringify(box)}`);
    assert.ok(await p.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth), "no sideways scroll");
    await p.screenshot({ path: path.join(shots, shot) });
    await p.keyboard.press("Escape");
  };
  await phone.page.goto(base + "/#/jobs");
  await phone.page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 12);
  await phone.page.locator('tr[data-job="billing-nightly-export"] .menu-button').scrollIntoViewIfNeeded();
  await inside(phone.page, "billing-nightly-export", "jobs-390-menu.png");
  // The last row's menu, at the bottom of the screen, opens upwards.
  await phone.page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
  const last = await phone.page.locator("tbody tr").last().getAttribute("data-job");
  await inside(phone.page, last, "jobs-390-menu-last.png");
  await phone.page.goto(base + "/#/job/flaky-import");
  await phone.page.locator("#health").waitFor();
  await inside(phone.page, "flaky-import", "job-390-menu.png");
  phone.check();

  check();
  console.log("jobs list scanning: ok");
} finally {
  await browser.close();
}
