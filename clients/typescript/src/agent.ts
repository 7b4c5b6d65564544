/**
 * A minimal agent loop over the turn helper, for any chat model that speaks the OpenAI chat format
 * (the Python client's `engram_client.agent`).
 *
 * `runTurn` does what a runtime does in one turn: the snapshot and the tool instructions go in the
 * system prompt, the in-turn recall (and its correction lines) and the turn's participants (whom a
 * memory may name as its subject, and who is speaking) with the user's message; while the model calls
 * tools and a round is left, the calls run as a round and the committed ledger follows the results;
 * the model's text is the reply. Two models come with it: `ScriptedModel` (deterministic steps, no
 * network: tests and demos) and `OpenAICompatibleModel` (any `/chat/completions` endpoint, on `fetch`).
 */

import type { Engram } from "./client.js";
import { ProtocolError, ValidationError } from "./errors.js";
import { participantsText, refusedMessages, toolMessages } from "./tools.js";
import type { Ledger, Reply, Round, Session } from "./types.js";

/** An OpenAI chat message (`{role, content, tool_calls}`). */
export type Message = Record<string, any>;
/** The `[m:…]` citations in a text. */
export const CITATION = /\[(m:[0-9a-f]{8,16})\]/g;
/**
 * Rounds the API may refuse in one turn (a refused round runs nothing and uses no round) before
 * `runTurn` gives up and throws the refusal: enough for a model to add a missing subject.
 */
export const MAX_REFUSED_ROUNDS = 2;

export interface ChatModel {
  /** The assistant's next message: text, or `tool_calls` (only when `tools` is not empty). */
  chat(messages: Message[], tools: Record<string, any>[]): Promise<Message> | Message;
}

export interface TurnOutcome {
  reply: Reply;
  text: string;
  rounds: Round[];
  ledger: Ledger | null;
  messages: Message[];
}

/** The ids a text cites, in order: `[m:0000002a]` gives `m:0000002a`. */
export function citations(text: string): string[] {
  return [...text.matchAll(CITATION)].map((match) => match[1] as string);
}

export interface RunTurnOptions {
  loadedMessageIds?: readonly number[];
  system?: string;
}

/**
 * One whole turn: rounds while the model calls tools, the ledger after each, then the reply. A round
 * the API refuses is answered to the model with the refusal (at most `MAX_REFUSED_ROUNDS` times a
 * turn), since nothing ran and the round is still there to use.
 */
export async function runTurn(
  engram: Engram,
  session: Session,
  inboundMessageId: number,
  userText: string,
  model: ChatModel,
  options: RunTurnOptions = {},
): Promise<TurnOutcome> {
  const system = options.system ?? "You are a helpful assistant with a long-term memory.";
  const turnOptions = { loadedMessageIds: options.loadedMessageIds ?? [] };
  return engram.turn(session, inboundMessageId, turnOptions, async (turn) => {
    await turn.tools("openai"); // fetched once for the turn; also brings the instructions
    const recall = turn.recall;
    const memory = recall ? recall.block : "";
    const corrections = recall ? recall.corrections.join("\n") : "";
    const people = participantsText(turn.participants);
    const messages: Message[] = [
      {
        role: "system",
        content: [system, turn.toolInstructions, session.snapshot_block].filter(Boolean).join("\n\n"),
      },
      { role: "user", content: [memory, corrections, people, userText].filter(Boolean).join("\n\n") },
    ];
    let ledger: Ledger | null = null;
    let refused = 0;
    let answer: Message;
    for (;;) {
      const tools = await turn.tools("openai");
      answer = await model.chat(messages, tools);
      const calls: Record<string, any>[] = answer.tool_calls ?? [];
      if (calls.length === 0 || tools.length === 0) break;
      messages.push({ role: "assistant", content: answer.content ?? null, tool_calls: calls });
      let done: Round;
      try {
        done = await turn.runToolCalls(calls);
      } catch (refusal) {
        // Nothing ran: the model reads why (e.g. subject_required, which names the participants)
        // and may correct its calls.
        if (!(refusal instanceof ValidationError)) throw refusal;
        refused += 1;
        if (refused > MAX_REFUSED_ROUNDS) throw refusal;
        messages.push(...refusedMessages(calls, refusal));
        continue;
      }
      messages.push(...toolMessages(calls, done));
      ledger = await turn.ledger();
      // The ledger is a developer-role instruction; sent as system, which every OpenAI-compatible
      // server accepts.
      messages.push({ role: "system", content: ledger.instruction });
    }
    const text = String(answer.content ?? "").trim();
    if (!text) throw new ProtocolError("the model wrote no reply", { code: "empty_reply" });
    messages.push({ role: "assistant", content: text });
    const reply = await turn.reply(text, citations(text));
    return { reply, text, rounds: turn.rounds, ledger, messages };
  });
}

// ---------------------------------------------------------------------------------------------------
// models
// ---------------------------------------------------------------------------------------------------

/** One scripted step: the messages so far -> the assistant's message. */
export type Step = (messages: Message[]) => Message;

/**
 * A deterministic model: each `chat` answers with the next step. Steps come from `calls` (tool calls,
 * arguments given or computed from the messages) and `says` (the reply text).
 */
export class ScriptedModel implements ChatModel {
  callsMade = 0;

  constructor(readonly steps: Step[] = []) {}

  extend(steps: readonly Step[]): void {
    this.steps.push(...steps);
  }

  chat(messages: Message[], tools: Record<string, any>[]): Message {
    const step = this.steps.shift();
    if (step === undefined) {
      throw new ProtocolError("the scripted model has no step left", { code: "script_exhausted" });
    }
    this.callsMade += 1;
    const answer = step(messages);
    if (answer.tool_calls?.length && tools.length === 0) {
      throw new ProtocolError("the script calls a tool after the last round", { code: "script_out_of_rounds" });
    }
    return answer;
  }
}

export type Arguments = Record<string, any> | ((messages: Message[]) => Record<string, any>);

/** A step that calls tools: `calls(["recall", {query: "home"}], ["remember", (m) => ({...})])`. */
export function calls(...requested: [string, Arguments][]): Step {
  return (messages) => ({
    role: "assistant",
    content: null,
    tool_calls: requested.map(([name, args], index) => ({
      id: `call_${messages.length}_${index}`,
      type: "function",
      function: { name, arguments: JSON.stringify(typeof args === "function" ? args(messages) : args) },
    })),
  });
}

/** A step that answers with text (computed from the messages when `text` is a function). */
export function says(text: string | ((messages: Message[]) => string)): Step {
  return (messages) => ({ role: "assistant", content: typeof text === "function" ? text(messages) : text });
}

/** Every tool result so far, newest last: `{status, result, ...}` as the model read them. */
export function toolResults(messages: readonly Message[]): Record<string, any>[] {
  return messages.filter((m) => m.role === "tool").map((m) => JSON.parse(String(m.content)));
}

/** Every memory item the model has seen in recall results so far. */
export function recalledItems(messages: readonly Message[]): Record<string, any>[] {
  return toolResults(messages).flatMap((result) => result.result?.items ?? []);
}

/** The `m:…` ids shown in the prompt (snapshot, in-turn recall, ledger and tool results). */
export function memoryBlockIds(messages: readonly Message[]): string[] {
  const seen: string[] = [];
  for (const message of messages) {
    for (const found of citations(String(message.content ?? ""))) {
      if (!seen.includes(found)) seen.push(found);
    }
  }
  return seen;
}

/**
 * Any OpenAI-compatible `/chat/completions` endpoint (`baseUrl` such as `https://api.openai.com/v1`),
 * with the tool definitions Engram gives for the turn.
 */
export class OpenAICompatibleModel implements ChatModel {
  constructor(
    readonly baseUrl: string,
    readonly apiKey: string,
    readonly model: string = "gpt-4o-mini",
    /** Seconds. */
    readonly timeout: number = 60,
  ) {}

  async chat(messages: Message[], tools: Record<string, any>[]): Promise<Message> {
    const body: Record<string, unknown> = { model: this.model, messages };
    if (tools.length) body.tools = tools;
    const response = await fetch(`${this.baseUrl.replace(/\/+$/, "")}/chat/completions`, {
      method: "POST",
      headers: { Authorization: `Bearer ${this.apiKey}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(this.timeout * 1000),
    });
    if (!response.ok) throw new Error(`chat completions answered ${response.status}: ${await response.text()}`);
    const data = (await response.json()) as { choices: { message: Message }[] };
    return (data.choices[0] as { message: Message }).message;
  }
}
