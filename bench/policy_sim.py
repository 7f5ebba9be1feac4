#!/usr/bin/env python3
"""Block-level simulation of cache policies on the Mooncake conversation trace.

Counts the prefix hit ratio (leading cached blocks / all blocks requested) at a capacity
given as a share of distinct blocks, for policies the engine could adopt. It is a
design aid, not the engine: `kvpool replay` measures the engine itself.

usage: /usr/bin/python3 bench/policy_sim.py [--capacity 0.05] [--trace data/conversation_trace.jsonl]
"""
import argparse, collections, heapq, json

def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]

def full_blocks(r):  # engines store only full blocks
    h = r["hash_ids"]
    return h[:-1] if r["input_length"] % 512 else h

def leading(h, held):
    k = 0
    while k < len(h) and h[k] in held:
        k += 1
    return k

def evict_lazily(held, heap, cap):
    """Pop the heap's lowest entries (value, ..., block) until at most cap blocks are held;
    an entry whose block has since been given another value (or left) is stale: skipped."""
    while len(held) > cap:
        entry = heapq.heappop(heap)
        if held.get(entry[-1]) == entry[0]:
            del held[entry[-1]]

def lru(reqs, cap, skip_partial):
    od, hits = collections.OrderedDict(), 0
    for r in reqs:
        hits += leading(r["hash_ids"], od)
        for x in (full_blocks(r) if skip_partial else r["hash_ids"]):
            if x in od:
                od.move_to_end(x)
            else:
                od[x] = 1
                if len(od) > cap:
                    od.popitem(last=False)
    return hits

def s3fifo(reqs, cap, small_share, ghost_share):
    S, M, G, freq, hits = (collections.OrderedDict(), collections.OrderedDict(),
                           collections.OrderedDict(), {}, 0)
    cs, cg = int(cap * small_share), int(cap * ghost_share)
    for r in reqs:
        h = r["hash_ids"]
        k = 0
        while k < len(h) and (h[k] in S or h[k] in M):
            k += 1
        hits += k
        for x in full_blocks(r):
            if x in freq:
                freq[x] = min(freq[x] + 1, 3)
            elif x in G:
                del G[x]; freq[x] = 0; M[x] = 1
            else:
                freq[x] = 0; S[x] = 1
        while len(S) + len(M) > cap:
            if len(S) > cs or not M:
                x, _ = S.popitem(last=False)
                if freq[x] > 0:
                    freq[x] = 0; M[x] = 1
                else:
                    del freq[x]; G[x] = 1
                    if len(G) > cg:
                        G.popitem(last=False)
            else:
                x, _ = M.popitem(last=False)
                if freq[x] > 0:
                    freq[x] -= 1; M[x] = 1
                else:
                    del freq[x]
    return hits

def priority(reqs, cap, bonus=400, length_weight=2):
    """Evict the lowest (request index - length_weight*chain length + bonus*min(uses-1, 3))."""
    cur, heap, cnt, hits = {}, [], collections.Counter(), 0
    for t, r in enumerate(reqs):
        hits += leading(r["hash_ids"], cur)
        ids = full_blocks(r)
        for i, x in enumerate(ids):
            cnt[x] += 1
            p = (t - length_weight * len(ids) + bonus * min(cnt[x] - 1, 3), -i)
            cur[x] = p
            heapq.heappush(heap, (p, x))
        evict_lazily(cur, heap, cap)
    return hits

def lru_admission(reqs, cap, tpr, fpr, seed=1):
    """LRU where a request's new blocks are admitted by a predictor of whether any of them
    is used again (an oracle that is right with probability tpr on reused requests and
    wrong with probability fpr on the others): how good admission must be for a target."""
    import random
    rnd, last = random.Random(seed), {}
    for t, r in enumerate(reqs):
        for x in r["hash_ids"]:
            last[x] = t
    od, hits, seen = collections.OrderedDict(), 0, set()
    for t, r in enumerate(reqs):
        hits += leading(r["hash_ids"], od)
        ids = full_blocks(r)
        new = [x for x in ids if x not in seen]
        admit = rnd.random() < (tpr if any(last[x] > t for x in new) else fpr)
        for x in ids:
            if x in od:
                od.move_to_end(x)
            elif x in seen or admit:
                od[x] = 1
                if len(od) > cap:
                    od.popitem(last=False)
        seen.update(new)
    return hits

def engine_priority(reqs, cap, beta=0.6, ghost_window=65536):
    """The DRAM tier's main queue as built (src/engine/dram_tier.h), one tier: evict the
    lowest last use + beta * cap * past uses (max 3) in a clock of blocks stored; a hit
    renews the use; a new block takes its parent's recency when the parent is resident;
    evicted blocks leave a ghost with their uses, and a block put again while its ghost
    is remembered counts one use more."""
    bonus, dram, heap, ghost = beta * cap, {}, [], collections.OrderedDict()
    clock = seq = hits = 0
    for r in reqs:
        h = r["hash_ids"]
        k = leading(h, dram)
        hits += k
        for x in h[:k]:
            v = dram[x]; v[0] = clock; v[1] = min(v[1] + 1, 3)
        prev = h[k - 1] if k else None
        for x in full_blocks(r)[k:]:
            if x in dram:
                prev = x
                continue
            uses = min(ghost.pop(x) + 1, 3) if x in ghost else 0
            last = min(clock, dram[prev][0]) if prev in dram else clock
            seq += 1
            dram[x] = [last, uses, seq]
            heapq.heappush(heap, (last + bonus * uses, -seq, x))
            clock += 1
            prev = x
            while len(dram) > cap:
                key, s, y = heapq.heappop(heap)
                v = dram.get(y)
                if v is None or v[2] != -s:
                    continue
                if v[0] + bonus * v[1] > key:  # used since it was pushed
                    heapq.heappush(heap, (v[0] + bonus * v[1], s, y))
                    continue
                del dram[y]
                ghost[y] = v[1]
                if len(ghost) > ghost_window:
                    ghost.popitem(last=False)
    return hits

def request_graph(reqs):
    """Per request: the request that first stored the last block of its reused prefix
    (its parent turn, -1 if only the first block is shared), its conversation depth, and
    the gap in seconds to its first child turn with the blocks that child reuses of it."""
    first, parent, depth = {}, [], []
    for i, r in enumerate(reqs):
        h, k = r["hash_ids"], 0
        while k < len(h) and first.get(h[k], i) < i:
            k += 1
        p = first[h[k - 1]] if k > 1 else -1
        parent.append(p)
        depth.append(depth[p] + 1 if p >= 0 else 0)
        for x in h:
            first.setdefault(x, i)
    child = [None] * len(reqs)
    for i, p in enumerate(parent):
        if p >= 0 and child[p] is None:
            fb, hc = full_blocks(reqs[p]), reqs[i]["hash_ids"]
            k = 0
            while k < min(len(fb), len(hc)) and fb[k] == hc[k]:
                k += 1
            child[p] = ((reqs[i]["timestamp"] - reqs[p]["timestamp"]) / 1000, k)
    return first, parent, depth, child

def request_class(reqs, graph, i, features):
    """What a store can see of request i when it stores it (and, for "out", what it cannot:
    the output length), each cut into a few buckets."""
    first, parent, depth, _ = graph
    r, fb = reqs[i], full_blocks(reqs[i])
    new = sum(1 for x in fb if first[x] == i)
    gap = (r["timestamp"] - reqs[parent[i]]["timestamp"]) / 1000 if parent[i] >= 0 else None
    out = r["output_length"]
    values = {
        "new": 0 if new == 0 else 1 if new == 1 else 2 if new <= 3 else 3 if new <= 15 else 4 if new <= 63 else 5,
        "depth": min(depth[i], 4),
        "gap": -1 if gap is None else 0 if gap < 60 else 1 if gap < 180 else 2,
        "len": 0 if len(fb) < 4 else 1 if len(fb) < 16 else 2 if len(fb) < 48 else 3,
        "out": 0 if out < 50 else 1 if out < 300 else 2 if out < 800 else 3,
    }
    return tuple(values[f] for f in features)

RETENTION_GRID_S = [0, 15, 30, 45, 60, 90, 120, 150, 180, 240, 300, 400, 500, 700, 1000, 1500,
                    2500, 4000, 8000]

def class_retention(reqs, cap, features):
    """An upper estimate for admission/eviction by request class: each class of request
    gets its own retention time (blocks expire that long after their last use; the
    earliest expiry is evicted), and the times are fitted WITH HINDSIGHT on this very trace
    (per class, the time that maximises reused blocks minus lambda x block-seconds held),
    the best of a grid of lambdas and scales kept. An online policy that learns its
    classes' behaviour as it goes can only do worse than this with the same features."""
    graph = request_graph(reqs)
    child = graph[3]
    cls = [request_class(reqs, graph, i, features) for i in range(len(reqs))]
    groups = collections.defaultdict(list)
    for i, c in enumerate(cls):
        held = len(full_blocks(reqs[i]))
        if held:
            gap, reused = child[i] or (float("inf"), 0)
            groups[c].append((held, gap, reused))
    best = 0
    for lam in (0.0002, 0.0005, 0.001, 0.002, 0.004):
        keep = {}
        for c, waits in groups.items():
            keep[c] = max(RETENTION_GRID_S, key=lambda t: sum(k for _, g, k in waits if g < t)
                          - lam * sum(h * min(g, t) for h, g, _ in waits))
        for scale in (0.5, 1, 2):
            exp, heap, hits, seq = {}, [], 0, 0
            for i, r in enumerate(reqs):
                hits += leading(r["hash_ids"], exp)
                until = r["timestamp"] / 1000 + scale * keep.get(cls[i], 120)
                for j, x in enumerate(full_blocks(r)):
                    e = until - 1e-7 * j  # children expire just before their parents
                    if exp.get(x, -1) < e:
                        exp[x] = e
                        seq += 1
                        heapq.heappush(heap, (e, seq, x))
                evict_lazily(exp, heap, cap)
            best = max(best, hits)
    return best

def belady(reqs, cap):
    inf, nxt, last = float("inf"), [], {}
    for ri in range(len(reqs) - 1, -1, -1):
        h = reqs[ri]["hash_ids"]
        nxt.append([last.get(x, inf) for x in h])
        for x in h:
            last[x] = ri
    nxt.reverse()
    cur, heap, hits = {}, [], 0
    for ri, r in enumerate(reqs):
        h = r["hash_ids"]
        hits += leading(h, cur)
        for i, x in enumerate(h):
            if nxt[ri][i] == inf:
                cur.pop(x, None)  # never used again: not admitted
                continue
            cur[x] = -nxt[ri][i]  # the heap's key: the furthest next use leaves first
            heapq.heappush(heap, (-nxt[ri][i], i, x))
        evict_lazily(cur, heap, cap)
    return hits

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="data/conversation_trace.jsonl")
    ap.add_argument("--capacity", type=float, default=0.05)
    a = ap.parse_args()
    reqs = load(a.trace)
    total = sum(len(r["hash_ids"]) for r in reqs)
    distinct = len({x for r in reqs for x in r["hash_ids"]})
    cap = int(a.capacity * distinct)
    print(f"{len(reqs)} requests, {total} block references, {distinct} distinct; capacity {cap} blocks")
    rows = [
        ("plain LRU", lambda: lru(reqs, cap, False)),
        ("LRU, full blocks only", lambda: lru(reqs, cap, True)),
        ("S3-FIFO small 10%, ghost 90%", lambda: s3fifo(reqs, cap, 0.1, 0.9)),
        ("S3-FIFO small 50%, ghost 90%", lambda: s3fifo(reqs, cap, 0.5, 0.9)),
        ("priority: recency + use bonus", lambda: priority(reqs, cap)),
        ("engine's priority (one tier, as built)", lambda: engine_priority(reqs, cap)),
        ("LRU, perfect per-request admission", lambda: lru_admission(reqs, cap, 1.0, 0.0)),
        ("LRU, admission TPR 0.8 / FPR 0.2", lambda: lru_admission(reqs, cap, 0.8, 0.2)),
        ("LRU, admission TPR 0.7 / FPR 0.3", lambda: lru_admission(reqs, cap, 0.7, 0.3)),
        ("retention by class, no class (hindsight fit)", lambda: class_retention(reqs, cap, ())),
        ("retention by new blocks x depth (hindsight)", lambda: class_retention(reqs, cap, ("new", "depth"))),
        ("retention by all a store sees (hindsight)", lambda: class_retention(reqs, cap, ("new", "depth", "gap", "len"))),
        ("the same + output length (hindsight)", lambda: class_retention(reqs, cap, ("new", "depth", "gap", "len", "out"))),
        ("Belady (offline optimum)", lambda: belady(reqs, cap)),
    ]
    for name, f in rows:
        print(f"{name:46s} {f() / total:.4f}", flush=True)

if __name__ == "__main__":
    main()
