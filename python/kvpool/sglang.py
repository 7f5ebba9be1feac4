"""kvpool as an SGLang HiCache storage backend (the L3 tier under HiCache's host pool).

Launch SGLang with:

    --enable-hierarchical-cache --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "kvpool",
        "module_path": "kvpool.sglang", "class_name": "KvpoolHiCacheStorage",
        "address": "127.0.0.1:7400"}'

("address" may be "unix:/path/kvpoold.sock"; "members" or "etcd" select the pod pool
instead; "tenant", "token", "dtype" and "layout" refine the namespace.)

Written against SGLang's python/sglang/srt/mem_cache/hicache_storage.py (HiCacheStorage,
HiCacheStorageConfig), storage/backend_factory.py (the "dynamic" backend is built as
cls(storage_config, kwargs)) and managers/cache_controller.py (_storage_hit_query ->
batch_exists, _page_get_zero_copy -> batch_get_v1, _page_set_zero_copy -> batch_set_v1),
sgl-project/sglang main of 2026-11 (v0.5.x).

Keys: each page hash SGLang computes (get_hash_str) names a page; the host pool hands over
the page as one or more buffers (K and V, or per layer); fragment j of page h is stored under
foreign_key(root, "sglang", h) for j = 0 and foreign_key(root, "sglang", h + "." + str(j))
after, root being the schema-v2 namespace of model, layout, dtype and TP/PP shard (MLA
models share one copy across TP ranks, as SGLang's own backends do). Puts are insert-only:
a page already held is not rewritten. Each page's first fragment names the previous page as
its parent, so the pool evicts chains leaf first.
"""
import threading

import torch

from . import Client, Namespace, Pool, foreign_key

try:  # the real base class when SGLang is installed (backend_factory checks issubclass)
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
except ImportError:  # pragma: no cover - SGLang is not installed on the build machine
    HiCacheStorage = object


class KvpoolHiCacheStorage(HiCacheStorage):
    def __init__(self, storage_config, kwargs=None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        mla = bool(storage_config.is_mla_model)
        layout = extra.get("layout") or "sglang/%s/%s" % (
            "mla" if mla else "mha",
            "page_first" if storage_config.is_page_first_layout else "layer_first")
        self.namespace = Namespace(
            model=storage_config.model_name or "unknown-model",
            tenant=extra.get("tenant", "default"), layout=layout, dtype=extra.get("dtype", ""),
            tp_rank=0 if mla else storage_config.tp_rank,
            tp_size=1 if mla else storage_config.tp_size,
            pp_rank=storage_config.pp_rank, pp_size=storage_config.pp_size)
        self.root = self.namespace.root()
        # MLA's latent cache is the same on every TP rank: only rank 0 writes it.
        self.skip_writes = mla and storage_config.tp_rank != 0
        self._extra = extra
        self._local = threading.local()  # a Client is used by one thread at a time
        self._fragments = 1
        self.mem_pool_host = None
        self._connect()  # fail at startup, not on the first prefetch, if misconfigured

    # -- connection --------------------------------------------------------------------
    def _connect(self):
        c = getattr(self._local, "client", None)
        if c is None:
            e = self._extra
            timeout = int(e.get("timeout_ms", 5000))
            if e.get("members") or e.get("etcd"):
                c = Pool(members=e.get("members", ""), etcd=e.get("etcd", ""),
                         namespace="sglang")
            else:
                c = Client(e.get("address", "127.0.0.1:7400"), namespace="sglang",
                           token=e.get("token", ""), timeout_ms=timeout)
            self._local.client = c
        return c

    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host
        # How many buffers the host pool hands over per page (K and V; per layer too in
        # layer_first): batch_exists needs it before any page was read or written.
        page = torch.arange(mem_pool_host.page_size, dtype=torch.int64)
        ptrs, _ = mem_pool_host.get_page_buffer_meta(page)
        self._fragments = max(1, len(ptrs))

    # -- keys ----------------------------------------------------------------------------
    def _fragment_keys(self, page_hash, n):
        return [foreign_key(self.root, "sglang", page_hash if j == 0 else "%s.%d" % (page_hash, j))
                for j in range(n)]

    def _page_buffers(self, keys, host_indices):
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if isinstance(sizes, int):
            sizes = [sizes] * len(ptrs)
        if not keys or len(ptrs) % len(keys):
            raise ValueError("host pool returned %d buffers for %d pages" % (len(ptrs), len(keys)))
        return [int(p) for p in ptrs], [int(s) for s in sizes], len(ptrs) // len(keys)

    # -- the zero-copy v1 interface HiCache's controller calls ---------------------------
    def batch_set_v1(self, keys, host_indices, extra_info=None):
        if not keys:
            return []
        if self.skip_writes:
            return [True] * len(keys)
        ptrs, sizes, per = self._page_buffers(keys, host_indices)
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info else None
        parent = self._fragment_keys(prefix[-1], 1)[0] if prefix and isinstance(prefix, list) else None
        kv_keys, parents = [], []
        for h in keys:
            frag = self._fragment_keys(h, per)
            kv_keys += frag
            parents += [parent] + [frag[0]] * (per - 1)
            parent = frag[0]
        status = self._connect().batch_put_ptrs(kv_keys, ptrs, sizes, parents)
        return [all(s in ("OK", "Exists") for s in status[i * per:(i + 1) * per])
                for i in range(len(keys))]

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        if not keys:
            return []
        ptrs, sizes, per = self._page_buffers(keys, host_indices)
        kv_keys = [k for h in keys for k in self._fragment_keys(h, per)]
        got = self._connect().batch_get_ptrs(kv_keys, ptrs, sizes)
        return [all(got[i * per + j] == sizes[i * per + j] for j in range(per))
                for i in range(len(keys))]

    def batch_exists(self, keys, extra_info=None):
        """How many leading pages are held: one round trip (a probe; nothing is pinned)."""
        if not keys:
            return 0
        per = self._fragments
        chain = [k for h in keys for k in self._fragment_keys(h, per)]
        c = self._connect()
        if hasattr(c, "match_prefix"):
            held = c.match_prefix(chain)
        else:
            found = c.batch_exists(chain)
            held = found.index(False) if False in found else len(found)
        return held // per

    def exists(self, key):
        return self.batch_exists([key]) == 1

    # -- the legacy tensor interface (abstract in HiCacheStorage) ------------------------
    def get(self, key, target_location=None, target_sizes=None):
        if target_location is None:
            return None
        flat = target_location.contiguous().view(torch.uint8).reshape(-1)
        n = self._connect().get(self._fragment_keys(key, 1)[0], flat)
        return target_location if n == flat.numel() else None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        return [self.get(k, t) for k, t in zip(keys, target_locations or [None] * len(keys))]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        if self.skip_writes:
            return True
        t = value if value is not None else target_location
        flat = t.contiguous().view(torch.uint8).reshape(-1)
        return self._connect().put(self._fragment_keys(key, 1)[0], flat) in ("OK", "Exists")

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        pages = values if values is not None else target_locations
        return all(self.set(k, v) for k, v in zip(keys, pages))

    def clear(self):
        # The pool is shared by the pod: one engine restarting must not empty it.
        pass

    def get_stats(self):
        return None
