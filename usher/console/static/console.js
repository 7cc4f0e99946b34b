// Usher console: keeps a page current from the server's event stream (/events).
// Every page shows the live log position; pages marked data-refresh="yes" re-render their
// main part (at most every two seconds) when the log moves; the decision stream adds each
// new decision that its filters keep as a row, at once. Read-only: it never sends anything
// but GET requests. No library: EventSource, fetch and DOMParser are in every browser.
"use strict";

(function () {
  const REFRESH_MS = 2000;
  const MAX_ROWS = 200;
  let lastRefresh = 0;
  let refreshTimer = null;

  function showSeq(seq) {
    const el = document.getElementById("seq");
    if (!el) return;
    el.textContent = seq;
    el.dataset.seq = seq;
    const dot = document.getElementById("dot");
    if (dot) {
      dot.classList.remove("beat");
      void dot.offsetWidth; // restart the animation
      dot.classList.add("beat");
    }
  }

  async function refresh() {
    refreshTimer = null;
    lastRefresh = Date.now();
    try {
      const response = await fetch(window.location.href, { headers: { "Accept": "text/html" } });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("main");
      const main = document.getElementById("main");
      if (fresh && main) main.innerHTML = fresh.innerHTML;
    } catch (err) {
      // the server is restarting: the next event retries
    }
  }

  function scheduleRefresh() {
    if (document.body.dataset.refresh !== "yes" || refreshTimer !== null) return;
    const wait = Math.max(0, lastRefresh + REFRESH_MS - Date.now());
    refreshTimer = window.setTimeout(refresh, wait);
  }

  function wanted(decision) {
    const form = document.getElementById("filters");
    if (!form) return true;
    const value = (name) => (form.elements[name] ? form.elements[name].value : "");
    return (!value("queue") || value("queue") === decision.queue) &&
      (!value("namespace") || value("namespace") === decision.namespace) &&
      (!value("action") || value("action") === decision.action);
  }

  function cell(row, text, href) {
    const td = document.createElement("td");
    if (href) {
      const a = document.createElement("a");
      a.href = href;
      a.textContent = text;
      td.appendChild(a);
    } else {
      td.textContent = text;
    }
    row.appendChild(td);
    return td;
  }

  function addDecision(decision) {
    const rows = document.getElementById("decision-rows");
    if (!rows || document.body.dataset.refresh === "yes" || !wanted(decision)) return;
    if (rows.querySelector(`tr[data-seq="${decision.seq}"]`)) return;
    const empty = rows.querySelector("tr.empty");
    if (empty) empty.remove();
    const row = document.createElement("tr");
    row.className = decision.action + " fresh";
    row.dataset.seq = decision.seq;
    row.dataset.time = decision.time_ms;
    row.dataset.received = Date.now();
    cell(row, decision.clock);
    cell(row, String(decision.seq));
    const action = cell(row, "");
    const badge = document.createElement("span");
    badge.className = "action " + decision.action;
    badge.textContent = decision.action;
    action.appendChild(badge);
    cell(row, decision.job, "/job/" + decision.job);
    cell(row, decision.quota);
    const reason = cell(row, "");
    if (decision.preemptor) {
      reason.append("by ");
      const a = document.createElement("a");
      a.href = "/job/" + decision.preemptor;
      a.textContent = decision.preemptor;
      reason.append(a, ": ");
    }
    reason.append(decision.reason);
    rows.prepend(row);
    while (rows.rows.length > MAX_ROWS) rows.deleteRow(rows.rows.length - 1);
  }

  function connect() {
    const source = new EventSource("/events");
    source.addEventListener("seq", (event) => {
      const seq = Number(event.data);
      const shown = document.querySelector("[data-view-seq]");
      showSeq(seq);
      if (!shown || Number(shown.textContent) !== seq) scheduleRefresh();
    });
    source.addEventListener("decision", (event) => addDecision(JSON.parse(event.data)));
  }

  document.addEventListener("DOMContentLoaded", connect);
})();
