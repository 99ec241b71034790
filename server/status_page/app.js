// lockstep coordinator status page. Plain JavaScript, no libraries: fetches
// the JSON endpoints of the server that served it (/api/...), renders the
// workers and jobs tables and, for the job named by ?job=N or #job=N, its
// loss / test-accuracy / throughput curves as inline SVG, the sync strip and
// the per-rank table. Refreshes every REFRESH_MS while something is PENDING
// or RUNNING (the selected job, or any job when none is selected) and stops
// when that ends.
'use strict';

(function () {
  const REFRESH_MS = 1500;
  const RETRY_MS = 5000;            // after a failed fetch (coordinator gone?)
  const SYNC_ENTRIES = 50;          // recent checks fetched for the mismatch list
  const STRIP_MAX_CELLS = 240;      // cells drawn in the sync strip
  const ACTIVE = new Set(['PENDING', 'RUNNING']);
  const SVG_NS = 'http://www.w3.org/2000/svg';
  let timer = null;

  const $ = (id) => document.getElementById(id);

  // Job id from ?job=N or #job=N; 0 when none.
  function selectedJob() {
    const fromQuery = new URLSearchParams(location.search).get('job');
    const fromHash = /(?:^#|&)job=(\d+)/.exec(location.hash);
    const v = Number(fromHash ? fromHash[1] : fromQuery);
    return Number.isInteger(v) && v > 0 ? v : 0;
  }

  class HttpError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  async function getJson(url) {
    const r = await fetch(url, { cache: 'no-store' });
    let body = null;
    try {
      body = await r.json();
    } catch (e) {
      body = null;
    }
    if (!r.ok) {
      const why = body && body.error ? body.error : 'HTTP ' + r.status;
      throw new HttpError(url + ': ' + why, r.status);
    }
    return body;
  }

  // ---- small DOM helpers ----
  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, String(v));
    }
    for (const c of [].concat(children === undefined ? [] : children)) {
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fillBody(table, rows) {
    const tbody = table.tBodies[0];
    tbody.replaceChildren(...rows);
  }
  function stateBadge(state) {
    return el('span', { class: 'state state-' + state }, state);
  }
  function jobLink(id) {
    return el('a', { href: '?job=' + id }, String(id));
  }

  // ---- number formatting ----
  const num = (v) => (v === undefined || v === null ? NaN : Number(v));
  function fmt(v, digits) {
    const x = num(v);
    if (!Number.isFinite(x)) return '–';
    if (x !== 0 && (Math.abs(x) >= 1e6 || Math.abs(x) < 1e-3)) return x.toExponential(2);
    return x.toLocaleString('en-US', { maximumFractionDigits: digits === undefined ? 4 : digits });
  }
  function pct(v) {
    const x = num(v);
    return Number.isFinite(x) ? (100 * x).toFixed(2) + '%' : '–';
  }
  function ms(v) {
    const x = num(v);
    return x > 0 ? (1e3 * x).toFixed(3) : '–';
  }
  function age(v) {
    const x = num(v);
    return Number.isFinite(x) ? x.toFixed(1) + ' s' : '–';
  }
  function when(unixSeconds) {
    const x = num(unixSeconds);
    return x > 0 ? new Date(x * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–';
  }
  function mode(spec) {
    if (!spec) return '';
    if (spec.sync_mode === 'PS') return 'ps/' + String(spec.ps_transport || 'GRPC').toLowerCase();
    return 'ring/' + String(spec.peer_transport || 'GRPC').toLowerCase();
  }
  function stepText(job) {
    const total = num(job.total_steps);
    return total > 0 ? job.step + ' / ' + total : String(job.step);
  }

  // ---- charts ----
  // A "nice" step for about `count` ticks over `span`.
  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const nice = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
    return nice * mag;
  }
  function tickLabel(v, step) {
    if (Math.abs(v) >= 1e5) return v.toExponential(1);
    const decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(step))));
    return v.toFixed(decimals);
  }

  // Draws y(x) as a polyline with axes into `svg`. opts: yMin/yMax (fixed
  // bounds, else the data's, from 0 for non-negative data), logWhenSpread
  // (a log10 y axis when every y > 0 and max/min > 100, e.g. a loss that
  // falls by orders of magnitude), cls (extra class of the line), markers
  // (draw a dot per point), empty (text shown without points).
  function drawChart(svg, xs, ys, opts) {
    const W = 560, H = 220, L = 58, R = 14, T = 12, B = 30;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.replaceChildren();
    const pts = [];
    for (let i = 0; i < xs.length; ++i) {
      const x = num(xs[i]), y = num(ys[i]);
      if (Number.isFinite(x) && Number.isFinite(y)) pts.push([x, y]);
    }
    svg.setAttribute('data-points', pts.length);
    if (pts.length === 0) {
      svg.append(svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, opts.empty || 'no data yet'));
      return;
    }
    let x0 = pts[0][0], x1 = pts[pts.length - 1][0];
    let y0 = opts.yMin, y1 = opts.yMax;
    const dataMin = Math.min(...pts.map((p) => p[1]));
    const dataMax = Math.max(...pts.map((p) => p[1]));
    const log = opts.logWhenSpread === true && dataMin > 0 && dataMax / dataMin > 100;
    if (log) {
      y0 = Math.floor(Math.log10(dataMin));
      y1 = Math.ceil(Math.log10(dataMax));
    } else {
      if (y0 === undefined) y0 = dataMin >= 0 ? 0 : dataMin;
      if (y1 === undefined) y1 = dataMax;
    }
    if (y1 <= y0) y1 = y0 + (Math.abs(y0) || 1);
    if (x1 <= x0) x1 = x0 + 1;
    const round = (v) => Math.round(v * 10) / 10;
    const px = (x) => round(L + ((x - x0) / (x1 - x0)) * (W - L - R));
    const py = (y) => round(T + (1 - ((log ? Math.log10(y) : y) - y0) / (y1 - y0)) * (H - T - B));

    if (log) {
      const decades = Math.max(1, Math.ceil((y1 - y0) / 5));
      for (let e = y0; e <= y1; e += decades) {
        const y = py(Math.pow(10, e));
        svg.append(svgEl('line', { class: 'grid', x1: L, x2: W - R, y1: y, y2: y }));
        svg.append(svgEl('text', { x: L - 6, y: y + 4, 'text-anchor': 'end' }, e === 0 ? '1' : '1e' + e));
      }
      svg.append(svgEl('text', { x: L + 6, y: T + 10 }, 'log scale'));
    } else {
      const yStep = niceStep(y1 - y0, 4);
      for (let v = Math.ceil(y0 / yStep) * yStep; v <= y1 + yStep * 1e-9; v += yStep) {
        const y = py(v);
        svg.append(svgEl('line', { class: 'grid', x1: L, x2: W - R, y1: y, y2: y }));
        svg.append(svgEl('text', { x: L - 6, y: y + 4, 'text-anchor': 'end' }, tickLabel(v, yStep)));
      }
    }
    const xStep = Math.max(1, niceStep(x1 - x0, 5));
    for (let v = Math.ceil(x0 / xStep) * xStep; v <= x1 + 1e-9; v += xStep) {
      const x = px(v);
      svg.append(svgEl('line', { class: 'axis', x1: x, x2: x, y1: H - B, y2: H - B + 4 }));
      svg.append(svgEl('text', { x: x, y: H - B + 16, 'text-anchor': 'middle' }, tickLabel(v, xStep)));
    }
    svg.append(svgEl('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
    svg.append(svgEl('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
    svg.append(svgEl('text', { x: W - R, y: H - 2, 'text-anchor': 'end' }, 'step'));

    const points = pts.map((p) => px(p[0]) + ',' + py(p[1])).join(' ');
    svg.append(svgEl('polyline', {
      class: 'series' + (opts.cls ? ' ' + opts.cls : ''),
      points: points,
      'data-points': pts.length,
    }));
    if (opts.markers || pts.length === 1) {
      for (const p of pts) {
        svg.append(svgEl('circle', { class: 'marker', cx: px(p[0]), cy: py(p[1]), r: 2.5 }));
      }
    }
  }

  // ---- sync strip ----
  // Server cells (each covering checks_per_cell steps) grouped to at most
  // STRIP_MAX_CELLS drawn cells; a drawn cell is red ("bad") if any step in
  // it mismatched.
  function drawStrip(strip, job) {
    const box = $('sync-strip');
    const n = (strip.checks || []).length;
    const group = Math.max(1, Math.ceil(n / STRIP_MAX_CELLS));
    const cells = [];
    let bad = 0;
    for (let i = 0; i < n; i += group) {
      let checks = 0, mismatches = 0;
      const last = Math.min(n, i + group) - 1;
      for (let j = i; j <= last; ++j) {
        checks += num(strip.checks[j]);
        mismatches += num(strip.mismatches[j]);
      }
      const first = num(strip.first_step[i]), lastStep = num(strip.last_step[last]);
      const ok = mismatches === 0;
      if (!ok) ++bad;
      const range = first === lastStep ? 'step ' + first : 'steps ' + first + '–' + lastStep;
      cells.push(el('span', {
        class: 'cell ' + (ok ? 'ok' : 'bad'),
        title: range + ': ' + checks + ' checked' + (ok ? ', all in sync' : ', ' + mismatches + ' mismatched'),
        'data-first-step': first,
        'data-last-step': lastStep,
      }));
    }
    box.replaceChildren(...cells);
    box.setAttribute('data-cells', cells.length);
    box.setAttribute('data-bad-cells', bad);
    box.setAttribute('data-checked-steps', num(job.checked_steps));
    const checked = num(job.checked_steps), mismatched = num(job.mismatched_steps);
    let text = checked + ' step(s) checked, ' + mismatched + ' mismatched';
    if (n > 0) {
      const per = num(strip.checks_per_cell) * group;
      text += per > 1 ? '; each cell covers up to ' + per + ' steps' : '; one cell per step';
    }
    $('sync-summary').textContent = text;
  }

  function drawMismatches(history) {
    const items = [];
    for (const c of (history && history.checks) || []) {
      if (c.all_match) continue;
      const ranks = (c.differing_ranks || []).join(', ');
      const hashes = (c.rank_hashes || []).map((h, r) => 'rank ' + r + ' ' + h).join('; ');
      items.push(el('li', {}, [
        'step ' + c.step + ': rank(s) ' + ranks + ' differ from the majority hash ',
        el('code', {}, c.majority_hash),
        hashes ? ' (' + hashes + ')' : '',
      ]));
    }
    $('sync-mismatches').replaceChildren(...items);
  }

  // ---- tables ----
  function renderWorkers(workers) {
    fillBody($('workers'), workers.map((w) => el('tr', { 'data-worker': w.worker_id }, [
      el('td', {}, w.worker_id),
      el('td', {}, w.hostname),
      el('td', {}, el('code', {}, w.address)),
      el('td', {}, el('code', {}, w.data_address || '–')),
      el('td', {}, stateBadge(w.state)),
      el('td', {}, num(w.job_id) > 0 ? jobLink(w.job_id) : '–'),
      el('td', {}, age(w.last_heartbeat_age_s)),
    ])));
  }

  function renderJobs(list, selected) {
    const jobs = list.jobs || [];
    const total = num(list.total_jobs);
    $('jobs-count').textContent = jobs.length < total ? '(last ' + jobs.length + ' of ' + total + ')' : '(' + total + ')';
    const rows = jobs.slice().reverse().map((j) => {
      const id = num(j.job_id);
      const sync = num(j.checked_steps) === 0 ? '–'
        : j.out_of_sync ? el('span', { class: 'no' }, 'diverged (' + j.mismatched_steps + ' mismatched)')
          : el('span', { class: 'yes' }, 'in sync (' + j.checked_steps + ')');
      return el('tr', { 'data-job': id, class: id === selected ? 'selected' : null }, [
        el('td', {}, jobLink(id)),
        el('td', {}, j.spec.name || ''),
        el('td', {}, j.spec.model),
        el('td', {}, mode(j.spec)),
        el('td', {}, j.spec.num_workers),
        el('td', {}, stateBadge(j.state)),
        el('td', {}, stepText(j)),
        el('td', {}, num(j.step) > 0 ? fmt(j.loss) : '–'),
        el('td', {}, num(j.test_accuracy) > 0 ? pct(j.test_accuracy) : '–'),
        el('td', {}, fmt(j.examples_per_second, 0)),
        el('td', {}, sync),
      ]);
    });
    fillBody($('jobs'), rows);
  }

  function renderJob(job, curve, sync) {
    $('job-section').hidden = false;
    $('job-section').setAttribute('data-job', job.job_id);
    $('job-section').setAttribute('data-state', job.state);
    const title = $('job-title');
    title.replaceChildren('Job ' + job.job_id + (job.spec.name ? ' · ' + job.spec.name : '') + ' ', stateBadge(job.state));
    const reason = $('job-reason');
    reason.hidden = !job.reason;
    reason.textContent = job.reason || '';
    const started = num(job.started_unix_s), finished = num(job.finished_unix_s);
    const end = finished > 0 ? finished : Date.now() / 1000;
    const items = [
      ['model', job.spec.model],
      ['mode', mode(job.spec) + ', K = ' + job.spec.num_workers],
      ['global batch', job.spec.global_batch],
      ['step', stepText(job)],
      ['epoch', job.epoch],
      ['loss', num(job.step) > 0 ? fmt(job.loss) : '–'],
      ['test accuracy', num(job.test_accuracy) > 0 ? pct(job.test_accuracy) : '–'],
      ['test loss', num(job.test_loss) > 0 ? fmt(job.test_loss) : '–'],
      ['examples / s', fmt(job.examples_per_second, 0)],
      ['checked steps', job.checked_steps],
      ['mismatched steps', job.mismatched_steps],
      ['skipped steps', skippedText(job)],
      ['submitted', when(job.submitted_unix_s)],
      ['running for', started > 0 ? fmt(end - started, 1) + ' s' : '–'],
      ['final hash', job.final_hash || '–'],
    ];
    $('job-summary').replaceChildren(...items.map(([k, v]) => el('div', { 'data-key': k }, [el('dt', {}, k), el('dd', { title: String(v) }, v)])));
    drawMembership(job.membership_events || []);

    const loss = curve.loss || {}, ev = curve.eval || {};
    drawChart($('loss-curve'), loss.step || [], loss.loss || [], { logWhenSpread: true, empty: 'no step completed yet' });
    drawChart($('accuracy-curve'), ev.step || [], ev.test_accuracy || [], {
      yMin: 0, yMax: 1, cls: 'accuracy', markers: (ev.step || []).length <= 60,
      empty: 'no evaluation yet (rank 0 evaluates at the end, and after each epoch with --eval_each_epoch)',
    });
    drawChart($('throughput-curve'), loss.step || [], loss.window_examples_per_second || [], {
      cls: 'throughput', empty: 'needs two completed steps',
    });
    drawStrip(sync.strip || {}, job);
    drawMismatches(sync.history);

    fillBody($('ranks'), (job.ranks || []).map((r) => el('tr', { 'data-rank': r.rank }, [
      el('td', {}, r.rank),
      el('td', {}, r.worker_id),
      el('td', {}, r.hostname),
      el('td', {}, el('code', {}, r.address)),
      el('td', {}, el('code', {}, r.data_address || '–')),
      el('td', {}, r.step),
      el('td', {}, el('code', { class: 'hash', title: r.last_hash }, (r.last_hash || '–').slice(0, 12))),
      el('td', {}, num(r.step) === 0 ? '–' : r.in_sync ? el('span', { class: 'yes' }, 'yes') : el('span', { class: 'no' }, 'NO')),
      el('td', {}, age(r.last_heartbeat_age_s)),
      // Medians of the rank's last 64 steps (ms): compute, exposed
      // communication, communication in flight, waiting on peers.
      el('td', { class: 'ms', 'data-part': 'step' }, ms(r.median_step_seconds)),
      el('td', { class: 'ms', 'data-part': 'compute' }, ms(r.median_compute_seconds)),
      el('td', { class: 'ms', 'data-part': 'exposed' }, ms(r.median_exposed_seconds)),
      el('td', { class: 'ms', 'data-part': 'comm' }, ms(r.median_communication_seconds)),
      el('td', { class: 'ms', 'data-part': 'wait' }, ms(r.median_peer_wait_seconds)),
      el('td', {}, num(r.resident_bytes) > 0 ? fmt(num(r.resident_bytes) / 1048576, 1) + ' MiB' : '–'),
    ])));
    drawWaits(job.ranks || []);
  }

  // Who waits for whom: every rank whose combine had waited a second or
  // more at its last heartbeat, as `lockstep status` prints it ("rank 0
  // waits for rank 1: 3.1 s at its last heartbeat"). A straggler shows as
  // the rank the others wait for; a cut link or an unreachable shard as
  // every rank waiting.
  function drawWaits(ranks) {
    const items = ranks.filter((r) => num(r.waiting_s) >= 1).map((r) => {
      const what = num(r.waiting_for_shard) > 0 ? 'ps shard ' + (num(r.waiting_for_shard) - 1)
        : 'rank ' + (num(r.waiting_for_peer) - 1);
      return el('li', { 'data-rank': r.rank }, 'rank ' + r.rank + ' waits for ' + what + ': ' +
        num(r.waiting_s).toFixed(1) + ' s at its last heartbeat');
    });
    $('rank-waits').replaceChildren(...items);
    $('rank-waits').hidden = items.length === 0;
  }

  // Non-finite gradients skipped (on_nonfinite=skip): "2 (last at step 5;
  // rank(s) 1)", or "sum overflowed" when no rank's own values were
  // non-finite.
  function skippedText(job) {
    const n = num(job.skipped_steps);
    if (!(n > 0)) return '0';
    const ranks = (job.last_nonfinite_ranks || []).join(', ');
    return n + ' (last at step ' + job.last_skipped_step + '; ' +
      (ranks ? 'rank(s) ' + ranks : 'sum overflowed') + ')';
  }

  // Membership changes (on_worker_lost=shrink/wait, joins, restarts), one
  // line each, as `lockstep status` prints them.
  function drawMembership(events) {
    const items = events.map((e) => {
      const gen = ' (generation ' + e.generation + ')';
      const decided = num(e.step) >= 0;
      let text;
      if (e.kind === 'wait') {
        text = 'wait: rank ' + e.rank + ' lost' + gen + ', ' +
          (decided ? 'replaced, continued at step ' + e.step : 'waiting for a worker to replace it');
      } else if (e.kind === 'replace' || e.kind === 'join') {
        text = e.kind + ': ' + e.worker_id + ' as rank ' + e.rank + ', ' + e.world_before + ' -> ' +
          e.world_after + ' workers' + gen + ', ' + (decided ? 'joined at step ' + e.step : 'regrouping');
      } else if (e.kind === 'restart') {
        text = 'restart: coordinator restarted, ' + (decided ? 'regrouped ' : 'regrouping ') +
          e.world_after + ' ranks' + (decided ? ' at step ' + e.step : '') + gen;
      } else {
        text = e.kind + ': ' + e.world_before + ' -> ' + e.world_after + ' workers' + gen + ', ' +
          (decided ? 'continued at step ' + e.step : 'regrouping');
      }
      return el('li', { 'data-kind': e.kind, 'data-step': e.step },
        [el('span', { class: 'when' }, when(e.unix_s) + ' '), text + (e.reason ? '; ' + e.reason : '')]);
    });
    $('membership-events').replaceChildren(...items);
    $('membership-section').hidden = items.length === 0;
  }

  function showError(message) {
    const e = $('error');
    e.hidden = !message;
    e.textContent = message || '';
  }

  function schedule(ms, text) {
    if (timer !== null) clearTimeout(timer);
    timer = ms > 0 ? setTimeout(refresh, ms) : null;
    $('refresh-state').textContent = text;
  }

  async function refresh() {
    timer = null;
    const id = selectedJob();
    try {
      const [workers, jobs] = await Promise.all([getJson('/api/workers'), getJson('/api/jobs')]);
      renderWorkers(workers.workers || []);
      renderJobs(jobs, id);
      let active = (jobs.jobs || []).some((j) => ACTIVE.has(j.state));
      if (id > 0) {
        const [job, curve, sync] = await Promise.all([
          getJson('/api/job?id=' + id),
          getJson('/api/curve?id=' + id),
          getJson('/api/sync?id=' + id + '&max=' + SYNC_ENTRIES),
        ]);
        renderJob(job, curve, sync);
        active = ACTIVE.has(job.state);
      } else {
        $('job-section').hidden = true;
      }
      showError('');
      const now = new Date().toLocaleTimeString();
      if (active) {
        schedule(REFRESH_MS, 'updated ' + now + ' · refreshing every ' + REFRESH_MS / 1000 + ' s');
      } else {
        schedule(0, 'updated ' + now + ' · ' + (id > 0 ? 'job ended' : 'no job running') + ': auto-refresh stopped (reload to update)');
      }
    } catch (e) {
      showError(e.message);
      if (e instanceof HttpError && e.status >= 400 && e.status < 500) {
        schedule(0, 'auto-refresh stopped');
      } else {
        schedule(RETRY_MS, 'cannot reach the coordinator; retrying every ' + RETRY_MS / 1000 + ' s');
      }
    }
  }

  window.addEventListener('hashchange', refresh);
  refresh();
})();
