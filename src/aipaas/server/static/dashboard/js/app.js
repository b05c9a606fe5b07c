// The dashboard's shell: sign-in, navigation between pages, and a refresh every few seconds.
import * as api from "./api.js";
import { h } from "./dom.js";
import cluster from "./pages/cluster.js";
import queues from "./pages/queues.js";
import jobs from "./pages/jobs.js";
import usage from "./pages/usage.js";
import alerts from "./pages/alerts.js";

const PAGES = { cluster, queues, jobs, usage, alerts };
const REFRESH_MS = 2000;
const $ = (id) => document.getElementById(id);
let current = null;
let timer = null;
let who = null;

function settings() {
  return { window: Number($("window").value), resource: $("resource").value };
}

function pageName() {
  const name = location.pathname.replace(/^\/dashboard\/?/, "").split("/")[0];
  return PAGES[name] ? name : "cluster";
}

export function go(path) {
  history.pushState({}, "", path);
  show();
}

let refreshing = null;

let lastRefresh = 0;

/** How often a page reads again: charts over a wide window change slowly and cost more. */
function period(page) {
  return page.period ? page.period(settings()) : REFRESH_MS;
}

function tick() {
  if (current && Date.now() - lastRefresh >= period(current)) refresh();
}

async function refresh() {
  // One refresh at a time: on a slow server, ticks that find one running are skipped.
  if (!current || refreshing === current) return;
  const page = (refreshing = current);
  lastRefresh = Date.now();
  try {
    await page.refresh(settings());
    if (page === current) $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (page === current) $("status").textContent = `could not update: ${error.message}`;
  } finally {
    if (refreshing === page) refreshing = null;
  }
}

function show() {
  if (current) current.stop();
  clearInterval(timer);
  const name = pageName();
  for (const link of document.querySelectorAll("nav a[data-page]")) {
    link.classList.toggle("active", link.dataset.page === name);
  }
  const params = new URLSearchParams(location.search);
  current = PAGES[name]({ who, params, go });
  $("main").replaceChildren(current.node);
  refresh();
  timer = setInterval(tick, REFRESH_MS);
}

function signedOut(message = "") {
  if (current) current.stop();
  current = null;
  clearInterval(timer);
  api.signOut();
  who = null;
  $("main").replaceChildren();
  $("nav").hidden = $("controls").hidden = $("logout").hidden = true;
  $("who").textContent = "";
  $("login").hidden = false;
  $("login-error").textContent = message;
}

async function signedIn() {
  try {
    who = await api.get("/whoami");
  } catch (error) {
    signedOut(error.status === 401 ? "That token is not valid." : `Sign-in failed: ${error.message}`);
    return;
  }
  $("login").hidden = true;
  $("nav").hidden = $("controls").hidden = $("logout").hidden = false;
  $("who").replaceChildren(h("span", { id: "whoami" },
    `${who.user} · ${who.tenant || "all tenants"} · ${who.role}`));
  show();
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  api.signIn($("token").value.trim());
  $("token").value = "";
  signedIn();
});
$("logout").addEventListener("click", () => signedOut());
for (const id of ["window", "resource"]) $(id).addEventListener("change", refresh);
document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-page], a[data-go]");
  if (!link || event.ctrlKey || event.metaKey) return;
  event.preventDefault();
  go(link.getAttribute("href"));
});
window.addEventListener("popstate", () => who && show());
api.whenUnauthorised(() => signedOut("The session ended: sign in again."));

if (api.token()) signedIn(); else signedOut();
