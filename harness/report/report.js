// The pair table of report.html: rows from the page's JSON (#report-data), filtered, sorted and
// drawn one page at a time; every data text goes in through textContent, never as markup.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var TAGS = {flip: 1, low_mass: 2, disagree: 4, flagged: 8};
  var TAG_TEXT = {flip: 'flips with the order', low_mass: 'low answer mass', disagree: 'disagrees with humans',
                  flagged: 'flagged'};
  var state = {set: 0, tags: {}, sort: 'doc', query: '', page: 0, size: 50};
  var $ = function (id) { return document.getElementById(id); };

  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) {
      if (k === 'text') node.textContent = attrs[k]; else node.setAttribute(k, attrs[k]);
    });
    for (var n = 2; n < arguments.length; n++) {
      var kid = arguments[n];
      if (kid === null || kid === undefined) continue;
      node.appendChild(typeof kid === 'string' ? document.createTextNode(kid) : kid);
    }
    return node;
  }
  function p4(x) { return x === null ? '\u2013' : x.toFixed(4); }
  function mass(x) { return x === null ? '\u2013' : (x < 0.001 ? x.toExponential(1) : x.toFixed(3)); }
  function current() { return data.sets[state.set]; }
  // Ids are data: an id such as __proto__ or constructor must not reach Object.prototype.
  function own(obj, key) { return Object.prototype.hasOwnProperty.call(obj, key) ? obj[key] : undefined; }
  function docOf(set, row) { return own(data.docs, set.doc_ids[row[0]]) || null; }
  function cid(set, row, side) { return set.cands[row[0]][row[side === 'i' ? 1 : 2]]; }
  function text(set, row, side) {
    var t = docOf(set, row) ? own(docOf(set, row).cands, cid(set, row, side)) : undefined;
    return t !== undefined ? t : null;
  }
  function gap(row) { return row[3] === null || row[4] === null ? -1 : Math.abs(row[3] + row[4] - 1); }
  function minMass(row) {
    var m = [row[5], row[6]].filter(function (x) { return x !== null; });
    return m.length ? Math.min.apply(null, m) : Infinity;
  }
  var SORTS = {
    doc: function () { return 0; },
    gap: function (a, b) { return gap(b) - gap(a); },
    mass: function (a, b) { return minMass(a) - minMass(b); },
    p_a: function (a, b) { return (b[3] === null ? -1 : b[3]) - (a[3] === null ? -1 : a[3]); }
  };

  function visible() {
    var set = current(), want = 0, q = state.query.toLowerCase();
    Object.keys(state.tags).forEach(function (t) { if (state.tags[t]) want |= TAGS[t]; });
    var rows = set.rows.filter(function (r) {
      if (want && (r[12] & want) !== want) return false;
      if (!q) return true;
      var hay = [set.doc_ids[r[0]], cid(set, r, 'i'), cid(set, r, 'j')].join(' ').toLowerCase();
      return hay.indexOf(q) >= 0;
    });
    var sort = SORTS[state.sort];
    return state.sort === 'doc' ? rows : rows.slice().sort(sort);
  }

  function decision(p, first, second) {
    if (p === null) return 'unread';
    return p > 0.5 ? first : (p < 0.5 ? second : 'tie');
  }
  function flagText(flags, m, order) {
    return flags.map(function (f) {
      if (f === 'low_answer_mass') return f + ' (' + order + '): mass ' + mass(m) + ' < ' + data.threshold;
      if (f === 'unreadable') return f + ' (' + order + '): NaN/inf answer log-probs, no P(A)';
      if (f === 'no_answer') return f + ' (' + order + '): no A/B token generated, P(A) 0.5';
      return f + ' (' + order + ')';
    });
  }
  function humans(row, i, j) {
    if (row[11]) return 'gold: ' + (row[11] === 'i' ? i : j);
    if (row[9] === null && row[10] === null) return '\u2013';
    var f = function (x) { return x === null ? '?' : String(+x.toFixed(3)); };
    var pref = row[9] === null || row[10] === null || row[9] === row[10] ? 'tie' : (row[9] > row[10] ? i : j);
    return f(row[9]) + ' vs ' + f(row[10]) + ' (' + pref + ')';
  }

  function promptFor(set, row, order) {
    var doc = docOf(set, row), a = order === 'ij' ? 'i' : 'j', b = order === 'ij' ? 'j' : 'i';
    var key = [set.doc_ids[row[0]], cid(set, row, a), cid(set, row, b)].join('\t');
    if (own(set.prompt.exact, key) !== undefined) return set.prompt.exact[key];
    if (!doc || !set.prompt.skeletons) return null;
    var values = {source: doc.source, context: doc.context, a: text(set, row, a), b: text(set, row, b)};
    var skel = set.prompt.skeletons[doc.context ? 'context' : 'plain'];
    return skel.replace(/\uE000(source|context|a|b)\uE001/g, function (_, slot) { return values[slot]; });
  }

  function promptBlock(set, row, order, label) {
    var pre = el('pre', {'class': 'prompt-text'});
    var det = el('details', {'class': 'prompt', 'data-order': order}, el('summary', {text: label}), pre);
    det.addEventListener('toggle', function () {
      if (!det.open || pre.textContent) return;
      var t = promptFor(set, row, order);
      pre.textContent = t === null ? 'not available: ' + set.prompt.note : t;
    });
    return det;
  }

  function detailRow(set, row, n) {
    var i = cid(set, row, 'i'), j = cid(set, row, 'j'), doc = docOf(set, row);
    var box = el('div', {'class': 'texts'});
    [['i', i], ['j', j]].forEach(function (s) {
      var t = text(set, row, s[0]);
      box.appendChild(el('div', {'class': 'cand'}, el('h4', {text: 'candidate ' + s[1]}),
        el('div', {'class': 'cand-text', text: t === null ? '(text not available)' : t})));
    });
    var src = el('details', {'class': 'source'}, el('summary', {text: 'source' + (doc && doc.context ? ' and context' : '')}),
      el('div', {'class': 'cand-text', text: doc ? doc.source + (doc.context ? '\n\nContext: ' + doc.context : '') : '(not available)'}));
    var body = el('td', {colspan: '9'}, box, src,
      promptBlock(set, row, 'ij', 'prompt with ' + i + ' as A (P(A) ' + p4(row[3]) + ')'),
      promptBlock(set, row, 'ji', 'prompt with ' + j + ' as A (P(A) ' + p4(row[4]) + ')'));
    return el('tr', {'class': 'detail', id: 'detail-' + n, hidden: 'hidden'}, body);
  }

  function pairRow(set, row, n) {
    var i = cid(set, row, 'i'), j = cid(set, row, 'j');
    var flags = flagText(row[7], row[5], i + ',' + j).concat(flagText(row[8], row[6], j + ',' + i));
    var tags = Object.keys(TAGS).filter(function (t) { return row[12] & TAGS[t]; }).map(function (t) { return TAG_TEXT[t]; });
    var open = el('button', {'class': 'open', type: 'button', 'aria-expanded': 'false', text: '+'});
    var tr = el('tr', {'class': 'pair' + (row[12] & 1 ? ' flip' : '')},
      el('td', null, open, ' ' + set.doc_ids[row[0]]),
      el('td', {'class': 'cid', title: text(set, row, 'i') || ''}, i),
      el('td', {'class': 'cid', title: text(set, row, 'j') || ''}, j),
      el('td', {'class': 'num p-ij'}, p4(row[3])),
      el('td', {'class': 'num p-ji'}, p4(row[4])),
      el('td', null, decision(row[3], i, j) + ' | ' + decision(row[4], j, i)),
      el('td', {'class': 'num'}, mass(row[5]) + ' | ' + mass(row[6])),
      el('td', {'class': 'flags'}, flags.join('; ') || '\u2013'),
      el('td', null, humans(row, i, j) + (tags.length ? ' \u2022 ' + tags.join(', ') : '')));
    open.addEventListener('click', function () {
      var d = $('detail-' + n), shut = d.hasAttribute('hidden');
      if (shut) d.removeAttribute('hidden'); else d.setAttribute('hidden', 'hidden');
      open.textContent = shut ? '\u2212' : '+';
      open.setAttribute('aria-expanded', String(shut));
    });
    return tr;
  }

  function render() {
    var set = current(), rows = visible(), pages = Math.max(1, Math.ceil(rows.length / state.size));
    state.page = Math.min(state.page, pages - 1);
    var body = $('pairs-body');
    body.textContent = '';
    var start = state.page * state.size;
    rows.slice(start, start + state.size).forEach(function (row, k) {
      body.appendChild(pairRow(set, row, start + k));
      body.appendChild(detailRow(set, row, start + k));
    });
    $('pairs-status').textContent = rows.length + ' of ' + set.rows.length + ' pairs; page ' + (state.page + 1) +
      ' of ' + pages;
    $('prev').disabled = state.page === 0;
    $('next').disabled = state.page >= pages - 1;
    $('pairs-note').textContent = set.prompt.note;
  }

  function controls() {
    var sel = $('set');
    data.sets.forEach(function (s, k) { sel.appendChild(el('option', {value: String(k)}, s.title)); });
    sel.addEventListener('change', function () { state.set = +sel.value; state.page = 0; tagLabels(); render(); });
    var box = $('tags');
    Object.keys(TAGS).forEach(function (t) {
      var cb = el('input', {type: 'checkbox', id: 'tag-' + t});
      cb.addEventListener('change', function () { state.tags[t] = cb.checked; state.page = 0; render(); });
      box.appendChild(el('label', null, cb, el('span', {id: 'count-' + t})));
    });
    $('sort').addEventListener('change', function () { state.sort = $('sort').value; state.page = 0; render(); });
    $('size').addEventListener('change', function () { state.size = +$('size').value; state.page = 0; render(); });
    $('query').addEventListener('input', function () { state.query = $('query').value; state.page = 0; render(); });
    $('prev').addEventListener('click', function () { state.page -= 1; render(); });
    $('next').addEventListener('click', function () { state.page += 1; render(); });
    tagLabels();
  }
  function tagLabels() {
    var counts = current().counts;
    Object.keys(TAGS).forEach(function (t) { $('count-' + t).textContent = ' ' + TAG_TEXT[t] + ' (' + counts[t] + ')'; });
  }

  if (data.sets.length) { controls(); render(); }
})();
