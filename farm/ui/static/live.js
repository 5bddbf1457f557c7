// The live farm page: polls /ui/api/live every second; throughput is the change in stage counters.
"use strict";
let previous = null;

function render(s) {
  const now = Date.now() / 1000;
  document.getElementById("stages").replaceChildren(...s.stages.map((st) => {
    let rate = null;
    if (previous) {
      const before = previous.snap.stages.find((x) => x.stage === st.stage);
      rate = (st.completed - before.completed) / Math.max(now - previous.at, 0.001);
    }
    return farm.el("div", { class: "card", "data-stage": st.stage },
      farm.el("h3", {}, st.stage),
      farm.el("div", {}, "queue ", farm.el("span", { class: "big queue-depth" }, st.queue_depth),
        "  in flight ", farm.el("span", { class: "big in-flight" }, st.in_flight)),
      farm.el("div", { class: "mute" }, `${farm.num(rate, 1)} /s · ${st.completed} done · mean ${farm.num(st.mean_s)} s`));
  }));
  const el = farm.el;
  farm.rows(document.getElementById("states"), Object.entries(s.jobs).map(([k, v]) =>
    el("tr", {}, el("td", {}, farm.state(k)), el("td", { class: "count-" + k }, v))));
  farm.rows(document.getElementById("ready"), Object.keys(s.ready).length
    ? Object.entries(s.ready).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v)))
    : [el("tr", {}, el("td", { class: "mute" }, "no READY slots held"))]);
  farm.rows(document.getElementById("workers"), s.workers.map((w) => el("tr", {},
    el("td", {}, w.hostname), el("td", {}, w.node || "–"), el("td", {}, (w.queues || []).join(", ")),
    el("td", {}, w.concurrency), el("td", {}, farm.ago(w.seen_at)),
    el("td", { class: "warm-pool" }, w.warm_pool
      ? `${w.warm_pool.ready} ready · ${w.warm_pool.hits} claimed · ${w.warm_pool.misses} cold`
      : "–"))));
  farm.rows(document.getElementById("backends"), s.backends.map((b) => el("tr", { "data-address": b.address },
    el("td", {}, b.address), el("td", {}, b.kind),
    el("td", { class: b.healthy ? "ok" : "bad" }, b.healthy ? "healthy" : "unhealthy"),
    el("td", {}, b.assigned), el("td", {}, b.in_flight), el("td", {}, b.weight),
    el("td", {}, el("button", { class: "danger remove-backend", onclick: () => removeBackend(b.address) }, "remove")))));
  document.getElementById("failure-window").textContent = `in the newest ${s.failures.window} jobs`;
  farm.rows(document.getElementById("failure-classes"), Object.entries(s.failures.by_class).map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", {}, v))));
  farm.rows(document.getElementById("failures"), s.failures.recent.map((f) => el("tr", {},
    el("td", {}, el("a", { href: "/ui/jobs/" + encodeURIComponent(f.job_id) }, f.job_id)),
    el("td", {}, farm.state(f.state)), el("td", {}, f.error_stage + ":" + f.error_type), el("td", {}, farm.ago(f.finished_at)))));
  document.getElementById("live-updated").textContent = (s.accepting ? "accepting work" : "STOPPED") +
    " · updated " + new Date().toLocaleTimeString();
  previous = { snap: s, at: now };
}

async function removeBackend(address) {
  if (await farm.act(`Remove backend ${address} from the pool? Jobs pinned to it move to the others.`,
    "/remove_llm_server", { address })) poll();
}

document.getElementById("add-backend").addEventListener("submit", async (e) => {
  e.preventDefault();
  const address = document.getElementById("backend-address").value.trim();
  const kind = document.getElementById("backend-kind").value;
  if (address && await farm.act(`Add backend ${address} (${kind}) to the pool?`, "/add_llm_server", { address, kind })) poll();
});

async function poll() {
  try { render(await farm.get("/ui/api/live")); } catch (err) { farm.status(String(err)); }
}
poll();
setInterval(poll, 1000);
