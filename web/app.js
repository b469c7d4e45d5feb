/* Patina's web UI: search by photo, identification, collections and bulk
 * jobs, over the JSON API of `patina serve` (docs/serve.md). Plain browser
 * JavaScript, no dependencies. Every request goes through api(); every error
 * (an RFC 9457 problem document, or the network) is shown by showProblem().
 *
 * Two things the UI uses when the server has them, and does without
 *   otherwise:
 *   - an image's thumbnail at GET /v1/collections/{c}/images/{key}?thumbnail=N
 *     (a JPEG made by the server) and its original at ?content=1 (a tile
 *     links to it; the identification figure draws it); the server has them
 *     only for keys that are files under its --content-dir or --import-dir:
 *     otherwise a 404 and the tile says "no preview";
 *   - keypoint pairs of a verified identification candidate, as
 *     hits[i].pairs = [[qx, qy, rx, ry], ...] in the images' pixels (the
 *     lines drawn between the two images; the canvas's data-pairs says how
 *     many were drawn). */
"use strict";

const $ = (id) => document.getElementById(id);
const API = "/v1";
let collections = [];

/* ------------------------------------------------------------------ api */

class Problem extends Error {
  constructor(status, title, detail) {
    super(detail || title);
    this.status = status;
    this.title = title;
  }
}

async function api(path, options = {}) {
  let resp;
  try {
    resp = await fetch(API + path, options);
  } catch (e) {
    throw new Problem(0, "Network error", `${options.method || "GET"} ${API + path}: ${e.message}`);
  }
  const type = resp.headers.get("Content-Type") || "";
  let body = null;
  if (type.includes("json")) {
    try { body = await resp.json(); } catch (e) { body = null; }
  }
  if (!resp.ok) {
    if (body && (body.detail || body.title))   // RFC 9457 problem details
      throw new Problem(body.status || resp.status, body.title || resp.statusText, body.detail || "");
    throw new Problem(resp.status, resp.statusText || "Error", `${options.method || "GET"} ${API + path}`);
  }
  return body;
}

function showProblem(err) {
  const box = $("error");
  box.textContent = "";
  const strong = document.createElement("strong");
  strong.textContent = err.status ? `${err.status} ${err.title || ""}`.trim() : (err.title || "Error");
  box.appendChild(strong);
  const detail = err.message && err.message !== err.title ? err.message : "";
  if (detail) box.appendChild(document.createTextNode(": " + detail));
  box.hidden = false;
}

function clearProblem() { $("error").hidden = true; }

const imagePath = (coll, key) =>
  `/collections/${encodeURIComponent(coll)}/images/${encodeURIComponent(key)}`;
const contentURL = (coll, key) => API + imagePath(coll, key) + "?content=1";
/* 256 px on the longer side: sharp in a 130-px tile on a screen of 2 pixels per CSS pixel */
const thumbURL = (coll, key) => API + imagePath(coll, key) + "?thumbnail=256";

/* What each page can use: a collection is offered on the Search page when
 * it has a searchable table, on the Identify page when it has an
 * identification table (each table's `use`, from GET /v1/collections). */
const tablesFor = (c, use) => (c.tables || []).filter((t) => t.use === use);
const PAGES = {
  search: { select: "search-collection", note: "search-note", go: "search-go", use: "search",
            what: "a searchable table", other: "identification only: the Identify page" },
  identify: { select: "identify-collection", note: "identify-note", go: "identify-go", use: "identify",
              what: "an identification table (rootsift)", other: "search only: the Search page" },
};

/* ---------------------------------------------------------------- pages */

function route() {
  const page = (location.hash || "#search").slice(1);
  for (const p of ["search", "identify", "collections"]) {
    $("page-" + p).hidden = p !== page;
    $("nav-" + p).classList.toggle("active", p === page);
  }
  clearProblem();
  return page;
}

function fillSelect(sel, values, keep) {
  const old = keep ? sel.value : null;
  sel.textContent = "";
  for (const v of values) {
    const o = document.createElement("option");
    o.value = o.textContent = v;
    sel.appendChild(o);
  }
  if (old && values.includes(old)) sel.value = old;
}

/* Loads in flight: while any is, the collections table is aria-busy (the
 * selects and the table are replaced when one ends). */
let loadsPending = 0;

async function loadCollections() {
  loadsPending++;
  $("collections-table").setAttribute("aria-busy", "true");
  try {
    fillCollections(await api("/collections"));
  } finally {
    loadsPending--;
    $("collections-table").setAttribute("aria-busy", String(loadsPending > 0));
  }
}

/* Why a collection is not offered on a page, in a few words. */
function notOffered(c, page) {
  if (!(c.tables || []).length) return `${c.name}: no tables yet (add images on the Collections page)`;
  const name = (t) => t.family || t.spec;   // the family's name: the full spec is long
  const other = (c.tables || []).filter((t) => t.use && t.use !== page.use);
  return other.length ? `${c.name}: ${other.map(name).join(", ")} (${page.other})`
                      : `${c.name}: ${(c.tables || []).map(name).join(", ")} (neither searchable nor for identification)`;
}

/* The page's collection menu (only the collections it can use) and a note
 * naming the others; with none usable the note says so and the button is off. */
function fillPage(page) {
  const usable = collections.filter((c) => tablesFor(c, page.use).length);
  fillSelect($(page.select), usable.map((c) => c.name), true);
  const others = collections.filter((c) => !usable.includes(c)).map((c) => notOffered(c, page));
  const note = $(page.note);
  note.textContent = !usable.length
    ? `No collection served here has ${page.what}. ` + (others.length ? others.join("; ") + "." : "")
    : others.length ? "Not offered here: " + others.join("; ") + "." : "";
  note.hidden = !note.textContent;
  note.classList.toggle("none", !usable.length);
  $(page.go).disabled = !usable.length;
}

function fillCollections(data) {
  collections = data.collections || [];
  fillPage(PAGES.search);
  fillPage(PAGES.identify);
  fillSelect($("job-collection"), collections.map((c) => c.name), true);
  fillFamilies();
  const tbody = $("collections-table").querySelector("tbody");
  tbody.textContent = "";
  for (const c of collections) {
    const tr = document.createElement("tr");
    const tables = (c.tables || []).map((t) => `${t.spec} (${t.rows})`).join("\n");
    for (const v of [c.name, String(c.records), tables]) {
      const td = document.createElement("td");
      td.textContent = v;
      td.style.whiteSpace = "pre-line";
      tr.appendChild(td);
    }
    tbody.appendChild(tr);
  }
}

function fillFamilies() {
  const c = collections.find((x) => x.name === $("search-collection").value);
  fillSelect($("search-family"), c ? tablesFor(c, "search").map((t) => t.spec) : [], true);
}

/* ------------------------------------------------------- photo choosers */

function chooser(dropId, fileId, previewId) {
  const drop = $(dropId), input = $(fileId), preview = $(previewId);
  const state = { file: null };
  const take = (file) => {
    if (!file) return;
    state.file = file;
    if (preview.src) URL.revokeObjectURL(preview.src);
    preview.src = URL.createObjectURL(file);
    preview.hidden = false;
  };
  input.addEventListener("change", () => take(input.files[0]));
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    take(e.dataTransfer.files[0]);
  });
  return state;
}

/* --------------------------------------------------------------- search */

const searchPhoto = chooser("search-drop", "search-file", "search-preview");

async function search(ev) {
  ev.preventDefault();
  clearProblem();
  const coll = $("search-collection").value;
  if (!searchPhoto.file) return showProblem(new Problem(0, "No photo", "drop or pick a photo first"));
  const form = new FormData();
  form.append("image", searchPhoto.file, searchPhoto.file.name);
  form.append("k", $("search-k").value);
  if ($("search-family").value) form.append("family", $("search-family").value);
  $("search-go").disabled = true;
  $("search-summary").textContent = "searching…";
  try {
    const res = await api(`/collections/${encodeURIComponent(coll)}/search`, { method: "POST", body: form });
    showHits(coll, res);
  } catch (e) {
    $("search-summary").textContent = "";
    $("search-results").textContent = "";
    showProblem(e);
  } finally {
    $("search-go").disabled = !$("search-collection").value;
  }
}

/* A key on one line however long: the folder part shrinks first (an
 * ellipsis), then the file name; the whole key is the title. */
function keyLine(prefix, k) {
  const line = document.createElement("div"), dir = document.createElement("span"),
        name = document.createElement("span");
  line.className = "key";
  line.title = k;
  const cut = k.lastIndexOf("/") + 1;
  dir.className = "dir";
  dir.textContent = prefix + k.slice(0, cut);
  name.className = "name";
  name.textContent = k.slice(cut);
  line.append(dir, name);
  return line;
}

function showHits(coll, res) {
  const hits = res.hits || [];
  $("search-summary").textContent =
    `${hits.length} of ${res.rows} images in ${coll}, by ${res.family}` + (res.truncated ? " (cut)" : "");
  const ol = $("search-results");
  ol.textContent = "";
  for (const h of hits) {
    const li = document.createElement("li");
    li.className = "hit";
    li.dataset.key = h.key;
    /* the server's thumbnail, a link to the original (a new tab) */
    const thumb = document.createElement("a");
    thumb.className = "thumb";
    thumb.href = contentURL(coll, h.key);
    thumb.target = "_blank";
    thumb.rel = "noopener";
    thumb.title = `${h.key} (the original, in a new tab)`;
    const img = document.createElement("img");
    img.alt = h.key;
    img.loading = "lazy";
    img.onerror = () => {   // no file for this key: no preview and no link
      const box = document.createElement("div"), none = document.createElement("span");
      box.className = "thumb";
      none.className = "none";
      none.textContent = "no preview";
      box.appendChild(none);
      thumb.replaceWith(box);
    };
    img.src = thumbURL(coll, h.key);
    thumb.appendChild(img);
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.appendChild(keyLine(`${h.rank}. `, h.key));
    const dist = document.createElement("div");
    dist.className = "dist";
    dist.textContent = h.distance === null ? "distance: NaN" : `distance ${Number(h.distance).toPrecision(6)}`;
    meta.append(dist);
    li.append(thumb, meta);
    ol.appendChild(li);
  }
}

/* ------------------------------------------------------------- identify */

const identifyPhoto = chooser("identify-drop", "identify-file", "identify-preview");
let lastIdentify = null;

async function identify(ev) {
  ev.preventDefault();
  clearProblem();
  const coll = $("identify-collection").value;
  if (!identifyPhoto.file) return showProblem(new Problem(0, "No photo", "drop or pick a photo first"));
  const form = new FormData();
  form.append("image", identifyPhoto.file, identifyPhoto.file.name);
  form.append("k", $("identify-k").value);
  form.append("verify", $("identify-verify").checked ? "1" : "0");
  // a close-up: the photo halved is identified too, its answer kept when it wins (docs/serve.md)
  if ($("identify-closeup").checked) form.append("half_query", "64");
  $("identify-go").disabled = true;
  try {
    const res = await api(`/collections/${encodeURIComponent(coll)}/identify`, { method: "POST", body: form });
    lastIdentify = { coll, res };
    showIdentification(coll, res);
  } catch (e) {
    $("identify-decision").hidden = true;
    $("identify-candidates").hidden = true;
    $("identify-figure").hidden = true;
    showProblem(e);
  } finally {
    $("identify-go").disabled = !$("identify-collection").value;
  }
}

// a significance with two decimals (an integer count as it is)
function score(h) {
  return Number.isInteger(h.score) ? String(h.score) : h.score.toFixed(2);
}

function showIdentification(coll, res) {
  const d = $("identify-decision");
  const hits = res.hits || [];
  d.className = "decision " + res.decision;
  // a verified score is the significance of its inliers (or their count with accept=inliers)
  const sig = (h) => h.verified && res.accept !== "inliers";
  const said = (h) => (sig(h) ? `significance ${score(h)} (${h.inliers} inliers)`
    : `${h.score} ${h.verified ? "inliers" : "matches"}`);
  const best = hits.length ? `the best, ${hits[0].key}, scored ${said(hits[0])}` : "no candidate";
  const against = typeof res.threshold === "number" ? `the threshold of ${res.threshold}` : "the threshold";
  d.textContent = res.decision === "match"
    ? `Match: ${hits[0].key} (${said(hits[0])} >= ${against}; ${res.features} query features)`
    : res.decision === "ambiguous"
    ? `Ambiguous: the photo shows content of ${hits[0].key} (${said(hits[0])}) and of ` +
      `${hits[1] ? hits[1].key : "the next candidate"} (${hits[1] ? said(hits[1]) : "?"}), ` +
      `both >= ${against}; ${res.features} query features`
    : `Unknown: no registered item reaches ${against} (${best}; ${res.features} query features)`;
  if (res.half_query && res.half_query.taken)
    d.textContent += ` (answered by the photo halved: its scores less ${res.half_query.margin})`;
  d.hidden = false;
  const table = $("identify-candidates"), tbody = table.querySelector("tbody");
  tbody.textContent = "";
  hits.forEach((h, i) => {
    const tr = document.createElement("tr");
    tr.dataset.key = h.key;
    for (const v of [h.rank, h.key, sig(h) ? score(h) : h.score, h.inliers, h.matches, h.verified ? "yes" : "no"]) {
      const td = document.createElement("td");
      td.textContent = String(v);
      tr.appendChild(td);
    }
    tr.addEventListener("click", () => drawPair(coll, h, tr));
    tbody.appendChild(tr);
    if (i === 0) drawPair(coll, h, tr);
  });
  table.hidden = hits.length === 0;
  if (!hits.length) $("identify-figure").hidden = true;
}

function loadImage(src) {
  return new Promise((resolve) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => resolve(null);
    img.src = src;
  });
}

/* The query (left) and a candidate (right) side by side, each scaled into
 * its half; the verified keypoint pairs as lines between them. */
async function drawPair(coll, hit, tr) {
  for (const row of tr.parentNode.children) row.classList.toggle("selected", row === tr);
  const canvas = $("identify-canvas"), ctx = canvas.getContext("2d");
  const [q, r] = await Promise.all([loadImage($("identify-preview").src), loadImage(contentURL(coll, hit.key))]);
  const W = canvas.width, H = canvas.height, half = W / 2, gap = 8;
  ctx.clearRect(0, 0, W, H);
  canvas.dataset.pairs = "0";
  const place = (img, x0) => {
    if (!img) return null;
    const s = Math.min((half - gap) / img.naturalWidth, H / img.naturalHeight);
    const w = img.naturalWidth * s, h = img.naturalHeight * s;
    const x = x0 + (half - gap - w) / 2, y = (H - h) / 2;
    ctx.drawImage(img, x, y, w, h);
    return { x, y, s };
  };
  const pq = place(q, 0), pr = place(r, half + gap);
  if (!pr) {
    ctx.fillStyle = "#5f6b78";
    ctx.font = "14px system-ui, sans-serif";
    ctx.fillText(`no preview of ${hit.key}`, half + gap + 10, H / 2);
  }
  const pairs = Array.isArray(hit.pairs) ? hit.pairs : [];
  let drawn = 0;
  if (pq && pr && pairs.length) {
    ctx.lineWidth = 1;
    pairs.forEach(([qx, qy, rx, ry], i) => {
      ctx.strokeStyle = `hsl(${(i * 47) % 360}, 80%, 45%)`;
      ctx.beginPath();
      ctx.moveTo(pq.x + qx * pq.s, pq.y + qy * pq.s);
      ctx.lineTo(pr.x + rx * pr.s, pr.y + ry * pr.s);
      ctx.stroke();
      drawn++;
    });
  }
  canvas.dataset.pairs = String(drawn);
  $("identify-caption").textContent = drawn
    ? `${drawn} verified keypoint pairs between the photo and ${hit.key}` +
      (drawn < hit.inliers ? ` (of ${hit.inliers} inliers)` : "")
    : pairs.length
      ? `${hit.key}: ${pairs.length} keypoint pairs, not drawn (no preview of one of the images)`
      : `${hit.key}: ${hit.inliers} inliers (no keypoint pairs to draw: not verified)`;
  $("identify-figure").hidden = false;
}

/* ----------------------------------------------------------------- jobs */

/* A POSIX ustar archive of File objects: the body of a bulk job upload. */
async function tarOf(files) {
  const parts = [];
  const enc = new TextEncoder();
  const field = (buf, off, len, s) => buf.set(enc.encode(s).slice(0, len), off);
  const octal = (n, len) => n.toString(8).padStart(len - 1, "0") + "\0";
  const used = new Set();
  for (const f of files) {
    let name = f.name.replace(/[^\w.\-]/g, "_").slice(-90) || "image";
    while (used.has(name)) name = "_" + name;
    used.add(name);
    const data = new Uint8Array(await f.arrayBuffer());
    const h = new Uint8Array(512);
    field(h, 0, 100, name);
    field(h, 100, 8, "0000644\0");
    field(h, 108, 8, "0000000\0");
    field(h, 116, 8, "0000000\0");
    field(h, 124, 12, octal(data.length, 12));
    field(h, 136, 12, octal(Math.floor(Date.now() / 1000), 12));
    field(h, 148, 8, "        ");
    h[156] = "0".charCodeAt(0);
    field(h, 257, 6, "ustar\0");
    field(h, 263, 2, "00");
    let sum = 0;
    for (const b of h) sum += b;
    field(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
    parts.push(h, data);
    const pad = (512 - (data.length % 512)) % 512;
    if (pad) parts.push(new Uint8Array(pad));
  }
  parts.push(new Uint8Array(1024));
  return new Blob(parts, { type: "application/x-tar" });
}

async function submitJob(ev) {
  ev.preventDefault();
  clearProblem();
  const files = [...$("job-files").files];
  const coll = $("job-collection").value;
  if (!files.length) return showProblem(new Problem(0, "No photos", "pick the photos to add"));
  $("job-go").disabled = true;
  try {
    const body = await tarOf(files);
    const fam = $("job-family").value.trim();
    const q = fam ? `?family=${encodeURIComponent(fam)}` : "";
    const headers = { "Content-Type": "application/x-tar" };
    if ($("job-token").value) headers.Authorization = "Bearer " + $("job-token").value;
    const job = await api(`/collections/${encodeURIComponent(coll)}/jobs${q}`, { method: "POST", headers, body });
    watchJob(job);
  } catch (e) {
    showProblem(e);
  } finally {
    $("job-go").disabled = false;
  }
}

function renderJob(li, job) {
  const total = job.files || 0, done = job.processed || 0;
  li.textContent = "";
  const title = document.createElement("div");
  title.className = "state-" + job.state;
  title.textContent = `job ${job.id} → ${job.collection}: ${job.state}` +
    ` — ${done}/${total} files, ${job.indexed} indexed, ${job.skipped} unchanged, ${job.failed} failed` +
    (job.message ? ` (${job.message})` : "");
  const bar = document.createElement("progress");
  bar.max = Math.max(total, 1);
  bar.value = job.state === "done" ? bar.max : done;
  li.append(title, bar);
}

const unfinished = (job) => job.state === "queued" || job.state === "running";

/* Shows a job at the top of the list and follows it while it runs. */
function watchJob(job) {
  const li = document.createElement("li");
  li.id = "job-" + job.id;
  $("jobs").prepend(li);
  renderJob(li, job);
  if (!unfinished(job)) return;
  const tick = async () => {
    try {
      const j = await api(`/jobs/${job.id}`);
      renderJob(li, j);
      if (unfinished(j)) setTimeout(tick, 500);
      else loadCollections().catch(showProblem);
    } catch (e) {
      showProblem(e);
    }
  };
  setTimeout(tick, 300);
}

/* The server's latest jobs (GET /v1/jobs, newest first: other clients' too,
 * and those a restart kept with --jobs-file) not shown yet. A server
 * without job routes (404) shows none. */
async function loadJobs() {
  let data;
  try {
    data = await api("/jobs");
  } catch (e) {
    if (e.status === 404) return;
    throw e;
  }
  for (const job of (data.jobs || []).slice(0, 20).reverse())
    if (!$("job-" + job.id)) watchJob(job);
}

/* ---------------------------------------------------------------- start */

/* The collections are loaded once at start, and again on each visit of the
 * collections page (counts change as jobs run). */
window.addEventListener("hashchange", () => {
  if (route() === "collections") {
    loadCollections().catch(showProblem);
    loadJobs().catch(showProblem);
  }
});
$("search-form").addEventListener("submit", search);
$("identify-form").addEventListener("submit", identify);
$("job-form").addEventListener("submit", submitJob);
$("search-collection").addEventListener("change", fillFamilies);
route();
loadCollections().catch(showProblem);
loadJobs().catch(showProblem);
