// Browser test of the token prompt and the overview, run by tests/tests/it/features/ui.rs against a master
// started with an API token (passed to this script in ETCRON_TEST_TOKEN):
//   node overview.mjs <master url> <screenshot dir>
// The harness has run ok-job twice (succeeded) and fail-job once (exit 3), and mars-job fires
// every second with a selector no worker matches, so its ticks are recorded missed.
import assert from "node:assert/strict";
import path from "node:path";
import { args, launch, open } from "./lib.mjs";

const { base, shots } = args("overview.mjs");
const token = process.env.ETCRON_TEST_TOKEN;
assert.ok(token, "ETCRON_TEST_TOKEN is set");
const browser = await launch();
const shot = (page, name) => page.screenshot({ path: path.join(shots, name), fullPage: true });
try {
  const { page, check } = await open(browser, base);

  // The API answers 401: the console asks for a token, refuses a wrong one, keeps a right one.
  await page.goto(`${base}/#/overview`);
  const field = page.getByLabel("API token");
  await field.waitFor();
  await shot(page, "token-prompt.png");
  await field.fill("not-the-right-token-at-all");
  await field.press("Enter");
  await page.getByText("That token was refused").waitFor();
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Continue" }).click();
  await page.getByRole("heading", { name: "Overview" }).waitFor();
  await page.locator("#who", { hasText: "api-token (admin)" }).waitFor();
  await page.reload();
  await page.getByRole("heading", { name: "Overview" }).waitFor();
  assert.equal(await page.getByLabel("API token").count(), 0, "the token is kept for the session");

  // Totals, the chart, recent failures and missed ticks.
  const total = async (status) => Number(await page.locator(`ul.totals li[data-status=${status}] strong`).innerText());
  assert.ok((await total("succeeded")) >= 2, "two succeeded runs");
  assert.ok((await total("failed")) >= 1, "one failed run");
  assert.ok((await total("missed")) >= 1, "missed ticks");
  assert.ok((await page.locator("svg.chart rect.s-succeeded").count()) >= 1, "succeeded runs drawn");
  assert.ok((await page.locator("svg.chart rect.s-missed").count()) >= 1, "missed ticks drawn");
  assert.match(await page.locator("#failures").innerText(), /fail-job@manual-.*failed/);
  assert.match(await page.locator("#missed").innerText(), /mars-job@\d+.*no live worker matches selector/);
  await shot(page, "overview-1280.png");
  await page.getByRole("link", { name: "Last day" }).click();
  await page.waitForFunction(() => location.hash === "#/overview?window=24h");
  await page.locator('a[aria-pressed="true"]', { hasText: "Last day" }).waitFor();
  assert.ok((await page.locator("svg.chart rect.s-succeeded").count()) >= 1);
  await page.locator("#failures a").first().click();
  await page.getByLabel("Output").waitFor();
  assert.match(await page.locator(".status-failed").first().innerText(), /failed/);

  // Phone width, dark scheme (the token as the prompt would have stored it).
  const phone = await open(browser, base, { width: 375, height: 740, colorScheme: "dark", token });
  await phone.page.goto(`${base}/#/overview`);
  await phone.page.locator("svg.chart").waitFor();
  await shot(phone.page, "overview-375-dark.png");
  await phone.page.goto(`${base}/#/executions`);
  await phone.page.locator("tbody tr").first().waitFor();
  await shot(phone.page, "executions-375-dark.png");

  check();
  phone.check();
  console.log("token prompt and overview: ok");
} finally {
  await browser.close();
}
