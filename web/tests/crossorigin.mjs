// A page on another origin (another port of the same host, as a malicious page or a DNS
// rebinding would be) tries to pause a job through the master's open API. The master must
// refuse it (403) and the job must stay unpaused.
import http from "node:http";
import assert from "node:assert/strict";
import { args, launch } from "./lib.mjs";

const { base } = args("crossorigin.mjs");
const target = `${base}/api/jobs/target/pause`;
// A simple request (no preflight): the browser sends it, and reading the answer is not needed.
const page = `<!doctype html><title>elsewhere</title><script>
  fetch(${JSON.stringify(target)}, { method: "POST", mode: "no-cors" }).then(
    () => { document.title = "sent"; }, () => { document.title = "failed"; });
</script>`;
const server = http.createServer((req, res) => {
  res.writeHead(200, { "content-type": "text/html" });
  res.end(page);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const elsewhere = `http://127.0.0.1:${server.address().port}/`;
const browser = await launch();
try {
  const tab = await browser.newPage();
  const answered = tab.waitForResponse((r) => r.url() === target);
  await tab.goto(elsewhere);
  const response = await answered;
  assert.equal(response.status(), 403, "the master refused a change from another origin");
  const job = await (await fetch(`${base}/api/jobs/target`)).json();
  assert.equal(job.paused, null, "the job is not paused");
  console.log("a change from another origin is refused: ok");
} finally {
  await browser.close();
  server.close();
}
