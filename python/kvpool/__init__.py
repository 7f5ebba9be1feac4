"""kvpool: a context memory store for LLM inference (KV-cache blocks).

Key            a 128-bit block key; chain_keys() / namespace_root() derive them (docs/KEYS.md)
Namespace      schema v2 namespace (tenant, model, layout, dtype, TP/PP shard, salt)
engines        vLLM / LMCache / SGLang / Dynamo block hashes from token ids
sglang         SGLang HiCache storage backend (kvpool.sglang.KvpoolHiCacheStorage)
lmcache        LMCache native_plugin L2 connector (kvpool.lmcache.Connector)
vllm           a secondary tier of vLLM's tiered KV offloading (kvpool.vllm.KvpoolTier)
Store          the embedded tiered store (DRAM + optional flash file)
Client         connections to one kvpoold ("host:port" or "unix:/path"), shareable by threads
Pool           many kvpoold nodes as one store (static members or etcd)
NearCache      a pinned local cache in front of either; prestage() pulls chains in early
gpu            blocks into and out of an engine's paged KV cache in GPU memory (Loader,
               Layout.vllm / split / cross_layer; gpu.available() says whether a GPU is here)

Values are any buffer (bytes, bytearray, numpy arrays, torch CPU tensors): gets write into
the caller's array and puts read from it without copies; I/O releases the GIL. A miss is
None (get), -1 (batch_get) or False (exists), never an exception; a probe (exists,
batch_exists) whose server did not answer raises Unavailable (a ConnectionError) or Timeout
(a TimeoutError) instead of answering False.
"""
from ._kvpool import (Client, Key, LayerStream, Namespace, NearCache, Pool, Store, Timeout, Unavailable, chain_keys,
                      engines, foreign_key, gpu, layer_key, namespace_root, pool_key)

__all__ = ["Client", "Key", "LayerStream", "Namespace", "NearCache", "Pool", "Store", "Timeout", "Unavailable",
           "chain_keys", "engines", "foreign_key", "gpu", "layer_key", "namespace_root", "pool_key"]
