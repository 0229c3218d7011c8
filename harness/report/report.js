// The pair table of report.html: rows from the page's JSON (#report-data), filtered, sorted and
// drawn one page at a time; every data text goes in through textContent, never as markup.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var TAGS = {flip: 1, low_mass: 2, disagree: 4, flagged: 8};
  var TAG_TEXT = {flip: 'flips with the order', low_mass: 'low answer mass', disagree: 'disagrees with humans',
                  flagged: 'flagged'};
  var state = {set: 0, tags: {}, sort: 'doc', query: '', findIn: 'any', page: 0, size: 50};
  var MARKS = /\uE000(source|context|a|b)\uE001/;
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
  // The judge's order-averaged preference for i, (P(A|i,j) + 1 - P(A|j,i)) / 2 (either order alone
  // where one is missing), as pairs.py tags disagreement; its distance from 0.5 is its confidence.
  function pref(row) {
    var known = [row[3], row[4] === null ? null : 1 - row[4]].filter(function (x) { return x !== null; });
    return known.length ? known.reduce(function (a, b) { return a + b; }, 0) / known.length : null;
  }
  function disagreement(row) {
    var p = pref(row);
    return row[12] & TAGS.disagree && p !== null ? Math.abs(p - 0.5) : -1;
  }
  var SORTS = {
    doc: function () { return 0; },
    disagree: function (a, b) { return disagreement(b) - disagreement(a); },
    gap: function (a, b) { return gap(b) - gap(a); },
    mass: function (a, b) { return minMass(a) - minMass(b); },
    p_a: function (a, b) { return (b[3] === null ? -1 : b[3]) - (a[3] === null ? -1 : a[3]); }
  };

  // find: every word of the query equal to one of the row's ids (document, i, j), exactly; or the
  // query, as typed (case ignored), inside a text of the row's prompts: the source, the context, either
  // candidate's text, the instruction and template around them (a phrase that spans a text's edge is
  // not found).
  var lower = {};
  function low(key, s) {
    if (!(key in lower)) lower[key] = s ? s.toLowerCase() : '';
    return lower[key];
  }
  function textFilter(set, q) {
    var docHit = {}, candHit = {}, skeletonHit = false, exactHit = {};
    if (set.prompt.skeletons) Object.keys(set.prompt.skeletons).forEach(function (k) {
      if (set.prompt.skeletons[k].split(MARKS).filter(function (_, n) { return n % 2 === 0; })
          .join('\n').toLowerCase().indexOf(q) >= 0) skeletonHit = true;
    });
    Object.keys(set.prompt.exact).forEach(function (k) {
      if (set.prompt.exact[k].toLowerCase().indexOf(q) >= 0) exactHit[k] = true;
    });
    set.doc_ids.forEach(function (d) {
      var doc = data.docs[d];
      if (!doc) return;
      docHit[d] = low('s\t' + d, doc.source).indexOf(q) >= 0 || low('x\t' + d, doc.context).indexOf(q) >= 0;
      Object.keys(doc.cands).forEach(function (c) {
        if (low('c\t' + d + '\t' + c, doc.cands[c]).indexOf(q) >= 0) candHit[d + '\t' + c] = true;
      });
    });
    return function (r) {
      var d = set.doc_ids[r[0]], i = cid(set, r, 'i'), j = cid(set, r, 'j');
      if (docHit[d] || candHit[d + '\t' + i] || candHit[d + '\t' + j]) return true;
      if (exactHit[[d, i, j].join('\t')] || exactHit[[d, j, i].join('\t')]) return true;
      return skeletonHit && !!data.docs[d];
    };
  }
  function idFilter(set, q) {
    var words = q.split(/\s+/).filter(Boolean);
    return function (r) {
      var ids = [set.doc_ids[r[0]], cid(set, r, 'i'), cid(set, r, 'j')];
      return words.every(function (w) { return ids.indexOf(w) >= 0; });
    };
  }
  function visible() {
    var set = current(), want = 0, q = state.query.trim();
    Object.keys(state.tags).forEach(function (t) { if (state.tags[t]) want |= TAGS[t]; });
    var byId = q && state.findIn !== 'text' ? idFilter(set, q) : null;
    var byText = q && state.findIn !== 'id' ? textFilter(set, q.toLowerCase()) : null;
    var rows = set.rows.filter(function (r) {
      if (want && (r[12] & want) !== want) return false;
      return !q || (byId && byId(r)) || (byText && byText(r));
    });
    var sort = SORTS[state.sort];
    return state.sort === 'doc' ? rows : rows.slice().sort(sort);
  }

  // Cell texts as parts: strings, and {id: ...} for an id, drawn as a .id span (never broken inside;
  // cut with an ellipsis when its column is narrower, whole in its title).
  function decision(p, first, second) {
    if (p === null) return ['unread'];
    return p > 0.5 ? [{id: first}] : (p < 0.5 ? [{id: second}] : ['tie']);
  }
  function flagParts(flags, m, first, second) {
    return flags.map(function (f) {
      var order = [' (', {id: first}, ',', {id: second}, ')'];
      if (f === 'low_answer_mass') return [f].concat(order, [': mass ' + mass(m) + ' < ' + data.threshold]);
      if (f === 'unreadable') return [f].concat(order, [': NaN/inf answer log-probs, no P(A)']);
      if (f === 'no_answer') return [f].concat(order, [': no A/B token generated, P(A) 0.5']);
      return [f].concat(order);
    });
  }
  function hasGold(set) {
    if (set.hasGold === undefined) set.hasGold = set.rows.some(function (r) { return !!r[11]; });
    return set.hasGold;
  }
  function humans(set, row, i, j) {
    if (row[11]) return ['gold: ', {id: row[11] === 'i' ? i : j}];
    if (row[9] === null && row[10] === null) return [hasGold(set) ? 'no gold label' : '\u2013'];
    var f = function (x) { return x === null ? '?' : String(+x.toFixed(3)); };
    var pref = row[9] === null || row[10] === null || row[9] === row[10] ? 'tie' : {id: row[9] > row[10] ? i : j};
    return [f(row[9]) + ' vs ' + f(row[10]) + ' (', pref, ')'];
  }
  // Plain text may break after an underscore (flag names: <wbr>), ids not at all; textContent is the text.
  function node(parts) {
    var span = el('span');
    parts.forEach(function (part) {
      if (typeof part !== 'string') { span.appendChild(el('span', {'class': 'id', title: part.id}, part.id)); return; }
      part.split('_').forEach(function (bit, k) {
        if (k) { span.appendChild(document.createTextNode('_')); span.appendChild(el('wbr')); }
        span.appendChild(document.createTextNode(bit));
      });
    });
    return span;
  }
  function joined(lists, sep) {
    return lists.reduce(function (out, l, k) { return out.concat(k ? [sep] : [], l); }, []);
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

  // The answer tokens' log-probs of both orders (set.lps, parallel to set.rows; keys "A: A" are the
  // label, a colon and the token's text, shown quoted so its spaces show).
  function rowIndex(set, row) {
    if (!set.index) set.index = new Map(set.rows.map(function (r, k) { return [r, k]; }));
    return set.index.get(row);
  }
  function logprobTable(set, row, i, j) {
    var both = (set.lps || [])[rowIndex(set, row)] || [null, null];
    var lp = function (order, k) {
      var v = both[order] ? both[order][k] : null;
      return v === null || v === undefined ? '\u2013' : String(v);
    };
    var body = el('tbody');
    (set.lp_keys || []).forEach(function (key, k) {
      var cut = key.indexOf(':'), label = cut < 0 ? '' : key.slice(0, cut) + ' ';
      body.appendChild(el('tr', null, el('td', {'class': 'mono', text: label + JSON.stringify(key.slice(cut + 1))}),
        el('td', {'class': 'num lp-ij', text: lp(0, k)}), el('td', {'class': 'num lp-ji', text: lp(1, k)})));
    });
    var head = el('tr', null, el('th', {text: 'answer token'}), el('th', {'class': 'num', text: 'log-prob, ' + i + ' as A'}),
      el('th', {'class': 'num', text: 'log-prob, ' + j + ' as A'}));
    return el('details', {'class': 'logprobs', open: 'open'},
      el('summary', {text: 'answer-token log-probs' + (both[0] || both[1] ? '' : ': none recorded for this pair')}),
      el('table', {'class': 'lp'}, el('thead', null, head), body));
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
    var body = el('td', {colspan: '9'}, box, src, logprobTable(set, row, i, j),
      promptBlock(set, row, 'ij', 'prompt with ' + i + ' as A (P(A) ' + p4(row[3]) + ')'),
      promptBlock(set, row, 'ji', 'prompt with ' + j + ' as A (P(A) ' + p4(row[4]) + ')'));
    return el('tr', {'class': 'detail', id: 'detail-' + n, hidden: 'hidden'}, body);
  }

  function pairRow(set, row, n) {
    var i = cid(set, row, 'i'), j = cid(set, row, 'j');
    var flags = flagParts(row[7], row[5], i, j).concat(flagParts(row[8], row[6], j, i));
    var tags = Object.keys(TAGS).filter(function (t) { return row[12] & TAGS[t]; }).map(function (t) { return TAG_TEXT[t]; });
    var p = pref(row), judge = row[12] & TAGS.disagree ? [' (judge: ', {id: p > 0.5 ? i : j}, ', ' + p4(Math.max(p, 1 - p)) + ')'] : [];
    var open = el('button', {'class': 'open', type: 'button', 'aria-expanded': 'false', text: '+'});
    var tr = el('tr', {'class': 'pair' + (row[12] & 1 ? ' flip' : '')},
      el('td', {'class': 'doc'}, open, ' ', node([{id: set.doc_ids[row[0]]}])),
      el('td', {'class': 'cid'}, el('span', {'class': 'id', title: text(set, row, 'i') || i}, i)),
      el('td', {'class': 'cid'}, el('span', {'class': 'id', title: text(set, row, 'j') || j}, j)),
      el('td', {'class': 'num p-ij'}, p4(row[3])),
      el('td', {'class': 'num p-ji'}, p4(row[4])),
      el('td', {'class': 'humans'}, node(humans(set, row, i, j).concat(tags.length ? [' \u2022 ' + tags.join(', ')] : [], judge))),
      el('td', {'class': 'chosen'}, node(decision(row[3], i, j).concat([' | '], decision(row[4], j, i)))),
      el('td', {'class': 'num'}, mass(row[5]) + ' | ' + mass(row[6])),
      el('td', {'class': 'flags'}, node(flags.length ? joined(flags, '; ') : ['\u2013'])));
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
    $('find-in').addEventListener('change', function () { state.findIn = $('find-in').value; state.page = 0; render(); });
    $('prev').addEventListener('click', function () { state.page -= 1; render(); });
    $('next').addEventListener('click', function () { state.page += 1; render(); });
    tagLabels();
  }
  function tagLabels() {
    var counts = current().counts;
    Object.keys(TAGS).forEach(function (t) { $('count-' + t).textContent = ' ' + TAG_TEXT[t] + ' (' + counts[t] + ')'; });
  }

  // What the documents view (documents.js) uses: the data, el, and "show this document's pairs".
  function showPairs(setIndex, docId) {
    state.set = setIndex; $('set').value = String(setIndex);
    state.query = docId; $('query').value = docId;
    state.findIn = 'id'; $('find-in').value = 'id';
    state.page = 0; tagLabels(); render();
    $('pairs').scrollIntoView();
  }
  window.harnessReport = {data: data, el: el, showPairs: showPairs};
  if (data.sets.length) { controls(); render(); }
})();
