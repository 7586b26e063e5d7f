// Browser test of the jobs list a page at a time, run by tests/tests/it/features/ui.rs:
//   node jobpages.mjs <master url> <screenshot dir>
// The harness has created 230 jobs page-000 … page-229; page-042's one run failed, page-100's
// succeeded, no other has run.
import assert from "node:assert/strict";
import path from "node:path";
import { args, launch, open } from "./lib.mjs";

const { base, shots } = args("jobpages.mjs");
const browser = await launch();
try {
  const { page, check } = await open(browser, base, { width: 1366, height: 850 });
  // Every list request the page makes.
  const asked = [];
  page.on("request", (r) => {
    const url = new URL(r.url());
    if (url.pathname === "/api/jobs") asked.push(url.searchParams);
  });
  const showing = (first, n) => page.waitForFunction(([first, n]) => {
    const rows = document.querySelectorAll("tbody tr");
    return rows.length === n && rows[0].dataset.job === first;
  }, [first, n]);
  const next = page.getByRole("button", { name: "Next →" });
  const previous = page.getByRole("button", { name: "← Previous" });

  // The first page: 100 rows, asked of the master as one page.
  await page.goto(base + "/#/jobs");
  await showing("page-000", 100);
  assert.deepEqual(asked.map(String), ["limit=100"]);
  assert.equal(await previous.isDisabled(), true);
  // Next walks the pages by cursor, in the URL.
  await next.click();
  await showing("page-100", 100);
  await page.waitForFunction(() => location.hash === "#/jobs?cursor=page-099");
  assert.equal(asked.at(-1).get("cursor"), "page-099");
  await next.click();
  await showing("page-200", 30);
  assert.equal(await next.isDisabled(), true, "the last page");
  assert.match(await page.locator(".count").innerText(), /^30 jobs on page 3/);
  await page.screenshot({ path: path.join(shots, "jobs-pages-3.png") });
  // A reload shows the same page, and Previous still walks back to the first.
  await page.reload();
  await showing("page-200", 30);
  await previous.click();
  await showing("page-100", 100);
  await previous.click();
  await showing("page-000", 100);
  await page.waitForFunction(() => location.hash === "#/jobs");
  assert.equal(await previous.isDisabled(), true);
  // A bookmark of a page shows it; its Previous goes to the first page.
  const mark = await open(browser, base, { width: 1366, height: 850 });
  await mark.page.goto(base + "/#/jobs?cursor=page-149");
  await mark.page.waitForFunction(() => document.querySelectorAll("tbody tr").length === 80 && document.querySelector("tbody tr").dataset.job === "page-150");
  await mark.page.getByRole("button", { name: "← Previous" }).click();
  await mark.page.waitForFunction(() => document.querySelector("tbody tr")?.dataset.job === "page-000");

  // Typing asks the master for the names starting with the text once typing pauses: fewer
  // requests than keys, the last one for the whole text.
  asked.length = 0;
  await page.keyboard.press("/");
  await page.keyboard.type("page-1", { delay: 20 });
  await showing("page-100", 100);
  await page.waitForFunction(() => location.hash === "#/jobs?q=page-1");
  assert.ok(asked.length < 6, `a request per key: ${asked.map(String)}`);
  assert.equal(asked.at(-1).get("prefix"), "page-1");
  assert.equal(asked.at(-1).get("limit"), "100");
  // A slow answer to an older text never replaces the newer one's.
  const isSlow = (url) => url.pathname === "/api/jobs" && url.searchParams.get("prefix") === "page-2";
  await page.route((url) => isSlow(url), async (route) => {
    await new Promise((r) => setTimeout(r, 1500));
    await route.continue();
  });
  const slowAsked = page.waitForRequest((r) => isSlow(new URL(r.url())));
  const slowAnswer = page.waitForResponse((r) => isSlow(new URL(r.url())), { timeout: 30_000 });
  await page.getByLabel("Filter jobs").fill("page-2");
  await slowAsked;
  await page.getByLabel("Filter jobs").fill("page-22");
  await showing("page-220", 10);
  await (await slowAnswer).finished();
  // The page has read the slow answer by the next frame's end.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => setTimeout(r))));
  assert.equal(await page.locator("tbody tr").count(), 10, "the older text's answer is dropped");
  assert.equal(await page.evaluate(() => location.hash), "#/jobs?q=page-22");
  await page.unrouteAll();

  // Health, on the master: the job whose last run failed, the one that succeeded, those that
  // never ran.
  await page.getByLabel("Filter jobs").fill("");
  await showing("page-000", 100);
  await page.getByLabel("Health").selectOption("failing");
  await page.waitForFunction(() => [...document.querySelectorAll("tbody tr")].map((tr) => tr.dataset.job).join() === "page-042");
  assert.equal(asked.at(-1).get("health"), "failing");
  await page.waitForFunction(() => location.hash === "#/jobs?health=failing");
  await page.screenshot({ path: path.join(shots, "jobs-health-failing.png") });
  await page.getByLabel("Health").selectOption("ok");
  await page.waitForFunction(() => [...document.querySelectorAll("tbody tr")].map((tr) => tr.dataset.job).join() === "page-100");
  await page.getByLabel("Health").selectOption("never");
  await showing("page-000", 100);
  assert.equal(await page.locator('tr[data-job="page-042"]').count(), 0);
  // Sorting a column orders the page shown, and says so.
  await page.getByRole("button", { name: "Next run" }).click();
  assert.match(await page.locator(".count").innerText(), /sorted within the page/);

  // The executions page's job: suggestions of the names starting with what is typed, 20 at most.
  asked.length = 0;
  await page.goto(base + "/#/executions");
  await page.locator("input[name=job]").pressSequentially("page-1", { delay: 20 });
  await page.waitForFunction(() => document.querySelector("#job-suggestions option")?.value === "page-100");
  const suggested = await page.locator("#job-suggestions option").evaluateAll((os) => os.map((o) => o.value));
  assert.deepEqual(suggested, Array.from({ length: 20 }, (_, i) => `page-1${String(i).padStart(2, "0")}`));
  assert.ok(asked.every((q) => q.get("limit") === "20"), `never every job: ${asked.map(String)}`);
  await page.screenshot({ path: path.join(shots, "executions-job-suggest.png") });
  await page.locator("input[name=job]").fill("page-042");
  await page.locator("input[name=job]").press("Enter");
  await page.waitForFunction(() => location.hash === "#/executions?job=page-042");
  await page.locator('tbody tr[data-id] td[data-label="Job"]').filter({ hasText: "page-042" }).first().waitFor();

  mark.check();
  check();
  console.log("jobs pages: ok");
} finally {
  await browser.close();
}
