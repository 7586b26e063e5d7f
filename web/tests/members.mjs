// Browser test of the etcd member warning, run by tests/tests/it/faults/etcd_faults.rs while one etcd
// member is cut off: the page names the member and says requests go to the others.
//   node members.mjs <master url> <screenshot dir>
import assert from "node:assert/strict";
import path from "node:path";
import { args, launch, open } from "./lib.mjs";

const { base, shots } = args("members.mjs");
const browser = await launch();
try {
  const { page, check } = await open(browser, base);
  await page.goto(`${base}/#/jobs`);
  const banner = page.locator("#etcd-members-banner");
  await banner.waitFor({ state: "visible", timeout: 20_000 });
  assert.match(await banner.innerText(), /etcd member \S+:2379 is unhealthy .*requests go to the other members/);
  await page.screenshot({ path: path.join(shots, "etcd-members-banner.png"), fullPage: true });
  check();
  console.log("etcd members banner: ok");
} finally {
  await browser.close();
}
