#!/usr/bin/env python3
"""`kvpool replay --report DIR` and `kvpool bench --report DIR`: the JSON they write holds
what the figures show, and the figures are real images (PNG opened with PIL, SVG parsed),
drawn by the plot script they leave beside the JSON; without a working Python the
command fails clearly and keeps the JSON.

usage: report_test.py BUILD_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
KVPOOL = os.path.join(BUILD, "kvpool")


def have_matplotlib():
    return subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def run(args, env=None, timeout=300):
    out = subprocess.run([KVPOOL, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=timeout, env=env)
    return out.returncode, out.stdout.decode()


@unittest.skipUnless(have_matplotlib(), "python3-matplotlib not installed (scripts/deps.sh)")
class Reports(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvpool-report-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check_figure(self, path_base):
        from PIL import Image
        with Image.open(path_base + ".png") as img:
            w, h = img.size
            self.assertGreater(w, 400)
            self.assertGreater(h, 300)
            colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
            self.assertGreater(len(colours), 20, "an empty figure")  # lines, text, fills
        root = ET.parse(path_base + ".svg").getroot()
        self.assertTrue(root.tag.endswith("svg"))

    def test_replay_report(self):
        trace = os.path.join(self.tmp, "chat.jsonl")
        rc, out = run(["gen-trace", "--family", "chat", "--seed", "3", "--requests", "400",
                       "--out", trace])
        self.assertEqual(rc, 0, out)
        rep = os.path.join(self.tmp, "rep")
        rc, out = run(["replay", "--trace", trace, "--flash", "none", "--quiet", "--report", rep,
                       "--report-capacities", "0.05,0.2"])
        self.assertEqual(rc, 0, out)
        with open(os.path.join(rep, "replay.json")) as f:
            data = json.load(f)
        pts = data["points"]
        self.assertEqual([p["capacity_fraction"] for p in pts], [0.05, 0.2])
        for p in pts:
            self.assertLessEqual(p["lru_prefix_hit_ratio"], p["offline_prefix_hit_ratio"] + 1e-9)
            self.assertLessEqual(p["prefix_hit_ratio"], p["offline_prefix_hit_ratio"] + 1e-9)
            self.assertEqual(p["wrong_data"], 0)
            self.assertEqual(len(p["get_dram_latency"]["le"]), len(data["latency_bounds_us"]))
        self.assertGreaterEqual(pts[1]["prefix_hit_ratio"], pts[0]["prefix_hit_ratio"])
        # The table printed and the JSON agree.
        self.assertIn("%.4f" % pts[0]["prefix_hit_ratio"], out)
        for name in ("hit_ratio", "latency_cdf"):
            self.assertIn("figure: %s.png" % os.path.join(rep, name), out)
            self.check_figure(os.path.join(rep, name))
        # The script left beside the JSON draws them again.
        os.remove(os.path.join(rep, "hit_ratio.png"))
        subprocess.run(["/usr/bin/python3", os.path.join(rep, "plot.py"), rep], check=True,
                       stdout=subprocess.DEVNULL)
        self.check_figure(os.path.join(rep, "hit_ratio"))

    def test_bench_report(self):
        rep = os.path.join(self.tmp, "bench")
        rc, out = run(["bench", "--targets", "kvpool,echo", "--suite", "sweep", "--sizes", "64K",
                       "--clients", "1,2", "--batch", "1", "--seconds", "0.2", "--work-dir",
                       os.path.join(self.tmp, "work"), "--report", rep])
        self.assertEqual(rc, 0, out)
        with open(os.path.join(rep, "bench.json")) as f:
            data = json.load(f)
        rows = [r for r in data["rows"] if r["target"] == "kvpool" and r["op"] == "get"]
        self.assertEqual(len(rows), 2)
        for r in rows:
            self.assertEqual(len(r["cdf_us"]), len(data["cdf_q"]))
            self.assertEqual(sorted(r["cdf_us"]), r["cdf_us"])  # a CDF's x never falls
            self.assertAlmostEqual(r["cdf_us"][data["cdf_q"].index(0.5)], r["p50_us"], places=3)
        for name in ("throughput", "latency_cdf"):
            self.check_figure(os.path.join(rep, name))

    def test_without_python_the_json_stays(self):
        trace = os.path.join(self.tmp, "t.jsonl")
        run(["gen-trace", "--family", "zipf", "--requests", "100", "--out", trace])
        rep = os.path.join(self.tmp, "nopy")
        env = dict(os.environ, KVPOOL_PYTHON="/bin/false")
        rc, out = run(["replay", "--trace", trace, "--flash", "none", "--quiet", "--report", rep,
                       "--report-capacities", "0.1"], env=env)
        self.assertEqual(rc, 2, out)
        self.assertIn("drawing the figures failed", out)
        self.assertIn(os.path.join(rep, "replay.json"), out)
        self.assertTrue(os.path.exists(os.path.join(rep, "replay.json")))
        rc, out = run(["replay", "--report-capacities", "0,5"])
        self.assertEqual(rc, 2)
        self.assertIn("--report-capacities", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
