// The usage dashboard's script. It reads only the public billing endpoints
// with the token the person gives, and builds the page with DOM calls
// (textContent, never innerHTML): repository names and reasons are tenant
// text.
"use strict";

const api = "/v1/lsp";
const svgNS = "http://www.w3.org/2000/svg";
const palette = ["#3f66d8", "#e07a1f", "#2c9c6a", "#b8457c", "#7b5cc4", "#c9a227", "#2a9bb3", "#8a8f99"];

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...kids) {
  const n = tag.startsWith("svg:") ? document.createElementNS(svgNS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  for (const k of kids) n.append(k);
  return n;
}

function cents(n) {
  const sign = n < 0 ? "−" : "";
  const a = Math.abs(n);
  return `${sign}${a}¢ ($${(a / 100).toFixed(2)})`;
}

function day(d) { return d.toISOString().slice(0, 10); }

async function get(path, creds) {
  const headers = { Authorization: "Bearer " + creds.token, Accept: "application/json" };
  if (creds.org) headers["X-Org-Id"] = creds.org;
  const resp = await fetch(api + path, { headers, cache: "no-store", credentials: "omit", redirect: "error" });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const msg = body && body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${resp.status}`;
    throw new Error(`${path.split("?")[0]}: ${msg}`);
  }
  return body;
}

// The money rows (prepares and credits; /ledger lists usage rows too)
// since `from`, in id order: each model's pages, at most 10 of 1000 rows,
// merged.
async function moneyRows(creds, from) {
  const model = async m => {
    let rows = [], cursor = null;
    for (let page = 0; page < 10; page++) {
      const q = new URLSearchParams({ from: from.toISOString(), model: m, limit: "1000" });
      if (cursor) q.set("cursor", cursor);
      const r = await get("/ledger?" + q, creds);
      rows = rows.concat(r.rows);
      cursor = r.next_cursor;
      if (!cursor) break;
    }
    return rows;
  };
  const [prepares, credits] = await Promise.all([model("prepare"), model("credit")]);
  return prepares.concat(credits).sort((a, b) => a.id - b.id);
}

function chart(box, days, series, value, colors) {
  box.replaceChildren();
  const w = 1000, h = 180, pad = 24;
  const svg = el("svg:svg", { viewBox: `0 0 ${w} ${h}`, role: "img" });
  const totals = days.map(d => series.reduce((s, r) => s + value(d, r), 0));
  const max = Math.max(1, ...totals);
  const bw = (w - pad) / days.length;
  svg.append(el("svg:text", { x: 0, y: 10 }, String(max)));
  svg.append(el("svg:line", { x1: pad, y1: h - pad, x2: w, y2: h - pad, stroke: "#e3e6ec" }));
  days.forEach((d, i) => {
    let y = h - pad;
    for (const r of series) {
      const v = value(d, r);
      if (!v) continue;
      const bh = (h - 2 * pad) * v / max;
      y -= bh;
      const rect = el("svg:rect", { x: pad + i * bw + 1, y, width: Math.max(1, bw - 2), height: bh, fill: colors[r] });
      rect.append(el("svg:title", {}, `${d} ${r}: ${v}`));
      svg.append(rect);
    }
    if (days.length <= 31 && (i % 5 === 0 || i === days.length - 1)) {
      svg.append(el("svg:text", { x: pad + i * bw, y: h - 8 }, d.slice(5)));
    }
  });
  box.append(svg);
}

async function show(creds, ndays) {
  const status = $("status");
  status.className = "";
  status.textContent = "Loading…";
  const now = new Date();
  const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - (ndays - 1)));
  try {
    const [bal, usage, rows] = await Promise.all([
      get("/balance", creds),
      get("/usage?" + new URLSearchParams({ from: day(start) }), creds),
      moneyRows(creds, start),
    ]);
    $("org").textContent = "— " + bal.org;
    $("balance").textContent = cents(bal.balance_cents);
    $("held").textContent = cents(bal.held_cents);
    $("available").textContent = cents(bal.available_cents);

    const days = [];
    for (let d = new Date(start); d <= now; d.setUTCDate(d.getUTCDate() + 1)) days.push(day(d));
    const byRepo = {}, grid = {};
    let prepares = 0, queries = 0;
    for (const u of usage.days) {
      const r = byRepo[u.repo] || (byRepo[u.repo] = { prepares: 0, queries: 0, errors: 0, cents: 0 });
      r.prepares += u.prepares; r.queries += u.requests; r.cents += u.cents;
      if (u.status >= 400) r.errors += u.requests;
      prepares += u.prepares; queries += u.requests;
      const g = grid[u.day + " " + u.repo] || (grid[u.day + " " + u.repo] = { prepares: 0, queries: 0 });
      g.prepares += u.prepares; g.queries += u.requests;
    }
    $("prepares").textContent = String(prepares);
    $("queries").textContent = String(queries);
    const repos = Object.keys(byRepo).sort();
    const colors = {};
    repos.forEach((r, i) => { colors[r] = palette[i % palette.length]; });
    const cell = (d, r) => grid[d + " " + r] || { prepares: 0, queries: 0 };
    chart($("chart-prepares"), days, repos, (d, r) => cell(d, r).prepares, colors);
    chart($("chart-queries"), days, repos, (d, r) => cell(d, r).queries, colors);
    // Swatches as SVG: the page's CSP allows no inline style.
    $("legend").replaceChildren(...repos.map(r => el("span", {},
      el("svg:svg", { width: "12", height: "12", viewBox: "0 0 12 12" }, el("svg:rect", { width: "12", height: "12", rx: "2", fill: colors[r] })),
      " " + r)));

    $("repos").tBodies[0].replaceChildren(...repos.map(r => el("tr", { "data-repo": r },
      el("td", {}, r),
      el("td", { class: "num", "data-test": "repo-prepares" }, String(byRepo[r].prepares)),
      el("td", { class: "num", "data-test": "repo-queries" }, String(byRepo[r].queries)),
      el("td", { class: "num" }, String(byRepo[r].errors)),
      el("td", { class: "num" }, cents(byRepo[r].cents)))));

    const latest = rows.slice(-20).reverse();
    $("rows").tBodies[0].replaceChildren(...latest.map(r => el("tr", { "data-id": String(r.id) },
      el("td", { class: "num" }, String(r.id)),
      el("td", {}, r.created_at.replace("T", " ").slice(0, 19)),
      el("td", {}, r.model || r.kind),
      el("td", {}, r.repo || ""),
      el("td", {}, (r.commit || "").slice(0, 12)),
      el("td", { class: "num" }, cents(r.amount_cents)),
      el("td", {}, r.reason || ""))));
    status.textContent = `Last ${ndays} days, UTC. Read ${new Date().toISOString().slice(0, 19)}Z.`;
    document.body.dataset.ready = "1";
  } catch (e) {
    status.className = "error";
    status.textContent = e.message;
    document.body.dataset.ready = "error";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const params = new URLSearchParams(location.hash.slice(1));
  const form = $("auth");
  if (params.get("token")) {
    $("token").value = params.get("token");
    if (params.get("org")) $("orgid").value = params.get("org");
    if (params.get("days")) $("days").value = params.get("days");
    // The token leaves the address bar once read.
    history.replaceState(null, "", location.pathname);
  }
  const go = () => show({ token: $("token").value.trim(), org: $("orgid").value.trim() },
    Math.min(366, Math.max(1, parseInt($("days").value, 10) || 30)));
  form.addEventListener("submit", ev => { ev.preventDefault(); go(); });
  if ($("token").value) go();
});
