// The API as the console uses it: GraphQL queries over fetch, and live
// subscriptions over graphql-transport-ws that resume from their last
// event's cursor after any drop, so nothing is missed between the two.
import { accessToken, signIn } from "./auth.js";

// APIError: the message and code (extensions.code) of the first GraphQL
// error; fields are a validation error's [{field, message}].
export class APIError extends Error {
  constructor(message, code, fields = []) {
    super(message);
    this.code = code;
    this.fields = Array.isArray(fields) ? fields : [];
  }
}

export async function gql(query, variables = {}) {
  for (let attempt = 0; ; attempt++) {
    const token = await accessToken(attempt > 0);
    if (!token) {
      await signIn();
      throw new APIError("signing in", "UNAUTHENTICATED");
    }
    const res = await fetch("/graphql", {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + token },
      body: JSON.stringify({ query, variables }),
    });
    if (res.status === 401 && attempt === 0) continue;
    const body = await res.json().catch(() => null);
    if (!body) throw new APIError(`the server answered ${res.status}`, "UNAVAILABLE");
    if (body.errors?.length) {
      const e = body.errors[0];
      throw new APIError(e.message, e.extensions?.code, e.extensions?.errors);
    }
    return body.data;
  }
}

// rest calls a path of the REST API (under /api/v1, with its query),
// GET unless method says otherwise, with body as JSON when given, and
// answers its JSON; a problem (docs/api.md, "Conventions") throws an
// APIError with its code, detail and fields.
export async function rest(path, { method = "GET", body } = {}) {
  for (let attempt = 0; ; attempt++) {
    const token = await accessToken(attempt > 0);
    if (!token) {
      await signIn();
      throw new APIError("signing in", "UNAUTHENTICATED");
    }
    const headers = { Authorization: "Bearer " + token, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch("/api/v1" + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    if (res.status === 401 && attempt === 0) continue;
    const answer = await res.json().catch(() => null);
    if (!res.ok) throw new APIError(answer?.detail || answer?.title || `the server answered ${res.status}`, answer?.code ?? "UNAVAILABLE", answer?.errors);
    if (!answer) throw new APIError(`the server answered ${res.status}`, "UNAVAILABLE");
    return answer;
  }
}

// eventHead is the event log's head now: a view reads it before it loads
// what it shows, then subscribes from it (live's after).
async function eventHead() {
  return (await gql("{ eventCursor }")).eventCursor;
}

// loadThenLive reads the log's head, loads the view (onResync), then
// subscribes from that head, so nothing between the load and the
// subscription is lost; it resolves to the subscription.
export async function loadThenLive(opts) {
  const after = await eventHead();
  await opts.onResync();
  return live({ ...opts, after });
}

const wsURL = () => (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/graphql";

// live keeps one subscription open. query must take $after: ID. Each
// event goes to onEvent with its id remembered; after a drop the
// subscription resumes after that id. When there is nothing to resume
// from (no event yet, or the cursor expired), onResync is called first so
// the caller can reload what it shows. onState gets "connecting", "live"
// or "down". after is where to start: eventHead(), read before the caller
// loaded what it shows, so that nothing between that load and the
// subscription is lost. Without it the subscription starts at the log's
// head read as it connects (the server attaches a subscription some time
// after "live": an event of that gap would otherwise be lost too).
export function live({ query, variables = {}, onEvent, onResync, onState, after = null }) {
  let cursor = after;
  let stopped = false;
  let client = null;
  let delay = 500;
  let timer = null;
  let synced = true; // the caller loaded its view before subscribing

  const connect = async () => {
    if (stopped) return;
    onState("connecting");
    if (cursor === null) {
      try {
        cursor = await eventHead();
      } catch (err) {
        return retry();
      }
    }
    if (!synced) {
      try {
        await onResync();
        synced = true;
      } catch (err) {
        return retry();
      }
    }
    let token;
    try {
      token = await accessToken();
    } catch {
      return retry();
    }
    if (!token) return signIn();
    client = graphqlWs.createClient({
      url: wsURL(),
      lazy: false,
      retryAttempts: 0,
      keepAlive: 10_000,
      connectionParams: { Authorization: "Bearer " + token },
      on: {
        connected: () => {
          delay = 500;
          onState("live");
        },
      },
    });
    const vars = cursor ? { ...variables, after: cursor } : variables;
    client.subscribe({ query, variables: vars }, {
      next: (msg) => {
        if (msg.errors?.length) {
          if (msg.errors[0].extensions?.code === "CURSOR_EXPIRED") cursor = null;
          return;
        }
        const ev = Object.values(msg.data)[0];
        cursor = ev.id;
        onEvent(ev);
      },
      error: (err) => drop(err),
      complete: () => drop(null),
    });
  };

  const drop = (err) => {
    if (stopped) return;
    // An error message (not a closed socket) is an array of GraphQL errors.
    if (Array.isArray(err) && err[0]?.extensions?.code === "CURSOR_EXPIRED") cursor = null;
    const old = client;
    client = null;
    old?.dispose();
    if (cursor === null) synced = false;
    onState("down");
    retry();
  };

  const retry = () => {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(connect, delay);
    delay = Math.min(delay * 2, 10_000);
  };

  connect();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      client?.dispose();
    },
  };
}
