// The REST API as the explorer calls it: same origin only, the token from localStorage.

const TOKEN_KEY = 'autopar.token';

export function savedToken() {
  try {
    return localStorage.getItem(TOKEN_KEY) ?? '';
  } catch {
    return '';
  }
}

export function saveToken(token) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // storage disabled (private mode): the token lives in the field only
  }
}

/** An answer that is not 2xx: `status` and the API's `detail` items ({field, msg, fix}). */
export class ApiError extends Error {
  constructor(status, detail, fallback) {
    const items = Array.isArray(detail) ? detail : [];
    const text = items.length ? items.map((d) => `${d.field}: ${d.msg}`).join('; ') : fallback;
    super(text);
    this.status = status;
    this.detail = items;
  }

  /** One readable line per problem: "msg — fix". */
  lines() {
    if (!this.detail.length) return [this.message];
    return this.detail.map((d) => (d.fix ? `${d.msg} — ${d.fix}` : d.msg));
  }
}

async function request(method, path, { body, token, signal } = {}) {
  const headers = { Accept: 'application/json' };
  const bearer = token ?? savedToken();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin', cache: 'no-store',
    });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(0, null, `the service at ${location.host} did not answer (${err.message})`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    throw new ApiError(response.status, data?.detail, `${response.status} ${response.statusText || 'error'}`);
  }
  return data;
}

export const api = {
  modelPresets: () => request('GET', '/v1/presets/models'),
  clusterPresets: () => request('GET', '/v1/presets/clusters'),
  profiles: () => request('GET', '/v1/profiles?limit=100'),
  searches: (limit = 8) => request('GET', `/v1/searches?limit=${limit}`),
  search: (id, signal) => request('GET', `/v1/searches/${encodeURIComponent(id)}`, { signal }),
  configs: (id, signal) => request('GET', `/v1/searches/${encodeURIComponent(id)}/configs`, { signal }),
  start: (body, token) => request('POST', '/v1/searches', { body, token }),
  cancel: (id, token) => request('DELETE', `/v1/searches/${encodeURIComponent(id)}`, { token }),
  whatif: (ids) => request('GET', `/v1/whatif?ids=${ids.map(encodeURIComponent).join(',')}`),
  launch: (id, rank, target, hosts) => {
    const q = new URLSearchParams({ target });
    if (hosts) q.set('hosts', hosts);
    return request('GET', `/v1/searches/${encodeURIComponent(id)}/configs/${rank}/launch?${q}`);
  },
};
