// The API client: the bearer token from sessionStorage on every call, problem+json errors as ApiError,
// and ETag revalidation for the routes that offer it.

const TOKEN_KEY = "eyas.token";

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value.trim()),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

export class ApiError extends Error {
  constructor(status, code, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

// A 401 anywhere means the token is gone or revoked: main.js listens and asks for a new one.
export const UNAUTHORIZED_EVENT = "eyas:unauthorized";

export function authHeaders(extra = {}) {
  const headers = { Accept: "application/json", ...extra };
  const secret = token.get();
  if (secret) headers.Authorization = `Bearer ${secret}`;
  return headers;
}

async function errorOf(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    // not JSON (a proxy's error page): the status says enough
  }
  return new ApiError(response.status, body.code || `HTTP_${response.status}`, body.detail || response.statusText);
}

export async function request(path, { method = "GET", body, signal } = {}) {
  const headers = authHeaders(body === undefined ? {} : { "Content-Type": "application/json" });
  const response = await fetch(path, {
    method,
    headers,
    signal,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  if (response.status === 401) window.dispatchEvent(new CustomEvent(UNAUTHORIZED_EVENT));
  if (!response.ok) throw await errorOf(response);
  return response.status === 204 ? null : response.json();
}

export const getJson = (path, options) => request(path, options);
export const postJson = (path, body = {}) => request(path, { method: "POST", body });

// GET with If-None-Match: resolves to {changed: false} on a 304, else {changed: true, data}.
const etags = new Map();
const cached = new Map();

export async function getIfChanged(path, { signal } = {}) {
  const extra = etags.has(path) ? { "If-None-Match": etags.get(path) } : {};
  const response = await fetch(path, { headers: authHeaders(extra), signal, cache: "no-store" });
  if (response.status === 304) return { changed: false, data: cached.get(path) };
  if (response.status === 401) window.dispatchEvent(new CustomEvent(UNAUTHORIZED_EVENT));
  if (!response.ok) throw await errorOf(response);
  const data = await response.json();
  const etag = response.headers.get("ETag");
  if (etag) {
    etags.set(path, etag);
    cached.set(path, data);
  }
  return { changed: true, data };
}

// A list route that may not exist on an older API answers 404: the page says so instead of failing.
export async function getOptional(path, options) {
  try {
    return { available: true, data: await getJson(path, options) };
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return { available: false, data: null };
    throw error;
  }
}
