#!/usr/bin/env python3
"""kvpool.engines and kvpool.Namespace against independent implementations.

Each engine's scheme is re-implemented here in plain Python, the way the engine's own source
does it (hashlib, pickle, Debian's python3-cbor2 and python3-xxhash), and compared with the
C++ translators on random token sequences. Sources: vLLM vllm/utils/hashing.py and
vllm/v1/core/kv_cache_utils.py (hash_block_tokens, init_none_hash); LMCache
lmcache/v1/token_database.py; SGLang python/sglang/srt/mem_cache/hicache_storage.py
(get_hash_str); Dynamo lib/kv-router (compute_block_hash_for_seq).

Usage: engine_keys_test.py BUILD_DIR
"""
import hashlib
import pickle
import random
import struct
import sys
import unittest

import cbor2
import xxhash

sys.path.insert(0, sys.argv.pop(1) + "/python")
import kvpool  # noqa: E402
from kvpool import engines  # noqa: E402

# vLLM's hash functions (vllm/utils/hashing.py).
VLLM = {
    "sha256": lambda o: hashlib.sha256(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL)).digest(),
    "sha256_cbor": lambda o: hashlib.sha256(cbor2.dumps(o, canonical=True)).digest(),
    "xxhash": lambda o: xxhash.xxh3_128_digest(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL)),
    "xxhash_cbor": lambda o: xxhash.xxh3_128_digest(cbor2.dumps(o, canonical=True)),
}


def vllm_chain(algo, seed, tokens, block_size):
    fn = VLLM[algo]
    parent = fn(seed)  # init_none_hash with PYTHONHASHSEED set
    out = []
    for i in range(0, len(tokens) - block_size + 1, block_size):
        parent = fn((parent, tuple(tokens[i:i + block_size]), None))  # hash_block_tokens
        out.append(parent)
    return out


def lmcache_chain(algo, seed, tokens, chunk):
    fn = VLLM[algo]
    prefix = fn(seed)
    out = []
    for i in range(0, len(tokens), chunk):  # save_unfull_chunk: the tail chunk too
        prefix = fn((prefix, tuple(tokens[i:i + chunk]), None))
        out.append(prefix)
    return out


def sglang_chain(tokens, page, xxh3=False):
    out, prior = [], None
    for i in range(0, len(tokens) - page + 1, page):
        buf = (bytes.fromhex(prior) if prior else b"") + b"".join(
            t.to_bytes(4, "little", signed=False) for t in tokens[i:i + page])
        prior = (format(xxhash.xxh3_64_intdigest(buf, seed=1337), "016x") if xxh3
                 else hashlib.sha256(buf).hexdigest())
        out.append(prior)
    return out


def dynamo_chain(tokens, bs):
    local = [xxhash.xxh3_64_intdigest(struct.pack(f"<{bs}I", *tokens[i:i + bs]), seed=1337)
             for i in range(0, len(tokens) - bs + 1, bs)]
    seq = []
    for h in local:
        seq.append(h if not seq else xxhash.xxh3_64_intdigest(struct.pack("<QQ", seq[-1], h),
                                                              seed=1337))
    return local, seq


def random_tokens(rng, n):
    # Mostly vocabulary-sized ids, some at the encodings' edges.
    edges = [0, 23, 24, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1]
    return [rng.choice(edges) if rng.random() < 0.1 else rng.randrange(0, 152064)
            for _ in range(n)]


class EngineHashes(unittest.TestCase):
    def setUp(self):
        self.rng = random.Random(20261203)

    def test_vllm_all_algorithms(self):
        for algo in VLLM:
            for seed in ("0", "42"):
                for n, bs in ((0, 16), (15, 16), (64, 16), (100, 16), (1024, 512), (40, 1),
                              (6, 3)):
                    toks = random_tokens(self.rng, n)
                    got = engines.vllm_block_hashes(algo, seed, toks, bs)
                    self.assertEqual(got, vllm_chain(algo, seed, toks, bs), (algo, seed, n, bs))
            self.assertEqual(engines.vllm_none_hash(algo, "0"), VLLM[algo]("0"))

    def test_vllm_external_hash(self):
        d = VLLM["sha256_cbor"]("0")
        self.assertEqual(engines.vllm_external_hash(d),
                         int.from_bytes(d, byteorder="big") & ((1 << 64) - 1))

    def test_lmcache_chunks(self):
        for algo in ("sha256_cbor", "xxhash"):
            for n in (0, 255, 256, 700):
                toks = random_tokens(self.rng, n)
                self.assertEqual(engines.lmcache_chunk_hashes(algo, "0", toks),
                                 lmcache_chain(algo, "0", toks, 256))

    def test_sglang_pages(self):
        for n, page in ((0, 64), (63, 64), (640, 64), (100, 1)):
            toks = random_tokens(self.rng, n)
            self.assertEqual(engines.sglang_page_hashes(toks, page), sglang_chain(toks, page))
            self.assertEqual(engines.sglang_page_hashes(toks, page, xxh3=True),
                             sglang_chain(toks, page, xxh3=True))

    def test_dynamo_blocks(self):
        for n, bs in ((0, 16), (160, 16), (77, 8)):
            toks = random_tokens(self.rng, n)
            local, seq = engines.dynamo_block_hashes(toks, bs)
            self.assertEqual((local, seq), dynamo_chain(toks, bs))

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            engines.vllm_block_hashes("md5", "0", [1, 2], 1)
        with self.assertRaises(ValueError):
            engines.sglang_page_hashes([1], 0)
        with self.assertRaises(ValueError):
            kvpool.Namespace(model="m", tp_rank=2, tp_size=2)


class NamespaceSchema(unittest.TestCase):
    def test_root_byte_layout(self):
        # docs/KEYS.md, schema v2, re-derived here from the document's description.
        def field(s):
            b = s.encode()
            return struct.pack("<I", len(b)) + b
        ns = kvpool.Namespace(model="Qwen/Qwen3-8B@main", tenant="acme", layout="mha/p16",
                              dtype="fp8_e4m3", tp_rank=1, tp_size=4, pp_rank=0, pp_size=2,
                              salt="s1")
        buf = (b"kvpool/ns/v2" + field("acme") + field("Qwen/Qwen3-8B@main") +
               field("mha/p16") + field("fp8_e4m3") + struct.pack("<IIII", 1, 4, 0, 2) +
               field("s1"))
        d = xxhash.xxh3_128_intdigest(buf)
        self.assertEqual(ns.root().hex(), "%032x" % d)
        # Block keys chain from the root as in schema v1.
        toks = list(range(32))
        keys = ns.chain_keys(toks, 16)
        self.assertEqual(keys, kvpool.chain_keys(ns.root(), toks, 16))

    def test_foreign_key_layout(self):
        ns = kvpool.Namespace(model="m")
        root = ns.root()
        h = "ab" * 32
        buf = struct.pack("<QQ", root.hi, root.lo) + b"foreign/sglang\0" + h.encode()
        self.assertEqual(kvpool.foreign_key(root, "sglang", h).hex(),
                         "%032x" % xxhash.xxh3_128_intdigest(buf))


if __name__ == "__main__":
    unittest.main()
