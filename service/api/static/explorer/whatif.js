// What-if: the search on screen asked again on another cluster with as many GPUs (another node type,
// NVL72 racks, or the fabric's leaf uplinks oversubscribed), and both answers side by side
// (POST /v1/searches, then GET /v1/whatif).

import { ApiError, api } from './api.js';
import * as fmt from './format.js';

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** "leaf 32 nodes, spine 2:1 + SHARP", or "non-blocking". */
export function describeFabric(fabric) {
  const tiers = fabric?.tiers ?? [];
  if (tiers.length <= 1 && !tiers[0]?.nodes) return `non-blocking${fabric?.sharp ? ' + SHARP' : ''}`;
  const parts = tiers.map((t) => `${t.name}${t.nodes ? ` ${t.nodes} nodes` : ''}`
    + `${t.oversubscription !== 1 ? ` ${t.oversubscription}:1` : ''}`);
  return parts.join(', ') + (fabric.sharp ? ' + SHARP' : '');
}

/** The request of `search` asked on preset `cluster` with the same GPU count, its spine at `ratio`:1. */
export function versusRequest(request, gpus, cluster, ratio) {
  const perNode = cluster.node.gpus_per_node;
  if (gpus % perNode) throw new Error(`${cluster.name}'s ${perNode}-GPU nodes do not make ${gpus} GPUs`);
  const body = structuredClone(request);
  body.cluster = { preset: cluster.name, nodes: gpus / perNode };
  if (ratio > 1) {
    const tiers = cluster.fabric?.tiers ?? [];
    if (tiers.length < 2) throw new Error(`${cluster.name}'s fabric is one tier: no uplinks to oversubscribe`);
    body.cluster.fabric = {
      tiers: tiers.map((t, i) => ({ ...t, oversubscription: i === 1 ? ratio : t.oversubscription })),
      sharp: Boolean(cluster.fabric.sharp),
    };
  }
  return body;
}

export class WhatIfPanel {
  constructor({ form, cluster, ratio, body, token, announce }) {
    Object.assign(this, { form, cluster, ratio, body, token, announce });
    this.clusters = [];
    this.search = null;
    this.run = 0;
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.compare();
    });
  }

  setPresets(clusters) {
    this.clusters = clusters;
    this.cluster.replaceChildren(...clusters.map((c) => new Option(
      `${c.name} (${c.node.gpus_per_node} GPUs/node${c.node.nvlink_domain_gpus ? `, NVLink ${c.node.nvlink_domain_gpus}` : ''})`,
      c.name)));
    if (clusters.some((c) => c.name === 'gb200-nvl72')) this.cluster.value = 'gb200-nvl72';
  }

  /** The done search on screen (its id, request and GPU count). */
  show(search) {
    const req = search.request;
    const own = this.clusters.find((c) => c.name === req?.cluster?.preset);
    const perNode = own?.node.gpus_per_node ?? req?.cluster?.node?.gpus_per_node;
    this.search = perNode ? { id: search.id, request: req, gpus: perNode * (req.cluster.nodes ?? 1) } : null;
    this.run += 1;
    this.body.replaceChildren(el('p', 'card-sub', this.search
      ? `${fmt.count(this.search.gpus)} GPUs: pick a cluster to ask the same question on.`
      : 'This search has no cluster to compare with.'));
  }

  async compare() {
    if (!this.search) return;
    const run = ++this.run;
    const cluster = this.clusters.find((c) => c.name === this.cluster.value);
    const ratio = Number(this.ratio.value) || 1;
    let body;
    try {
      body = versusRequest(this.search.request, this.search.gpus, cluster, ratio);
    } catch (err) {
      this.body.replaceChildren(el('p', 'field-error', err.message));
      return;
    }
    this.body.replaceChildren(el('p', 'card-sub', `Searching on ${cluster.name}…`));
    try {
      const started = await api.start(body, this.token());
      let search = started;
      for (let i = 0; search.status !== 'done' && i < 600; i++) {
        if (['failed', 'cancelled'].includes(search.status)) throw new Error(`the search ${search.status}`);
        await new Promise((resolve) => { setTimeout(resolve, 500); });
        if (run !== this.run) return;
        search = await api.search(started.id);
      }
      const answer = await api.whatif([this.search.id, started.id]);
      if (run !== this.run) return;
      this.render(answer.data);
      this.announce(`What-if on ${cluster.name} done.`);
    } catch (err) {
      if (run !== this.run) return;
      const text = err instanceof ApiError ? err.lines().join(' ') : err.message;
      this.body.replaceChildren(el('p', 'field-error', `The what-if failed: ${text}`));
    }
  }

  render(rows) {
    const table = el('table', 'compare-table');
    const head = el('tr');
    head.append(el('th', null, ''), ...rows.map((r) => el('th', null, r.cluster)));
    table.append(el('thead'));
    table.tHead.append(head);
    const lines = [
      ['Nodes x GPUs', (r) => `${r.num_nodes} x ${r.world_size / r.num_nodes}`],
      ['NVLink domain', (r) => `${r.nvlink_domain_gpus} GPUs`],
      ['Fabric', (r) => describeFabric(r.fabric)],
      ['Best configuration', (r) => (r.best ? fmt.layout(r.best) : 'nothing fits')],
      ['Groups on', (r) => Object.entries(r.groups).map(([g, where]) => `${g} ${where}`).join(', ') || '-'],
      ['Tokens/s', (r) => (r.best ? fmt.tokens(r.best.tokens_per_s) : '-')],
      ['MFU', (r) => (r.best ? fmt.percent(r.best.mfu) : '-')],
      ['Iteration time', (r) => (r.best ? fmt.seconds(r.best.iteration_time_s) : '-')],
      ['Peak memory per GPU', (r) => (r.best ? fmt.gib(r.best.peak_memory_bytes_per_gpu) : '-')],
    ];
    const tbody = el('tbody');
    for (const [label, cell] of lines) {
      const tr = el('tr');
      const texts = rows.map(cell);
      if (new Set(texts).size > 1) tr.className = 'differs';
      tr.append(el('th', null, label), ...texts.map((t) => el('td', null, t)));
      tbody.append(tr);
    }
    table.append(tbody);
    this.body.replaceChildren(table);
  }
}
