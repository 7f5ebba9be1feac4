"""kvpool as an LMCache L2 tier, through LMCache's native_plugin adapter.

LMCache configuration (multiprocess mode; LMCache dev of 2026-11):

    --l2-adapter '{"type": "native_plugin", "module_path": "kvpool.lmcache",
                   "class_name": "Connector",
                   "adapter_params": {"address": "127.0.0.1:7400"}}'

adapter_params: address ("host:port" or "unix:/path"), namespace ("lmcache"), token,
timeout_ms (5000), workers (2), shared_memory_bytes (0). The connector is native code
(kvpool._kvpool.lmcache); LMCache's NativeConnectorL2Adapter drives it. vLLM reaches kvpool
through LMCache this way, or with no code at all through LMCache's Redis connector pointed
at kvpoold's RESP port.
"""
from ._kvpool import lmcache as _native

Connector = _native.Connector

__all__ = ["Connector"]
