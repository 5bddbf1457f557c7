// Trajectory page: it opens showing the trajectory. The conversation is in the page; the first traces'
// token views fetch their tokens as the page loads (a later trace's when unfolded), and each loss-mask
// run (a turn) builds its token spans only when it scrolls into view, so a 30k-token job never blocks
// the page. Only very long parts are folded, each behind a summary line saying what it hides.
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
  // A part shown in full, or folded inside a <details class="more"> whose summary says how much it is.
  part(long, what, body) {
    if (!long) return [body];
    return [farm.el("details", { class: "more" }, farm.el("summary", {}, what + " folded: show it"), body)];
  },
  slice(seg, a, b) {
    return { mask: seg.mask, start: seg.start + a, ids: seg.ids.slice(a, b), text: seg.text.slice(a, b),
      logprobs: seg.logprobs.slice(a, b), policy_version: seg.policy_version };
  },
  box(seg, pending) {
    const box = farm.el("div", { class: "tokens seg", "data-mask": seg.mask, "data-start": seg.start,
      style: "min-height:" + Math.min(400, 1 + Math.ceil(seg.ids.length / 60)) * 1.7 + "em" });
    box.seg = seg;
    pending.set(box, seg);
    return box;
  },
  async open(details) {
    if (details.dataset.loaded) return;
    details.dataset.loaded = "1";
    const t0 = performance.now();
    const data = await farm.get("/ui/api/jobs/" + encodeURIComponent(details.dataset.job) + "/traces/" + details.dataset.index);
    details.traceData = data;
    const turns = details.querySelector(".turns");
    turns.classList.remove("mute");
    const lines = data.prompt_text.split("\n").length;
    const longPrompt = lines > Number(details.dataset.longLines) || data.prompt_text.length > Number(details.dataset.longChars);
    const boxes = [farm.el("div", { class: "mute" }, "prompt"),
      ...traj.part(longPrompt, "prompt (" + lines + " lines)", farm.el("pre", { class: "text prompt" }, data.prompt_text))];
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
      const head = farm.el("div", { class: "mute" }, "#" + seg.start + " · " + seg.ids.length + " tokens · " + label);
      const long = Number(details.dataset.longTokens), preview = Number(details.dataset.previewTokens);
      if (seg.ids.length <= long) boxes.push(head, traj.box(seg, pending));
      else boxes.push(head, traj.box(traj.slice(seg, 0, preview), pending),
        ...traj.part(true, (seg.ids.length - preview) + " more tokens of this turn", traj.box(traj.slice(seg, preview), pending)));
    }
    turns.replaceChildren(...boxes);
    for (const box of pending.keys()) seen.observe(box);
    details.dataset.renderMs = (performance.now() - t0).toFixed(1);
  },
  // The page's two controls: unfold every folded part (token views included), or fold the long ones again.
  unfoldAll() {
    for (const d of document.querySelectorAll("details")) d.open = true;
  },
  foldLong() {
    for (const d of document.querySelectorAll("details.more")) d.open = false;
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
  for (const d of document.querySelectorAll("details.trace-tokens")) {
    d.addEventListener("toggle", () => { if (d.open) traj.open(d); });
    if (d.open) traj.open(d);
  }
  const unfold = document.getElementById("unfold-all");
  if (unfold) unfold.addEventListener("click", traj.unfoldAll);
  const fold = document.getElementById("fold-long");
  if (fold) fold.addEventListener("click", traj.foldLong);
  document.addEventListener("mouseover", traj.tip);
});
