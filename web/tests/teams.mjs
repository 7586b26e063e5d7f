// Browser test of teams in the console, run by tests/tests/it/features/ui.rs against a master whose tokens
// hold team roles (passed in ETCRON_TEAM_A_TOKEN: admin of team a; ETCRON_TEAM_B_TOKEN: operator
// of team b):
//   node teams.mjs <master url> <screenshot dir>
// The harness made a-job (team a), b-job (team b) and plain (no team), and ran each once.
import assert from "node:assert/strict";
import path from "node:path";
import { args, call, launch, open, waitRows } from "./lib.mjs";

const { base, shots } = args("teams.mjs");
const aToken = process.env.ETCRON_TEAM_A_TOKEN;
const bToken = process.env.ETCRON_TEAM_B_TOKEN;
assert.ok(aToken && bToken, "ETCRON_TEAM_A_TOKEN and ETCRON_TEAM_B_TOKEN are set");
const browser = await launch();
const shot = (page, name) => page.screenshot({ path: path.join(shots, name), fullPage: true });
try {
  // Team b's operator: its console lists b-job only, says whose token it is, and team a's job
  // URL is a job that does not exist.
  const b = await open(browser, base, { token: bToken });
  await waitRows(b.page, base, "#/jobs", "tbody tr", 1);
  assert.deepEqual(await b.page.locator("tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.job)), ["b-job"]);
  assert.equal((await b.page.locator('tbody tr td[data-label="Team"]').innerText()).trim(), "b");
  assert.equal(await b.page.getByText("a-job").count(), 0, "team a's job is nowhere on the page");
  await b.page.locator("#who", { hasText: "b-op (b: operator)" }).waitFor();
  await shot(b.page, "teams-jobs-b.png");

  await b.page.goto(`${base}/#/job/a-job`);
  await b.page.getByText('job "a-job" does not exist').first().waitFor();
  assert.equal(await b.page.getByText("echo from-a").count(), 0, "nothing of the job shows");
  await shot(b.page, "teams-not-found.png");

  // Its executions: b-job's only.
  await waitRows(b.page, base, "#/executions", "tbody tr", (n) => n >= 1);
  const ids = await b.page.locator("tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.id));
  assert.ok(ids.every((id) => id.startsWith("b-job@")), `only b-job's executions: ${ids}`);
  b.check();

  // Team a's admin: the filter by team, the team column, and the editor, which starts a new
  // job in its one team and shows a refusal to save into another team at the field.
  const a = await open(browser, base, { token: aToken, height: 1000 });
  await waitRows(a.page, base, "#/jobs", "tbody tr", 1);
  assert.deepEqual(await a.page.locator("tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.job)), ["a-job"]);
  await a.page.goto(`${base}/#/new`);
  await a.page.locator("#f-team").waitFor();
  assert.equal(await a.page.locator("#f-team").inputValue(), "a", "a new job starts in the token's team");
  await a.page.locator("#f-name").fill("made-by-team-a");
  await a.page.locator("#f-schedule").fill("@yearly");
  await a.page.locator("#f-task-command").fill("echo made by team a");
  await a.page.locator("#f-team").fill("b");
  await Promise.all([
    a.page.waitForResponse((r) => r.url().endsWith("/api/jobs/made-by-team-a") && r.status() === 403),
    a.page.getByRole("button", { name: "Create job" }).click(),
  ]);
  await a.page.locator("#err-f-team").waitFor();
  assert.match(await a.page.locator("#err-f-team").innerText(), /team "b"/);
  await shot(a.page, "teams-editor.png");
  await a.page.locator("#f-team").fill("a");
  await a.page.getByRole("button", { name: "Create job" }).click();
  await a.page.waitForFunction(() => location.hash === "#/job/made-by-team-a");
  assert.equal((await a.page.locator("#team").innerText()).trim(), "a");
  const made = await call(base, "GET", "/api/jobs/made-by-team-a", undefined, aToken);
  assert.equal(made.body.spec.team, "a");
  const hidden = await call(base, "GET", "/api/jobs/made-by-team-a", undefined, bToken);
  assert.equal(hidden.status, 404, "team b does not see it");
  await waitRows(a.page, base, "#/jobs?team=a", "tbody tr", 2);
  assert.equal(await a.page.locator('select[name="team"]').inputValue(), "a");
  a.check();
} finally {
  await browser.close();
}
