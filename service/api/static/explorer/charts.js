// Charts drawn as SVG by hand: the throughput/memory scatter and the stacked breakdown bars.

import * as fmt from './format.js';

// The SVG namespace, taken from the HTML parser rather than spelled out (no URL in these files).
const SVG_NS = (() => {
  const probe = document.createElement('div');
  probe.innerHTML = '<svg></svg>';
  return probe.firstChild.namespaceURI;
})();

export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null && v !== false) el.setAttribute(k, String(v));
  }
  for (const child of children) {
    if (child !== null && child !== undefined) el.append(child);
  }
  return el;
}

function title(text) {
  return svg('title', {}, text);
}

/** The configurations no other beats on both axes (more tokens/s and less memory), by memory. */
export function paretoFront(configs) {
  const sorted = [...configs].sort((a, b) => mem(a) - mem(b) || tps(b) - tps(a));
  const front = [];
  let best = -Infinity;
  for (const c of sorted) {
    if (tps(c) > best) {
      front.push(c);
      best = tps(c);
    }
  }
  return front;
}

const tps = (c) => c.prediction.tokens_per_s;
const mem = (c) => c.prediction.peak_memory_bytes_per_gpu;

/**
 * Tokens/s against peak memory per GPU. Each point is focusable; Enter, Space or a click calls
 * onPick(rank). `marks` maps a rank to a letter drawn beside the point (A, B).
 */
export function scatter(container, configs, { selected, marks = {}, hbmBytes, onPick }) {
  const W = 560;
  const H = 340;
  const m = { top: 18, right: 24, bottom: 48, left: 68 };
  const iw = W - m.left - m.right;
  const ih = H - m.top - m.bottom;
  const memMax = Math.max(hbmBytes || 0, ...configs.map(mem)) / fmt.GiB;
  const x = fmt.ticks(0, memMax * 1.04, 6);
  const ys = configs.map(tps);
  let yLo = Math.min(...ys);
  let yHi = Math.max(...ys);
  const pad = Math.max((yHi - yLo) * 0.12, yHi * 0.005, 1);
  yLo = Math.max(0, yLo - pad);
  yHi += pad;
  const y = fmt.ticks(yLo, yHi, 5);
  const sx = (gib) => m.left + ((gib - x.lo) / (x.hi - x.lo)) * iw;
  const sy = (v) => m.top + ih - ((v - y.lo) / (y.hi - y.lo)) * ih;

  const root = svg('svg', {
    viewBox: `0 0 ${W} ${H}`, class: 'scatter', role: 'group',
    'aria-label': `Tokens per second against peak memory per GPU for ${configs.length} configurations`,
  });
  const grid = svg('g', { class: 'grid', 'aria-hidden': 'true' });
  for (const v of x.values) {
    grid.append(svg('line', { x1: sx(v), x2: sx(v), y1: m.top, y2: m.top + ih }));
    grid.append(svg('text', { x: sx(v), y: m.top + ih + 18, 'text-anchor': 'middle', class: 'tick' }, `${v}`));
  }
  for (const v of y.values) {
    grid.append(svg('line', { x1: m.left, x2: m.left + iw, y1: sy(v), y2: sy(v) }));
    grid.append(svg('text', { x: m.left - 8, y: sy(v) + 4, 'text-anchor': 'end', class: 'tick' },
      fmt.compactNumber(v, y.step)));
  }
  grid.append(svg('text', { x: m.left + iw / 2, y: H - 8, 'text-anchor': 'middle', class: 'axis-label' },
    'Peak memory per GPU (GiB)'));
  grid.append(svg('text', {
    x: 16, y: m.top + ih / 2, 'text-anchor': 'middle', class: 'axis-label',
    transform: `rotate(-90 16 ${m.top + ih / 2})`,
  }, 'Tokens / s'));
  root.append(grid);

  if (hbmBytes) {
    const hx = sx(hbmBytes / fmt.GiB);
    root.append(svg('g', { class: 'hbm', 'data-role': 'hbm-line' },
      title(`HBM capacity: ${fmt.gib(hbmBytes)} per GPU`),
      svg('rect', { x: hx, y: m.top, width: m.left + iw - hx, height: ih, class: 'hbm-zone' }),
      svg('line', { x1: hx, x2: hx, y1: m.top, y2: m.top + ih, class: 'hbm-line' }),
      svg('text', { x: hx - 6, y: m.top + 12, 'text-anchor': 'end', class: 'hbm-label' },
        `HBM ${fmt.gib(hbmBytes, 0)}`)));
  }

  const front = paretoFront(configs);
  if (front.length > 1) {
    let d = '';
    front.forEach((c, i) => {
      const px = sx(mem(c) / fmt.GiB);
      const py = sy(tps(c));
      d += i === 0 ? `M${px},${py}` : `H${px}V${py}`;
    });
    root.append(svg('path', { d, class: 'front', 'aria-hidden': 'true' }));
  }
  const onFront = new Set(front.map((c) => c.rank));

  const points = svg('g', { class: 'points' });
  // Draw the selected point last so it sits on top of any it overlaps.
  const order = [...configs].sort((a, b) => (a.rank === selected) - (b.rank === selected) || b.rank - a.rank);
  for (const c of order) {
    const label = `#${c.rank} ${fmt.layout(c)}: ${fmt.tokens(tps(c))} tokens/s, ${fmt.gib(mem(c))} per GPU`
      + (onFront.has(c.rank) ? ', on the front' : '');
    const g = svg('g', {
      class: `point${c.rank === selected ? ' selected' : ''}${onFront.has(c.rank) ? ' on-front' : ''}`,
      tabindex: 0, role: 'button', 'aria-label': label, 'aria-pressed': c.rank === selected ? 'true' : 'false',
      'data-rank': c.rank, transform: `translate(${sx(mem(c) / fmt.GiB)},${sy(tps(c))})`,
    }, title(label), svg('circle', { r: c.rank === selected ? 7 : 5.5 }));
    if (marks[c.rank]) {
      g.append(svg('text', { x: 9, y: -8, class: 'mark' }, marks[c.rank]));
    }
    g.addEventListener('click', () => onPick(c.rank));
    g.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        onPick(c.rank);
      }
    });
    points.append(g);
  }
  root.append(points);

  const legend = document.createElement('ul');
  legend.className = 'legend';
  legend.append(legendItem('swatch-point', 'configuration'), legendItem('swatch-selected', 'selected'),
    legendItem('swatch-front', 'Pareto front of these'),
    legendItem('swatch-hbm', 'HBM capacity'));
  container.replaceChildren(root, legend);
}

function legendItem(swatchClass, text) {
  const li = document.createElement('li');
  const s = document.createElement('span');
  s.className = `swatch ${swatchClass}`;
  s.setAttribute('aria-hidden', 'true');
  li.append(s, text);
  return li;
}

/**
 * One horizontal stacked bar of `parts` (key -> value), scaled to `scale` (the bar's full width),
 * with an optional capacity marker and a legend. Zero parts are left out.
 */
export function stackedBar({ parts, total, scale, label, color, name, format, capacity, capacityLabel }) {
  const wrap = document.createElement('figure');
  wrap.className = 'stack';
  const entries = Object.entries(parts).filter(([, v]) => v > 0);
  const keys = Object.keys(parts);
  const W = 520;
  const H = capacity ? 46 : 34;
  const barY = capacity ? 14 : 4;
  const barH = 24;
  const width = (v) => (v / scale) * W;
  const root = svg('svg', {
    viewBox: `0 0 ${W} ${H}`, class: 'stack-svg', role: 'img', preserveAspectRatio: 'none',
    'aria-label': `${label}: ${entries.map(([k, v]) => `${name(k)} ${format(v)}`).join(', ')}`,
  });
  root.append(svg('rect', { x: 0, y: barY, width: W, height: barH, class: 'stack-track', rx: 3 }));
  let at = 0;
  for (const [key, value] of entries) {
    const w = width(value);
    root.append(svg('rect', {
      x: at, y: barY, width: Math.max(w, 0.5), height: barH, fill: color(key, keys), class: 'seg',
      'data-key': key,
    }, title(`${name(key)}: ${format(value)} (${fmt.percent(value / total)})`)));
    at += w;
  }
  if (capacity) {
    const cx = Math.min(width(capacity), W - 1);
    root.append(svg('g', { class: 'capacity', 'data-role': 'capacity' },
      title(capacityLabel),
      svg('line', { x1: cx, x2: cx, y1: 0, y2: H, class: 'capacity-line' })));
  }
  const caption = document.createElement('figcaption');
  const head = document.createElement('div');
  head.className = 'stack-head';
  const strong = document.createElement('strong');
  strong.textContent = label;
  const sum = document.createElement('span');
  sum.textContent = capacity ? `${format(total)} of ${format(capacity)}` : format(total);
  head.append(strong, sum);
  caption.append(head);
  const legend = document.createElement('ul');
  legend.className = 'legend stack-legend';
  for (const [key, value] of entries.sort((a, b) => b[1] - a[1])) {
    const li = document.createElement('li');
    const s = document.createElement('span');
    s.className = 'swatch';
    s.setAttribute('aria-hidden', 'true');
    s.style.background = color(key, keys);
    const v = document.createElement('span');
    v.className = 'legend-value';
    v.textContent = `${format(value)} · ${fmt.percent(value / total, 0)}`;
    li.append(s, name(key), v);
    legend.append(li);
  }
  wrap.append(caption, root, legend);
  return wrap;
}

/** The time and memory bars of one configuration. `timeScale` lets two bars share an axis. */
export function breakdowns(c, { timeScale, memScale } = {}) {
  const p = c.prediction;
  const box = document.createElement('div');
  box.className = 'breakdowns';
  box.append(
    stackedBar({
      parts: p.time_breakdown_s, total: p.iteration_time_s, scale: timeScale ?? p.iteration_time_s,
      label: 'Iteration time', color: fmt.timeColor, name: fmt.timeLabel, format: fmt.seconds,
    }),
    stackedBar({
      parts: p.memory_breakdown_bytes, total: p.peak_memory_bytes_per_gpu,
      scale: memScale ?? 1.04 * Math.max(p.gpu_memory_bytes, p.peak_memory_bytes_per_gpu),
      label: 'Peak memory per GPU', color: fmt.memoryColor, name: fmt.memoryLabel, format: (b) => fmt.gib(b),
      capacity: p.gpu_memory_bytes, capacityLabel: `HBM capacity: ${fmt.gib(p.gpu_memory_bytes)}`,
    }),
  );
  return box;
}
