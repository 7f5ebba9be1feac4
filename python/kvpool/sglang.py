"""kvpool as an SGLang HiCache storage backend (the L3 tier under HiCache's host pool).

Launch SGLang with:

    --enable-hierarchical-cache --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "kvpool",
        "module_path": "kvpool.sglang", "class_name": "KvpoolHiCacheStorage",
        "address": "127.0.0.1:7400", "interface_v1": 1}'

("address" may be "unix:/path/kvpoold.sock"; "members" or "etcd" select the pod pool
instead; "tenant", "token", "dtype" and "layout" refine the namespace.) "interface_v1": 1
selects SGLang's zero-copy calls (batch_get_v1/batch_set_v1); the backend also sets it in
the extra config it is given, which SGLang reads after building the backend, so a launch
line without it still takes the zero-copy path. "interface_v1": 0 forces the generic calls
(batch_get/batch_set of whole flat pages); so does a host pool whose get_page_buffer_meta
fails (FP4 pools), which the backend detects when the pool is registered.

Checked against sgl-project/sglang at 001067fffe33 (v0.5.x): mem_cache/hicache_storage.py
(HiCacheStorage, HiCacheStorageConfig with attn_cp_*, dp_*, tp_lcm_size,
should_split_heads), storage/backend_factory.py (the "dynamic" backend is built as
cls(storage_config, kwargs)) and managers/cache_controller.py (attach_storage_backend picks
_page_get_zero_copy/_page_set_zero_copy when extra_config["interface_v1"] is set, else
_generic_page_get/_generic_page_set; _storage_hit_query -> batch_exists).

Keys: each page hash SGLang computes (get_hash_str) names a page. On the zero-copy path the
host pool hands over the page as one or more buffers (K and V, or per layer); fragment j of
page h is stored under foreign_key(root, "sglang", h) for j = 0 and
foreign_key(root, "sglang", h + "." + str(j)) after. On the generic path a page is one flat
value under the first key. root is the schema-v2 namespace of model, layout (MHA or MLA,
page_first or layer_first, zero-copy or flat, and the context-parallel rank when CP > 1:
CP ranks hold disjoint slices of every page), dtype and TP/PP shard. MLA models share one
copy across TP ranks, as SGLang's own backends do; attention-DP replicas share pages too
(the same tokens give the same KV on every replica). Puts are insert-only: a page already
held is not rewritten. Each page's first fragment names the previous page as its parent,
so the pool evicts chains leaf first.

Not supported, refused at startup with the reason: hybrid models' extra host pools (SWA,
Mamba, DSA indexer: register_mem_host_pool_v2 for any pool but "kv") and head splitting
across heterogeneous TP sizes (tp_lcm_size with should_split_heads).
"""
import logging
import threading

import torch

from . import Client, Namespace, Pool, Timeout, Unavailable, foreign_key

logger = logging.getLogger(__name__)

# kvpoold (or every member of the pool) did not answer: to SGLang that is pages not found and
# writes not done, never an exception in its cache controller's threads.
_NO_ANSWER = (Unavailable, Timeout)


def _no_answer(what, e):
    logger.warning("kvpool.sglang: %s got no answer (%s); treated as a miss", what, e)

try:  # the real base class when SGLang is installed (backend_factory checks issubclass)
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
except ImportError:  # pragma: no cover - SGLang is not installed on the build machine
    HiCacheStorage = object


class KvpoolHiCacheStorage(HiCacheStorage):
    def __init__(self, storage_config, kwargs=None):
        if getattr(storage_config, "should_split_heads", False):
            raise ValueError(
                "kvpool.sglang: tp_lcm_size=%s splits pages by KV head across TP sizes, which "
                "this backend does not support; launch without tp_lcm_size"
                % getattr(storage_config, "tp_lcm_size", None))
        self._given = storage_config.extra_config  # SGLang reads interface_v1 from it later
        extra = dict(self._given or {})
        self._config = storage_config
        self._extra = extra
        # MLA's latent cache is the same on every TP rank: only rank 0 writes it.
        self._mla = bool(storage_config.is_mla_model)
        self.skip_writes = self._mla and storage_config.tp_rank != 0
        self._local = threading.local()  # a Client is used by one thread at a time
        self._fragments = 1
        self.mem_pool_host = None
        self._set_mode(bool(int(extra.get("interface_v1", 1))))
        self._connect()  # fail at startup, not on the first prefetch, if misconfigured

    def _set_mode(self, v1):
        """Zero-copy (v1) or whole flat pages: told to SGLang, and part of the namespace
        (the two store a page differently)."""
        self._v1 = v1
        if isinstance(self._given, dict):
            self._given["interface_v1"] = 1 if v1 else 0
        cfg, extra = self._config, self._extra
        layout = (extra.get("layout") or "sglang/%s/%s" % (
            "mla" if self._mla else "mha",
            "page_first" if cfg.is_page_first_layout else "layer_first")) + (
            "/v1" if v1 else "/flat")
        cp_size = int(getattr(cfg, "attn_cp_size", 1) or 1)
        if cp_size > 1:  # each CP rank holds a disjoint slice of every page
            layout += "/cp%d-%d" % (int(getattr(cfg, "attn_cp_rank", 0)), cp_size)
        self.namespace = Namespace(
            model=cfg.model_name or "unknown-model",
            tenant=extra.get("tenant", "default"), layout=layout, dtype=extra.get("dtype", ""),
            tp_rank=0 if self._mla else cfg.tp_rank,
            tp_size=1 if self._mla else cfg.tp_size,
            pp_rank=cfg.pp_rank, pp_size=cfg.pp_size)
        self.root = self.namespace.root()

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
        if not self._v1:
            return
        # How many buffers the host pool hands over per page (K and V; per layer too in
        # layer_first): batch_exists needs it before any page was read or written. A pool
        # that cannot say (FP4) takes the generic whole-page path instead.
        try:
            page = torch.arange(mem_pool_host.page_size, dtype=torch.int64)
            ptrs, _ = mem_pool_host.get_page_buffer_meta(page)
            self._fragments = max(1, len(ptrs))
        except Exception as e:  # noqa: BLE001 - any failure means: no page addresses
            logger.warning("kvpool.sglang: host pool %s gives no page buffers (%s); using "
                           "whole-page transfers (interface_v1 = 0)", type(mem_pool_host).__name__, e)
            self._set_mode(False)
            self._fragments = 1

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        name = str(getattr(host_pool_name, "value", host_pool_name))
        if name != "kv":
            raise RuntimeError(
                "kvpool.sglang: the %r host pool (hybrid models: SWA, Mamba, DSA indexer) is "
                "not supported; serve this model without the kvpool storage backend" % name)
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def _refuse_v2(self, *args, **kwargs):
        raise NotImplementedError("kvpool.sglang: hybrid-model (v2) transfers are not supported")

    batch_exists_v2 = batch_get_v2 = batch_set_v2 = _refuse_v2

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
        try:
            status = self._connect().batch_put_ptrs(kv_keys, ptrs, sizes, parents)
        except _NO_ANSWER as e:
            _no_answer("batch_set_v1", e)
            return [False] * len(keys)
        return [all(s in ("OK", "Exists") for s in status[i * per:(i + 1) * per])
                for i in range(len(keys))]

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        if not keys:
            return []
        ptrs, sizes, per = self._page_buffers(keys, host_indices)
        kv_keys = [k for h in keys for k in self._fragment_keys(h, per)]
        try:
            got = self._connect().batch_get_ptrs(kv_keys, ptrs, sizes)
        except _NO_ANSWER as e:
            _no_answer("batch_get_v1", e)
            return [False] * len(keys)
        return [all(got[i * per + j] == sizes[i * per + j] for j in range(per))
                for i in range(len(keys))]

    def batch_exists(self, keys, extra_info=None):
        """How many leading pages are held: one round trip (a probe; nothing is pinned)."""
        if not keys:
            return 0
        per = self._fragments if self._v1 else 1
        chain = [k for h in keys for k in self._fragment_keys(h, per)]
        try:
            held = self._connect().match_prefix(chain)
        except _NO_ANSWER as e:
            _no_answer("batch_exists", e)
            return 0
        return held // per

    def exists(self, key):
        return self.batch_exists([key]) == 1

    # -- the legacy tensor interface (abstract in HiCacheStorage) ------------------------
    def get(self, key, target_location=None, target_sizes=None):
        if target_location is None:
            return None
        flat = target_location.contiguous().view(torch.uint8).reshape(-1)
        try:
            n = self._connect().get(self._fragment_keys(key, 1)[0], flat)
        except _NO_ANSWER as e:
            _no_answer("get", e)
            return None
        return target_location if n == flat.numel() else None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """The generic path (_generic_page_get): each page into its flat target, in one
        round trip; the target, or None for a miss (SGLang stops at the first)."""
        if not keys:
            return []
        targets = target_locations or [None] * len(keys)
        flats = [None if t is None else t.contiguous().view(torch.uint8).reshape(-1) for t in targets]
        ks = [self._fragment_keys(h, 1)[0] for h in keys]
        got = [-1] * len(keys)
        have = [i for i, f in enumerate(flats) if f is not None]
        if have:
            try:
                sizes = self._connect().batch_get([ks[i] for i in have], [flats[i] for i in have])
            except _NO_ANSWER as e:
                _no_answer("batch_get", e)
                sizes = [-1] * len(have)
            for i, n in zip(have, sizes):
                got[i] = n
        return [t if f is not None and got[i] == f.numel() else None
                for i, (t, f) in enumerate(zip(targets, flats))]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return self.batch_set([key], [value if value is not None else target_location])

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """The generic path (_generic_page_set): whole flat pages, chained, one round trip."""
        if not keys:
            return True
        if self.skip_writes:
            return True
        pages = values if values is not None else target_locations
        flats = [t.contiguous().view(torch.uint8).reshape(-1) for t in pages]
        ks = [self._fragment_keys(h, 1)[0] for h in keys]
        try:
            status = self._connect().batch_put(ks, flats, parents=[None] + ks[:-1])
        except _NO_ANSWER as e:
            _no_answer("batch_set", e)
            return False
        return all(s in ("OK", "Exists") for s in status)

    def clear(self):
        # The pool is shared by the pod: one engine restarting must not empty it.
        pass

    def get_stats(self):
        return None
