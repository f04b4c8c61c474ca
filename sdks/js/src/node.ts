/// <reference types="node" />
// The Node entry of @hybox/sdk: the core, with the connection read from the
// environment (HYBOX_DOMAIN / HYBOX_API_KEY, falling back to
// OPEN_SANDBOX_DOMAIN / OPEN_SANDBOX_API_KEY) and terminals over `ws`
// (which can send the endpoint's headers).
import WebSocket from "ws";
import { setConnectionDefaults, type WebSocketLike } from "./transport.js";

export * from "./index.js";

function env(...names: string[]): string | undefined {
  for (const n of names) {
    const v = process.env[n];
    if (v) return v;
  }
  return undefined;
}

setConnectionDefaults(() => {
  const d: { domain?: string; apiKey?: string; WebSocket: WebSocketLike } = { WebSocket: WebSocket as unknown as WebSocketLike };
  const domain = env("HYBOX_DOMAIN", "OPEN_SANDBOX_DOMAIN");
  const apiKey = env("HYBOX_API_KEY", "OPEN_SANDBOX_API_KEY");
  if (domain) d.domain = domain;
  if (apiKey) d.apiKey = apiKey;
  return d;
});
