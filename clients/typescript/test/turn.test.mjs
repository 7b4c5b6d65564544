// The turn helper against a live server: a whole turn typed end to end, the protocol kept (the ledger
// before the reply, bounded rounds, no turn left without a reply), and a reply that is not delivered
// thrown as ClaimGuardFailed or ReplyWithheld.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ClaimGuardFailed,
  calls,
  Ingested,
  Ledger,
  Participant,
  ProtocolError,
  RecallItem,
  Reply,
  ReplyWithheld,
  RoundLimitReached,
  runTurn,
  ScriptedModel,
  Session,
  says,
  Turn,
  TurnClosed,
  TurnSession,
  ValidationError,
  recalledItems,
} from "../dist/index.js";
import { client, dmTurnStart, message, thread } from "./support.mjs";

test("a whole turn: ingest, session, turn, remember, recall, ledger, a delivered reply citing the memory", async () => {
  const engram = client();
  const [inbound] = await engram.ingest([message(thread("D-ALICE-whole"), "U2", "I moved to Lisbon last month.")]);
  assert.ok(inbound instanceof Ingested && inbound.created);
  const session = await engram.openSession(inbound.conversation_id, { requester_actor_id: inbound.actor_id });
  assert.ok(session instanceof Session);
  const alice = new Participant(inbound.actor_id, "U2", "Alice", "slack:acme", true);
  assert.deepEqual(session.participants, [alice]);
  assert.deepEqual(session.requester, alice);

  let memoryId = "";
  let turnId = 0;
  const reply = await engram.turn(session, inbound.message_id, async (turn) => {
    assert.ok(turn instanceof TurnSession && turn.turn instanceof Turn);
    turnId = turn.turnId;
    assert.equal(turn.roundsLeft, 3);
    assert.ok(turn.recall !== null);
    assert.deepEqual(turn.participants, [alice]);
    assert.deepEqual(turn.speaker, alice);
    assert.deepEqual((await engram.getTurn(turn.turnId)).participants, [alice]);

    const lisbon = { verb: "remember", body: "Lives in Lisbon.", belief_type: "user_model_attr", subject: "speaker" };
    const first = await turn.round([lisbon]);
    assert.equal(first.round, 1);
    assert.ok(first.results[0].ok, JSON.stringify(first.results[0]));
    memoryId = first.results[0].result.id;
    assert.match(memoryId, /^m:[0-9a-f]{8}$/);

    const recalled = await turn.round([{ verb: "recall", query: "Lisbon" }]);
    const items = recalled.results[0].result.items.map((i) => RecallItem.fromJSON(i));
    const item = items.find((i) => i.id === memoryId);
    assert.ok(item, `recall finds ${memoryId}`);
    assert.equal(item.subject?.actor_id, inbound.actor_id);
    assert.deepEqual(
      item.sources.map((s) => s.actor_id),
      [inbound.actor_id],
    );
    assert.deepEqual(item.source, item.sources[0]);
    assert.equal(turn.roundsLeft, 1);

    const ledger = await turn.ledger();
    assert.ok(ledger instanceof Ledger);
    assert.deepEqual(
      ledger.operations.map((op) => op.operation),
      ["remember"],
    );
    assert.equal(ledger.operations[0].id, memoryId);
    assert.equal(ledger.role, "developer");
    assert.ok(ledger.instruction.includes(memoryId));
    return turn.reply(`Noted, you live in Lisbon [${memoryId}].`, [memoryId]);
  });
  assert.ok(reply instanceof Reply);
  assert.equal(reply.state, "delivered");
  assert.deepEqual(reply.cited, [memoryId]);
  assert.ok(reply.memory_revision_ids.length >= 1);
  assert.equal((await engram.getTurn(turnId)).state, "delivered");
});

test("recall passes subjects and type hints through: only the hinted types, ranked as about the subject", async () => {
  const [engram, session, inbound] = await dmTurnStart("I live in Porto; the Porto office opens at eight.");
  await engram.turn(session, inbound.message_id, async (turn) => {
    const wrote = await turn.round([
      { verb: "remember", body: "Lives in Porto.", belief_type: "user_model_attr", subject: "speaker" },
      { verb: "remember", body: "The Porto office opens at eight.", belief_type: "project_fact" },
    ]);
    assert.ok(wrote.results.every((r) => r.ok), JSON.stringify(wrote.results));
    const [porto] = wrote.results.map((r) => r.result.id);
    /** @type {import("../dist/index.js").RecallCall} */
    const call = {
      verb: "recall",
      query: "Porto",
      subjects: ["speaker", inbound.actor_id],
      type_hints: ["user_model_attr"],
    };
    const recalled = await turn.round([call]);
    const items = recalled.results[0].result.items;
    assert.ok(items.some((i) => i.id === porto), JSON.stringify(items));
    assert.ok(items.every((i) => i.belief_type === "user_model_attr"));
    assert.equal(items.find((i) => i.id === porto).components.asked_subject, 1);
    const refused = await turn.round([{ verb: "recall", query: "Porto", subjects: ["U999"] }]);
    assert.equal(refused.results[0].status, "error");
    assert.equal(refused.results[0].code, "subject_not_participant");
    await turn.ledger();
    return turn.reply("Noted.");
  });
});

test("the helper refuses a reply before the ledger is read, and sends nothing", async () => {
  const [engram, session, inbound] = await dmTurnStart("Remember I like tea.");
  await engram.turn(session, inbound.message_id, async (turn) => {
    await turn.round([{ verb: "remember", body: "Likes tea.", belief_type: "preference", subject: "speaker" }]);
    await assert.rejects(turn.reply("Done."), (e) => e instanceof ProtocolError && e.code === "ledger_not_read");
    assert.equal((await engram.getTurn(turn.turnId)).state, "open");
    await turn.ledger();
    return turn.reply("I will remember that you like tea.");
  });
});

test("the helper bounds the rounds and offers no tools after the last", async () => {
  const [engram, session, inbound] = await dmTurnStart("What do you know?");
  await engram.turn(session, inbound.message_id, async (turn) => {
    assert.equal((await turn.tools("openai")).length, 6);
    for (let i = 0; i < 3; i++) await turn.round([{ verb: "recall", query: "" }]);
    assert.equal(turn.roundsLeft, 0);
    assert.ok(turn.rounds.at(-1).final);
    assert.deepEqual(await turn.tools("openai"), []);
    assert.deepEqual(await turn.tools("anthropic"), []);
    assert.deepEqual(await turn.vercelTools(), {});
    await assert.rejects(turn.round([{ verb: "recall", query: "" }]), RoundLimitReached);
    assert.equal((await engram.getTurn(turn.turnId)).rounds_used, 3);
    await turn.ledger();
    return turn.reply("Nothing yet.");
  });
});

test("maxRounds bounds the rounds below the server's", async () => {
  const [engram, session, inbound] = await dmTurnStart("Anything?");
  await engram.turn(session, inbound.message_id, { maxRounds: 1 }, async (turn) => {
    assert.equal(turn.roundsLeft, 1);
    await turn.round([{ verb: "recall", query: "" }]);
    await assert.rejects(turn.round([{ verb: "recall", query: "" }]), (e) => e.code === "round_limit");
    await turn.ledger();
    return turn.reply("Nothing.");
  });
});

test("a turn that ends without a reply is an error", async () => {
  const [engram, session, inbound] = await dmTurnStart("Hello?");
  await assert.rejects(
    engram.turn(session, inbound.message_id, async () => {}),
    (error) => error instanceof ProtocolError && error.code === "no_reply",
  );
  // An error thrown inside the turn is the one that surfaces.
  const [, again, next] = await dmTurnStart("Hello again?");
  await assert.rejects(
    engram.turn(again, next.message_id, async () => {
      throw new Error("model failed");
    }),
    /model failed/,
  );
});

test("a claim of an uncommitted change throws ClaimGuardFailed with the API's code and detail", async () => {
  const [engram, session, inbound] = await dmTurnStart("Forget my address.");
  let turnId = 0;
  await assert.rejects(
    engram.turn(session, inbound.message_id, async (turn) => {
      turnId = turn.turnId;
      let failed;
      await assert.rejects(turn.reply("I forgot your address."), (error) => {
        failed = error;
        return error instanceof ClaimGuardFailed;
      });
      assert.ok(failed instanceof ValidationError);
      assert.equal(failed.status, 422);
      assert.equal(failed.code, "claim_guard_failed");
      assert.ok(failed.detail.claims.length > 0 && "ledger" in failed.detail);
      await assert.rejects(turn.reply("Sorry."), TurnClosed);
      throw failed;
    }),
    ClaimGuardFailed,
  );
  assert.equal((await engram.getTurn(turnId)).state, "failed");
});

test("a reply the pre-delivery recheck withholds throws ReplyWithheld and is not retried", async () => {
  const engram = client();
  const dm = thread("D-ALICE-salary");
  const [inbound] = await engram.ingest([message(dm, "U2", "My salary is 90k.")]);
  const session = await engram.openSession(inbound.conversation_id, { requester_actor_id: inbound.actor_id });
  let turnId = 0;
  await engram.turn(session, inbound.message_id, async (turn) => {
    turnId = turn.turnId;
    const salary = { body: "Earns 90k a year.", belief_type: "user_model_attr", subject: "speaker" };
    await turn.round([{ verb: "remember", ...salary }]);
    await turn.ledger();
    // The connector reports the thread has become public: the memory may no longer be disclosed there.
    await engram.ingest([message(dm, "U2", "Adding everyone here.", { kind: "public" })]);
    await assert.rejects(turn.reply("Noted your salary."), (error) => {
      assert.ok(error instanceof ReplyWithheld);
      assert.equal(error.status, 409);
      assert.equal(error.code, "reply_withheld");
      assert.ok(error.detail.reason);
      return true;
    });
    assert.equal(turn.delivered, null);
  });
  assert.equal((await engram.getTurn(turnId)).state, "withheld");
});

test("runTurn drives a scripted model through a round, the ledger and a cited reply", async () => {
  const [engram, session, inbound] = await dmTurnStart("I prefer short answers.");
  const model = new ScriptedModel([
    calls(["remember", { body: "Prefers short answers.", belief_type: "preference" }]), // no subject: refused
    calls(["remember", { body: "Prefers short answers.", belief_type: "preference", subject: "speaker" }]),
    calls(["recall", { query: "short answers" }]),
    says((messages) => {
      const [item] = recalledItems(messages).filter((i) => i.statement === "Prefers short answers.");
      return `Short answers it is [${item.id}].`;
    }),
  ]);
  const outcome = await runTurn(engram, session, inbound.message_id, "I prefer short answers.", model);
  assert.equal(outcome.reply.state, "delivered");
  assert.equal(outcome.rounds.length, 2);
  assert.equal(model.callsMade, 4);
  assert.deepEqual(
    outcome.ledger.operations.map((op) => op.operation),
    ["remember"],
  );
  assert.deepEqual(outcome.reply.cited, [outcome.ledger.operations[0].id]);
  const refused = outcome.messages.filter((m) => m.role === "tool" && JSON.parse(m.content).status === "refused");
  assert.equal(JSON.parse(refused[0].content).code, "subject_required");
  assert.ok(outcome.messages[1].content.includes('speaking now (subject "speaker")'));
});
