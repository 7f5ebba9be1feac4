#!/usr/bin/env python3
"""kvpool.lmcache.Connector against a real kvpoold, driven as LMCache drives a native client.

LMCache cannot be installed here; this replays lmcache/v1/distributed/l2_adapters/
native_plugin_l2_adapter.py (_create_native_plugin_l2_adapter: import module_path, build
class_name(**adapter_params), check the six methods) and native_connector_l2_adapter.py
(NativeConnectorL2Adapter: object keys as "<model>@<kv_rank:08x>@<group:x>@<chunk_hash hex>",
buffers as ctypes-backed memoryviews over L1 memory, submit_* under a lock, one demux thread
that polls event_fd() and calls drain_completions()), LMCache dev of 2026-11 (read at
commits 68c638a6a8e8 and 0b43a45563fe of those two files). Chunk hashes
are LMCache's (ChunkedTokenDatabase over vLLM's sha256_cbor, 256-token chunks).

Usage: lmcache_adapter_test.py BUILD_DIR
"""
import ctypes
import importlib
import os
import select
import sys
import threading
import time
import unittest

import torch

BUILD = sys.argv.pop(1)
sys.path.insert(0, BUILD + "/python")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvpool  # noqa: E402
from kvpool import engines  # noqa: E402
from kvpoold_process import KvpooldTestCase  # noqa: E402

REQUIRED = ["event_fd", "submit_batch_get", "submit_batch_set", "submit_batch_exists",
            "drain_completions", "close"]


def create_native_plugin(config):
    """_create_native_plugin_l2_adapter, up to wrapping."""
    module = importlib.import_module(config["module_path"])
    client = getattr(module, config["class_name"])(**config.get("adapter_params", {}))
    for m in REQUIRED:
        assert callable(getattr(client, m, None)), m
    assert callable(getattr(client, "submit_batch_delete", None))
    return client


def object_key(model, kv_rank, group, chunk_hash):
    return "%s@%08x@%x@%s" % (model, kv_rank, group, chunk_hash.hex())


def memoryview_of(t):
    """MemoryObj.byte_array: a ctypes c_ubyte array over the tensor's memory."""
    n = t.numel() * t.element_size()
    return memoryview((ctypes.c_ubyte * n).from_address(t.data_ptr()))


class Demux:
    """NativeConnectorL2Adapter's demux loop: poll the eventfd, drain, route by future id."""

    def __init__(self, client):
        self.client, self.done, self.cv = client, {}, threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        poller = select.poll()
        poller.register(self.client.event_fd(), select.POLLIN)
        while not self.stop:
            if not poller.poll(100):
                continue
            for fid, ok, err, results in self.client.drain_completions():
                with self.cv:
                    self.done[int(fid)] = (ok, err, results)
                    self.cv.notify_all()

    def wait(self, fid, timeout=10):
        with self.cv:
            assert self.cv.wait_for(lambda: fid in self.done, timeout), "future %d" % fid
            return self.done.pop(fid)

    def close(self):
        self.stop = True
        self.thread.join()
        self.client.close()


class LMCacheReplay(KvpooldTestCase):
    KVPOOLD = BUILD + "/kvpoold"

    def plugin(self, **params):
        p = {"address": self.d.address}
        p.update(params)
        c = create_native_plugin({"type": "native_plugin", "module_path": "kvpool.lmcache",
                                  "class_name": "Connector", "adapter_params": p})
        dm = Demux(c)
        self.addCleanup(dm.close)
        return c, dm

    def chunk_keys(self, tokens, model="Qwen/Qwen3-8B", rank=0):
        return [object_key(model, rank, 0, h)
                for h in engines.lmcache_chunk_hashes("sha256_cbor", "0", tokens)]

    def test_store_lookup_load_delete(self):
        c, dm = self.plugin()
        tokens = list(range(3, 3 + 256 * 4 + 100))  # 4 full chunks and a partial one
        keys = self.chunk_keys(tokens)
        self.assertEqual(len(keys), 5)
        src = [torch.randint(0, 255, (64 << 10,), dtype=torch.uint8) for _ in keys]
        src[-1] = src[-1][: 100 * 64]  # the partial chunk's object is smaller
        ok, err, res = dm.wait(c.submit_batch_set(keys, [memoryview_of(t) for t in src]))
        self.assertEqual((ok, err, res), (True, "", [True] * 5))
        # A re-store of held chunks (another request with the prefix) succeeds, rewrites nothing.
        self.assertEqual(dm.wait(c.submit_batch_set(keys[:2], [memoryview_of(t) for t in src[:2]])),
                         (True, "", [True, True]))
        other = self.chunk_keys(list(range(900, 1156)))
        ok, err, found = dm.wait(c.submit_batch_exists(keys + other))
        self.assertTrue(ok)
        self.assertEqual(found, [True] * 5 + [False])
        dst = [torch.zeros_like(t) for t in src]
        ok, _, loaded = dm.wait(c.submit_batch_get(keys, [memoryview_of(t) for t in dst]))
        self.assertEqual((ok, loaded), (True, [True] * 5))
        for a, b in zip(src, dst):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(dm.wait(c.submit_batch_delete([keys[1], other[0]]))[2], [True, False])
        self.assertEqual(dm.wait(c.submit_batch_exists(keys[:3]))[2], [True, False, True])
        ok, _, loaded = dm.wait(c.submit_batch_get(keys[:3], [memoryview_of(t) for t in dst[:3]]))
        self.assertEqual((ok, loaded), (True, [True, False, True]))
        # Ranks and models are separate objects.
        self.assertEqual(dm.wait(c.submit_batch_exists(self.chunk_keys(tokens, rank=1)))[2],
                         [False] * 5)

    def test_store_and_load_threads_share_the_connector(self):
        c, dm = self.plugin(workers=2)
        lock = threading.Lock()  # NativeConnectorL2Adapter submits under its lock
        errors = []

        def run(seed):
            try:
                g = torch.Generator().manual_seed(seed)
                for i in range(20):
                    keys = self.chunk_keys(list(range(seed * 100000 + i * 512,
                                                      seed * 100000 + i * 512 + 512)))
                    vals = [torch.randint(0, 255, (16 << 10,), generator=g, dtype=torch.uint8)
                            for _ in keys]
                    with lock:
                        fid = c.submit_batch_set(keys, [memoryview_of(v) for v in vals])
                    assert dm.wait(fid)[2] == [True] * len(keys)
                    out = [torch.zeros_like(v) for v in vals]
                    with lock:
                        fid = c.submit_batch_get(keys, [memoryview_of(v) for v in out])
                    assert dm.wait(fid)[2] == [True] * len(keys)
                    assert all(torch.equal(a, b) for a, b in zip(vals, out))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=run, args=(s,)) for s in (1, 2, 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])

    def test_a_chunk_found_by_lookup_is_still_there_for_its_load(self):
        """LMCache's lookup and lock: chunks found are held until loaded, while another
        engine's stores push the pool (64 MiB of DRAM, no flash) over four times."""
        c, dm = self.plugin()
        keys = self.chunk_keys(list(range(7, 7 + 256 * 16)))
        src = [torch.randint(0, 255, (256 << 10,), dtype=torch.uint8) for _ in keys]
        self.assertEqual(dm.wait(c.submit_batch_set(keys, [memoryview_of(t) for t in src]))[2],
                         [True] * 16)
        ok, _, found = dm.wait(c.submit_batch_exists(keys[:8]))  # lookup and lock
        self.assertEqual((ok, found), (True, [True] * 8))
        flood, dm2 = self.plugin(lookup_lease_ms=0)
        blob = torch.randint(0, 255, (1 << 20,), dtype=torch.uint8)
        for i in range(0, 512, 16):  # 512 chunks of 1 MiB, 16 per store
            fk = self.chunk_keys(list(range(10**6 + i * 256, 10**6 + (i + 16) * 256)))
            dm2.wait(flood.submit_batch_set(fk, [memoryview_of(blob)] * len(fk)))
        # The probe (lease 0) sees the unlocked half gone: the flood did evict.
        gone = dm2.wait(flood.submit_batch_exists(keys[8:]))[2].count(False)
        self.assertGreater(gone, 4)
        dst = [torch.zeros_like(t) for t in src[:8]]
        ok, _, loaded = dm.wait(c.submit_batch_get(keys[:8], [memoryview_of(t) for t in dst]))
        self.assertEqual((ok, loaded), (True, [True] * 8))
        for a, b in zip(src, dst):
            self.assertTrue(torch.equal(a, b))
        self.assertIn("leases: 0 held (0 bytes), 8 granted, 8 loaded",
                      kvpool.Client(self.d.address).stats())

    def test_unreachable_pool_completes_with_errors(self):
        c, dm = self.plugin(address="127.0.0.1:1", timeout_ms=300)
        keys = self.chunk_keys(list(range(256)))
        t0 = time.time()
        ok, err, res = dm.wait(c.submit_batch_exists(keys))
        self.assertFalse(ok)
        self.assertIn("Unavailable", err)
        self.assertEqual(res, [False])
        buf = torch.zeros(1024, dtype=torch.uint8)
        ok, err, res = dm.wait(c.submit_batch_get(keys, [memoryview_of(buf)]))
        self.assertEqual((ok, res), (False, [False]))
        self.assertLess(time.time() - t0, 5)

    def test_bad_arguments_and_close(self):
        c, dm = self.plugin()
        with self.assertRaises(ValueError):
            c.submit_batch_set(["a", "b"], [memoryview(bytearray(4))])
        with self.assertRaises(TypeError):
            kvpool.lmcache.Connector(bogus=1)
        d2 = kvpool.lmcache.Connector(address=self.d.address)
        d2.close()
        with self.assertRaises(RuntimeError):
            d2.submit_batch_exists(["x"])
        d2.close()  # idempotent


if __name__ == "__main__":
    unittest.main()
