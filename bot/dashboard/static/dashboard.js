// Roost dashboard: live regions refreshed on server-sent events, and forms sent without a
// page reload. The server renders (and escapes) every fragment; this script only swaps it in.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]');
  const token = csrf ? csrf.content : "";
  const regions = Array.from(document.querySelectorAll("[data-live]"));

  async function refresh(region) {
    try {
      const response = await fetch(region.dataset.live, { credentials: "same-origin", headers: { "x-requested-with": "fetch" } });
      if (response.ok) {
        region.innerHTML = await response.text();
        region.dispatchEvent(new CustomEvent("roost:refreshed", { bubbles: true }));
      }
    } catch (e) { /* offline for a moment: the next event refreshes it */ }
  }

  if (regions.length && window.EventSource) {
    const events = new EventSource("/events");
    let stale = false;  // a hidden tab fetches nothing; it catches up when shown again
    const listen = (name) => events.addEventListener(name, () => {
      if (document.hidden) { stale = true; return; }
      regions.filter((r) => (r.dataset.liveOn || "").split(" ").includes(name)).forEach(refresh);
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && stale) { stale = false; regions.forEach(refresh); }
    });
    ["approvals", "tick", "jobs"].forEach(listen);
    events.addEventListener("open", () => regions.forEach(refresh));
  }

  // Decisions in the inbox: posted in place; the region refreshes (the SSE event follows too).
  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!form.classList.contains("decide")) return;
    event.preventDefault();
    const button = event.submitter;
    const body = new URLSearchParams(new FormData(form));
    if (button && button.name) body.set(button.name, button.value);
    form.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    try {
      await fetch(form.action, {
        method: "POST", body, credentials: "same-origin",
        headers: { "x-csrf-token": token, "x-requested-with": "fetch" },
      });
    } finally {
      const region = form.closest("[data-live]");
      if (region) refresh(region);
    }
  });
})();
