/**
 * Errors: one class per failure kind, each carrying the API's error body (`code`, `message`,
 * `detail`) and the HTTP `status`. Catch `EngramError` for all of them.
 *
 * The hierarchy and the names are the Python client's (`engram_client.errors`). A few codes have a
 * class of their own because a runtime must react to them differently: `reply_withheld` (the
 * pre-delivery recheck withheld the reply; the turn is closed, do not send it), `claim_guard_failed`
 * (the reply claimed a memory change that did not commit; the turn has failed), `round_limit` and
 * `turn_closed`.
 */

export interface EngramErrorOptions {
  code?: string;
  detail?: unknown;
  status?: number;
  retryAfter?: number | null;
  cause?: unknown;
}

/**
 * Any failure the client reports. `status` is 0 for a failure with no HTTP answer.
 *
 * `message` reads `code: message {detail}` (what a log or an uncaught error shows); the API's own
 * message alone is `apiMessage`, its code `code` and its detail `detail`.
 */
export class EngramError extends Error {
  /** The status a class stands for when none is given (0: no HTTP answer). */
  static readonly defaultStatus: number = 0;

  readonly status: number;
  /** The API's machine-readable code (`not_found`, `invalid_request`, …). */
  readonly code: string;
  /** The API's message (Python's `EngramError.message`). */
  readonly apiMessage: string;
  /** The API's `detail`: an object, `{}` when the answer had none. */
  readonly detail: any;
  /** Seconds the server asked to wait before trying again (`Retry-After`), when it said. */
  readonly retryAfter: number | null;

  constructor(message: string, options: EngramErrorOptions = {}) {
    const code = options.code ?? "error";
    const detail = options.detail ?? {};
    const text = code ? `${code}: ${message}` : message;
    const shown = hasContent(detail) ? `${text} ${JSON.stringify(detail)}` : text;
    super(shown, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.apiMessage = message;
    this.detail = detail;
    this.status = options.status ?? (new.target as typeof EngramError).defaultStatus;
    this.retryAfter = options.retryAfter ?? null;
  }
}

function hasContent(detail: unknown): boolean {
  if (detail === null || detail === undefined) return false;
  if (typeof detail === "object") return Object.keys(detail).length > 0;
  return Boolean(detail);
}

/** No HTTP answer: the connection was refused or reset, or the request timed out. */
export class TransportError extends EngramError {}

/** The client refused a call that would break the turn protocol (nothing was sent). */
export class ProtocolError extends EngramError {}

/** 401: no API key, or an unknown or revoked one. */
export class AuthenticationError extends EngramError {
  static override readonly defaultStatus: number = 401;
}

/** 403: authenticated, but not allowed. */
export class PermissionDeniedError extends EngramError {
  static override readonly defaultStatus: number = 403;
}

/** 404: missing, or not visible from this agent (the two are indistinguishable on purpose). */
export class NotFoundError extends EngramError {
  static override readonly defaultStatus: number = 404;
}

/** 400, 413 or 422: the request was refused as it stands; nothing was changed. */
export class ValidationError extends EngramError {
  static override readonly defaultStatus: number = 400;
}

/**
 * 422 `claim_guard_failed`: the reply asserted a memory change that did not commit. The turn has
 * failed; `detail.claims` names them and `detail.ledger` is what did commit.
 */
export class ClaimGuardFailed extends ValidationError {
  static override readonly defaultStatus: number = 422;
}

/** 409: the request collides with the state of the turn or of a concurrent request. */
export class ConflictError extends EngramError {
  static override readonly defaultStatus: number = 409;
}

/** 409 `concurrent_update`: a concurrent transaction won; nothing was changed (retried for you). */
export class ConcurrentUpdate extends ConflictError {}

/**
 * 409 `reply_withheld`: the pre-delivery recheck found that the destination audience or something
 * the reply was built from changed. The turn is closed and the reply must not be sent;
 * `detail.reason` says why.
 */
export class ReplyWithheld extends ConflictError {}

/** 409 `round_limit`: the turn has used its rounds; write the reply. */
export class RoundLimitReached extends ConflictError {}

/** 409 `turn_closed`: the turn is no longer open (delivered, failed or withheld). */
export class TurnClosed extends ConflictError {}

/** 429: too many requests; `retryAfter` says when to try again. */
export class RateLimitedError extends EngramError {
  static override readonly defaultStatus: number = 429;
}

/** 503: the service or its database is unavailable (retried for you, then thrown). */
export class UnavailableError extends EngramError {
  static override readonly defaultStatus: number = 503;
}

/** Any other 5xx. */
export class ServerError extends EngramError {
  static override readonly defaultStatus: number = 500;
}

type ErrorClass = new (message: string, options?: EngramErrorOptions) => EngramError;

const BY_CODE: Record<string, ErrorClass> = {
  concurrent_update: ConcurrentUpdate,
  reply_withheld: ReplyWithheld,
  claim_guard_failed: ClaimGuardFailed,
  round_limit: RoundLimitReached,
  turn_closed: TurnClosed,
};

const BY_STATUS: Record<number, ErrorClass> = {
  400: ValidationError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: ValidationError,
  422: ValidationError,
  429: RateLimitedError,
  503: UnavailableError,
};

/** The error for an error answer: by its `code` when it has a class of its own, else by status. */
export function errorFor(status: number, body: unknown, retryAfter: number | null = null): EngramError {
  let code: string;
  let message: string;
  let detail: unknown;
  if (isRecord(body) && typeof body.code === "string") {
    code = body.code;
    message = String(body.message ?? "");
    detail = body.detail;
  } else {
    code = `http_${status}`;
    message = body ? String(typeof body === "string" ? body : JSON.stringify(body)).slice(0, 500) : `HTTP ${status}`;
    detail = undefined;
  }
  let kind = Object.hasOwn(BY_CODE, code) ? BY_CODE[code] : BY_STATUS[status];
  if (kind === undefined) {
    kind = status >= 500 ? ServerError : status >= 400 && status < 500 ? ValidationError : EngramError;
  }
  return new kind(message, { code, detail, status, retryAfter });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
