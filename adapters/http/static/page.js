// What the service's pages share: DOM helpers that never build HTML from data, and the one
// way they call the /v1 API with a bearer token. Loaded before each page's own script.
"use strict";

window.DreamPage = (function () {
  // A refusal or failure of an API call: the API's stable code and message, or network_error.
  class ApiFailure extends Error {
    constructor(code, message, status) {
      super(message);
      this.code = code;
      this.status = status;
    }
  }

  const el = (id) => document.getElementById(id);

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function show(node, visible) {
    node.hidden = !visible;
  }

  function showError(code, message) {
    el("error-code").textContent = code;
    el("error-message").textContent = message || "";
    show(el("error"), true);
  }

  function hideError() {
    show(el("error"), false);
    el("error-code").textContent = "";
    el("error-message").textContent = "";
  }

  // An age in its largest whole unit: 42s, 5m, 3h, 2d.
  function formatAge(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m`;
    if (s < 86400) return `${Math.floor(s / 3600)}h`;
    return `${Math.floor(s / 86400)}d`;
  }

  // The answer's JSON, or an ApiFailure. Never sends cookies or a referrer; never cached.
  async function api(token, method, path, body) {
    const headers = { Accept: "application/json", Authorization: `Bearer ${token}` };
    const init = { method, headers, credentials: "omit", cache: "no-store",
                   referrerPolicy: "no-referrer" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      throw new ApiFailure("network_error", `the API could not be reached: ${error}`, 0);
    }
    let payload = null;
    try {
      payload = await response.json();
    } catch (error) {
      payload = null;
    }
    if (!response.ok) {
      const envelope = payload && payload.error ? payload.error : null;
      const code = envelope && envelope.code ? envelope.code : `http_${response.status}`;
      const message = envelope && envelope.message ? envelope.message : response.statusText;
      throw new ApiFailure(code, message, response.status);
    }
    return payload;
  }

  return Object.freeze({ ApiFailure, el, clear, show, showError, hideError, formatAge, api });
})();
