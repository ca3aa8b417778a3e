// gojob dashboard: a little progressive enhancement. Every page works
// without it; it adds confirmations, "select all", and live counters.
(function () {
  "use strict";

  // Confirm destructive buttons (data-confirm on the button or its form).
  document.addEventListener("click", function (ev) {
    var el = ev.target.closest("button[data-confirm]");
    if (el && !window.confirm(el.getAttribute("data-confirm"))) {
      ev.preventDefault();
    }
  });

  // "Select all" checkboxes and buttons that need a selection.
  function refreshSelection(form) {
    var any = form.querySelector('input[name="key"]:checked') !== null;
    form.querySelectorAll("button[data-needs-selection]").forEach(function (b) { b.disabled = !any; });
  }
  document.querySelectorAll("form#bulk").forEach(function (form) {
    refreshSelection(form);
    form.addEventListener("change", function (ev) {
      if (ev.target.matches("input[data-select-all]")) {
        form.querySelectorAll('input[name="key"]').forEach(function (c) { c.checked = ev.target.checked; });
      }
      refreshSelection(form);
    });
  });

  // The path prefix the dashboard is mounted under (--base-path).
  var base = document.body.getAttribute("data-base") || "";

  // Counts as the cards show them: in full up to 999,999, then compact
  // ("1.23B"); the exact number goes in the title.
  var full = new Intl.NumberFormat("en-US");
  function compact(v) {
    if (Math.abs(v) < 1e6) { return full.format(v); }
    var units = [[1e15, "P"], [1e12, "T"], [1e9, "B"], [1e6, "M"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(v) >= units[i][0]) {
        var x = v / units[i][0];
        var p = Math.abs(x) >= 100 ? 0 : (Math.abs(x) >= 10 ? 1 : 2);
        return (Math.trunc(x * Math.pow(10, p)) / Math.pow(10, p)).toFixed(p) + units[i][1];
      }
    }
    return full.format(v);
  }

  // A bulk action's progress: poll its JSON every second while it runs;
  // when it ends, reload the page so the list and the result show.
  var progress = document.getElementById("bulk-progress");
  if (progress && progress.getAttribute("data-state") === "running" && window.fetch) {
    var bar = progress.querySelector("progress");
    var pct = progress.querySelector(".bulk-pct");
    var summary = progress.querySelector(".bulk-summary");
    var tick = function () {
      fetch(progress.getAttribute("data-url"), { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (j) {
          if (!j) { window.setTimeout(tick, 1000); return; }
          if (bar) { bar.max = j.max; bar.value = j.done; }
          if (pct) { pct.textContent = j.percent + "%"; }
          if (summary) { summary.textContent = j.summary; }
          progress.setAttribute("data-state", j.state);
          if (j.state === "running") {
            window.setTimeout(tick, 1000);
          } else {
            var u = new URL(window.location.href);
            u.searchParams.delete("flash");
            window.location.replace(u.toString());
          }
        })
        .catch(function () { window.setTimeout(tick, 2000); });
    };
    window.setTimeout(tick, 1000);
  }

  // Live counters on the dashboard: poll stats.json every 5 s.
  var stats = document.getElementById("stats");
  if (stats && window.fetch) {
    var poll = function () {
      fetch(base + "/stats.json", { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (j) {
          if (!j) { return; }
          stats.querySelectorAll("[data-stat]").forEach(function (el) {
            var v = j.sidekiq[el.getAttribute("data-stat")];
            if (typeof v === "number") { el.textContent = compact(v); el.title = full.format(v); }
          });
        })
        .catch(function () { /* the next poll retries */ });
    };
    window.setInterval(poll, 5000);
  }
})();
