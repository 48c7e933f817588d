"use strict";
// The Dynamiq console: plain JavaScript over the v2 API, no build step, no CDN.

const REFRESH_MS = 2000;
const HISTORY = 120;
const PAGE = 100;  // queues a page
// view: the queues shown, a page of those starting with ``prefix`` (by name after the
// name ``after``, the pages before it in ``back``; or the busiest first, one page).
const state = {
  selected: null, history: [], queues: [],
  view: { prefix: "", busiest: false, after: "", back: [], next: null },
};

const $ = (id) => document.getElementById(id);

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function button(label, onclick, cls) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  if (cls) b.className = cls;
  b.addEventListener("click", onclick);
  return b;
}

// A node that needs keys: the key lives in this tab's session storage, never in a URL.
const KEY = "dynamiq.key";

class LoggedOut extends Error {}

async function api(method, path, body) {
  const init = { method, headers: {} };
  const key = sessionStorage.getItem(KEY);
  if (key) init.headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 401) {
    sessionStorage.removeItem(KEY);
    showLogin(Boolean(key));
    throw new LoggedOut("this node needs a key");
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (!res.ok) {
    const detail = data && data.message ? `${data.error}: ${data.message}` : `HTTP ${res.status}`;
    throw new Error(`${method} ${path} failed: ${detail}`);
  }
  return data;
}

function showLogin(refused) {
  $("login").hidden = false;
  $("login-refused").hidden = !refused;
  $("logout").hidden = true;
}

function showError(err) {
  if (err instanceof LoggedOut) return;
  $("error").textContent = String(err && err.message ? err.message : err);
  $("error").hidden = false;
}

async function act(fn) {
  $("error").hidden = true;
  try {
    await fn();
  } catch (err) {
    showError(err);
  }
  await refresh();
}

const fmt = (x) => (x === null || x === undefined ? "–" : Number.isInteger(x) ? String(x) : x.toFixed(1));

function renderQueues(stats) {
  const body = $("queues").querySelector("tbody");
  body.replaceChildren();
  for (const q of stats.queues) {
    const tr = document.createElement("tr");
    tr.dataset.queue = q.queue;
    if (q.queue === state.selected) tr.className = "selected";
    const name = document.createElement("td");
    name.append(button(q.queue, () => select(q.queue), "link"));
    tr.append(name, cell(fmt(q.depth), "num depth"), cell(fmt(q.visible), "num"),
      cell(fmt(q.in_flight), "num"), cell(fmt(q.rates.publish), "num"),
      cell(fmt(q.rates.receive), "num"), cell(fmt(q.rates.delete), "num"),
      cell(fmt(q.oldest_age_seconds), "num"));
    const del = document.createElement("td");
    del.append(button("Delete", () => act(async () => {
      await api("DELETE", `/v2/queues/${encodeURIComponent(q.queue)}`);
      if (state.selected === q.queue) select(null);
    })));
    tr.append(del);
    body.append(tr);
  }
  const current = stats.queues.find((q) => q.queue === state.selected);
  if (current) {
    state.history.push([current.depth, current.in_flight]);
    if (state.history.length > HISTORY) state.history.shift();
  }
  drawChart();
}

function drawChart() {
  const canvas = $("chart");
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const points = state.history;
  if (!points.length) return;
  const top = Math.max(1, ...points.flat());
  const step = canvas.width / Math.max(1, HISTORY - 1);
  [["#1d4ed8", 0], ["#ea580c", 1]].forEach(([colour, i]) => {
    ctx.strokeStyle = colour;
    ctx.beginPath();
    points.forEach((p, x) => {
      const y = canvas.height - 4 - (p[i] / top) * (canvas.height - 8);
      if (x === 0) ctx.moveTo(x * step, y); else ctx.lineTo(x * step, y);
    });
    ctx.stroke();
  });
  ctx.fillStyle = "#555";
  ctx.fillText(`max ${top}`, 4, 12);
}

function code(text) {
  const c = document.createElement("code");
  c.textContent = text;
  return c;
}

function describeSubscription(topic, sub) {
  const line = document.createElement("div");
  line.className = "subscription";
  line.dataset.queue = sub.queue;
  line.append(`${sub.queue} `);
  if (sub.pattern !== undefined) line.append(code(sub.pattern), " ");
  if (sub.filter !== undefined) line.append(code(JSON.stringify(sub.filter)), " ");
  line.append(button("Edit", () => editSubscription(topic, sub)), " ",
    button("×", () => act(() => api("DELETE",
      `/v2/topics/${encodeURIComponent(topic)}/subscriptions/${encodeURIComponent(sub.queue)}`))));
  return line;
}

function describeWebhook(topic, hook) {
  const line = document.createElement("div");
  line.className = `webhook ${hook.state}`;
  line.dataset.webhook = hook.id;
  const state = document.createElement("span");
  state.className = "state";
  state.textContent = hook.state;
  line.append("→ ", code(hook.url), " ", state,
    ` ${hook.pending} pending, ${hook.in_flight} in flight `);
  if (hook.filter !== null) line.append(code(JSON.stringify(hook.filter)), " ");
  line.append(button("×", () => act(() => api("DELETE",
    `/v2/topics/${encodeURIComponent(topic)}/webhooks/${encodeURIComponent(hook.id)}`))));
  return line;
}

function editSubscription(topic, sub) {
  const form = $("subscription");
  form.elements.topic.value = topic;
  form.elements.queue.value = sub.queue;
  form.elements.pattern.value = sub.pattern ?? "";
  form.elements.filter.value = sub.filter === undefined ? "" : JSON.stringify(sub.filter);
}

function fillSelect(select, names) {
  const kept = select.value;
  select.replaceChildren(...names.map((n) => new Option(n, n)));
  if (names.includes(kept)) select.value = kept;
}

async function renderTopics(queues) {
  const body = $("topics").querySelector("tbody");
  const { topics } = await api("GET", "/v2/topics");
  const rows = [];
  for (const name of topics) {
    const path = `/v2/topics/${encodeURIComponent(name)}`;
    const [topic, { webhooks }] = await Promise.all([api("GET", path), api("GET", `${path}/webhooks`)]);
    const tr = document.createElement("tr");
    tr.dataset.topic = name;
    const subs = document.createElement("td");
    subs.append(...topic.subscriptions.map((sub) => describeSubscription(name, sub)));
    if (topic.next !== undefined) {  // a wide topic: its first page of subscriptions only
      const more = document.createElement("div");
      more.className = "more";
      more.textContent = `… and more after ${topic.next}`;
      subs.append(more);
    }
    subs.append(...webhooks.map((hook) => describeWebhook(name, hook)));
    const publish = document.createElement("td");
    const text = document.createElement("input");
    text.placeholder = "message";
    text.setAttribute("aria-label", `message for ${name}`);
    const key = document.createElement("input");
    key.placeholder = "routing key";
    key.setAttribute("aria-label", `routing key for ${name}`);
    publish.append(text, key, button("Publish", () => act(() => {
      const message = { body: text.value };
      if (key.value.trim()) message.routing_key = key.value.trim();
      return api("POST", `/v2/topics/${encodeURIComponent(name)}/messages`, { messages: [message] });
    })));
    const del = document.createElement("td");
    del.append(button("Delete", () => act(() => api("DELETE", `/v2/topics/${encodeURIComponent(name)}`))));
    tr.append(cell(name), subs, publish, del);
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  fillSelect($("subscription").elements.topic, topics);
  fillSelect($("webhook").elements.topic, topics);
  fillSelect($("subscription").elements.queue, queues);
}

function viewQuery() {
  const { prefix, busiest, after } = state.view;
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (prefix) query.set("prefix", prefix);
  if (busiest) query.set("order", "busiest");
  else if (after) query.set("after", after);
  return query.toString();
}

function renderPaging(stats) {
  const { view } = state;
  $("page-back").disabled = view.busiest || view.back.length === 0;
  $("page-next").disabled = view.busiest || view.next === null;
  const first = view.back.length * PAGE + 1;
  const shown = stats.queues.length
    ? (view.busiest ? `the ${stats.queues.length} busiest` : `${first}-${first + stats.queues.length - 1}`)
    : "none";
  const matching = view.prefix ? ` starting with "${view.prefix}"` : "";
  $("queue-count").textContent = `${shown}${matching}; ${stats.queue_count} queues in all`;
}

// A new search or order starts again at the first page.
function changeView(changes) {
  Object.assign(state.view, changes, { after: "", back: [], next: null });
  refresh();
}

async function renderMembers() {
  const status = await api("GET", "/v2/status");
  $("node").textContent = `node ${status.node}`;
  const body = $("members").querySelector("tbody");
  body.replaceChildren(...status.members.map((m) => {
    const tr = document.createElement("tr");
    tr.append(cell(m.name), cell(m.http), cell(m.state), cell(m.slice.length ? `${m.slice[0]} – ${m.slice[1]}` : "—"));
    return tr;
  }));
}

async function refresh() {
  if (!$("login").hidden) return;
  try {
    const stats = await api("GET", `/v2/stats?${viewQuery()}`);
    state.queues = stats.queues.map((q) => q.queue);
    state.view.next = stats.next ?? null;
    renderQueues(stats);
    renderPaging(stats);
    await renderTopics(state.queues);
    await renderMembers();
    await renderKeys();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    showError(err);
  }
}

async function showDeadLetters(settings) {
  const target = settings.dead_letter_queue;
  if (!target) {
    $("dead-letters").textContent = "No dead-letter queue.";
    return;
  }
  const stats = await api("GET", `/v2/queues/${encodeURIComponent(target)}/stats`);
  $("dead-letters").textContent =
    `Dead-letter queue: ${target}, holding ${stats.depth} message${stats.depth === 1 ? "" : "s"}` +
    (settings.max_receives ? ` (after ${settings.max_receives} receives)` : "");
}

function showExpiry(info) {
  $("expiry").textContent = info.expires_at
    ? `Deleted if unused until ${new Date(info.expires_at).toLocaleString()} ` +
      `(expires_after_seconds: ${info.settings.expires_after_seconds}).`
    : "Does not delete itself.";
}

function describeRedrive(task) {
  const to = task.to ? ` to ${task.to}` : "";
  return `redrive${to} ${task.state}: ${task.moved} moved, ${task.remaining} remaining`;
}

async function followRedrive(queue) {
  for (;;) {
    const task = await api("GET", `/v2/queues/${encodeURIComponent(queue)}/redrive`);
    if (state.selected !== queue) return;
    $("redrive-status").textContent = describeRedrive(task);
    if (task.state !== "running") return;
    await new Promise((done) => setTimeout(done, 500));
  }
}

async function select(queue) {
  state.selected = queue;
  state.history = [];
  $("queue-panel").hidden = queue === null;
  $("chart-queue").textContent = queue || "the selected queue";
  $("messages").querySelector("tbody").replaceChildren();
  if (queue === null) return;
  $("queue-name").textContent = queue;
  try {
    const info = await api("GET", `/v2/queues/${encodeURIComponent(queue)}`);
    const form = $("settings");
    for (const [key, value] of Object.entries(info.settings)) {
      const input = form.elements[key];
      if (!input) continue;
      if (input.type === "checkbox") input.checked = Boolean(value); else input.value = value ?? "";
    }
    $("redrive-status").textContent = "";
    showExpiry(info);
    await showDeadLetters(info.settings);
  } catch (err) {
    showError(err);
  }
  await refresh();
}

async function peek() {
  const queue = state.selected;
  const { messages } = await api("GET", `/v2/queues/${encodeURIComponent(queue)}/peek?max=20`);
  const body = $("messages").querySelector("tbody");
  body.replaceChildren(...messages.map((m) => {
    const tr = document.createElement("tr");
    tr.dataset.id = m.id;
    const text = m.encoding === "base64" ? `(base64) ${m.body}` : m.body;
    const del = document.createElement("td");
    del.append(button("Delete", () => act(async () => {
      await api("POST", `/v2/queues/${encodeURIComponent(queue)}/delete`, { ids: [m.id] });
      tr.remove();
    })));
    const attributes = m.attributes === undefined ? "" : JSON.stringify(m.attributes);
    tr.append(cell(m.id), cell(new Date(m.published_at).toLocaleTimeString()), cell(text, "body"),
      cell(m.routing_key ?? "", "key"), cell(attributes, "attributes"), del);
    return tr;
  }));
}

function numberOrSkip(form, key, changes) {
  const raw = form.elements[key].value.trim();
  if (raw !== "") changes[key] = Number(raw);
}

// Keys: shown to an administrator of a node that needs keys (a monitor is refused them).
async function renderKeys() {
  const panel = $("keys-panel");
  if (!sessionStorage.getItem(KEY)) { panel.hidden = true; return; }
  let listed;
  try {
    listed = await api("GET", "/v2/keys");
  } catch (err) {
    if (err instanceof LoggedOut) throw err;
    panel.hidden = true;  // not an administrator's key
    return;
  }
  panel.hidden = false;
  const body = $("keys").querySelector("tbody");
  body.replaceChildren();
  for (const k of listed.keys) {
    const tr = document.createElement("tr");
    tr.dataset.key = k.key_id;
    tr.append(cell(k.key_id), cell(k.application), cell(k.role),
      cell(k.access_key_id ?? "–", "aws"), cell(k.created), cell(k.last_used ?? "never"));
    const revoke = document.createElement("td");
    revoke.append(button("Revoke", () => {
      if (!window.confirm(`Revoke ${k.key_id} on every node? Its clients are refused at once.`)) return;
      act(() => api("DELETE", `/v2/keys/${encodeURIComponent(k.key_id)}`));
    }));
    tr.append(revoke);
    body.append(tr);
  }
}

function wireKeys() {
  $("create-key").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    act(async () => {
      const made = await api("POST", "/v2/keys", {
        application: form.elements.application.value.trim(),
        role: form.elements.role.value,
        description: form.elements.description.value.trim(),
        aws: form.elements.aws.checked,
      });
      $("new-key-token").textContent = made.key;
      $("new-key-access").textContent = made.access_key_id ?? "";
      $("new-key-secret").textContent = made.secret_access_key ?? "";
      $("new-key-account").textContent = made.account ?? "";
      for (const el of $("new-key").querySelectorAll(".aws")) el.hidden = !made.access_key_id;
      $("new-key").hidden = false;
      form.reset();
    });
  });
}

function wireLogin() {
  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = e.target.elements.key;
    sessionStorage.setItem(KEY, input.value.trim());
    input.value = "";
    $("login").hidden = true;
    $("logout").hidden = false;
    act(async () => {});
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    $("keys-panel").hidden = true;
    $("new-key").hidden = true;
    showLogin(false);
  });
  $("logout").hidden = !sessionStorage.getItem(KEY);
}

// A form that creates the queue or topic it names (``kind``), then runs ``then(name)``.
function onCreate(formId, kind, then) {
  $(formId).addEventListener("submit", (e) => {
    e.preventDefault();
    const name = e.target.elements.name.value.trim();
    act(async () => {
      await api("PUT", `/v2/${kind}/${encodeURIComponent(name)}`);
      e.target.reset();
      await then(name);
    });
  });
}

function wire() {
  wireLogin();
  wireKeys();
  onCreate("create-queue", "queues", select);
  onCreate("create-topic", "topics", async () => {});
  $("settings").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    const changes = {};
    for (const key of ["visibility_timeout", "min_partitions", "max_partitions",
      "max_partition_age", "delay_seconds", "dedup_window_seconds"]) {
      numberOrSkip(form, key, changes);
    }
    changes.compressed_messages = form.elements.compressed_messages.checked;
    changes.content_dedup = form.elements.content_dedup.checked;
    // Left empty, these turn off (null); the API checks them together.
    for (const key of ["max_receives", "retention_seconds", "expires_after_seconds"]) {
      const raw = form.elements[key].value.trim();
      changes[key] = raw === "" ? null : Number(raw);
    }
    changes.dead_letter_queue = form.elements.dead_letter_queue.value.trim() || null;
    act(async () => {
      const info = await api("PATCH", `/v2/queues/${encodeURIComponent(state.selected)}`, changes);
      showExpiry(info);
      await showDeadLetters(info.settings);
    });
  });
  $("publish-queue").addEventListener("submit", (e) => {
    e.preventDefault();
    const body = e.target.elements.body.value;
    act(() => api("POST", `/v2/queues/${encodeURIComponent(state.selected)}/messages`,
      { messages: [{ body }] }));
  });
  $("webhook").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    const topic = form.elements.topic.value;
    act(async () => {
      const body = { url: form.elements.url.value.trim(), raw: form.elements.raw.checked };
      const filter = form.elements.filter.value.trim();
      if (filter) body.filter = JSON.parse(filter);
      await api("POST", `/v2/topics/${encodeURIComponent(topic)}/webhooks`, body);
      form.elements.url.value = "";
    });
  });
  $("subscription").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    const topic = form.elements.topic.value;
    const queue = form.elements.queue.value;
    act(async () => {
      const body = {};
      const pattern = form.elements.pattern.value.trim();
      const filter = form.elements.filter.value.trim();
      if (pattern) body.pattern = pattern;
      if (filter) {
        try { body.filter = JSON.parse(filter); } catch (err) {
          throw new Error(`the filter is not JSON: ${err.message}`);
        }
      }
      await api("PUT", `/v2/topics/${encodeURIComponent(topic)}/subscriptions/${encodeURIComponent(queue)}`, body);
    });
  });
  const view = $("queue-view");
  let typing = null;
  view.elements.prefix.addEventListener("input", () => {
    clearTimeout(typing);  // the search runs once typing pauses
    typing = setTimeout(() => changeView({ prefix: view.elements.prefix.value.trim() }), 250);
  });
  view.addEventListener("submit", (e) => e.preventDefault());
  view.elements.busiest.addEventListener("change", () => changeView({ busiest: view.elements.busiest.checked }));
  $("page-next").addEventListener("click", () => {
    if (state.view.next === null) return;
    state.view.back.push(state.view.after);
    state.view.after = state.view.next;
    refresh();
  });
  $("page-back").addEventListener("click", () => {
    if (state.view.back.length === 0) return;
    state.view.after = state.view.back.pop();
    refresh();
  });
  $("peek").addEventListener("click", () => act(peek));
  $("redrive").addEventListener("click", () => {
    const queue = state.selected;
    act(async () => {
      await api("POST", `/v2/queues/${encodeURIComponent(queue)}/redrive`, {});
      await followRedrive(queue);
    });
  });
  $("purge").addEventListener("click", () => {
    const queue = state.selected;
    if (!window.confirm(`Drop every message of ${queue}? Messages in flight go too. This cannot be undone.`)) return;
    act(async () => {
      const { purged } = await api("POST", `/v2/queues/${encodeURIComponent(queue)}/purge`);
      $("purged").textContent = `purged ${purged} message${purged === 1 ? "" : "s"}`;
      $("messages").querySelector("tbody").replaceChildren();
    });
  });
}

wire();
refresh();
setInterval(refresh, REFRESH_MS);
