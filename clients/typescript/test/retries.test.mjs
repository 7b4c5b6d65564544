// Bounded automatic retries: a 503, or a 409 concurrent_update (both promise nothing was changed), is
// sent again after Retry-After seconds, up to maxRetries times; any other error, a 409 reply_withheld
// included, is thrown at once. Ingest is sent in batches.
//
// The failures come from a real HTTP proxy in front of the live server that answers the first
// requests itself, in the API's error shape, and forwards the rest.

import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import { after, before, beforeEach, test } from "node:test";

import { Engram, ReplyWithheld, UnavailableError } from "../dist/index.js";
import { API_KEY, BASE_URL, message, thread } from "./support.mjs";

const proxy = {
  url: "",
  /** [status, code, Retry-After or null] answered to the next requests, in order. */
  failures: [],
  /** [arrival time in ms, forwarded?, request body] of each request. */
  seen: [],
  server: null,
};

before(async () => {
  proxy.server = createServer(async (request, response) => {
    const chunks = [];
    for await (const chunk of request) chunks.push(chunk);
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const failure = proxy.failures.shift();
    proxy.seen.push([performance.now(), failure === undefined, body ? JSON.parse(body.toString()) : null]);
    if (failure !== undefined) {
      const [status, code, retryAfter] = failure;
      const headers = { "Content-Type": "application/json" };
      if (retryAfter !== null) headers["Retry-After"] = retryAfter;
      response.writeHead(status, headers);
      response.end(JSON.stringify({ code, message: "injected", detail: {} }));
      return;
    }
    const forwarded = {};
    for (const name of ["authorization", "content-type"]) {
      if (request.headers[name]) forwarded[name] = request.headers[name];
    }
    const answer = await fetch(BASE_URL + request.url, { method: request.method, headers: forwarded, body });
    const headers = { "Content-Type": answer.headers.get("Content-Type") ?? "application/json" };
    if (answer.headers.has("Retry-After")) headers["Retry-After"] = answer.headers.get("Retry-After");
    response.writeHead(answer.status, headers);
    response.end(Buffer.from(await answer.arrayBuffer()));
  });
  proxy.server.listen(0, "127.0.0.1");
  await once(proxy.server, "listening");
  proxy.url = `http://127.0.0.1:${proxy.server.address().port}`;
});

after(() => proxy.server.close());

beforeEach(() => {
  proxy.failures = [];
  proxy.seen = [];
});

const forwarded = () => proxy.seen.map(([, sent]) => sent);

test("a 503 and a concurrent_update are retried and the write lands once", async () => {
  proxy.failures = [
    [503, "database_unavailable", "0"],
    [409, "concurrent_update", "0"],
  ];
  const engram = new Engram(proxy.url, API_KEY);
  const sent = message(thread("general"), "U1", "Deploys are on Tuesdays.");
  const [ingested] = await engram.ingest([sent]);
  assert.deepEqual(forwarded(), [false, false, true]);
  assert.ok(ingested.created);
  // The same body each time; sent again, it creates nothing.
  assert.deepEqual(proxy.seen[0][2], proxy.seen[2][2]);
  const [again] = await new Engram(BASE_URL, API_KEY).ingest([sent]);
  assert.equal(again.message_id, ingested.message_id);
  assert.equal(again.created, false);
});

test("Retry-After is honoured: the second try is not sent before it", async () => {
  proxy.failures = [[503, "database_unavailable", "1"]];
  await new Engram(proxy.url, API_KEY).ingest([message(thread("general"), "U1", "hello")]);
  const [[first], [second]] = proxy.seen;
  assert.ok(second - first >= 1000, `waited ${second - first} ms`);
});

test("retries are bounded, then the error is thrown with its code and Retry-After", async () => {
  proxy.failures = Array(5).fill([503, "database_unavailable", "0"]);
  const engram = new Engram(proxy.url, API_KEY, { maxRetries: 2 });
  await assert.rejects(engram.ingest([message(thread("general"), "U1", "hello")]), (error) => {
    assert.ok(error instanceof UnavailableError);
    assert.equal(error.code, "database_unavailable");
    assert.equal(error.retryAfter, 0);
    return true;
  });
  assert.deepEqual(forwarded(), [false, false, false]);
});

test("a wait longer than maxRetryWait is cut to it", async () => {
  proxy.failures = [[503, "database_unavailable", "3600"]];
  const started = performance.now();
  await new Engram(proxy.url, API_KEY, { maxRetryWait: 0 }).ingest([message(thread("general"), "U1", "hi")]);
  assert.ok(performance.now() - started < 5000);
  assert.deepEqual(forwarded(), [false, true]);
});

test("other conflicts are not retried: a withheld reply is final", async () => {
  proxy.failures = [
    [409, "reply_withheld", null],
    [409, "reply_withheld", null],
  ];
  await assert.rejects(new Engram(proxy.url, API_KEY).submitReply(1, "hello"), ReplyWithheld);
  assert.equal(proxy.seen.length, 1);
});

test("ingest is sent in batches of batchSize and answers every message in order", async () => {
  const messages = Array.from({ length: 7 }, (_, i) => message(thread("general"), "U1", `note ${i}`));
  const results = await new Engram(proxy.url, API_KEY).ingest(messages, { batchSize: 3 });
  assert.deepEqual(
    proxy.seen.map(([, , body]) => body.messages.length),
    [3, 3, 1],
  );
  assert.deepEqual(
    results.map((r) => r.external_id),
    messages.map((m) => m.external_id),
  );
  assert.ok(results.every((r) => r.created));
  const again = await new Engram(BASE_URL, API_KEY).ingest(messages.slice(0, 2));
  assert.deepEqual(
    again.map((r) => r.created),
    [false, false],
  );
  await assert.rejects(new Engram(BASE_URL, API_KEY).ingest(messages, { batchSize: 501 }), RangeError);
});
