// Hash routing: #/NAME/REST?QUERY shows the view NAME (the jobs list for an unknown one),
// marks its section in the nav, asks for a token on a 401 and says who the token is.

import { app, h } from "./format.js";
import { TOKEN_KEY, banner, explain, rolesText, whoami } from "./api.js";
import { autoRefresh, refreshTimer, setRoute } from "./nav.js";
import { button } from "./controls.js";
import { jobsView } from "./jobs.js";
import { jobView } from "./job.js";
import { historyView } from "./history.js";
import { editView } from "./editor.js";
import { executionsView } from "./executions.js";
import { stopFollowing } from "./stream.js";
import { executionView } from "./execution.js";
import { workersView } from "./workers.js";
import { calendarsView } from "./calendars.js";
import { poolsView } from "./pools.js";
import { workflowsView } from "./workflows.js";
import { overviewView } from "./overview.js";

/** The API answered 401: ask for a token, keep it for this browser session, retry. */
function tokenView(refused) {
  const field = h("input", { type: "password", id: "api-token", autocomplete: "current-password", "aria-label": "API token", required: true });
  const form = h("form", { class: "token", "aria-label": "Sign in" },
    h("h1", {}, "API token needed"),
    h("p", {}, "This master requires a bearer token. It is kept for this browser tab only, until you close it."),
    refused ? h("p", { class: "field-error", role: "alert" }, "That token was refused; check it and try again.") : "",
    h("label", { for: "api-token" }, "Token"), field, h("button", { type: "submit", class: "primary" }, "Continue"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, field.value.trim());
    route();
  });
  app().replaceChildren(form);
  field.focus();
}

const views = { overview: overviewView, jobs: jobsView, job: jobView, history: historyView, new: editView, edit: editView, executions: executionsView, execution: executionView, workers: workersView, calendars: calendarsView, pools: poolsView, workflows: workflowsView };
const NAV_OF = { job: "jobs", history: "jobs", new: "jobs", edit: "jobs", execution: "executions", workflows: "executions" };
const TITLE_OF = { overview: "Overview", jobs: "Jobs", job: "Job", history: "History", new: "New job", edit: "Edit", executions: "Executions", execution: "Execution", workers: "Workers", calendars: "Calendars", pools: "Pools", workflows: "Workflow run" };

/** The tab's title: what the page shows (the job or execution it is about), then etcron. */
function titleOf(name, rest) {
  const what = TITLE_OF[name] || "Jobs";
  const about = rest ? decodeURIComponent(rest) : "";
  return `${about ? `${about} · ${what}` : what} — etcron`;
}

/** Shows who the token belongs to, with a way to forget it (only when the API has tokens). */
let whoShown = null;
async function showWho() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (whoShown === token) return;
  whoShown = token;
  const el = document.getElementById("who");
  if (!token) { el.replaceChildren(); return; }
  try {
    const me = await whoami();
    const out = h("button", { type: "button", class: "link" }, "Sign out");
    out.addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); });
    el.replaceChildren(h("span", { class: "muted", id: "who-name" }, `${me.name} (${rolesText(me)}) `), out);
  } catch { el.replaceChildren(); }
}

/** The newest route started, and the newest whose view has rendered. */
let routeSeq = 0;
let renderedSeq = 0;

export async function route({ quiet = false } = {}) {
  const seq = ++routeSeq;
  clearTimeout(refreshTimer);
  stopFollowing();
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "jobs").split("?");
  const slash = path.indexOf("/");
  const name = slash < 0 ? path : path.slice(0, slash);
  const rest = slash < 0 ? "" : path.slice(slash + 1);
  const view = views[name] || jobsView;
  const nav = NAV_OF[name] || name;
  document.title = titleOf(views[name] ? name : "jobs", rest);
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === nav) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  if (!quiet) banner("");
  try {
    await view(new URLSearchParams(query || ""), rest);
    // A route started earlier that rendered after a newer one (its requests were slower) has
    // put an old page over the current one: render the current one again.
    if (seq < renderedSeq) { route({ quiet: true }); return; }
    renderedSeq = seq;
    showWho();
    if (quiet && document.getElementById("banner").className === "error") banner("");
  } catch (e) {
    if (e.status === 401) {
      const had = !!sessionStorage.getItem(TOKEN_KEY);
      sessionStorage.removeItem(TOKEN_KEY);
      tokenView(had);
      return;
    }
    banner(explain(e));
    const transient = e.status === 503 || e instanceof TypeError;
    if (app().textContent.trim() === "Loading…" || !quiet) {
      app().replaceChildren(h("div", { class: "empty" },
        transient ? "Nothing to show until the master can answer; retrying every 10 seconds. " : `${e.message} `,
        button("Retry now", async () => {})));
    }
    if (transient) autoRefresh(10000);
  }
}

setRoute(route);
