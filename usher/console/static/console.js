// Usher console: keeps a page current from the server's event stream (/events).
// Every page shows the live log position, and "disconnected" while the stream is down (it
// reconnects by itself, then refreshes what it may have missed); pages marked
// data-refresh="yes" re-render their main part (at most every two seconds) when the log moves;
// the decision stream's newest page adds each new decision that the URL's filters keep (the
// same the server applied) as a row, at once; the time travel slider reaches the newest
// position. Read-only: it never sends anything but GET requests. No library: EventSource,
// fetch and DOMParser are in every browser.
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
    // The page's filters are its URL's (what the server filtered by), not the form's
    // selects, which the reader may have changed without submitting.
    const query = new URLSearchParams(window.location.search);
    const value = (name) => query.get(name) || "";
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
    const list = document.getElementById("decision-list");
    if (!rows || document.body.dataset.refresh === "yes" || !wanted(decision)) return;
    if (list && list.dataset.live !== "yes") return; // an older page stays as it is
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

  function followSlider(seq) {
    const slider = document.getElementById("travel-seq");
    if (!slider || seq <= Number(slider.max)) return;
    slider.max = seq;
    const last = document.getElementById("travel-last");
    if (last) last.textContent = seq;
  }

  function showLink(up) {
    const live = document.getElementById("live");
    const dot = document.getElementById("dot");
    const link = document.getElementById("link");
    if (live) live.classList.toggle("down", !up);
    if (dot) {
      dot.classList.toggle("down", !up);
      dot.title = up ? "live" : "disconnected: the console is not reachable, retrying";
    }
    if (link) link.hidden = up;
  }

  let down = false;

  function connect() {
    const source = new EventSource("/events");
    source.addEventListener("open", () => {
      if (down) refresh(); // what it missed while it was down (decisions too)
      down = false;
      showLink(true);
    });
    source.addEventListener("error", () => {
      down = true;
      showLink(false);
      // The browser retries by itself unless the answer was not a stream (a proxy's error
      // page, a server starting): then the source is closed and we retry ourselves.
      if (source.readyState === EventSource.CLOSED) window.setTimeout(connect, REFRESH_MS);
    });
    source.addEventListener("seq", (event) => {
      const seq = Number(event.data);
      const shown = document.querySelector("[data-view-seq]");
      showSeq(seq);
      followSlider(seq);
      if (!shown || Number(shown.textContent) !== seq) scheduleRefresh();
    });
    source.addEventListener("decision", (event) => addDecision(JSON.parse(event.data)));
  }

  function showSliderValue() {
    // The time-travel slider shows its value as it moves (here, not inline in the page: the
    // Content-Security-Policy allows only this file's scripts).
    const slider = document.getElementById("travel-seq");
    if (!slider || !slider.form) return;
    slider.addEventListener("input", () => { slider.form.shown.value = slider.value; });
  }

  document.addEventListener("DOMContentLoaded", () => {
    showSliderValue();
    connect();
  });
})();
