// util.js - small helpers shared by the views: html (htm bound to preact), time and JSON text.
import { h } from "preact";
import htm from "htm";

export const html = htm.bind(h);

export function ago(iso) {
  if (!iso) return "";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 0) return `in ${fmtDur(-s)}`;
  return `${fmtDur(s)} ago`;
}

export function fmtDur(s) {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

export const time = (iso) => (iso ? html`<time datetime=${iso} title=${iso}>${ago(iso)}</time>` : "");

export function pretty(v) {
  if (v === undefined) return "";
  if (typeof v === "string") return v;
  return JSON.stringify(v, null, 2);
}

// ids are UUIDv7, whose first characters are the creation time: the tail tells them apart
export function short(id) {
  return id ? `…${id.slice(-12)}` : "";
}

export const STATUSES = ["pending", "running", "blocked", "completed", "failed", "cancelled"];
export const TERMINAL = new Set(["completed", "failed", "cancelled"]);

export const Status = ({ s }) => html`<span class=${`status st-${s}`}>${s}</span>`;

export function Json({ value, label }) {
  return html`<pre class="json" aria-label=${label}>${pretty(value)}</pre>`;
}
