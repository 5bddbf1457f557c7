// Jobs list and group pages: cancel actions (through POST /cancel) and, on the newest page, a live table.
"use strict";
document.addEventListener("click", async (e) => {
  const button = e.target.closest("button.cancel-job");
  if (!button) return;
  const job = button.dataset.job;
  if (await farm.act(`Cancel job ${job}?`, "/cancel", { job_id: job })) setTimeout(refresh, 300);
});

const group = document.getElementById("cancel-group");
if (group) group.addEventListener("click", async () => {
  const id = group.dataset.group, task = group.dataset.task === "yes";
  const body = task ? { task_id: id } : { group_id: id };
  if (await farm.act(`Cancel every unfinished job of ${task ? "task" : "group"} ${id}?`, "/cancel", body)) setTimeout(refresh, 300);
});

const policy = document.getElementById("cancel-policy");
if (policy) policy.addEventListener("submit", async (e) => {
  e.preventDefault();
  const v = parseInt(document.getElementById("policy-below").value, 10);
  if (Number.isInteger(v) && await farm.act(`Cancel every active job with policy version below ${v}?`, "/cancel",
    { older_than_policy_version: v })) setTimeout(refresh, 300);
});

// The first page (no cursor) follows the farm: its rows are re-read every 2 s without a reload.
async function refresh() {
  const r = await fetch(location.href, { headers: farm.headers() });
  if (!r.ok) return;
  const doc = new DOMParser().parseFromString(await r.text(), "text/html");
  const fresh = doc.querySelector("#jobs tbody"), mine = document.querySelector("#jobs tbody");
  if (fresh && mine) mine.replaceWith(fresh);
}
if (!new URLSearchParams(location.search).has("cursor")) setInterval(refresh, 2000);
