#!/usr/bin/env python3
"""Block-level model of a two-tier store against one tier of the same total capacity.

A design aid (issue 16), not the engine: `kvpool replay` measures the engine. The model is
the tiered store's shape with everything that costs capacity in the engine taken out (no
free DRAM kept, no eviction batches, no empty flash regions): DRAM is LRU over half the
capacity; a block leaving DRAM is written to a flash log of regions of R blocks, which
evicts its oldest region whole; a flash hit is promoted into DRAM and, inclusive, keeps its
flash copy (a clean block leaving DRAM is not written again while that copy lives), or,
exclusive, gives it up. It counts the prefix hit ratio as the replay does (leading cached
blocks of each request; only full blocks are stored).

If this model already falls short of one LRU tier, what is left is the flash tier's
first-in first-out order, not anything the engine could tune away.

usage: /usr/bin/python3 bench/tier_sim.py --trace T [--capacity 0.02] [--region-blocks 8]
"""
import argparse, collections

from policy_sim import full_blocks, leading, load, lru  # the same trace reading and LRU


def two_tier(reqs, dram_cap, flash_cap, region_blocks, exclusive):
    dram = collections.OrderedDict()  # block -> whether a flash copy was kept for it
    regions = collections.deque()  # sealed regions, oldest first (sets of blocks)
    head, where = set(), {}
    nregions = max(2, flash_cap // region_blocks)
    hits = total = 0

    def flash_append(x):
        nonlocal head
        if len(head) >= region_blocks:
            regions.append(head)
            head = set()
            while len(regions) + 1 > nregions:
                for y in regions.popleft():
                    where.pop(y, None)
        head.add(x)
        where[x] = head

    def dram_insert(x, copy_kept):
        dram[x] = copy_kept
        while len(dram) > dram_cap:
            y, kept = dram.popitem(last=False)
            if not (kept and y in where):
                flash_append(y)

    def promote(x):
        if exclusive:
            where.pop(x).discard(x)
        dram_insert(x, not exclusive)

    class Held:  # either tier
        def __contains__(self, x):
            return x in dram or x in where

    for r in reqs:
        h = r["hash_ids"]
        total += len(h)
        k = leading(h, Held())
        hits += k
        full = len(full_blocks(r))
        for j, x in enumerate(h):
            if x in dram:
                dram.move_to_end(x)
            elif x in where:
                if j < k:
                    promote(x)
            elif j < full:
                dram_insert(x, False)
    return hits / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default="data/conversation_trace.jsonl")
    ap.add_argument("--capacity", type=float, default=0.02)
    ap.add_argument("--region-blocks", type=int, default=8)
    a = ap.parse_args()
    reqs = load(a.trace)
    distinct = len({x for r in reqs for x in r["hash_ids"]})
    cap = max(16, int(a.capacity * distinct))
    half = cap // 2
    print(f"{a.trace}: capacity {cap} blocks ({a.capacity:.0%} of {distinct} distinct)")
    total = sum(len(r["hash_ids"]) for r in reqs)
    print(f"{'one LRU tier':44s} {lru(reqs, cap, True) / total:.4f}")
    print(f"{'LRU over half (the DRAM alone)':44s} {lru(reqs, half, True) / total:.4f}")
    for exclusive in (False, True):
        for rb in (1, a.region_blocks):
            name = f"two tiers, {'exclusive' if exclusive else 'inclusive'}, regions of {rb}"
            print(f"{name:44s} {two_tier(reqs, half, cap - half, rb, exclusive):.4f}", flush=True)


if __name__ == "__main__":
    main()
