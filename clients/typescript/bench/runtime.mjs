// The benchmark's TypeScript runtime: `manage.py bench_turn --clients python,typescript` drives the same
// scripted turns through the Python client and through this process (bench/harness/typescript_client.py).
//
//   node bench/runtime.mjs '{"baseUrl": "http://127.0.0.1:8000", "apiKey": "egk_…", "timeout": 60}'
//
// Each line on standard input is one call, {"method": "runRound", "args": [turnId, calls]}; each is
// awaited through engram-client, in order, and answered with one line on standard output:
// {"value": <the result's JSON>, "ms": <the call's wall time, measured here around the awaited call>}
// or {"error": {"name", "code", "message"}, "ms": …}. Results are typed by the client and sent back as the
// API's JSON (`raw`), so the Python side reads them as it reads raw HTTP's.

import { createInterface } from "node:readline";

import { Engram, EngramError } from "../dist/index.js";

const config = JSON.parse(process.argv[2] ?? "{}");
// No retries: the benchmark times each request once, as its other runtimes do.
const engram = new Engram(config.baseUrl, config.apiKey, { timeout: config.timeout ?? 60, maxRetries: 0 });

const METHODS = {
  ingest: (messages) => engram.ingest(messages),
  openSession: (conversationId, options) => engram.openSession(conversationId, options),
  startTurn: (sessionId, inboundId, loaded) => engram.startTurn(sessionId, inboundId, loaded),
  runRound: (turnId, calls) => engram.runRound(turnId, calls),
  ledger: (turnId) => engram.ledger(turnId),
  submitReply: (turnId, body, citedIds) => engram.submitReply(turnId, body, citedIds),
};

const asJSON = (value) => (Array.isArray(value) ? value.map(asJSON) : value?.raw ?? value);

for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (!line.trim()) continue;
  const { method, args } = JSON.parse(line);
  let answer;
  const started = performance.now();
  try {
    const value = await METHODS[method](...args);
    answer = { value: asJSON(value), ms: performance.now() - started };
  } catch (error) {
    const known = error instanceof EngramError;
    answer = {
      error: { name: error?.name ?? "Error", code: known ? error.code : "", message: String(error?.message ?? error) },
      ms: performance.now() - started,
    };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
