#!/usr/bin/env python3
"""kvpool.sglang against a real kvpoold, driven by the call sequence SGLang's HiCache makes.

SGLang cannot be installed here, so this test replays what it does (sgl-project/sglang main
of 2026-11, v0.5.x; hicache_storage.py and storage/backend_factory.py read at commit
001067fffe33): StorageBackendFactory._create_dynamic_backend imports module_path,
takes class_name and builds cls(storage_config, kwargs) (storage/backend_factory.py); the
controller calls register_mem_pool_host(host_pool), backs pages up with
all(batch_set_v1(hashes, host_indices, extra_info)) (_page_set_zero_copy), and prefetches
with batch_exists(hashes, extra_info) per STORAGE_BATCH_SIZE pages (_storage_hit_query),
then batch_get_v1 and counting leading successes (_page_get_zero_copy)
(managers/cache_controller.py). Page hashes are SGLang's get_hash_str
(mem_cache/hicache_storage.py). The host pool below lays pages out as SGLang's
MHATokenToKVPoolHost does for page_first (kv_buffer [2, tokens, layers, heads, dim];
get_page_buffer_meta -> a K and a V address per page).

Usage: sglang_adapter_test.py BUILD_DIR
"""
import dataclasses
import hashlib
import importlib
import os
import sys
import unittest
from typing import List, Optional

import torch

BUILD = sys.argv.pop(1)
sys.path.insert(0, BUILD + "/python")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvpool  # noqa: E402
from kvpoold_process import KvpooldTestCase  # noqa: E402

STORAGE_BATCH_SIZE = 128


@dataclasses.dataclass
class HiCacheStorageConfig:  # the fields SGLang passes (hicache_storage.py at 001067ff)
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclasses.dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


def get_hash_str(token_ids, prior_hash=None):  # SGLang's SHA-256 page hash
    hasher = hashlib.sha256()
    if prior_hash:
        hasher.update(bytes.fromhex(prior_hash))
    for t in token_ids:
        hasher.update(t.to_bytes(4, byteorder="little", signed=False))
    return hasher.hexdigest()


class HostPool:
    """page_first MHA host pool: K then V halves, each [tokens, layers, heads, dim]."""
    layout = "page_first"

    def __init__(self, tokens=256, page_size=4, layers=2, heads=2, dim=64, mla=False):
        self.page_size, self.size, self.mla = page_size, tokens, mla
        self.per_token = layers * heads * dim * 2  # bf16
        self.kv_buffer = torch.zeros((1 if mla else 2, tokens, layers, heads, dim),
                                     dtype=torch.bfloat16)

    def get_page_buffer_meta(self, indices):
        base, idx = self.kv_buffer.data_ptr(), indices.tolist()
        ptrs = []
        for i in range(0, len(idx), self.page_size):
            k = base + idx[i] * self.per_token
            ptrs += [k] if self.mla else [k, k + self.size * self.per_token]
        return ptrs, [self.page_size * self.per_token] * len(ptrs)

    def fill(self, host_indices, seed):
        g = torch.Generator().manual_seed(seed)
        for half in range(self.kv_buffer.shape[0]):
            self.kv_buffer[half, host_indices] = torch.randn(
                (len(host_indices),) + tuple(self.kv_buffer.shape[2:]), generator=g,
                dtype=torch.float32).to(torch.bfloat16)

    def pages(self, host_indices):
        return self.kv_buffer[:, host_indices].clone()

    # The generic path's page calls (MHATokenToKVPoolHost: one flat tensor per page).
    def get_data_page(self, index, flat=True):
        return self.kv_buffer[:, index:index + self.page_size].flatten()

    def get_dummy_flat_data_page(self):
        return torch.zeros(self.kv_buffer[:, :self.page_size].numel(), dtype=self.kv_buffer.dtype)

    def set_from_flat_data_page(self, index, data_page):
        self.kv_buffer[:, index:index + self.page_size] = data_page.reshape(
            self.kv_buffer[:, index:index + self.page_size].shape)


class Fp4HostPool(HostPool):
    """A host pool without flat page addresses (SGLang's FP4 pools raise here)."""

    def get_page_buffer_meta(self, indices):
        raise NotImplementedError("FP4 host pool has no per-page buffer meta")


def create_dynamic_backend(extra, **cfg):
    """StorageBackendFactory._create_dynamic_backend, step by step."""
    for field in ("backend_name", "module_path", "class_name"):
        assert field in extra
    cls = getattr(importlib.import_module(extra["module_path"]), extra["class_name"])
    defaults = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                    attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                    is_page_first_layout=True, model_name="Qwen/Qwen3-0.6B")
    defaults.update(cfg)
    return cls(HiCacheStorageConfig(extra_config=extra, **defaults), {})


def attach(extra, host, **cfg):
    """HiCacheController.attach_storage_backend: build, register the host pool, then pick
    the page functions from extra_config["interface_v1"] (read after both)."""
    backend = create_dynamic_backend(extra, **cfg)
    backend.register_mem_pool_host(host)
    zero_copy = bool(extra.get("interface_v1", 0))
    return backend, zero_copy


class SGLangReplay(KvpooldTestCase):
    KVPOOLD = BUILD + "/kvpoold"

    def extra(self, **more):
        e = {"backend_name": "kvpool", "module_path": "kvpool.sglang",
             "class_name": "KvpoolHiCacheStorage", "address": self.d.address}
        e.update(more)
        return e

    def hashes(self, tokens, page):
        out, last = [], None
        for i in range(0, len(tokens) - page + 1, page):
            last = get_hash_str(tokens[i:i + page], last)
            out.append(last)
        return out

    def storage_hit_query(self, backend, hashes):
        """_storage_hit_query: batches of STORAGE_BATCH_SIZE, stop at the first short batch."""
        hit = []
        for start in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[start:start + STORAGE_BATCH_SIZE]
            n = backend.batch_exists(batch, HiCacheStorageExtraInfo(prefix_keys=None))
            hit += batch[:n]
            if n < len(batch):
                break
        return hit

    def page_get(self, backend, hashes, host_indices):
        """_page_get_zero_copy: leading successes count."""
        results = backend.batch_get_v1(hashes, host_indices, HiCacheStorageExtraInfo())
        n = 0
        for r in results:
            if not r:
                break
            n += 1
        return n

    def test_backup_then_prefetch_on_another_worker(self):
        tokens = list(range(1000, 1000 + 4 * 150))  # 150 pages: two hit-query batches
        hashes = self.hashes(tokens, 4)
        writer = create_dynamic_backend(self.extra())
        host = HostPool(tokens=1024)
        writer.register_mem_pool_host(host)
        idx = torch.arange(8, 8 + len(tokens), dtype=torch.int64)
        host.fill(idx, seed=1)
        self.assertTrue(all(writer.batch_set_v1(hashes, idx, HiCacheStorageExtraInfo())))
        # Backing the same pages up again (another request with the prefix): insert-only, OK.
        self.assertTrue(all(writer.batch_set_v1(hashes[:10], idx[:40], HiCacheStorageExtraInfo())))

        reader = create_dynamic_backend(self.extra())
        host2 = HostPool(tokens=1024)
        reader.register_mem_pool_host(host2)
        hit = self.storage_hit_query(reader, hashes)
        self.assertEqual(hit, hashes)
        dst = torch.arange(400, 400 + len(tokens), dtype=torch.int64)
        self.assertEqual(self.page_get(reader, hit, dst), len(hashes))
        self.assertTrue(torch.equal(host2.pages(dst), host.pages(idx)))  # bit-exact K and V

        # One lost fragment (page 3's V) ends the usable prefix at page 3.
        c = kvpool.Client(self.d.address, namespace="sglang")
        self.assertTrue(c.erase(kvpool.foreign_key(reader.root, "sglang", hashes[3] + ".1")))
        self.assertEqual(reader.batch_exists(hashes[:10]), 3)
        self.assertFalse(reader.exists(hashes[3]))
        self.assertTrue(reader.exists(hashes[2]))
        self.assertEqual(self.page_get(reader, hashes[:10], dst[:40]), 3)

    def test_other_model_or_shard_sees_nothing(self):
        tokens = list(range(64))
        hashes = self.hashes(tokens, 4)
        a = create_dynamic_backend(self.extra(), model_name="m-a", tp_size=2, tp_rank=0)
        host = HostPool()
        a.register_mem_pool_host(host)
        idx = torch.arange(0, 64, dtype=torch.int64)
        host.fill(idx, seed=2)
        self.assertTrue(all(a.batch_set_v1(hashes, idx)))
        for cfg in (dict(model_name="m-b", tp_size=2, tp_rank=0),
                    dict(model_name="m-a", tp_size=2, tp_rank=1)):
            b = create_dynamic_backend(self.extra(), **cfg)
            b.register_mem_pool_host(HostPool())
            self.assertEqual(b.batch_exists(hashes), 0, cfg)

    def test_mla_is_shared_across_tp_ranks(self):
        tokens = list(range(5000, 5032))
        hashes = self.hashes(tokens, 4)
        r1 = create_dynamic_backend(self.extra(), model_name="mla", is_mla_model=True,
                                    tp_size=2, tp_rank=1)
        host = HostPool(mla=True)
        r1.register_mem_pool_host(host)
        idx = torch.arange(0, 32, dtype=torch.int64)
        host.fill(idx, seed=3)
        self.assertTrue(all(r1.batch_set_v1(hashes, idx)))  # rank 1 skips the write...
        self.assertEqual(r1.batch_exists(hashes), 0)  # ...so nothing is there yet
        r0 = create_dynamic_backend(self.extra(), model_name="mla", is_mla_model=True,
                                    tp_size=2, tp_rank=0)
        r0.register_mem_pool_host(host)
        self.assertTrue(all(r0.batch_set_v1(hashes, idx)))
        self.assertEqual(r1.batch_exists(hashes), len(hashes))  # rank 1 reads rank 0's copy
        host2 = HostPool(mla=True)
        r1.register_mem_pool_host(host2)
        self.assertEqual(self.page_get(r1, hashes, idx), len(hashes))
        self.assertTrue(torch.equal(host2.pages(idx), host.pages(idx)))

    def generic_page_set(self, backend, host, hashes, host_indices, page):
        """_generic_page_set: one flat data page per hash."""
        data = [host.get_data_page(int(host_indices[i * page])) for i in range(len(hashes))]
        return backend.batch_set(hashes, data)

    def generic_page_get(self, backend, host, hashes, host_indices, page):
        """_generic_page_get: dummy pages in, leading non-None results copied back."""
        got = backend.batch_get(hashes, [host.get_dummy_flat_data_page() for _ in hashes])
        n = 0
        for i in range(len(hashes)):
            if got[i] is None:
                break
            host.set_from_flat_data_page(int(host_indices[i * page]), got[i])
            n += 1
        return n

    def test_zero_copy_is_chosen_without_interface_v1_in_the_launch_line(self):
        extra = self.extra()
        self.assertNotIn("interface_v1", extra)
        _, zero_copy = attach(extra, HostPool())
        self.assertTrue(zero_copy)  # SGLang would call batch_get_v1/batch_set_v1
        self.assertEqual(extra["interface_v1"], 1)

    def test_generic_path_hits_what_it_wrote(self):
        # The issue: pages written by batch_set were never found by batch_exists (0 hits).
        for host_cls, extra in ((HostPool, self.extra(interface_v1=0)),  # forced off
                                (Fp4HostPool, self.extra())):  # no page addresses: falls back
            tokens = list(range(7000, 7000 + 4 * 40))
            hashes = self.hashes(tokens, 4)
            writer, zero_copy = attach(dict(extra), host_cls(tokens=512))
            self.assertFalse(zero_copy, host_cls.__name__)
            host = writer.mem_pool_host
            idx = torch.arange(0, len(tokens), dtype=torch.int64)
            host.fill(idx, seed=5)
            self.assertTrue(self.generic_page_set(writer, host, hashes, idx, 4))
            reader, _ = attach(dict(extra), host_cls(tokens=512))
            hit = self.storage_hit_query(reader, hashes)
            self.assertEqual(len(hit), len(hashes), host_cls.__name__)  # hits = pages written
            dst = torch.arange(100, 100 + len(tokens), dtype=torch.int64)
            self.assertEqual(self.generic_page_get(reader, reader.mem_pool_host, hit, dst, 4), len(hashes))
            self.assertTrue(torch.equal(reader.mem_pool_host.pages(dst), host.pages(idx)))
            # Zero-copy and flat pages are stored differently: neither sees the other's.
            v1, _ = attach(self.extra(), HostPool())
            self.assertEqual(v1.batch_exists(hashes), 0)

    def test_context_parallel_ranks_keep_their_own_slices(self):
        tokens = list(range(9000, 9032))
        hashes = self.hashes(tokens, 4)
        idx = torch.arange(0, 32, dtype=torch.int64)
        ranks = []
        for cp in (0, 1):
            b, _ = attach(self.extra(), HostPool(), attn_cp_rank=cp, attn_cp_size=2)
            b.mem_pool_host.fill(idx, seed=10 + cp)  # each rank's slice differs
            self.assertTrue(all(b.batch_set_v1(hashes, idx)))
            ranks.append(b)
        for cp, b in enumerate(ranks):
            out = HostPool()
            b.register_mem_pool_host(out)
            self.assertEqual(self.page_get(b, hashes, idx), len(hashes))
            want = HostPool()
            want.fill(idx, seed=10 + cp)
            self.assertTrue(torch.equal(out.pages(idx), want.pages(idx)), "CP rank %d" % cp)

    def test_unsupported_pools_and_head_splitting_are_refused_at_startup(self):
        b, _ = attach(self.extra(), HostPool())
        b.register_mem_host_pool_v2(HostPool(), "kv")  # the KV pool itself is fine
        for name in ("indexer", "mamba", "swa"):
            with self.assertRaisesRegex(RuntimeError, name):
                b.register_mem_host_pool_v2(HostPool(), name)
        with self.assertRaises(NotImplementedError):
            b.batch_exists_v2(["aa"])
        with self.assertRaisesRegex(ValueError, "tp_lcm_size"):
            create_dynamic_backend(self.extra(), tp_lcm_size=4, should_split_heads=True)

    def test_legacy_tensor_calls_and_unreachable_pool(self):
        b = create_dynamic_backend(self.extra())
        b.register_mem_pool_host(HostPool())
        page = torch.arange(256, dtype=torch.float32)
        self.assertTrue(b.set("legacy-1", page))
        out = torch.zeros(256, dtype=torch.float32)
        self.assertIs(b.get("legacy-1", out), out)
        self.assertTrue(torch.equal(out, page))
        self.assertIsNone(b.get("legacy-missing", torch.zeros(256)))
        # A pool that is down: misses and False, never an exception or a hang.
        dead = create_dynamic_backend(self.extra(address="127.0.0.1:1", timeout_ms=300))
        dead.register_mem_pool_host(HostPool())
        idx = torch.arange(0, 8, dtype=torch.int64)
        self.assertEqual(dead.batch_exists(["aa" * 32, "bb" * 32]), 0)
        self.assertEqual(dead.batch_get_v1(["aa" * 32, "bb" * 32], idx), [False, False])
        self.assertEqual(dead.batch_set_v1(["aa" * 32, "bb" * 32], idx), [False, False])


if __name__ == "__main__":
    unittest.main()
