#!/usr/bin/env python3
"""kvpoold's HTTP port seen as an operator sees it, and its reload on SIGHUP.

Two tenants drive a real kvpoold: "a" over RESP (redis-py, AUTH), "b" over the native
protocol (the kvpool module), each counting its own gets, hits and puts. Then:
- /api/stats reports each tenant's counts exactly (and /metrics the same per-tenant series);
- headless Chromium (Debian's `chromium`) renders the live page twice under load: the
  figures are there and moving; a screenshot taken after several seconds of real polling
  shows the charts drawn (pixels of the series' colours, checked with PIL);
- SIGHUP with an edited config: a new tenant is let in, a removed one is refused (its open
  connection keeps working), the log level changes (debug lines appear), a setting that
  takes a restart is named; a broken file changes nothing.

usage: live_page_test.py BUILD_DIR [SCREENSHOT_OUT.png]
"""
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
SHOT_OUT = sys.argv.pop(1) if len(sys.argv) > 1 else None
sys.path.insert(0, os.path.join(BUILD, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvpool  # noqa: E402
from kvpoold_process import Kvpoold  # noqa: E402

CHROMIUM = shutil.which("chromium")

CONFIG = """
[server]
resp_namespace = "resp"
{extra}
[[tenant]]
name = "a"
token = "alpha-secret"
namespaces = ["a/*", "resp"]
{tenants}
"""
TENANT_B = '[[tenant]]\nname = "b"\ntoken = "beta-secret"\nnamespaces = ["b/*"]\n'
TENANT_C = '[[tenant]]\nname = "c"\ntoken = "gamma-secret"\nnamespaces = ["c/*"]\n'


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


class Load:
    """Tenant a over RESP and tenant b over the native protocol, until stopped; each keeps
    its own counts of what it asked and got."""

    def __init__(self, d):
        import redis
        self.stop = threading.Event()
        self.counts = {"a": dict(gets=0, hits=0, puts=0), "b": dict(gets=0, hits=0, puts=0)}
        self.errors = []
        self.r = redis.Redis(host="127.0.0.1", port=d.resp_port, password="alpha-secret")
        self.c = kvpool.Client(d.address, namespace="b/model", token="beta-secret")
        self.threads = [threading.Thread(target=self._resp), threading.Thread(target=self._native)]
        for t in self.threads:
            t.start()

    def _resp(self):
        try:
            n = self.counts["a"]
            i = 0
            while not self.stop.is_set():
                self.r.set("k%d" % (i % 300), b"x" * 2048)
                n["puts"] += 1
                got = self.r.get("k%d" % ((i * 7) % 400))  # some never set: misses
                n["gets"] += 1
                n["hits"] += got is not None
                i += 1
                time.sleep(0.002)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(e))

    def _native(self):
        import numpy as np
        try:
            n = self.counts["b"]
            keys = kvpool.chain_keys("b", list(range(16 * 64)), 16)
            value = np.full(16384, 7, np.uint8)
            i = 0
            while not self.stop.is_set():
                batch = keys[(i * 4) % 48:(i * 4) % 48 + 4]
                status = self.c.batch_put(batch, [value] * 4)
                n["puts"] += status.count("OK")
                outs = [np.zeros(16384, np.uint8) for _ in range(8)]
                sizes = self.c.batch_get(keys[(i * 3) % 56:(i * 3) % 56 + 8], outs)
                n["gets"] += len(sizes)
                n["hits"] += sum(1 for s in sizes if s >= 0)
                i += 1
                time.sleep(0.003)
        except Exception as e:  # noqa: BLE001
            self.errors.append(repr(e))

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


def chromium(*args, timeout=90):
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout)
    return out.stdout.decode(errors="replace")


def figures(dom):
    """id -> text of the page's elements that hold a single figure."""
    return dict(re.findall(r'<div class="v" id="([a-z0-9-]+)">([^<]*)</div>', dom))


class Holder(http.server.BaseHTTPRequestHandler):
    """Serves a page that frames the live page and holds its own load event for HOLD_S
    seconds (an image that answers late), so a headless screenshot is taken after the
    live page has polled kvpoold in real time for that long."""
    HOLD_S = 6
    TARGET = ""

    def do_GET(self):
        if self.path.startswith("/slow"):
            time.sleep(self.HOLD_S)
            self.send_response(200)
            self.send_header("Content-Type", "image/gif")
            body = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c"
                                 "00000000010001000002024401003b")
        else:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            body = ('<html><body style="margin:0"><iframe src="%s" style="border:0;width:1400px;'
                    'height:1100px"></iframe><img src="/slow" width="1" height="1"></body></html>'
                    % self.TARGET).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def colour_pixels(png, rgb, tolerance=40):
    from PIL import Image
    img = Image.open(png).convert("RGB")
    n = 0
    for p in img.getdata():
        if all(abs(p[i] - rgb[i]) <= tolerance for i in range(3)):
            n += 1
    return img.size, n


@unittest.skipIf(CHROMIUM is None, "chromium not installed (scripts/deps.sh installs it)")
class LivePage(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvpool-live-")
        self.config = os.path.join(self.tmp, "kvpoold.toml")
        self.write_config(tenants=TENANT_B)
        self.d = Kvpoold(os.path.join(BUILD, "kvpoold"),
                         extra=["--config", self.config, "--metrics-listen", "127.0.0.1:0"])
        with open(os.path.join(self.d.dir, "ready.json")) as f:
            self.base = "http://127.0.0.1:%d" % json.load(f)["metrics_port"]

    def tearDown(self):
        self.assertEqual(self.d.stop(), 0)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write_config(self, tenants="", extra=""):
        with open(self.config, "w") as f:
            f.write(CONFIG.format(tenants=tenants, extra=extra))

    def log(self):
        with open(self.d.log.name) as f:
            return f.read()

    def wait_log(self, text, timeout=10):
        deadline = time.time() + timeout
        while text not in self.log() and time.time() < deadline:
            time.sleep(0.05)
        self.assertIn(text, self.log())

    def test_page_under_load_and_per_tenant_counts(self):
        load = Load(self.d)
        try:
            time.sleep(1.0)
            first = figures(chromium("--virtual-time-budget=4000", "--dump-dom", self.base + "/"))
            time.sleep(1.5)
            second = figures(chromium("--virtual-time-budget=4000", "--dump-dom", self.base + "/"))
            for f in (first, second):
                for name in ("hit-ratio", "gets-per-s", "puts-per-s", "get-p99", "connections",
                             "uptime"):
                    self.assertIn(name, f)
                    self.assertNotIn(f[name], ("", "-"), (name, f))
            self.assertEqual(first["connections"], "2")
            self.assertNotEqual(first["uptime"], second["uptime"])
            self.assertTrue(re.fullmatch(r"[0-9.]+%", first["hit-ratio"]), first)
            self.assertGreater(float(second["gets-per-s"].rstrip("k")), 0)
            # A screenshot after 6 s of real polling under load: the charts are drawn.
            Holder.TARGET = self.base + "/"
            srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Holder)
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            shot = os.path.join(self.tmp, "live.png")
            try:
                chromium("--window-size=1400,1000", "--screenshot=" + shot,
                         "http://127.0.0.1:%d/" % srv.server_address[1])
            finally:
                srv.shutdown()
            size, blue = colour_pixels(shot, (0x22, 0x77, 0xcc))  # gets, DRAM p99
            _, red = colour_pixels(shot, (0xcc, 0x33, 0x33))  # puts, put p99
            _, green = colour_pixels(shot, (0x22, 0xaa, 0x77))  # DRAM hit ratio
            self.assertEqual(size, (1400, 1000))
            self.assertGreater(blue, 200, "no gets line drawn")
            self.assertGreater(red, 200, "no puts line drawn")
            self.assertGreater(green, 100, "no hit-ratio line drawn")
            if SHOT_OUT:
                shutil.copy(shot, SHOT_OUT)
        finally:
            load.finish()
        self.assertEqual(load.errors, [])
        stats = json.loads(get(self.base + "/api/stats"))
        tenants = {t["name"]: t for t in stats["tenants"]}
        for name in ("a", "b"):
            for field in ("gets", "hits", "puts"):
                self.assertEqual(tenants[name][field], load.counts[name][field], (name, field))
            self.assertGreater(tenants[name]["bytes_out"], 0)
        self.assertGreater(load.counts["a"]["hits"], 0)
        self.assertLess(load.counts["a"]["hits"], load.counts["a"]["gets"])
        self.assertGreaterEqual(tenants["a"]["requests"],
                                load.counts["a"]["gets"] + load.counts["a"]["puts"])
        self.assertEqual(tenants["a"]["connections"], 1)
        metrics = get(self.base + "/metrics")
        self.assertIn('kvpool_tenant_hits_total{tenant="b"} %d' % load.counts["b"]["hits"],
                      metrics)
        self.assertIn('kvpool_tenant_puts_total{tenant="a"} %d' % load.counts["a"]["puts"],
                      metrics)

    def test_sighup_reloads_tenants_and_log_level(self):
        import numpy as np
        b = kvpool.Client(self.d.address, namespace="b/x", token="beta-secret")
        key = kvpool.chain_keys("b", list(range(16)), 16)[0]
        self.assertEqual(b.batch_put([key], [np.ones(64, np.uint8)]), ["OK"])
        get(self.base + "/metrics")
        time.sleep(0.2)
        self.assertNotIn("http: GET /metrics", self.log())  # info level: no request lines
        # Tenant b removed, c added, debug logging, and a setting that takes a restart.
        self.write_config(tenants=TENANT_C,
                          extra='log_level = "debug"\n[store]\ndram_bytes = "256MiB"\n')
        self.d.proc.send_signal(signal.SIGHUP)
        self.wait_log("SIGHUP: reloaded")
        self.assertIn("2 tenants (a,c), log level debug", self.log())
        self.assertIn("applied only at restart: store.dram_bytes", self.log())
        c = kvpool.Client(self.d.address, namespace="c/x", token="gamma-secret")
        self.assertEqual(c.batch_put([key], [np.ones(64, np.uint8)]), ["OK"])
        gone = kvpool.Client(self.d.address, namespace="b/x", token="beta-secret")
        self.assertEqual(gone.batch_put([key], [np.ones(64, np.uint8)]), ["Refused"])
        # An authenticated connection keeps its access.
        self.assertEqual(b.batch_get([key], [np.zeros(64, np.uint8)]), [64])
        get(self.base + "/metrics")
        self.wait_log("http: GET /metrics HTTP/1.1 -> 200 OK")
        # A file that no longer parses changes nothing.
        with open(self.config, "a") as f:
            f.write("[store]\nno_such_setting = 1\n")
        self.d.proc.send_signal(signal.SIGHUP)
        self.wait_log("keeping the running settings")
        c2 = kvpool.Client(self.d.address, namespace="c/y", token="gamma-secret")
        self.assertEqual(c2.batch_put([key], [np.ones(64, np.uint8)]), ["OK"])
        self.assertNotIn("Sanitizer", self.log())


if __name__ == "__main__":
    unittest.main(verbosity=2)
