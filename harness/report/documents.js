// The documents view of report.html: per document, its candidates ranked by the judge's win rate
// with the human score beside each, and the document's Spearman and Kendall between the two: what
// the card's spearman averages. Computed here from the pair rows the page already holds (P(A) in
// both orders, human scores, gold), as harness.metrics.correlation computes it: win rate = the mean
// P(A) over the pairs where the candidate is shown as A (the preference matrix's row mean); ranks
// average ties; an undefined correlation is 0; a document with fewer than two human-scored
// candidates, or no P(A) read, is left out. Data texts go in through textContent only.
(function () {
  'use strict';
  var R = window.harnessReport;
  if (!R || !R.data.sets.length) return;
  var data = R.data, el = R.el;
  var $ = function (id) { return document.getElementById(id); };
  var state = {set: 0, sort: 'doc', page: 0, size: 10};
  var cache = {};

  function f3(x) { return x === null ? '\u2013' : x.toFixed(3); }
  function f4(x) { return x === null ? '\u2013' : x.toFixed(4); }
  function rankable(x) { return Math.round(x * 1e12) / 1e12; }
  function ranks(xs) {  // average ranks, 1-based, as scipy's rankdata
    var order = xs.map(function (x, k) { return k; }).sort(function (a, b) { return xs[a] - xs[b]; });
    var out = new Array(xs.length), k = 0;
    while (k < order.length) {
      var m = k;
      while (m + 1 < order.length && xs[order[m + 1]] === xs[order[k]]) m++;
      for (var t = k; t <= m; t++) out[order[t]] = (k + m) / 2 + 1;
      k = m + 1;
    }
    return out;
  }
  function spearman(x, h) {
    var rx = ranks(x), rh = ranks(h), n = x.length, mean = (n + 1) / 2, sxy = 0, sxx = 0, shh = 0;
    for (var k = 0; k < n; k++) {
      sxy += (rx[k] - mean) * (rh[k] - mean); sxx += (rx[k] - mean) * (rx[k] - mean); shh += (rh[k] - mean) * (rh[k] - mean);
    }
    return sxx > 0 && shh > 0 ? Math.max(-1, Math.min(1, sxy / Math.sqrt(sxx * shh))) : 0;
  }
  function kendall(x, h) {  // tau-b
    var s = 0, ux = 0, uh = 0;
    for (var a = 0; a < x.length; a++) for (var b = a + 1; b < x.length; b++) {
      var sx = Math.sign(x[a] - x[b]), sh = Math.sign(h[a] - h[b]);
      s += sx * sh; ux += Math.abs(sx); uh += Math.abs(sh);
    }
    return ux > 0 && uh > 0 ? Math.max(-1, Math.min(1, s / Math.sqrt(ux * uh))) : 0;
  }

  function documents(k) {
    if (cache[k]) return cache[k];
    var set = data.sets[k];
    var docs = set.doc_ids.map(function (id, d) {
      var n = set.cands[d].length;
      return {id: id, d: d, cands: set.cands[d], sum: new Array(n).fill(0), count: new Array(n).fill(0),
              human: new Array(n).fill(null), gold: new Array(n).fill(false)};
    });
    set.rows.forEach(function (r) {
      var doc = docs[r[0]];
      if (r[3] !== null) { doc.sum[r[1]] += r[3]; doc.count[r[1]] += 1; }
      if (r[4] !== null) { doc.sum[r[2]] += r[4]; doc.count[r[2]] += 1; }
      if (doc.human[r[1]] === null) doc.human[r[1]] = r[9];
      if (doc.human[r[2]] === null) doc.human[r[2]] = r[10];
      if (r[11]) doc.gold[r[11] === 'i' ? r[1] : r[2]] = true;
    });
    docs.forEach(function (doc) {
      doc.win = doc.sum.map(function (s, c) { return doc.count[c] ? rankable(s / doc.count[c]) : null; });
      var scored = doc.human.filter(function (h) { return h !== null; }).length;
      var keep = doc.cands.map(function (_, c) { return doc.human[c] !== null && doc.win[c] !== null; })
        .map(function (ok, c) { return ok ? c : -1; }).filter(function (c) { return c >= 0; });
      doc.kept = scored >= 2 && doc.win.some(function (w) { return w !== null; });
      var x = keep.map(function (c) { return doc.win[c]; }), h = keep.map(function (c) { return doc.human[c]; });
      doc.rho = doc.kept ? (keep.length > 1 ? spearman(x, h) : 0) : null;
      doc.tau = doc.kept ? (keep.length > 1 ? kendall(x, h) : 0) : null;
      var hr = ranks(h), humanRank = {};
      keep.forEach(function (c, t) { humanRank[c] = keep.length + 1 - hr[t]; });
      doc.humanRank = humanRank;
      doc.order = doc.cands.map(function (_, c) { return c; }).sort(function (a, b) {
        return (doc.win[b] === null ? -1 : doc.win[b]) - (doc.win[a] === null ? -1 : doc.win[a]);
      });
    });
    cache[k] = docs;
    return docs;
  }

  function counted(n, word) { return n + ' ' + word + (n === 1 ? '' : 's'); }
  function mean(xs) { return xs.length ? xs.reduce(function (a, b) { return a + b; }, 0) / xs.length : null; }
  function summary(docs) {
    var kept = docs.filter(function (d) { return d.kept; });
    if (!kept.length) {
      return 'No document has two or more human-scored candidates: no Spearman (the ranking still shows the ' +
        'win rates' + (docs.some(function (d) { return d.gold.some(Boolean); }) ? ' and the gold candidate' : '') + ').';
    }
    return kept.length + ' of ' + counted(docs.length, 'document') + (kept.length === 1 ? ' has' : ' have') +
      ' two or more human-scored candidates: mean Spearman ' +
      f3(mean(kept.map(function (d) { return d.rho; }))) + ', mean Kendall ' + f3(mean(kept.map(function (d) { return d.tau; }))) +
      ' over them (the card\u2019s spearman and kendall of the raw judgments)' +
      (kept.length < docs.length ? '; ' + (docs.length - kept.length) + ' left out' : '') + '.';
  }

  function ranking(doc) {
    var body = el('tbody');
    doc.order.forEach(function (c, k) {
      var h = doc.human[c], hr = doc.humanRank[c];
      var human = h === null ? (doc.gold[c] ? 'gold' : '\u2013') : String(+h.toFixed(3)) + (doc.gold[c] ? ' (gold)' : '');
      body.appendChild(el('tr', {'class': 'cand-rank'}, el('td', {'class': 'num'}, String(k + 1)),
        el('td', {'class': 'cid'}, el('span', {'class': 'id'}, doc.cands[c])),
        el('td', {'class': 'num win'}, f4(doc.win[c])), el('td', {'class': 'num human'}, human),
        el('td', {'class': 'num'}, hr === undefined ? '\u2013' : String(hr))));
    });
    var head = el('tr', null, el('th', {'class': 'num', text: 'rank'}), el('th', {text: 'candidate'}),
      el('th', {'class': 'num', text: 'win rate'}), el('th', {'class': 'num', text: 'human score'}),
      el('th', {'class': 'num', text: 'human rank'}));
    return el('table', {'class': 'ranking'}, el('thead', null, head), body);
  }

  var SORTS = {
    doc: function () { return 0; },
    low: function (a, b) { return (a.rho === null ? 2 : a.rho) - (b.rho === null ? 2 : b.rho); },
    high: function (a, b) { return (b.rho === null ? -2 : b.rho) - (a.rho === null ? -2 : a.rho); }
  };
  function render() {
    var docs = documents(state.set), rows = state.sort === 'doc' ? docs : docs.slice().sort(SORTS[state.sort]);
    var pages = Math.max(1, Math.ceil(rows.length / state.size));
    state.page = Math.min(state.page, pages - 1);
    var body = $('docs-body');
    body.textContent = '';
    rows.slice(state.page * state.size, (state.page + 1) * state.size).forEach(function (doc) {
      var go = el('button', {type: 'button', 'class': 'show-pairs', text: 'its pairs'});
      go.addEventListener('click', function () { R.showPairs(state.set, doc.id); });
      body.appendChild(el('tr', {'class': 'doc-row'},
        el('td', {'class': 'doc'}, el('div', {'class': 'id', title: doc.id}, doc.id), go),
        el('td', {'class': 'num rho'}, doc.kept ? f3(doc.rho) : 'left out'),
        el('td', {'class': 'num tau'}, doc.kept ? f3(doc.tau) : '\u2013'),
        el('td', null, ranking(doc))));
    });
    $('docs-summary').textContent = summary(docs);
    $('docs-status').textContent = counted(rows.length, 'document') + '; page ' + (state.page + 1) + ' of ' + pages;
    $('doc-prev').disabled = state.page === 0;
    $('doc-next').disabled = state.page >= pages - 1;
  }

  var sel = $('doc-set');
  data.sets.forEach(function (s, k) { sel.appendChild(el('option', {value: String(k)}, s.title)); });
  sel.addEventListener('change', function () { state.set = +sel.value; state.page = 0; render(); });
  $('doc-sort').addEventListener('change', function () { state.sort = $('doc-sort').value; state.page = 0; render(); });
  $('doc-prev').addEventListener('click', function () { state.page -= 1; render(); });
  $('doc-next').addEventListener('click', function () { state.page += 1; render(); });
  window.harnessReport.documents = documents;
  render();
})();
