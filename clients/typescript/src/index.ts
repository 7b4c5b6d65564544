/**
 * engram-client: the TypeScript client of Engram's agent runtime API, on the platform's `fetch`.
 *
 *     import { Engram } from "engram-client";
 *
 *     const engram = new Engram("http://127.0.0.1:8000", process.env.ENGRAM_API_KEY!);
 *     const [inbound] = await engram.ingest([message]);
 *     const session = await engram.openSession(inbound.conversation_id, { requester_actor_id: inbound.actor_id });
 *     const reply = await engram.turn(session, inbound.message_id, async (turn) => {
 *       await turn.round([{ verb: "recall", query: "deploy schedule" }]);
 *       const ledger = await turn.ledger(); // give ledger.instruction to the model
 *       return turn.reply("...");           // ReplyWithheld / ClaimGuardFailed when not delivered
 *     });
 */

export {
  type ChatModel,
  CITATION,
  calls,
  citations,
  MAX_REFUSED_ROUNDS,
  type Message,
  memoryBlockIds,
  OpenAICompatibleModel,
  type RunTurnOptions,
  recalledItems,
  runTurn,
  ScriptedModel,
  type Step,
  says,
  type TurnOutcome,
  toolResults,
} from "./agent.js";
export { Engram, type EngramOptions, type OpenSessionOptions } from "./client.js";
export {
  AuthenticationError,
  ClaimGuardFailed,
  ConcurrentUpdate,
  ConflictError,
  EngramError,
  type EngramErrorOptions,
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
} from "./errors.js";
export {
  DEFAULT_MAX_RETRIES,
  DEFAULT_MAX_RETRY_WAIT,
  DEFAULT_TIMEOUT,
  MAX_INGEST_BATCH,
  RetryPolicy,
  retryAfterSeconds,
} from "./http.js";
export {
  ATTRIBUTION,
  participantsText,
  refusedMessages,
  resultContent,
  type ToolCall,
  type ToolCallFormat,
  toolCallParts,
  toolCallsToVerbCalls,
  toolMessages,
  toVercelTools,
  type VercelTool,
} from "./tools.js";
export { type TurnOptions, TurnSession } from "./turn.js";
export {
  ActorLabel,
  type ActorRef,
  type Amend,
  type AnthropicTool,
  type Audience,
  BELIEF_TYPES,
  type BeliefType,
  CallResult,
  type Connector,
  Consent,
  type Evidence,
  Ingested,
  type JsonSchema,
  Ledger,
  MAX_RECALL_SUBJECTS,
  MAX_SOURCE_MESSAGES,
  type MessageIn,
  type OpenAITool,
  Operation,
  PERSON_BELIEF_TYPES,
  Participant,
  Recall,
  type RecallCall,
  RecallItem,
  type Remember,
  Reply,
  Round,
  SPEAKER,
  Session,
  SharingRequest,
  type Thread,
  type ToolFormat,
  Tools,
  Trace,
  Turn,
  type VerbCall,
} from "./types.js";

export const VERSION = "0.1.0";
