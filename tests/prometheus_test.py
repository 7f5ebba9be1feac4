#!/usr/bin/env python3
"""kvpoold's metrics endpoint scraped by a real Prometheus server (Debian's `prometheus`).

A RESP client (redis-py) stores and reads blocks while Prometheus scrapes kvpoold every
second; the test then asks Prometheus's HTTP query API for the series and checks them
against the client's own counts, reads a latency quantile from the histogram, and runs
every query of the Grafana dashboard (docs/grafana-kvpool.json).

usage: prometheus_test.py BUILD_DIR
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvpoold_process import Kvpoold, free_port  # noqa: E402

BUILD = None
PROMETHEUS = shutil.which("prometheus")


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


class Prometheus:
    def __init__(self, target):
        self.dir = tempfile.mkdtemp(prefix="kvpool-prom-")
        self.port = free_port()
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                    "scrape_configs:\n  - job_name: kvpool\n    static_configs:\n"
                    "      - targets: ['%s']\n" % target)
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + cfg, "--storage.tsdb.path=" + self.dir + "/data",
             "--web.listen-address=127.0.0.1:%d" % self.port],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 30
        while True:
            try:
                if get(self.url("/-/ready"))[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("prometheus did not start: " + open(self.log.name).read())
            time.sleep(0.2)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def query(self, expr):
        _, _, body = get(self.url("/api/v1/query?query=" + urllib.parse.quote(expr)))
        data = json.loads(body)
        assert data["status"] == "success", data
        return [(r["metric"], float(r["value"][1])) for r in data["data"]["result"]]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipIf(PROMETHEUS is None, "prometheus not installed (scripts/deps.sh installs it)")
class ScrapedByPrometheus(unittest.TestCase):
    def test_series_match_the_clients_counts(self):
        import redis
        d = Kvpoold(os.path.join(BUILD, "kvpoold"), extra=["--metrics-listen", "127.0.0.1:0"])
        prom = None
        try:
            with open(os.path.join(d.dir, "ready.json")) as f:
                metrics_port = json.load(f)["metrics_port"]
            status, ctype, text = get("http://127.0.0.1:%d/metrics" % metrics_port)
            self.assertEqual(status, 200)
            self.assertIn("version=0.0.4", ctype)
            self.assertIn("# TYPE kvpool_puts_total counter", text)
            prom = Prometheus("127.0.0.1:%d" % metrics_port)
            r = redis.Redis(host="127.0.0.1", port=d.resp_port)
            puts, hits, misses = 300, 0, 0
            value = b"v" * 4096
            for i in range(puts):
                r.set("k%d" % i, value)
            for i in range(400):  # 100 of them were never put
                got = r.get("k%d" % i)
                if got is None:
                    misses += 1
                else:
                    self.assertEqual(got, value)
                    hits += 1
            self.assertEqual((hits, misses), (300, 100))
            # Prometheus scrapes every second: wait for a scrape after the last request.
            deadline = time.time() + 30
            while time.time() < deadline:
                got = prom.query("kvpool_puts_total")
                if got and got[0][1] == puts:
                    break
                time.sleep(0.5)
            self.assertEqual(prom.query("kvpool_puts_total")[0][1], puts)
            self.assertEqual(prom.query('kvpool_hits_total{tier="dram"}')[0][1], hits)
            self.assertEqual(prom.query("kvpool_misses_total")[0][1], misses)
            self.assertEqual(prom.query('up{job="kvpool"}')[0][1], 1)
            self.assertGreaterEqual(prom.query("kvpool_requests_total")[0][1], puts + 400)
            self.assertGreaterEqual(prom.query('kvpool_network_bytes_total{direction="in"}')[0][1],
                                    puts * 4096)
            self.assertEqual(prom.query('kvpool_blocks{tier="dram"}')[0][1], puts)
            # An open node counts every client under the tenant "default".
            self.assertEqual(prom.query('kvpool_tenant_gets_total{tenant="default"}')[0][1], 400)
            self.assertEqual(prom.query('kvpool_tenant_hits_total{tenant="default"}')[0][1], hits)
            self.assertEqual(prom.query('kvpool_tenant_puts_total{tenant="default"}')[0][1], puts)
            # Puts over the network are timed too (reserve + commit inside the store).
            self.assertEqual(prom.query("kvpool_put_latency_seconds_count")[0][1], puts)
            # The histogram aggregates like any Prometheus histogram.
            p50 = prom.query('histogram_quantile(0.5, kvpool_get_latency_seconds_bucket{tier="dram"})')
            self.assertTrue(0 < p50[0][1] < 0.01, p50)
            count = prom.query('kvpool_get_latency_seconds_count{tier="dram"}')[0][1]
            self.assertEqual(count, hits)
            # Every query of the Grafana dashboard in docs/ is valid PromQL over these
            # series, and the ones over counters return data.
            dash = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs",
                                "grafana-kvpool.json")
            with open(dash) as f:
                panels = json.load(f)["panels"]
            for i in range(100):  # traffic between scrapes, so rate() has something to see
                r.get("k%d" % i)
            deadline = time.time() + 20
            while not prom.query("rate(kvpool_gets_total[1m]) > 0") and time.time() < deadline:
                time.sleep(0.5)
            self.assertTrue(prom.query("rate(kvpool_gets_total[1m]) > 0"))
            for panel in panels:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$instance", ".*")
                    result = prom.query(expr)  # asserts status success
                    if ("kvpool_gets_total" in expr or "kvpool_used_bytes" in expr or
                            "kvpool_tenant_requests_total" in expr):
                        self.assertTrue(result, (panel["title"], expr))
        finally:
            if prom:
                prom.stop()
            self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    BUILD = sys.argv.pop(1)
    unittest.main(verbosity=2)
