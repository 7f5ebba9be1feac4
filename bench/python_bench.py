#!/usr/bin/python3
"""Python batch get beside the C++ client, same machine, same run.

Starts a kvpoold (1 GiB DRAM), puts BLOCKS 64 KiB blocks, then reads them back in batches
of BATCH through kvpool.Client (numpy buffers, GIL released) for SECONDS, and runs
`kvpool bench` (the C++ client) on the same configuration; prints both and the ratio.

usage: bench/python_bench.py [--build build] [--seconds 3] [--batch 16] [--json PATH]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--build", default="build")
ap.add_argument("--seconds", type=float, default=3.0)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--json")
args = ap.parse_args()
sys.path.insert(0, os.path.join(args.build, "python"))
import numpy as np  # noqa: E402

import kvpool  # noqa: E402

SIZE, BLOCKS = 64 << 10, 256
d = tempfile.mkdtemp(prefix="kvpool-pybench-")
ready = os.path.join(d, "ready.json")
proc = subprocess.Popen([os.path.join(args.build, "kvpoold"), "--data-dir", d, "--dram", "1GiB", "--flash", "0",
                         "--listen", "127.0.0.1:0", "--resp-listen", "off", "--ready-file", ready],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    deadline = time.time() + 30
    while not os.path.exists(ready):
        if proc.poll() is not None or time.time() > deadline:
            sys.exit("kvpoold did not start")
        time.sleep(0.01)
    with open(ready) as f:
        port = json.load(f)["port"]
    c = kvpool.Client("127.0.0.1:%d" % port, namespace="bench")
    keys = ["k%d" % i for i in range(BLOCKS)]
    vals = [np.full(SIZE, i % 251, np.uint8) for i in range(BLOCKS)]
    assert c.batch_put(keys, vals, overwrite=True) == ["OK"] * BLOCKS
    outs = [np.zeros(SIZE, np.uint8) for _ in range(args.batch)]
    n, i, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        ks = [keys[(i + j) % BLOCKS] for j in range(args.batch)]
        i += args.batch
        sizes = c.batch_get(ks, outs)
        assert sizes == [SIZE] * args.batch
        n += args.batch
    py_gbs = n * SIZE / (time.perf_counter() - t0) / 1e9
finally:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    shutil.rmtree(d, ignore_errors=True)

out = os.path.join(tempfile.gettempdir(), "kvpool-pybench-cpp.json")
subprocess.run([os.path.join(args.build, "kvpool"), "bench", "--targets", "kvpool", "--suite", "sweep",
                "--sizes", "64K", "--clients", "1", "--batch", str(args.batch), "--seconds", str(args.seconds),
                "--work-dir", tempfile.mkdtemp(prefix="kvpool-pybench-w-"), "--json", out],
               check=True, stdout=subprocess.DEVNULL)
with open(out) as f:
    rows = [r for r in json.load(f)["rows"] if r["target"] == "kvpool" and r["op"] == "get"]
cpp_gbs = rows[0]["gb_per_s"]
print("%-36s %8s" % ("64 KiB gets, batch %d, 1 client" % args.batch, "GB/s"))
print("%-36s %8.2f" % ("Python kvpool.Client.batch_get", py_gbs))
print("%-36s %8.2f" % ("C++ kvpool::Client::GetBatch", cpp_gbs))
print("%-36s %8.2f   (goal >= 0.90)" % ("ratio Python / C++", py_gbs / cpp_gbs))
if args.json:
    with open(args.json, "w") as f:
        json.dump({"python_gb_per_s": py_gbs, "cpp_gb_per_s": cpp_gbs, "ratio": py_gbs / cpp_gbs,
                   "batch": args.batch, "size": SIZE}, f, indent=1)
