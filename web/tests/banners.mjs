// Browser test of the console when the master loses a backing store, run by tests/tests/it/features/ui.rs:
//   node banners.mjs <master url> <screenshot dir> mongodb|etcd
// `mongodb`: the harness stopped the mongod; jobs still list (from etcd) with
// a warning, and the executions page says records are unavailable. `etcd`: etcd is gone too.
import assert from "node:assert/strict";
import path from "node:path";
import { args, launch, open } from "./lib.mjs";

const { base, shots, rest } = args("banners.mjs");
const [down] = rest;
assert.ok(down === "mongodb" || down === "etcd", "third argument: mongodb or etcd");
const browser = await launch();
try {
  const { page, check } = await open(browser, base, { token: process.env.ETCRON_TEST_TOKEN });
  const banner = page.locator("#banner");
  if (down === "mongodb") {
    await page.goto(`${base}/#/jobs`);
    await page.locator('tr[data-job="ok-job"]').waitFor();
    await banner.waitFor();
    assert.match(await banner.innerText(), /cannot reach MongoDB/);
    assert.equal(await banner.getAttribute("class"), "warn", "a warning: the jobs are still shown");
    await page.screenshot({ path: path.join(shots, "banner-mongodb-jobs.png"), fullPage: true });
    await page.goto(`${base}/#/executions`);
    await banner.waitFor();
    assert.match(await banner.innerText(), /cannot reach MongoDB: execution records cannot be searched/);
    await page.screenshot({ path: path.join(shots, "banner-mongodb-executions.png"), fullPage: true });
  } else {
    await page.goto(`${base}/#/jobs`);
    await banner.waitFor({ timeout: 20_000 });
    assert.match(await banner.innerText(), /cannot reach etcd/);
    await page.locator(".empty", { hasText: "retrying every 10 seconds" }).waitFor();
    assert.equal(await banner.getAttribute("class"), "error");
    await page.screenshot({ path: path.join(shots, "banner-etcd.png"), fullPage: true });
  }
  check();
  console.log(`banner with ${down} down: ok`);
} finally {
  await browser.close();
}
