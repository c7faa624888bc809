// The selected configuration's predictions and breakdowns, and two configurations side by side.

import { breakdowns } from './charts.js';
import * as fmt from './format.js';

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Key figures of a prediction: [label, text, value, better ('high'|'low'|null)]. */
function figures(c) {
  const p = c.prediction;
  return [
    ['Tokens/s', fmt.tokens(p.tokens_per_s), p.tokens_per_s, 'high'],
    ['MFU', fmt.percent(p.mfu), p.mfu, 'high'],
    ['Model TFLOP/s per GPU', p.model_tflop_per_s_per_gpu.toFixed(1), p.model_tflop_per_s_per_gpu, 'high'],
    ['Iteration time', fmt.seconds(p.iteration_time_s), p.iteration_time_s, 'low'],
    ['Micro-batches per step', fmt.count(p.num_micro_batches), p.num_micro_batches, null],
    ['Peak memory per GPU', fmt.gib(p.peak_memory_bytes_per_gpu), p.peak_memory_bytes_per_gpu, 'low'],
    ['Headroom', fmt.gib(p.memory_headroom_bytes), p.memory_headroom_bytes, 'high'],
    ['CPU memory per node', fmt.gib(p.cpu_memory_bytes_per_node), p.cpu_memory_bytes_per_node, 'low'],
    ['Bottleneck', fmt.timeLabel(p.bottleneck), null, null],
  ];
}

function fields(c) {
  const cfg = c.config;
  return [
    ['Framework', c.framework],
    ['DP', cfg.dp], ['TP', cfg.tp], ['PP', cfg.pp], ['VP', cfg.vp], ['CP', cfg.cp],
    ['EP', cfg.ep ?? 1], ['ETP', cfg.etp ?? 1],
    ['MoE dispatcher', cfg.moe_dispatcher ?? 'alltoall'],
    ['Expert all-to-all overlap', cfg.moe_a2a_overlap ? 'on' : 'off'],
    ['CUDA graph', cfg.cuda_graphs ?? 'none'],
    ['Sequence parallel', cfg.sp ? 'on' : 'off'],
    ['TP comm overlap', cfg.tp_comm_overlap ? 'on' : 'off'],
    ['Micro-batch', cfg.micro_batch],
    ['ZeRO stage', cfg.zero_stage],
    ['Offload optimizer', cfg.offload_optimizer === 'none' || (cfg.optimizer_offload_fraction ?? 1) >= 1
      ? cfg.offload_optimizer : `${cfg.offload_optimizer} (${Math.round(cfg.optimizer_offload_fraction * 100)} % of the states)`],
    ['Offload parameters', cfg.offload_param],
    ['Recompute', fmt.recompute(cfg)],
    ['Activations offloaded', cfg.activation_offload_layers ? `${cfg.activation_offload_layers} layers` : 'none'],
    ['Memory-centric tiling', (cfg.tiles ?? 1) > 1 ? `${cfg.tiles} tiles (TiledLinear in the model code)` : 'off'],
    ['Placement (innermost first)', cfg.placement ?? 'tp-cp-ep-dp-pp'],
    ['Pipeline stages', stages(c)],
  ];
}

/** Layers per pipeline rank with each rank's time per micro-batch; the slowest (the pace) marked. */
function stages(c) {
  const p = c.prediction;
  const layers = p.stage_layers ?? [];
  if (layers.length <= 1) return 'one stage';
  const times = p.stage_times_s ?? [];
  const slowest = times.indexOf(Math.max(...times));
  return layers.map((n, i) => `${n}${i === slowest ? '*' : ''} (${(times[i] * 1000).toFixed(0)} ms)`).join(' | ')
    + ' (layers per rank; * the slowest, which paces the pipeline)';
}

/** The detail card: one line of layout, the key figures, then the two bars. */
export function renderDetail(body, c, { objective }) {
  const p = c.prediction;
  const kpis = el('dl', 'kpis');
  const shown = [
    ['Tokens/s', fmt.tokens(p.tokens_per_s)], ['MFU', fmt.percent(p.mfu)],
    ['Iteration', fmt.seconds(p.iteration_time_s)], ['Mem/GPU', fmt.gib(p.peak_memory_bytes_per_gpu)],
  ];
  if (objective === 'cost') shown.push(['$/M tokens', fmt.dollars(c.score)]);
  for (const [k, v] of shown) {
    const div = el('div', 'kpi');
    div.append(el('dt', null, k), el('dd', null, v));
    kpis.append(div);
  }
  const band = p.error_band ? ` (±${Math.round(p.error_band * 100)} %, the model's measured error for this runtime and GPU)` : '';
  const nodes = [kpis, el('p', 'explanation', c.explanation + band)];
  if (c.note) nodes.push(el('p', 'note', c.note));
  nodes.push(breakdowns(c));
  const host = Object.entries(p.cpu_memory_breakdown_bytes ?? {}).filter(([, v]) => v > 0);
  if (host.length) {
    const margin = p.host_estimator_margin_bytes
      ? `; DeepSpeed's estimator would keep ${fmt.gib(p.host_estimator_margin_bytes)} more as a safety margin` : '';
    nodes.push(el('p', 'host-memory', `On the CPU, per node: ${host.map(([k, v]) => `${k.replaceAll('_', ' ')} `
      + fmt.gib(v)).join(', ')}${margin}.`));
  }
  const notes = [...(p.reasons ?? []), ...(p.warnings ?? [])];
  if (notes.length) {
    const ul = el('ul', 'notes');
    for (const n of notes) ul.append(el('li', null, n));
    nodes.push(ul);
  }
  body.replaceChildren(...nodes);
}

/** A and B side by side: fields and predictions (differences marked), then both breakdowns. */
export function renderCompare(body, a, b) {
  if (!a || !b) {
    body.replaceChildren(el('p', 'hint', 'Pick two configurations.'));
    return;
  }
  const table = el('table', 'compare-table');
  const cap = el('caption', 'visually-hidden', `Configuration #${a.rank} (A) and #${b.rank} (B)`);
  const head = el('tr');
  head.append(el('th', null, ''), headCell('A', a), headCell('B', b));
  head.firstChild.scope = 'col';
  table.append(cap, el('thead'), el('tbody'));
  table.tHead.append(head);
  const section = (text) => {
    const tr = el('tr', 'section');
    const th = el('th', null, text);
    th.colSpan = 3;
    th.scope = 'colgroup';
    tr.append(th);
    table.tBodies[0].append(tr);
  };
  const row = (label, ta, tb, differs, deltaText, better) => {
    const tr = el('tr', differs ? 'differs' : '');
    const th = el('th', null, label);
    th.scope = 'row';
    const cb = el('td', 'col-b', String(tb));
    if (deltaText) {
      const span = el('span', `delta ${better ?? ''}`, deltaText);
      cb.append(' ', span);
    }
    if (differs) {
      const flag = el('span', 'visually-hidden', ' (differs)');
      cb.append(flag);
    }
    tr.append(th, el('td', 'col-a', String(ta)), cb);
    table.tBodies[0].append(tr);
  };

  section('Configuration');
  const fa = fields(a);
  const fb = fields(b);
  fa.forEach(([label, va], i) => row(label, va, fb[i][1], va !== fb[i][1]));
  section('Prediction');
  const pa = figures(a);
  const pb = figures(b);
  pa.forEach(([label, ta, va, better], i) => {
    const [, tb, vb] = pb[i];
    const d = va === null ? '' : fmt.delta(va, vb);
    let verdict = null;
    if (d && better) verdict = (vb > va) === (better === 'high') ? 'better' : 'worse';
    row(label, ta, tb, ta !== tb, d, verdict);
  });

  const timeScale = Math.max(a.prediction.iteration_time_s, b.prediction.iteration_time_s);
  const memScale = 1.04 * Math.max(a.prediction.gpu_memory_bytes, a.prediction.peak_memory_bytes_per_gpu,
    b.prediction.peak_memory_bytes_per_gpu);
  const cols = el('div', 'compare-cols');
  for (const [letter, c] of [['A', a], ['B', b]]) {
    const col = el('div', 'compare-col');
    col.dataset.side = letter;
    col.append(el('h3', 'compare-col-title', `${letter} · #${c.rank} ${fmt.layout(c)}`),
      breakdowns(c, { timeScale, memScale }));
    cols.append(col);
  }
  body.replaceChildren(table, el('p', 'hint', 'Bars share one scale, so their lengths compare.'), cols);
}

function headCell(letter, c) {
  const th = el('th');
  th.scope = 'col';
  th.append(el('span', `ab ab-${letter.toLowerCase()}`, letter), ` #${c.rank}`);
  return th;
}
