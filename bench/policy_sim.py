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
        while len(cur) > cap:
            p, x = heapq.heappop(heap)
            if cur.get(x) == p:
                del cur[x]
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
            cur[x] = nxt[ri][i]
            heapq.heappush(heap, (-nxt[ri][i], i, x))
        while len(cur) > cap:
            p, i, x = heapq.heappop(heap)
            if cur.get(x) == -p:
                del cur[x]
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
        ("Belady (offline optimum)", lambda: belady(reqs, cap)),
    ]
    for name, f in rows:
        print(f"{name:40s} {f() / total:.4f}", flush=True)

if __name__ == "__main__":
    main()
