// Each failure kind is its own class, carrying the API's status, code and detail; the hierarchy and
// the names are the Python client's.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AuthenticationError,
  ClaimGuardFailed,
  ConcurrentUpdate,
  ConflictError,
  Engram,
  EngramError,
  errorFor,
  NotFoundError,
  PermissionDeniedError,
  ProtocolError,
  RateLimitedError,
  ReplyWithheld,
  RoundLimitReached,
  ServerError,
  TransportError,
  TurnClosed,
  UnavailableError,
  ValidationError,
} from "../dist/index.js";
import { BASE_URL, client, dmTurnStart } from "./support.mjs";

test("an unknown key is an AuthenticationError (401 unauthenticated)", async () => {
  const stranger = new Engram(BASE_URL, "nope");
  await assert.rejects(stranger.getTurn(1), (error) => {
    assert.ok(error instanceof AuthenticationError && error instanceof EngramError);
    assert.equal(error.status, 401);
    assert.equal(error.code, "unauthenticated");
    assert.equal(error.name, "AuthenticationError");
    return true;
  });
});

test("a missing turn is a NotFoundError (404 not_found)", async () => {
  await assert.rejects(client().getTurn(999_999_999), (error) => {
    assert.ok(error instanceof NotFoundError);
    assert.equal(error.status, 404);
    assert.equal(error.code, "not_found");
    assert.ok(error.message.startsWith("not_found: "));
    return true;
  });
});

test("an invalid request is a ValidationError (400) whose detail names the field", async () => {
  await assert.rejects(client().openSession(0), (error) => {
    assert.ok(error instanceof ValidationError);
    assert.equal(error.status, 400);
    assert.equal(error.code, "invalid_request");
    assert.ok("conversation_id" in error.detail);
    return true;
  });
});

test("a refused round says which call and why, and changes nothing", async () => {
  const [engram, session, inbound] = await dmTurnStart("hi");
  const turn = await engram.startTurn(session, inbound.message_id);
  await assert.rejects(
    engram.runRound(turn.turn_id, [{ verb: "remember", body: "x" }, { verb: "remember", entry_id: 1 }]),
    (error) => error instanceof ValidationError && error.code === "invalid_request" && "1" in error.detail.calls,
  );
  await assert.rejects(
    engram.runRound(turn.turn_id, [{ verb: "remember", body: "Likes tea.", belief_type: "preference" }]),
    (error) => {
      assert.ok(error instanceof ValidationError);
      assert.equal(error.code, "subject_required");
      assert.ok(JSON.stringify(error.detail).includes("U2")); // names whom the memory may be about
      return true;
    },
  );
  assert.equal((await engram.getTurn(turn.turn_id)).rounds_used, 0);
});

test("an error answer maps to its class by code first, then by status", () => {
  const cases = [
    [400, "invalid_request", ValidationError],
    [401, "unauthenticated", AuthenticationError],
    [403, "insufficient_scope", PermissionDeniedError],
    [404, "not_found", NotFoundError],
    [409, "concurrent_update", ConcurrentUpdate],
    [409, "reply_withheld", ReplyWithheld],
    [409, "round_limit", RoundLimitReached],
    [409, "turn_closed", TurnClosed],
    [409, "stale_revision", ConflictError],
    [413, "too_large", ValidationError],
    [422, "claim_guard_failed", ClaimGuardFailed],
    [429, "rate_limited", RateLimitedError],
    [503, "database_unavailable", UnavailableError],
    [502, "bad_gateway", ServerError],
    [418, "teapot", ValidationError],
  ];
  for (const [status, code, kind] of cases) {
    const error = errorFor(status, { code, message: "m", detail: { a: 1 } }, 2);
    assert.equal(error.constructor, kind, `${status} ${code}`);
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    assert.equal(error.apiMessage, "m");
    assert.deepEqual(error.detail, { a: 1 });
    assert.equal(error.retryAfter, 2);
  }
  const html = errorFor(502, "<html>bad gateway</html>");
  assert.ok(html instanceof ServerError);
  assert.equal(html.code, "http_502");
  assert.deepEqual(html.detail, {});
  assert.ok(new ClaimGuardFailed("x") instanceof ValidationError);
  assert.ok(new ConcurrentUpdate("x") instanceof ConflictError);
  assert.equal(new TurnClosed("x").status, 409);
  assert.equal(new ProtocolError("x").status, 0);
  assert.equal(new TransportError("x").status, 0);
});

test("no answer at all is a TransportError with code no_answer", async () => {
  // A port nothing listens on: refused, retried (here once, after 0.5 s), then thrown.
  const engram = new Engram("http://127.0.0.1:9", "key", { maxRetries: 1 });
  await assert.rejects(engram.getTurn(1), (error) => {
    assert.ok(error instanceof TransportError);
    assert.equal(error.code, "no_answer");
    assert.equal(error.status, 0);
    return true;
  });
});
