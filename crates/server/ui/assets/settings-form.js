// The research settings form, generated from the `research-metadata` JSON Schema: one field per
// property (checkbox, number, choice, text, or JSON for anything else), filled with the
// defaults. The server has the last word: the form does not refuse values itself, so a bad
// one is refused with the server's own message.

import { h, uid } from './dom.js';

/** "max_sources" as "Max sources". */
export function humanize(key) {
  const s = String(key)
    .replace(/_ms$/, ' (ms)')
    .replace(/_seconds$/, ' (seconds)')
    .replace(/_/g, ' ').replace(/\s+/g, ' ').trim();
  return s.charAt(0).toUpperCase() + s.slice(1);
}

function kind(prop) {
  const t = Array.isArray(prop.type) ? prop.type.find((x) => x !== 'null') : prop.type;
  if (Array.isArray(prop.enum) && prop.enum.every((e) => typeof e === 'string')) return 'enum';
  const items = prop.items || {};
  if (t === 'array' && Array.isArray(items.enum) && items.enum.every((e) => typeof e === 'string')) return 'choices';
  if (t === 'boolean') return 'boolean';
  if (t === 'integer' || t === 'number') return t;
  if (t === 'string') return 'string';
  return 'json';
}

/**
 * Builds the form's fields into `container`. Returns `{values(), reset()}`: `values()` gives
 * the settings that differ from the defaults (or throws an Error naming a field whose JSON
 * does not parse).
 */
export function settingsFields(container, schema, defaults) {
  const props = (schema && schema.properties) || {};
  const fields = [];
  for (const [key, prop] of Object.entries(props)) {
    if (!prop || typeof prop !== 'object') continue;
    const k = kind(prop);
    const def = key in (defaults || {}) ? defaults[key] : prop.default;
    const id = uid(`set-${key}`);
    const hintId = prop.description ? `${id}-hint` : null;
    const label = prop.title || humanize(key);
    let input;
    if (k === 'boolean') {
      input = h('input', { type: 'checkbox', id, name: key, checked: Boolean(def), 'aria-describedby': hintId });
    } else if (k === 'enum') {
      input = h('select', { id, name: key, 'aria-describedby': hintId },
        prop.enum.map((opt) => h('option', { value: opt, selected: opt === def }, opt)));
    } else if (k === 'choices') {
      // Several of a few values: a checkbox each (none checked: the server's default).
      const chosen = Array.isArray(def) ? def : [];
      input = h('span', { id, class: 'choices', role: 'group', 'aria-describedby': hintId },
        prop.items.enum.map((opt) => h('label', { class: 'inline' },
          h('input', { type: 'checkbox', name: key, value: opt, checked: chosen.includes(opt) }), ` ${opt}`)));
    } else if (k === 'integer' || k === 'number') {
      input = h('input', {
        type: 'number', id, name: key, inputmode: k === 'integer' ? 'numeric' : 'decimal',
        step: k === 'integer' ? '1' : 'any', value: def === undefined ? '' : String(def),
        min: prop.minimum, max: prop.maximum, 'aria-describedby': hintId,
      });
    } else if (k === 'string') {
      input = h('input', { type: 'text', id, name: key, value: def === undefined ? '' : String(def), 'aria-describedby': hintId });
    } else {
      input = h('textarea', { id, name: key, rows: '3', class: 'mono', 'aria-describedby': hintId },
        def === undefined ? '' : JSON.stringify(def, null, 2));
    }
    const range = (k === 'integer' || k === 'number') && (prop.minimum !== undefined || prop.maximum !== undefined)
      ? ` (${prop.minimum ?? '…'}–${prop.maximum ?? '…'})` : '';
    const hint = hintId ? h('p', { id: hintId, class: 'hint' }, prop.description + range) : null;
    const row = k === 'boolean'
      ? h('div', { class: 'field field-check' }, input, h('label', { for: id }, label), hint)
      : k === 'choices'
        ? h('div', { class: 'field' }, h('span', { class: 'label', id: `${id}-label` }, label), input, hint)
        : h('div', { class: 'field' }, h('label', { for: id }, label), input, hint);
    if (k === 'choices') input.setAttribute('aria-labelledby', `${id}-label`);
    container.append(row);
    fields.push({ key, kind: k, input, def });
  }

  function read(f) {
    const el = f.input;
    switch (f.kind) {
      case 'boolean': return { set: true, value: el.checked };
      case 'enum': return { set: true, value: el.value };
      case 'choices': return {
        set: true,
        value: Array.from(el.querySelectorAll('input[type=checkbox]')).filter((b) => b.checked).map((b) => b.value),
      };
      case 'integer':
      case 'number': {
        const raw = el.value.trim();
        if (raw === '') {
          // The browser empties a number field it cannot read ("12abc"): say so, as the
          // server would for a value that is not a number.
          if (el.validity && el.validity.badInput) return { set: true, value: el.value };
          return { set: false };
        }
        const n = Number(raw);
        return { set: true, value: Number.isFinite(n) ? n : raw };
      }
      case 'string': return { set: true, value: el.value };
      default: {
        const raw = el.value.trim();
        if (raw === '') return { set: false };
        try {
          return { set: true, value: JSON.parse(raw) };
        } catch (e) {
          throw new Error(`${humanize(f.key)}: not valid JSON (${e.message})`);
        }
      }
    }
  }

  return {
    values() {
      const out = {};
      for (const f of fields) {
        const { set, value } = read(f);
        if (set && JSON.stringify(value) !== JSON.stringify(f.def)) out[f.key] = value;
      }
      return out;
    },
    reset() {
      for (const f of fields) {
        const el = f.input;
        if (f.kind === 'boolean') el.checked = Boolean(f.def);
        else if (f.kind === 'choices') {
          const chosen = Array.isArray(f.def) ? f.def : [];
          el.querySelectorAll('input[type=checkbox]').forEach((b) => { b.checked = chosen.includes(b.value); });
        }
        else if (f.kind === 'json') el.value = f.def === undefined ? '' : JSON.stringify(f.def, null, 2);
        else el.value = f.def === undefined ? '' : String(f.def);
      }
    },
    count: fields.length,
  };
}
