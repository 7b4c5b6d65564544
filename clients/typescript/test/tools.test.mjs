// The tool definitions in the three shapes (OpenAI, Anthropic, the Vercel AI SDK's), the same tools
// with the same JSON Schemas in each; a model's tool calls in each format become the same round.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CallResult,
  Round,
  Tools,
  toolCallsToVerbCalls,
  toolMessages,
  toVercelTools,
} from "../dist/index.js";
import { client, dmTurnStart } from "./support.mjs";

const VERBS = ["amend", "forget", "recall", "remember", "request_memory_sharing", "search_history"];

test("the tools in OpenAI's, Anthropic's and the Vercel AI SDK's shapes carry the same schemas", async () => {
  const engram = client();
  const openai = await engram.tools("openai");
  const anthropic = await engram.tools("anthropic");
  assert.ok(openai instanceof Tools);
  assert.equal(openai.format, "openai");
  assert.equal(openai.rounds_left, null);
  assert.ok(openai.instructions.includes("[m:0000002a]"));
  assert.deepEqual(openai.tools.map((t) => t.function.name).sort(), VERBS);
  for (const tool of openai.tools) {
    assert.equal(tool.type, "function");
    assert.equal(tool.function.parameters.type, "object");
    for (const forbidden of ["agent", "agent_id", "audience", "perspective"]) {
      assert.ok(!(forbidden in (tool.function.parameters.properties ?? {})), `${tool.function.name}: ${forbidden}`);
    }
  }
  assert.equal(anthropic.format, "anthropic");
  const byName = Object.fromEntries(anthropic.tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), VERBS);

  const vercel = toVercelTools(openai.tools);
  assert.deepEqual(Object.keys(vercel).sort(), VERBS);
  for (const tool of openai.tools) {
    const { name, description, parameters } = tool.function;
    // What the AI SDK's tool() takes: {description, parameters}, the parameters a JSON Schema
    // (wrapped with its jsonSchema()).
    assert.deepEqual(vercel[name], { description, parameters });
    assert.deepEqual(byName[name].input_schema, parameters);
    assert.equal(byName[name].description, description);
  }
  assert.deepEqual(toVercelTools(anthropic.tools), vercel);
});

test("a turn's tools follow its rounds in every shape", async () => {
  const [engram, session, inbound] = await dmTurnStart("What do you know about me?");
  await engram.turn(session, inbound.message_id, async (turn) => {
    assert.equal((await turn.tools("openai")).length, 6);
    assert.equal((await turn.tools("anthropic")).length, 6);
    assert.deepEqual(Object.keys(await turn.vercelTools()).sort(), VERBS);
    assert.ok(turn.toolInstructions.length > 0);
    const bound = await engram.tools("openai", { turnId: turn.turnId });
    assert.equal(bound.rounds_left, 3);
    await turn.ledger();
    return turn.reply("Nothing yet.");
  });
});

test("tool calls in each format become the same verb calls, and results answer them", async () => {
  const openai = [
    { id: "c1", type: "function", function: { name: "recall", arguments: '{"query": "home", "verb": "forget"}' } },
  ];
  const anthropic = [{ type: "tool_use", id: "c1", name: "recall", input: { query: "home" } }];
  const vercel4 = [{ type: "tool-call", toolCallId: "c1", toolName: "recall", args: { query: "home" } }];
  const vercel5 = [{ type: "tool-call", toolCallId: "c1", toolName: "recall", input: { query: "home" } }];
  const expected = [{ query: "home", verb: "recall" }];
  assert.deepEqual(toolCallsToVerbCalls(openai, "openai"), expected);
  assert.deepEqual(toolCallsToVerbCalls(anthropic, "anthropic"), expected);
  assert.deepEqual(toolCallsToVerbCalls(vercel4, "vercel"), expected);
  assert.deepEqual(toolCallsToVerbCalls(vercel5, "vercel"), expected);
  assert.throws(
    () => toolCallsToVerbCalls([{ id: "x", function: { name: "recall", arguments: "{" } }]),
    (e) => e.code === "invalid_tool_arguments",
  );

  const round = Round.fromJSON({
    round: 1,
    results: [{ verb: "recall", status: "ok", result: { items: [] } }],
    tools: [],
    final: false,
  });
  assert.ok(round.results[0] instanceof CallResult && round.results[0].ok);
  const [reply] = toolMessages(openai, round, "openai");
  assert.deepEqual(reply, { role: "tool", tool_call_id: "c1", content: '{"result":{"items":[]},"status":"ok"}' });
  const [user] = toolMessages(anthropic, round, "anthropic");
  assert.equal(user.role, "user");
  assert.deepEqual(user.content[0].tool_use_id, "c1");
  assert.equal(user.content[0].is_error, false);
});
