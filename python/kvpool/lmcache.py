"""kvpool as an LMCache L2 tier, through LMCache's native_plugin adapter.

LMCache configuration (multiprocess mode; LMCache dev of 2026-11):

    --l2-adapter '{"type": "native_plugin", "module_path": "kvpool.lmcache",
                   "class_name": "Connector",
                   "adapter_params": {"address": "127.0.0.1:7400"}}'

adapter_params: address ("host:port" or "unix:/path"), namespace ("lmcache"), token,
timeout_ms (5000), workers (2), shared_memory_bytes (0), lookup_lease_ms (10000). The connector is native code
(kvpool._kvpool.lmcache); LMCache's NativeConnectorL2Adapter drives it. vLLM reaches kvpool
through LMCache this way, or with no code at all through LMCache's Redis connector pointed
at kvpoold's RESP port.

Checked against LMCache's lmcache/v1/distributed/l2_adapters/native_plugin_l2_adapter.py and
native_connector_l2_adapter.py (dev of 2026-11; issue 17 re-read them at 68c638a6 and found
every method matching). LMCache's lookup is "lookup and lock" (it assumes a chunk found by
submit_batch_exists stays until its load): each chunk found is held by kvpoold (a lease) until
the get that loads it, or for lookup_lease_ms if none comes; kvpoold bounds what leases hold
(--max-lease, at most a quarter of its DRAM; past it the leases due soonest go). With
lookup_lease_ms = 0 exists is a plain probe and a chunk evicted before its load is a miss.
Keys are LMCache's object-key strings, so LMCache's default `builtin` chunk hash (Python's
hash(), seeded per process) names chunks no other process can find: set
`pre_caching_hash_algorithm: sha256_cbor` in LMCache's config for a shared pool
(docs/KEYS.md).
"""
from ._kvpool import lmcache as _native

Connector = _native.Connector

__all__ = ["Connector"]
