// Trajectory page: a trace's tokens are fetched when its <details> opens, and each loss-mask run (a turn)
// builds its token spans only when it scrolls into view, so a 30k-token job never blocks the page.
"use strict";
const traj = {
  // logprob 0 → pale, ≤ -5 → saturated: low-probability samples stand out.
  color(lp) {
    const x = Math.min(1, Math.max(0, -lp / 5));
    return "hsl(" + (215 - 215 * x) + ",85%," + (88 - 30 * x) + "%)";
  },
  renderSegment(box, seg) {
    const frag = document.createDocumentFragment();
    for (let i = 0; i < seg.ids.length; i++) {
      const s = document.createElement("span");
      s.className = "t m" + seg.mask;
      s.textContent = seg.text[i];
      s.dataset.lp = seg.logprobs[i];
      s.dataset.id = seg.ids[i];
      s.dataset.pos = seg.start + i;
      if (seg.mask) s.style.background = traj.color(seg.logprobs[i]);
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
      const label = seg.mask ? "sampled turn" : "farm-appended (tool result / template)";
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
