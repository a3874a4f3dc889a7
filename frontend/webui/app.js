// hearth's chat page: talks to this server's own API (/v1/models, /v1/chat/completions
// streamed, /metrics) and keeps the conversations in the browser (localStorage); the
// server holds nothing for it. When the server wants an API key the page asks for one and
// sends it as a Bearer token.
'use strict';

const $ = (id) => document.getElementById(id);
const store = {
  get(key, fallback) {
    try { const v = localStorage.getItem('hearth.' + key); return v === null ? fallback : JSON.parse(v); }
    catch { return fallback; }
  },
  set(key, value) { localStorage.setItem('hearth.' + key, JSON.stringify(value)); },
  remove(key) { localStorage.removeItem('hearth.' + key); },
};

const state = {
  conversations: store.get('conversations', []),
  active: store.get('active', null),
  model: null,
  controller: null,  // the AbortController of the answer being streamed
};

// ---- the API, with the key when the server wants one -------------------------------

let keyWaiters = null;
function askForKey() {
  if (!keyWaiters) {
    keyWaiters = [];
    $('key-input').value = '';
    $('key-dialog').showModal();
  }
  return new Promise((resolve) => keyWaiters.push(resolve));
}
$('key-form').addEventListener('submit', () => {
  store.set('key', $('key-input').value.trim());
  $('forget-key').hidden = false;
  const waiters = keyWaiters || [];
  keyWaiters = null;
  waiters.forEach((resolve) => resolve());
});
$('forget-key').hidden = !store.get('key', '');
$('forget-key').addEventListener('click', () => { store.remove('key'); $('forget-key').hidden = true; });

async function api(path, options = {}) {
  for (;;) {
    const key = store.get('key', '');
    const headers = Object.assign({}, options.headers || {});
    if (key) headers.Authorization = 'Bearer ' + key;
    const response = await fetch(path, Object.assign({}, options, { headers }));
    if (response.status !== 401) return response;
    await askForKey();
  }
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch { /* not JSON */ }
  return `${response.status} ${response.statusText}`;
}

function showError(text) {
  $('error').textContent = text;
  $('error').hidden = !text;
}

// ---- markdown: escaped first, so the model's text never becomes markup ------------------

function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

function inline(text) {
  const codes = [];
  let s = escapeHtml(text).replace(/`([^`\n]+)`/g, (_, code) => { codes.push(code); return `\u0000${codes.length - 1}\u0000`; });
  s = s.replace(/\*\*([^*\n]+)\*\*/g, '<strong>$1</strong>')
       .replace(/(^|[^*])\*([^*\n]+)\*/g, '$1<em>$2</em>')
       .replace(/\[([^\]\n]+)\]\((https?:\/\/[^)\s]+)\)/g, '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>');
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${codes[Number(i)]}</code>`);
}

function renderMarkdown(text) {
  const out = [];
  const lines = text.split('\n');
  let paragraph = [];
  let list = null;  // {ordered, items}
  const flushParagraph = () => {
    if (paragraph.length) out.push(`<p>${paragraph.map(inline).join('<br>')}</p>`);
    paragraph = [];
  };
  const flushList = () => {
    if (!list) return;
    const tag = list.ordered ? 'ol' : 'ul';
    out.push(`<${tag}>${list.items.map((i) => `<li>${inline(i)}</li>`).join('')}</${tag}>`);
    list = null;
  };
  for (let i = 0; i < lines.length; ++i) {
    const line = lines[i];
    const fence = line.match(/^```\s*([\w+-]*)\s*$/);
    if (fence) {
      flushParagraph(); flushList();
      const code = [];
      for (++i; i < lines.length && !/^```\s*$/.test(lines[i]); ++i) code.push(lines[i]);
      const lang = fence[1] ? ` class="language-${escapeHtml(fence[1])}"` : '';
      out.push(`<pre><code${lang}>${escapeHtml(code.join('\n'))}</code></pre>`);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
    const numbered = line.match(/^\s*\d+[.)]\s+(.*)$/);
    if (heading) {
      flushParagraph(); flushList();
      out.push(`<h${heading[1].length}>${inline(heading[2])}</h${heading[1].length}>`);
    } else if (bullet || numbered) {
      flushParagraph();
      const ordered = Boolean(numbered);
      if (list && list.ordered !== ordered) flushList();
      if (!list) list = { ordered, items: [] };
      list.items.push((bullet || numbered)[1]);
    } else if (line.trim() === '') {
      flushParagraph(); flushList();
    } else {
      flushList();
      paragraph.push(line);
    }
  }
  flushParagraph(); flushList();
  return out.join('');
}

// ---- conversations -------------------------------------------------------------------

function save() {
  store.set('conversations', state.conversations);
  store.set('active', state.active);
}

function activeConversation() {
  let c = state.conversations.find((x) => x.id === state.active);
  if (!c) {
    c = { id: String(Date.now()) + Math.random().toString(16).slice(2, 6), title: 'New chat', messages: [] };
    state.conversations.unshift(c);
    state.active = c.id;
    save();
  }
  return c;
}

function renderConversations() {
  const ul = $('conversations');
  ul.replaceChildren();
  for (const c of state.conversations) {
    const li = document.createElement('li');
    li.className = c.id === state.active ? 'active' : '';
    const title = document.createElement('span');
    title.textContent = c.title;
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.textContent = '×';
    remove.title = 'Delete this chat';
    remove.addEventListener('click', (e) => {
      e.stopPropagation();
      state.conversations = state.conversations.filter((x) => x.id !== c.id);
      if (state.active === c.id) state.active = state.conversations.length ? state.conversations[0].id : null;
      save(); render();
    });
    li.append(title, remove);
    li.addEventListener('click', () => { if (!state.controller) { state.active = c.id; save(); render(); } });
    ul.append(li);
  }
}

function messageElement(m) {
  const div = document.createElement('div');
  div.className = 'message ' + m.role;
  const role = document.createElement('div');
  role.className = 'role';
  role.textContent = m.role;
  div.append(role);
  if (m.reasoning) {
    const thinking = document.createElement('div');
    thinking.className = 'thinking';
    thinking.textContent = m.reasoning;
    div.append(thinking);
  }
  const body = document.createElement('div');
  body.className = 'body';
  if (m.role === 'assistant') body.innerHTML = renderMarkdown(m.content); else body.textContent = m.content;
  div.append(body);
  if (m.meta) {
    const meta = document.createElement('div');
    meta.className = 'meta';
    meta.textContent = m.meta;
    div.append(meta);
  }
  return div;
}

function renderMessages() {
  const c = state.conversations.find((x) => x.id === state.active);
  const box = $('messages');
  box.replaceChildren(...(c ? c.messages.map(messageElement) : []));
  box.scrollTop = box.scrollHeight;
}

function render() { renderConversations(); renderMessages(); }

// ---- settings ------------------------------------------------------------------------

const settings = store.get('settings', { system: '', temperature: 0.7, top_p: 1, max_tokens: '' });
function bindSetting(id, key, parse, echo) {
  const el = $(id);
  el.value = settings[key];
  if (echo) $(echo).textContent = el.value;
  el.addEventListener('input', () => {
    settings[key] = parse(el.value);
    if (echo) $(echo).textContent = el.value;
    store.set('settings', settings);
  });
}
bindSetting('system', 'system', String);
bindSetting('temperature', 'temperature', Number, 'temperature-value');
bindSetting('top-p', 'top_p', Number, 'top-p-value');
bindSetting('max-tokens', 'max_tokens', (v) => (v === '' ? '' : Math.max(1, Math.floor(Number(v)))));

// ---- sending and streaming -------------------------------------------------------------

function busy(on) {
  $('send').hidden = on;
  $('stop').hidden = !on;
  $('input').disabled = on;
}

// The data fields of the complete events in `buffer`; the incomplete tail stays in it.
function takeEvents(buffer) {
  const events = [];
  let end;
  while ((end = buffer.text.indexOf('\n\n')) >= 0) {
    const block = buffer.text.slice(0, end);
    buffer.text = buffer.text.slice(end + 2);
    const data = block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
    if (data) events.push(data);
  }
  return events;
}

async function send(text) {
  showError('');
  const c = activeConversation();
  if (c.messages.length === 0) c.title = text.slice(0, 40);
  c.messages.push({ role: 'user', content: text });
  const answer = { role: 'assistant', content: '', reasoning: '' };
  c.messages.push(answer);
  save(); render();
  const box = $('messages');
  let element = box.lastElementChild;  // the answer's, replaced as it grows
  const request = {
    messages: (settings.system ? [{ role: 'system', content: settings.system }] : [])
      .concat(c.messages.slice(0, -1).map((m) => ({ role: m.role, content: m.content }))),
    stream: true,
    stream_options: { include_usage: true },
    temperature: settings.temperature,
    top_p: settings.top_p,
  };
  if (state.model) request.model = state.model;
  if (settings.max_tokens !== '') request.max_tokens = settings.max_tokens;
  state.controller = new AbortController();
  busy(true);
  const started = performance.now();
  let firstToken = 0;
  try {
    const response = await api('/v1/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(request),
      signal: state.controller.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const buffer = { text: '' };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer.text += decoder.decode(value, { stream: true });
      for (const data of takeEvents(buffer)) {
        if (data === '[DONE]') continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const choice = chunk.choices && chunk.choices[0];
        if (choice && choice.delta) {
          if (!firstToken) firstToken = performance.now();
          answer.content += choice.delta.content || '';
          answer.reasoning += choice.delta.reasoning_content || '';
          if (choice.finish_reason) answer.finish = choice.finish_reason;
        }
        if (chunk.usage) {
          const seconds = (performance.now() - (firstToken || started)) / 1000;
          answer.meta = `${chunk.usage.completion_tokens} tokens · ` +
            `${(chunk.usage.completion_tokens / Math.max(seconds, 1e-3)).toFixed(1)} tok/s` +
            (answer.finish ? ` · ${answer.finish}` : '');
        }
      }
      const next = messageElement(answer);
      element.replaceWith(next);
      element = next;
      box.scrollTop = box.scrollHeight;
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      answer.meta = 'stopped';
    } else {
      showError(e.message);
      if (!answer.content && !answer.reasoning) c.messages.pop();
    }
  } finally {
    state.controller = null;
    busy(false);
    save(); render();
    $('input').focus();
  }
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value.trim();
  if (!text || state.controller) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('composer').requestSubmit(); }
});
$('stop').addEventListener('click', () => { if (state.controller) state.controller.abort(); });
$('new-chat').addEventListener('click', () => {
  if (state.controller) return;
  state.active = null;
  activeConversation();
  render();
});

// ---- the server's figures, from /metrics ---------------------------------------------------

// Sums of each metric's samples (over its labels) in a Prometheus text exposition.
function parseMetrics(text) {
  const sums = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/);
    if (!m) continue;
    const v = Number(m[3]);
    if (Number.isFinite(v)) sums[m[1]] = (sums[m[1]] || 0) + v;
  }
  return sums;
}

let lastTokens = null;
async function pollMetrics() {
  try {
    const response = await api('/metrics');
    if (!response.ok) return;
    const m = parseMetrics(await response.text());
    const now = performance.now();
    const show = (id, v) => { $(id).textContent = v; };
    show('stat-running', m.hearth_num_requests_running ?? '–');
    show('stat-waiting', (m.hearth_num_requests_waiting ?? 0) + (m.hearth_frontend_queue_requests ?? 0));
    show('stat-kv', m.hearth_kv_cache_usage_perc === undefined ? '–' : `${(100 * m.hearth_kv_cache_usage_perc).toFixed(0)}%`);
    const tokens = m.hearth_generation_tokens_total;
    if (tokens !== undefined && lastTokens) {
      show('stat-tps', ((tokens - lastTokens.value) / ((now - lastTokens.at) / 1000)).toFixed(1));
    }
    if (tokens !== undefined) lastTokens = { value: tokens, at: now };
    const up = m.hearth_engine_up;
    $('stat-engine').className = 'dot ' + (up === undefined ? '' : up > 0 ? 'up' : 'down');
    $('stat-engine').title = up > 0 ? 'engine up' : 'no engine';
  } catch { /* the server is away: the figures stay as they were */ }
}

async function loadModel() {
  try {
    const response = await api('/v1/models');
    if (!response.ok) return showError(await errorText(response));
    const body = await response.json();
    if (body.data && body.data.length) {
      state.model = body.data[0].id;
      $('model').textContent = `${state.model} · ${body.data[0].max_model_len} tokens of context`;
    }
  } catch (e) {
    showError('the server did not answer: ' + e.message);
  }
}

// A server with keys is asked for one before the first call, not after a 401.
async function start() {
  render();
  try {
    const health = await (await fetch('/health')).json();
    if (health.api_key_required && !store.get('key', '')) await askForKey();
  } catch { /* loadModel says what is wrong */ }
  await loadModel();
  pollMetrics();
  setInterval(pollMetrics, 2000);
}
start();
