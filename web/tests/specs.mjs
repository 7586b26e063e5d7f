// Browser test of the refused-specs banner, run by tests/tests/it/api/spec_check.rs while a stored
// spec is refused by this version: every page names the job, its field and why, above its content.
//   node specs.mjs <master url> <screenshot dir>
import assert from "node:assert/strict";
import path from "node:path";
import { args, launch, open } from "./lib.mjs";

const { base, shots } = args("specs.mjs");
const browser = await launch();
try {
  const { page, check } = await open(browser, base);
  for (const view of ["jobs", "executions", "workers"]) {
    await page.goto(`${base}/#/${view}`);
    const banner = page.locator("#specs-banner");
    await banner.waitFor({ state: "visible", timeout: 20_000 });
    const text = await banner.innerText();
    assert.match(text, /1 stored job is refused by this version and does not run/);
    assert.match(text, /old-question \(schedule: .*stands alone/);
    assert.match(text, /etcronctl jobs check/);
  }
  await page.screenshot({ path: path.join(shots, "specs-banner.png"), fullPage: true });
  check();
  console.log("refused specs banner: ok");
} finally {
  await browser.close();
}
