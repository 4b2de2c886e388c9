// noumena's HTTP API from TypeScript: fetch-based, no runtime dependency, types generated from the OpenAPI document
// (src/schema.ts, by openapi-typescript: `npm run generate` after clients/typescript/scripts/openapi.py).
// One group per OpenAPI tag, one method per operation (`client.entities.find`). Read-your-writes: the last write's
// position is sent as `min_position` by every later read. 503 and 429 are retried after their Retry-After. A problem
// document is thrown as a ProblemError subclass.

import type { components, operations } from "./schema.js";

export type { components, operations, paths } from "./schema.js";

type Schemas = components["schemas"];
type Query<O extends keyof operations> = operations[O]["parameters"] extends { query?: infer Q } ? NonNullable<Q> : never;
type Body<O extends keyof operations> = operations[O] extends { requestBody: { content: { "application/json": infer B } } }
  ? B : never;
type Answer<O extends keyof operations> = operations[O]["responses"] extends { 200: { content: { "application/json": infer A } } }
  ? A : never;
/** Fields the server fills in when omitted, made optional (openapi-typescript marks defaulted fields required). */
type Loose<T, K extends keyof T> = Omit<T, K> & Partial<Pick<T, K>>;

export type Problem = Schemas["Problem"];
export type EntitiesFound = Answer<"findEntities">;
export type Entity = Answer<"getEntity">;
export type Perspective = Schemas["PerspectivePublic"];

/** An RFC 9457 problem answered by noumena: its status, kind (`slug`), offending `field` and, for an ambiguous name,
 * the `candidates`. */
export class ProblemError extends Error {
  readonly status: number;
  readonly problem: Partial<Problem> & Record<string, unknown>;
  readonly headers: Headers;

  constructor(status: number, problem: Partial<Problem> & Record<string, unknown>, headers: Headers) {
    super(`${status} ${problem.title ?? "Error"}: ${problem.detail ?? ""}`);
    this.name = new.target.name;
    this.status = status;
    this.problem = problem;
    this.headers = headers;
  }

  get slug(): string {
    return String(this.problem.type ?? "").replace(/\/$/, "").split("/").pop() ?? "";
  }

  get field(): string | null | undefined {
    return this.problem.field;
  }

  get detail(): string {
    return String(this.problem.detail ?? "");
  }

  get candidates(): NonNullable<Problem["candidates"]> {
    return this.problem.candidates ?? [];
  }
}

export class BadRequest extends ProblemError {}
export class Unauthorized extends ProblemError {}
export class Forbidden extends ProblemError {}
export class NotFound extends ProblemError {}
export class Conflict extends ProblemError {}
export class PayloadTooLarge extends ProblemError {}
export class InvalidInput extends ProblemError {}
export class AmbiguousName extends InvalidInput {}
export class RateLimited extends ProblemError {}
export class Unavailable extends ProblemError {}
export class ServerError extends ProblemError {}

const BY_STATUS: Record<number, typeof ProblemError> = {
  400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: PayloadTooLarge,
  422: InvalidInput, 429: RateLimited, 503: Unavailable,
};

/** The error for a refused answer (a problem document, or whatever came with the status). */
export function problemFor(status: number, body: unknown, headers: Headers): ProblemError {
  const problem = (body && typeof body === "object" ? body : { title: "Error", detail: String(body).slice(0, 500) }) as
    Partial<Problem> & Record<string, unknown>;
  let kind = BY_STATUS[status] ?? ServerError;
  if (status === 422 && String(problem.type ?? "").endsWith("/ambiguous-name")) kind = AmbiguousName;
  return new kind(status, problem, headers);
}

export interface Options {
  /** `nk_...`: a tenant's API key, or the admin key for the admin methods. */
  apiKey?: string;
  /** Retries of a 503 or 429 answer (default 3). */
  retries?: number;
  /** The longest wait before a retry, in seconds (default 30). */
  longestWait?: number;
  /** A fetch of your own (default: the global fetch). */
  fetch?: typeof fetch;
}

interface Call {
  method: "GET" | "POST" | "DELETE";
  path: string;
  query?: Record<string, unknown>;
  body?: Record<string, unknown>;
  read?: boolean;
  write?: boolean;
  bodyPosition?: boolean;
  text?: boolean;
  accept503?: boolean;
}

const enc = encodeURIComponent;

/** Seconds to wait before a retry: Retry-After (seconds or a date), else 0.5, 1, 2 ... */
export function retryDelay(headers: Headers, attempt: number, longest: number): number {
  const header = headers.get("retry-after");
  let delay = 0.5 * 2 ** attempt;
  if (header) {
    const seconds = Number(header);
    delay = Number.isFinite(seconds) ? seconds : (Date.parse(header) - Date.now()) / 1000;
    if (!Number.isFinite(delay)) delay = 0.5 * 2 ** attempt;
  }
  return Math.max(0, Math.min(delay, longest));
}

type Send = <T>(call: Call) => Promise<T>;

/** The operations of one OpenAPI tag, sent through the client that holds the group. */
class Group {
  constructor(protected readonly send: Send) {}
}

export class Events extends Group {
  /** Write a batch of wire-format envelopes, all or nothing (POST /v1/events). */
  ingest(events: Body<"ingestEvents">["events"]): Promise<Answer<"ingestEvents">> {
    return this.send({ method: "POST", path: "/v1/events", body: { events }, write: true });
  }
}

export class Entities extends Group {
  /** Register an entity, or update its label and aliases (POST /v1/entities). */
  register(entity: Loose<Body<"registerEntity">, "aliases" | "hub">): Promise<Answer<"registerEntity">> {
    return this.send({ method: "POST", path: "/v1/entities", body: entity, write: true });
  }

  /** Entities a name may mean, best first; without `q`, every entity (GET /v1/entities). */
  find(query: Query<"findEntities"> = {}): Promise<EntitiesFound> {
    return this.send({ method: "GET", path: "/v1/entities", query, read: true });
  }

  /** One entity as it is now (GET /v1/entities/{ref}). */
  get(ref: string, query: Query<"getEntity"> = {}): Promise<Entity> {
    return this.send({ method: "GET", path: `/v1/entities/${ref.split("/").map(enc).join("/")}`, query,
                       read: true });
  }
}

export class Facts extends Group {
  /** Assert `subject -relation-> object` (POST /v1/facts). */
  assert(fact: Loose<Body<"assertFact">, "scope">): Promise<Answer<"assertFact">> {
    return this.send({ method: "POST", path: "/v1/facts", body: fact, write: true });
  }

  /** End a current fact, kept in history (POST /v1/facts/{fact_id}/invalidate). */
  invalidate(factId: string, body: Body<"invalidateFact">): Promise<Answer<"invalidateFact">> {
    return this.send({ method: "POST", path: `/v1/facts/${enc(factId)}/invalidate`, body, write: true });
  }

  /** A fact now, every version, every change (GET /v1/facts/{fact_id}). */
  get(factId: string, query: Query<"getFact"> = {}): Promise<Answer<"getFact">> {
    return this.send({ method: "GET", path: `/v1/facts/${enc(factId)}`, query, read: true });
  }
}

export class Graph extends Group {
  /** The facts believed at `recorded_at`, holding at `valid_at`, paged (GET /v1/graph). */
  get(query: Query<"getGraph"> = {}): Promise<Answer<"getGraph">> {
    return this.send({ method: "GET", path: "/v1/graph", query, read: true });
  }
}

export class Perspectives extends Group {
  /** What an agent sees (GET /v1/perspectives); refs or names. */
  get(query: Omit<Query<"getPerspective">, "format">): Promise<Perspective> {
    return this.send({ method: "GET", path: "/v1/perspectives", query: { ...query, format: "json" }, read: true });
  }

  /** Only the context block of a perspective, as markdown. */
  markdown(query: Omit<Query<"getPerspective">, "format">): Promise<string> {
    return this.send({ method: "GET", path: "/v1/perspectives", query: { ...query, format: "markdown" }, read: true,
                       text: true });
  }

  /** The same standpoint one hop deeper (POST /v1/perspectives/{id}/deepen). */
  deepen(perspectiveId: string, query: Omit<Query<"deepenPerspective">, "format"> = {}): Promise<Perspective> {
    return this.send({ method: "POST", path: `/v1/perspectives/${enc(perspectiveId)}/deepen`,
                       query: { ...query, format: "json" }, read: true });
  }

  /** Inputs, parameters and outputs of a served perspective (GET /v1/perspectives/{id}/explain). */
  explain(perspectiveId: string): Promise<Answer<"explainPerspective">> {
    return this.send({ method: "GET", path: `/v1/perspectives/${enc(perspectiveId)}/explain` });
  }
}

export class Memory extends Group {
  /** Facts about a subject, nearest memory tier first (POST /v1/memory/recall). */
  recall(body: Loose<Body<"recall">, "deeper">): Promise<Answer<"recall">> {
    return this.send({ method: "POST", path: "/v1/memory/recall", body, read: true, write: true,
                       bodyPosition: true });
  }

  /** Record that an agent used these facts (POST /v1/memory/used). */
  markUsed(body: Body<"markUsed">): Promise<Answer<"markUsed">> {
    return this.send({ method: "POST", path: "/v1/memory/used", body, write: true });
  }

  /** Really delete what is known about a subject (POST /v1/forget). */
  forget(subject: string): Promise<Answer<"forget">> {
    return this.send({ method: "POST", path: "/v1/forget", body: { subject }, write: true });
  }
}

export class Search extends Group {
  /** Facts and turns matching a query by content (POST /v1/search). */
  run(body: Loose<Body<"search">, "about" | "k" | "record">): Promise<Answer<"search">> {
    return this.send({ method: "POST", path: "/v1/search", body, read: true, bodyPosition: true });
  }

  /** The evidence of a served search (GET /v1/searches/{id}/explain). */
  explain(searchId: string): Promise<Answer<"explainSearch">> {
    return this.send({ method: "GET", path: `/v1/searches/${enc(searchId)}/explain` });
  }
}

export class Contexts extends Group {
  /** The budgeted context block of a main session (POST /v1/sessions/{id}/context). */
  assemble(sessionId: string, body: Body<"assembleContext"> = {}): Promise<Answer<"assembleContext">> {
    return this.send({ method: "POST", path: `/v1/sessions/${enc(sessionId)}/context`, body, read: true,
                       bodyPosition: true });
  }

  /** The evidence of a served context (GET /v1/contexts/{id}/explain). */
  explain(contextId: string): Promise<Answer<"explainContext">> {
    return this.send({ method: "GET", path: `/v1/contexts/${enc(contextId)}/explain` });
  }
}

export class Sessions extends Group {
  /** A main session and the workers it dispatched (GET /v1/sessions/{id}/workers). */
  workers(sessionId: string, query: Query<"listWorkers"> = {}): Promise<Answer<"listWorkers">> {
    return this.send({ method: "GET", path: `/v1/sessions/${enc(sessionId)}/workers`, query, read: true });
  }
}

/** With the admin key. */
export class Admin extends Group {
  /** Create a tenant (POST /v1/admin/tenants). */
  createTenant(body: Loose<Body<"createTenant">, "display_name">): Promise<Answer<"createTenant">> {
    return this.send({ method: "POST", path: "/v1/admin/tenants", body, write: true });
  }

  /** Issue an API key, shown once (POST /v1/admin/keys). */
  createKey(body: Loose<Body<"createKey">, "label" | "agents">): Promise<Answer<"createKey">> {
    return this.send({ method: "POST", path: "/v1/admin/keys", body });
  }

  /** The keys issued, never the keys (GET /v1/admin/keys). */
  listKeys(query: Query<"listKeys"> = {}): Promise<Answer<"listKeys">> {
    return this.send({ method: "GET", path: "/v1/admin/keys", query });
  }

  /** Revoke a key (DELETE /v1/admin/keys/{key_id}). */
  revokeKey(keyId: string): Promise<Answer<"revokeKey">> {
    return this.send({ method: "DELETE", path: `/v1/admin/keys/${enc(keyId)}` });
  }
}

export class Operations extends Group {
  /** Liveness (GET /healthz). */
  healthz(): Promise<Record<string, string>> {
    return this.send({ method: "GET", path: "/healthz" });
  }

  /** Readiness, ready or not (GET /readyz: a 503 is answered, not thrown). */
  readyz(): Promise<Record<string, unknown>> {
    return this.send({ method: "GET", path: "/readyz", accept503: true });
  }

  /** Prometheus text (GET /metrics). */
  metrics(): Promise<string> {
    return this.send({ method: "GET", path: "/metrics", text: true });
  }
}

export class Noumena {
  readonly baseUrl: string;
  readonly retries: number;
  readonly longestWait: number;
  readonly events: Events;
  readonly entities: Entities;
  readonly facts: Facts;
  readonly graph: Graph;
  readonly perspectives: Perspectives;
  readonly memory: Memory;
  readonly search: Search;
  readonly contexts: Contexts;
  readonly sessions: Sessions;
  readonly admin: Admin;
  readonly operations: Operations;
  private readonly apiKey?: string;
  private readonly fetcher: typeof fetch;
  private position: number | null = null;

  constructor(baseUrl: string, options: Options = {}) {
    this.baseUrl = baseUrl.replace(/\/$/, "");
    this.apiKey = options.apiKey;
    this.retries = options.retries ?? 3;
    this.longestWait = options.longestWait ?? 30;
    this.fetcher = options.fetch ?? fetch;
    const send: Send = (call) => this.send(call);
    this.events = new Events(send);
    this.entities = new Entities(send);
    this.facts = new Facts(send);
    this.graph = new Graph(send);
    this.perspectives = new Perspectives(send);
    this.memory = new Memory(send);
    this.search = new Search(send);
    this.contexts = new Contexts(send);
    this.sessions = new Sessions(send);
    this.admin = new Admin(send);
    this.operations = new Operations(send);
  }

  /** The log position of the latest write this client made (sent as `min_position` by reads). */
  get lastPosition(): number | null {
    return this.position;
  }

  /** Make reads wait for `position` too (a write made elsewhere). */
  rememberPosition(position: number | null | undefined): void {
    if (typeof position === "number") this.position = Math.max(this.position ?? 0, position);
  }

  private async send<T>(call: Call): Promise<T> {
    const query = { ...(call.query ?? {}) };
    const body = call.body ? { ...call.body } : undefined;
    if (call.read && this.position !== null) {
      const target = call.bodyPosition ? body! : query;
      if (target.min_position === undefined || target.min_position === null) target.min_position = this.position;
    }
    const url = new URL(this.baseUrl + call.path);
    for (const [name, value] of Object.entries(query)) {
      if (value === undefined || value === null) continue;
      for (const one of Array.isArray(value) ? value : [value]) url.searchParams.append(name, String(one));
    }
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    if (body) headers["Content-Type"] = "application/json";
    for (let attempt = 0; ; attempt++) {
      const response = await this.fetcher(url, { method: call.method, headers,
                                                 body: body ? JSON.stringify(body) : undefined });
      if ((response.status === 503 || response.status === 429) && attempt < this.retries && !call.accept503) {
        await response.arrayBuffer();
        await new Promise((done) => setTimeout(done, retryDelay(response.headers, attempt, this.longestWait) * 1000));
        continue;
      }
      if (response.status >= 400 && !(call.accept503 && response.status === 503)) {
        const raw = await response.text();
        let parsed: unknown = raw;
        try { parsed = JSON.parse(raw); } catch { /* not JSON: keep the text */ }
        throw problemFor(response.status, parsed, response.headers);
      }
      const result = (call.text ? await response.text() : await response.json()) as T;
      if (call.write) this.rememberPosition((result as { position?: number | null }).position);
      return result;
    }
  }
}
