#include "server/web_page.h"

namespace kvserve::server {

// One self-contained page (no build step, no CDN): the chat streams from /v1/chat/completions, the
// block map polls /v1/kv/blocks every 500 ms and paints one canvas cell per KV block.
std::string_view web_page_html() {
  static constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvserve</title>
<style>
  :root { font-family: system-ui, sans-serif; color: #222; background: #fafafa; }
  body { margin: 0; display: grid; grid-template-columns: minmax(320px, 1fr) minmax(320px, 1fr); gap: 16px; padding: 16px; height: calc(100vh - 32px); box-sizing: border-box; }
  section { background: #fff; border: 1px solid #ddd; border-radius: 8px; padding: 12px; display: flex; flex-direction: column; min-height: 0; }
  h2 { margin: 0 0 8px; font-size: 16px; }
  #messages { flex: 1; overflow-y: auto; border: 1px solid #eee; border-radius: 6px; padding: 8px; background: #fcfcfc; }
  .msg { margin: 6px 0; white-space: pre-wrap; line-height: 1.35; }
  .msg.user::before { content: "you: "; font-weight: 600; }
  .msg.assistant::before { content: "model: "; font-weight: 600; color: #2a6; }
  .msg.error { color: #b00; }
  .msg.empty { color: #888; font-style: italic; }
  form { display: flex; gap: 6px; margin-top: 8px; }
  #chat-input { flex: 1; min-height: 48px; resize: vertical; font: inherit; }
  .row { display: flex; gap: 8px; align-items: center; font-size: 13px; margin-bottom: 6px; flex-wrap: wrap; }
  .row input { width: 70px; }
  #api-key { width: 160px; }
  #kv-canvas { border: 1px solid #eee; border-radius: 6px; align-self: start; image-rendering: pixelated; }
  #kv-stats { font-size: 13px; margin-bottom: 8px; font-variant-numeric: tabular-nums; }
  .legend span { display: inline-block; width: 12px; height: 12px; vertical-align: middle; margin: 0 4px 0 10px; border-radius: 2px; }
</style>
</head>
<body>
<section>
  <h2>Chat</h2>
  <div class="row">
    <label>max tokens <input id="max-tokens" type="number" value="256" min="1"></label>
    <label>temperature <input id="temperature" type="number" value="0.7" min="0" max="2" step="0.1"></label>
    <label>API key <input id="api-key" type="password" placeholder="(none)"></label>
    <button id="clear" type="button">clear</button>
  </div>
  <div id="messages"></div>
  <form id="chat-form">
    <textarea id="chat-input" placeholder="Say something… (Enter sends, Shift+Enter for a new line)"></textarea>
    <button id="send" type="submit">Send</button>
  </form>
</section>
<section>
  <h2>KV cache</h2>
  <div id="kv-stats">loading…</div>
  <div class="row legend">
    <span style="background:#e8e8e8"></span>free
    <span style="background:#9cc3e6"></span>cached prefix
    <span style="background:linear-gradient(90deg,#e66,#6c6,#66e)"></span>owned (one colour per request)
    <span style="background:#333"></span>shared border
  </div>
  <canvas id="kv-canvas" width="480" height="120"></canvas>
</section>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const conversation = [];
const keyInput = $("api-key");
keyInput.value = localStorage.getItem("kvserve-api-key") || "";
keyInput.addEventListener("change", () => localStorage.setItem("kvserve-api-key", keyInput.value));

function headers() {
  const h = { "Content-Type": "application/json" };
  if (keyInput.value) h["Authorization"] = "Bearer " + keyInput.value;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("messages").appendChild(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

async function send(text) {
  conversation.push({ role: "user", content: text });
  addMessage("user", text);
  const out = addMessage("assistant", "");
  $("send").disabled = true;
  let answer = "";
  try {
    const resp = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(),
      body: JSON.stringify({ messages: conversation, stream: true,
                             max_tokens: Number($("max-tokens").value) || 256,
                             temperature: Number($("temperature").value) }),
    });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || ("HTTP " + resp.status));
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;  // keep-alive comments and the like
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message);
          for (const choice of chunk.choices || []) {
            if (choice.delta && choice.delta.content) {
              answer += choice.delta.content;
              out.textContent = answer;
              $("messages").scrollTop = $("messages").scrollHeight;
            }
          }
        }
      }
    }
    // A model may end its answer at the first token: say so rather than leave an empty bubble.
    if (!answer) { out.classList.add("empty"); out.textContent = "(no text: the model ended its answer at once)"; }
    conversation.push({ role: "assistant", content: answer });
  } catch (e) {
    out.classList.add("error");
    out.textContent = answer + " [" + e.message + "]";
    conversation.pop();
  } finally {
    $("send").disabled = false;
  }
}

$("chat-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("chat-input").value.trim();
  if (!text || $("send").disabled) return;
  $("chat-input").value = "";
  send(text);
});
$("chat-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("chat-form").requestSubmit(); }
});
$("clear").addEventListener("click", () => { conversation.length = 0; $("messages").textContent = ""; });

// Owners are small integers; the golden angle spreads neighbouring numbers across the hue circle.
function ownerColour(owner) { return "hsl(" + ((owner * 137.508) % 360).toFixed(1) + ",65%,55%)"; }

window.kvState = { updates: 0, last: null };
function drawBlocks(map) {
  const canvas = $("kv-canvas");
  const n = map.owner.length;
  const width = Math.max(240, canvas.parentElement.clientWidth - 26);
  const cell = n > 4096 ? 4 : n > 1024 ? 7 : n > 256 ? 11 : 16;
  const cols = Math.max(1, Math.floor(width / cell));
  const rows = Math.max(1, Math.ceil(n / cols));
  if (canvas.width !== cols * cell || canvas.height !== rows * cell) { canvas.width = cols * cell; canvas.height = rows * cell; }
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (let i = 0; i < n; i++) {
    const x = (i % cols) * cell, y = Math.floor(i / cols) * cell;
    const owner = map.owner[i];
    ctx.fillStyle = owner === -1 ? "#e8e8e8" : owner === -2 ? "#9cc3e6" : ownerColour(owner);
    ctx.fillRect(x, y, cell - 1, cell - 1);
    if (map.shared[i] && cell >= 7) { ctx.strokeStyle = "#333"; ctx.lineWidth = 1.5; ctx.strokeRect(x + 1, y + 1, cell - 3, cell - 3); }
  }
}

async function refreshBlocks() {
  try {
    const resp = await fetch("/v1/kv/blocks", { headers: headers() });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    const map = await resp.json();
    drawBlocks(map);
    const pct = (x) => (100 * x).toFixed(1) + "%";
    $("kv-stats").textContent =
      map.num_blocks + " blocks × " + map.block_size + " tokens · used " + map.used_blocks +
      " (" + pct(map.kv_usage) + ") · cached " + map.cached_blocks + " · free " + map.free_blocks +
      " · prefix hit rate " + pct(map.prefix_hit_rate) + " · running " + map.running + " · waiting " + map.waiting +
      " · preemptions " + map.preemptions;
    window.kvState.updates++;
    window.kvState.last = map;
  } catch (e) {
    $("kv-stats").textContent = "block map unavailable: " + e.message;
  }
}
refreshBlocks();
setInterval(refreshBlocks, 500);
</script>
</body>
</html>
)HTML";
  return kPage;
}

}  // namespace kvserve::server
