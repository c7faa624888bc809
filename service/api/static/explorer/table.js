// The ranked table: sortable headers (buttons with aria-sort), rows focusable with a roving
// tabindex (↑/↓/Home/End move, Enter/Space select).

import * as fmt from './format.js';

const cfg = (key) => (c) => c.config[key];
const pred = (key) => (c) => c.prediction[key];

/** key, label (header), name (spoken, when the label abbreviates), title, value (sorts), text (shows), num. */
export const COLUMNS = [
  { key: 'rank', label: 'Rank', title: 'Rank by the search objective (1 = best)', value: (c) => c.rank, num: true },
  { key: 'framework', label: 'Framework', value: (c) => c.framework },
  { key: 'dp', label: 'DP', title: 'Data-parallel degree', value: cfg('dp'), num: true },
  { key: 'tp', label: 'TP', title: 'Tensor-parallel degree', value: cfg('tp'), num: true },
  { key: 'pp', label: 'PP', title: 'Pipeline-parallel degree', value: cfg('pp'), num: true },
  { key: 'vp', label: 'VP', title: 'Virtual pipeline stages per GPU', value: cfg('vp'), num: true },
  { key: 'cp', label: 'CP', title: 'Context-parallel degree', value: cfg('cp'), num: true },
  { key: 'ep', label: 'EP', name: 'Expert parallel', title: 'Expert-parallel degree (MoE; folded into DP × CP × TP)',
    value: (c) => c.config.ep ?? 1, num: true },
  { key: 'etp', label: 'ETP', name: 'Expert tensor parallel', title: 'Expert tensor-parallel degree (MoE)',
    value: (c) => c.config.etp ?? 1, num: true },
  { key: 'sp', label: 'SP', title: 'Sequence parallelism (+ovl: Megatron TP communication overlap)',
    value: (c) => (c.config.sp ? 1 : 0) + (c.config.tp_comm_overlap ? 1 : 0),
    text: (c) => (c.config.sp ? (c.config.tp_comm_overlap ? 'on+ovl' : 'on') : '–') },
  { key: 'micro_batch', label: 'MB', name: 'Micro-batch', title: 'Micro-batch size (sequences)', value: cfg('micro_batch'), num: true },
  { key: 'zero_stage', label: 'ZeRO', title: 'ZeRO stage', value: cfg('zero_stage'), num: true },
  { key: 'offload', label: 'Offload', title: 'Offload of optimizer states / parameters',
    value: (c) => fmt.offload(c.config), text: (c) => fmt.offload(c.config) },
  { key: 'recompute', label: 'Recomp.', name: 'Recompute', title: 'Activation recomputation (layers per stage when partial)',
    value: (c) => fmt.recompute(c.config),
    text: (c) => (c.config.recompute_layers == null ? c.config.recompute : `full ×${c.config.recompute_layers}`) },
  { key: 'tokens_per_s', label: 'Tokens/s', title: '≈: within the model\'s error band of the best (ranked simplest first)',
    value: pred('tokens_per_s'),
    text: (c) => (c.equivalent_to_best ? '≈ ' : '') + fmt.tokens(c.prediction.tokens_per_s), num: true },
  { key: 'mfu', label: 'MFU', title: 'Model FLOPs utilisation', value: pred('mfu'),
    text: (c) => fmt.percent(c.prediction.mfu), num: true },
  { key: 'iteration_time_s', label: 'Step', name: 'Iteration time', title: 'Predicted seconds per optimizer step',
    value: pred('iteration_time_s'), text: (c) => fmt.seconds(c.prediction.iteration_time_s), num: true },
  { key: 'peak_memory', label: 'Mem/GPU', name: 'Peak memory per GPU', title: 'Predicted peak memory per GPU',
    value: pred('peak_memory_bytes_per_gpu'), text: (c) => fmt.gib(c.prediction.peak_memory_bytes_per_gpu), num: true },
  { key: 'headroom', label: 'Headroom', title: 'HBM left at the peak', value: pred('memory_headroom_bytes'),
    text: (c) => fmt.gib(c.prediction.memory_headroom_bytes), num: true },
];

const COST = { key: 'score', label: '$/M tokens', title: 'Dollars per million tokens (the cost objective)',
  value: (c) => c.score, text: (c) => fmt.dollars(c.score), num: true };

export class RankedTable {
  constructor(table, { onSelect }) {
    this.table = table;
    this.onSelect = onSelect;
    this.configs = [];
    this.sort = { key: 'rank', dir: 'ascending' };
    this.selected = null;
    this.columns = COLUMNS;
    table.tBodies[0].addEventListener('keydown', (event) => this.keydown(event));
    table.tBodies[0].addEventListener('click', (event) => {
      const row = event.target.closest('tr[data-rank]');
      if (row) this.select(Number(row.dataset.rank), { focus: false });
    });
  }

  setConfigs(configs, objective) {
    this.configs = configs;
    const at = COLUMNS.findIndex((c) => c.key === 'tokens_per_s');
    this.columns = objective === 'cost' ? [...COLUMNS.slice(0, at), COST, ...COLUMNS.slice(at)] : COLUMNS;
    this.sort = { key: 'rank', dir: 'ascending' };
    this.renderHead();
    this.renderBody();
  }

  sorted() {
    const col = this.columns.find((c) => c.key === this.sort.key) ?? this.columns[0];
    const sign = this.sort.dir === 'ascending' ? 1 : -1;
    return [...this.configs].sort((a, b) => {
      const va = col.value(a);
      const vb = col.value(b);
      const cmp = typeof va === 'number' && typeof vb === 'number' ? va - vb : String(va).localeCompare(String(vb));
      return sign * cmp || a.rank - b.rank;
    });
  }

  renderHead() {
    const tr = document.createElement('tr');
    for (const col of this.columns) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.dataset.key = col.key;
      if (col.num) th.className = 'num';
      const active = this.sort.key === col.key;
      th.setAttribute('aria-sort', active ? this.sort.dir : 'none');
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'sort';
      if (col.title) button.title = col.title;
      if (col.name) button.setAttribute('aria-label', col.name);
      const arrow = document.createElement('span');
      arrow.className = 'sort-arrow';
      arrow.setAttribute('aria-hidden', 'true');
      arrow.textContent = this.sort.dir === 'ascending' ? '▲' : '▼';
      button.append(col.label, arrow);
      button.addEventListener('click', () => this.sortBy(col.key));
      th.append(button);
      tr.append(th);
    }
    this.table.tHead.replaceChildren(tr);
  }

  /** First activation sorts ascending, the next descending, and so on. */
  sortBy(key) {
    const dir = this.sort.key === key && this.sort.dir === 'ascending' ? 'descending' : 'ascending';
    this.sort = { key, dir };
    this.renderHead();
    this.renderBody();
    this.table.tHead.querySelector(`th[data-key="${key}"] button`)?.focus();
  }

  renderBody() {
    const rows = this.sorted().map((c) => {
      const tr = document.createElement('tr');
      tr.dataset.rank = c.rank;
      const selected = c.rank === this.selected;
      tr.setAttribute('aria-selected', selected ? 'true' : 'false');
      tr.tabIndex = selected || (this.selected === null && c.rank === 1) ? 0 : -1;
      if (!c.prediction.feasible) tr.classList.add('infeasible');
      for (const col of this.columns) {
        const td = document.createElement(col.key === 'rank' ? 'th' : 'td');
        if (col.key === 'rank') td.scope = 'row';
        if (col.num) td.className = 'num';
        td.dataset.key = col.key;
        td.textContent = col.text ? col.text(c) : String(col.value(c));
        if (col.key === 'framework') td.className = `fw fw-${c.framework}`;
        tr.append(td);
      }
      tr.title = c.explanation;
      return tr;
    });
    this.table.tBodies[0].replaceChildren(...rows);
    if (!this.table.tBodies[0].querySelector('tr[tabindex="0"]') && rows.length) rows[0].tabIndex = 0;
  }

  /** Mark `rank` selected (and tell the page, unless `quiet`). */
  select(rank, { focus = true, quiet = false } = {}) {
    this.selected = rank;
    for (const tr of this.table.tBodies[0].rows) {
      const on = Number(tr.dataset.rank) === rank;
      tr.setAttribute('aria-selected', on ? 'true' : 'false');
      tr.tabIndex = on ? 0 : -1;
      if (on && focus) tr.focus();
    }
    if (!quiet) this.onSelect(rank);
  }

  keydown(event) {
    const row = event.target.closest('tr[data-rank]');
    if (!row) return;
    const rows = [...this.table.tBodies[0].rows];
    const i = rows.indexOf(row);
    let next = null;
    if (event.key === 'ArrowDown') next = rows[Math.min(i + 1, rows.length - 1)];
    else if (event.key === 'ArrowUp') next = rows[Math.max(i - 1, 0)];
    else if (event.key === 'Home') next = rows[0];
    else if (event.key === 'End') next = rows[rows.length - 1];
    else if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      this.select(Number(row.dataset.rank), { focus: false });
      return;
    } else return;
    event.preventDefault();
    for (const tr of rows) tr.tabIndex = tr === next ? 0 : -1;
    next.focus();
  }
}
