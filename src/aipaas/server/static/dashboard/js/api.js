// Every read goes through the API with the signed-in token: the server decides what a tenant sees.
const KEY = "aipaas.token";
const BASE = "/api/v1";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export const token = () => sessionStorage.getItem(KEY);
export const signIn = (value) => sessionStorage.setItem(KEY, value);
export const signOut = () => sessionStorage.removeItem(KEY);

let onUnauthorised = () => {};
export const whenUnauthorised = (callback) => { onUnauthorised = callback; };

function url(path, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") query.set(key, value);
  }
  const text = query.toString();
  return BASE + path + (text ? "?" + text : "");
}

async function send(path, { params, method = "GET", body, type, signal } = {}) {
  const headers = { Authorization: `Bearer ${token()}` };
  if (type) headers["Content-Type"] = type;
  const answer = await fetch(url(path, params), { method, headers, body, signal });
  if (answer.status === 401) onUnauthorised();
  if (!answer.ok) {
    let message = answer.statusText;
    try { message = (await answer.json()).message || message; } catch { /* not JSON */ }
    throw new ApiError(answer.status, message);
  }
  return answer;
}

export async function get(path, params) {
  return (await send(path, { params })).json();
}

/** Every item of a list, following metadata.continue (at most `pages` pages). */
export async function list(path, params = {}, pages = 10) {
  let items = [];
  let next;
  for (let page = 0; page < pages; page++) {
    const answer = await get(path, { ...params, continue: next });
    items = items.concat(answer.items);
    next = answer.metadata && answer.metadata.continue;
    if (!next) break;
  }
  return items;
}

/** The items of a list, or null where the server has no such kind (404). */
export async function listIfKnown(path, params) {
  try {
    return await list(path, params);
  } catch (error) {
    if (error.status === 404) return null;
    throw error;
  }
}

/** A POST without a body (cancel): the answer's JSON. */
export async function post(path, params) {
  return (await send(path, { params, method: "POST" })).json();
}

export async function applyYaml(text) {
  return (await send("/apply", { method: "POST", body: text, type: "application/yaml" })).json();
}

/** Streams a job's logs to `onText` until the server ends the answer (the job finished). */
export async function followLogs(name, params, onText, signal) {
  const answer = await send(`/jobs/${encodeURIComponent(name)}/logs`,
    { params: { ...params, follow: "true" }, signal });
  const reader = answer.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    onText(decoder.decode(value, { stream: true }));
  }
}
