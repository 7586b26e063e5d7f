// Browser test of the workflow page, run by tests/tests/it/features/ui.rs after it saved
// extract → (ta, tb) → load (`after`) and put the run's steps into etcd as workers write them
// (extract and ta succeeded, tb failed), with tb's record naming the run: the graph's nodes in
// layers, coloured by state, its edges; a node opens its step's execution, whose page links
// back to the run; Resume reruns tb; an unknown run says so.
//   node workflows.mjs <master url> <screenshot dir> <run> <tb's execution id>
import assert from "node:assert/strict";
import path from "node:path";
import { args, launch, open, waitRows } from "./lib.mjs";

const { base, shots, rest: [run, tb] } = args("workflows.mjs");
const browser = await launch();
const shot = (page, name) => page.screenshot({ path: path.join(shots, name), fullPage: true });
try {
  const { page, check } = await open(browser, base);
  const hash = `#/workflows/${encodeURIComponent(run)}`;
  await waitRows(page, base, hash, "#workflow-graph g.wf-node", 4);
  const node = (job) => page.locator(`#workflow-graph g.wf-node[data-job="${job}"]`);
  const states = {};
  for (const job of ["extract", "ta", "tb", "load"]) states[job] = await node(job).getAttribute("data-state");
  assert.deepEqual(states, { extract: "succeeded", ta: "succeeded", tb: "failed", load: "not_reached" });
  assert.equal(await page.locator("#workflow-state").innerText(), "failed");
  assert.match(await node("tb").textContent(), /failed, attempt 1/);
  // Layers: the root, then ta and tb side by side, then load.
  const x = async (job) => (await node(job).locator("rect").boundingBox()).x;
  const [xe, xa, xb, xl] = [await x("extract"), await x("ta"), await x("tb"), await x("load")];
  assert.ok(xe < xa && xa === xb && xb < xl, `layers: ${[xe, xa, xb, xl]}`);
  const edges = await page.locator("#workflow-graph line.wf-edge").evaluateAll((ls) => ls.map((l) => `${l.dataset.edge} ${l.dataset.kind}`));
  assert.deepEqual(edges.sort(), ["extract>ta after", "extract>tb after", "ta>load after", "tb>load after"]);
  // The steps' table shows the results of those that succeeded.
  assert.match(await page.locator('#workflow-steps tr[data-job="ta"]').innerText(), /"rows":12/);
  await shot(page, "workflow.png");

  // A node opens its step's execution; the execution page links back to the run.
  await page.locator(`#workflow-graph a:has(g[data-job="tb"])`).click();
  await page.waitForURL((u) => u.hash === `#/execution/${encodeURIComponent(tb)}`);
  const link = page.locator("#workflow-link");
  await link.waitFor();
  assert.equal(await link.innerText(), run);
  await link.click();
  await page.locator("#workflow-graph").waitFor();

  // Resume: tb's next attempt requested in the run, said in the banner.
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith(`/api/workflows/${run}/resume`) && r.status() === 202),
    page.locator("#resume-workflow").click(),
  ]);
  await page.waitForFunction(() => document.getElementById("banner").textContent.includes("Resumed"));
  assert.match(await page.locator("#banner").innerText(), new RegExp(`tb \\(tb@dep-wf-${run}#2\\)`));

  // An unknown run says what the API says; a phone in the dark scheme still draws the graph.
  await waitRows(page, base, "#/workflows/1-000000000000", "#no-run", 1);
  assert.match(await page.locator("#no-run").innerText(), /unknown or expired/);
  check();
  const small = await open(browser, base, { width: 375, height: 800, colorScheme: "dark" });
  await waitRows(small.page, base, hash, "#workflow-graph g.wf-node", 4);
  await shot(small.page, "workflow-375-dark.png");
  small.check();
} finally {
  await browser.close();
}
