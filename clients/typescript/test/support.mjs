// What the tests share: the live server they talk to (ENGRAM_URL, ENGRAM_API_KEY, set by
// tests/clients/test_typescript_client.py, which starts it and issues the key) and messages from a
// Slack workspace with Victor (U1) and Alice (U2), each with an external id of its own.

import { Engram } from "../dist/index.js";

function required(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(
      `${name} is not set: these tests run against a live Engram server. Run them through pytest ` +
        "(tests/clients/test_typescript_client.py), which starts one and issues an API key.",
    );
  }
  return value;
}

export const BASE_URL = required("ENGRAM_URL");
export const API_KEY = required("ENGRAM_API_KEY");
export const NAMES = { U1: "Victor", U2: "Alice" };
export const DM_ALICE = { kind: "members", readers: ["U2"] };
export const GENERAL = { kind: "workspace" };

// Test files run in processes of their own, side by side: ids and threads carry the process id.
const RUN = `${process.pid}-${Date.now()}`;
let counter = 0;

export function thread(name) {
  return `${name}-${RUN}`;
}

/** A message as a connector sends it; a thread named D-* is Alice's DM. */
export function message(threadId, who, body, audience) {
  counter += 1;
  return {
    connector: { type: "slack", name: "acme" },
    thread: { external_id: threadId, audience: audience ?? (threadId.startsWith("D-") ? DM_ALICE : GENERAL) },
    actor: { external_id: who, display_name: NAMES[who] },
    external_id: `ts-${RUN}-${counter}`,
    body,
    created_at: new Date(Date.now() + counter).toISOString(),
    evidence: { method: "connector_signed" },
  };
}

export function client(options = {}) {
  return new Engram(BASE_URL, API_KEY, options);
}

/** A DM from Alice, in a DM thread of its own, with a session open for it: `[engram, session, inbound]`. */
export async function dmTurnStart(text) {
  const engram = client();
  const [inbound] = await engram.ingest([message(thread(`D-ALICE-${counter}`), "U2", text)]);
  const session = await engram.openSession(inbound.conversation_id, { requester_actor_id: inbound.actor_id });
  return [engram, session, inbound];
}
