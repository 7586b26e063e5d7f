// Browser test of etcd's storage warning, run by tests/tests/it/faults/etcd_alarm.rs while etcd has its
// NOSPACE alarm raised: every page shows the warning above its own content.
//   node storage.mjs <master url> <screenshot dir>
import assert from "node:assert/strict";
import path from "node:path";
import { args, launch, open } from "./lib.mjs";

const { base, shots } = args("storage.mjs");
const browser = await launch();
try {
  const { page, check } = await open(browser, base);
  for (const view of ["jobs", "executions", "workers"]) {
    await page.goto(`${base}/#/${view}`);
    const banner = page.locator("#etcd-storage-banner");
    await banner.waitFor({ state: "visible", timeout: 20_000 });
    assert.match(await banner.innerText(), /NOSPACE.*refuses every write/);
  }
  await page.screenshot({ path: path.join(shots, "etcd-storage-banner.png"), fullPage: true });
  check();
  console.log("etcd storage banner: ok");
} finally {
  await browser.close();
}
