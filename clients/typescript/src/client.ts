/**
 * `Engram`: one method per API endpoint, plus `ingest` batching and the `turn` helper (the Python
 * client's `Engram`, on the platform's `fetch`). Every call is bound to the agent of the API key; no
 * method takes an agent, audience or perspective.
 */

import { EngramError, ProtocolError, TransportError } from "./errors.js";
import * as http from "./http.js";
import { type Call, DEFAULT_MAX_RETRIES, DEFAULT_MAX_RETRY_WAIT, DEFAULT_TIMEOUT, MAX_INGEST_BATCH } from "./http.js";
import { TurnSession, type TurnOptions } from "./turn.js";
import type {
  Ingested,
  Ledger,
  MessageIn,
  Reply,
  Round,
  Session,
  ToolFormat,
  Tools,
  Trace,
  Turn,
  VerbCall,
} from "./types.js";

export interface EngramOptions {
  /** Seconds a request may take (default 30); past it the request fails with `TransportError`. */
  timeout?: number;
  /** Tries after the first for 503 and 409 `concurrent_update` answers and refused connections (default 3). */
  maxRetries?: number;
  /** The longest wait between two tries, in seconds, whatever `Retry-After` says (default 30). */
  maxRetryWait?: number;
  /** A `fetch` of your own (a proxy agent, instrumentation); the platform's by default. */
  fetch?: typeof fetch;
}

export type { OpenSessionOptions } from "./http.js";

/** The codes of a connection that never reached the server; any other failure may have committed. */
const NOT_CONNECTED = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

function failureCode(error: unknown): string {
  // fetch wraps the socket's error: TypeError("fetch failed", {cause}); a dual-stack host's refusal
  // is an AggregateError of one error per address.
  const cause = (error as { cause?: unknown } | null)?.cause ?? error;
  const code = (cause as { code?: unknown } | null)?.code;
  if (typeof code === "string") return code;
  const inner = (cause as { errors?: unknown[] } | null)?.errors;
  const first = Array.isArray(inner) ? (inner[0] as { code?: unknown } | undefined)?.code : undefined;
  return typeof first === "string" ? first : "";
}

function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

/**
 * A client of one Engram server for one agent (its API key).
 *
 * `baseUrl`: e.g. `http://127.0.0.1:8000`. Errors are `EngramError`s, one class per failure kind.
 */
export class Engram {
  readonly baseUrl: string;
  readonly retry: http.RetryPolicy;
  readonly timeout: number;
  readonly #headers: Record<string, string>;
  readonly #fetch: typeof fetch;

  constructor(baseUrl: string, apiKey: string, options: EngramOptions = {}) {
    if (!apiKey) throw new ProtocolError("an API key is required", { code: "no_api_key" });
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.retry = new http.RetryPolicy(
      options.maxRetries ?? DEFAULT_MAX_RETRIES,
      0.5,
      options.maxRetryWait ?? DEFAULT_MAX_RETRY_WAIT,
    );
    this.timeout = options.timeout ?? DEFAULT_TIMEOUT;
    this.#headers = {
      Authorization: `Bearer ${apiKey}`,
      Accept: "application/json",
      "User-Agent": http.USER_AGENT,
    };
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  async #send<T>(call: Call<T>): Promise<T> {
    const url = new URL(this.baseUrl + call.path);
    for (const [name, value] of Object.entries(call.params ?? {})) url.searchParams.set(name, value);
    const headers: Record<string, string> = { ...this.#headers };
    let body: string | undefined;
    if (call.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(call.body);
    }
    for (let attempt = 0; ; attempt++) {
      let wait: number | null;
      try {
        const response = await this.#fetch(url, {
          method: call.method,
          headers,
          body,
          signal: AbortSignal.timeout(this.timeout * 1000),
        });
        return call.parse(await http.answer(response));
      } catch (failure) {
        if (failure instanceof EngramError) {
          wait = this.retry.wait(attempt, failure);
          if (wait === null) throw failure;
        } else if (failure instanceof TypeError || (failure as Error)?.name === "TimeoutError") {
          const code = failureCode(failure);
          const error = new TransportError(
            (failure as Error).name === "TimeoutError"
              ? `no answer within ${this.timeout} s`
              : `${(failure as Error).message}${code ? ` (${code})` : ""}`,
            { code: "no_answer", cause: failure },
          );
          // Only a request that never reached the server may be sent again: a timeout after
          // sending may have committed.
          if (!NOT_CONNECTED.has(code) || attempt >= this.retry.maxRetries) throw error;
          wait = this.retry.backoff * 2 ** attempt;
        } else {
          throw failure;
        }
      }
      await sleep(wait);
    }
  }

  // -- ingest -----------------------------------------------------------------------------------

  /**
   * Ingest messages as a connector saw them, `batchSize` (at most 500) a request, in order. Each
   * batch is atomic on the server; a repeated external id creates nothing new, so a batch that failed
   * may be sent again.
   */
  async ingest(messages: Iterable<MessageIn>, options: { batchSize?: number } = {}): Promise<Ingested[]> {
    const results: Ingested[] = [];
    for (const chunk of http.batches(messages, options.batchSize ?? MAX_INGEST_BATCH)) {
      results.push(...(await this.#send(http.ingestCall(chunk))));
    }
    return results;
  }

  // -- sessions and turns -----------------------------------------------------------------------

  /** Open a session and take its frozen snapshot (put `snapshot_block` in the cacheable prefix). */
  openSession(conversationId: number, options: http.OpenSessionOptions = {}): Promise<Session> {
    return this.#send(http.openSessionCall(conversationId, options));
  }

  session(sessionId: number): Promise<Session> {
    return this.#send(http.sessionCall(sessionId));
  }

  /** Start a turn (the low-level call; prefer `turn`). */
  startTurn(
    session: number | Session,
    inboundMessageId: number,
    loadedMessageIds: readonly number[] = [],
  ): Promise<Turn> {
    return this.#send(http.startTurnCall(sessionIdOf(session), inboundMessageId, loadedMessageIds));
  }

  getTurn(turnId: number): Promise<Turn> {
    return this.#send(http.turnCall(turnId));
  }

  /** One round of verb calls; all are validated before any executes. */
  runRound(turnId: number, calls: readonly VerbCall[]): Promise<Round> {
    return this.#send(http.roundCall(turnId, calls));
  }

  ledger(turnId: number): Promise<Ledger> {
    return this.#send(http.ledgerCall(turnId));
  }

  /** Submit the final reply (the low-level call; prefer `turn.reply`). */
  submitReply(turnId: number, body: string, citedIds: readonly string[] = []): Promise<Reply> {
    return this.#send(http.replyCall(turnId, body, citedIds));
  }

  trace(traceId: number): Promise<Trace> {
    return this.#send(http.traceCall(traceId));
  }

  /**
   * The verbs and `search_history` as tool definitions for a model (`openai` or `anthropic`). With
   * `turnId`, bound to that turn: empty once it has no round left.
   */
  tools(format: ToolFormat = "openai", options: { turnId?: number | null } = {}): Promise<Tools> {
    return this.#send(http.toolsCall(format, options.turnId));
  }

  /**
   * A turn kept to the protocol (see `TurnSession`): started, handed to `run`, and checked when `run`
   * ends: a turn that ended without a delivered reply (and without an error already on its way)
   * throws `ProtocolError` `no_reply`. Resolves to what `run` returned.
   *
   *     const reply = await engram.turn(session, inboundId, async (turn) => {
   *       await turn.round([{ verb: "recall", query: "..." }]);
   *       await turn.ledger();
   *       return turn.reply("...");
   *     });
   */
  turn<T>(session: number | Session, inboundMessageId: number, run: (turn: TurnSession) => Promise<T>): Promise<T>;
  turn<T>(
    session: number | Session,
    inboundMessageId: number,
    options: TurnOptions,
    run: (turn: TurnSession) => Promise<T>,
  ): Promise<T>;
  async turn<T>(
    session: number | Session,
    inboundMessageId: number,
    optionsOrRun: TurnOptions | ((turn: TurnSession) => Promise<T>),
    maybeRun?: (turn: TurnSession) => Promise<T>,
  ): Promise<T> {
    const options = typeof optionsOrRun === "function" ? {} : optionsOrRun;
    const run = typeof optionsOrRun === "function" ? optionsOrRun : maybeRun;
    if (run === undefined) throw new TypeError("engram.turn(session, inboundMessageId, [options,] run): no run");
    const turn = this.turnSession(session, inboundMessageId, options);
    await turn.start();
    let result: T;
    try {
      result = await run(turn);
    } catch (error) {
      turn.end({ failed: true });
      throw error;
    }
    turn.end({ failed: false });
    return result;
  }

  /** The turn helper without the callback: `await turn.start()`, …, `turn.end()` (see `turn`). */
  turnSession(session: number | Session, inboundMessageId: number, options: TurnOptions = {}): TurnSession {
    return new TurnSession(this, sessionIdOf(session), inboundMessageId, options);
  }
}

export function sessionIdOf(session: number | Session): number {
  return typeof session === "number" ? session : session.session_id;
}
