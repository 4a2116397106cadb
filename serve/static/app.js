// Veil's web app: small helpers over the REST API. No inline scripts (the
// Content Security Policy forbids them): every page's behaviour is wired
// here from data attributes.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

  function say(text, isError) {
    const m = $("#message");
    if (!m) return;
    m.textContent = text;
    m.className = isError ? "error" : "";
  }

  async function api(method, url, body) {
    const opt = { method: method, headers: { "X-CSRF-Token": csrf }, credentials: "same-origin" };
    if (body instanceof FormData) {
      opt.body = body;
    } else if (body !== undefined) {
      opt.headers["Content-Type"] = "application/json";
      opt.body = JSON.stringify(body);
    }
    const r = await fetch(url, opt);
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    if (!r.ok) {
      throw new Error((data && data.error) || (r.status + " " + r.statusText));
    }
    return data;
  }

  // act runs an API call, reports failures, and reloads (or calls then).
  async function act(method, url, body, then) {
    try {
      const res = await api(method, url, body);
      if (then) { then(res); } else { window.location.reload(); }
    } catch (e) {
      say(e.message, true);
    }
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function thumb(faceID) {
    return el("img", { loading: "lazy", width: "96", height: "96", src: "/api/v1/faces/" + faceID + "/thumbnail", alt: "face " + faceID });
  }

  // Name completion: the people's names, loaded after the page.
  const names = $("#people-names");
  if (names) {
    api("GET", "/api/v1/people?hidden=all&limit=1000").then((res) => {
      res.items.forEach((p) => names.appendChild(el("option", { value: p.name })));
      names.dataset.ready = "true";
    }).catch(() => {});
  }

  // Person page.
  const personH = $("#person-name");
  if (personH) {
    const id = personH.dataset.person;
    const name = personH.textContent;
    $("#rename-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      act("PATCH", "/api/v1/people/" + id, { name: ev.target.name.value.trim() });
    });
    $("#merge-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const into = $("#merge-into").value;
      if (!into) return;
      act("POST", "/api/v1/people/" + id + "/merge", { into: Number(into) }, () => { window.location.href = "/people/" + into; });
    });
    $("#hide-button").addEventListener("click", (ev) => {
      act("PATCH", "/api/v1/people/" + id, { hidden: ev.target.dataset.hidden !== "true" });
    });
    $$("button.unassign").forEach((b) => b.addEventListener("click", () => act("POST", "/api/v1/faces/unassign", { faces: [Number(b.dataset.face)] })));
    $$("button.cover").forEach((b) => b.addEventListener("click", () => act("PATCH", "/api/v1/people/" + id, { cover: Number(b.dataset.face) }, () => say("cover chosen"))));
    // Offer the most similar people first for a merge.
    api("GET", "/api/v1/people/" + id + "/similar").then((res) => {
      const sel = $("#merge-into");
      sel.textContent = "";
      res.items.forEach((p) => sel.appendChild(el("option", { value: String(p.id) }, p.name + (p.distance >= 0 ? " (" + p.distance.toFixed(2) + ")" : ""))));
      sel.dataset.ready = "true";
    }).catch(() => {});
    loadSuggestions(id, name);
  }

  async function loadSuggestions(id, name) {
    const box = $("#suggestions");
    let res;
    try {
      res = await api("GET", "/api/v1/suggestions?person=" + id + "&limit=200");
    } catch (e) {
      box.textContent = e.message;
      return;
    }
    box.textContent = "";
    if (res.items.length === 0) {
      box.appendChild(el("p", {}, "No suggestions for " + name + "."));
      box.dataset.ready = "true";
      return;
    }
    box.appendChild(el("p", {}, "Are these " + name + "? (" + res.total + ")"));
    const tools = el("div", { class: "suggestion-tools" });
    const all = el("button", { id: "accept-all", class: "primary" }, "Yes, all");
    const none = el("button", { id: "reject-all" }, "None of them");
    tools.append(all, " ", none);
    box.appendChild(tools);
    const ul = el("ul", { class: "grid faces", id: "suggested" });
    const ids = res.items.map((s) => s.face);
    res.items.forEach((s) => {
      const li = el("li", { class: "card", "data-face": String(s.face) });
      li.appendChild(thumb(s.face));
      li.appendChild(el("span", { class: "count" }, "distance " + s.distance.toFixed(2)));
      const acts = el("span", { class: "actions" });
      const yes = el("button", { class: "accept", "data-face": String(s.face) }, "Yes");
      const no = el("button", { class: "reject", "data-face": String(s.face) }, "No");
      yes.addEventListener("click", () => act("POST", "/api/v1/suggestions/accept", { faces: [s.face] }));
      no.addEventListener("click", () => act("POST", "/api/v1/suggestions/reject", { faces: [s.face], person: name }));
      acts.append(yes, no);
      li.appendChild(acts);
      ul.appendChild(li);
    });
    box.appendChild(ul);
    box.dataset.ready = "true";
    all.addEventListener("click", () => act("POST", "/api/v1/suggestions/accept", { faces: ids }));
    none.addEventListener("click", () => act("POST", "/api/v1/suggestions/reject", { faces: ids, person: name }));
  }

  // Unknown faces: name a cluster (its ticked faces; the faces beyond the
  // page's first ones too), mark a face as not a face.
  $$("form.name-cluster").forEach((f) => f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const sec = f.closest(".cluster");
    const person = f.person.value.trim();
    const unticked = new Set($$("input.pick", sec).filter((c) => !c.checked).map((c) => Number(c.value)));
    try {
      const res = await api("GET", "/api/v1/faces?cluster=" + f.dataset.cluster + "&limit=1000");
      const faces = res.items.map((x) => x.id).filter((x) => !unticked.has(x));
      if (faces.length === 0) { say("no face ticked", true); return; }
      await api("POST", "/api/v1/faces/assign", { faces: faces, person: person });
      window.location.reload();
    } catch (e) { say(e.message, true); }
  }));
  $$("button.not-face").forEach((b) => b.addEventListener("click", () => act("DELETE", "/api/v1/faces/" + b.dataset.face)));

  // Photo page: boxes placed in percent of the photo, click to name, drag to draw.
  const photo = $("#photo");
  if (photo) {
    const W = Number(photo.dataset.width), H = Number(photo.dataset.height);
    const place = (e, x, y, w, h) => {
      e.style.left = (100 * x / W) + "%"; e.style.top = (100 * y / H) + "%";
      e.style.width = (100 * w / W) + "%"; e.style.height = (100 * h / H) + "%";
    };
    $$("button.box", photo).forEach((b) => place(b, +b.dataset.x, +b.dataset.y, +b.dataset.w, +b.dataset.h));
    const form = $("#face-form");
    let selected = null;
    $$("button.box", photo).forEach((b) => b.addEventListener("click", () => {
      if (photo.classList.contains("drawing")) return;
      $$("button.box", photo).forEach((x) => x.classList.remove("selected"));
      b.classList.add("selected");
      selected = { face: Number(b.dataset.face) };
      $("#face-label").textContent = "Face " + b.dataset.face + ":";
      form.person.value = b.dataset.person || "";
      $("#face-unassign").hidden = $("#face-remove").hidden = false;
      form.hidden = false;
      form.person.focus();
    }));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const person = form.person.value.trim();
      if (selected && selected.face) {
        if (!person) { say("type a name", true); return; }
        act("POST", "/api/v1/faces/assign", { faces: [selected.face], person: person });
      } else if (selected && selected.box) {
        const body = { photo: Number(photo.dataset.photo), box: selected.box };
        if (person) body.person = person;
        act("POST", "/api/v1/faces", body);
      }
    });
    $("#face-unassign").addEventListener("click", () => selected && selected.face && act("POST", "/api/v1/faces/unassign", { faces: [selected.face] }));
    $("#face-remove").addEventListener("click", () => selected && selected.face && act("DELETE", "/api/v1/faces/" + selected.face));
    $("#face-cancel").addEventListener("click", () => { form.hidden = true; selected = null; $("#drawn").hidden = true; });

    const drawBtn = $("#draw-button");
    const img = $("#photo-img"), drawn = $("#drawn");
    let start = null;
    // kb is the box being drawn by keyboard: "Draw a face" puts one in the
    // middle of the photo and focuses it; arrow keys move it, Shift+arrow
    // keys or + and - resize it, Enter keeps it, Escape cancels. (A drag
    // with the mouse replaces it.)
    let kb = null, enterDown = false;
    const clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));
    const stopDrawing = () => {
      kb = null;
      enterDown = false;
      photo.classList.remove("drawing");
      drawBtn.setAttribute("aria-pressed", "false");
      drawn.removeAttribute("tabindex");
    };
    drawBtn.addEventListener("click", () => {
      if (photo.classList.contains("drawing")) { stopDrawing(); drawn.hidden = true; return; }
      photo.classList.add("drawing");
      drawBtn.setAttribute("aria-pressed", "true");
      const side = Math.round(Math.min(W, H) / 4);
      kb = { x: Math.round((W - side) / 2), y: Math.round((H - side) / 2), w: side, h: side };
      place(drawn, kb.x, kb.y, kb.w, kb.h);
      drawn.hidden = false;
      drawn.tabIndex = 0;
      drawn.focus();
    });
    drawn.addEventListener("keydown", (ev) => {
      if (!kb) return;
      const step = ev.altKey ? 1 : Math.max(1, Math.round(Math.min(W, H) / 50));
      const d = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1], "+": [1, 1], "=": [1, 1], "-": [-1, -1] }[ev.key];
      if (d) {
        ev.preventDefault();
        if (ev.shiftKey || ev.key === "+" || ev.key === "=" || ev.key === "-") {
          kb.w = clamp(kb.w + d[0] * step, 8, W - kb.x);
          kb.h = clamp(kb.h + d[1] * step, 8, H - kb.y);
        } else {
          kb.x = clamp(kb.x + d[0] * step, 0, W - kb.w);
          kb.y = clamp(kb.y + d[1] * step, 0, H - kb.h);
        }
        place(drawn, kb.x, kb.y, kb.w, kb.h);
        drawn.setAttribute("aria-label", "new face at " + kb.x + "," + kb.y + ", " + kb.w + " by " + kb.h);
      } else if (ev.key === "Enter") {
        ev.preventDefault(); // kept on the key's release (below)
        enterDown = true;
      } else if (ev.key === "Escape") {
        ev.preventDefault();
        stopDrawing();
        drawn.hidden = true;
        drawBtn.focus();
      }
    });
    // Enter keeps the box when it is released, so that the key's press
    // does not also reach the name field the form then focuses (and send
    // the form empty); only an Enter pressed on the box (not the one that
    // pressed "Draw a face").
    drawn.addEventListener("keyup", (ev) => {
      if (!kb || ev.key !== "Enter" || !enterDown) return;
      enterDown = false;
      ev.preventDefault();
      const box = { x: kb.x, y: kb.y, width: kb.w, height: kb.h };
      stopDrawing();
      chosen(box);
    });
    const toPhoto = (ev) => {
      const r = img.getBoundingClientRect();
      return { x: Math.max(0, Math.min(W, (ev.clientX - r.left) * W / r.width)), y: Math.max(0, Math.min(H, (ev.clientY - r.top) * H / r.height)) };
    };
    photo.addEventListener("mousedown", (ev) => {
      if (!photo.classList.contains("drawing")) return;
      ev.preventDefault();
      kb = null;
      drawn.removeAttribute("tabindex");
      start = toPhoto(ev);
      drawn.hidden = false;
      place(drawn, start.x, start.y, 0, 0);
    });
    photo.addEventListener("mousemove", (ev) => {
      if (!start) return;
      const p = toPhoto(ev);
      place(drawn, Math.min(start.x, p.x), Math.min(start.y, p.y), Math.abs(p.x - start.x), Math.abs(p.y - start.y));
    });
    window.addEventListener("mouseup", (ev) => {
      if (!start) return;
      const p = toPhoto(ev);
      const box = { x: Math.round(Math.min(start.x, p.x)), y: Math.round(Math.min(start.y, p.y)), width: Math.round(Math.abs(p.x - start.x)), height: Math.round(Math.abs(p.y - start.y)) };
      start = null;
      stopDrawing();
      chosen(box);
    });
    // chosen offers the form for a newly drawn box.
    const chosen = (box) => {
      selected = { box: box };
      $("#face-label").textContent = "New face at " + box.x + "," + box.y + " " + box.width + "×" + box.height + ":";
      $("#face-unassign").hidden = $("#face-remove").hidden = true;
      form.person.value = "";
      form.hidden = false;
      form.person.focus();
    };
  }

  // Search: choose or drop a photo.
  const sform = $("#search-form");
  if (sform) {
    const drop = $("#drop"), file = $("#search-file");
    drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
    drop.addEventListener("dragleave", () => drop.classList.remove("over"));
    drop.addEventListener("drop", (ev) => { ev.preventDefault(); drop.classList.remove("over"); file.files = ev.dataTransfer.files; sform.requestSubmit(); });
    sform.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!file.files.length) return;
      const fd = new FormData();
      fd.append("file", file.files[0]);
      const out = $("#search-results");
      out.textContent = "Searching…";
      let res;
      try { res = await api("POST", "/api/v1/search", fd); } catch (e) { out.textContent = ""; say(e.message, true); return; }
      out.textContent = "";
      out.appendChild(el("p", { id: "search-summary" }, res.faces.length + " face" + (res.faces.length === 1 ? "" : "s") + " in the photo"));
      res.faces.forEach((f, i) => {
        const sec = el("section", { class: "search-face" });
        const who = f.person ? f.person + " (distance " + f.distance.toFixed(2) + ")" : "nobody known";
        sec.appendChild(el("h2", {}, "Face " + (i + 1) + ": " + who));
        const ul = el("ul", { class: "grid faces" });
        f.matches.forEach((m) => {
          const li = el("li", { class: "card" });
          const a = el("a", { href: "/photos/" + m.photo_id });
          a.appendChild(thumb(m.face));
          a.appendChild(el("span", { class: "count" }, (m.person || "unknown") + " · " + m.distance.toFixed(2)));
          li.appendChild(a);
          ul.appendChild(li);
        });
        sec.appendChild(ul);
        out.appendChild(sec);
      });
    });
  }

  // Library: start a scan and follow it live (server-sent events).
  function follow(id) {
    const bar = $("#scan-bar"), text = $("#scan-text"), errs = $("#scan-errors");
    bar.hidden = false;
    const es = new EventSource("/api/v1/scans/" + id + "/events");
    const show = (ev) => {
      const s = JSON.parse(ev.data);
      const total = s.analyse || s.total || 1;
      bar.max = total;
      bar.value = s.state === "reading" ? 0 : s.analysed;
      text.textContent = "scan " + s.id + ": " + s.state + " — " + s.done + " of " + s.total + " files, " + s.analysed + " analysed, " + s.faces + " faces";
      errs.textContent = "";
      (s.errors || []).forEach((e) => errs.appendChild(el("li", {}, e.path + ": " + e.error)));
      if (s.error) say(s.error, true);
    };
    es.addEventListener("progress", show);
    es.addEventListener("end", (ev) => { show(ev); es.close(); text.dataset.finished = "true"; });
    es.onerror = () => es.close();
  }
  const scan = $("#scan-form");
  if (scan) {
    scan.addEventListener("submit", (ev) => {
      ev.preventDefault();
      act("POST", "/api/v1/scans", { paths: [scan.path.value.trim()] }, (s) => follow(s.id));
    });
  }
  const scanBox = $("#scan");
  if (scanBox && scanBox.dataset.scan) follow(scanBox.dataset.scan);
})();
