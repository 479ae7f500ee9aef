#!/usr/bin/python3
"""load.py -- N concurrent streaming chat clients against serve for a while,
from threads of this second process: each loops over requests, reads the
whole stream and checks it ends with data: [DONE] and a usage count (a
stream still running at the end is closed, not counted). Prints requests,
failures, the tokens generated per second over the last S seconds, after
the warm-up (the server's /health counter: every slot's tokens, finished
requests or not), and (with --pid) the server's resident memory after the
warm-up and at the end.
Usage: load.py URL [--clients N] [--seconds S] [--warmup S] [--pid PID]
               [--max-tokens N] [--rss-slack MIB]
Exit status 1 on a failed request or, with --pid, memory grown by more than
--rss-slack MiB (default 6) after the warm-up."""
import argparse
import http.client
import json
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("--clients", type=int, default=16)
ap.add_argument("--seconds", type=float, default=12)
ap.add_argument("--warmup", type=float, default=0)
ap.add_argument("--pid", type=int)
ap.add_argument("--max-tokens", type=int, default=32)
ap.add_argument("--rss-slack", type=float, default=6)
a = ap.parse_args()
host, port = a.url.split("//")[1].rstrip("/").split(":")


def rss_mib(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Totals:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.failures = self.tokens = 0
        self.why = []


def client(i, until, tot):
    n = 0
    while time.time() < until:
        body = {"messages": [{"role": "user", "content": "Tell me a story, number %d." % i}], "stream": True,
                "max_tokens": a.max_tokens, "seed": i * 1000 + n, "temperature": 0.8}
        n += 1
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            raw = b""
            while not raw.endswith(b"data: [DONE]\n\n") and time.time() < until:
                piece = r.read1(65536)
                if not piece:
                    break
                raw += piece
            c.close()
            raw = raw.decode()
            if not raw.endswith("data: [DONE]\n\n") and time.time() >= until and r.status == 200:
                break  # the run is over: this stream is cut, neither a failure nor a request
            usage = None
            for ev in raw.split("\n\n"):
                if ev.startswith("data: {"):
                    u = json.loads(ev[6:]).get("usage")
                    usage = u or usage
            ok = r.status == 200 and raw.endswith("data: [DONE]\n\n") and usage is not None
            why = "status %d, ends %r" % (r.status, raw[-60:])
        except (OSError, ValueError, http.client.HTTPException) as e:
            ok, why, usage = False, repr(e), None
        with tot.lock:
            tot.requests += 1
            if ok:
                tot.tokens += usage["completion_tokens"]
            else:
                tot.failures += 1
                tot.why.append(why)


def generated():
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request("GET", "/health")
    n = json.loads(c.getresponse().read())["tokens_generated"]
    c.close()
    return n


def run(warmup, seconds):
    """the clients for warmup + seconds; the figures of the last seconds"""
    tot = Totals()
    until = time.time() + warmup + seconds
    th = [threading.Thread(target=client, args=(i, until, tot)) for i in range(a.clients)]
    for t in th:
        t.start()
    time.sleep(warmup)
    t0, n0 = time.time(), generated()
    tot.rss_before = rss_mib(a.pid) if a.pid else 0
    for t in th:
        t.join()
    tot.generated = generated() - n0
    return tot, time.time() - t0


tot, secs = run(a.warmup, a.seconds)
after = rss_mib(a.pid) if a.pid else 0
print("serve_load: %d clients, %.1f s after %.1f s of warm-up: %d requests, %d failed, %d tokens in their usage; "
      "%d tokens generated, %.1f tokens/s" % (a.clients, secs, a.warmup, tot.requests, tot.failures, tot.tokens,
                                              tot.generated, tot.generated / secs))
ok = tot.failures == 0 and tot.requests > 0
if a.pid:
    grown = after - tot.rss_before
    print("serve_load: the server's RSS %.1f MiB after the warm-up, %.1f MiB after the load (%+.1f MiB)" %
          (tot.rss_before, after, grown))
    ok = ok and grown <= a.rss_slack
print("%s serve_load%s" % ("ok" if ok else "FAIL", "" if ok else ": %s" % tot.why[:3]))
print("%d passed, %d failed" % (ok, not ok))
sys.exit(0 if ok else 1)
