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

  // Live counters on the dashboard: poll /stats.json every 5 s.
  var stats = document.getElementById("stats");
  if (stats && window.fetch) {
    var fmt = new Intl.NumberFormat("en-US");
    var poll = function () {
      fetch("/stats.json", { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (j) {
          if (!j) { return; }
          stats.querySelectorAll("[data-stat]").forEach(function (el) {
            var v = j.sidekiq[el.getAttribute("data-stat")];
            if (typeof v === "number") { el.textContent = fmt.format(v); }
          });
        })
        .catch(function () { /* the next poll retries */ });
    };
    window.setInterval(poll, 5000);
  }
})();
