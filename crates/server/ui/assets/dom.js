// Small DOM helpers. Text always goes in as text nodes, never as HTML; the one exception is
// the report the server renders (`serverHtml`).

/**
 * Builds an element. `props`: `class`, `text`, `on` (event name to handler), DOM properties
 * (`value`, `checked`, `disabled`, `hidden`, `tabIndex`), and any other key as an attribute
 * (`aria-*`, `data-*`, `href`, ...). Children: nodes, strings, arrays; null and false skipped.
 */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = Array.isArray(value) ? value.filter(Boolean).join(' ') : value;
    else if (key === 'text') el.textContent = String(value);
    else if (key === 'on') for (const [ev, fn] of Object.entries(value)) el.addEventListener(ev, fn);
    else if (PROPS.has(key)) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

const PROPS = new Set(['value', 'checked', 'disabled', 'hidden', 'tabIndex', 'selected', 'open', 'indeterminate']);

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/**
 * The nodes of HTML the server rendered: a report, written by the export's HTML writer, which
 * escapes every text and writes only markup (no script, style, event handler or image).
 * Parsed in a `<template>`, whose content is inert: nothing in it runs or loads.
 */
export function serverHtml(html) {
  const template = document.createElement('template');
  template.innerHTML = String(html);
  return template.content;
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** Says `text` to screen readers through the polite live region. */
export function announce(text) {
  const region = document.getElementById('announcer');
  if (!region) return;
  // A change of content is what gets read; clear first so a repeat is read again.
  region.textContent = '';
  setTimeout(() => { region.textContent = text; }, 30);
}

/** A unique id for label/field pairs. */
let seq = 0;
export function uid(prefix) {
  seq += 1;
  return `${prefix}-${seq}`;
}

/** "3 minutes ago", or the date for older times. */
export function ago(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString(undefined, { year: 'numeric', month: 'short', day: 'numeric' });
}

/** Plural helper: plural(2, 'source') is "2 sources". */
export function plural(n, word, many) {
  return `${n} ${n === 1 ? word : (many || `${word}s`)}`;
}

/** A short, readable form of any JSON value (for fields the UI does not know). */
export function jsonText(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}
