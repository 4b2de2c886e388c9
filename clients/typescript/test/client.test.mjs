// The TypeScript client against a served noumena (NOUMENA_URL, NOUMENA_ADMIN_KEY; started by
// tests/e2e/test_typescript_client.py), and its retries against a stand-in that answers 503 then 200.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { Noumena, NotFound, InvalidInput, AmbiguousName, Conflict, Unauthorized, Forbidden, Unavailable }
  from "../dist/index.js";

const url = process.env.NOUMENA_URL;
const adminKey = process.env.NOUMENA_ADMIN_KEY;
const tenant = `ts${process.pid}`;
const operator = new Noumena(url, { apiKey: adminKey });
const setup = (async () => {
  await operator.admin.createTenant({ tenant });
  const issued = await operator.admin.createKey({ tenant, label: "service" });
  const scoped = await operator.admin.createKey({ tenant, agents: ["agent:ts-assistant"] });
  return { key: issued.key, scoped: scoped.key, scopedId: scoped.key_id };
})();

test("every route, and each read carries the last write's position", async () => {
  const { key, scoped, scopedId } = await setup;
  const sent = [];
  const recording = (input, init) => { sent.push({ url: String(input), body: init?.body }); return fetch(input, init); };
  const client = new Noumena(url, { apiKey: key, fetch: recording });
  const wang = await client.entities.register({ ref: "person:ts-wang", label: "Wang Wei", aliases: ["王总"] });
  assert.equal(client.lastPosition, wang.position);
  await client.entities.register({ ref: "agent:ts-assistant", label: "Wang's assistant" });
  await client.entities.register({ ref: "person:ts-li", label: "Li Na", aliases: ["李总"] });
  const events = await client.events.ingest([
    { event_id: "ts-s1", tenant, type: "session.started",
      payload: { session_id: "ts-main", agent: "agent:ts-assistant", kind: "main", serving: "person:ts-wang" } },
    { event_id: "ts-m1", tenant, type: "message.appended",
      payload: { session_id: "ts-main", message_id: "m1", role: "user", content: "Li and Wang are old classmates" } },
  ]);
  assert.equal(events.accepted, 2);
  const fact = await client.facts.assert({ subject: "person:ts-li", relation: "knows", object: "person:ts-wang",
                                         reason: "old classmates", source: { session_id: "ts-main", message_ids: ["m1"] } });
  assert.equal(fact.change, "asserted");
  await client.facts.assert({ subject: "agent:ts-assistant", relation: "serves", object: "person:ts-wang" });
  const found = await client.entities.find({ q: "王总" });
  assert.equal(found.data[0].ref, "person:ts-wang");
  assert.ok(sent.at(-1).url.includes(`min_position=${client.lastPosition}`), sent.at(-1).url);
  assert.deepEqual((await client.entities.get("person:ts-li")).aliases, ["李总"]);
  const history = await client.facts.get(fact.fact_id);
  assert.equal(history.current.status, "current");
  assert.ok((await client.graph.get({ limit: 100 })).count >= 2);
  const view = await client.perspectives.get({ agent: "Wang's assistant", serving: "王总" });
  assert.equal(view.agent, "agent:ts-assistant");
  assert.ok(view.items.some((i) => i.fact_id === fact.fact_id));
  assert.match(await client.perspectives.markdown({ agent: "agent:ts-assistant", serving: "person:ts-wang" }), /Li Na/);
  assert.equal((await client.perspectives.deepen(view.perspective_id)).deeper, true);
  assert.equal((await client.perspectives.explain(view.perspective_id)).perspective_id, view.perspective_id);
  await client.memory.markUsed({ agent: "agent:ts-assistant", fact_ids: [fact.fact_id] });
  const before = client.lastPosition;
  const recalled = await client.memory.recall({ agent: "agent:ts-assistant", subject: "person:ts-li", serving: "person:ts-wang" });
  assert.deepEqual(recalled.data.map((f) => f.fact_id), [fact.fact_id]);
  assert.equal(JSON.parse(sent.at(-1).body).min_position, before);  // (a POST read carries it in its body)
  const searched = await client.search.run({ agent: "agent:ts-assistant", query: "classmates", serving: "person:ts-wang" });
  assert.ok(searched.items.some((i) => i.fact_id === fact.fact_id));  // (beside the turns that match)
  assert.equal((await client.search.explain(searched.search_id)).search_id, searched.search_id);
  assert.equal((await client.sessions.workers("ts-main")).session.agent, "agent:ts-assistant");
  const context = await client.contexts.assemble("ts-main", { message: "who does Li know?" });
  assert.ok(context.tokens > 0);
  assert.equal((await client.contexts.explain(context.context_id)).context_id, context.context_id);
  assert.equal((await client.facts.invalidate(fact.fact_id, { reason: "never met" })).change, "invalidated");
  const receipt = await client.memory.forget("person:ts-li");
  assert.ok(receipt.keys_deleted >= 1 && client.lastPosition === receipt.position);
  assert.equal((await client.entities.get("person:ts-li")).label, "[forgotten]");
  assert.deepEqual(await client.operations.healthz(), { status: "ok" });
  assert.ok((await client.operations.readyz()).log_position >= receipt.position);
  assert.match(await client.operations.metrics(), /noumena_/);
  assert.ok((await operator.admin.listKeys({ tenant })).count >= 2);
  assert.equal((await operator.admin.revokeKey(scopedId)).key_id, scopedId);
  await assert.rejects(new Noumena(url, { apiKey: scoped }).entities.find({ q: "wang" }), Unauthorized);
});

test("problems are thrown as typed errors", async () => {
  const { key } = await setup;
  const client = new Noumena(url, { apiKey: key });
  await client.entities.register({ ref: "person:ts-boss-a", label: "Boss A", aliases: ["Boss"] });
  await client.entities.register({ ref: "person:ts-boss-b", label: "Boss B", aliases: ["Boss"] });
  await assert.rejects(client.entities.get("person:ts-nobody"), (e) => e instanceof NotFound && e.field === "path.ref");
  await assert.rejects(client.facts.assert({ subject: "person:ts-boss-a", relation: "knows", object: "person:ts-boss-b",
                                           confidence: 2 }),
                       (e) => e instanceof InvalidInput && e.field === "body.confidence" && e.slug === "invalid-input");
  await assert.rejects(client.perspectives.get({ agent: "agent:ts-assistant", serving: "Boss" }),
                       (e) => e instanceof AmbiguousName && e.candidates.length === 2);
  const fact = await client.facts.assert({ subject: "person:ts-boss-a", relation: "knows", object: "person:ts-boss-b" });
  await client.facts.invalidate(fact.fact_id, { reason: "no" });
  await assert.rejects(client.facts.invalidate(fact.fact_id, { reason: "no" }), Conflict);
  await assert.rejects(new Noumena(url, { apiKey: "nk_000000000000_wrong" }).entities.find(), Unauthorized);
  const scoped = (await operator.admin.createKey({ tenant, agents: ["agent:ts-assistant"] })).key;
  await assert.rejects(new Noumena(url, { apiKey: scoped }).entities.find(), (e) => e instanceof Forbidden);
});

async function standIn(script) {
  const seen = [];
  const server = createServer((request, response) => {
    seen.push(Date.now());
    const [status, headers] = script.shift() ?? [200, {}];
    response.writeHead(status, { "Content-Type": "application/json", ...headers });
    response.end(JSON.stringify(status === 200 ? { data: [{ ref: "person:li", label: "Li", kind: "person" }], count: 1 }
      : { type: "https://noumena.dev/problems/busy", title: "Busy", status, detail: "try later" }));
  });
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  return { url: `http://127.0.0.1:${server.address().port}`, seen, close: () => server.close() };
}

test("a 503 then 200 is retried after its Retry-After", async () => {
  const stand = await standIn([[503, { "Retry-After": "1" }]]);
  try {
    const found = await new Noumena(stand.url, { apiKey: "nk_x" }).entities.find({ q: "li" });
    assert.equal(found.data[0].ref, "person:li");
    assert.equal(stand.seen.length, 2);
    assert.ok(stand.seen[1] - stand.seen[0] >= 950, `waited ${stand.seen[1] - stand.seen[0]} ms`);
  } finally {
    stand.close();
  }
});

test("a 429 is retried and a lasting 503 is thrown once the retries are spent", async () => {
  const stand = await standIn([[429, { "Retry-After": "0" }], [503, { "Retry-After": "0" }],
                               [503, { "Retry-After": "0" }], [503, { "Retry-After": "0" }]]);
  try {
    await assert.rejects(new Noumena(stand.url, { apiKey: "nk_x", retries: 3 }).entities.find({ q: "li" }),
                         (e) => e instanceof Unavailable && e.detail === "try later");
    assert.equal(stand.seen.length, 4);
  } finally {
    stand.close();
  }
});
