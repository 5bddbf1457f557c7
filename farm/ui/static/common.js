// Shared by every page: the API token (from the login cookie), API calls, confirmation, formatting.
"use strict";
const farm = {
  token() {
    const m = document.cookie.match(/(?:^|; )farm_token=([^;]*)/);
    return m ? decodeURIComponent(m[1]) : "";
  },
  async get(path) {
    const r = await fetch(path, { headers: farm.headers() });
    if (!r.ok) throw new Error(path + ": " + r.status);
    return r.json();
  },
  headers(extra) {
    const h = Object.assign({}, extra || {});
    if (farm.token()) h.Authorization = "Bearer " + farm.token();
    return h;
  },
  // An action: asks first, then calls the API endpoint the CLI and trainers use.
  async act(question, path, body) {
    if (!(await farm.confirm(question))) return null;
    const r = await fetch(path, { method: "POST", headers: farm.headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body) });
    const answer = await r.json().catch(() => ({}));
    farm.status(r.ok ? path + " ok" : path + " failed: " + (answer.detail || r.status));
    return r.ok ? answer : null;
  },
  confirm(question) {
    const dialog = document.getElementById("confirm");
    document.getElementById("confirm-text").textContent = question;
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
      dialog.showModal();
    });
  },
  status(text) { document.getElementById("status-line").textContent = text; },
  el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
    return node;
  },
  num(x, digits) { return x === null || x === undefined ? "–" : Number(x).toFixed(digits === undefined ? 2 : digits); },
  // A time ahead of this clock (a worker's clock a little fast) reads "0 s ago", never negative.
  ago(t) { if (!t) return "–"; const s = Math.max(0, Date.now() / 1000 - t); return s < 90 ? s.toFixed(0) + " s ago" : (s / 60).toFixed(0) + " min ago"; },
  state(s) { return farm.el("span", { class: "state " + s }, s); },
  rows(table, rows) { const body = table.tBodies[0] || table; body.replaceChildren(...rows); },
};
