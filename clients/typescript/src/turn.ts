/**
 * The turn helper: `await engram.turn(session, inboundMessageId, async (turn) => { ... })`.
 *
 * It keeps a turn to the protocol (bounded tool rounds, the committed ledger, the claim guard, the
 * pre-delivery recheck) so that misuse is an error rather than a silent lie, as the Python client's
 * `engram_client.turn` does:
 *
 * - a round is refused before it is sent once the turn has no round left (`RoundLimitReached`) or
 *   after the reply; the server bounds rounds too, this only saves the request;
 * - after a round, `reply()` is refused (`ProtocolError` `ledger_not_read`) until `ledger()` has been
 *   read: the model must see what committed before it writes the reply;
 * - a withheld reply throws `ReplyWithheld`, a reply claiming an uncommitted change throws
 *   `ClaimGuardFailed`; either closes the turn;
 * - a turn that ends without a delivered reply (and without an error already on its way) throws
 *   `ProtocolError` `no_reply`.
 */

import type { Engram } from "./client.js";
import { ClaimGuardFailed, ProtocolError, ReplyWithheld, RoundLimitReached, TurnClosed } from "./errors.js";
import { type ToolCall, type ToolCallFormat, toVercelTools, type VercelTool, toolCallsToVerbCalls } from "./tools.js";
import type { Ledger, Participant, Recall, Reply, Round, ToolFormat, Turn, VerbCall } from "./types.js";

export interface TurnOptions {
  /** Messages of the conversation loaded into the prompt (the turn checks them and cites them). */
  loadedMessageIds?: readonly number[];
  /** Fewer rounds than the server allows (it allows three). */
  maxRounds?: number | null;
}

/** A turn in progress. Get one from `engram.turn(…, run)` (or `engram.turnSession(…)`, then `start()`). */
export class TurnSession {
  readonly #engram: Engram;
  readonly #sessionId: number;
  readonly #inboundMessageId: number;
  readonly #loadedMessageIds: number[];
  readonly #maxRounds: number | null;
  #turn: Turn | null = null;
  #rounds: Round[] = [];
  #roundsLeft = 0;
  #ledgerStale = false;
  #delivered: Reply | null = null;
  #closed = false;
  #tools = new Map<string, Record<string, any>[]>();
  #instructions = "";

  constructor(engram: Engram, sessionId: number, inboundMessageId: number, options: TurnOptions = {}) {
    this.#engram = engram;
    this.#sessionId = sessionId;
    this.#inboundMessageId = inboundMessageId;
    this.#loadedMessageIds = [...(options.loadedMessageIds ?? [])];
    this.#maxRounds = options.maxRounds ?? null;
  }

  /** Start the turn (its in-turn recall and participants arrive with it). */
  async start(): Promise<this> {
    if (this.#turn !== null) throw new ProtocolError("the turn has already started", { code: "turn_started" });
    const turn = await this.#engram.startTurn(this.#sessionId, this.#inboundMessageId, this.#loadedMessageIds);
    this.#turn = turn;
    this.#roundsLeft = this.#maxRounds === null ? turn.rounds_left : Math.min(turn.rounds_left, this.#maxRounds);
    return this;
  }

  /**
   * The end of the turn: throws `ProtocolError` `no_reply` when it ends without a reply, unless
   * `failed` (an error is already on its way).
   */
  end(options: { failed?: boolean } = {}): void {
    if (!options.failed && this.#turn !== null && !this.#closed) {
      throw new ProtocolError("the turn ended without a reply: call turn.reply(...)", { code: "no_reply" });
    }
  }

  get turn(): Turn {
    if (this.#turn === null) {
      throw new ProtocolError("the turn has not started: use engram.turn(…, run) or start() it", {
        code: "turn_not_started",
      });
    }
    return this.#turn;
  }

  get turnId(): number {
    return this.turn.turn_id;
  }

  /** The in-turn recall: put its block (and corrections) in the user turn of the prompt. */
  get recall(): Recall | null {
    return this.turn.recall;
  }

  /** The conversation's people the model may name as a memory's subject (show them to it). */
  get participants(): Participant[] {
    return this.turn.participants;
  }

  /** The author of the message being answered: whom `subject: "speaker"` names. */
  get speaker(): Participant | null {
    return this.turn.speaker;
  }

  get roundsLeft(): number {
    return this.#roundsLeft;
  }

  get rounds(): Round[] {
    return [...this.#rounds];
  }

  get delivered(): Reply | null {
    return this.#delivered;
  }

  /** What the tool definitions say about ids and rounds, once `tools()` has been called. */
  get toolInstructions(): string {
    return this.#instructions;
  }

  /**
   * The tool definitions to offer the model now: empty once no round is left. The server's list is
   * all the tools or none, so it is fetched once a format and then follows `roundsLeft`.
   */
  async tools(format: ToolFormat = "openai"): Promise<Record<string, any>[]> {
    if (this.#roundsLeft <= 0 || this.#closed) return [];
    let tools = this.#tools.get(format);
    if (tools === undefined) {
      const result = await this.#engram.tools(format, { turnId: this.turnId });
      tools = result.tools;
      this.#tools.set(format, tools);
      this.#instructions = result.instructions;
    }
    return [...tools];
  }

  /**
   * The tools to offer now in the Vercel AI SDK's shape, `{[name]: {description, parameters}}` (see
   * `toVercelTools`); `{}` once no round is left.
   */
  async vercelTools(): Promise<Record<string, VercelTool>> {
    return toVercelTools(await this.tools("openai"));
  }

  /** Run one round of verb calls (`[{verb: "recall", query: "..."}, ...]`). */
  async round(calls: readonly VerbCall[]): Promise<Round> {
    this.turn; // throws when not started
    if (this.#closed) throw new TurnClosed("the turn is closed; no round can run", { code: "turn_closed" });
    if (this.#roundsLeft <= 0) {
      throw new RoundLimitReached(
        "the turn has no round left (no tools are offered): read the ledger and write the reply",
        { code: "round_limit" },
      );
    }
    if (calls.length === 0) throw new ProtocolError("a round has at least one call", { code: "empty_round" });
    const result = await this.#engram.runRound(this.turnId, calls);
    this.#rounds.push(result);
    this.#roundsLeft = result.final ? 0 : this.#roundsLeft - 1;
    this.#ledgerStale = true;
    return result;
  }

  /**
   * Run a model's tool calls (OpenAI `tool_calls`, Anthropic `tool_use` blocks or the Vercel AI SDK's
   * tool calls) as one round.
   */
  runToolCalls(toolCalls: readonly ToolCall[], format: ToolCallFormat = "openai"): Promise<Round> {
    return this.round(toolCallsToVerbCalls(toolCalls, format));
  }

  /** The committed ledger: hand `ledger.instruction` to the model (as `ledger.role`) before the reply. */
  async ledger(): Promise<Ledger> {
    const ledger = await this.#engram.ledger(this.turnId);
    this.#ledgerStale = false;
    return ledger;
  }

  /** Submit the final reply; `ReplyWithheld` or `ClaimGuardFailed` when it is not delivered. */
  async reply(body: string, citedIds: readonly string[] = []): Promise<Reply> {
    this.turn; // throws when not started
    if (this.#closed) {
      throw new TurnClosed("the turn is closed; no reply can be submitted", { code: "turn_closed" });
    }
    if (this.#ledgerStale) {
      throw new ProtocolError(
        "read the committed ledger (turn.ledger()) after the last round and give it to the model before " +
          "writing the reply",
        { code: "ledger_not_read" },
      );
    }
    let reply: Reply;
    try {
      reply = await this.#engram.submitReply(this.turnId, body, citedIds);
    } catch (error) {
      if (error instanceof ReplyWithheld || error instanceof ClaimGuardFailed || error instanceof TurnClosed) {
        this.#closed = true;
      }
      throw error;
    }
    this.#delivered = reply;
    this.#closed = true;
    return reply;
  }
}
