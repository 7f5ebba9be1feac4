#!/usr/bin/env python3
"""kvpool.vllm.KvpoolTier against a real kvpoold, driven as vLLM's tiering manager drives a
secondary tier.

vLLM cannot be installed here; this replays vllm/v1/kv_offload/tiering/ (read 2026-12):
factory.py (SecondaryTierFactory.get_tier_class: an unregistered "type" with "module_path"
imports the module, takes the class named by "type", asserts issubclass of
SecondaryTierManager, builds it with offloading_spec, primary_kv_view, tier_type and the
rest of the dict), manager.py (complete_store cascades one submit_store per tier with the
primary chunks pinned; lookup on a primary miss asks each tier, RETRY/None means "ask again
next step", a HIT starts a promotion batched per request and submitted at the step's end;
completions are polled once per step with get_finished_jobs; on_schedule_end closes a
step), base.py (TransferJob/JobMetadata: job_id, keys, chunk_ids/block_ids, is_promotion,
req_context; JobResult with successful_keys) and the primary view's shape (num_chunks,
row_stride_bytes) from CPUPrimaryTierOffloadingManager.get_kv_memoryview. OffloadKeys are
vLLM's: a 32-byte block hash plus the KV group index as 4 big-endian bytes.

Figures printed: a replayed offload + reload of 1,000 blocks byte for byte, and the time
each tier method took on the calling (scheduler) thread.

Usage: vllm_tier_test.py BUILD_DIR
"""
import dataclasses
import hashlib
import importlib
import os
import sys
import time
import types
import unittest

import numpy as np

BUILD = sys.argv.pop(1)
sys.path.insert(0, BUILD + "/python")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvpool  # noqa: E402
from kvpoold_process import KvpooldTestCase  # noqa: E402

CHUNK = 32 << 10  # bytes per primary chunk (one vLLM offloaded block, all layers)


@dataclasses.dataclass
class ReqContext:  # vllm/v1/kv_offload/base.py
    req_id: str
    kv_transfer_params: dict = None


@dataclasses.dataclass
class TransferJob:  # vllm/v1/kv_offload/tiering/base.py (current); older: JobMetadata/block_ids
    job_id: int
    keys: list
    chunk_ids: np.ndarray
    is_promotion: bool
    req_context: ReqContext


def offload_key(i, group=0):
    return hashlib.sha256(b"block-%d" % i).digest() + group.to_bytes(4, "big")


def create_tier(tier_config, view, spec):
    """SecondaryTierFactory.create_secondary_tier for an out-of-tree tier."""
    module = importlib.import_module(tier_config["module_path"])
    cls = getattr(module, tier_config["type"])
    assert issubclass(cls, module.SecondaryTierManager)
    config = dict(tier_config)
    tier_type = config.pop("type")
    config.pop("module_path")
    return cls(offloading_spec=spec, primary_kv_view=view, tier_type=tier_type, **config)


class Timed:
    """Wraps the tier: every call from the 'scheduler' is timed."""

    def __init__(self, tier):
        self.tier, self.times = tier, {}

    def __getattr__(self, name):
        f = getattr(self.tier, name)

        def call(*a, **k):
            t0 = time.perf_counter()
            r = f(*a, **k)
            if hasattr(r, "__next__"):
                r = list(r)
            self.times.setdefault(name, []).append(time.perf_counter() - t0)
            return r
        return call


class VllmTierReplay(KvpooldTestCase):
    KVPOOLD = BUILD + "/kvpoold"

    def setUp(self):
        self.primary = np.zeros((2048, CHUNK), dtype=np.uint8)  # the CPU tier's chunks
        self.spec = types.SimpleNamespace(
            vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(model="Qwen/Qwen3-8B")),
            kv_events_config=types.SimpleNamespace(enable_kv_cache_events=True,
                                                   self_describing_kv_events=False),
            block_size_factor=1)
        self.next_job = 0

    def tier(self, **opts):
        cfg = {"type": "KvpoolTier", "module_path": "kvpool.vllm", "address": self.d.address}
        cfg.update(opts)
        t = create_tier(cfg, memoryview(self.primary), self.spec)
        self.addCleanup(t.shutdown)
        return Timed(t)

    def job(self, keys, chunks, promotion, req):
        self.next_job += 1
        return TransferJob(self.next_job, list(keys), np.array(chunks, dtype=np.int64), promotion,
                           ReqContext(req))

    def step(self, tier, want_jobs, timeout=20):
        """Engine steps until `want_jobs` results came back: {job_id: JobResult}."""
        got, deadline = {}, time.time() + timeout
        while len(got) < want_jobs and time.time() < deadline:
            tier.on_schedule_end(None)
            for r in tier.get_finished_jobs():
                got[r.job_id] = r
            time.sleep(0.002)
        self.assertEqual(len(got), want_jobs)
        return got

    def store(self, tier, keys, fill, req):
        """The primary's first chunks filled with `fill`, cascaded as one store job."""
        self.primary[:len(keys)] = fill
        tier.submit_store(self.job(keys, range(len(keys)), False, req))
        return self.step(tier, 1)[self.next_job].success

    def lookup_all(self, tier, keys, req, timeout=20):
        """The scheduler's lookups for one request until no answer is RETRY."""
        from kvpool.vllm import LookupResult
        ctx = ReqContext(req)
        tier.on_new_request(ctx)
        deadline = time.time() + timeout
        while time.time() < deadline:
            res = [tier.lookup(k, ctx) for k in keys]
            if LookupResult.RETRY not in res:
                return res, ctx
            tier.on_schedule_end(None)
            time.sleep(0.002)
        self.fail("lookups still RETRY after %d s" % timeout)

    def test_offload_and_reload_of_1000_blocks(self):
        from kvpool.vllm import LookupResult, Medium
        t = self.tier(enable_secondary_tier_events=True)
        rng = np.random.default_rng(7)
        n = 1000
        keys = [offload_key(i) for i in range(n)]
        self.primary[:n] = rng.integers(0, 256, (n, CHUNK), dtype=np.uint8)
        want = self.primary[:n].copy()
        # Cascade: complete_store submits one store per request's batch (16 blocks here).
        jobs = [self.job(keys[i:i + 16], range(i, min(i + 16, n)), False, "r%d" % (i // 64))
                for i in range(0, n, 16)]
        for j in jobs:
            t.submit_store(j)
        results = self.step(t, len(jobs))
        self.assertTrue(all(r.success for r in results.values()))
        events = t.take_events()
        self.assertEqual(sum(len(e.keys) for e in events), n)
        self.assertTrue(all(e.medium == Medium.STORAGE and not e.removed for e in events))
        # The CPU tier drops them (evicted); a new request finds them in kvpool.
        self.primary[:] = 0
        res, ctx = self.lookup_all(t, keys + [offload_key(10**6)], "q1")
        self.assertEqual(res[:n], [LookupResult.HIT] * n)
        self.assertEqual(res[n], LookupResult.MISS)
        # Promotion into other primary chunks (the manager allocates them), one job per 32.
        slots = list(range(1024, 1024 + n))
        loads = [self.job(keys[i:i + 32], slots[i:i + 32], True, "q1") for i in range(0, n, 32)]
        for j in loads:
            t.submit_load(j)
        results = self.step(t, len(loads))
        self.assertTrue(all(r.success for r in results.values()))
        self.assertTrue(np.array_equal(self.primary[1024:1024 + n], want))
        t.on_request_finished(ctx)
        t.drain_jobs()
        self.assertFalse(t.has_pending_work())
        # The figure: time on the scheduler thread per method.
        worst = {}
        for name, ts in sorted(t.times.items()):
            ts = sorted(ts)
            worst[name] = ts[-1]
            print("  %-20s calls %6d  p50 %7.1f us  p99 %7.1f us  max %7.1f us" % (
                name, len(ts), ts[len(ts) // 2] * 1e6, ts[int(len(ts) * 0.99)] * 1e6, ts[-1] * 1e6),
                file=sys.stderr)
            # No method waits on kvpoold (drain_jobs does, by contract): a wait would cost
            # a request timeout. The bound is loose on purpose: the machine is shared, and
            # the figures above are what docs/PERFORMANCE.md reports, not this check.
            if name != "drain_jobs":
                self.assertLess(ts[int(len(ts) * 0.99)], 50e-3, name)
        print("  offload + reload of %d blocks of %d KiB: identical bytes" % (n, CHUNK >> 10),
              file=sys.stderr)

    def test_a_block_lost_in_between_is_a_partial_load_not_an_error(self):
        from kvpool.vllm import LookupResult
        t = self.tier()
        keys = [offload_key(5000 + i) for i in range(8)]
        self.assertTrue(self.store(t, keys, 9, "a"))
        res, ctx = self.lookup_all(t, keys, "b")
        self.assertEqual(res, [LookupResult.HIT] * 8)
        # Another instance erases two of them before the load.
        c = kvpool.Client(self.d.address, namespace="vllm")
        for k in keys[2:4]:
            self.assertTrue(c.erase(kvpool.foreign_key(t.tier.root, "vllm", k)))
        self.primary[100:108] = 0
        t.submit_load(self.job(keys, range(100, 108), True, "b"))
        r = self.step(t, 1)[self.next_job]
        self.assertFalse(r.success)
        self.assertEqual(list(r.successful_keys), keys[:2] + keys[4:])
        self.assertTrue((self.primary[100:102] == 9).all() and (self.primary[104:108] == 9).all())

    def test_stores_are_insert_only_and_chained(self):
        t = self.tier()
        keys = [offload_key(7000 + i) for i in range(4)]
        self.assertTrue(self.store(t, keys, 1, "a"))
        # Another instance offloads the same blocks: nothing is rewritten.
        self.assertTrue(self.store(t, keys, 2, "b"))
        c = kvpool.Client(self.d.address, namespace="vllm")
        chain = [kvpool.foreign_key(t.tier.root, "vllm", k) for k in keys]
        self.assertEqual(c.match_prefix(chain), 4)
        out = bytearray(CHUNK)
        self.assertEqual(c.get(chain[3], out), CHUNK)
        self.assertEqual(out[0], 1)

    def test_unreachable_pool_misses_and_fails_jobs_without_raising(self):
        from kvpool.vllm import LookupResult
        t = self.tier(address="127.0.0.1:1", timeout_ms=300)
        res, _ = self.lookup_all(t, [offload_key(1)], "x")
        self.assertEqual(res, [LookupResult.MISS])
        t.submit_load(self.job([offload_key(1)], [0], True, "x"))
        self.assertFalse(self.step(t, 1)[self.next_job].success)
        t.submit_store(self.job([offload_key(1)], [0], False, "x"))
        self.assertFalse(self.step(t, 1)[self.next_job].success)

    def test_bad_configuration_fails_at_construction(self):
        with self.assertRaisesRegex(ValueError, "unknown tier option"):
            self.tier(adress="127.0.0.1:7400")
        with self.assertRaisesRegex(ValueError, "io_threads"):
            self.tier(io_threads=0)
        t = self.tier()
        with self.assertRaisesRegex(ValueError, "keys for"):
            t.submit_store(self.job([offload_key(1)], [0, 1], False, "x"))


if __name__ == "__main__":
    unittest.main()
