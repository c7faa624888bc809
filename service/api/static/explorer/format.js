// Numbers, units and labels as the explorer shows them. Pure functions, no DOM.

export const GiB = 1024 ** 3;

const int = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

export function tokens(perS) {
  return Number.isFinite(perS) ? int.format(perS) : '–';
}

export function percent(ratio, digits = 1) {
  return Number.isFinite(ratio) ? `${(100 * ratio).toFixed(digits)}%` : '–';
}

export function seconds(s) {
  if (!Number.isFinite(s)) return '–';
  if (s === 0) return '0 s';
  if (Math.abs(s) < 1e-3) return `${(s * 1e6).toFixed(0)} µs`;
  if (Math.abs(s) < 1) return `${(s * 1e3).toFixed(1)} ms`;
  if (Math.abs(s) < 100) return `${s.toFixed(2)} s`;
  return `${int.format(s)} s`;
}

export function gib(bytes, digits = 1) {
  return Number.isFinite(bytes) ? `${(bytes / GiB).toFixed(digits)} GiB` : '–';
}

export function dollars(perMTokens) {
  return Number.isFinite(perMTokens) ? `$${perMTokens.toFixed(perMTokens < 1 ? 4 : 2)}` : '–';
}

export function count(n) {
  return Number.isFinite(n) ? int.format(n) : '–';
}

export function params(n) {
  if (!Number.isFinite(n)) return '';
  if (n >= 1e12) return `${(n / 1e12).toFixed(2)}T`;
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)}B`;
  return `${(n / 1e6).toFixed(0)}M`;
}

/** Signed relative change of b against a, e.g. "+3.2%"; '' when a is 0 or either is missing. */
export function delta(a, b) {
  if (!Number.isFinite(a) || !Number.isFinite(b) || a === 0 || a === b) return '';
  const d = (b - a) / Math.abs(a);
  return `${d > 0 ? '+' : '−'}${Math.abs(100 * d).toFixed(1)}%`;
}

const TIME_LABELS = {
  compute: 'Compute',
  host_overhead: 'Host overhead',
  recompute: 'Recompute',
  tp_comm: 'TP comm',
  cp_comm: 'CP comm',
  ep_comm: 'EP all-to-all',
  zero3_comm: 'ZeRO-3 gather/scatter',
  offload_transfer: 'Offload transfer',
  pipeline_bubble: 'Pipeline bubble',
  pp_p2p: 'PP p2p',
  dp_comm: 'DP / ZeRO comm',
  optimizer: 'Optimizer step',
  offload_step: 'Offloaded optimizer step',
};

const MEMORY_LABELS = {
  weights: 'Weights',
  gradients: 'Gradients',
  optimizer_states: 'Optimizer states',
  gathered_params: 'Gathered params (ZeRO-3)',
  activations: 'Activations',
  comm_buffers: 'Comm buffers',
  runtime_overhead: 'Runtime overhead',
};

function humanize(key) {
  const text = String(key).replace(/_/g, ' ');
  return text.charAt(0).toUpperCase() + text.slice(1);
}

export function timeLabel(key) {
  return TIME_LABELS[key] ?? humanize(key);
}

export function memoryLabel(key) {
  return MEMORY_LABELS[key] ?? humanize(key);
}

// One colour per term, stable across charts: compute blues, communication warm, memory states
// distinct. Keys the API adds later take the fallback colours in order.
const TIME_COLORS = {
  compute: '#2f6fde', host_overhead: '#94a3b8', recompute: '#7fb0f5', tp_comm: '#f08c2e',
  cp_comm: '#f5c04a', ep_comm: '#c2410c', zero3_comm: '#9a6bd6', offload_transfer: '#a9744f', pipeline_bubble: '#d9534f',
  pp_p2p: '#e98bb8', dp_comm: '#2fa37a', optimizer: '#1fb5c4', offload_step: '#8c9a3c',
};
const MEMORY_COLORS = {
  weights: '#2f6fde', gradients: '#7fb0f5', optimizer_states: '#9a6bd6', gathered_params: '#e98bb8',
  activations: '#f08c2e', comm_buffers: '#2fa37a', runtime_overhead: '#94a3b8',
};
const FALLBACK = ['#5b8c85', '#c06c84', '#6c5b7b', '#f8b195', '#355c7d', '#99b898'];

function colorFrom(table, key, keys) {
  if (table[key]) return table[key];
  const unknown = keys.filter((k) => !table[k]);
  return FALLBACK[Math.max(0, unknown.indexOf(key)) % FALLBACK.length];
}

export function timeColor(key, keys = []) {
  return colorFrom(TIME_COLORS, key, keys);
}

export function memoryColor(key, keys = []) {
  return colorFrom(MEMORY_COLORS, key, keys);
}

/** A configuration in one line: "megatron dp8 tp2 pp4 vp2 cp2 ep8 sp mb2 ZeRO-1 selective recompute". */
export function layout(c) {
  const cfg = c.config;
  const parts = [c.framework, `dp${cfg.dp}`, `tp${cfg.tp}`, `pp${cfg.pp}`];
  if (cfg.vp > 1) parts.push(`vp${cfg.vp}`);
  if (cfg.stage_layers) parts.push(`layers ${cfg.stage_layers.join('/')}`);
  if (cfg.cp > 1) parts.push(`cp${cfg.cp}`);
  if (cfg.ep > 1) parts.push(`ep${cfg.ep}`);
  if (cfg.etp > 1) parts.push(`etp${cfg.etp}`);
  if (cfg.moe_dispatcher && cfg.moe_dispatcher !== 'alltoall') parts.push(cfg.moe_dispatcher);
  if (cfg.moe_a2a_overlap) parts.push('ep-overlap');
  if (cfg.cuda_graphs && cfg.cuda_graphs !== 'none') parts.push('cuda-graph');
  if (cfg.sp) parts.push('sp');
  if (cfg.tp_comm_overlap) parts.push('tp-overlap');
  parts.push(`mb${cfg.micro_batch}`);
  if (cfg.zero_stage) parts.push(`ZeRO-${cfg.zero_stage}`);
  const off = offload(cfg);
  if (off !== 'none') parts.push(`offload ${off}`);
  if (cfg.recompute !== 'none') parts.push(recompute(cfg));
  if (cfg.activation_offload_layers) parts.push(`activations of ${cfg.activation_offload_layers} layers on CPU`);
  if ((cfg.tiles ?? 1) > 1) parts.push(`${cfg.tiles} tiles`);
  return parts.join(' ');
}

/** Recomputation with its extent: "selective recompute", "full recompute", "full recompute (4 layers/stage)". */
export function recompute(cfg) {
  if (cfg.recompute === 'none') return 'none';
  const layers = cfg.recompute_layers == null ? '' : ` (${cfg.recompute_layers} layers/stage)`;
  return `${cfg.recompute} recompute${layers}`;
}

/** Offload of optimizer / parameters: "none", "opt:cpu", "opt:nvme param:nvme". */
export function offload(cfg) {
  const parts = [];
  if (cfg.offload_optimizer !== 'none') {
    const share = (cfg.optimizer_offload_fraction ?? 1) < 1 ? ` ${Math.round(cfg.optimizer_offload_fraction * 100)}%` : '';
    parts.push(`opt:${cfg.offload_optimizer}${share}`);
  }
  if (cfg.activation_offload_layers) parts.push(`act:${cfg.activation_offload_layers} layers`);
  if (cfg.offload_param !== 'none') parts.push(`param:${cfg.offload_param}`);
  return parts.length ? parts.join(' ') : 'none';
}

/** Nice round axis ticks covering [lo, hi] (about `n` of them). */
export function ticks(lo, hi, n = 5) {
  if (!(hi > lo)) return { lo, hi: lo + 1, step: 1, values: [lo] };
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const start = Math.floor(lo / step) * step;
  const end = Math.ceil(hi / step) * step;
  const values = [];
  for (let v = start; v <= end + step / 2; v += step) values.push(Number(v.toPrecision(12)));
  return { lo: start, hi: end, step, values };
}

/** An axis label: 172.5k, 1.25M, 800; as many decimals as the tick step needs. */
export function compactNumber(v, step = 0) {
  const a = Math.max(Math.abs(v), Math.abs(step));
  const [div, suffix] = a >= 1e6 ? [1e6, 'M'] : a >= 1e4 ? [1e3, 'k'] : [1, ''];
  const s = step / div;
  let decimals = 0;
  while (decimals < 3 && Math.abs(s * 10 ** decimals - Math.round(s * 10 ** decimals)) > 1e-9) decimals += 1;
  return `${(v / div).toFixed(decimals)}${suffix}`;
}
