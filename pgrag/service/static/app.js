// pgrag's web page: ask (streamed over server-sent events) or search a collection, follow a
// conversation, open the passage behind each citation. No framework, no build step.
// Everything that comes from the server (documents above all) is untrusted: it is inserted
// with textContent or as attribute values only, never as HTML.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const store = window.sessionStorage;
  const KEY = "pgrag.key";
  const COLLECTION = "pgrag.collection";
  const CONVERSATION = "pgrag.conversation";

  let conversation = load(CONVERSATION) || { id: null, turns: [] };
  let running = null; // the AbortController of the request in flight

  function load(name) {
    try {
      return JSON.parse(store.getItem(name) || "null");
    } catch (e) {
      return null;
    }
  }

  function save() {
    try {
      store.setItem(CONVERSATION, JSON.stringify(conversation));
    } catch (e) {
      /* storage full or off: the page still works, a reload forgets the turns */
    }
  }

  // An element with attributes and children; strings become text nodes.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name === "class") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  // --- talking to the service -----------------------------------------------------------------

  class ServiceError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  function headers(extra) {
    const h = Object.assign({ "Content-Type": "application/json" }, extra || {});
    const key = store.getItem(KEY);
    if (key) h.Authorization = "Bearer " + key;
    return h;
  }

  async function errorOf(response) {
    let message = response.status + " " + response.statusText;
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) message = body.error.message;
    } catch (e) {
      /* not JSON: the status line says it */
    }
    if (response.status === 401) needKey(message);
    return new ServiceError(message, response.status);
  }

  async function call(method, path, body, options) {
    const init = { method, headers: headers(options && options.headers) };
    if (options && options.signal) init.signal = options.signal;
    if (body !== undefined) init.body = JSON.stringify(body);
    let response;
    try {
      response = await fetch(new URL(path, document.baseURI), init);
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new ServiceError("The service could not be reached (" + e.message + ").", 0);
    }
    if (!response.ok) throw await errorOf(response);
    return response;
  }

  // Server-sent events from a fetch() response, as {event, data} with data parsed as JSON.
  async function* events(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let event = "message";
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      for (;;) {
        const match = /\r\n|\r|\n/.exec(buffer);
        // A lone \r at the end may be the first half of \r\n: wait for the next chunk.
        if (!match || (!done && match[0] === "\r" && match.index === buffer.length - 1)) break;
        const line = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        if (line === "") {
          if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
          event = "message";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue; // a comment (keep-alive)
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "event") event = text;
        else if (field === "data") data.push(text);
      }
      if (done) {
        if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
        return;
      }
    }
  }

  // --- notices and the key --------------------------------------------------------------------

  function notice(message, kind) {
    const node = $("notice");
    node.textContent = message || "";
    node.className = kind || "";
    node.hidden = !message;
  }

  function needKey(message) {
    const had = Boolean(store.getItem(KEY));
    const field = $("api-key");
    field.setAttribute("aria-invalid", "true");
    notice(
      had
        ? "The API key was not accepted (" + message + "). Enter another key above and press Use key."
        : "This service needs an API key: enter it in the API key field above and press Use key.",
      "auth"
    );
    field.focus();
  }

  function useKey(event) {
    event.preventDefault();
    const value = $("api-key").value.trim();
    if (value) store.setItem(KEY, value);
    else store.removeItem(KEY);
    $("api-key").value = "";
    $("api-key").placeholder = value ? "key set for this tab" : "pgrag_…";
    $("api-key").removeAttribute("aria-invalid");
    notice("");
    loadCollections();
  }

  function forgetKey() {
    store.removeItem(KEY);
    $("api-key").value = "";
    $("api-key").placeholder = "pgrag_…";
    notice("The key is forgotten.", "info");
    loadCollections();
  }

  // --- collections ----------------------------------------------------------------------------

  async function loadCollections() {
    const select = $("collection");
    const wanted = select.value || store.getItem(COLLECTION);
    let listing;
    try {
      listing = await (await call("GET", "v1/collections")).json();
    } catch (e) {
      select.replaceChildren(el("option", { value: "", text: "(no collections loaded)" }));
      if (e.status !== 401) notice("Could not list the collections: " + e.message, "error");
      return;
    }
    const collections = listing.collections || [];
    select.replaceChildren(
      ...collections.map((c) => {
        const count = c.documents === null || c.documents === undefined ? "" : c.documents;
        const label = c.name + (count === "" ? "" : " (" + (c.estimated ? "~" : "") + count + (count === 1 ? " document)" : " documents)"));
        return el("option", { value: c.name, text: label });
      })
    );
    if (!collections.length) {
      select.replaceChildren(el("option", { value: "", text: "(no collections)" }));
      notice("There is no collection you can read: ingest documents first (pgrag ingest).", "info");
      return;
    }
    if (wanted && collections.some((c) => c.name === wanted)) select.value = wanted;
  }

  // --- answers, citations and sources ---------------------------------------------------------

  const CITE = /\[(\s*\d+(?:\s*[,;]\s*\d+)*\s*)\]/g;

  // The source numbered n for a turn: its own sources first, then (numbers being kept across a
  // conversation) an earlier turn's, then its citation (which has no passage text).
  function findSource(turnIndex, n) {
    for (let i = turnIndex; i >= 0; i--) {
      const answer = conversation.turns[i] && conversation.turns[i].answer;
      const found = answer && (answer.sources || []).find((s) => s.n === n);
      if (found) return found;
    }
    const answer = conversation.turns[turnIndex] && conversation.turns[turnIndex].answer;
    return (answer && (answer.citations || []).find((c) => c.n === n)) || null;
  }

  function describe(source) {
    return source.title || source.source || "source " + source.n;
  }

  // The answer's text with each [n] (or [n, m]) that names a known source as buttons.
  function citedText(text, turnIndex) {
    const node = el("p", { class: "answer-text" });
    let at = 0;
    for (const match of text.matchAll(CITE)) {
      const numbers = match[1].split(/[,;]/).map((s) => parseInt(s, 10));
      const sources = numbers.map((n) => findSource(turnIndex, n));
      if (sources.some((s) => !s)) continue; // not a citation we can open: leave it as text
      node.append(text.slice(at, match.index));
      numbers.forEach((n, i) => {
        node.append(
          el("button", {
            type: "button",
            class: "cite",
            "data-n": n,
            "aria-label": "Citation " + n + ": " + describe(sources[i]),
            text: "[" + n + "]",
          })
        );
      });
      at = match.index + match[0].length;
    }
    node.append(text.slice(at));
    node.addEventListener("click", (event) => {
      const button = event.target.closest("button.cite");
      if (!button) return;
      const n = parseInt(button.dataset.n, 10);
      showSources(turnIndex);
      openPassage(findSource(turnIndex, n));
    });
    return node;
  }

  function sourceLabel(source) {
    const value = source.source || "";
    let url = null;
    try {
      const parsed = new URL(value);
      if (parsed.protocol === "http:" || parsed.protocol === "https:") url = parsed.href;
    } catch (e) {
      /* a file path, not a link */
    }
    return url
      ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: value })
      : el("span", { text: value });
  }

  function openPassage(source) {
    if (!source) return;
    $("passage-n").textContent = "[" + source.n + "]";
    $("passage-title").textContent = source.title || "";
    $("passage-section").textContent = source.section ? "§ " + source.section : "";
    $("passage-source").replaceChildren(sourceLabel(source));
    $("passage-text").textContent =
      source.text === undefined ? "(the passage is not part of this answer)" : source.text;
    const panel = $("passage");
    panel.hidden = false;
    panel.focus();
    for (const item of $("source-list").children) {
      item.classList.toggle("current", item.dataset.n === String(source.n));
    }
  }

  function showSources(turnIndex) {
    const answer = conversation.turns[turnIndex] && conversation.turns[turnIndex].answer;
    const sources = (answer && answer.sources) || [];
    const cited = new Set(((answer && answer.citations) || []).map((c) => c.n));
    $("sources-heading").textContent =
      "Sources" + (conversation.turns.length > 1 ? " of answer " + (turnIndex + 1) : "");
    $("sources-empty").hidden = sources.length > 0;
    $("sources-empty").textContent = answer ? "This answer had no sources." : "The sources of an answer are listed here.";
    $("source-list").replaceChildren(
      ...sources.map((s) => {
        const open = el("button", { type: "button", class: "open", text: "Open passage" });
        open.addEventListener("click", () => openPassage(s));
        return el(
          "li",
          { "data-n": s.n, class: cited.has(s.n) ? "cited" : "" },
          el("p", { class: "meta" },
            el("span", { class: "n", text: "[" + s.n + "] " }),
            el("span", { class: "title", text: s.title || "" }),
            s.section ? el("span", { class: "section", text: " § " + s.section }) : null,
            cited.has(s.n) ? el("span", { class: "badge", text: " cited" }) : null),
          el("p", { class: "source" }, sourceLabel(s)),
          el("details", {}, el("summary", { text: "Passage" }), el("p", { text: s.text || "" })),
          open
        );
      })
    );
  }

  function renderAnswer(body, answer, turnIndex) {
    const parts = [];
    if (answer.abstained) {
      parts.push(
        el("p", { class: "abstention", role: "status" },
          el("strong", { text: "No answer: " }), answer.reason || "the service gave no reason")
      );
    }
    parts.push(citedText(answer.answer || "", turnIndex));
    if ((answer.invalid_citations || []).length) {
      parts.push(
        el("p", { class: "warning",
          text: "Removed citations of sources the model was not given: " +
            answer.invalid_citations.map((n) => "[" + n + "]").join(" ") })
      );
    }
    if ((answer.flagged || []).length) {
      parts.push(
        el("p", { class: "warning",
          text: "Sources that read like instructions to the model: " +
            answer.flagged.map((f) => "[" + f.n + "]").join(" ") })
      );
    }
    for (const warning of answer.warnings || []) {
      parts.push(el("p", { class: "warning", text: warning }));
    }
    const facts = [];
    if (typeof answer.confidence === "number") facts.push("confidence " + answer.confidence.toFixed(2));
    if (typeof answer.faithfulness === "number") facts.push("support " + answer.faithfulness.toFixed(2));
    if (answer.generator) facts.push(answer.generator);
    if (facts.length) parts.push(el("p", { class: "hint", text: facts.join(" · ") }));
    body.replaceChildren(...parts);
    body.removeAttribute("aria-busy");
  }

  function turnElement(question) {
    const body = el("div", { class: "answer", "aria-busy": "true" }, el("p", { class: "answer-text" }));
    const item = el("li", { class: "turn" },
      el("p", { class: "question" }, el("span", { class: "who", text: "Question: " }), question),
      body);
    $("turns").append(item);
    return { item, body };
  }

  function renderTurns() {
    $("turns").replaceChildren();
    conversation.turns.forEach((turn, i) => {
      const { body } = turnElement(turn.question);
      if (turn.answer) renderAnswer(body, turn.answer, i);
      else failed(body, turn.error || "No answer.");
    });
    if (conversation.turns.length) showSources(conversation.turns.length - 1);
  }

  function failed(body, message) {
    body.replaceChildren(el("p", { class: "error", role: "alert", text: message }));
    body.removeAttribute("aria-busy");
  }

  async function ask(question, collection) {
    const index = conversation.turns.length;
    conversation.turns.push({ question, answer: null });
    const { item, body } = turnElement(question);
    item.scrollIntoView({ block: "nearest" });
    const text = body.querySelector(".answer-text");
    const request = { question, collection, stream: true };
    // The first turn starts a conversation the service stores as this key's; later turns
    // continue it, so follow-ups are rewritten and citation numbers stay the same.
    request.conversation_id = conversation.id || "new";
    let answer = null;
    let error = null;
    try {
      const response = await call("POST", "v1/ask", request, {
        headers: { Accept: "text/event-stream" },
        signal: running.signal,
      });
      if ((response.headers.get("Content-Type") || "").startsWith("application/json")) {
        answer = await response.json();
      } else {
        for await (const { event, data } of events(response)) {
          if (event === "token") text.append(data.text || "");
          else if (event === "answer") answer = data;
          else if (event === "error") error = (data.error && data.error.message) || "The answer failed.";
          else if (event === "done") break;
        }
      }
      if (!answer && !error) error = "The answer stream ended before the answer came.";
    } catch (e) {
      error = e.name === "AbortError" ? "Stopped before the answer was complete." : e.message;
    }
    if (answer) {
      conversation.turns[index].answer = answer;
      if (answer.conversation_id) conversation.id = answer.conversation_id;
      renderAnswer(body, answer, index);
      showSources(index);
      $("passage").hidden = true; // it showed an earlier answer's passage
    } else {
      conversation.turns[index].error = error;
      failed(body, error);
    }
    save();
  }

  async function search(query, collection) {
    const section = $("search-results");
    const list = $("results");
    section.hidden = false;
    list.replaceChildren();
    list.setAttribute("aria-busy", "true");
    try {
      const response = await call("POST", "v1/search", { query, collection, k: 10 }, {
        signal: running.signal,
      });
      const found = await response.json();
      $("search-heading").textContent =
        "Search results for “" + found.query + "” in " + found.collection;
      if (!found.results.length) list.append(el("li", { class: "hint", text: "Nothing was found." }));
      for (const r of found.results) {
        list.append(
          el("li", { class: "result" },
            el("p", { class: "meta" },
              el("span", { class: "title", text: r.title || r.source }),
              r.section ? el("span", { class: "section", text: " § " + r.section }) : null,
              el("span", { class: "hint", text: " · score " + Number(r.score).toFixed(4) })),
            el("p", { class: "source" }, sourceLabel(r)),
            el("p", { class: "passage", text: r.text }))
        );
      }
    } catch (e) {
      list.append(el("li", { class: "error", role: "alert",
        text: e.name === "AbortError" ? "Stopped." : "Search failed: " + e.message }));
    } finally {
      list.removeAttribute("aria-busy");
    }
  }

  function mode() {
    return document.querySelector('input[name="mode"]:checked').value;
  }

  async function submit(event) {
    event.preventDefault();
    if (running) return;
    const question = $("question").value.trim();
    const collection = $("collection").value;
    if (!question) return;
    if (!collection) {
      notice("Pick a collection first (none is listed: is an API key needed?).", "error");
      return;
    }
    store.setItem(COLLECTION, collection);
    notice("");
    running = new AbortController();
    $("submit").disabled = true;
    $("stop").hidden = false;
    $("status").textContent = mode() === "ask" ? "Answering…" : "Searching…";
    try {
      if (mode() === "ask") {
        $("question").value = "";
        $("search-results").hidden = true;
        await ask(question, collection);
      } else {
        await search(question, collection);
      }
    } finally {
      running = null;
      $("submit").disabled = false;
      $("stop").hidden = true;
      $("status").textContent = "";
    }
  }

  function newConversation() {
    if (running) running.abort();
    conversation = { id: null, turns: [] };
    save();
    $("turns").replaceChildren();
    $("source-list").replaceChildren();
    $("sources-heading").textContent = "Sources";
    $("sources-empty").hidden = false;
    $("sources-empty").textContent = "The sources of an answer are listed here.";
    $("passage").hidden = true;
    $("question").focus();
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (store.getItem(KEY)) $("api-key").placeholder = "key set for this tab";
    $("key-form").addEventListener("submit", useKey);
    $("forget-key").addEventListener("click", forgetKey);
    $("ask-form").addEventListener("submit", submit);
    $("stop").addEventListener("click", () => running && running.abort());
    $("new-conversation").addEventListener("click", newConversation);
    $("close-passage").addEventListener("click", () => ($("passage").hidden = true));
    $("question").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        $("ask-form").requestSubmit();
      }
    });
    for (const radio of document.querySelectorAll('input[name="mode"]')) {
      radio.addEventListener("change", () => {
        $("submit").textContent = mode() === "ask" ? "Ask" : "Search";
      });
    }
    renderTurns();
    loadCollections();
  });
})();
