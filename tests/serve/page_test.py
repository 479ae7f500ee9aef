#!/usr/bin/python3
"""page_test.py -- serve's chat page in headless Chromium, driven over its
DevTools protocol (Debian's python3-websocket): load the page, type a
message into it and press Send (real input events), wait for the streamed
answer and its tokens/s line, a second turn on top (the conversation grows),
the stop button, no script error on the page, a screenshot saved as a PNG,
and the API called from a page of another origin (CORS: its preflight, an
API key and an SDK's own header).
Usage: page_test.py URL SCREENSHOT.png ; prints "ok NAME" / "FAIL NAME: why" /
"skip NAME: why" (Chromium cannot run here), last line "N passed, N failed[, N skipped]"."""
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

URL, SHOT = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(name, ok, why=""):
    global passed, failed
    passed += bool(ok)
    failed += not ok
    print(("ok serve_page_%s" % name) if ok else ("FAIL serve_page_%s: %s" % (name, why)))
    sys.stdout.flush()


def skip(why):
    print("skip serve_page: %s" % why)
    print("0 passed, 0 failed, 1 skipped")
    sys.exit(0)


try:
    import websocket
except ImportError:
    print("FAIL serve_page: no python3-websocket (scripts/deps.sh test installs it)")
    print("0 passed, 1 failed")
    sys.exit(1)

chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if not chromium:
    skip("no chromium (scripts/deps.sh test installs it)")
profile = tempfile.mkdtemp(prefix="kiln-serve-chromium.")
errlog = open(os.path.join(profile, "stderr"), "w+")
# --no-sandbox: Chromium's sandbox cannot start as root (CI containers)
proc = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                         "--disable-extensions", "--remote-debugging-port=0", "--user-data-dir=" + profile,
                         "--window-size=1000,760", "about:blank"], stdout=subprocess.DEVNULL, stderr=errlog)
try:
    ws_url = None
    for _ in range(300):
        errlog.seek(0)
        m = re.search(r"DevTools listening on (ws://\S+)", errlog.read())
        if m:
            ws_url = m.group(1)
            break
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    if not ws_url:
        errlog.seek(0)
        skip("chromium did not start: %s" % errlog.read()[-300:].replace("\n", " | "))

    browser = websocket.create_connection(ws_url, timeout=30)
    ids = iter(range(1, 1 << 30))
    events = []

    def call(sock, method, session=None, **params):
        i = next(ids)
        msg = {"id": i, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        sock.send(json.dumps(msg))
        while True:
            r = json.loads(sock.recv())
            if r.get("id") == i:
                if "error" in r:
                    raise RuntimeError("%s: %s" % (method, r["error"]))
                return r.get("result", {})
            events.append(r)

    target = call(browser, "Target.createTarget", url="about:blank")["targetId"]
    sess = call(browser, "Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    cdp = lambda method, **p: call(browser, method, sess, **p)
    cdp("Runtime.enable")
    cdp("Page.enable")

    def js(expr):
        r = cdp("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def wait(expr, seconds=20):
        end = time.time() + seconds
        while time.time() < end:
            v = js(expr)
            if v:
                return v
            time.sleep(0.1)
        return None

    def click(selector):
        box = js("(() => { const r = document.querySelector(%r).getBoundingClientRect();"
                 " return [r.x + r.width / 2, r.y + r.height / 2]; })()" % selector)
        for kind in ("mousePressed", "mouseReleased"):
            cdp("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def say(text):
        click("#input")
        cdp("Input.insertText", text=text)
        click("#send")

    cdp("Page.navigate", url=URL)
    check("loads", wait("document.readyState === 'complete' && !!document.getElementById('send')"),
          "the page did not load")
    # the test model's context is 256, and its answers' bytes encode again as up to
    # five tokens each: short answers keep two turns well inside it
    # greedy: a random model at temperature 0.8 may end its answer at once
    # (an end-of-text first), which would read as an empty answer
    js("document.getElementById('max_tokens').value = 8; document.getElementById('temperature').value = 0")
    say("Hello, who are you?")
    done = "document.querySelectorAll('.assistant[data-state=done]').length"
    n = wait("%s >= 1 && %s" % (done, done))
    first = js("(() => { const d = document.querySelector('.assistant'); return [d.className,"
               " d.querySelector('span').textContent, d.querySelector('.stats').textContent]; })()")
    check("streams_answer", n and "error" not in first[0] and first[1] and re.search(r"\d+ tokens · [\d.]+ tokens/s",
                                                                                     first[2]), "answer %r" % first)
    say("And then?")
    n = wait("%s >= 2 && %s" % (done, done))
    turns = js("[document.querySelectorAll('.user').length, document.querySelectorAll('.assistant').length,"
               " document.querySelectorAll('.error').length, [...document.querySelectorAll('.error')]"
               ".map((e) => e.textContent)]")
    check("second_turn", n and turns[:3] == [2, 2, 0], "bubbles (user, assistant, error): %r" % turns)
    # Stop at once after Send (the test model answers faster than a click could
    # follow): the answer ends "stopped", not in an error, and no slot stays busy
    cdp("Input.insertText", text="Stop this one")
    js("document.getElementById('max_tokens').value = 100;"
       " document.getElementById('send').click(); document.getElementById('stop').click()")
    n = wait("%s >= 3 && %s" % (done, done))
    last = js("(() => { const d = [...document.querySelectorAll('.assistant')].pop();"
              " return [d.className, d.querySelector('.stats').textContent]; })()")
    idle = wait("fetch('/health').then((r) => r.json()).then((h) => h.slots_processing === 0)", 5)
    check("stop_button", n and "error" not in last[0] and "stopped" in last[1] and idle,
          "last answer %r, slots idle %r" % (last, idle))
    errors = [e for e in events if e.get("method") in ("Runtime.exceptionThrown",)]
    check("no_script_errors", not errors, "%r" % errors[:2])
    png = base64.b64decode(cdp("Page.captureScreenshot", format="png")["data"])
    with open(SHOT, "wb") as f:
        f.write(png)
    check("screenshot", png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000, "%d bytes" % len(png))
    # another origin (localhost, not 127.0.0.1) calls the API as a browser client
    # does: Authorization and an SDK's header make the browser ask first (a preflight)
    other = URL.replace("127.0.0.1", "localhost")
    cdp("Page.navigate", url=other + "/health")
    wait("document.readyState === 'complete' && location.origin === %r" % other.rstrip("/"))
    got = js("fetch(%r, {method: 'POST', headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer x',"
             " 'X-Stainless-Os': 'Linux'}, body: JSON.stringify({messages: [{role: 'user', content: 'Hi'}],"
             " max_tokens: 2})}).then((r) => r.json()).then((a) => a.object, (e) => 'refused: ' + e)"
             % (URL.rstrip("/") + "/v1/chat/completions"))
    check("cors_from_another_origin", got == "chat.completion", "the fetch gave %r" % got)
    browser.close()
finally:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(profile, ignore_errors=True)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
