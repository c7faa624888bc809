// The search form: presets in, a POST /v1/searches body out, and the API's 422 items shown next
// to the field they name.

import { GiB, count, params } from './format.js';

const $ = (id) => document.getElementById(id);

const SHAPE_FIELDS = {
  name: 'shape-name', layers: 'shape-layers', hidden: 'shape-hidden', heads: 'shape-heads',
  kv_heads: 'shape-kv-heads', ffn: 'shape-ffn', vocab: 'shape-vocab', seq_len: 'shape-seq-len',
  activation: 'shape-activation', norm: 'shape-norm', position_embedding: 'shape-position',
  attention: 'shape-attention', tied_embeddings: 'shape-tied', bias: 'shape-bias', dropout: 'shape-dropout',
  mtp_layers: 'shape-mtp',
};
// model.shape.moe (capacity_factor comes from the token-dropping choice) and model.shape.mla.
const MOE_FIELDS = {
  experts: 'moe-experts', topk: 'moe-topk', expert_ffn: 'moe-expert-ffn', first_dense_layers: 'moe-dense-layers',
  shared_experts: 'moe-shared', shared_expert_ffn: 'moe-shared-ffn', router_load: 'moe-router',
};
const MLA_FIELDS = {
  q_lora_rank: 'mla-q-rank', kv_lora_rank: 'mla-kv-rank', qk_head_dim: 'mla-qk-dim',
  qk_rope_head_dim: 'mla-rope-dim', v_head_dim: 'mla-v-dim',
};

export class SearchForm {
  constructor(form, onSubmit) {
    this.form = form;
    this.models = [];
    this.clusters = [];
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      onSubmit(this.body());
    });
    for (const radio of form.querySelectorAll('input[name="model-source"]')) {
      radio.addEventListener('change', () => this.showModelSource());
    }
    $('model-preset').addEventListener('change', () => this.describeModel());
    $('cluster-preset').addEventListener('change', () => this.describeCluster());
    $('cluster-nodes').addEventListener('input', () => this.describeCluster());
    $('objective').addEventListener('change', () => this.showPrice());
    for (const id of ['moe-on', 'mla-on', 'moe-dropping']) {
      $(id).addEventListener('change', () => this.showSections());
    }
    form.addEventListener('input', (event) => this.clearError(event.target));
    form.addEventListener('change', (event) => this.clearError(event.target));
  }

  setPresets(models, clusters) {
    this.models = models;
    this.clusters = clusters;
    fill($('model-preset'), models.map((m) => [m.name, `${m.name} (${paramsText(m)})`]));
    fill($('cluster-preset'), clusters.map((c) => [c.name, c.name]));
    if (models.some((m) => m.name === 'llama3-70b')) $('model-preset').value = 'llama3-70b';
    if (clusters.some((c) => c.name === 'dgx-h100')) $('cluster-preset').value = 'dgx-h100';
    this.describeModel();
    this.describeCluster();
  }

  setProfiles(profiles) {
    const select = $('cluster-profile');
    const current = select.value;
    fill(select, [['', 'None'], ...profiles.map((p) => [p.id, `${p.name} · ${p.gpu_name}`])]);
    select.value = current;
  }

  modelSource() {
    return this.form.querySelector('input[name="model-source"]:checked').value;
  }

  showModelSource() {
    const custom = this.modelSource() === 'shape';
    $('model-preset-group').hidden = custom;
    $('model-shape-group').hidden = !custom;
    if (custom && !$('shape-layers').value) this.fillShape(this.preset()?.shape);
  }

  preset() {
    return this.models.find((m) => m.name === $('model-preset').value);
  }

  cluster() {
    return this.clusters.find((c) => c.name === $('cluster-preset').value);
  }

  describeModel() {
    const m = this.preset();
    if (!m) return;
    const s = m.shape;
    const kv = s.kv_heads && s.kv_heads !== s.heads ? ` (${s.kv_heads} KV)` : '';
    const moe = s.moe ? ` · ${s.moe.experts} experts, ${s.moe.topk} per token` : '';
    const mla = s.mla ? ' · latent attention' : '';
    $('model-preset-hint').textContent =
      `${paramsText(m, ' params')} · ${s.layers} layers · hidden ${count(s.hidden)} · ${s.heads} heads${kv}${mla}`
      + `${moe} · seq ${count(s.seq_len)}${m.source ? ` — ${m.source}` : ''}`;
    if (this.modelSource() === 'preset') this.fillShape(s);
  }

  describeCluster() {
    const c = this.cluster();
    if (!c) return;
    const tflops = (c.gpu.bf16_flop_per_s ?? c.gpu.fp16_flop_per_s) / 1e12;
    $('cluster-preset-hint').textContent =
      `${c.node.gpus_per_node} × ${c.gpu.name} per node · ${(c.gpu.memory_bytes / GiB).toFixed(0)} GiB HBM · `
      + `${tflops.toFixed(0)} TFLOP/s · ${(c.node.intra_node_bytes_per_s / 1e9).toFixed(0)} GB/s intra-node, `
      + `${(c.node.inter_node_bytes_per_s / 1e9).toFixed(0)} GB/s inter-node`;
    const nodes = Number($('cluster-nodes').value);
    $('cluster-nodes-hint').textContent = nodes >= 1 ? `${count(nodes * c.node.gpus_per_node)} GPUs` : '';
  }

  showPrice() {
    $('price-group').hidden = $('objective').value !== 'cost';
  }

  fillShape(shape) {
    if (!shape) return;
    setInputs(SHAPE_FIELDS, shape);
    // Only a head width the shape does not imply (hidden / heads; with MLA its two parts): a stale one
    // would outlive a change of hidden or heads.
    const implied = shape.mla || !shape.head_dim || shape.head_dim * shape.heads === shape.hidden;
    $('shape-head-dim').value = implied ? '' : shape.head_dim;
    $('moe-on').checked = Boolean(shape.moe);
    if (shape.moe) {
      setInputs(MOE_FIELDS, shape.moe);
      const drops = shape.moe.capacity_factor !== null && shape.moe.capacity_factor !== undefined;
      $('moe-dropping').value = !drops ? 'dropless' : shape.moe.pad_to_capacity ? 'padded' : 'capacity';
      if (drops) $('moe-capacity').value = shape.moe.capacity_factor;
    }
    $('mla-on').checked = Boolean(shape.mla);
    if (shape.mla) setInputs(MLA_FIELDS, shape.mla);
    this.showSections();
  }

  /** The MoE and MLA fields show when their box is ticked (their section opens then). */
  showSections() {
    for (const part of ['moe', 'mla']) {
      const on = $(`${part}-on`).checked;
      $(`${part}-fields`).hidden = !on;
      if (on) $(`${part}-section`).open = true;
    }
    $('moe-capacity-group').hidden = $('moe-dropping').value === 'dropless';
  }

  /** The POST /v1/searches body the form describes. */
  body() {
    const model = this.modelSource() === 'preset'
      ? { preset: $('model-preset').value }
      : { shape: this.shape() };
    const cluster = { preset: $('cluster-preset').value, nodes: int($('cluster-nodes').value) };
    if ($('cluster-profile').value) cluster.profile_id = $('cluster-profile').value;
    const body = {
      model, cluster,
      training: { global_batch: int($('global-batch').value), precision: $('precision').value },
      framework: $('framework').value, objective: $('objective').value, top: int($('top').value),
    };
    if (body.objective === 'cost') body.price_per_gpu_hour = num($('price').value);
    const budget = {};
    if ($('n-trials').value) budget.n_trials = int($('n-trials').value);
    if ($('timeout').value) budget.timeout_s = num($('timeout').value);
    if ($('seed').value && int($('seed').value) !== 0) budget.seed = int($('seed').value);
    if (Object.keys(budget).length) body.budget = budget;
    if ($('calibration-id').value.trim()) body.calibration_id = $('calibration-id').value.trim();
    if ($('host-safety-factor').value && num($('host-safety-factor').value) !== 1) {
      body.host_safety_factor = num($('host-safety-factor').value);
    }
    if ($('allow-tiling').checked) body.allow_tiling = true;
    if ($('moe-dispatcher').value !== 'alltoall') body.moe_dispatcher = $('moe-dispatcher').value;
    if ($('moe-a2a-overlap').checked) body.moe_a2a_overlap = true;
    if ($('cuda-graphs').value !== 'none') body.cuda_graphs = $('cuda-graphs').value;
    if ($('grad-reduce-in-bf16').checked) body.training.grad_reduce_in_bf16 = true;
    return body;
  }

  shape() {
    const shape = readInputs(SHAPE_FIELDS);
    if (!shape.name) shape.name = 'custom';
    if ($('shape-head-dim').value !== '') shape.head_dim = int($('shape-head-dim').value);
    if ($('moe-on').checked) {
      shape.moe = readInputs(MOE_FIELDS);
      const dropping = $('moe-dropping').value;
      shape.moe.capacity_factor = dropping === 'dropless' ? null : num($('moe-capacity').value);
      shape.moe.pad_to_capacity = dropping === 'padded';
    }
    if ($('mla-on').checked) {
      shape.mla = readInputs(MLA_FIELDS);
      shape.mla.q_lora_rank ??= null; // empty: queries projected directly
    }
    return shape;
  }

  /** Show a stored search's request (SearchIn) in the form, so it can be changed and run again. */
  fill(request) {
    if (!request) return;
    const shape = request.model?.shape;
    $(shape ? 'model-source-shape' : 'model-source-preset').checked = true;
    if (shape) this.fillShape(shape);
    else if (request.model?.preset) setSelect($('model-preset'), request.model.preset);
    this.showModelSource();
    if (request.cluster?.preset) setSelect($('cluster-preset'), request.cluster.preset);
    $('cluster-nodes').value = request.cluster?.nodes ?? 1;
    setSelect($('cluster-profile'), request.cluster?.profile_id ?? '');
    $('global-batch').value = request.training?.global_batch ?? '';
    $('precision').value = request.training?.precision ?? 'bf16';
    $('grad-reduce-in-bf16').checked = Boolean(request.training?.grad_reduce_in_bf16);
    $('framework').value = request.framework ?? 'any';
    $('objective').value = request.objective ?? 'throughput';
    $('top').value = request.top ?? 10;
    if (request.price_per_gpu_hour) $('price').value = request.price_per_gpu_hour;
    $('n-trials').value = request.budget?.n_trials ?? '';
    $('timeout').value = request.budget?.timeout_s ?? '';
    $('seed').value = request.budget?.seed ?? 0;
    $('calibration-id').value = request.calibration_id ?? '';
    $('host-safety-factor').value = request.host_safety_factor ?? 1;
    $('allow-tiling').checked = Boolean(request.allow_tiling);
    setSelect($('moe-dispatcher'), request.moe_dispatcher ?? 'alltoall');
    $('moe-a2a-overlap').checked = Boolean(request.moe_a2a_overlap);
    setSelect($('cuda-graphs'), request.cuda_graphs ?? 'none');
    this.showPrice();
    this.describeModel();
    this.describeCluster();
  }

  setBusy(busy) {
    const button = $('start');
    button.disabled = busy;
    button.textContent = busy ? 'Starting…' : 'Start search';
  }

  // --- errors ---------------------------------------------------------------------------------

  clearErrors() {
    for (const el of this.form.querySelectorAll('.field-error')) el.remove();
    for (const el of this.form.querySelectorAll('[aria-invalid="true"]')) unmark(el);
    const box = $('form-errors');
    box.hidden = true;
    box.replaceChildren();
  }

  clearError(el) {
    if (!(el instanceof HTMLElement) || el.getAttribute('aria-invalid') !== 'true') return;
    unmark(el);
    document.getElementById(`${el.id}-error`)?.remove();
  }

  /** The API's error items next to the inputs they name; the rest in the box above the button. */
  showErrors(items, status) {
    this.clearErrors();
    const unplaced = [];
    let first = null;
    for (const item of items) {
      const input = this.inputFor(item.field);
      if (!input) {
        unplaced.push(item);
        continue;
      }
      const id = `${input.id}-error`;
      let p = document.getElementById(id);
      if (!p) {
        p = document.createElement('p');
        p.id = id;
        p.className = 'field-error';
        (input.closest('.field') ?? input.parentElement).append(p);
      }
      p.textContent = item.fix ? `${item.msg} — ${item.fix}` : item.msg;
      input.setAttribute('aria-invalid', 'true');
      const described = (input.getAttribute('aria-describedby') ?? '').split(' ').filter(Boolean);
      if (!described.includes(id)) input.setAttribute('aria-describedby', [id, ...described].join(' '));
      first ??= input;
    }
    if (unplaced.length) {
      const box = $('form-errors');
      const title = document.createElement('p');
      title.className = 'form-errors-title';
      title.textContent = status === 401 || status === 403 ? 'Not allowed' : 'The service refused the search';
      const list = document.createElement('ul');
      for (const item of unplaced) {
        const li = document.createElement('li');
        const field = document.createElement('code');
        field.textContent = item.field;
        li.append(field, `: ${item.msg}${item.fix ? ` — ${item.fix}` : ''}`);
        list.append(li);
      }
      box.replaceChildren(title, list);
      box.hidden = false;
    }
    if (first) {
      first.closest('details')?.setAttribute('open', '');
      first.focus();
    }
  }

  /** The visible input for a dotted API field, or for the nearest field above it ("model" -> preset). */
  inputFor(field) {
    if (!field) return null;
    const visible = (el) => el && !el.closest('[hidden]');
    const all = [...this.form.querySelectorAll('[data-field]')].filter(visible);
    for (let name = field; name; name = name.includes('.') ? name.slice(0, name.lastIndexOf('.')) : '') {
      const exact = all.find((el) => el.dataset.field === name);
      if (exact) return exact;
      const below = all.find((el) => el.dataset.field.startsWith(`${name}.`));
      if (below) return below;
    }
    return null;
  }
}

/** "46.7B", or "671.0B, 37.6B active" for a mixture of experts (`unit` after the total). */
function paramsText(m, unit = '') {
  const active = m.active_params ?? m.params;
  return `${params(m.params)}${unit}${active < m.params ? `, ${params(active)} active` : ''}`;
}

function setInputs(ids, values) {
  for (const [key, id] of Object.entries(ids)) {
    const el = $(id);
    const value = values[key];
    if (el.type === 'checkbox') el.checked = Boolean(value);
    else el.value = value ?? '';
  }
}

/** The inputs' values by key; an empty number input is left out (the API's default applies). */
function readInputs(ids) {
  const out = {};
  for (const [key, id] of Object.entries(ids)) {
    const el = $(id);
    if (el.type === 'checkbox') out[key] = el.checked;
    else if (el.type === 'number') {
      if (el.value !== '') out[key] = int(el.value);
    } else out[key] = el.value;
  }
  return out;
}

function fill(select, options) {
  select.replaceChildren(...options.map(([value, text]) => new Option(text, value)));
}

function setSelect(select, value) {
  if (![...select.options].some((o) => o.value === value)) select.append(new Option(value, value));
  select.value = value;
}

function unmark(el) {
  el.removeAttribute('aria-invalid');
  const rest = (el.getAttribute('aria-describedby') ?? '').split(' ').filter((id) => id && id !== `${el.id}-error`);
  if (rest.length) el.setAttribute('aria-describedby', rest.join(' '));
  else el.removeAttribute('aria-describedby');
}

function int(text) {
  const n = Number(text);
  return text === '' || !Number.isFinite(n) ? text : n;
}

function num(text) {
  return text === '' ? null : Number(text);
}
