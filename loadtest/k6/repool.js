// repool load test for k6: runs a scenario of loadtest/scenarios against a
// sidecar, with the constant-arrival-rate executor, the scenario's
// thresholds, and custom metrics for the fast-fail share. The Go runner
// (loadtest/cmd/run) runs the same files with the same semantics; see
// docs/loadtest.md.
//
//   k6 run -e SCENARIO=provider-down loadtest/k6/repool.js
//
// Written for k6 v0.54.0. Without k6, the Go runner runs this file's own code in an embedded
// JavaScript engine (loadtest/k6js) against the topology it starts:
//   go run ./loadtest/cmd/run -script loadtest/k6/repool.js -scenario provider-down [-short] [-json F]
//
// Environment:
//   SCENARIO      scenario name (a file of ../scenarios) or a path to a .json file; default baseline
//   SHORT         1 to run the scenario's short (CI) variant
//   SIDECAR       the sidecar's base URL; default http://127.0.0.1:7070
//   FAULTS        the Go runner's fault controller (go run ./loadtest/cmd/run -scenario NAME -serve);
//                 setup() starts the fault plan there, teardown() stops it. Unset: no faults are
//                 injected by this script (inject them yourself, e.g. with toxiproxy-cli).
//   REGISTER      0 to skip registering the scenario's resources in setup()
//   SUMMARY_JSON  where handleSummary writes the JSON summary; default summary-SCENARIO.json
//
// Metrics, besides k6's own (http_req_duration, http_req_failed, dropped_iterations, vus_max, ...),
// all tagged provider (and name: acquire, release):
//   fast_fail               Rate over failed requests: the share the sidecar marked X-Repool-Fast-Fail
//   fast_fail_within_10ms   Rate over failed requests: the share that failed within 10 ms
//   fast_fail_within_100ms  Rate over failed requests: the share that failed within 100 ms

import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
import { Rate } from 'k6/metrics';
import { textSummary } from 'https://jslib.k6.io/k6-summary/0.0.2/index.js';

const NAME = __ENV.SCENARIO || 'baseline';
const SHORT = __ENV.SHORT === '1' || __ENV.SHORT === 'true';
const SIDECAR = (__ENV.SIDECAR || 'http://127.0.0.1:7070').replace(/\/+$/, '');
const FAULTS = (__ENV.FAULTS || '').replace(/\/+$/, '');

// open() resolves paths against this script's directory, and only in the init context.
const file = JSON.parse(open(NAME.endsWith('.json') ? NAME : `../scenarios/${NAME}.json`));
if (SHORT && !file.short) {
  throw new Error(`scenario ${file.name} has no short variant`);
}
const sc = applyDefaults(SHORT ? Object.assign({}, file, file.short) : Object.assign({}, file));

// The same defaults as the Go runner (loadtest/scenario).
function applyDefaults(s) {
  s.time_unit = s.time_unit || '1s';
  s.max_vus = s.max_vus || s.pre_allocated_vus;
  s.graceful_stop = s.graceful_stop || '30s';
  s.providers = s.providers.map((p) => ({ name: p.name, weight: p.weight || 1 }));
  const r = Object.assign({}, s.request || {});
  r.context = r.context || 'search';
  r.ttl_seconds = r.ttl_seconds || 30;
  r.resources = r.resources || 64;
  r.capacity = r.capacity || 4;
  r.failure_share = r.failure_share || 0;
  r.timeout = r.timeout || '60s';
  s.request = r;
  return s;
}

// The weighted round robin of the Go runner's scenario.Mix: iteration i uses mix[i % mix.length].
function buildMix(providers) {
  const total = providers.reduce((n, p) => n + p.weight, 0);
  const cur = providers.map(() => 0);
  const out = [];
  for (let k = 0; k < total; k++) {
    let best = 0;
    providers.forEach((p, i) => {
      cur[i] += p.weight;
      if (cur[i] > cur[best]) best = i;
    });
    cur[best] -= total;
    out.push(providers[best].name);
  }
  return out;
}
const MIX = buildMix(sc.providers);

// Thresholds: the scenario's, plus always-true ones that make k6 keep every per-provider
// submetric for handleSummary.
function thresholds() {
  const t = {};
  for (const [k, v] of Object.entries(sc.thresholds || {})) t[k] = v.slice();
  const add = (key, expr) => { (t[key] = t[key] || []).push(expr); };
  for (const p of sc.providers) {
    add(`http_req_duration{provider:${p.name}}`, 'max>=0');
    add(`http_req_failed{provider:${p.name}}`, 'rate>=0');
    add(`http_reqs{provider:${p.name}}`, 'count>=0');
    add(`fast_fail{provider:${p.name}}`, 'rate>=0');
    add(`fast_fail_within_10ms{provider:${p.name}}`, 'rate>=0');
    add(`fast_fail_within_100ms{provider:${p.name}}`, 'rate>=0');
  }
  return t;
}

export const options = {
  scenarios: {
    [sc.name]: {
      executor: 'constant-arrival-rate',
      rate: sc.rate,
      timeUnit: sc.time_unit,
      duration: sc.duration,
      preAllocatedVUs: sc.pre_allocated_vus,
      maxVUs: sc.max_vus,
      gracefulStop: sc.graceful_stop,
    },
  },
  thresholds: thresholds(),
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
};

const fastFail = new Rate('fast_fail');
const fastFail10 = new Rate('fast_fail_within_10ms');
const fastFail100 = new Rate('fast_fail_within_100ms');

const JSON_HEADERS = { 'Content-Type': 'application/json' };

// call POSTs body to the sidecar and records the check and the fast-fail metrics.
function call(name, provider, path, body) {
  const tags = { provider, name };
  const res = http.post(`${SIDECAR}${path}`, JSON.stringify(body), {
    headers: JSON_HEADERS, tags, timeout: sc.request.timeout,
  });
  const ok = res.status >= 200 && res.status < 400;
  check(res, { [`${name} answered 2xx`]: () => ok }, tags);
  if (!ok) {
    const d = res.timings.duration;
    fastFail.add(!!res.headers['X-Repool-Fast-Fail'], tags);
    fastFail10.add(d <= 10, tags);
    fastFail100.add(d <= 100, tags);
  }
  return { ok, res };
}

export function setup() {
  if (__ENV.REGISTER !== '0') {
    const resources = [];
    for (let i = 0; i < sc.request.resources; i++) {
      resources.push({ id: `res-${String(i).padStart(4, '0')}`, capacity: sc.request.capacity });
    }
    for (const p of sc.providers) {
      const res = http.post(`${SIDECAR}/v1/providers/${p.name}/resources`, JSON.stringify({ resources }),
        { headers: JSON_HEADERS, tags: { name: 'setup' } });
      if (res.status !== 200) {
        throw new Error(`registering resources on ${p.name}: ${res.status} ${res.body}`);
      }
    }
  }
  if (FAULTS) {
    const res = http.post(`${FAULTS}/start`, null, { tags: { name: 'setup' } });
    if (res.status !== 200) throw new Error(`starting the fault plan: ${res.status} ${res.body}`);
  }
  return {};
}

// held is this VU's lease per provider, kept for its next use of the provider (k6 gives every VU
// its own globals): { lease, at }, at in ms since the epoch when it was asked for.
const held = {};

// One iteration is one use of a resource of one provider, as a backend that goes on using resources
// makes it: with the lease this VU went on with from its previous use of the provider (or, without
// one, a lease from acquire), it releases the lease with the use's outcome and leases the next
// resource in the same call (release with next), which it keeps for its next use. A steady iteration
// is one round trip. A lease held for half its TTL or longer is left to expire rather than used (the
// VU may have been idle); a failed acquire ends the iteration. The Go runner (loadtest/runner) does
// the same.
export default function () {
  const i = exec.scenario.iterationInTest;
  const p = MIX[i % MIX.length];
  const r = sc.request;
  const h = held[p];
  delete held[p];
  let lease;
  if (h && Date.now() - h.at < (r.ttl_seconds * 1000) / 2) {
    lease = h.lease;
  } else {
    const acq = call('acquire', p, `/v1/providers/${p}/acquire`, { context: r.context, ttl_seconds: r.ttl_seconds });
    if (!acq.ok) return;
    lease = acq.res.json('lease');
  }
  const outcome = Math.floor((i + 1) * r.failure_share) > Math.floor(i * r.failure_share) ? 'FAILURE' : 'SUCCESS';
  const at = Date.now();
  const rel = call('release', p, `/v1/providers/${p}/leases/${encodeURIComponent(lease.lease_id)}/release`, {
    fencing_token: lease.fencing_token, outcome,
    next: { context: r.context, ttl_seconds: r.ttl_seconds },
  });
  // A 2xx release happened whether or not a next lease came: next holds the lease, or why there is none.
  const next = rel.ok ? rel.res.json('next') : null;
  if (next && next.lease) held[p] = { lease: next.lease, at };
}

export function teardown() {
  if (FAULTS) http.post(`${FAULTS}/stop`, null, { tags: { name: 'setup' } });
}

// handleSummary prints k6's summary and writes the Go runner's JSON summary shape.
export function handleSummary(data) {
  const m = (key, stat) => {
    const metric = data.metrics[key];
    return metric && metric.values[stat] !== undefined ? metric.values[stat] : 0;
  };
  const providers = {};
  for (const p of sc.providers) {
    const k = (metric) => `${metric}{provider:${p.name}}`;
    providers[p.name] = {
      requests: m(k('http_reqs'), 'count'),
      errors: m(k('http_req_failed'), 'passes'),
      error_rate: m(k('http_req_failed'), 'rate'),
      avg_ms: m(k('http_req_duration'), 'avg'),
      p50_ms: m(k('http_req_duration'), 'med'),
      p90_ms: m(k('http_req_duration'), 'p(90)'),
      p95_ms: m(k('http_req_duration'), 'p(95)'),
      p99_ms: m(k('http_req_duration'), 'p(99)'),
      max_ms: m(k('http_req_duration'), 'max'),
      fast_fail_within_10ms: m(k('fast_fail_within_10ms'), 'rate'),
      fast_fail_within_100ms: m(k('fast_fail_within_100ms'), 'rate'),
      fast_fail_marked: m(k('fast_fail'), 'rate'),
    };
  }
  const summary = {
    mode: 'k6',
    scenario: sc.name,
    short: SHORT,
    iterations: m('iterations', 'count'),
    dropped_iterations: m('dropped_iterations', 'count'),
    max_vus: m('vus_max', 'max'),
    requests: m('http_reqs', 'count'),
    requests_per_s: m('http_reqs', 'rate'),
    latency: {
      avg_ms: m('http_req_duration', 'avg'), p50_ms: m('http_req_duration', 'med'),
      p90_ms: m('http_req_duration', 'p(90)'), p95_ms: m('http_req_duration', 'p(95)'),
      p99_ms: m('http_req_duration', 'p(99)'), max_ms: m('http_req_duration', 'max'),
    },
    providers,
  };
  return {
    stdout: textSummary(data, { indent: ' ', enableColors: true }),
    [__ENV.SUMMARY_JSON || `summary-${sc.name}.json`]: JSON.stringify(summary, null, 2),
  };
}
