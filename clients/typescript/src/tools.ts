/**
 * Between a model's function calls and Engram's rounds: tool calls (OpenAI `tool_calls`, Anthropic
 * `tool_use` blocks, the Vercel AI SDK's tool calls) to verb calls, a round's results back to tool
 * messages, the turn's participants as the text that tells a model whom a memory may name as its
 * subject, and the tool definitions in the Vercel AI SDK's shape (the Python client's
 * `engram_client.tools`, plus the Vercel shape).
 *
 * The tool definitions themselves come from the server (`engram.tools`), generated from the very
 * schemas the rounds endpoint validates with; none has an agent, audience or perspective parameter.
 */

import { type EngramError, ProtocolError } from "./errors.js";
import { type CallResult, type JsonSchema, type Participant, type Round, SPEAKER, type VerbCall } from "./types.js";

/** The formats a model's tool calls come in: `vercel` is the AI SDK's `{toolCallId, toolName, args}`. */
export type ToolCallFormat = "openai" | "anthropic" | "vercel";
/** A tool call as a model's SDK gives it (a plain object or an SDK object with the same fields). */
export type ToolCall = Record<string, any>;

/** What a model is told about naming a memory's subject (with the turn's participants). */
export const ATTRIBUTION =
  "Every memory about a person names its subject (remember's and amend's subject argument): " +
  `"${SPEAKER}" for the person whose message you are answering, or another participant's external id. ` +
  "Only facts about the project, not about anyone, may go without a subject. source_message_ids: the " +
  "messages the memory was learned from, when not the one you are answering.";

/**
 * A tool in the Vercel AI SDK's shape: what `tool()` takes, with the JSON Schema of its arguments as
 * `parameters`; wrap it with the SDK's `jsonSchema()`:
 * `tool({ description: t.description, parameters: jsonSchema(t.parameters) })`.
 */
export interface VercelTool {
  description: string;
  parameters: JsonSchema;
}

/**
 * The turn's participants as a model reads them: who is speaking, and the subject to name for each.
 * Names are quoted: a display name is what a person chose, not an instruction.
 */
export function participantsText(participants: readonly Participant[]): string {
  if (participants.length === 0) return "";
  const lines = [`People in this conversation. ${ATTRIBUTION}`];
  for (const person of participants) {
    const line =
      `- ${JSON.stringify(person.display_name)}: external id ${JSON.stringify(person.external_id)}, ` +
      `actor id ${person.actor_id}, on ${person.connector}`;
    lines.push(line + (person.speaking ? `; speaking now (subject "${SPEAKER}")` : ""));
  }
  return lines.join("\n");
}

/** `[call id, tool name, arguments]` of one tool call. */
export function toolCallParts(
  item: ToolCall,
  format: ToolCallFormat = "openai",
): [string, string, Record<string, any>] {
  let name: unknown;
  let args: unknown;
  let ident: unknown;
  if (format === "openai") {
    name = item?.function?.name;
    args = item?.function?.arguments;
    ident = item?.id;
    if (typeof args === "string") {
      try {
        args = args.trim() ? JSON.parse(args) : {};
      } catch (error) {
        throw new ProtocolError(`tool call ${JSON.stringify(name)}: its arguments are not JSON`, {
          code: "invalid_tool_arguments",
          cause: error,
        });
      }
    }
  } else if (format === "anthropic") {
    name = item?.name;
    args = item?.input;
    ident = item?.id;
  } else if (format === "vercel") {
    // AI SDK 4 calls the arguments `args`; from version 5 they are `input`.
    name = item?.toolName;
    args = item?.args ?? item?.input;
    ident = item?.toolCallId;
  } else {
    throw new RangeError(`unknown tool format ${JSON.stringify(format)}`);
  }
  if (typeof name !== "string" || typeof args !== "object" || args === null || Array.isArray(args)) {
    throw new ProtocolError("a tool call needs a name and an object of arguments", { code: "invalid_tool_arguments" });
  }
  return [String(ident ?? ""), name, args as Record<string, any>];
}

/**
 * The round a model's tool calls ask for: each call's name is the verb, its arguments the rest. A
 * `verb` key among the arguments cannot override the tool's name.
 */
export function toolCallsToVerbCalls(toolCalls: readonly ToolCall[], format: ToolCallFormat = "openai"): VerbCall[] {
  return toolCalls.map((item) => {
    const [, name, args] = toolCallParts(item, format);
    const { verb: _ignored, ...rest } = args;
    return { ...rest, verb: name };
  });
}

/** JSON with its object keys sorted at every depth (as the Python client's `sort_keys=True`). */
function sortedJSON(value: unknown): string {
  return JSON.stringify(value, (_key, item) =>
    item && typeof item === "object" && !Array.isArray(item)
      ? Object.fromEntries(Object.keys(item).sort().map((k) => [k, item[k]]))
      : item,
  );
}

/** A call's result as the text a model reads: its status, and the result or the error. */
export function resultContent(result: CallResult): string {
  const body: Record<string, unknown> = { status: result.status };
  if (result.code) body.code = result.code;
  if (result.message) body.message = result.message;
  body.result = result.result;
  return sortedJSON(body);
}

/**
 * The round's results as the model's format answers its tool calls: OpenAI `role: "tool"` messages,
 * or the Anthropic `tool_result` blocks of one user message (returned as a one-message list).
 */
export function toolMessages(
  toolCalls: readonly ToolCall[],
  round: Round,
  format: "openai" | "anthropic" = "openai",
): Record<string, any>[] {
  if (toolCalls.length !== round.results.length) {
    throw new ProtocolError("the round's results do not match the tool calls", { code: "results_mismatch" });
  }
  const pairs = toolCalls.map((call, i) => [toolCallParts(call, format)[0], round.results[i] as CallResult] as const);
  if (format === "openai") {
    return pairs.map(([ident, r]) => ({ role: "tool", tool_call_id: ident, content: resultContent(r) }));
  }
  const blocks = pairs.map(([ident, r]) => ({
    type: "tool_result",
    tool_use_id: ident,
    content: resultContent(r),
    is_error: r.status === "error",
  }));
  return [{ role: "user", content: blocks }];
}

/**
 * A round the API refused (a 4xx: nothing ran, no round was used) answered to each of the model's
 * tool calls, with the API's code, message and detail, so the model can correct the calls
 * (`subject_required` names the participants) and try again.
 */
export function refusedMessages(
  toolCalls: readonly ToolCall[],
  error: EngramError,
  format: "openai" | "anthropic" = "openai",
): Record<string, any>[] {
  const content = sortedJSON({ status: "refused", code: error.code, message: error.apiMessage, detail: error.detail });
  const idents = toolCalls.map((call) => toolCallParts(call, format)[0]);
  if (format === "openai") return idents.map((ident) => ({ role: "tool", tool_call_id: ident, content }));
  const blocks = idents.map((ident) => ({ type: "tool_result", tool_use_id: ident, content, is_error: true }));
  return [{ role: "user", content: blocks }];
}

/**
 * OpenAI-format tool definitions (`engram.tools("openai")`, `turn.tools("openai")`) in the Vercel AI
 * SDK's shape: an object keyed by tool name, each `{description, parameters}` with `parameters` the
 * tool's JSON Schema. The SDK is not a dependency: wrap each with its `tool()` and `jsonSchema()`.
 */
export function toVercelTools(tools: readonly Record<string, any>[]): Record<string, VercelTool> {
  const shaped: Record<string, VercelTool> = {};
  for (const tool of tools) {
    const fn = tool.type === "function" ? tool.function : tool;
    const parameters = fn?.parameters ?? fn?.input_schema;
    if (typeof fn?.name !== "string" || typeof parameters !== "object" || parameters === null) {
      throw new ProtocolError("not a tool definition (openai or anthropic format)", {
        code: "invalid_tool_definition",
      });
    }
    shaped[fn.name] = { description: String(fn.description ?? ""), parameters };
  }
  return shaped;
}
