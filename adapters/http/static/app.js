// The review page: lists a scope's pending Candidates and approves or rejects them through the
// /v1 API with the reviewer's bearer token. No build step, no dependencies. Every server value is
// rendered with textContent; the page never builds HTML from data.
"use strict";

(function () {
  const TOKEN_KEY = "dream.review.token";
  const SCOPE_KEY = "dream.review.scope";
  const PAGE_SIZE = 50;
  const MAX_REASON = 2000;

  const { ApiFailure, el, clear, show, showError, hideError , formatAge } = window.DreamPage;
  const state = { token: "", scope: "", cursor: null, selected: null, version: null,
                  detailSeq: 0 };

  // -- small DOM helpers ------------------------------------------------------------------------

  function text(tag, value, attrs) {
    const node = document.createElement(tag);
    node.textContent = value === null || value === undefined ? "" : String(value);
    for (const [name, val] of Object.entries(attrs || {})) node.setAttribute(name, val);
    return node;
  }

  function clearMessages() {
    hideError();
    show(el("notice"), false);
    el("notice").textContent = "";
  }

  function showNotice(message) {
    el("notice").textContent = message;
    show(el("notice"), true);
  }

  function artifactRef(ref) {
    return ref ? `${ref.family}/${ref.artifact_id}@${ref.revision}` : "";
  }

  function sourceRef(ref) {
    return `${ref.source_type}/${ref.source_id}`;
  }

  function citationRef(c) {
    return `${artifactRef(c.memory_ref)} entry ${c.entry_id} (version ${c.entry_version_id})`;
  }

  function fillList(list, items, render, empty) {
    clear(list);
    if (!items || items.length === 0) {
      list.appendChild(text("li", empty || "none", { class: "empty" }));
      return;
    }
    for (const item of items) list.appendChild(text("li", render(item)));
  }

  // -- the API ----------------------------------------------------------------------------------

  function scopePath(suffix) {
    return `/v1/scopes/${encodeURIComponent(state.scope)}/candidates${suffix || ""}`;
  }

  function candidatePath(candidateId, suffix) {
    return scopePath(`/${encodeURIComponent(candidateId)}${suffix || ""}`);
  }

  function api(method, path, body) {
    return window.DreamPage.api(state.token, method, path, body);
  }

  function report(error) {
    if (error instanceof ApiFailure) showError(error.code, error.message);
    else showError("page_error", String(error));
  }

  // -- the inbox --------------------------------------------------------------------------------

  function renderInbox(page, append) {
    const rows = el("inbox-rows");
    if (!append) clear(rows);
    for (const item of page.candidates) {
      const row = document.createElement("tr");
      row.setAttribute("data-testid", "inbox-row");
      row.setAttribute("data-candidate-id", item.candidate_id);
      const idCell = document.createElement("td");
      const open = text("button", item.candidate_id, {
        type: "button", class: "open-candidate", "data-testid": "open-candidate",
        "data-candidate-id": item.candidate_id });
      open.addEventListener("click", () => selectCandidate(item.candidate_id));
      idCell.appendChild(open);
      row.appendChild(idCell);
      row.appendChild(text("td", item.family, { "data-field": "family" }));
      row.appendChild(text("td", item.reason, { "data-field": "reason", class: "reason" }));
      row.appendChild(text("td", item.proposer, { "data-field": "proposer" }));
      row.appendChild(text("td", item.conflict ? `yes (${item.conflict_code || "conflict"})` : "no",
                           { "data-field": "conflict" }));
      row.appendChild(text("td", formatAge(item.age_seconds), { "data-field": "age" }));
      if (state.selected === item.candidate_id) row.classList.add("selected");
      rows.appendChild(row);
    }
    state.cursor = page.next_cursor;
    const count = rows.querySelectorAll("tr").length;
    el("inbox-count").textContent = `(${count}${state.cursor ? "+" : ""})`;
    show(el("inbox-empty"), count === 0);
    show(el("inbox-more"), Boolean(state.cursor));
    show(el("inbox-section"), true);
  }

  async function loadInbox(after, append) {
    const query = new URLSearchParams({ status: "pending", limit: String(PAGE_SIZE) });
    if (after !== null && after !== undefined) query.set("after", String(after));
    if (append && state.cursor) query.set("cursor", state.cursor);
    const page = await api("GET", `${scopePath()}?${query}`);
    renderInbox(page, append);
  }

  function hideInbox() {
    clear(el("inbox-rows"));
    state.cursor = null;
    show(el("inbox-section"), false);
  }

  // -- one candidate ----------------------------------------------------------------------------

  function hideDetail() {
    state.selected = null;
    state.detailSeq += 1;
    show(el("detail"), false);
    for (const row of el("inbox-rows").querySelectorAll("tr.selected")) {
      row.classList.remove("selected");
    }
  }

  function renderProposal(proposal) {
    const list = el("detail-proposal");
    clear(list);
    for (const [key, value] of Object.entries(proposal || {})) {
      list.appendChild(text("dt", key));
      const dd = document.createElement("dd");
      dd.setAttribute("data-field", key);
      if (typeof value === "string") dd.textContent = value;
      else dd.appendChild(text("pre", JSON.stringify(value, null, 2)));
      list.appendChild(dd);
    }
  }

  function renderCandidate(c) {
    el("detail-id").textContent = c.candidate_id;
    el("detail-family").textContent = c.family;
    el("detail-status").textContent = c.status;
    el("detail-version").textContent = String(c.version);
    el("detail-proposer").textContent = c.proposer;
    el("detail-author").textContent = c.author;
    el("detail-reason").textContent = c.reason;
    el("detail-target").textContent = c.target ? artifactRef(c.target) : "new artifact";
    el("detail-run").textContent = c.run_id || "none";
    el("detail-conflict").textContent = c.conflict
      ? `${c.conflict.code} at version ${c.conflict.version}` : "none";
    const may = [];
    if (c.permissions.can_revise) may.push("revise");
    if (c.permissions.can_approve) may.push("approve");
    if (c.permissions.can_reject) may.push("reject");
    el("detail-permissions").textContent = may.length ? may.join(", ") : "read only";
    renderProposal(c.proposal);
    fillList(el("detail-sources"), c.sources, sourceRef);
    fillList(el("detail-artifacts"), c.artifacts, artifactRef);
    fillList(el("detail-citations"), c.memory_citations, citationRef);
    el("approve").textContent = `Approve version ${c.version}`;
    el("approve").setAttribute("data-version", String(c.version));
    el("reject").setAttribute("data-version", String(c.version));
  }

  function renderEvidence(view) {
    el("evidence-status").textContent = view.status;
    const resolved = view.status === "resolved" && view.evidence;
    show(el("evidence-resolved"), Boolean(resolved));
    show(el("evidence-unavailable"), !resolved);
    if (resolved) {
      el("evidence-nodes").textContent = String(view.evidence.nodes.length);
      fillList(el("evidence-roots"), view.evidence.citation_roots, sourceRef);
      el("evidence-code").textContent = "";
      el("evidence-message").textContent = "";
    } else {
      el("evidence-code").textContent = view.error ? view.error.code : "unavailable";
      el("evidence-message").textContent = view.error ? view.error.message : "";
    }
  }

  async function selectCandidate(candidateId, keepMessages) {
    if (!keepMessages) clearMessages();
    const seq = ++state.detailSeq;
    state.selected = candidateId;
    for (const row of el("inbox-rows").querySelectorAll("tr")) {
      row.classList.toggle("selected", row.getAttribute("data-candidate-id") === candidateId);
    }
    try {
      const [candidate, evidence] = await Promise.all([
        api("GET", candidatePath(candidateId)),
        api("GET", candidatePath(candidateId, "/evidence")),
      ]);
      if (seq !== state.detailSeq) return;  // another candidate was selected meanwhile
      state.version = candidate.version;
      renderCandidate(candidate);
      renderEvidence(evidence);
      el("reject-reason").value = "";
      show(el("detail"), true);
    } catch (error) {
      if (seq !== state.detailSeq) return;
      show(el("detail"), false);
      report(error);
    }
  }

  // -- decisions --------------------------------------------------------------------------------

  function setBusy(busy) {
    el("approve").disabled = busy;
    el("reject").disabled = busy;
  }

  async function decide(action) {
    clearMessages();
    const candidateId = state.selected;
    if (!candidateId) return;
    const body = { expected_version: state.version };
    if (action === "reject") {
      const reason = el("reject-reason").value;
      if (reason.trim().length === 0 || reason.length > MAX_REASON) {
        showError("invalid_text", `a rejection needs a reason of 1-${MAX_REASON} characters`);
        return;
      }
      body.reason = reason;
    }
    let decided;
    setBusy(true);
    try {
      decided = await api("POST", candidatePath(candidateId, `/${action}`), body);
    } catch (error) {
      setBusy(false);
      report(error);
      if (error instanceof ApiFailure && error.status === 409) {
        await selectCandidate(candidateId, true);  // show the current version
      }
      return;
    }
    setBusy(false);
    hideDetail();
    const outcome = decided.status === "approved"
      ? `approved ${candidateId} (version ${decided.decided_version}): ${artifactRef(decided.result)}`
      : `rejected ${candidateId} (version ${decided.decided_version})`;
    try {
      await loadInbox(decided.position);
      showNotice(outcome);
    } catch (error) {
      report(error);
    }
  }

  // -- wiring -----------------------------------------------------------------------------------

  async function connect(event) {
    event.preventDefault();
    clearMessages();
    hideDetail();
    state.token = el("token-input").value.trim();
    state.scope = el("scope-input").value.trim();
    if (!state.token || !state.scope) {
      showError("invalid_request", "a token and a scope id are needed");
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, state.token);
    sessionStorage.setItem(SCOPE_KEY, state.scope);
    try {
      await loadInbox(null, false);
    } catch (error) {
      hideInbox();
      report(error);
    }
  }

  function forget() {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = "";
    el("token-input").value = "";
    clearMessages();
    hideDetail();
    hideInbox();
  }

  document.addEventListener("DOMContentLoaded", () => {
    el("token-input").value = sessionStorage.getItem(TOKEN_KEY) || "";
    el("scope-input").value = sessionStorage.getItem(SCOPE_KEY) || "";
    el("connect-form").addEventListener("submit", connect);
    el("forget-token").addEventListener("click", forget);
    el("inbox-more").addEventListener("click", () => {
      clearMessages();
      loadInbox(null, true).catch(report);
    });
    el("approve").addEventListener("click", () => decide("approve"));
    el("reject").addEventListener("click", () => decide("reject"));
    document.body.setAttribute("data-ready", "true");
  });
})();
