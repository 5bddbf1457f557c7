// Trajectory page: a trace's tokens are fetched when its <details> opens, and each loss-mask run (a turn)
// builds its token spans only when it scrolls into view, so a 30k-token job never blocks the page.
"use strict";
const traj = {
  // Ten heat classes (ui.css .h0-.h9): logprob 0 → pale blue, ≤ -5 → red. Classes, not inline styles:
  // 30k style attributes cost the browser about twice as much to build.
  heat(lp) { return Math.min(9, Math.max(0, Math.floor(-lp * 2))); },
  renderSegment(box, seg) {
    const frag = document.createDocumentFragment();
    for (let i = 0; i < seg.ids.length; i++) {
      const s = document.createElement("span");
      s.className = seg.mask ? "t m1 h" + traj.heat(seg.logprobs[i]) : "t m0";
      s.textContent = seg.text[i];
      s.dataset.lp = seg.logprobs[i];
      s.dataset.id = seg.ids[i];
      s.dataset.pos = seg.start + i;
      frag.append(s);
    }
    box.replaceChildren(frag);
    box.dataset.rendered = "1";
  },
  async open(details) {
    if (details.dataset.loaded) return;
    details.dataset.loaded = "1";
    const t0 = performance.now();
    const data = await farm.get("/ui/api/jobs/" + encodeURIComponent(details.dataset.job) + "/traces/" + details.dataset.index);
    details.traceData = data;
    const turns = details.querySelector(".turns");
    turns.classList.remove("mute");
    const prompt = farm.el("details", { class: "prompt" }, farm.el("summary", {}, "prompt"),
      farm.el("pre", { class: "text" }, data.prompt_text));
    const boxes = [prompt];
    const pending = new Map();
    const seen = new IntersectionObserver((entries) => {
      for (const e of entries) if (e.isIntersecting && pending.has(e.target)) {
        traj.renderSegment(e.target, pending.get(e.target));
        pending.delete(e.target);
        seen.unobserve(e.target);
      }
    }, { rootMargin: "400px" });
    for (const seg of data.segments) {
      const version = seg.policy_version === null || seg.policy_version === undefined ? "" : " · policy v" + seg.policy_version;
      const label = seg.mask ? "sampled turn" + version : "farm-appended (tool result / template)";
      const box = farm.el("div", { class: "tokens seg", "data-mask": seg.mask, "data-start": seg.start,
        style: "min-height:" + Math.min(400, 1 + Math.ceil(seg.ids.length / 60)) * 1.7 + "em" });
      const head = farm.el("div", { class: "mute" }, "#" + seg.start + " · " + seg.ids.length + " tokens · " + label);
      pending.set(box, seg);
      boxes.push(head, box);
    }
    turns.replaceChildren(...boxes);
    for (const box of pending.keys()) seen.observe(box);
    details.dataset.renderMs = (performance.now() - t0).toFixed(1);
  },
  tip(ev) {
    const tip = document.getElementById("tip");
    const t = ev.target;
    if (!t.classList || !t.classList.contains("t")) { tip.style.display = "none"; return; }
    tip.textContent = JSON.stringify(t.textContent) + "  id " + t.dataset.id + "  pos " + t.dataset.pos +
      "\nlogprob " + Number(t.dataset.lp).toFixed(4) + (t.classList.contains("m1") ? "  (trained)" : "  (mask 0)");
    tip.style.left = ev.clientX + 12 + "px";
    tip.style.top = ev.clientY + 14 + "px";
    tip.style.display = "block";
  },
};
document.addEventListener("DOMContentLoaded", () => {
  for (const d of document.querySelectorAll("details.trace-tokens"))
    d.addEventListener("toggle", () => { if (d.open) traj.open(d); });
  document.addEventListener("mouseover", traj.tip);
});
