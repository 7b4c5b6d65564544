/**
 * Typed results: one class per output serializer of the API (`memory/apis/`, `history/apis.py`),
 * the Python client's dataclasses (`engram_client.types`) with the same fields. Fields keep the API's
 * names (snake_case, as on the wire); each result keeps the JSON it was built from in `raw`, so a
 * field the server adds later is still reachable before this package names it.
 */

type Json = Record<string, any>;

/**
 * A verb call as the rounds endpoint takes it: `{verb: "recall", query: "..."}`. Calls are sent as
 * given, so an argument the server adds passes through before this package names it.
 */
export type VerbCall = { verb: string } & Json;
export type ToolFormat = "openai" | "anthropic";
/**
 * The belief types that are about a person: a `remember` of one of these without a subject is
 * refused (`400 subject_required`). Other types (project facts, decisions, …) may have none.
 */
export const PERSON_BELIEF_TYPES: ReadonlySet<string> = new Set(["preference", "user_model_attr", "relationship"]);
/** `subject: "speaker"`: the author of the inbound message the turn answers. */
export const SPEAKER = "speaker";
/** The most message ids one `remember` may name as its sources. */
export const MAX_SOURCE_MESSAGES = 20;
/** Every belief type, in the API's order: what `remember` takes and `recall`'s `type_hints` name. */
export const BELIEF_TYPES = [
  "preference",
  "user_model_attr",
  "relationship",
  "project_fact",
  "decision",
  "instruction",
  "skill",
  "resource",
  "status",
  "event",
] as const;
/** A memory's belief type. */
export type BeliefType = (typeof BELIEF_TYPES)[number];
/** The most people one `recall` may name in `subjects`. */
export const MAX_RECALL_SUBJECTS = 10;

/**
 * The arguments of a `remember` call. `subject`: `"speaker"` or a participant's `external_id` (or
 * `subject_actor_id`, a participant's actor id; never both). `source_message_ids`: the messages in
 * front of this turn the belief was learned from (the inbound message, the loaded history, this
 * turn's `search_history` hits; at most 20); by default the inbound message.
 */
export interface Remember {
  verb: "remember";
  body: string;
  belief_type?: string;
  subject?: string;
  subject_actor_id?: number;
  source_message_ids?: number[];
  portability?: string;
  authority?: string;
  confidence?: number;
  salience?: number;
  always_on?: boolean;
  valid_from?: string;
  valid_to?: string;
}

/** The arguments of an `amend` call; `subject` / `subject_actor_id` only to re-attribute the memory. */
export interface Amend {
  verb: "amend";
  id: string;
  body?: string;
  subject?: string;
  subject_actor_id?: number;
  belief_type?: string;
  portability?: string;
  confidence?: number;
  salience?: number;
  always_on?: boolean;
  valid_from?: string;
  valid_to?: string;
}

/**
 * The arguments of a `recall` call. `subjects`: whom the memories wanted are about, each named as
 * `Remember` names its subject: `"speaker"`, a participant's `external_id` (a string) or a
 * participant's actor id (a number); at most 10. Memories about them rank higher; no other memory
 * ranks lower or is left out. Anyone not in the turn is refused (`subject_not_participant`).
 * `type_hints`: only memories of these belief types are returned (empty: every type).
 */
export interface RecallCall {
  verb: "recall";
  query: string;
  subjects?: Array<string | number>;
  type_hints?: BeliefType[];
  as_of?: string;
  known_at?: string;
  max_tokens?: number;
  max_items?: number;
}

export interface Connector {
  type: string;
  name: string;
}

export interface Audience {
  kind: "public" | "workspace" | "members" | "external";
  readers?: string[];
}

export interface Thread {
  external_id: string;
  title?: string;
  project?: string;
  audience?: Audience;
}

export interface ActorRef {
  external_id: string;
  display_name: string;
}

export interface Evidence {
  method: "connector_signed" | "connector_api" | (string & {});
  detail?: Json;
}

/** One message as a connector saw it (`POST /api/v1/messages`). */
export interface MessageIn {
  connector: Connector;
  thread: Thread;
  actor: ActorRef;
  external_id?: string | null;
  body: string;
  created_at: string;
  evidence: Evidence;
}

const int = (value: unknown): number => {
  const n = Number(value);
  if (!Number.isFinite(n)) throw new TypeError(`expected a number, got ${JSON.stringify(value)}`);
  return Math.trunc(n);
};
const str = (value: unknown, fallback = ""): string =>
  value === null || value === undefined || value === "" ? fallback : String(value);
const list = (value: unknown): any[] => (Array.isArray(value) ? value : []);
const required = (data: Json, name: string): any => {
  if (!(name in data)) throw new TypeError(`the answer has no ${name}`);
  return data[name];
};

export class Ingested {
  constructor(
    readonly external_id: string | null,
    readonly message_id: number,
    readonly conversation_id: number,
    readonly actor_id: number,
    readonly created: boolean,
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Ingested {
    return new Ingested(
      data.external_id ?? null,
      int(required(data, "message_id")),
      int(required(data, "conversation_id")),
      int(required(data, "actor_id")),
      Boolean(required(data, "created")),
      data,
    );
  }
}

/**
 * One of the conversation's people the model may name as a memory's subject: `remember` and `amend`
 * take `subject: "speaker"` (the author of the message being answered, the one whose `speaking` is
 * true) or `subject: <external_id>`. `connector` is its namespace, e.g. `slack:acme`.
 */
export class Participant {
  constructor(
    readonly actor_id: number,
    readonly external_id: string,
    readonly display_name: string,
    readonly connector: string,
    readonly speaking: boolean,
  ) {}

  static fromJSON(data: Json): Participant {
    return new Participant(
      int(required(data, "actor_id")),
      String(required(data, "external_id")),
      str(data.display_name, String(data.external_id)),
      str(data.connector),
      Boolean(data.speaking),
    );
  }
}

function participantsOf(data: Json): Participant[] {
  return list(data.participants).map((p) => Participant.fromJSON(p));
}

function speakerOf(participants: Participant[]): Participant | null {
  return participants.find((p) => p.speaking) ?? null;
}

/** A person as a memory names them: their actor id and the label rendered from their current actor record. */
export class ActorLabel {
  constructor(
    readonly actor_id: number,
    readonly label: string,
  ) {}

  static fromJSON(data: Json | null | undefined): ActorLabel | null {
    if (!data || data.actor_id === null || data.actor_id === undefined) return null;
    return new ActorLabel(int(data.actor_id), str(data.label));
  }
}

/**
 * One recalled memory. `subject`: whom it is about (null for a project fact). `source`: the first
 * person whose words it rests on; `sources`: every such person, `source` first.
 */
export class RecallItem {
  constructor(
    readonly id: string,
    readonly entry_id: number,
    readonly revision_id: number,
    readonly statement: string,
    readonly subject: ActorLabel | null,
    readonly source: ActorLabel | null,
    readonly sources: ActorLabel[],
    readonly belief_type: string,
    readonly authority: string,
    readonly confidence_band: string,
    readonly learned_in: string,
    readonly carried: boolean,
    readonly recorded_at: string,
    readonly conflicts: string[],
    readonly blocked: string | null,
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): RecallItem {
    const source = ActorLabel.fromJSON(data.source);
    // A server from before `sources` names one source.
    const sources =
      "sources" in data
        ? list(data.sources)
            .map((s) => ActorLabel.fromJSON(s))
            .filter((s): s is ActorLabel => s !== null)
        : source
          ? [source]
          : [];
    return new RecallItem(
      str(data.id),
      int(data.entry_id ?? 0),
      int(data.revision_id ?? 0),
      str(data.statement),
      ActorLabel.fromJSON(data.subject),
      source,
      sources,
      str(data.belief_type),
      str(data.authority),
      str(data.confidence_band),
      str(data.learned_in),
      Boolean(data.carried),
      str(data.recorded_at),
      list(data.conflicts).map(String),
      data.blocked ? String(data.blocked) : null,
      data,
    );
  }
}

/** A rendered memory block: the session snapshot or a turn's in-turn recall. */
export class Recall {
  constructor(
    readonly trace_id: number,
    readonly block: string,
    readonly rendered_sha256: string,
    readonly tokens: number,
    readonly degradation: string,
    readonly items: RecallItem[],
    readonly corrections: string[],
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Recall {
    return new Recall(
      int(required(data, "trace_id")),
      String(required(data, "block")),
      String(required(data, "rendered_sha256")),
      int(required(data, "tokens")),
      str(data.degradation),
      list(data.items).map((item) => RecallItem.fromJSON(item)),
      list(data.corrections).map(String),
      data,
    );
  }

  /** The `m:…` ids of the items, in rendered order (what a reply may cite). */
  get ids(): string[] {
    return this.items.map((item) => item.id).filter((id) => id);
  }
}

export class Session {
  constructor(
    readonly session_id: number,
    readonly conversation_id: number,
    readonly kind: string,
    readonly snapshot_sha256: string,
    readonly snapshot_block: string,
    readonly snapshot: Recall | null,
    /** The conversation's people; `speaking` marks the session's requester. */
    readonly participants: Participant[],
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Session {
    return new Session(
      int(required(data, "session_id")),
      int(required(data, "conversation_id")),
      String(required(data, "kind")),
      String(required(data, "snapshot_sha256")),
      String(required(data, "snapshot_block")),
      data.snapshot ? Recall.fromJSON(data.snapshot) : null,
      participantsOf(data),
      data,
    );
  }

  /** The participant the session serves, when it has one. */
  get requester(): Participant | null {
    return speakerOf(this.participants);
  }
}

export class Turn {
  constructor(
    readonly turn_id: number,
    readonly session_id: number,
    readonly state: string,
    readonly rounds_used: number,
    readonly rounds_left: number,
    readonly tools: string[],
    readonly recall: Recall | null,
    /**
     * The conversation's people the model may name as a memory's subject; `speaking` marks the
     * author of the inbound message being answered.
     */
    readonly participants: Participant[],
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Turn {
    return new Turn(
      int(required(data, "turn_id")),
      int(required(data, "session_id")),
      String(required(data, "state")),
      int(required(data, "rounds_used")),
      int(required(data, "rounds_left")),
      list(required(data, "tools")).map(String),
      data.recall ? Recall.fromJSON(data.recall) : null,
      participantsOf(data),
      data,
    );
  }

  /** The author of the inbound message: whom `subject: "speaker"` names. */
  get speaker(): Participant | null {
    return speakerOf(this.participants);
  }
}

/**
 * One verb call's outcome: `ok`, `unchanged` (an unknown or already-forgotten id: nothing was written
 * and nothing may be claimed) or `error` (with the service's `code`).
 */
export class CallResult {
  constructor(
    readonly verb: string,
    readonly status: string,
    readonly code: string,
    readonly message: string,
    readonly result: Json,
  ) {}

  static fromJSON(data: Json): CallResult {
    return new CallResult(
      String(required(data, "verb")),
      String(required(data, "status")),
      str(data.code),
      str(data.message),
      { ...(data.result ?? {}) },
    );
  }

  get ok(): boolean {
    return this.status === "ok";
  }
}

export class Round {
  constructor(
    readonly round: number,
    readonly results: CallResult[],
    readonly tools: string[],
    readonly final: boolean,
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Round {
    return new Round(
      int(required(data, "round")),
      list(required(data, "results")).map((r) => CallResult.fromJSON(r)),
      list(required(data, "tools")).map(String),
      Boolean(required(data, "final")),
      data,
    );
  }
}

/** One committed memory operation, built by the server from the store's return values. */
export class Operation {
  constructor(
    readonly operation: string,
    readonly entry_id: number,
    readonly id: string | null,
    readonly revision: number | null,
    readonly previous_id: string | null,
    readonly subject_changed: boolean,
    readonly round: number | null,
  ) {}

  static fromJSON(data: Json): Operation {
    return new Operation(
      String(required(data, "operation")),
      int(required(data, "entry_id")),
      data.id ?? null,
      data.revision ?? null,
      data.previous_id ?? null,
      Boolean(data.subject_changed),
      data.round ?? null,
    );
  }
}

/**
 * The turn's committed ledger and the instruction to hand the model (`role`, usually `developer`)
 * before it writes the reply.
 */
export class Ledger {
  constructor(
    readonly operations: Operation[],
    readonly instruction: string,
    readonly role: string,
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Ledger {
    return new Ledger(
      list(required(data, "operations")).map((o) => Operation.fromJSON(o)),
      String(required(data, "instruction")),
      str(data.role, "developer"),
      data,
    );
  }
}

/** A delivered reply and its stored provenance. */
export class Reply {
  constructor(
    readonly message_id: number,
    readonly state: string,
    readonly cited: string[],
    readonly ignored_citations: string[],
    readonly history_message_ids: number[],
    readonly memory_revision_ids: number[],
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Reply {
    return new Reply(
      int(required(data, "message_id")),
      String(required(data, "state")),
      list(required(data, "cited")).map(String),
      list(required(data, "ignored_citations")).map(String),
      list(required(data, "history_message_ids")).map(int),
      list(required(data, "memory_revision_ids")).map(int),
      data,
    );
  }
}

export class Trace {
  constructor(
    readonly trace_id: number,
    readonly moment: string,
    readonly policy_version: string,
    readonly rendered_sha256: string,
    readonly block: string,
    readonly items: Json[],
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Trace {
    return new Trace(
      int(required(data, "trace_id")),
      String(required(data, "moment")),
      String(required(data, "policy_version")),
      String(required(data, "rendered_sha256")),
      String(required(data, "block")),
      list(required(data, "items")),
      data,
    );
  }
}

/** An OpenAI function-calling tool definition: `{type: "function", function: {name, description, parameters}}`. */
export interface OpenAITool {
  type: "function";
  function: { name: string; description: string; parameters: JsonSchema };
}

/** An Anthropic tool definition: `{name, description, input_schema}`. */
export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: JsonSchema;
}

/** A JSON Schema object, as the server generates it from the verb's request schema. */
export type JsonSchema = Json;

/** Tool definitions for a model, in one function-calling format; empty once no round is left. */
export class Tools {
  constructor(
    readonly format: string,
    readonly rounds_left: number | null,
    readonly instructions: string,
    readonly tools: Json[],
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): Tools {
    return new Tools(
      String(required(data, "format")),
      data.rounds_left ?? null,
      str(data.instructions),
      list(required(data, "tools")),
      data,
    );
  }
}

/**
 * One person's answer to a sharing request: a `source` (the memory rests on their words) or its
 * `subject` (another person it is about). The grant is created only once every consent is `given`,
 * or by an operator's review.
 */
export class Consent {
  constructor(
    readonly actor_id: number,
    readonly label: string,
    readonly role: "source" | "subject" | (string & {}),
    readonly state: "given" | "pending" | "denied" | (string & {}),
  ) {}

  static fromJSON(data: Json): Consent {
    return new Consent(
      int(required(data, "actor_id")),
      str(data.label),
      String(required(data, "role")),
      String(required(data, "state")),
    );
  }
}

/**
 * An item of `GET /api/v1/me/sharing-requests`: a request awaiting the signed-in person's answer, with
 * every consent it needs. That endpoint belongs to the end user's login session, not to an agent's
 * API key: the client has no method for it, only this type for code that reads it.
 */
export class SharingRequest {
  constructor(
    readonly request_id: number,
    readonly id: string,
    readonly statement: string,
    readonly conversation: string,
    readonly state: string,
    readonly consents: Consent[],
    readonly raw: Json,
  ) {}

  static fromJSON(data: Json): SharingRequest {
    return new SharingRequest(
      int(required(data, "request_id")),
      String(required(data, "id")),
      String(required(data, "statement")),
      String(required(data, "conversation")),
      String(required(data, "state")),
      list(data.consents).map((c) => Consent.fromJSON(c)),
      data,
    );
  }

  /** The consents still awaited. */
  get pending(): Consent[] {
    return this.consents.filter((c) => c.state === "pending");
  }
}
