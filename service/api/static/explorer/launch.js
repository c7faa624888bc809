// Launch files of one ranked configuration: the command (copied with navigator.clipboard) and
// every file as a download (a Blob URL named after the file).

import { api } from './api.js';

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export class LaunchPanel {
  constructor({ form, target, hosts, body, sub, announce }) {
    this.form = form;
    this.target = target;
    this.hosts = hosts;
    this.body = body;
    this.sub = sub;
    this.announce = announce;
    this.urls = [];
    this.searchId = null;
    this.config = null;
    this.seq = 0;
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.load();
    });
    target.addEventListener('change', () => this.load());
  }

  /** Show the launch files of `config` of search `searchId` (kept target and hosts). */
  show(searchId, config) {
    this.searchId = searchId;
    this.config = config;
    this.sub.textContent = `For #${config.rank} (${config.framework}). Targets that cannot run it say why.`;
    this.load();
  }

  clear() {
    this.revoke();
    this.body.replaceChildren();
  }

  revoke() {
    for (const url of this.urls) URL.revokeObjectURL(url);
    this.urls = [];
  }

  async load() {
    if (!this.searchId || !this.config) return;
    const seq = ++this.seq;
    const { rank } = this.config;
    const target = this.target.value;
    this.body.setAttribute('aria-busy', 'true');
    try {
      const launch = await api.launch(this.searchId, rank, target, this.hosts.value.trim());
      if (seq === this.seq) this.render(launch);
    } catch (err) {
      if (seq === this.seq) this.renderError(err, target, rank);
    } finally {
      if (seq === this.seq) this.body.removeAttribute('aria-busy');
    }
  }

  render(launch) {
    this.revoke();
    const nodes = [];
    const cmdHead = el('div', 'block-head');
    cmdHead.append(el('h3', null, 'Command'));
    const copy = el('button', 'secondary small', 'Copy command');
    copy.type = 'button';
    copy.id = 'copy-command';
    copy.addEventListener('click', () => this.copy(launch.command, copy));
    cmdHead.append(copy);
    const pre = el('pre', 'code command');
    pre.append(el('code', null, launch.command));
    pre.tabIndex = 0;
    pre.setAttribute('aria-label', 'Launch command');
    nodes.push(cmdHead, pre);

    const env = Object.entries(launch.env ?? {});
    if (env.length) {
      nodes.push(el('h3', null, 'Environment'));
      const dl = el('dl', 'env');
      for (const [k, v] of env) {
        const row = el('div');
        row.append(el('dt', null, k), el('dd', null, v));
        dl.append(row);
      }
      nodes.push(dl);
    }

    nodes.push(el('h3', null, 'Files'));
    const list = el('ul', 'files');
    for (const [name, text] of Object.entries(launch.files ?? {})) {
      const li = el('li', 'file');
      const head = el('div', 'file-head');
      const fileName = name.split('/').pop();
      const url = URL.createObjectURL(new Blob([text], { type: 'text/plain' }));
      this.urls.push(url);
      const link = el('a', 'button secondary small', 'Download');
      link.href = url;
      link.download = fileName;
      link.setAttribute('aria-label', `Download ${name}`);
      head.append(el('code', 'file-name', name), el('span', 'file-size', `${text.length.toLocaleString()} bytes`),
        link);
      const details = el('details');
      details.append(el('summary', null, 'Preview'));
      const preview = el('pre', 'code');
      preview.append(el('code', null, text));
      details.append(preview);
      li.append(head, details);
      list.append(li);
    }
    nodes.push(list);
    this.body.replaceChildren(...nodes);
  }

  renderError(err, target, rank) {
    this.revoke();
    const box = el('div', 'alert');
    box.setAttribute('role', 'alert');
    const title = err.status === 422
      ? `No ${target} launch files for #${rank}`
      : `Could not get the ${target} launch files of #${rank}`;
    box.append(el('p', 'alert-title', title));
    const ul = el('ul');
    for (const line of err.lines ? err.lines() : [String(err)]) ul.append(el('li', null, line));
    box.append(ul);
    this.body.replaceChildren(box);
  }

  async copy(text, button) {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = 'Copied';
      this.announce('Launch command copied to the clipboard.');
    } catch (err) {
      button.textContent = 'Copy failed';
      this.announce(`Could not copy: ${err.message}. Select the command and copy it by hand.`);
    }
    setTimeout(() => {
      button.textContent = 'Copy command';
    }, 2000);
  }
}
