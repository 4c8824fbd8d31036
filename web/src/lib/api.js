// fetch() wrappers for the coordinator's JSON API (docs/api.md).

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`;
  let code = '';
  try {
    const body = await response.json();
    if (body && body.error) message = String(body.error);
    if (body && body.code) code = String(body.code);
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, message, code);
}

export async function getJSON(path, { signal } = {}) {
  const response = await fetch(path, {
    headers: { Accept: 'application/json' },
    cache: 'no-store',
    signal,
  });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

// A state-changing request: POST with the bearer token (docs/api.md,
// "Conventions").
export async function postJSON(path, token) {
  const response = await fetch(path, {
    method: 'POST',
    headers: { Accept: 'application/json', Authorization: `Bearer ${token}` },
    cache: 'no-store',
  });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

// Signs in for reads: the coordinator answers with an HttpOnly session cookie
// (Path=/api/), which GET requests and event streams carry, since an
// EventSource cannot send an Authorization header. Changes still send the
// header. Resolves true when the token was accepted, false when the
// coordinator rejected it (401/403); throws on other failures. A coordinator
// without sessions (404/405) counts as accepted: it serves reads without one.
export async function signIn(token) {
  const response = await fetch('/api/v1/session', {
    method: 'POST',
    headers: { Accept: 'application/json', Authorization: `Bearer ${token}` },
    cache: 'no-store',
  });
  if (response.ok || response.status === 404 || response.status === 405) return true;
  if (response.status === 401 || response.status === 403) return false;
  throw await errorOf(response);
}

// Drops the session cookie.
export async function signOut() {
  await fetch('/api/v1/session', { method: 'DELETE', cache: 'no-store' });
}
