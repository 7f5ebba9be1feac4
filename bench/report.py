#!/usr/bin/env python3
"""Figures of a kvpool report directory (written by `kvpool replay --report DIR` or
`kvpool bench --report DIR`, which put this script there and run it).

    python3 DIR/plot.py DIR

reads DIR/replay.json and/or DIR/bench.json and writes, as PNG and SVG:
  replay: hit_ratio   hit ratio against capacity: kvpool (DRAM and flash parts), plain LRU
                      over the same blocks, the offline farthest-next-use ceiling
          latency_cdf the store's put / DRAM get / flash get latency distributions
  bench:  throughput  items/s of every target for each workload run by several of them
          latency_cdf per-item latency distribution of each target at one workload
Needs matplotlib (Debian: python3-matplotlib). Exit status 1 if it cannot draw.
"""
import json
import os
import sys

COLOURS = {"kvpool": "#1f6fb4", "kvpool-shm": "#2ca02c", "redis": "#d62728",
           "memcached": "#ff7f0e", "fsync-files": "#8c564b", "echo": "#7f7f7f",
           "memcpy": "#9467bd", "LRU": "#d62728", "offline": "#7f7f7f"}


def save(fig, out_dir, name):
    paths = []
    for ext in ("png", "svg"):
        path = os.path.join(out_dir, "%s.%s" % (name, ext))
        fig.savefig(path, dpi=120 if ext == "png" else None, bbox_inches="tight")
        paths.append(path)
    return paths


def cdf_from_summary(lat, bounds_us):
    """(x_us, fraction) points of a latency summary: its cumulative buckets and its
    percentiles, sorted; empty when nothing was timed."""
    n = lat.get("count", 0)
    if not n:
        return [], []
    pts = [(b, c / n) for b, c in zip(bounds_us, lat.get("le", [])) if c > 0]
    for key, q in (("p50_us", 0.5), ("p99_us", 0.99), ("p999_us", 0.999)):
        if lat.get(key):
            pts.append((lat[key], q))
    if lat.get("max_us"):
        pts.append((lat["max_us"], 1.0))
    pts.sort()
    xs, ys, best = [], [], 0.0
    for x, y in pts:  # a CDF never falls: bucket counts and percentiles can disagree a little
        best = max(best, y)
        xs.append(x)
        ys.append(best)
    return xs, ys


def plot_replay(plt, data, out_dir):
    pts = sorted(data["points"], key=lambda p: p["capacity_fraction"])
    cap = [100 * p["capacity_fraction"] for p in pts]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(cap, [p["prefix_hit_ratio"] for p in pts], "o-", color=COLOURS["kvpool"],
            label="kvpool (DRAM + flash)", linewidth=2)
    ax.plot(cap, [p["dram_hits"] / p["blocks_requested"] for p in pts], "o:",
            color=COLOURS["kvpool"], alpha=0.6, label="kvpool, served from DRAM")
    ax.plot(cap, [p["lru_prefix_hit_ratio"] for p in pts], "s--", color=COLOURS["LRU"],
            label="plain LRU, same blocks")
    ax.plot(cap, [p["offline_prefix_hit_ratio"] for p in pts], "^--", color=COLOURS["offline"],
            label="offline farthest-next-use")
    ax.set_xlabel("capacity (% of the trace's distinct blocks)")
    ax.set_ylabel("prefix hit ratio (blocks)")
    ax.set_ylim(0, max(0.05, max(p["offline_prefix_hit_ratio"] for p in pts) * 1.1))
    ax.set_title("Hit ratio against capacity: %s" % os.path.basename(data.get("trace", "trace")))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    files = save(fig, out_dir, "hit_ratio")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    bounds = data["latency_bounds_us"]
    mid = pts[len(pts) // 2]
    for key, label, style in (("put_latency", "put", "-"), ("get_dram_latency", "get (DRAM)", "-"),
                              ("get_flash_latency", "get (flash)", "--")):
        xs, ys = cdf_from_summary(mid[key], bounds)
        if xs:
            ax.step(xs, ys, style, where="post", label="%s, %d ops" % (label, mid[key]["count"]))
    ax.set_xscale("log")
    ax.set_xlabel("latency inside the store (us, log scale)")
    ax.set_ylabel("fraction of operations")
    ax.set_ylim(0, 1.01)
    ax.set_title("Latency CDF at %.0f%% capacity" % (100 * mid["capacity_fraction"]))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    files += save(fig, out_dir, "latency_cdf")
    plt.close(fig)
    return files


def size_label(n):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return str(n)


def plot_bench(plt, data, out_dir):
    rows = [r for r in data["rows"] if not r.get("error") and r["items_per_s"] > 0]
    by_cfg = {}
    for r in rows:
        by_cfg.setdefault((r["op"], r["size"], r["clients"], r["batch"]), {})[r["target"]] = r
    shared = {k: v for k, v in by_cfg.items() if len(v) >= 2 and k[0] != "copy"}
    if not shared:
        raise SystemExit("bench.json has no workload run by two targets: nothing to compare")
    cfgs = sorted(shared, key=lambda k: (k[0], k[1], k[2], k[3]))
    targets = []
    for k in cfgs:
        for t in shared[k]:
            if t not in targets:
                targets.append(t)
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(cfgs) + 2), 4.5))
    width = 0.8 / len(targets)
    for i, t in enumerate(targets):
        xs = [j + i * width for j, k in enumerate(cfgs) if t in shared[k]]
        ys = [shared[k][t]["items_per_s"] for k in cfgs if t in shared[k]]
        ax.bar(xs, ys, width, label=t, color=COLOURS.get(t))
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cfgs))])
    ax.set_xticklabels(["%s %s\nx%d b%d" % (k[0], size_label(k[1]), k[2], k[3]) for k in cfgs],
                       fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("items / s (log scale)")
    ax.set_title("Throughput against the peers, same run (%s s per workload)"
                 % data.get("seconds_per_config", "?"))
    ax.grid(alpha=0.3, axis="y", which="both")
    ax.legend(fontsize=8, ncol=min(4, len(targets)))
    files = save(fig, out_dir, "throughput")
    plt.close(fig)

    # The latency CDF at the workload most targets ran (ties: the first get).
    qs = data.get("cdf_q", [])
    cfg = max(cfgs, key=lambda k: (len(shared[k]), k[0] == "get", -k[2]))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for t, r in shared[cfg].items():
        xs = r.get("cdf_us") or []
        if xs and len(xs) == len(qs):
            ax.step(xs, qs, where="post", label=t, color=COLOURS.get(t))
    ax.set_xscale("log")
    ax.set_xlabel("latency per request (us, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.01)
    ax.set_title("Latency CDF: %s %s, %d client(s), batch %d"
                 % (cfg[0], size_label(cfg[1]), cfg[2], cfg[3]))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    files += save(fig, out_dir, "latency_cdf")
    plt.close(fig)
    return files


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots need matplotlib: apt-get install python3-matplotlib", file=sys.stderr)
        return 1
    files = []
    found = False
    for name, draw in (("replay.json", plot_replay), ("bench.json", plot_bench)):
        path = os.path.join(out_dir, name)
        if os.path.exists(path):
            found = True
            with open(path) as f:
                files += draw(plt, json.load(f), out_dir)
    if not found:
        print("no replay.json or bench.json in %s" % out_dir, file=sys.stderr)
        return 1
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
