// The status card of the search on screen, and the list of recent searches.

import * as fmt from './format.js';

const $ = (id) => document.getElementById(id);

export const ACTIVE = new Set(['queued', 'running']);

/** The status card for a search (`on`), or for an error that is not one (progress and link hidden). */
function statusMode(on) {
  $('progress-row').hidden = !on;
  $('copy-link').hidden = !on;
  $('status-stats').hidden = !on;
}

export function renderPending(id) {
  statusMode(true);
  $('status-title').textContent = `Search ${id.slice(0, 8)}`;
  $('status-sub').textContent = 'Loading…';
  $('status-badge').textContent = '';
  $('status-badge').className = 'badge';
  $('progress').value = 0;
  $('progress-text').textContent = '';
  $('status-stats').replaceChildren();
  $('status-notes').replaceChildren();
}

/** The MoE token exchange and the CUDA graph a search asked for, when they are not Megatron's defaults:
 * " · flex-hybridep + EP overlap + full-iteration CUDA graph". */
function exchange(req) {
  const parts = [];
  if (req.moe_dispatcher && req.moe_dispatcher !== 'alltoall') parts.push(req.moe_dispatcher);
  if (req.moe_a2a_overlap) parts.push('EP overlap');
  if (req.cuda_graphs && req.cuda_graphs !== 'none') parts.push(`${req.cuda_graphs} CUDA graph`);
  return parts.length ? ` · ${parts.join(' + ')}` : '';
}

export function renderStatus(search) {
  statusMode(true);
  const req = search.request;
  const what = `${search.model} on ${search.nodes} × ${search.cluster}`;
  document.title = `${what} — autopar explorer`;
  $('status-title').textContent = what;
  const created = new Date(search.timings.created_at);
  $('status-sub').textContent = `Search ${search.id} · batch ${fmt.count(req.training.global_batch)} `
    + `${req.training.precision}${req.training.grad_reduce_in_bf16 ? ' (gradients reduced in bf16)' : ''} `
    + `· ${req.framework}${exchange(req)} · ${req.objective} · created ${created.toLocaleString()}`;
  const badge = $('status-badge');
  badge.textContent = search.status;
  badge.className = `badge badge-${search.status}`;
  $('progress').value = search.progress;
  $('progress').setAttribute('aria-valuetext', `${Math.round(100 * search.progress)}% (${search.status})`);
  $('progress-text').textContent = `${Math.round(100 * search.progress)}%`;
  $('cancel-search').hidden = !ACTIVE.has(search.status);
  const texts = {
    queued: 'Queued: waiting for a worker.',
    running: `Running: ${Math.round(100 * search.progress)}% searched.`,
    done: 'Done: loading the ranked configurations…',
    failed: `Failed: ${search.error ?? 'no reason given'}.`,
    cancelled: 'Cancelled.',
  };
  $('status-text').textContent = texts[search.status] ?? search.status;

  const c = search.counts;
  const t = search.timings;
  const stats = [
    ['Valid', fmt.count(c.n_valid)], ['Feasible', fmt.count(c.n_feasible)], ['Evaluated', fmt.count(c.n_evaluated)],
    ['Ranking', c.exhaustive === null ? '–' : c.exhaustive ? 'exact' : 'sampled'],
    ['Search time', fmt.seconds(t.search_s)], ['Queued', fmt.seconds(t.queued_s)],
  ];
  $('status-stats').replaceChildren(...stats.map(([k, v]) => {
    const div = document.createElement('div');
    const dt = document.createElement('dt');
    const dd = document.createElement('dd');
    dt.textContent = k;
    dd.textContent = v;
    div.append(dt, dd);
    return div;
  }));
  const notes = [...search.hints, ...search.notes];
  $('status-notes').replaceChildren(...notes.map((n) => {
    const li = document.createElement('li');
    li.textContent = n;
    return li;
  }));
}

export function showStatusError(title, err) {
  $('empty-state').hidden = true;
  $('status-card').hidden = false;
  $('status-title').textContent = title;
  $('status-sub').textContent = '';
  $('status-badge').textContent = err.status ? String(err.status) : 'error';
  $('status-badge').className = 'badge badge-failed';
  $('cancel-search').hidden = true;
  statusMode(false);
  $('status-notes').replaceChildren();
  let text = err.lines ? err.lines().join(' ') : String(err);
  if (err.status === 401 || err.status === 403) {
    text = `${err.detail[0]?.msg ?? text}. This server needs a token to read: create one with `
      + '`autopar token create --scope read` (or --scope write) and paste it into API token.';
  }
  $('status-text').textContent = text;
}

// --- recent searches --------------------------------------------------------------------------

const relative = new Intl.RelativeTimeFormat('en', { numeric: 'auto' });

function ago(iso) {
  const s = (new Date(iso).getTime() - Date.now()) / 1000;
  for (const [unit, size] of [['day', 86400], ['hour', 3600], ['minute', 60]]) {
    if (Math.abs(s) >= size) return relative.format(Math.round(s / size), unit);
  }
  return 'just now';
}

/** The newest searches as links to their pages; `currentId`'s is marked current. */
export function renderRecent(page, currentId) {
  const items = page.data.map((s) => {
    const li = document.createElement('li');
    const a = document.createElement('a');
    a.href = `/searches/${s.id}`;
    a.dataset.id = s.id;
    const name = document.createElement('span');
    name.className = 'recent-name';
    name.textContent = `${s.model} · ${s.nodes} × ${s.cluster}`;
    const meta = document.createElement('span');
    meta.className = 'recent-meta';
    const dot = document.createElement('span');
    dot.className = `dot dot-${s.status}`;
    dot.setAttribute('aria-hidden', 'true');
    meta.append(dot, `${s.status} · batch ${fmt.count(s.request.training.global_batch)} · ${ago(s.timings.created_at)}`);
    a.append(name, meta);
    li.append(a);
    return li;
  });
  if (!items.length) {
    const li = document.createElement('li');
    li.className = 'hint';
    li.textContent = 'None yet.';
    items.push(li);
  }
  $('recent-list').replaceChildren(...items);
  markRecent(currentId);
}

export function markRecent(currentId) {
  for (const a of $('recent-list').querySelectorAll('a[data-id]')) {
    if (a.dataset.id === currentId) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}
