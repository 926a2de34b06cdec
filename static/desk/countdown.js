// Keeps "N min SS s left" current. The server renders the same text, so pages work without it.
(function () {
  function tick() {
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      var left = Math.floor((Date.parse(el.getAttribute("datetime")) - Date.now()) / 1000);
      if (isNaN(left)) return;
      if (left <= 0) { el.textContent = "timed out"; return; }
      var m = Math.floor(left / 60), s = left % 60;
      el.textContent = m + " min " + (s < 10 ? "0" : "") + s + " s left";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { tick(); setInterval(tick, 1000); });
})();
