// The explorer page: start a search, follow it, and browse its ranked configurations.
// Every search has its own URL, /searches/{id}; opening one loads it from the API.

import { ApiError, api, saveToken, savedToken } from './api.js';
import { scatter } from './charts.js';
import { renderCompare, renderDetail } from './details.js';
import { SearchForm } from './form.js';
import * as fmt from './format.js';
import { LaunchPanel } from './launch.js';
import {
  ACTIVE, markRecent, renderPending, renderRecent, renderStatus, showStatusError,
} from './status.js';
import { RankedTable } from './table.js';
import { WhatIfPanel } from './whatif.js';

const $ = (id) => document.getElementById(id);
const SEARCH_PATH = /^\/searches\/([A-Za-z0-9_-]{1,32})\/?$/;

const state = {
  id: null,
  configs: [],
  objective: 'throughput',
  selected: null,
  a: null,
  b: null,
  poll: null,
  abort: null,
};

const form = new SearchForm($('search-form'), startSearch);
const table = new RankedTable($('configs-table'), { onSelect: (rank) => select(rank, { fromTable: true }) });
const launch = new LaunchPanel({
  form: $('launch-form'), target: $('launch-target'), hosts: $('launch-hosts'), body: $('launch-body'),
  sub: $('launch-sub'), announce,
});
const whatif = new WhatIfPanel({
  form: $('whatif-form'), cluster: $('whatif-cluster'), ratio: $('whatif-ratio'), body: $('whatif-body'),
  token: () => $('token').value.trim(), announce,
});

function announce(text) {
  const box = $('announcer');
  box.textContent = '';
  // A fresh text node after a tick, so screen readers announce a repeated message too.
  setTimeout(() => {
    box.textContent = text;
  }, 30);
}

// --- start-up ---------------------------------------------------------------------------------

async function init() {
  const token = $('token');
  token.value = savedToken();
  token.addEventListener('input', () => saveToken(token.value.trim()));
  $('token-forget').addEventListener('click', () => {
    token.value = '';
    saveToken('');
    announce('Token forgotten.');
    token.focus();
  });
  $('copy-link').addEventListener('click', copyLink);
  $('cancel-search').addEventListener('click', cancelSearch);
  $('compare-a').addEventListener('change', () => setCompare(Number($('compare-a').value), state.b));
  $('compare-b').addEventListener('change', () => setCompare(state.a, Number($('compare-b').value)));
  $('recent-list').addEventListener('click', (event) => {
    const link = event.target.closest('a[data-id]');
    if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    navigate(link.dataset.id);
  });
  window.addEventListener('popstate', route);

  // Where reads need a token too (AUTOPAR_OPEN_READS=0), pasting one loads what could not be read.
  token.addEventListener('change', async () => {
    if (form.models.length) return;
    if (await loadPresets()) await route();
  });

  if (await loadPresets()) await route();
}

/** Presets, profiles and recent searches; false when the presets could not be read. */
async function loadPresets() {
  try {
    const [models, clusters] = await Promise.all([api.modelPresets(), api.clusterPresets()]);
    form.setPresets(models.data, clusters.data);
    whatif.setPresets(clusters.data);
  } catch (err) {
    showStatusError('Could not load the presets', err);
    return false;
  }
  api.profiles().then((page) => form.setProfiles(page.data)).catch(() => {});
  refreshRecent();
  return true;
}

/** Show what the URL names: a search, or the empty page. */
async function route() {
  const match = SEARCH_PATH.exec(location.pathname);
  if (match) await openSearch(match[1]);
  else reset();
}

function navigate(id) {
  const path = `/searches/${id}`;
  if (location.pathname !== path) history.pushState({ id }, '', path);
  openSearch(id);
}

function reset() {
  stopPolling();
  Object.assign(state, { id: null, configs: [], selected: null, a: null, b: null });
  $('status-card').hidden = true;
  $('result-view').hidden = true;
  $('empty-state').hidden = false;
  launch.clear();
  document.title = 'autopar explorer';
  markRecent(state.id);
}

// --- a search ---------------------------------------------------------------------------------

async function startSearch(body) {
  form.clearErrors();
  form.setBusy(true);
  try {
    const token = $('token').value.trim();
    const search = await api.start(body, token);
    const path = `/searches/${search.id}`;
    if (location.pathname !== path) history.pushState({ id: search.id }, '', path);
    announce(`Search ${search.id.slice(0, 8)} ${search.status}.`);
    await openSearch(search.id, search);
    refreshRecent();
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    const items = err.detail.length ? err.detail : [{ field: 'request', msg: err.message, fix: '' }];
    if (err.status === 401 || err.status === 403) {
      const fix = `create a token with \`autopar token create --scope write\` and paste it into API token`;
      form.showErrors(items.map((d) => ({ ...d, field: 'Authorization', fix: d.fix || fix })), err.status);
      announce(`Not allowed (${err.status}): ${items[0].msg}`);
    } else {
      form.showErrors(items, err.status);
      announce(`The search was refused: ${items.map((d) => d.msg).join('; ')}`);
    }
  } finally {
    form.setBusy(false);
  }
}

async function openSearch(id, known) {
  stopPolling();
  if (state.id !== id) {
    Object.assign(state, { id, configs: [], selected: null, a: null, b: null });
    $('result-view').hidden = true;
    launch.clear();
  }
  $('empty-state').hidden = true;
  $('status-card').hidden = false;
  markRecent(state.id);
  let search = known;
  if (!search) {
    renderPending(id);
    try {
      search = await api.search(id);
    } catch (err) {
      if (state.id === id) showStatusError(err.status === 404 ? `No search ${id}` : 'Could not load the search', err);
      return;
    }
  }
  if (state.id !== id) return;
  form.fill(search.request);
  renderStatus(search);
  if (search.status === 'done') await loadConfigs(search);
  else if (ACTIVE.has(search.status)) poll(id, 200);
}

function poll(id, delayMs) {
  state.abort = new AbortController();
  const { signal } = state.abort;
  state.poll = setTimeout(async () => {
    try {
      const search = await api.search(id, signal);
      if (state.id !== id) return;
      renderStatus(search);
      if (search.status === 'done') {
        refreshRecent();
        await loadConfigs(search);
      } else if (ACTIVE.has(search.status)) poll(id, Math.min(delayMs * 1.5, 1500));
      else refreshRecent();
    } catch (err) {
      if (err.name === 'AbortError' || state.id !== id) return;
      $('status-text').textContent = `Lost contact with the service (${err.message}); retrying…`;
      poll(id, 3000);
    }
  }, delayMs);
}

function stopPolling() {
  clearTimeout(state.poll);
  state.abort?.abort();
  state.poll = null;
  state.abort = null;
}

async function loadConfigs(search) {
  let answer;
  try {
    answer = await api.configs(search.id);
  } catch (err) {
    showStatusError('Could not load the ranked configurations', err);
    return;
  }
  if (state.id !== search.id) return;
  state.configs = answer.configs;
  state.objective = answer.objective;
  const n = answer.configs.length;
  $('status-text').textContent = n
    ? `Done: ${n} configuration${n === 1 ? '' : 's'} ranked by ${answer.objective}`
      + `${search.counts.n_valid ? ` out of ${fmt.count(search.counts.n_valid)} valid` : ''}.`
    : `Done: no configuration fits in memory.${search.hints.length ? ' Below: why the closest fail.' : ''}`;
  if (!n) {
    $('result-view').hidden = true;
    return;
  }
  $('result-view').hidden = false;
  const exact = answer.exhaustive ? 'exact ranking (exhaustive sweep)' : 'sampled ranking';
  $('table-sub').textContent = `${n} best by ${answer.objective}; ${exact}. Select a row for its breakdown and launch files.`;
  table.setConfigs(answer.configs, answer.objective);
  whatif.show(search);
  fillCompare();
  const first = answer.configs[0].rank;
  const second = answer.configs[1]?.rank ?? first;
  state.a = first;
  state.b = second;
  $('compare-a').value = String(first);
  $('compare-b').value = String(second);
  select(first);
  renderCompare($('compare-body'), byRank(state.a), byRank(state.b));
}

function byRank(rank) {
  return state.configs.find((c) => c.rank === rank);
}

function select(rank, { fromTable = false } = {}) {
  const c = byRank(rank);
  if (!c) return;
  state.selected = rank;
  if (!fromTable) table.select(rank, { focus: false, quiet: true });
  $('detail-title').textContent = `Selected: #${rank}`;
  $('detail-sub').textContent = fmt.layout(c);
  renderDetail($('detail-body'), c, { objective: state.objective });
  drawScatter();
  launch.show(state.id, c);
  if (fromTable) announce(`Selected configuration ${rank}: ${fmt.layout(c)}.`);
}

function drawScatter() {
  const hbm = state.configs[0]?.prediction.gpu_memory_bytes;
  const marks = {};
  if (state.a) marks[state.a] = 'A';
  if (state.b) marks[state.b] = state.a === state.b ? 'A=B' : 'B';
  scatter($('scatter'), state.configs, {
    selected: state.selected, marks, hbmBytes: hbm,
    onPick: (rank) => {
      select(rank);
      $('scatter').querySelector(`.point[data-rank="${rank}"]`)?.focus();
      announce(`Selected configuration ${rank}.`);
    },
  });
}

function fillCompare() {
  for (const id of ['compare-a', 'compare-b']) {
    $(id).replaceChildren(...state.configs.map((c) => new Option(`#${c.rank} ${fmt.layout(c)}`, String(c.rank))));
  }
}

function setCompare(a, b) {
  state.a = a;
  state.b = b;
  renderCompare($('compare-body'), byRank(a), byRank(b));
  drawScatter();
}

// --- status actions ---------------------------------------------------------------------------

async function cancelSearch() {
  if (!state.id) return;
  try {
    const search = await api.cancel(state.id, $('token').value.trim());
    stopPolling();
    renderStatus(search);
    announce('Search cancelled.');
    refreshRecent();
  } catch (err) {
    announce(`Could not cancel: ${err.lines ? err.lines().join(' ') : err}`);
    $('status-text').textContent = `Could not cancel: ${err.lines ? err.lines().join(' ') : err}`;
  }
}

async function copyLink() {
  try {
    await navigator.clipboard.writeText(location.href);
    announce('Link to this search copied.');
    $('copy-link').textContent = 'Link copied';
  } catch {
    announce(`Copy this link: ${location.href}`);
  }
  setTimeout(() => {
    $('copy-link').textContent = 'Copy link';
  }, 2000);
}

async function refreshRecent() {
  try {
    renderRecent(await api.searches(8), state.id);
  } catch {
    renderRecent({ data: [] }, state.id);
  }
}

init();
