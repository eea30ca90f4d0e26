// The annotation page: sign in, take a task, ask, see the model's candidates, correct, submit; review; dashboard.
"use strict";

const $ = (id) => document.getElementById(id);
const COLOUR = "rgb(230, 40, 40)";
const state = {
  user: null, csrf: null, mode: "annotate", task: null, annotation: null, page: null, scale: 1, zoom: 1,
  proposal: null, selected: null, dirty: false, edits: 0, shownAt: 0, undo: [],
  tool: "words", drag: null, pan: null, prompts: [], refines: [], renewTimer: null, history: [], historyPos: -1, rejected: [], rejectedPos: -1,
};

async function api(method, path, body, tries = 4) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (method !== "GET" && state.csrf) opts.headers["X-CSRF-Token"] = state.csrf;  // the session's anti-forgery token
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  const res = await fetch(path, opts);
  if (res.status === 503 && res.headers.get("Retry-After") && tries > 1) {  // the model's queue is full: ask again
    say(`the model is busy; asking again in ${res.headers.get("Retry-After")} s`);
    await new Promise((ok) => setTimeout(ok, 1000 * Number(res.headers.get("Retry-After"))));
    return api(method, path, body, tries - 1);
  }
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (res.status === 401 && path !== "/api/login") { showLogin(); }
  if (!res.ok) { const err = new Error((data && data.detail) || res.statusText); err.status = res.status; err.data = data; throw err; }
  return data;
}

function say(text, error) { const s = $("status"); s.textContent = text || ""; s.classList.toggle("error", !!error); }
function show(id) { for (const v of document.querySelectorAll(".view")) v.classList.toggle("hidden", v.id !== id); }

function showLogin() { state.user = null; $("bar").classList.add("hidden"); show("login-view"); $("login-name").focus(); }

async function start() {
  try { state.user = await api("GET", "/api/me"); } catch (e) { return showLogin(); }
  state.csrf = state.user.csrf_token;
  $("bar").classList.remove("hidden");
  $("who").textContent = `${state.user.name} (${state.user.role}) · model ${state.user.model || "none"}`;
  $("model-tool").classList.toggle("hidden", !state.user.model);  // a server without a model keeps the manual tools
  for (const el of document.querySelectorAll(".reviewer-only")) el.classList.toggle("hidden", state.user.role === "annotator");
  for (const el of document.querySelectorAll(".admin-only")) el.classList.toggle("hidden", state.user.role !== "admin");
  openView(state.user.role === "annotator" ? "annotate" : "review");  // reviewers start where they hold no lease
  countRejected();
}

async function leaveTask() {
  // Outside Annotate nobody holds a task: give back the one held, stop renewing its lease.
  clearInterval(state.renewTimer); state.renewTimer = null;
  const t = state.task; state.task = null;
  if (t) { try { await api("POST", `/api/tasks/${t.id}/release`); } catch (e) { /* the lease may have gone */ } }
}

async function openView(view) {
  if (view !== "annotate") await leaveTask();
  state.mode = view;
  for (const b of document.querySelectorAll("header nav button")) b.classList.toggle("active", b.dataset.view === view);
  if (view === "dashboard") { show("dashboard-view"); return loadDashboard(); }
  if (view === "password") { show("password-view"); $("password-status").textContent = ""; $("password-old").focus(); return; }
  show("work-view");
  $("annotate-actions").classList.toggle("hidden", view !== "annotate");
  $("review-actions").classList.toggle("hidden", view !== "review");
  $("propose").classList.toggle("hidden", view !== "annotate");
  return view === "annotate" ? nextTask() : nextReview();
}

// ---- the page and its layers ---------------------------------------------------------------------------------
function fitScale() { return Math.max(200, $("stage-wrap").clientWidth - 32) / state.page.width; }
function layout() {
  // The page fills the width of the view at zoom 1; + / - zoom in and out, scrolling (or a middle-button drag) pans.
  state.scale = fitScale() * state.zoom;
  const w = Math.round(state.page.width * state.scale), h = Math.round(state.page.height * state.scale);
  $("page-img").style.width = w + "px"; $("page-img").style.height = h + "px";
  for (const id of ["words-layer", "mask", "pointer-layer"]) { const c = $(id); c.style.width = w + "px"; c.style.height = h + "px"; }
  $("zoom-level").textContent = `${Math.round(state.zoom * 100)} %`;
}
function zoomBy(factor) {
  if (!state.page) return;
  const wrap = $("stage-wrap"), cx = (wrap.scrollLeft + wrap.clientWidth / 2) / state.scale, cy = (wrap.scrollTop + wrap.clientHeight / 2) / state.scale;
  state.zoom = factor ? Math.min(8, Math.max(0.25, state.zoom * factor)) : 1;
  layout(); drawWords();
  wrap.scrollLeft = cx * state.scale - wrap.clientWidth / 2; wrap.scrollTop = cy * state.scale - wrap.clientHeight / 2;  // keep the centre
}
function loadPage(page) {
  state.page = page;
  return new Promise((resolve, reject) => {
    const img = $("page-img");
    img.onload = () => {
      for (const id of ["words-layer", "mask", "pointer-layer"]) { const c = $(id); c.width = page.width; c.height = page.height; }
      layout(); drawWords(); state.undo = []; state.shownAt = performance.now(); resolve();
    };
    img.onerror = () => reject(new Error("the page image did not load"));
    img.src = `/api/pages/${page.id}/image`;
  });
}

function drawWords() {
  const ctx = $("words-layer").getContext("2d");
  ctx.clearRect(0, 0, state.page.width, state.page.height);
  ctx.strokeStyle = "rgba(20, 60, 160, 0.45)"; ctx.lineWidth = Math.max(1, 1 / state.scale);
  for (const w of state.page.words) { const [x0, y0, x1, y1] = w.box; ctx.strokeRect(x0, y0, x1 - x0, y1 - y0); }
}

const maskCtx = () => $("mask").getContext("2d", { willReadFrequently: true });
function snapshot() {
  state.undo.push(maskCtx().getImageData(0, 0, state.page.width, state.page.height));
  if (state.undo.length > 40) state.undo.shift();
}
function edited() { state.dirty = true; state.edits += 1; markSelected(); }
function clearMask() { maskCtx().clearRect(0, 0, state.page.width, state.page.height); }
function maskIsEmpty() {
  const d = maskCtx().getImageData(0, 0, state.page.width, state.page.height).data;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 127) return false;
  return true;
}
function drawImageToMask(src) {
  return new Promise((resolve) => { const im = new Image(); im.onload = () => { clearMask(); maskCtx().drawImage(im, 0, 0); resolve(); }; im.src = src; });
}

// ---- proposals -------------------------------------------------------------------------------------------------
async function propose() {
  const q = $("question").value.trim();
  if (!q) { say("write a question first", true); return; }
  if (!state.task) return;
  say("asking the model…");
  state.prompts = []; state.refines = []; drawPrompts();  // a new proposal starts the corrections afresh
  const t0 = performance.now();
  try {
    state.proposal = await api("POST", `/api/tasks/${state.task.id}/propose`, { question: q });
  } catch (e) { say(e.message, true); return; }
  renderCandidates();
  await selectCandidate(state.proposal.best);
  say(`proposals in ${((performance.now() - t0) / 1000).toFixed(2)} s; the best is selected`);
}

// ---- refinement: clicks and boxes go to the model, which answers again from the page's cached encoding ----------
function drawPrompts() {
  const c = $("pointer-layer").getContext("2d"); c.clearRect(0, 0, state.page.width, state.page.height);
  const r = 6 / state.scale;
  for (const p of state.prompts) {
    c.lineWidth = 2 / state.scale; c.setLineDash([]);
    if (p.box) { c.strokeStyle = "#0a6"; const [x0, y0, x1, y1] = p.box; c.strokeRect(x0, y0, x1 - x0, y1 - y0); continue; }
    c.fillStyle = p.label ? "#0a6" : "#d22"; c.beginPath(); c.arc(p.point[0], p.point[1], r, 0, 2 * Math.PI); c.fill();
    c.strokeStyle = "white"; c.beginPath(); c.moveTo(p.point[0] - r / 2, p.point[1]); c.lineTo(p.point[0] + r / 2, p.point[1]);
    if (p.label) { c.moveTo(p.point[0], p.point[1] - r / 2); c.lineTo(p.point[0], p.point[1] + r / 2); }
    c.stroke();
  }
}
function refineBody() {
  const points = state.prompts.filter((p) => p.point), boxes = state.prompts.filter((p) => p.box);
  const body = {
    question: $("question").value.trim(), points: points.map((p) => p.point), labels: points.map((p) => p.label),
    box: boxes.length ? boxes[boxes.length - 1].box : null,
  };
  if (!maskIsEmpty()) body.mask_png = $("mask").toDataURL("image/png");
  return body;
}
function refineUrl() {
  // The Model tool works on the task held, and on an annotation already saved (one's own earlier answer, or one
  // under review): the model answers again; nothing is saved until Submit (or Save fix).
  if (state.task) return `/api/tasks/${state.task.id}/refine`;
  if (state.annotation) return `/api/annotations/${state.annotation.id}/refine`;
  return null;
}
async function refine(prompt) {
  const url = refineUrl();
  if (!url) { say("no task or annotation open", true); return; }
  if (!state.user.model) { say("no model: correct with the words, box and brush tools", true); return; }
  if (!$("question").value.trim()) { say("write a question first", true); return; }
  state.refines.push({ proposal: state.proposal, selected: state.selected, dirty: state.dirty, mask: maskCtx().getImageData(0, 0, state.page.width, state.page.height) });
  state.prompts.push(prompt); drawPrompts();
  say("the model answers again…");
  const t0 = performance.now();
  try {
    state.proposal = await api("POST", url, refineBody());
  } catch (e) { state.prompts.pop(); state.refines.pop(); drawPrompts(); say(e.message, true); return; }
  state.edits += 1;
  renderCandidates();
  await selectCandidate(state.proposal.best);
  say(`answered again in ${((performance.now() - t0) / 1000).toFixed(2)} s (${state.prompts.length} correction${state.prompts.length > 1 ? "s" : ""}); Ctrl+Z takes the last one back`);
}
function undoRefine() {
  const prev = state.refines.pop();
  if (!prev) return false;
  state.prompts.pop(); drawPrompts();
  state.proposal = prev.proposal; renderCandidates();
  maskCtx().putImageData(prev.mask, 0, 0); state.selected = prev.selected; state.dirty = prev.dirty; markSelected();
  say(state.prompts.length ? `${state.prompts.length} correction(s) left` : "back to the proposal");
  return true;
}

function renderCandidates() {
  const box = $("candidates"); box.innerHTML = "";
  if (!state.proposal) return;
  for (const c of state.proposal.candidates) {
    const b = document.createElement("button");
    b.className = "candidate"; b.dataset.index = c.index; b.type = "button";
    const img = thumbnail(c.png); img.alt = `candidate ${c.index + 1}`;
    const label = document.createElement("span"); label.textContent = `${c.index + 1} · IoU ${c.score.toFixed(2)}${c.empty ? " · empty" : ""}`;
    const words = document.createElement("span"); words.className = "words";
    words.textContent = c.word_ids.slice(0, 8).map((i) => state.page.words[i].text).join(" ");
    b.append(img, label, words);
    b.addEventListener("click", () => selectCandidate(c.index));
    box.append(b);
  }
}

function thumbnail(png) {
  // The page with the candidate over it, small: drawn once the candidate's PNG has loaded.
  const out = document.createElement("img"), im = new Image();
  im.onload = () => {
    const c = document.createElement("canvas"), s = Math.min(80 / state.page.width, 100 / state.page.height);
    c.width = Math.round(state.page.width * s); c.height = Math.round(state.page.height * s);
    const ctx = c.getContext("2d"); ctx.drawImage($("page-img"), 0, 0, c.width, c.height);
    ctx.globalAlpha = 0.6; ctx.drawImage(im, 0, 0, c.width, c.height); out.src = c.toDataURL();
  };
  im.src = png;
  return out;
}

async function selectCandidate(k) {
  if (!state.proposal || !state.proposal.candidates[k]) return;
  snapshot();
  await drawImageToMask(state.proposal.candidates[k].png);
  state.selected = k; state.dirty = false; markSelected();
}
function markSelected() {
  for (const b of document.querySelectorAll(".candidate")) b.classList.toggle("selected", Number(b.dataset.index) === state.selected && !state.dirty);
}

// ---- correcting ------------------------------------------------------------------------------------------------
function pagePoint(ev) { const r = $("pointer-layer").getBoundingClientRect(); return [(ev.clientX - r.left) / state.scale, (ev.clientY - r.top) / state.scale]; }
function wordAt(x, y) {
  const words = state.page.words; let best = -1, bestD = 6 / state.scale;
  for (let i = 0; i < words.length; i++) {
    const [x0, y0, x1, y1] = words[i].box;
    const d = Math.max(x0 - x, 0, x - x1) + Math.max(y0 - y, 0, y - y1);
    if (d < bestD || (d === 0 && best < 0)) { best = i; bestD = d; }
  }
  return best;
}
function toggleWord(i) {
  // Whole pixels, rounded as the server rounds a word's box when it snaps a candidate to words: a click adds or
  // removes exactly the pixels of the word.
  const [x0, y0, x1, y1] = state.page.words[i].box.map(Math.round), ctx = maskCtx();
  const cx = Math.floor((x0 + x1) / 2), cy = Math.floor((y0 + y1) / 2);
  const inside = ctx.getImageData(cx, cy, 1, 1).data[3] > 127;
  snapshot();
  if (inside) ctx.clearRect(x0, y0, x1 - x0, y1 - y0); else { ctx.fillStyle = COLOUR; ctx.fillRect(x0, y0, x1 - x0, y1 - y0); }
  edited();
}
function brushAt(x, y, erase) {
  const ctx = maskCtx(); const r = Number($("brush-size").value) / state.scale / 2;
  ctx.save(); ctx.globalCompositeOperation = erase ? "destination-out" : "source-over";
  ctx.fillStyle = COLOUR; ctx.beginPath(); ctx.arc(x, y, r, 0, 2 * Math.PI); ctx.fill(); ctx.restore();
}
function drawRubberBand(a, b) {
  const c = $("pointer-layer").getContext("2d"); c.clearRect(0, 0, state.page.width, state.page.height);
  if (!a) return;
  c.strokeStyle = "#0a6"; c.lineWidth = 2 / state.scale; c.setLineDash([6 / state.scale, 4 / state.scale]);
  c.strokeRect(Math.min(a[0], b[0]), Math.min(a[1], b[1]), Math.abs(b[0] - a[0]), Math.abs(b[1] - a[1]));
}

function onPointerDown(ev) {
  if (ev.button === 1) { const w = $("stage-wrap"); state.pan = [ev.clientX, ev.clientY, w.scrollLeft, w.scrollTop]; ev.preventDefault(); return; }
  if (!state.page || (!state.task && !state.annotation)) return;
  const [x, y] = pagePoint(ev);
  if (state.tool === "model") {
    state.drag = { start: [x, y], negative: ev.altKey || ev.button === 2, model: true };
    $("pointer-layer").setPointerCapture(ev.pointerId); ev.preventDefault(); return;
  }
  if (state.tool === "words") { const i = wordAt(x, y); if (i >= 0) toggleWord(i); return; }
  snapshot();
  state.drag = { start: [x, y], erase: ev.shiftKey };
  $("pointer-layer").setPointerCapture(ev.pointerId);
  if (state.tool === "brush") brushAt(x, y, ev.shiftKey);
}
function onPointerMove(ev) {
  if (state.pan) { const w = $("stage-wrap"); w.scrollLeft = state.pan[2] - (ev.clientX - state.pan[0]); w.scrollTop = state.pan[3] - (ev.clientY - state.pan[1]); return; }
  if (!state.drag) return;
  const p = pagePoint(ev);
  if (state.drag.model) { drawPrompts(); const c = $("pointer-layer").getContext("2d"), a = state.drag.start; c.strokeStyle = "#0a6"; c.lineWidth = 2 / state.scale; c.setLineDash([6 / state.scale, 4 / state.scale]); c.strokeRect(Math.min(a[0], p[0]), Math.min(a[1], p[1]), Math.abs(p[0] - a[0]), Math.abs(p[1] - a[1])); return; }
  if (state.tool === "brush") brushAt(p[0], p[1], state.drag.erase); else drawRubberBand(state.drag.start, p);
}
function onPointerUp(ev) {
  if (state.pan) { state.pan = null; return; }
  if (!state.drag) return;
  const [a, b] = [state.drag.start, pagePoint(ev)];
  if (state.drag.model) {
    const negative = state.drag.negative; state.drag = null;
    const w = Math.abs(b[0] - a[0]), h = Math.abs(b[1] - a[1]);
    if (w * state.scale >= 6 && h * state.scale >= 6) refine({ box: [Math.min(a[0], b[0]), Math.min(a[1], b[1]), Math.max(a[0], b[0]), Math.max(a[1], b[1])] });
    else refine({ point: a, label: negative ? 0 : 1 });
    return;
  }
  if (state.tool === "box") {
    drawRubberBand(null);
    const x = Math.min(a[0], b[0]), y = Math.min(a[1], b[1]), w = Math.abs(b[0] - a[0]), h = Math.abs(b[1] - a[1]);
    if (w >= 2 && h >= 2) { const ctx = maskCtx(); if (state.drag.erase) ctx.clearRect(x, y, w, h); else { ctx.fillStyle = COLOUR; ctx.fillRect(x, y, w, h); } }
  }
  state.drag = null; edited();
}

function undo() { if (state.tool === "model" && undoRefine()) return; const prev = state.undo.pop(); if (prev) { maskCtx().putImageData(prev, 0, 0); state.dirty = true; markSelected(); } }
function setTool(t) { state.tool = t; for (const r of document.querySelectorAll("input[name=tool]")) r.checked = r.value === t; }

// ---- tasks -----------------------------------------------------------------------------------------------------
function resetWork() {
  state.proposal = null; state.selected = null; state.dirty = false; state.edits = 0; state.annotation = null;
  state.prompts = []; state.refines = []; if (state.page) drawPrompts();
  $("candidates").innerHTML = ""; if (state.page) clearMask();
}

async function nextTask() {
  resetWork(); state.task = null; clearInterval(state.renewTimer);
  let task;
  try { task = await api("POST", "/api/tasks/next"); }
  catch (e) { $("task-info").textContent = ""; say(e.status === 404 ? "no open task: all done" : e.message, e.status !== 404); return; }
  state.task = task;
  $("task-info").textContent = `Task ${task.id} · ${task.page.doc_id} p.${task.page.page + 1}${task.kind ? " · " + task.kind : ""}`;
  $("question").value = task.question || ""; $("question").readOnly = task.question !== null;
  await loadPage(task.page);
  state.renewTimer = setInterval(() => api("POST", `/api/tasks/${task.id}/renew`).catch((e) => say(e.message, true)), 60000);
  if (task.question && state.user.model) await propose(); else { say(state.user.model ? "write a question, then Propose (P)" : "no model: draw the answer"); $("question").focus(); }
}

async function skipTask() {
  if (state.task) { try { await api("POST", `/api/tasks/${state.task.id}/release`); } catch (e) { /* the lease may have gone */ } }
  state.historyPos = -1; await nextTask();
}

function answerPayload(answerable) {
  const seconds = (performance.now() - state.shownAt) / 1000;
  return {
    question: $("question").value.trim(), answerable,
    mask_png: answerable ? $("mask").toDataURL("image/png") : null,
    seconds, edits: state.edits,
    // Where the answer started: the server records what the model proposed and decides from the mask whether the
    // candidate was kept as proposed, refined or edited.
    proposal_id: state.proposal ? state.proposal.proposal_id : null,
    candidate: answerable && state.proposal && state.selected !== null ? state.selected : null,
  };
}

async function submit(answerable = true) {
  if (answerable && maskIsEmpty()) { say("the mask is empty: draw the answer or press N (not answerable)", true); return; }
  const body = answerPayload(answerable);
  if (!body.question) { say("the question is empty", true); return; }
  try {
    if (state.annotation) {
      const saved = await api("PUT", `/api/annotations/${state.annotation.id}`, { ...body, version: state.annotation.version });
      say(`annotation ${saved.id} saved (version ${saved.version})`);
      state.annotation = saved; return;
    }
    if (!state.task) return;
    const saved = await api("POST", `/api/tasks/${state.task.id}/annotation`, body);
    state.history = []; state.historyPos = -1;
    say(`saved annotation ${saved.id}`);
    await nextTask();
  } catch (e) {
    if (e.status === 409 && e.data && e.data.current) { say(`${e.message}; your version is in the audit log`, true); if (state.annotation) state.annotation = e.data.current; }
    else say(e.message, true);
  }
}

async function addMissed() {
  if (!state.task) return;
  const q = (window.prompt("A question about this page that the engine did not ask:") || "").trim();
  if (!q) return;
  try { const r = await api("POST", `/api/tasks/${state.task.id}/missed`, { question: q }); say(`added as task ${r.id}`); }
  catch (e) { say(e.message, true); }
}

async function previous() {
  if (!state.history.length || state.historyPos < 0) state.history = await api("GET", "/api/annotations/mine?limit=50");
  if (state.historyPos + 1 >= state.history.length) { say("no earlier annotation of yours"); return; }
  if (state.task && state.historyPos < 0) { try { await api("POST", `/api/tasks/${state.task.id}/release`); } catch (e) { /* gone */ } state.task = null; }
  state.historyPos += 1;
  await openAnnotation(state.history[state.historyPos].id);
  say(`your annotation ${state.annotation.id} (version ${state.annotation.version}): edit and Submit to save, → for a new task`);
}

async function countRejected() {
  if (!state.user) return;
  try { state.rejected = await api("GET", "/api/annotations/mine?review=rejected&limit=500"); } catch (e) { state.rejected = []; }
  $("rejected").textContent = `Rejected (${state.rejected.length})`; $("rejected").disabled = !state.rejected.length;
}
async function nextRejected() {
  // The annotator's rejected annotations in turn, each with the reviewer's reason: fix and Submit to send it back.
  if (state.rejectedPos < 0) await countRejected();
  if (!state.rejected.length) { say("none of your annotations is rejected"); return; }
  await leaveTask();
  state.rejectedPos = (state.rejectedPos + 1) % state.rejected.length;
  await openAnnotation(state.rejected[state.rejectedPos].id);
  say(`rejected (${state.rejectedPos + 1} of ${state.rejected.length}): ${state.annotation.review_reason || "no reason given"}; fix it and Submit, or J for the next`);
}

async function openAnnotation(id) {
  const a = await api("GET", `/api/annotations/${id}`);
  resetWork(); state.annotation = a;
  $("task-info").textContent = `Annotation ${a.id} · ${a.page.doc_id} p.${a.page.page + 1} · ${a.review}` +
    (a.review === "rejected" && a.review_reason ? ` · reason: ${a.review_reason}` : "");
  $("question").value = a.question; $("question").readOnly = state.mode === "review";
  await loadPage(a.page);
  if (a.answerable) await drawImageToMask(`/api/annotations/${a.id}/mask.png`);
  state.dirty = true;
}

// ---- review ----------------------------------------------------------------------------------------------------
async function nextReview(skip = false) {
  // skip (Next →): pass over the annotation shown, so another comes (it again only when it is the last one).
  const after = skip && state.annotation ? state.annotation.id : null;
  resetWork(); state.task = null; say("");
  let a;
  const params = new URLSearchParams();
  if ($("review-source").value) params.set("source", $("review-source").value);
  if (after) params.set("after", after);
  try { a = await api("GET", "/api/review/next" + (params.toString() ? `?${params}` : "")); }
  catch (e) { $("task-info").textContent = ""; say(e.status === 404 ? "nothing to review" : e.message, e.status !== 404); return; }
  await openAnnotation(a.id);
  say(a.source === "machine" ? `automatic label by ${a.model_version}` :
    `${a.answerable ? "answer" : "marked not answerable"} by user ${a.user_id}; ${a.edits} edits, ${a.seconds.toFixed(1)} s`);
}
async function review(decision) {
  if (!state.annotation) return;
  let reason = "";
  if (decision !== "approve") { reason = window.prompt(decision === "reject" ? "Why is it rejected?" : "What did you fix?") || ""; if (!reason.trim()) { say("a reason is needed", true); return; } }
  const body = { version: state.annotation.version, decision, reason };
  if (decision === "fix") { const p = answerPayload(!maskIsEmpty()); body.fix = p; }
  try { await api("POST", `/api/annotations/${state.annotation.id}/review`, body); say(`${decision}d`); await nextReview(); }
  catch (e) { say(e.message, true); }
}

// ---- dashboard -------------------------------------------------------------------------------------------------
function table(title, rows) {
  const keys = ["annotations", "seconds_per_mask_median", "edits_per_mask_mean", "accepted_as_is_rate", "refined_rate", "edited_rate", "drawn_rate"];
  let html = `<h2>${title}</h2><table><tr><th></th><th>annotations</th><th>s / mask (median)</th><th>edits / mask</th><th>accepted as-is</th><th>refined</th><th>edited</th><th>drawn</th></tr>`;
  for (const [name, r] of Object.entries(rows)) {
    const esc = name.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
    html += `<tr><td>${esc}</td>` + keys.map((k) => `<td>${r[k] === undefined ? "" : (Number.isInteger(r[k]) ? r[k] : r[k].toFixed(2))}</td>`).join("") + "</tr>";
  }
  return html + "</table>";
}
async function loadDashboard() {
  const s = await api("GET", "/api/stats");
  $("dash-tables").innerHTML = table("By person", s.by_person) + table("By model version", s.by_model_version);
  $("dash-plot").src = `/api/stats/plot.png?t=${Date.now()}`;
  const rounds = await api("GET", "/api/rounds");
  const cell = (v) => (v === undefined || v === null ? "" : typeof v === "number" ? v.toFixed(3) : String(v).replace(/[&<>"]/g, ""));
  let html = "<table><tr><th>round</th><th>status</th><th>model before → after</th><th>mIoU before</th><th>mIoU after</th><th>promoted</th></tr>";
  for (const r of rounds) {
    const rep = r.report || {};
    html += `<tr><td>${r.id}</td><td>${cell(r.status)}</td><td>${cell(r.base_version)} → ${cell(r.new_version)}</td>` +
      `<td>${cell(rep.before && rep.before.mIoU)}</td><td>${cell(rep.after && rep.after.mIoU)}</td><td>${r.promoted ? "yes" : "no"}</td></tr>`;
  }
  $("dash-rounds").innerHTML = rounds.length ? html + "</table>" : "<p>none yet</p>";
  await loadAccounts();
}
// ---- accounts (admins) and one's own password -------------------------------------------------------------------
const esc = (v) => String(v).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
async function loadAccounts() {
  if (!state.user || state.user.role !== "admin") return;
  const users = await api("GET", "/api/users");
  const roles = ["annotator", "reviewer", "admin"];
  let html = "<table><tr><th>user</th><th>role</th><th>active</th><th></th><th>new password</th></tr>";
  for (const u of users) {
    if (u.name === "autolabel") continue;  // the automatic labels' account is nobody's
    const options = roles.map((r) => `<option${r === u.role ? " selected" : ""}>${r}</option>`).join("");
    html += `<tr data-id="${u.id}"><td>${esc(u.name)}</td><td><select data-action="role">${options}</select></td>` +
      `<td>${u.active ? "yes" : "no"}</td><td><button data-action="${u.active ? "disable" : "enable"}">${u.active ? "Disable" : "Enable"}</button></td>` +
      `<td><input type="password" autocomplete="new-password" placeholder="8+ characters"><button data-action="password">Set</button></td></tr>`;
  }
  $("accounts").innerHTML = html + "</table>";
}
async function accountAction(ev) {
  const el = ev.target, row = el.closest("tr"), action = el.dataset.action;
  if (!row || !action || (ev.type === "click" && el.tagName === "SELECT")) return;
  const id = row.dataset.id, name = row.cells[0].textContent;
  let said;
  try {
    if (action === "role") await api("PATCH", `/api/users/${id}`, { role: el.value });
    else if (action === "disable" || action === "enable") await api("PATCH", `/api/users/${id}`, { active: action === "enable" });
    else if (action === "password") await api("POST", `/api/users/${id}/password`, { password: row.querySelector("input").value });
    said = `${name}: ${action === "role" ? "role " + el.value : action === "password" ? "password set, sessions ended" : action + "d"}`;
  } catch (e) { said = `${name}: ${e.message}`; }
  await loadAccounts();  // the table as it is now, then what was done
  $("accounts-status").textContent = said;
}
async function changePassword(ev) {
  ev.preventDefault();
  const out = $("password-status");
  if ($("password-new").value !== $("password-again").value) { out.textContent = "the two new passwords differ"; return; }
  try {
    await api("POST", "/api/me/password", { old: $("password-old").value, new: $("password-new").value });
    out.textContent = "changed; your other sessions are signed out";
    for (const id of ["password-old", "password-new", "password-again"]) $(id).value = "";
  } catch (e) { out.textContent = e.message; }
}

async function startRetrain() {
  try { const r = await api("POST", "/api/retrain", { steps: 200 }); $("dash-status").textContent = `started: ${r.out} (log ${r.log})`; }
  catch (e) { $("dash-status").textContent = e.message; }
}

// ---- wiring ----------------------------------------------------------------------------------------------------
function typing(ev) {
  // Keys go to a field only where one can type: a read-only question (a task's own) leaves the shortcuts working.
  const t = ev.target;
  return t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA") && t.type !== "radio" && t.type !== "range" && !t.readOnly;
}

document.addEventListener("keydown", (ev) => {
  if (!state.user || state.mode === "dashboard" || state.mode === "password") return;
  if (typing(ev)) { if (ev.key === "Enter" && !ev.shiftKey && ev.target.id === "question") { ev.preventDefault(); propose(); } if (ev.key === "Escape") ev.target.blur(); return; }
  const k = ev.key;
  if ((ev.ctrlKey || ev.metaKey) && k.toLowerCase() === "z") { ev.preventDefault(); undo(); return; }
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const actions = {
    1: () => selectCandidate(0), 2: () => selectCandidate(1), 3: () => selectCandidate(2),
    w: () => setTool("words"), b: () => setTool("box"), r: () => setTool("brush"), k: () => setTool("model"),
    c: () => { snapshot(); clearMask(); edited(); },
    "[": () => { $("brush-size").value = Number($("brush-size").value) - 2; },
    "]": () => { $("brush-size").value = Number($("brush-size").value) + 2; },
  };
  Object.assign(actions, { "+": () => zoomBy(1.25), "=": () => zoomBy(1.25), "-": () => zoomBy(0.8), 0: () => zoomBy(0) });
  if (state.mode === "annotate") Object.assign(actions, {
    p: propose, Enter: () => submit(true), n: () => submit(false), ArrowRight: skipTask, ArrowLeft: previous, m: addMissed,
    j: nextRejected,
  });
  else Object.assign(actions, { a: () => review("approve"), x: () => review("reject"), f: () => review("fix"), ArrowRight: () => nextReview(true) });
  const fn = actions[k] || actions[k.toLowerCase()];
  if (fn) { ev.preventDefault(); fn(); }
});

window.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault(); $("login-error").textContent = "";
    try {
      const r = await api("POST", "/api/login", { name: $("login-name").value, password: $("login-password").value });
      state.csrf = r.csrf_token; $("login-password").value = ""; start();
    }
    catch (e) { $("login-error").textContent = e.message; }
  });
  $("logout").addEventListener("click", async () => {
    clearInterval(state.renewTimer); state.task = null;  // the server gives back every lease of the session's user
    await api("POST", "/api/logout").catch(() => null); state.csrf = null; showLogin();
  });
  for (const b of document.querySelectorAll("header nav button")) b.addEventListener("click", () => openView(b.dataset.view));
  $("nav-password").addEventListener("click", () => openView("password"));
  $("propose").addEventListener("click", propose);
  $("submit").addEventListener("click", () => submit(true));
  $("unanswerable").addEventListener("click", () => submit(false));
  $("next").addEventListener("click", skipTask);
  $("prev").addEventListener("click", previous);
  $("missed").addEventListener("click", addMissed);
  $("rejected").addEventListener("click", nextRejected);
  $("zoom-in").addEventListener("click", () => zoomBy(1.25));
  $("zoom-out").addEventListener("click", () => zoomBy(0.8));
  $("zoom-fit").addEventListener("click", () => zoomBy(0));
  window.addEventListener("resize", () => { if (state.page) { layout(); drawWords(); } });
  $("undo").addEventListener("click", undo);
  $("clear").addEventListener("click", () => { snapshot(); clearMask(); edited(); });
  $("approve").addEventListener("click", () => review("approve"));
  $("reject").addEventListener("click", () => review("reject"));
  $("fix").addEventListener("click", () => review("fix"));
  $("review-next").addEventListener("click", () => nextReview(true));
  $("review-source").addEventListener("change", () => nextReview());
  $("retrain").addEventListener("click", startRetrain);
  $("accounts").addEventListener("click", accountAction);
  $("accounts").addEventListener("change", accountAction);
  $("password-form").addEventListener("submit", changePassword);
  for (const r of document.querySelectorAll("input[name=tool]")) r.addEventListener("change", () => setTool(r.value));
  const layer = $("pointer-layer");
  layer.addEventListener("pointerdown", onPointerDown);
  layer.addEventListener("pointermove", onPointerMove);
  layer.addEventListener("pointerup", onPointerUp);
  layer.addEventListener("contextmenu", (ev) => { if (state.tool === "model") ev.preventDefault(); });  // right-click: a negative click
  window.engine = state; // for tests and the browser console
  start();
});
