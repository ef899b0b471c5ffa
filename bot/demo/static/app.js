// The OpsPilot demo page: a Slack-like channel that renders Block Kit and talks to the real bot through
// the demo server (which signs every request as Slack would).
"use strict";

const state = { me: "U0ALICE", users: {}, bot: { id: "UBOT", name: "OpsPilot" }, messages: new Map(),
                ephemerals: [], openThread: null, formValues: new Map(), channels: [], channel: null,
                canvases: new Map(), openCanvas: null };

const EMOJI = { white_check_mark: "✅", x: "❌", hourglass_flowing_sand: "⏳", raised_hand: "✋", no_entry_sign: "🚫",
  fast_forward: "⏩", hourglass: "⌛", warning: "⚠️", mag: "🔍", memo: "📝", pencil: "✏️", speech_balloon: "💬",
  alarm_clock: "⏰", grey_question: "❔", repeat: "🔁", rotating_light: "🚨", arrow_down: "⬇️",
  bust_in_silhouette: "👤", calendar: "📆", information_source: "ℹ️", no_entry: "⛔" };

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

function nameOf(id) {
  if (id === state.bot.id) return state.bot.name;
  return (state.users[id] && state.users[id].name) || id;
}

// Slack mrkdwn → HTML (escaped first; only our own tags are added).
function mrkdwn(text) {
  let html = esc(text);
  html = html.replace(/```([\s\S]*?)```/g, (_, code) => `<pre>${code}</pre>`);
  html = html.replace(/`([^`\n]+)`/g, (_, code) => `<code>${code}</code>`);
  html = html.replace(/&lt;@([A-Z0-9]+)&gt;/g, (_, id) => `<span class="mention">@${esc(nameOf(id))}</span>`);
  html = html.replace(/&lt;#([A-Z0-9]+)(?:\|([^&]*))?&gt;/g, (_, id, label) => `<span class="mention">#${esc(label || channelName(id))}</span>`);
  html = html.replace(/&lt;(https?:[^|&]+)\|([^&]+)&gt;/g, (_, url, label) => `<a href="${url}" target="_blank" rel="noopener">${label}</a>`);
  // Like Slack: markers open after a boundary and close before one, so snake_case stays as it is.
  // CJK punctuation is a boundary too ("…已完成。_来源：x_"), as in the terminal (bot/terminal.py).
  html = html.replace(/(^|[\s(>（。，；：！？、])\*([^*\n]+?)\*(?=$|[\s.,;:!?)<&。，；：！？、（）])/g, "$1<b>$2</b>");
  html = html.replace(/(^|[\s(>（。，；：！？、])_([^\n]+?)_(?=$|[\s.,;:!?)<&。，；：！？、（）])/g, "$1<i>$2</i>");
  html = html.replace(/(^|[\s(>（。，；：！？、])~([^~\n]+?)~(?=$|[\s.,;:!?)<&。，；：！？、（）])/g, "$1<s>$2</s>");
  html = html.replace(/:([a-z_]+):/g, (m, name) => EMOJI[name] || m);
  // Slack's own escapes (&lt; &gt; &amp;) show as the characters, last, so they never become a mention or a link.
  html = html.replace(/&amp;(lt|gt|amp);/g, "&$1;");
  return html.replace(/\n/g, "<br>");
}

// A stream's markdown (standard markdown, as chat.*Stream take it) → HTML, escaped first like mrkdwn.
function markdown(text) {
  const slackish = String(text ?? "").replace(/\*\*([^*\n]+?)\*\*/g, "*$1*").replace(/~~([^~\n]+?)~~/g, "~$1~")
    .replace(/\[([^\]\n]+)\]\((https?:[^)\s]+)\)/g, "<$2|$1>");
  return mrkdwn(slackish);
}

// --- canvases ------------------------------------------------------------------------------------------
// A canvas's markdown (canvases.create/edit) → HTML. Every piece of text is escaped first; only our own tags
// are added around it, and a link is made only to an http(s) address.

function canvasInline(text) {
  const codes = [];
  let html = esc(text).replace(/`([^`\n]+)`/g, (_, code) => { codes.push(code); return `\u0000${codes.length - 1}\u0000`; });
  html = html.replace(/!\[\]\(@([A-Z0-9]+)\)/g, (_, id) => `<span class="mention">@${esc(nameOf(id))}</span>`);
  html = html.replace(/!\[\]\(#([A-Z0-9]+)\)/g, (_, id) => `<span class="mention">#${esc(channelName(id))}</span>`);
  html = html.replace(/\[([^\]\n]+)\]\((https?:\/\/[^)\s]+)\)/g,
    (_, label, url) => `<a href="${url}" target="_blank" rel="noopener">${label}</a>`);
  html = html.replace(/(^|[\s(])(https?:\/\/[^\s<)]+)/g, (_, before, url) =>  // a bare address, as Slack links it
    `${before}<a href="${url}" target="_blank" rel="noopener">${url}</a>`);
  html = html.replace(/\*\*([^*\n]+?)\*\*/g, "<b>$1</b>").replace(/~~([^~\n]+?)~~/g, "<s>$1</s>");
  html = html.replace(/(^|[\s(>])[*_]([^\n]+?)[*_](?=$|[\s.,;:!?)<])/g, "$1<i>$2</i>");
  return html.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${codes[Number(i)]}</code>`);
}

function tableCells(line) {
  return line.trim().replace(/^\|/, "").replace(/(?<!\\)\|$/, "").split(/(?<!\\)\|/)
    .map((cell) => cell.trim().replace(/\\\|/g, "|"));
}

function canvasHtml(markdown) {
  // NUL marks code spans in canvasInline: none may come from the document itself.
  const lines = String(markdown ?? "").replace(/\u0000/g, "").split("\n");
  const out = [];
  let at = 0;
  const run = (test) => { const start = at; while (at < lines.length && test(lines[at])) at += 1; return lines.slice(start, at); };
  const BLOCK = /^(#{1,6}\s|```|\s*\||\s*[-*+]\s|\s*\d+[.)]\s|\s*>)/;
  while (at < lines.length) {
    const line = lines[at];
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      at += 1;
      out.push(`<h${heading[1].length}>${canvasInline(heading[2])}</h${heading[1].length}>`);
    } else if (/^```/.test(line)) {
      at += 1;
      const code = run((l) => !/^```/.test(l));
      at += 1;
      out.push(`<pre>${esc(code.join("\n"))}</pre>`);
    } else if (/^\s*\|.*\|\s*$/.test(line)) {
      const rows = run((l) => /^\s*\|.*\|\s*$/.test(l)).map(tableCells);
      const head = rows.length > 1 && rows[1].every((c) => /^:?-{3,}:?$/.test(c)) ? rows.splice(0, 2)[0] : null;
      out.push("<table>" + (head ? `<thead><tr>${head.map((c) => `<th>${canvasInline(c)}</th>`).join("")}</tr></thead>` : "") +
        `<tbody>${rows.map((r) => `<tr>${r.map((c) => `<td>${canvasInline(c)}</td>`).join("")}</tr>`).join("")}</tbody></table>`);
    } else if (/^\s*[-*+]\s+/.test(line)) {
      const items = run((l) => /^\s*[-*+]\s+/.test(l)).map((l) => l.replace(/^\s*[-*+]\s+/, ""));
      out.push(`<ul>${items.map((i) => `<li>${canvasInline(i)}</li>`).join("")}</ul>`);
    } else if (/^\s*\d+[.)]\s+/.test(line)) {
      const items = run((l) => /^\s*\d+[.)]\s+/.test(l)).map((l) => l.replace(/^\s*\d+[.)]\s+/, ""));
      out.push(`<ol>${items.map((i) => `<li>${canvasInline(i)}</li>`).join("")}</ol>`);
    } else if (/^\s*>/.test(line)) {
      const quoted = run((l) => /^\s*>/.test(l)).map((l) => canvasInline(l.replace(/^\s*>\s?/, "")));
      out.push(`<blockquote>${quoted.join("<br>")}</blockquote>`);
    } else if (!line.trim()) {
      at += 1;
    } else {
      at += 1;  // this line at least, whatever it looks like: the loop always moves on
      const para = [line, ...run((l) => l.trim() && !BLOCK.test(l))];
      out.push(`<p>${para.map(canvasInline).join("<br>")}</p>`);
    }
  }
  return out.join("");
}

function channelCanvases() {
  return [...state.canvases.values()].filter((c) => c.channel_id === state.channel);
}

// The channel's canvases as tabs in its header (canvases.create with channel_id), as Slack shows them.
function renderCanvasTabs() {
  const box = document.getElementById("canvas-tabs");
  box.replaceChildren(...channelCanvases().map((canvas) => {
    const tab = document.createElement("button");
    tab.className = "canvas-tab" + (canvas.id === state.openCanvas ? " active" : "");
    tab.dataset.testid = "canvas-tab";
    tab.dataset.canvasId = canvas.id;
    tab.title = canvas.title;
    tab.textContent = `📄 ${canvas.title || "Canvas"}`;
    tab.addEventListener("click", () => showCanvas(canvas.id));
    return tab;
  }));
  box.hidden = home() || !box.children.length;
}

function renderCanvas() {
  const canvas = state.canvases.get(state.openCanvas);
  if (!canvas) return;
  const panel = document.getElementById("canvas");
  panel.dataset.canvasId = canvas.id;
  panel.dataset.edits = String(canvas.edits || 0);
  document.getElementById("canvas-title").textContent = canvas.title || "Canvas";
  document.getElementById("canvas-meta").textContent = canvas.edits ? `edited ${canvas.edits}×` : "";
  document.getElementById("canvas-body").innerHTML = canvasHtml(canvas.markdown);
}

function showCanvas(id) {
  state.openCanvas = id;
  for (const [el, hidden] of [["canvas", false], ["messages", true], ["composer-form", true], ["home", true]]) {
    document.getElementById(el).hidden = hidden;
  }
  renderCanvas();
  renderCanvasTabs();
}

function closeCanvas() {
  if (state.openCanvas === null) return;
  state.openCanvas = null;
  document.getElementById("canvas").hidden = true;
  document.getElementById("messages").hidden = false;
  document.getElementById("composer-form").hidden = false;
  renderCanvasTabs();
}

const TASK_ICONS = { pending: "⏸️", in_progress: "⏳", complete: "✅", error: "❌" };

// A streamed message as Slack shows it: the plan, a card per task (its status changing in place), the text.
function renderStream(message, container) {
  const stream = message.stream;
  if (stream.plan) {
    const plan = document.createElement("div");
    plan.className = "plan";
    plan.innerHTML = `📋 ${esc(stream.plan)}`;
    container.appendChild(plan);
  }
  for (const task of stream.tasks || []) {
    const card = document.createElement("div");
    card.className = `task ${task.status}`;
    card.dataset.testid = "task";
    card.dataset.status = task.status;
    const note = task.output || task.details || "";
    card.innerHTML = `<span class="icon">${TASK_ICONS[task.status] || "❔"}</span><span class="title">${esc(task.title)}</span>` +
      (note ? `<div class="note">${mrkdwn(note)}</div>` : "");
    container.appendChild(card);
  }
  if (stream.markdown) {
    const text = document.createElement("div");
    text.className = "markdown";
    text.innerHTML = markdown(stream.markdown);
    container.appendChild(text);
  }
  if (stream.state === "streaming") {
    const live = document.createElement("div");
    live.className = "streaming";
    live.textContent = "● streaming";
    container.appendChild(live);
  }
}

function textOf(obj) { return obj ? (obj.type === "plain_text" ? esc(obj.text) : mrkdwn(obj.text)) : ""; }

// --- Block Kit ---------------------------------------------------------------------------------------

function renderBlocks(message, container) {
  for (const block of message.blocks || []) {
    const el = document.createElement("div");
    el.className = `block ${block.type}`;
    if (block.block_id) el.dataset.blockId = block.block_id;
    if (block.type === "section") {
      el.innerHTML = textOf(block.text) + (block.fields || []).map((f) => `<div>${textOf(f)}</div>`).join("");
    } else if (block.type === "context") {
      el.innerHTML = (block.elements || []).map((e) => (e.type === "image" ? "" : textOf(e))).join(" · ");
    } else if (block.type === "header") {
      el.innerHTML = textOf(block.text);
    } else if (block.type === "divider") {
      el.innerHTML = "<hr>";
    } else if (block.type === "actions") {
      for (const element of block.elements || []) el.appendChild(renderElement(message, block, element));
    } else if (block.type === "input") {
      const label = document.createElement("label");
      label.innerHTML = textOf(block.label);
      el.appendChild(label);
      el.appendChild(renderElement(message, block, block.element));
    }
    container.appendChild(el);
  }
}

function formKey(message, block) { return `${message.ts}|${block.block_id}`; }

function renderElement(message, block, element) {
  if (element.type === "button") {
    const button = document.createElement("button");
    button.className = `btn ${element.style || ""}`;
    button.textContent = element.text.text;
    button.dataset.actionId = element.action_id;
    button.addEventListener("click", () => press(message, block, element));
    return button;
  }
  if (element.type === "static_select") {
    const select = document.createElement("select");
    select.dataset.actionId = element.action_id;
    select.innerHTML = `<option value="">${esc(element.placeholder ? element.placeholder.text : "Choose")}</option>` +
      element.options.map((o) => `<option value="${esc(o.value)}">${esc(o.text.text)}</option>`).join("");
    const key = formKey(message, block);
    const saved = state.formValues.get(key);
    if (saved) select.value = saved;
    select.addEventListener("change", () => state.formValues.set(key, select.value));
    return select;
  }
  if (element.type === "plain_text_input") {
    const input = document.createElement("input");
    input.dataset.actionId = element.action_id;
    const key = formKey(message, block);
    input.value = state.formValues.get(key) || "";
    input.addEventListener("input", () => state.formValues.set(key, input.value));
    return input;
  }
  const span = document.createElement("span");
  span.textContent = `[${element.type}]`;
  return span;
}

// The values of every input block in the message, as Slack puts them in state.values.
function formValues(message) {
  const values = {};
  for (const block of message.blocks || []) {
    if (block.type !== "input") continue;
    const chosen = state.formValues.get(formKey(message, block)) || "";
    const element = block.element;
    values[block.block_id] = { [element.action_id]: element.type === "static_select"
      ? { type: "static_select", selected_option: chosen ? { value: chosen, text: { type: "plain_text", text: chosen } } : null }
      : { type: element.type, value: chosen } };
  }
  return values;
}

async function press(message, block, element) {
  if (element.confirm && !(await confirmDialog(element.confirm, element.style))) return;
  await post("/demo/click", { user: state.me, channel: message.channel, message_ts: message.ts, block_id: block.block_id,
    action_id: element.action_id, value: element.value, values: formValues(message) });
  if (message.ts === "home") openHome();  // the bot published the Home view again: show it
}

function confirmDialog(confirm, style) {
  return new Promise((resolve) => {
    const dialog = document.getElementById("dialog");
    document.getElementById("dialog-title").textContent = confirm.title ? confirm.title.text : "Are you sure?";
    document.getElementById("dialog-text").innerHTML = textOf(confirm.text);
    const yes = document.getElementById("dialog-confirm");
    const no = document.getElementById("dialog-deny");
    yes.textContent = confirm.confirm ? confirm.confirm.text : "Yes";
    yes.className = confirm.style || style || "primary";
    no.textContent = confirm.deny ? confirm.deny.text : "Cancel";
    dialog.hidden = false;
    const close = (answer) => { dialog.hidden = true; yes.onclick = no.onclick = null; resolve(answer); };
    yes.onclick = () => close(true);
    no.onclick = () => close(false);
  });
}

// A modal the bot opened (views.open) for whoever clicked: its inputs, sent back as Slack's view_submission.
// A refusal comes back as Slack's response_action "errors" and is shown under its input, the modal left open.
function openModal(view) {
  const box = document.getElementById("modal");
  document.getElementById("modal-title").textContent = view.title.text;
  const body = document.getElementById("modal-body");
  body.replaceChildren();
  for (const block of view.blocks.filter((b) => b.type === "input")) {
    const field = document.createElement("div");
    field.className = "modal-field";
    field.dataset.blockId = block.block_id;
    let inner = `<label>${esc(block.label.text)}</label>`;
    if (block.element.type === "radio_buttons") {
      inner += block.element.options.map((o) => `<label class="radio"><input type="radio" name="${esc(block.block_id)}"
        value="${esc(o.value)}"> ${esc(o.text.text)}</label>`).join("");
    } else {
      inner += `<textarea maxlength="${Number(block.element.max_length) || 3000}"></textarea>`;
    }
    field.innerHTML = inner + '<div class="modal-error"></div>';
    body.appendChild(field);
  }
  const submit = document.getElementById("modal-submit");
  const close = document.getElementById("modal-close");
  submit.textContent = view.submit ? view.submit.text : "Submit";
  close.textContent = view.close ? view.close.text : "Cancel";
  box.hidden = false;
  close.onclick = () => { box.hidden = true; };
  submit.onclick = async () => {
    const values = {};
    for (const block of view.blocks.filter((b) => b.type === "input")) {
      const field = body.querySelector(`[data-block-id="${CSS.escape(block.block_id)}"]`);
      const element = block.element;
      if (element.type === "radio_buttons") {
        const chosen = field.querySelector("input:checked");
        values[block.block_id] = { [element.action_id]: { type: element.type,
          selected_option: chosen ? { value: chosen.value } : null } };
      } else {
        values[block.block_id] = { [element.action_id]: { type: element.type, value: field.querySelector("textarea").value || null } };
      }
    }
    const answer = await post("/demo/submit", { user: state.me, view_id: view.id, values });
    for (const error of body.querySelectorAll(".modal-error")) error.textContent = "";
    if (answer.ok) { box.hidden = true; return; }
    for (const [blockId, text] of Object.entries(answer.errors || { [view.blocks[0].block_id]: answer.error })) {
      const field = body.querySelector(`[data-block-id="${CSS.escape(blockId)}"] .modal-error`);
      if (field) field.textContent = text;
    }
  };
}

// --- messages and threads -----------------------------------------------------------------------------

function messageElement(message, { inThread }) {
  const row = document.createElement("div");
  row.className = "msg" + (message.ephemeral ? " ephemeral" : "");
  row.dataset.ts = message.ts;
  const webhook = message.subtype === "bot_message";  // an alerting tool's incoming webhook, not OpsPilot
  const author = webhook ? message.username : message.bot || message.ephemeral ? state.bot.id : message.user;
  const avatar = document.createElement("div");
  avatar.className = "avatar" + (author === state.bot.id || webhook ? " bot" : "");
  avatar.textContent = nameOf(author).slice(0, 1);
  const body = document.createElement("div");
  body.className = "body";
  const time = new Date(parseFloat(message.ts) * 1000);
  body.innerHTML = `<span class="author">${esc(nameOf(author))}</span>` +
    (author === state.bot.id || webhook ? '<span class="badge app">APP</span>' : "") +
    `<span class="time">${esc(Number.isNaN(time.getTime()) ? "" : time.toLocaleTimeString())}</span>`;
  if (message.ephemeral) body.innerHTML += '<div class="only-you">Only visible to you</div>';
  const content = document.createElement("div");
  content.className = "text";
  if (message.stream) renderStream(message, content);
  if (message.blocks && message.blocks.length) renderBlocks(message, content);
  else if (!message.stream) content.innerHTML = mrkdwn(message.text);
  for (const a of message.attachments || []) {  // how alerting tools post: a coloured box with a title
    const box = document.createElement("div");
    box.className = "attachment";
    box.style.borderLeftColor = a.color === "danger" ? "#e01e5a" : a.color === "good" ? "#2eb67d" : "#ddd";
    box.innerHTML = (a.title ? `<div class="title">${esc(a.title)}</div>` : "") + mrkdwn(a.text || "") +
      (a.fields || []).map((f) => `<div><b>${esc(f.title)}</b>: ${esc(f.value)}</div>`).join("");
    content.appendChild(box);
  }
  for (const f of message.files || []) {  // shared with the message (files.completeUploadExternal): opens as text
    const file = document.createElement("a");
    file.className = "file";
    file.dataset.testid = "file";
    file.href = `/demo/files/${encodeURIComponent(f.id)}`;
    file.target = "_blank";
    file.rel = "noopener";
    file.textContent = `📄 ${f.title || f.name}`;
    const about = document.createElement("small");
    about.textContent = `${f.name} · ${f.size} bytes`;
    file.appendChild(about);
    content.appendChild(file);
  }
  body.appendChild(content);
  if (!inThread && !message.ephemeral) {
    const replies = threadOf(message.ts).filter((m) => !m.ephemeral).length;  // as Slack counts: no ephemerals
    if (replies) {
      const link = document.createElement("div");
      link.className = "replies";
      link.dataset.testid = "replies";
      link.textContent = `${replies} ${replies === 1 ? "reply" : "replies"}`;
      link.addEventListener("click", () => openThread(message.ts));
      body.appendChild(link);
    }
  }
  row.appendChild(avatar);
  row.appendChild(body);
  return row;
}

function threadOf(ts) {
  return [...state.messages.values()].filter((m) => m.thread_ts === ts && m.ts !== ts)
    .concat(state.ephemerals.filter((e) => e.user === state.me && e.thread_ts === ts))
    .sort((a, b) => parseFloat(a.ts) - parseFloat(b.ts));
}

function render() {
  const channel = document.getElementById("messages");
  const here = (m) => m.channel === state.channel;
  const roots = [...state.messages.values()].filter((m) => here(m) && (!m.thread_ts || m.thread_ts === m.ts))
    .concat(state.ephemerals.filter((e) => here(e) && e.user === state.me && !e.thread_ts))
    .sort((a, b) => parseFloat(a.ts) - parseFloat(b.ts));
  channel.replaceChildren(...roots.map((m) => messageElement(m, { inThread: false })));
  channel.scrollTop = channel.scrollHeight;
  const pane = document.getElementById("thread");
  if (state.openThread) {
    const root = state.messages.get(state.openThread);
    const list = document.getElementById("thread-messages");
    const items = (root ? [root] : []).concat(threadOf(state.openThread));
    list.replaceChildren(...items.map((m) => messageElement(m, { inThread: true })));
    list.scrollTop = list.scrollHeight;
    pane.hidden = false;
  } else {
    pane.hidden = true;
  }
}

function openThread(ts) { state.openThread = ts; render(); }

function renderChannels() {
  const box = document.getElementById("channels");
  box.replaceChildren(...state.channels.map((c) => {
    const item = document.createElement("div");
    item.className = "channel" + (c.id === state.channel ? " active" : "");
    item.dataset.testid = `channel-${c.name}`;
    item.textContent = `# ${c.name}`;
    item.addEventListener("click", () => switchChannel(c.id));
    return item;
  }));
  const current = state.channels.find((c) => c.id === state.channel) || { name: "", topic: "" };
  document.getElementById("channel-name").textContent = `# ${current.name}`;
  document.getElementById("channel-topic").textContent = current.topic;
  document.getElementById("composer").placeholder = `Message #${current.name} — mention @OpsPilot to ask`;
  document.getElementById("alert-controls").hidden = current.name !== "ops-alerts";
  document.title = `OpsPilot demo — #${current.name}`;
  renderCanvasTabs();
}

function channelName(id) { return (state.channels.find((c) => c.id === id) || { name: id }).name; }

function home() { return !document.getElementById("home").hidden; }

// A link to a message of this page (App Home's "open the thread", a 👎's "the thread", a permalink) opens it here,
// as Slack's client would: the demo has no slack.com to go to.
function followPermalink(event) {
  const link = event.target.closest && event.target.closest("a[href]");
  const found = link && /\/archives\/([A-Z0-9]+)\/p(\d+)(\d{6})(?:\?thread_ts=([\d.]+))?/.exec(link.href);
  if (!found || !state.channels.some((c) => c.id === found[1])) return;
  event.preventDefault();
  const ts = `${found[2]}.${found[3]}`;
  const message = state.messages.get(ts);
  switchChannel(found[1]);
  openThread(found[4] || (message && message.thread_ts) || ts);
}

function switchChannel(id) {
  state.channel = id;
  state.openThread = null;
  closeCanvas();
  showHome(false);
  renderChannels();
  render();
}

// App Home: the page sends app_home_opened as Slack would; the bot publishes the view (views.publish).
function showHome(on) {
  if (on) closeCanvas();
  document.getElementById("home").hidden = !on;
  document.getElementById("messages").hidden = on;
  document.getElementById("composer-form").hidden = on;
  document.getElementById("home-link").classList.toggle("active", on);
  if (on) {
    document.getElementById("canvas-tabs").hidden = true;
    document.getElementById("channel-name").textContent = "OpsPilot";
    document.getElementById("channel-topic").textContent = "Home";
    document.getElementById("alert-controls").hidden = true;
    for (const c of document.querySelectorAll("#channels .channel")) c.classList.remove("active");
  }
}

async function openHome() {
  state.openThread = null;
  render();
  showHome(true);
  const answer = await post("/demo/home", { user: state.me });
  const box = document.getElementById("home");
  box.replaceChildren();
  if (answer.ok) renderBlocks({ ts: "home", blocks: answer.view.blocks }, box);
  else box.textContent = answer.error || "OpsPilot did not publish a Home view.";
}

function renderUsers() {
  const box = document.getElementById("users");
  box.replaceChildren(...Object.entries(state.users).map(([id, user]) => {
    const button = document.createElement("button");
    button.className = "user" + (id === state.me ? " active" : "");
    button.dataset.user = id;
    button.innerHTML = `${esc(user.name)}<small>${esc(user.role)}</small>`;
    button.addEventListener("click", () => {
      state.me = id;
      renderUsers();
      render();
      if (!document.getElementById("home").hidden) openHome();  // each person has their own Home
    });
    return button;
  }));
}

async function post(path, body) {
  const response = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  return response.json();
}

let markReady;
const ready = new Promise((resolve) => { markReady = resolve; });  // the first snapshot read: the channel known

async function say(text, threadTs) {
  if (!text.trim()) return;
  await ready;
  const answer = await post("/demo/say", { user: state.me, channel: state.channel, text, thread_ts: threadTs });
  if (answer.ok && !threadTs) openThread(answer.ts);
}

function apply(change) {
  if (change.type === "message") state.messages.set(change.message.ts, change.message);
  if (change.type === "deleted") state.messages.delete(change.ts);
  if (change.type === "ephemeral") {  // the same one read in a snapshot and in the feed is shown once
    const shown = JSON.stringify({ ...change.ephemeral, ephemeral: true });
    if (!state.ephemerals.some((e) => JSON.stringify({ ...e, ephemeral: true }) === shown)) {
      state.ephemerals.push({ ...change.ephemeral, ephemeral: true });
    }
  }
  if (change.type === "modal" && change.modal.user === state.me) openModal(change.modal.view);
  if (change.type === "canvas") {  // created or edited: its tab appears, an open canvas shows the new content
    state.canvases.set(change.canvas.id, change.canvas);
    renderCanvasTabs();
    if (change.canvas.id === state.openCanvas) renderCanvas();
    return false;
  }
  return true;
}

async function load() {
  const initial = await (await fetch("/demo/state")).json();
  state.users = initial.users;
  state.bot = initial.bot;
  state.channels = initial.channels;
  state.channel = state.channel || initial.channel.id;
  state.messages = new Map(initial.messages.map((m) => [m.ts, m]));
  for (const c of initial.canvases) state.canvases.set(c.id, c);
  state.ephemerals = initial.ephemerals.map((e) => ({ ...e, ephemeral: true }));
  document.getElementById("model").innerHTML = `model: ${esc(initial.model)} ` +
    (initial.scripted ? '<span class="badge scripted" data-testid="scripted">SCRIPTED</span>' : "");
  document.getElementById("store").innerHTML = `store: ${esc(initial.store)} ` +
    (initial.store.includes("NOT durable") ? '<span class="badge volatile">NOT DURABLE</span>' : "");
}

async function start() {
  wire();  // typing and clicking work at once, before the feed and the snapshot come
  // The feed first, then the snapshot: a change made between the two is in the feed, applied after the snapshot
  // (in the order it came); a reconnected feed reads the snapshot again (what it missed meanwhile).
  let loaded = false;
  const pending = [];
  const feed = new EventSource("/demo/feed");
  feed.onmessage = (event) => {
    const change = JSON.parse(event.data);
    if (!loaded) { pending.push(change); return; }
    if (apply(change)) render();
  };
  await new Promise((resolve) => { feed.onopen = resolve; feed.onerror = resolve; });
  await load();
  loaded = true;
  for (const change of pending.splice(0)) apply(change);
  markReady();
  renderUsers();
  renderChannels();
  render();
  feed.onopen = async () => {
    loaded = false;
    await load();
    loaded = true;
    for (const change of pending.splice(0)) apply(change);
    render();
  };
}

function wire() {
  document.getElementById("composer-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const box = document.getElementById("composer");
    say(box.value, null);
    box.value = "@OpsPilot ";
  });
  document.getElementById("thread-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const box = document.getElementById("thread-composer");
    say(box.value, state.openThread);
    box.value = "";
  });
  for (const id of ["composer", "thread-composer"]) {
    document.getElementById(id).addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); event.target.form.requestSubmit(); }
    });
  }
  document.addEventListener("click", followPermalink);
  document.getElementById("close-thread").addEventListener("click", () => { state.openThread = null; render(); });
  document.getElementById("close-canvas").addEventListener("click", closeCanvas);
  document.getElementById("home-link").addEventListener("click", openHome);
  document.getElementById("fire-alert").addEventListener("click", () => post("/demo/alert", { status: "firing" }));
  document.getElementById("resolve-alert").addEventListener("click", () => post("/demo/alert", { status: "resolved" }));
  const composer = document.getElementById("composer");
  if (!composer.value) composer.value = "@OpsPilot ";  // not over what someone typed while the page loaded
}

start();
