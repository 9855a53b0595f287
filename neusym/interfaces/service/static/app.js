// neusym web page: search, paper view, Ask (server-sent events), SQL console.
// Plain browser JavaScript, no build step. Every URL is relative to the page, so the same files
// work at / (neusym serve) and under /neusym/ (the Airflow plugin). Text from the corpus is always
// inserted as text; the only HTML inserted is table markup the server sanitised (nh3).
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "neusym-api-key";
const state = { lastSearch: null, paper: null, askPapers: [], dialogUrl: null };

// ------------------------------------------------------------------------------ utilities
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function headers(extra = {}) {
  const h = { ...extra };
  const key = localStorage.getItem(KEY_STORE);
  if (key) h["X-API-Key"] = key;
  return h;
}

function notice(message, kind = "error") {
  const n = $("notice");
  if (!message) { n.hidden = true; return; }
  n.textContent = message;
  n.className = "notice " + kind;
  n.hidden = false;
}

async function api(path, options = {}) {
  const res = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (res.status === 401) {
    $("key-button").hidden = false;
    const body = await res.json().catch(() => ({}));
    throw new Error((body.detail || "authentication required") + " — set an API key (button at the top right)");
  }
  if (!res.ok) {
    const body = await res.json().catch(() => ({ detail: res.statusText }));
    const err = new Error(body.detail || `HTTP ${res.status}`);
    err.status = res.status;
    throw err;
  }
  return res;
}

async function loadImage(img, url) {
  // fetch() so the API key header goes along; the image becomes a blob URL
  img.removeAttribute("src");
  img.dataset.loaded = "false";
  const res = await api(url);
  const blob = await res.blob();
  const objectUrl = URL.createObjectURL(blob);
  img.src = objectUrl;
  await img.decode().catch(() => {});
  img.dataset.loaded = "true";
  img.dataset.src = url;
  return objectUrl;
}

function pageUrl(paperId, page, bbox, extra = "") {
  let url = `papers/${encodeURIComponent(paperId)}/pages/${page}.png`;
  const params = [];
  if (bbox && bbox.length === 4) params.push("bbox=" + bbox.map((v) => +Number(v).toFixed(2)).join(","));
  if (extra) params.push(extra);
  return params.length ? url + "?" + params.join("&") : url;
}

function exportLink(href, filename, title) {
  // a citation download (search.bib?..., papers/<id>.bib); with an API key set, fetched with its header
  // and saved from a blob URL (a plain link cannot send the header)
  return el("a", { href, download: filename, class: "export", title, text: "BibTeX", onclick: async (ev) => {
    if (!localStorage.getItem(KEY_STORE)) return;
    ev.preventDefault();
    try {
      const url = URL.createObjectURL(await (await api(href)).blob());
      el("a", { href: url, download: filename }).click();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      notice(e.message);
    }
  } });
}

async function openPage(paperId, page, bbox, caption, url) {
  const dialog = $("page-dialog");
  $("page-caption").textContent = caption || `page ${page}`;
  if (!dialog.open) dialog.showModal();
  try {
    const previous = state.dialogUrl;
    state.dialogUrl = await loadImage($("page-image"), url || pageUrl(paperId, page, bbox));
    if (previous) URL.revokeObjectURL(previous);
  } catch (e) {
    dialog.close();
    notice(e.message);
  }
}

// ------------------------------------------------------------------------------ routing
function route() {
  const hash = location.hash || "#/search";
  const [path, query] = hash.slice(1).split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  const view = parts[0] || "search";
  for (const v of ["search", "paper", "ask", "sql"]) $("view-" + v).hidden = v !== view;
  document.querySelectorAll("nav a[data-tab]").forEach((a) =>
    a.classList.toggle("active", a.dataset.tab === view || (view === "paper" && a.dataset.tab === "search")));
  notice("");
  if (view === "search") showSearch(params);
  else if (view === "paper" && parts[1]) showPaper(decodeURIComponent(parts[1]));
  else if (view === "ask") showAsk(params);
  else if (view === "sql") showSql();
}

// ------------------------------------------------------------------------------ search
function searchHash(filters) {
  const p = new URLSearchParams();
  for (const k of ["q", "venue", "year", "author", "sort"]) if (filters[k]) p.set(k, filters[k]);
  return "#/search?" + p.toString();
}

async function showSearch(params) {
  const f = { q: params.get("q") || "", venue: params.get("venue") || "", year: params.get("year") || "",
              author: params.get("author") || "", sort: params.get("sort") || "" };
  $("q").value = f.q; $("venue").value = f.venue; $("year").value = f.year; $("author").value = f.author;
  $("sort").value = f.sort;
  $("home").hidden = !!f.q;
  if (!f.q) {
    $("results").replaceChildren(); $("facets").hidden = true; $("result-summary").textContent = "";
    showHome();
    return;
  }
  const key = JSON.stringify(f);
  if (state.lastSearch && state.lastSearch.key === key) return;  // back from a paper: keep the list
  const p = new URLSearchParams({ q: f.q, limit: "20" });
  if (f.venue) p.set("venue", f.venue);
  if (f.year) p.set("year", f.year);
  if (f.author) p.set("author", f.author);
  if (f.sort) p.set("sort", f.sort);
  $("result-summary").textContent = "searching…";
  try {
    const data = await (await api("search?" + p.toString())).json();
    state.lastSearch = { key, filters: f, data };
    renderResults(f, data, p.toString());
  } catch (e) {
    $("result-summary").textContent = "";
    $("results").replaceChildren();
    notice(e.message);
  }
}

function renderResults(f, data, query) {
  $("result-summary").textContent =
    `${data.hits.length} papers (corpus version ${data.version}, ${(data.seconds * 1000).toFixed(0)} ms)`;
  if (data.hits.length) $("result-summary").append(" · ",
    exportLink("search.bib?" + query, "neusym-search.bib", "these results as BibTeX"));
  $("results").replaceChildren(...data.hits.map((h) => el("li", { class: "hit", "data-paper-id": h.paper_id },
    el("a", { class: "hit-title", href: `#/paper/${h.paper_id}`, text: h.title }),
    el("div", { class: "meta" },
      h.venue ? el("span", { class: "badge", text: h.venue.toUpperCase() }) : null,
      h.year ? el("span", { class: "badge", text: String(h.year) }) : null,
      h.volume ? el("span", { class: "badge light", text: h.volume }) : null,
      el("span", { class: "authors", text: (h.authors || []).slice(0, 6).join(", ") + ((h.authors || []).length > 6 ? ", …" : "") }),
      el("span", { class: "score", text: `score ${h.score.toFixed(2)}` }),
      h.cited_by ? el("span", { class: "cited", text: `cited by ${h.cited_by} in corpus` }) : null),
    el("p", { class: "snippet", text: h.snippet }))));
  // facets
  const facetItem = (name, v) => {
    const value = v.value === null ? null : String(v.value);
    const active = value !== null && String(f[name]).toLowerCase() === value.toLowerCase();
    const label = value === null ? "unknown" : (name === "venue" ? value.toUpperCase() : value);
    const link = value === null || active ? el("span", { text: label })
      : el("a", { href: searchHash({ ...f, [name]: value }), "data-facet": name, "data-value": value, text: label });
    return el("li", { class: active ? "active" : null }, link, el("span", { class: "count", text: String(v.count) }));
  };
  $("facet-venue").replaceChildren(...data.facets.venue.map((v) => facetItem("venue", v)));
  $("facet-year").replaceChildren(...data.facets.year.map((v) => facetItem("year", v)));
  $("facet-note").textContent = `counts over the top ${data.facets.pool} matching papers`;
  const chips = ["venue", "year", "author"].filter((k) => f[k]).map((k) =>
    el("a", { class: "chip", href: searchHash({ ...f, [k]: "" }), title: "remove this filter", "data-clear": k },
      `${k}: ${f[k]} ✕`));
  $("active-filters").replaceChildren(...chips);
  $("facets").hidden = false;
  const venues = new Set(["acl", "emnlp", "naacl", "eacl", "findings", ...data.facets.venue.map((v) => v.value).filter(Boolean)]);
  $("venue-list").replaceChildren(...[...venues].map((v) => el("option", { value: v })));
}

// ------------------------------------------------------------------------------ landing: the corpus and the watches
function paperLink(x) {
  const label = [x.venue ? x.venue.toUpperCase() : null, x.year].filter(Boolean).join(" ");
  return el("li", {}, el("a", { href: `#/paper/${x.paper_id}`, text: x.title || x.paper_id }),
    label ? el("span", { class: "hint", text: " " + label }) : null);
}

async function showHome() {
  try {
    const o = await (await api("overview")).json();
    const when = o.published_at ? ` · published ${o.published_at.replace("T", " ").replace("+00:00", " UTC")}` : "";
    const cites = o.citations ? ` · ${o.citations.links} in-corpus citations to ${o.citations.papers_cited} papers` : "";
    $("overview-summary").textContent =
      `${o.papers} papers (${o.parsed} parsed, ${o.pages} pages), corpus version ${o.version}${when}${cites}`;
    $("overview-venues").replaceChildren(
      el("tr", {}, el("th", { text: "venue" }), el("th", { text: "year" }), el("th", { text: "papers" }), el("th", { text: "parsed" })),
      ...o.venues.map((v) => el("tr", {},
        el("td", {}, v.venue ? el("a", { href: searchHash({ venue: v.venue.toLowerCase(), year: v.year || "" }),
          title: "search within this venue and year", "data-venue": v.venue, text: v.venue }) : el("span", { text: "unknown" })),
        el("td", { text: v.year ? String(v.year) : "unknown" }), el("td", { text: String(v.papers) }),
        el("td", { text: String(v.parsed) }))));
    const r = o.last_refresh || {};
    $("overview-added-heading").textContent = r.papers_added === undefined || r.papers_added === null
      ? "Added by the last refresh" : `Added by the last refresh: ${r.papers_added} papers`
        + (r.papers_changed ? ` (${r.papers_changed} new or changed)` : "");
    $("overview-added").replaceChildren(...(r.added || []).map(paperLink));
  } catch (e) {
    $("overview-summary").textContent = e.message;
  }
  try {
    const w = (await (await api("watches")).json()).watches;
    $("watch-list").replaceChildren(...(w.length ? w.map((x) => el("div", { class: "watch", "data-watch": x.name },
      el("h3", {}, el("span", { text: x.query }), " ",
        el("a", { href: x.feed, class: "feed", title: "Atom feed of this saved search", text: "feed" })),
      el("p", { class: "hint", text: `${x.new} new · ${x.matches} papers found` +
        (x.evaluated_version ? ` · evaluated against version ${x.evaluated_version}` : " · not evaluated yet") }),
      el("ol", {}, x.recent.map((m) => el("li", {}, el("a", { href: `#/paper/${m.paper_id}`, text: m.title }),
        el("span", { class: "hint", text: m.initial ? " already in the corpus" : ` new in version ${m.version}` }))))))
      : [el("p", { class: "hint", text: "no saved searches yet" })]));
  } catch (e) {
    $("watch-list").replaceChildren(el("p", { class: "hint", text: e.message }));
  }
}

$("search-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.lastSearch = null;
  location.hash = searchHash({ q: $("q").value.trim(), venue: $("venue").value.trim(), year: $("year").value.trim(),
                               author: $("author").value.trim(), sort: $("sort").value });
});

// ------------------------------------------------------------------------------ paper view
async function showPaper(paperId) {
  $("paper").hidden = true;
  try {
    const p = await (await api(`papers/${encodeURIComponent(paperId)}`)).json();
    state.paper = p;
    renderPaper(p);
    $("paper").hidden = false;
    window.scrollTo(0, 0);
  } catch (e) {
    notice(e.message);
  }
}

function sectionNode(s) {
  const pages = s.page_numbers && s.page_numbers.length ? ` (p. ${s.page_numbers.join(", ")})` : "";
  return el("details", { class: "section" },
    el("summary", {}, el("span", { text: s.title || "(untitled)" }), el("span", { class: "hint", text: pages })),
    s.summary ? el("p", { class: "summary", text: s.summary }) : null,
    el("div", { class: "section-text", text: s.content || "" }),
    s.children && s.children.length ? el("div", { class: "children" }, s.children.map(sectionNode)) : null);
}

function showOnPage(p, page, bbox, caption) {
  return el("button", { type: "button", class: "link", onclick: () => openPage(p.paper_id, page, bbox, caption) },
    `show on page ${page}`);
}

function renderPaper(p) {
  $("paper-title").textContent = p.title;
  $("paper-meta").replaceChildren(...[
    p.venue ? el("span", { class: "badge", text: p.venue }) : null,
    p.year ? el("span", { class: "badge", text: String(p.year) }) : null,
    p.volume ? el("span", { class: "badge light", text: p.volume }) : null,
    p.conference_full ? el("span", { class: "hint", text: p.conference_full }) : null,
    p.num_pages ? el("span", { class: "hint", text: `${p.num_pages} pages` }) : null,
    p.download_url ? el("a", { href: p.download_url, target: "_blank", rel: "noopener", text: "PDF" }) : null,
    exportLink(`papers/${encodeURIComponent(p.paper_id)}.bib`, `neusym-${p.paper_id}.bib`, "this paper as BibTeX"),
  ].filter(Boolean));
  $("paper-authors").textContent = (p.authors || []).join(", ");
  $("paper-abstract").textContent = p.abstract || "(no abstract)";
  $("paper-tldr").replaceChildren(...(p.tldr ? [el("p", {}, el("b", { text: "TL;DR " }), p.tldr)] : []),
    ...(p.tags && p.tags.length ? [el("p", {}, p.tags.map((t) => el("span", { class: "badge light", text: t })))] : []));
  const c = p.counts;
  $("paper-counts").textContent = p.has_pdf
    ? `${c.sections} sections · ${c.tables} tables · ${c.figures} figures · ${c.equations} equations · ${c.references} references`
      + (c.references_in_corpus ? ` (${c.references_in_corpus} in this corpus)` : "") + ` · cited by ${c.cited_by || 0} in this corpus`
    : "only the metadata of this paper is in the corpus (its PDF has not been parsed)";
  $("pane-sections").replaceChildren(...(p.sections.length ? p.sections.map(sectionNode) : [el("p", { class: "hint", text: "no sections" })]));
  $("pane-tables").replaceChildren(...(p.tables.length ? p.tables.map((t) => {
    const box = el("div", { class: "table-html" });
    if (t.content_html) box.innerHTML = t.content_html;  // sanitised by the server (nh3, table tags only)
    else box.append(el("p", { class: "hint", text: "the cells of this table could not be extracted" }));
    return el("figure", { class: "paper-table", "data-table-id": t.table_id },
      el("figcaption", {}, el("span", { text: t.caption || "" }), " ",
        t.bounding_box ? showOnPage(p, t.page_number, t.bounding_box, t.caption) : null),
      box, t.summary ? el("p", { class: "summary", text: t.summary }) : null);
  }) : [el("p", { class: "hint", text: "no tables" })]));
  $("pane-figures").replaceChildren(...(p.figures.length ? p.figures.map((f) => {
    const img = el("img", { class: "figure-crop", alt: f.caption || "figure", loading: "lazy" });
    const fig = el("figure", { class: "paper-figure", "data-image-id": f.image_id }, img,
      el("figcaption", {}, el("span", { text: f.caption || "" }), " ",
        f.bounding_box ? showOnPage(p, f.page_number, f.bounding_box, f.caption) : null),
      f.summary ? el("p", { class: "summary", text: f.summary }) : null);
    if (f.bounding_box && p.has_pdf) img.dataset.lazy = pageUrl(p.paper_id, f.page_number, f.bounding_box, "crop=true&zoom=1.25");
    return fig;
  }) : [el("p", { class: "hint", text: "no figures" })]));
  $("pane-equations").replaceChildren(...(p.equations.length ? [el("ol", {}, p.equations.map((e) =>
    el("li", {}, el("code", { text: e.content || "" }), e.number ? ` (${e.number}) ` : " ",
      e.bounding_box ? showOnPage(p, e.page_number, e.bounding_box, `Equation ${e.number || ""}`) : null)))]
    : [el("p", { class: "hint", text: "no equations" })]));
  $("pane-references").replaceChildren(...(p.references.length ? [el("ol", {}, p.references.map((r) =>
    el("li", { text: r.content || "" }, r.cited_paper_id ? el("a", { class: "in-corpus", href: `#/paper/${r.cited_paper_id}`,
      title: r.cited_title || "", text: " → in this corpus" }) : null)))] : [el("p", { class: "hint", text: "no references" })]));
  const citedBy = p.cited_by || [];
  $("citedby-tab").textContent = `Cited by (${citedBy.length})`;
  $("pane-citedby").replaceChildren(
    el("p", { class: "hint", id: "cited-by-count", text: `cited by ${citedBy.length} papers in this corpus` }),
    ...(citedBy.length ? [el("ol", {}, citedBy.map(paperLink))] : []));
  $("pane-similar").replaceChildren(el("p", { class: "hint", text: "loading…" }));
  api(`papers/${encodeURIComponent(p.paper_id)}/similar?limit=10`).then((r) => r.json()).then((d) => {
    $("pane-similar").replaceChildren(...(d.hits.length ? [el("ol", {}, d.hits.map((h) => el("li", {},
      el("a", { href: `#/paper/${h.paper_id}`, text: h.title }),
      el("span", { class: "hint", text: ` ${[h.venue ? h.venue.toUpperCase() : null, h.year].filter(Boolean).join(" ")} · similarity ${h.score.toFixed(2)}` }))))]
      : [el("p", { class: "hint", text: "no similar papers" })]));
  }).catch((e) => $("pane-similar").replaceChildren(el("p", { class: "hint", text: e.message })));
  selectPane("sections");
  $("back-to-search").href = state.lastSearch ? searchHash(state.lastSearch.filters) : "#/search";
}

function selectPane(name) {
  document.querySelectorAll("#paper-tabs button").forEach((b) => b.classList.toggle("active", b.dataset.pane === name));
  for (const pane of ["sections", "tables", "figures", "equations", "references", "citedby", "similar"]) $("pane-" + pane).hidden = pane !== name;
  if (name === "figures") {
    document.querySelectorAll("#pane-figures img[data-lazy]").forEach((img) => {
      const url = img.dataset.lazy;
      delete img.dataset.lazy;
      loadImage(img, url).catch((e) => { img.alt = e.message; });
    });
  }
}

$("paper-tabs").addEventListener("click", (ev) => {
  if (ev.target.dataset && ev.target.dataset.pane) selectPane(ev.target.dataset.pane);
});

$("ask-about-paper").addEventListener("click", () => {
  if (!state.paper) return;
  state.askPapers = [{ paper_id: state.paper.paper_id, title: state.paper.title }];
  location.hash = "#/ask";
});

// ------------------------------------------------------------------------------ ask
let methodsLoaded = false;

async function showAsk() {
  renderAskPapers();
  if (!methodsLoaded) {
    methodsLoaded = true;
    try {
      const methods = await (await api("ask/methods")).json();
      // the paper's baselines stay with evaluation (neusym eval run --method): not in the page's menu
      $("ask-method").append(...methods.filter((m) => !m.baseline)
        .map((m) => el("option", { value: m.name, title: m.description, text: m.name })));
    } catch (e) { methodsLoaded = false; }
  }
  $("question").focus();
}

function renderAskPapers() {
  $("ask-papers").replaceChildren(...state.askPapers.map((p, i) => el("span", { class: "chip", "data-paper-id": p.paper_id },
    (p.title || p.paper_id).slice(0, 60) + " ",
    el("button", { type: "button", class: "link", title: "remove", onclick: () => { state.askPapers.splice(i, 1); renderAskPapers(); } }, "✕"))));
}

$("ask-paper-input").addEventListener("change", () => {
  const v = $("ask-paper-input").value.trim();
  if (v) { state.askPapers.push({ paper_id: v, title: null }); $("ask-paper-input").value = ""; renderAskPapers(); }
});

function parseSse(buffer, onEvent) {
  // returns the unconsumed rest; events are separated by a blank line
  let idx;
  while ((idx = buffer.search(/\r?\n\r?\n/)) >= 0) {
    const block = buffer.slice(0, idx);
    buffer = buffer.slice(idx + buffer.slice(idx).match(/^\r?\n\r?\n/)[0].length);
    let event = "message";
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith(":")) continue;  // keep-alive comment
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (data.length) onEvent(event, JSON.parse(data.join("\n")));
  }
  return buffer;
}

function stepNode(s) {
  const args = s.arguments || {};
  const detail = [];
  if (args.sql) detail.push(el("pre", { class: "code", text: args.sql }));
  const rest = Object.fromEntries(Object.entries(args).filter(([k]) => k !== "sql"));
  if (Object.keys(rest).length) detail.push(el("pre", { class: "code light", text: JSON.stringify(rest, null, 1) }));
  let view = null;
  if (s.action === "ViewImage" && args.paper_id && args.page_number) {
    view = el("button", { type: "button", class: "link", onclick: () => openPage(args.paper_id, args.page_number, args.bounding_box, `ViewImage: page ${args.page_number}`) }, "view this region");
  }
  return el("li", { class: "step" + (s.error ? " error" : ""), "data-action": s.action },
    el("div", { class: "step-head" }, el("b", { text: `${s.index}. ${s.action || "(invalid reply)"}` }),
      el("span", { class: "hint", text: ` ${s.seconds != null ? s.seconds.toFixed(1) + " s" : ""}${s.fixed ? " · fixed by the method" : ""}` }), " ", view),
    s.thought ? el("p", { class: "thought", text: s.thought }) : null,
    ...detail,
    s.observation ? el("details", {}, el("summary", { text: "observation" }), el("pre", { class: "observation", text: s.observation })) : null);
}

function citationNode(c, i) {
  const where = [c.table_name && c.column_name ? `${c.table_name}.${c.column_name}` : c.table_name,
    c.page_number ? `page ${c.page_number}` : null].filter(Boolean).join(", ");
  const label = `${c.title || c.paper_id || "source"}${where ? " — " + where : ""}`;
  const head = c.page_image
    ? el("a", { href: "#", class: "citation-link", "data-index": String(i),
                onclick: (ev) => { ev.preventDefault(); openPage(c.paper_id, c.page_number, c.bounding_box, label, c.page_image); } }, label)
    : el("span", { text: label });
  return el("li", { class: "citation" }, head, c.quote ? el("blockquote", { text: c.quote }) : null);
}

function renderAnswer(a) {
  $("answer").hidden = false;
  const text = typeof a.answer === "string" ? a.answer : JSON.stringify(a.answer);
  $("answer-text").textContent = a.answer === null || a.answer === undefined ? "(no answer: " + a.stop_reason + ")" : text;
  $("answer-meta").textContent = [a.route ? `route ${a.route}` : null, a.method ? `method ${a.method}` : null,
    `${a.turns} turns`, `${a.seconds} s`, `corpus version ${a.version}`].filter(Boolean).join(" · ");
  const v = a.verification;
  const checkText = (c) => {
    if (typeof c === "string") return c;
    const mark = c.ok === true ? "✓" : c.ok === false ? "✗" : "?";
    return [mark, c.claim ? `“${c.claim}”` : null, c.kind ? `(${c.kind})` : null, c.detail || null].filter(Boolean).join(" ");
  };
  const basis = v && v.basis_text;  // what the answer is (neusym.query.answer.verify.BASES)
  $("verification").replaceChildren(...(v ? [
    el("p", { class: "verification " + v.status, "data-status": v.status, "data-basis": v.basis || "" },
      `verification: ${v.status}${v.repaired ? " (after one repair round)" : ""}${basis ? " · " + basis : ""}`),
    el("ul", { class: "checks" }, (v.checks || []).slice(0, 8).map((c) => el("li", { class: "hint", text: checkText(c) })))] : []));
  const cites = a.citations || [];
  $("citations-heading").hidden = cites.length === 0;
  $("citations").replaceChildren(...cites.map(citationNode));
}

$("ask-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = { question: $("question").value.trim(), paper_ids: state.askPapers.map((p) => p.paper_id) };
  if ($("ask-method").value) body.method = $("ask-method").value;
  if ($("answer-shape").value) body.shape = $("answer-shape").value;
  $("steps").replaceChildren(); $("answer").hidden = true; $("steps-heading").hidden = true;
  $("ask-button").disabled = true;
  $("ask-status").textContent = "asking…";
  const started = performance.now();
  try {
    const res = await api("ask", { method: "POST", body: JSON.stringify(body),
                                   headers: { "Content-Type": "application/json", Accept: "text/event-stream" } });
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer = parseSse(buffer + decoder.decode(value, { stream: true }), (event, data) => {
        if (event === "queued") $("ask-status").textContent = "waiting for the model (another question is running)…";
        else if (event === "start") $("ask-status").textContent = `thinking on corpus version ${data.version}…`;
        else if (event === "step") { $("steps-heading").hidden = false; $("steps").append(stepNode(data));
          $("ask-status").textContent = `step ${data.index} done, thinking…`; }
        else if (event === "answer") { renderAnswer(data); $("ask-status").textContent = `answered in ${((performance.now() - started) / 1000).toFixed(1)} s`; }
        else if (event === "error") { notice(data.detail); $("ask-status").textContent = "failed"; }
      });
    }
  } catch (e) {
    notice(e.message);
    $("ask-status").textContent = "failed";
  } finally {
    $("ask-button").disabled = false;
  }
});

// ------------------------------------------------------------------------------ SQL console
let schemaLoaded = false;

async function showSql() {
  if (schemaLoaded) return;
  try {
    const s = await (await api("schema")).json();
    schemaLoaded = true;
    $("sql-examples").append(...s.examples.map((e, i) => el("option", { value: String(i), text: e.title })));
    $("sql-examples").onchange = () => { const e = s.examples[+$("sql-examples").value]; if (e) $("sql").value = e.sql; };
    $("schema-list").replaceChildren(...s.relations.map((r) => el("details", { class: "relation" },
      el("summary", {}, el("code", { text: r.name }), el("span", { class: "hint", text: ` ${r.kind}` })),
      r.comment ? el("p", { class: "hint", text: r.comment }) : null,
      el("ul", {}, r.columns.map((c) => el("li", { title: c.comment || "" }, el("code", { text: c.name }),
        el("span", { class: "hint", text: ` ${c.type}` })))))));
  } catch (e) { notice(e.message); }
}

async function runSql(format) {
  const res = await api("sql", { method: "POST", headers: { "Content-Type": "application/json" },
                                  body: JSON.stringify({ sql: $("sql").value, format }) });
  return res;
}

$("sql-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("sql-status").textContent = "running…";
  $("sql-run").disabled = true;
  try {
    const r = await (await runSql("json")).json();
    const table = $("sql-result");
    table.replaceChildren(
      el("thead", {}, el("tr", {}, r.columns.map((c, i) => el("th", { title: r.types[i], text: c })))),
      el("tbody", {}, r.rows.map((row) => el("tr", {}, row.map((v) =>
        el("td", { class: v === null ? "null" : null, text: v === null ? "NULL" : (typeof v === "object" ? JSON.stringify(v) : String(v)) }))))));
    $("sql-status").textContent = `${r.row_count} rows · ${(r.elapsed_s * 1000).toFixed(0)} ms · version ${r.version}` +
      (r.truncated ? ` · cut by the ${r.truncated_by} limit` : "");
  } catch (e) {
    $("sql-status").textContent = "";
    notice(e.message);
  } finally {
    $("sql-run").disabled = false;
  }
});

$("sql-csv").addEventListener("click", async () => {
  try {
    const blob = await (await runSql("csv")).blob();
    const a = el("a", { href: URL.createObjectURL(blob), download: "neusym.csv" });
    document.body.append(a); a.click(); a.remove();
  } catch (e) { notice(e.message); }
});

// ------------------------------------------------------------------------------ header
async function health() {
  try {
    const res = await fetch("healthz");
    const h = await res.json();
    $("corpus-status").textContent = res.ok ? `corpus v${h.version} · ${h.papers.toLocaleString()} papers` : "no corpus yet";
    $("corpus-status").title = res.ok ? `published ${h.published_at || "?"}` : (h.detail || "");
  } catch (e) {
    $("corpus-status").textContent = "server unreachable";
  }
}

$("key-button").addEventListener("click", () => {
  const key = prompt("API key (stored in this browser only):", localStorage.getItem(KEY_STORE) || "");
  if (key === null) return;
  if (key) localStorage.setItem(KEY_STORE, key); else localStorage.removeItem(KEY_STORE);
  state.lastSearch = null; schemaLoaded = false;
  route();
});
if (localStorage.getItem(KEY_STORE)) $("key-button").hidden = false;

window.addEventListener("hashchange", route);
health();
setInterval(health, 30000);
route();
