// The public /v1 API, with the key from this tab's session storage. Every failure becomes an ApiError whose
// message is the problem document's `detail` (RFC 9457), so the page can say what is wrong in words.

const KEY = "noumena.explorer.key";

export class ApiError extends Error {
  constructor(status, title, detail, field) {
    super(detail || title || `HTTP ${status}`);
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.field = field;
  }
}

export const key = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

// The requests not yet answered, with when each was sent: a page that waits says on what (the tests print it).
export const pending = new Map();
let requestCount = 0;

async function request(method, path, { params, body } = {}) {
  const mine = ++requestCount;
  pending.set(mine, { request: `${method} ${path}`, sent: performance.now() });
  try {
    return await send(method, path, { params, body });
  } finally {
    pending.delete(mine);
  }
}

async function send(method, path, { params, body }) {
  const url = new URL(`/v1${path}`, location.origin);
  for (const [name, value] of Object.entries(params || {})) {
    if (value === null || value === undefined || value === "") continue;
    for (const one of Array.isArray(value) ? value : [value]) url.searchParams.append(name, one);
  }
  const headers = { Accept: "application/json" };
  const current = key.get();
  if (current) headers.Authorization = `Bearer ${current}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                                  credentials: "omit", cache: "no-store" });
  } catch (error) {
    throw new ApiError(0, "Cannot reach the API", `cannot reach ${location.origin}: ${error.message}`);
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    if (data && (data.detail || data.title)) {
      const detail = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail);
      throw new ApiError(response.status, data.title, detail, data.field);
    }
    throw new ApiError(response.status, response.statusText, `${method} ${url.pathname} answered ${response.status}`
                       + (text ? `: ${text.slice(0, 200)}` : ""));
  }
  return data;
}

export const api = {
  entities: (q, limit = 50) => request("GET", "/entities", { params: { q, limit } }),
  entitiesOfKind: (kind, limit = 1000) => request("GET", "/entities", { params: { kind, limit } }),
  entity: (ref) => request("GET", `/entities/${ref.split("/").map(encodeURIComponent).join("/")}`),
  perspective: (params) => request("GET", "/perspectives", { params }),
  deepen: (id, budget) => request("POST", `/perspectives/${encodeURIComponent(id)}/deepen`,
                                  { params: { budget_tokens: budget } }),
  explainPerspective: (id) => request("GET", `/perspectives/${encodeURIComponent(id)}/explain`),
  explainContext: (id) => request("GET", `/contexts/${encodeURIComponent(id)}/explain`),
  context: (session, message) => request("POST", `/sessions/${encodeURIComponent(session)}/context`,
                                         { body: message ? { message } : {} }),
  session: (id) => request("GET", `/sessions/${encodeURIComponent(id)}/workers`),
  fact: (id, minPosition) => request("GET", `/facts/${encodeURIComponent(id)}`,
                                     { params: { min_position: minPosition } }),
  assertFact: (body) => request("POST", "/facts", { body }),
  invalidate: (id, reason) => request("POST", `/facts/${encodeURIComponent(id)}/invalidate`, { body: { reason } }),
  forget: (subject) => request("POST", "/forget", { body: { subject } }),
  graph: (params) => request("GET", "/graph", { params }),
  search: (body) => request("POST", "/search", { body }),
  explainSearch: (id) => request("GET", `/searches/${encodeURIComponent(id)}/explain`),
};
