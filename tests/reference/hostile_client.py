#!/usr/bin/env python3
"""A hostile and a real client of mt-generate --server at once, written independently of mt.

Opens --idle sockets that each send half a request header and then nothing (slowloris),
keeps them open, and while they are open sends --requests real PUT /api requests from as
many threads at once. Each real answer must be 200 with the expected "text" (--expect: a
file of JSON lines {"prompt": ..., "text": ...}, the command line's greedy output), and all
of them must arrive within --within seconds. Prints one summary line; exit 0 when every
request was answered correctly in time, 1 otherwise.

--check-closed S instead: after opening the idle sockets, wait S seconds and report how
many the server has closed (the per-connection timeout), exit 0 when all of them.
"""
import argparse
import json
import resource
import socket
import sys
import threading
import time
import urllib.request

HALF = b"PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        print(f"skip: the hard open-file limit {hard} is below {need}")
        sys.exit(77)
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else need, hard))


def open_idle(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(HALF)
        socks.append(s)
    return socks


def closed_count(socks):
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(4096) == b"":
                n += 1
        except BlockingIOError:
            pass
        except (ConnectionResetError, OSError):
            n += 1
    return n


def real(port, body, timeout):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api", data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--expect", help="JSON lines {prompt, text}")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--within", type=float, default=10.0)
    ap.add_argument("--check-closed", type=float)
    a = ap.parse_args()

    raise_nofile(a.idle + a.requests + 64)
    t0 = time.monotonic()
    socks = open_idle(a.port, a.idle)
    print(f"{len(socks)} idle connections open in {time.monotonic() - t0:.2f} s", flush=True)

    if a.check_closed is not None:
        time.sleep(a.check_closed)
        n = closed_count(socks)
        print(f"{n} of {len(socks)} idle connections closed by the server after {a.check_closed:g} s")
        return 0 if n == len(socks) else 1

    cases = [json.loads(l) for l in open(a.expect)]
    results = [None] * a.requests

    def one(i):
        c = cases[i % len(cases)]
        t = time.monotonic()
        try:
            status, d = real(a.port, {"prompts": [c["prompt"]], "tokens_to_generate": a.tokens, "temperature": 0},
                             timeout=a.within + 30)
            ok = status == 200 and d.get("text") == [c["text"]]
            results[i] = (ok, time.monotonic() - t, "" if ok else f"{status} {d.get('text')!r} != {[c['text']]!r}")
        except Exception as e:  # a refused, reset or timed-out request is a failure, not a crash
            results[i] = (False, time.monotonic() - t, repr(e))

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(a.requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    still = len(socks) - closed_count(socks)
    good = sum(1 for r in results if r[0])
    slowest = max(r[1] for r in results)
    print(f"{good}/{a.requests} real requests answered correctly in {wall:.2f} s (slowest {slowest:.2f} s) "
          f"with {still} of {len(socks)} idle connections still open")
    for i, r in enumerate(results):
        if not r[0]:
            print(f"request {i}: {r[2]}")
    return 0 if good == a.requests and wall <= a.within else 1


if __name__ == "__main__":
    sys.exit(main())
