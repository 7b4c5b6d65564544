/**
 * What the client's methods share: the request each one sends, how an answer becomes a result or an
 * error, and when a failed request is sent again (the Python client's `engram_client._http`).
 */

import { EngramError, errorFor } from "./errors.js";
import {
  Ingested,
  Ledger,
  type MessageIn,
  Reply,
  Round,
  Session,
  type ToolFormat,
  Tools,
  Trace,
  Turn,
  type VerbCall,
} from "./types.js";

/** The API's largest ingest batch (`history/apis.py` `MAX_BATCH`). */
export const MAX_INGEST_BATCH = 500;
/** Seconds a request may take before it fails with `TransportError`. */
export const DEFAULT_TIMEOUT = 30;
export const DEFAULT_MAX_RETRIES = 3;
/** The longest single wait between two tries, in seconds, whatever `Retry-After` says. */
export const DEFAULT_MAX_RETRY_WAIT = 30;
export const USER_AGENT = "engram-client-ts/0.1.0";

/** One API request and how to read its answer. */
export interface Call<T> {
  method: "GET" | "POST";
  path: string;
  parse: (data: any) => T;
  body?: unknown;
  params?: Record<string, string>;
}

/**
 * Bounded retries: a request that answered 503, or 409 `concurrent_update` (both mean nothing was
 * changed), or that could not connect at all, is sent again up to `maxRetries` times, after
 * `Retry-After` seconds when the server said so, else `backoff * 2**try`; no wait exceeds `maxWait`.
 */
export class RetryPolicy {
  constructor(
    readonly maxRetries: number = DEFAULT_MAX_RETRIES,
    readonly backoff: number = 0.5,
    readonly maxWait: number = DEFAULT_MAX_RETRY_WAIT,
  ) {}

  /** Seconds to wait before try `attempt + 1`, or null when the error is final. */
  wait(attempt: number, error: EngramError): number | null {
    if (attempt >= this.maxRetries || !retryable(error)) return null;
    const wanted = error.retryAfter ?? this.backoff * 2 ** attempt;
    return Math.max(0, Math.min(wanted, this.maxWait));
  }
}

export function retryable(error: EngramError): boolean {
  return error.status === 503 || (error.status === 409 && error.code === "concurrent_update");
}

/** `Retry-After` as seconds: delta-seconds or an HTTP date. */
export function retryAfterSeconds(value: string | null | undefined): number | null {
  if (!value) return null;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.max(0, Number(text));
  const when = Date.parse(text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, (when - Date.now()) / 1000);
}

export function batches<T>(messages: Iterable<T>, size: number): T[][] {
  if (!Number.isInteger(size) || size < 1 || size > MAX_INGEST_BATCH) {
    throw new RangeError(`batchSize must be between 1 and ${MAX_INGEST_BATCH}`);
  }
  const chunks: T[][] = [];
  for (const message of messages) {
    const last = chunks[chunks.length - 1];
    if (last === undefined || last.length >= size) chunks.push([message]);
    else last.push(message);
  }
  return chunks;
}

function id(value: number): number {
  const n = Math.trunc(Number(value));
  if (!Number.isFinite(n)) throw new TypeError(`not an id: ${String(value)}`);
  return n;
}

// ---------------------------------------------------------------------------------------------------
// the requests, one function per endpoint
// ---------------------------------------------------------------------------------------------------

export function ingestCall(messages: readonly MessageIn[]): Call<Ingested[]> {
  return {
    method: "POST",
    path: "/api/v1/messages",
    parse: (data) => (data.messages as any[]).map((m) => Ingested.fromJSON(m)),
    body: { messages },
  };
}

export interface OpenSessionOptions {
  requester_actor_id?: number | null;
  kind?: string;
  goal?: string;
  parent_session_id?: number | null;
}

export function openSessionCall(conversationId: number, options: OpenSessionOptions = {}): Call<Session> {
  const body: Record<string, unknown> = {
    conversation_id: conversationId,
    kind: options.kind ?? "interactive",
    goal: options.goal ?? "",
  };
  if (options.requester_actor_id !== undefined && options.requester_actor_id !== null) {
    body.requester_actor_id = options.requester_actor_id;
  }
  if (options.parent_session_id !== undefined && options.parent_session_id !== null) {
    body.parent_session_id = options.parent_session_id;
  }
  return { method: "POST", path: "/api/v1/sessions", parse: Session.fromJSON, body };
}

export function sessionCall(sessionId: number): Call<Session> {
  return { method: "GET", path: `/api/v1/sessions/${id(sessionId)}`, parse: Session.fromJSON };
}

export function startTurnCall(
  sessionId: number,
  inboundMessageId: number,
  loadedMessageIds: readonly number[],
): Call<Turn> {
  const body = { inbound_message_id: inboundMessageId, loaded_message_ids: [...loadedMessageIds] };
  return { method: "POST", path: `/api/v1/sessions/${id(sessionId)}/turns`, parse: Turn.fromJSON, body };
}

export function turnCall(turnId: number): Call<Turn> {
  return { method: "GET", path: `/api/v1/turns/${id(turnId)}`, parse: Turn.fromJSON };
}

export function roundCall(turnId: number, calls: readonly VerbCall[]): Call<Round> {
  return { method: "POST", path: `/api/v1/turns/${id(turnId)}/rounds`, parse: Round.fromJSON, body: { calls } };
}

export function ledgerCall(turnId: number): Call<Ledger> {
  return { method: "GET", path: `/api/v1/turns/${id(turnId)}/ledger`, parse: Ledger.fromJSON };
}

export function replyCall(turnId: number, body: string, citedIds: readonly string[]): Call<Reply> {
  const payload = { body, cited_ids: [...citedIds] };
  return { method: "POST", path: `/api/v1/turns/${id(turnId)}/reply`, parse: Reply.fromJSON, body: payload };
}

export function traceCall(traceId: number): Call<Trace> {
  return { method: "GET", path: `/api/v1/traces/${id(traceId)}`, parse: Trace.fromJSON };
}

export function toolsCall(format: ToolFormat, turnId: number | null | undefined): Call<Tools> {
  const path = turnId === null || turnId === undefined ? "/api/v1/tools" : `/api/v1/turns/${id(turnId)}/tools`;
  return { method: "GET", path, parse: Tools.fromJSON, params: { provider: format } };
}

/** The JSON body of a 2xx answer; the matching `EngramError` for any other. */
export async function answer(response: Response): Promise<unknown> {
  const text = await response.text();
  let body: unknown = null;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  if (response.ok) return body;
  throw errorFor(response.status, body, retryAfterSeconds(response.headers.get("Retry-After")));
}
