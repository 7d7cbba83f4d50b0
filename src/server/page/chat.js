// The chat page of `diskformer serve`: the conversation lives in the page (and in localStorage, so a reload keeps
// it); each reply streams from /v1/chat/completions; Stop aborts the request, which frees its slot on the server.
// The panel polls /metrics once a second. No other origin is contacted.
'use strict';

const $ = (id) => document.getElementById(id);
const STORE = 'diskformer.conversation';

const state = {
  messages: loadConversation(),  // [{role, content}], what the next request sends after the system message
  controller: null,              // the reply being streamed
};

function loadConversation() {
  try {
    const m = JSON.parse(localStorage.getItem(STORE) || '[]');
    return Array.isArray(m) ? m : [];
  } catch {
    return [];
  }
}

function saveConversation() {
  localStorage.setItem(STORE, JSON.stringify(state.messages));
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api-key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

function addMessage(role, content) {
  const el = document.createElement('div');
  el.className = 'msg ' + role;
  const body = document.createElement('div');
  body.className = 'content';
  body.textContent = content;
  el.appendChild(body);
  $('messages').appendChild(el);
  el.scrollIntoView({ block: 'end' });
  return el;
}

function setMeta(el, text) {
  let meta = el.querySelector('.meta');
  if (!meta) {
    meta = document.createElement('div');
    meta.className = 'meta';
    el.appendChild(meta);
  }
  meta.textContent = text;
}

function renderConversation() {
  $('messages').replaceChildren();
  for (const m of state.messages) addMessage(m.role, m.content).dataset.state = 'done';
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('clear').disabled = busy;
}

// Server-sent events from a fetch body: calls onData with each event's data.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) if (line.startsWith('data: ')) onData(line.slice(6));
    }
  }
}

async function send(text) {
  state.messages.push({ role: 'user', content: text });
  saveConversation();
  addMessage('user', text).dataset.state = 'done';
  const el = addMessage('assistant', '');
  el.dataset.state = 'streaming';
  const content = el.querySelector('.content');

  const system = $('system').value.trim();
  const body = {
    messages: (system ? [{ role: 'system', content: system }] : []).concat(state.messages),
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($('temperature').value),
    max_tokens: Number($('max-tokens').value),
  };
  state.controller = new AbortController();
  setBusy(true);
  let reply = '';
  const t0 = performance.now();
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: state.controller.signal,
    });
    if (!res.ok) {
      const err = await res.json().catch(() => null);
      if (res.status === 401) $('api-key').focus();
      throw new Error((err && err.error && err.error.message) || 'HTTP ' + res.status);
    }
    await readEvents(res, (data) => {
      if (data === '[DONE]') return;
      const j = JSON.parse(data);
      if (j.error) throw new Error(j.error.message);
      const choice = j.choices && j.choices[0];
      if (choice && choice.delta && choice.delta.content) {
        reply += choice.delta.content;
        content.textContent = reply;
        el.scrollIntoView({ block: 'end' });
      }
      if (choice && choice.finish_reason) el.dataset.finish = choice.finish_reason;
      if (j.usage) {
        const s = (performance.now() - t0) / 1000;
        setMeta(el, `${j.usage.completion_tokens} tokens in ${s.toFixed(1)} s` +
                    (j.usage.prompt_tokens_details && j.usage.prompt_tokens_details.cached_tokens
                      ? `, ${j.usage.prompt_tokens_details.cached_tokens} prompt tokens reused` : ''));
      }
    });
    el.dataset.state = 'done';
  } catch (e) {
    if (e.name === 'AbortError') {
      el.dataset.state = 'stopped';
      setMeta(el, 'stopped');
    } else {
      el.dataset.state = 'error';
      setMeta(el, 'error: ' + e.message);
    }
  } finally {
    if (reply) {
      state.messages.push({ role: 'assistant', content: reply });
    } else {
      state.messages.pop();  // nothing came back: the question can be asked again
    }
    saveConversation();
    state.controller = null;
    setBusy(false);
  }
}

// The panel.

function parseMetrics(text) {
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    m[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return m;
}

function bytes(n) {
  if (n === undefined || Number.isNaN(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
}

function percent(x) {
  return x === undefined ? '–' : (100 * x).toFixed(1) + '%';
}

async function pollMetrics() {
  try {
    const res = await fetch('/metrics', { headers: headers() });
    if (!res.ok) {
      $('m-status').textContent = res.status === 401 ? 'metrics need the API key' : 'metrics: HTTP ' + res.status;
      return;
    }
    const m = parseMetrics(await res.text());
    $('m-decode').textContent = m.diskformer_decode_tokens_per_second.toFixed(1) + ' tok/s';
    $('m-prompt').textContent = m.diskformer_prompt_tokens_per_second.toFixed(1) + ' tok/s';
    const gpu = m.diskformer_gpu_used_bytes;
    const gpuBudget = m.diskformer_gpu_budget_bytes;
    $('m-gpu').textContent = gpu === undefined ? 'not used' : bytes(gpu) + (gpuBudget ? ' of ' + bytes(gpuBudget) : '');
    const ramBudget = m.diskformer_ram_budget_bytes;
    $('m-ram').textContent = bytes(m.diskformer_ram_used_bytes) + (ramBudget ? ' (budget ' + bytes(ramBudget) + ')' : '');
    const tiers = [];
    for (const tier of ['gpu', 'ram']) {
      const h = m[`diskformer_expert_cache_hit_ratio{tier="${tier}"}`];
      if (h !== undefined) tiers.push(tier.toUpperCase() + ' ' + percent(h));
    }
    for (const tier of ['gpu', 'ram']) {
      const h = m[`diskformer_row_cache_hit_ratio{tier="${tier}"}`];
      if (h !== undefined) tiers.push('rows ' + tier.toUpperCase() + ' ' + percent(h));
    }
    $('m-hits').textContent = tiers.length ? tiers.join(', ') : 'all resident';
    $('m-disk').textContent = bytes(m.diskformer_disk_read_bytes_total);
    $('m-pcie').textContent = bytes(m.diskformer_pcie_copied_bytes_total);
    $('m-slots').textContent = `${m.diskformer_slots_busy} of ${m.diskformer_slots}` +
                               (m.diskformer_requests_queued ? `, ${m.diskformer_requests_queued} waiting` : '');
    $('m-status').textContent = '';
  } catch (e) {
    $('m-status').textContent = 'metrics: ' + e.message;
  }
}

async function showModel() {
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    if (!res.ok) return;
    const m = (await res.json()).data[0];
    $('model').textContent = `${m.id} · ${m.meta.arch} · ${m.meta.backend} · context ${m.meta.n_ctx}`;
  } catch {
    // the panel says what is wrong with the server
  }
}

function start() {
  $('api-key').value = localStorage.getItem('diskformer.key') || '';
  $('api-key').addEventListener('change', () => {
    localStorage.setItem('diskformer.key', $('api-key').value.trim());
    showModel();
  });
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('prompt').value.trim();
    if (!text || state.controller) return;
    $('prompt').value = '';
    send(text);
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => state.controller && state.controller.abort());
  $('clear').addEventListener('click', () => {
    state.messages = [];
    saveConversation();
    renderConversation();
  });
  renderConversation();
  setBusy(false);
  showModel();
  pollMetrics();
  setInterval(pollMetrics, 1000);
}

start();
