// Sign-in: the authorization code flow with PKCE (S256) at the configured
// OpenID provider, for the console's public client. Tokens live in
// sessionStorage: they survive a reload of the tab, not the tab.

const store = sessionStorage;
let config = null;
let discovery = null;
let refreshing = null;

function b64url(bytes) {
  let s = "";
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomText(n) {
  const b = new Uint8Array(n);
  crypto.getRandomValues(b);
  return b64url(b);
}

async function challengeOf(verifier) {
  if (!crypto.subtle) {
    throw new Error("The console needs a secure origin (https, or http on localhost) to sign in.");
  }
  return b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
}

function redirectURI() {
  return location.origin + "/console/";
}

export async function init() {
  config = await (await fetch("/console/config.json")).json();
  discovery = await (await fetch(config.issuer + "/.well-known/openid-configuration")).json();
}

// signIn leaves for the provider's login page.
export async function signIn() {
  // While signing out, a view that lost its token (a socket the revocation
  // closed) must not start a new sign-in: the page is leaving.
  if (signingOut) return;
  const verifier = randomText(48);
  const state = randomText(16);
  store.setItem("pkce", JSON.stringify({ verifier, state, back: location.hash || "#/" }));
  const q = new URLSearchParams({
    client_id: config.clientId,
    redirect_uri: redirectURI(),
    response_type: "code",
    scope: "openid offline_access",
    state,
    code_challenge: await challengeOf(verifier),
    code_challenge_method: "S256",
  });
  location.assign(discovery.authorization_endpoint + "?" + q);
}

function keep(tok) {
  const t = { access: tok.access_token, refresh: tok.refresh_token || null, expires: Date.now() + (tok.expires_in || 3600) * 1000 };
  store.setItem("tokens", JSON.stringify(t));
  return t;
}

async function tokenCall(form) {
  const res = await fetch(discovery.token_endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(form),
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(body.error_description || body.error || "sign-in failed");
    err.status = res.status;
    throw err;
  }
  return body;
}

// completeSignIn finishes a redirect back from the provider; it returns
// whether the page was such a redirect.
export async function completeSignIn() {
  const q = new URLSearchParams(location.search);
  if (!q.has("code") && !q.has("error")) return false;
  const pending = JSON.parse(store.getItem("pkce") || "null");
  store.removeItem("pkce");
  history.replaceState(null, "", "/console/" + (pending?.back || "#/"));
  if (q.has("error")) throw new Error(q.get("error_description") || q.get("error"));
  if (!pending || q.get("state") !== pending.state) throw new Error("The sign-in did not start here; sign in again.");
  keep(await tokenCall({
    grant_type: "authorization_code",
    code: q.get("code"),
    redirect_uri: redirectURI(),
    client_id: config.clientId,
    code_verifier: pending.verifier,
  }));
  return true;
}

function tokens() {
  return JSON.parse(store.getItem("tokens") || "null");
}

export function signedIn() {
  return tokens() !== null;
}

// accessToken returns a token valid for at least another 30 seconds,
// refreshing it when needed; null when the person must sign in again.
export async function accessToken(force = false) {
  const t = tokens();
  if (!t) return null;
  if (!force && t.expires - Date.now() > 30_000) return t.access;
  if (!t.refresh) return null;
  if (!refreshing) {
    refreshing = tokenCall({ grant_type: "refresh_token", refresh_token: t.refresh, client_id: config.clientId })
      .then(keep, (err) => {
        if (err.status && err.status < 500) store.removeItem("tokens");
        throw err;
      })
      .finally(() => { refreshing = null; });
  }
  try {
    return (await refreshing).access;
  } catch (err) {
    if (!tokens()) return null;
    throw err;
  }
}

// signOut revokes the sign-in at the provider (when it offers revocation),
// then forgets the tab's tokens.
let signingOut = false;

export async function signOut() {
  signingOut = true;
  const t = tokens();
  store.removeItem("tokens");
  if (t?.refresh && discovery?.revocation_endpoint) {
    await fetch(discovery.revocation_endpoint, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ token: t.refresh, token_type_hint: "refresh_token", client_id: config.clientId }),
    }).catch(() => {});
  }
  location.assign("/console/");
}
