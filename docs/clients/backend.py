#!/usr/bin/env python3
"""A backend's loop against the repool sidecar, with Python's standard library only.

    SIDECAR=http://127.0.0.1:7070 PROVIDER=default python3 docs/clients/backend.py

It registers three resources, acquires a lease once, then uses a resource and releases its lease
with its outcome, the use's measured latency (latency_ms) and "next" in one call per use (one round
trip per use), and reads a resource's statistics. Then it keeps a session's work on one resource with
an affinity key, which moves to another resource (lease "rebound") after a failure. A
transient answer (the sidecar's retry_after_ms says when to come back) is retried, a release's too.
"""
import json
import os
import time
import urllib.error
import urllib.request

BASE = os.environ.get("SIDECAR", "http://127.0.0.1:7070") + "/v1/providers/" + os.environ.get("PROVIDER", "default")
# Answers worth waiting for: the sidecar says how long (retry_after_ms).
RETRY = {"no_resource_available", "rate_limited", "circuit_open", "unavailable", "deadline_exceeded"}
calls = 0  # round trips to the sidecar


class APIError(Exception):
    def __init__(self, status, body):
        err = body.get("error", {})
        super().__init__(f"{status} {err.get('code')}: {err.get('message')}")
        self.code = err.get("code")
        self.retry_after_ms = err.get("retry_after_ms", 0)


def call(method, path, body=None):
    global calls
    calls += 1
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data else {}
    req = urllib.request.Request(BASE + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        raise APIError(e.code, json.load(e)) from None


def acquire(context, affinity=None):
    body = {"context": context, "ttl_seconds": 30}
    if affinity:
        body["affinity"] = affinity  # the same key gets the same resource while it serves well
    while True:
        try:
            return call("POST", "/acquire", body)["lease"]
        except APIError as e:
            if e.code not in RETRY:
                raise
            time.sleep(e.retry_after_ms / 1000 or 1)


def release(lease, outcome, next_=None, latency_ms=0):
    """Releases a lease, retrying a transient answer: safe, since the lease id and fencing token name
    this one lease. A retry that finds the lease gone (not_found) means an earlier try released it and
    its answer was lost: released, with no next lease (one granted then expires with its TTL)."""
    body = {"fencing_token": lease["fencing_token"], "outcome": outcome}
    if latency_ms:
        body["latency_ms"] = latency_ms  # how long the use took: steers a success_per_time tenant
    if next_:
        body["next"] = next_
    retried = False
    while True:
        try:
            return call("POST", f"/leases/{lease['lease_id']}/release", body)
        except APIError as e:
            if retried and e.code == "not_found":
                return {}
            if e.code not in RETRY:
                raise
            retried = True
            time.sleep(e.retry_after_ms / 1000 or 1)


def use(lease, i):
    """Stands for the real work done with lease["resource_id"]: returns its outcome and how long it
    took, in whole milliseconds (at least 1: 0 means not measured)."""
    started = time.monotonic()
    time.sleep(0.002)
    ok = i % 5 != 0
    return ok, max(1, round((time.monotonic() - started) * 1000))


def session(key, uses=4):
    """Work that must stay on one resource (a login, a cart): every lease under the affinity key is
    the same resource while it succeeds; after a FAILURE the key is bound to another one and the
    lease says "rebound" (log in again there). Returns how many of the uses stayed on the first
    resource and whether the failure moved the key."""
    nxt = {"context": "checkout", "ttl_seconds": 30, "affinity": key}
    lease = acquire("checkout", key)
    first, same = lease["resource_id"], 0
    for _ in range(uses):
        lease = release(lease, "SUCCESS", nxt)["next"]["lease"]
        same += lease["resource_id"] == first
    moved = release(lease, "FAILURE", nxt)["next"]["lease"]
    release(moved, "SUCCESS")
    return same, moved["rebound"] and moved["resource_id"] != first


def main():
    call("POST", "/resources", {"resources": [{"id": f"py-{i}", "capacity": 2} for i in range(3)]})
    lease, uses = acquire("search"), 0
    failed_next = same_after_failure = 0  # a FAILURE's next lease: another resource, by default
    start = calls
    for i in range(50):
        ok, took = use(lease, i)
        ans = release(lease, "SUCCESS" if ok else "FAILURE", {"context": "search", "ttl_seconds": 30}, took)
        uses += 1
        nxt = ans.get("next", {})
        if "lease" in nxt:
            if not ok:
                failed_next += 1
                same_after_failure += nxt["lease"]["resource_id"] == lease["resource_id"]
            lease = nxt["lease"]
        else:  # released, but no next lease: wait as told, then acquire
            time.sleep(nxt.get("error", {}).get("retry_after_ms", 0) / 1000 or 0.1)
            lease = acquire("search")
    trips = calls - start
    _, took = use(lease, 1)
    release(lease, "SUCCESS", latency_ms=took)
    last = call("GET", f"/resources/{lease['resource_id']}")["resource"]
    latency = next((c["latency_ms"] for c in last["contexts"] if c["context"] == "search"), 0)
    same, moved = session("cart-42")
    res = call("GET", "/resources/py-0")["resource"]
    page = call("GET", "/resources?page_size=2")
    search = next((c for c in res["contexts"] if c["context"] == "search"), None)
    rate = None if search is None else round(search["success_rate"], 2)
    recent = "" if search is None else f" (recent {search['recent_successes']} of {search['recent_successes'] + search['recent_failures']})"
    print(f"python: {uses} uses in {trips} round trips; after {failed_next} failures the next lease was "
          f"the same resource {same_after_failure} times; py-0 quarantine {res['quarantine']}, "
          f"{res['state']}, search success rate {rate}{recent}; first page {len(page['resources'])} resources; "
          f"{last['id']} search latency {round(latency)} ms; affinity: the same resource {same} of 4 times, "
          f"{'rebound' if moved else 'NOT rebound'} after a failure")


if __name__ == "__main__":
    main()
