// A backend's loop against the repool sidecar, with Node's built-in fetch (Node 18 or later):
//
//   SIDECAR=http://127.0.0.1:7070 PROVIDER=default node docs/clients/backend.mjs
//
// It follows the pool's event stream (server-sent events) while it registers three resources,
// acquires a lease once, then releases with the outcome, the use's measured latency (latency_ms) and
// "next" once per use (one round trip per use), then keeps a session's work on one resource with an
// affinity key, which moves to another resource (lease "rebound") after a failure. A transient
// answer (the sidecar's retry_after_ms says when to come back) is retried, a release's too.
const base = `${process.env.SIDECAR ?? 'http://127.0.0.1:7070'}/v1/providers/${process.env.PROVIDER ?? 'default'}`;
const retry = new Set(['no_resource_available', 'rate_limited', 'circuit_open', 'unavailable', 'deadline_exceeded']);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let calls = 0; // round trips to the sidecar

async function call(method, path, body) {
  calls++;
  const resp = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const ans = await resp.json();
  if (!resp.ok) {
    const err = new Error(`${resp.status} ${ans.error.code}: ${ans.error.message}`);
    Object.assign(err, ans.error);
    throw err;
  }
  return ans;
}

// affinity, when given, is a key that gets the same resource while that resource serves well.
async function acquire(context, affinity) {
  for (;;) {
    try {
      return (await call('POST', '/acquire', { context, ttl_seconds: 30, ...(affinity ? { affinity } : {}) })).lease;
    } catch (e) {
      if (!retry.has(e.code)) throw e;
      await sleep(e.retry_after_ms || 1000);
    }
  }
}

// release releases a lease, retrying a transient answer: safe, since the lease id and fencing token
// name this one lease. A retry that finds the lease gone (not_found) means an earlier try released it
// and its answer was lost: released, with no next lease (one granted then expires with its TTL).
// latencyMs, how long the use took, steers a tenant whose objective is success_per_time.
async function release(lease, outcome, next, latencyMs) {
  const body = { fencing_token: lease.fencing_token, outcome, ...(latencyMs ? { latency_ms: latencyMs } : {}), ...(next ? { next } : {}) };
  for (let retried = false; ; retried = true) {
    try {
      return await call('POST', `/leases/${lease.lease_id}/release`, body);
    } catch (e) {
      if (retried && e.code === 'not_found') return {};
      if (!retry.has(e.code)) throw e;
      await sleep(e.retry_after_ms || 1000);
    }
  }
}

// events reads the event stream until `want` events of the kinds arrived (or signal aborts),
// resuming after the last id it saw if the stream breaks.
async function events(kinds, want, signal) {
  const seen = [];
  let last = '';
  while (seen.length < want && !signal.aborted) {
    const resp = await fetch(`${base}/events?kinds=${kinds}`, { headers: last ? { 'Last-Event-ID': last } : {}, signal });
    if (!resp.ok) throw new Error(`events: ${resp.status} ${await resp.text()}`);
    const decoder = new TextDecoder();
    let buf = '';
    for await (const chunk of resp.body) {
      buf += decoder.decode(chunk, { stream: true });
      let end;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const ev = {};
        for (const line of frame.split('\n')) {
          const i = line.indexOf(':');
          if (i > 0) ev[line.slice(0, i)] = line.slice(i + 1).trim();
        }
        if (ev.id) last = ev.id;
        if (ev.data) seen.push(JSON.parse(ev.data));
      }
      if (seen.length >= want) break;
    }
  }
  return seen;
}

// use stands for the real work done with lease.resource_id: it returns the outcome and how long the
// work took, in whole milliseconds (at least 1: 0 means not measured).
async function use(lease, i) {
  const started = performance.now();
  await sleep(2);
  return { ok: i % 5 !== 0, took: Math.max(1, Math.round(performance.now() - started)) };
}

// session is work that must stay on one resource (a login, a cart): every lease under the affinity
// key is the same resource while it succeeds; after a FAILURE the key is bound to another one and
// the lease says "rebound" (log in again there). It returns how many uses stayed on the first
// resource and whether the failure moved the key.
async function session(key, uses = 4) {
  const next = { context: 'checkout', ttl_seconds: 30, affinity: key };
  let lease = await acquire('checkout', key);
  const first = lease.resource_id;
  let same = 0;
  for (let i = 0; i < uses; i++) {
    lease = (await release(lease, 'SUCCESS', next)).next.lease;
    if (lease.resource_id === first) same++;
  }
  const moved = (await release(lease, 'FAILURE', next)).next.lease;
  await release(moved, 'SUCCESS');
  return { same, moved: moved.rebound && moved.resource_id !== first };
}

const stop = new AbortController();
const watching = events('registered', 3, stop.signal);
await sleep(200); // let the subscription open before the resources are registered
await call('POST', '/resources', { resources: [0, 1, 2].map((i) => ({ id: `js-${i}`, capacity: 2 })) });
let lease = await acquire('search');
let uses = 0;
let failedNext = 0; let sameAfterFailure = 0; // a FAILURE's next lease: another resource, by default
const start = calls;
for (let i = 0; i < 50; i++) {
  const { ok, took } = await use(lease, i);
  const ans = await release(lease, ok ? 'SUCCESS' : 'FAILURE', { context: 'search', ttl_seconds: 30 }, took);
  uses++;
  if (ans.next?.lease) {
    if (!ok) {
      failedNext++;
      if (ans.next.lease.resource_id === lease.resource_id) sameAfterFailure++;
    }
    lease = ans.next.lease;
  } else { // released, but no next lease: wait as told, then acquire
    await sleep(ans.next?.error?.retry_after_ms || 100);
    lease = await acquire('search');
  }
}
const trips = calls - start;
await release(lease, 'SUCCESS', undefined, (await use(lease, 1)).took);
const last = (await call('GET', `/resources/${lease.resource_id}`)).resource;
const latency = last.contexts.find((c) => c.context === 'search')?.latency_ms ?? 0;
const timer = setTimeout(() => stop.abort(), 10000);
const seen = await watching;
clearTimeout(timer);
const pinned = await session('cart-42');
const res = (await call('GET', '/resources/js-0')).resource;
console.log(`node: ${uses} uses in ${trips} round trips; after ${failedNext} failures the next lease was the same resource ${sameAfterFailure} times; ${seen.filter((e) => e.resource_id.startsWith('js-')).length} registered events; js-0 quarantine ${res.quarantine}; ${last.id} search latency ${Math.round(latency)} ms; affinity: the same resource ${pinned.same} of 4 times, ${pinned.moved ? 'rebound' : 'NOT rebound'} after a failure`);
