// Live pages: a websocket says "something about a card changed"; the page then fetches itself
// and swaps in the fresh server-rendered content (escaping stays on the server). Without
// websockets, or when the connection drops, the page works by reload; reconnects back off.
(function () {
  function start() {
    var root = document.querySelector("[data-live]");
    if (!root || !window.WebSocket || !window.fetch) return;
    var card = root.getAttribute("data-card");
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host +
      "/ws/live/" + (card ? "?card=" + encodeURIComponent(card) : "");
    var busy = false, again = false;
    var status = document.createElement("p");
    status.className = "visually-hidden";
    status.setAttribute("role", "status");
    document.body.appendChild(status);

    function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      fetch(location.href, { credentials: "same-origin", headers: { "X-Requested-With": "live" } })
        .then(function (response) { return response.text(); })
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("[data-live]");
          var current = document.querySelector("[data-live]");
          if (fresh && current) {
            var typing = current.contains(document.activeElement) && document.activeElement.tagName === "TEXTAREA";
            if (!typing) { current.replaceWith(fresh); status.textContent = "Updated."; }
          }
        })
        .catch(function () {})
        .then(function () { busy = false; if (again) { again = false; refresh(); } });
    }

    function connect(delay) {
      var socket = new WebSocket(url);
      socket.onopen = function () { delay = 1000; document.body.setAttribute("data-live-socket", "connected"); };
      socket.onmessage = refresh;
      socket.onclose = function () {
        document.body.setAttribute("data-live-socket", "disconnected");
        setTimeout(function () { connect(Math.min(30000, delay * 2)); }, delay);
      };
    }
    connect(1000);
  }
  document.addEventListener("DOMContentLoaded", start);
})();
