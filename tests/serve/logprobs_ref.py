#!/usr/bin/python3
"""logprobs_ref.py -- serve's logprobs against the model's own logits: a
greedy completion of a prompt of token ids with logprobs 5, and
`generate --ids ... --dump-logits` on the same model for the prompt and
for the prompt with the first answer token: each token's logprob and the
five likeliest must be the log-softmax of those logits (within 1e-3: the
server's batched pass and generate's prompt pass sum in other orders).
Usage: logprobs_ref.py URL GENERATE MODEL TMPDIR; prints "ok NAME" / "FAIL
NAME: why", last line "N passed, N failed"."""
import json
import math
import struct
import subprocess
import sys
import urllib.request

URL, GEN, MODEL, TMP = sys.argv[1:5]
PROMPT = [1, 300, 301, 302, 303]


def last_row(ids):
    """the log-softmax of the logits after ids"""
    out = TMP + "/logits.bin"
    subprocess.run([GEN, "--model", MODEL, "--threads", "1", "--ids", ",".join(map(str, ids)), "--dump-logits", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = open(out, "rb").read()
    vocab = len(data) // 4 // len(ids)
    z = struct.unpack("<%df" % vocab, data[-4 * vocab:])
    top = max(z)
    lse = top + math.log(sum(math.exp(v - top) for v in z))
    return [v - lse for v in z]


body = json.dumps({"prompt": PROMPT, "max_tokens": 2, "temperature": 0, "logprobs": 5}).encode()
req = urllib.request.Request(URL + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
lp = json.loads(urllib.request.urlopen(req, timeout=30).read())["choices"][0]["logprobs"]
ids, worst, ok = list(PROMPT), 0.0, len(lp["token_logprobs"]) == 2
for i in range(2 if ok else 0):
    want = last_row(ids)
    best = sorted(range(len(want)), key=lambda v: -want[v])[:5]
    got_top = lp["top_logprobs"][i].values()  # by text: tokens that read the same (bytes as U+FFFD) are one entry
    errs = [abs(lp["token_logprobs"][i] - want[best[0]])] + [min(abs(g - want[b]) for b in best) for g in got_top]
    worst = max([worst] + errs)
    ok = ok and 1 <= len(got_top) <= 5 and max(errs) < 1e-3
    ids.append(best[0])
name = "serve_logprobs_equal_the_model_logits"
print(("ok %s (worst %.1e)" % (name, worst)) if ok else "FAIL %s: worst %.3g, %r" % (name, worst, lp))
print("%d passed, %d failed" % (ok, not ok))
sys.exit(0 if ok else 1)
