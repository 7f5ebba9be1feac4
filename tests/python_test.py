#!/usr/bin/python3
"""The kvpool Python module (build/python/kvpool) against an independent implementation of
the key derivation (python3-xxhash), numpy and torch buffers, and a real kvpoold.

usage: python_test.py BUILD_DIR      (uses BUILD_DIR/python and BUILD_DIR/kvpoold)
"""
import os
import struct
import subprocess
import shutil
import sys
import tempfile
import threading
import time
import unittest

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
sys.path.insert(0, os.path.join(BUILD, "python"))

import numpy as np  # noqa: E402
import xxhash  # noqa: E402

import kvpool  # noqa: E402
from kvpoold_process import Kvpoold, KvpooldTestCase  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:  # python3-torch is optional here; the torch tests say so
    torch = None


def ref_key(digest128):
    """A Key from XXH3-128's integer digest: hi = high 64 bits."""
    return kvpool.Key(digest128 >> 64, digest128 & ((1 << 64) - 1))


def ref_root(ns):
    return ref_key(xxhash.xxh3_128_intdigest(("kvpool/ns/v1/" + ns).encode()))


def ref_chain(parent, tokens, block):
    """docs/KEYS.md: key = XXH3_128(parent16 || tokens as LE u32); parent16 = hi then lo,
    each little-endian. The all-zero key maps to {0, 1}."""
    keys = []
    for i in range(len(tokens) // block):
        data = struct.pack("<QQ", parent.hi, parent.lo) + struct.pack(f"<{block}I", *tokens[i * block:(i + 1) * block])
        k = ref_key(xxhash.xxh3_128_intdigest(data))
        if k.hi == 0 and k.lo == 0:
            k = kvpool.Key(0, 1)
        keys.append(k)
        parent = k
    return keys


def Daemon(extra=()):
    return Kvpoold(os.path.join(BUILD, "kvpoold"), extra=extra, resp=False)

class Keys(unittest.TestCase):
    def test_chain_keys_match_an_independent_implementation(self):
        for ns, n, block in [("default", 64, 16), ("tenant/llama-3.1-8b/bf16", 1000, 16), ("x", 77, 7)]:
            tokens = [(i * 2654435761) % 128256 for i in range(n)]
            self.assertEqual(kvpool.namespace_root(ns), ref_root(ns))
            got = kvpool.chain_keys(ns, tokens, block)
            self.assertEqual(len(got), n // block)  # the partial last block has no key
            self.assertEqual(got, ref_chain(ref_root(ns), tokens, block))
        self.assertEqual(kvpool.Key.from_bytes(b"hello"), ref_key(xxhash.xxh3_128_intdigest(b"hello")))
        k = kvpool.chain_keys("default", list(range(16)), 16)[0]
        self.assertEqual(kvpool.Key.from_hex(k.hex()), k)
        self.assertEqual(len({k, kvpool.Key(k.hi, k.lo)}), 1)
        with self.assertRaises(ValueError):
            kvpool.chain_keys("default", [1, 2], 0)


class Embedded(unittest.TestCase):
    def setUp(self):
        self.s = kvpool.Store(dram_bytes=64 << 20)

    def test_numpy_round_trip_without_copies_into_the_callers_array(self):
        keys = kvpool.chain_keys("np", list(range(16 * 8)), 16)
        values = [np.random.default_rng(i).random(4096, dtype=np.float32) for i in range(8)]
        self.assertEqual(self.s.batch_put(keys, values), ["OK"] * 8)
        self.assertEqual(self.s.put(keys[0], values[0]), "Exists")  # insert-only by default
        outs = [np.zeros(4096, np.float32) for _ in range(8)]
        self.assertEqual(self.s.batch_get(keys, outs), [4096 * 4] * 8)
        for v, o in zip(values, outs):
            np.testing.assert_array_equal(v, o)
        self.assertEqual(self.s.match_prefix(keys), 8)
        self.assertTrue(self.s.erase(keys[3]))
        self.assertEqual(self.s.match_prefix(keys), 3)
        self.assertEqual(self.s.batch_get(keys[3:5], outs[3:5]), [-1, 4096 * 4])
        self.assertEqual(self.s.batch_exists(keys[2:5]), [True, False, True])

    def test_misses_and_bad_buffers(self):
        self.assertIsNone(self.s.get("absent"))
        self.assertIsNone(self.s.get("absent", bytearray(10)))
        self.assertFalse(self.s.exists("absent"))
        self.s.put("k", b"0123456789")
        self.assertEqual(self.s.get("k"), b"0123456789")
        with self.assertRaises(ValueError):  # too small: says so rather than truncating
            self.s.get("k", bytearray(4))
        with self.assertRaises(ValueError):  # strided view: not contiguous
            self.s.get("k", np.zeros((4, 8), np.uint8)[:, ::2])
        with self.assertRaises(ValueError):
            self.s.put(3.5, b"x")
        with self.assertRaises(ValueError):
            self.s.put("v", object())
        with self.assertRaises(ValueError):
            self.s.batch_get(["a", "b"], [bytearray(1)])

    def test_sizes_without_reading_and_the_engines_options(self):
        self.s.put("sized", b"x" * 12345)
        self.assertEqual(self.s.size("sized"), 12345)
        self.assertIsNone(self.s.size("absent"))
        self.assertEqual(self.s.batch_sizes(["sized", "absent"]), [12345, -1])
        d = tempfile.mkdtemp(prefix="kvpool-py-")
        try:
            s = kvpool.Store(dram_bytes=8 << 20, flash_path=os.path.join(d, "f.img"),
                             flash_bytes=32 << 20, max_value_bytes=1 << 20,
                             region_bytes=1 << 20, admission="all", reuse_bonus=0.5)
            for i in range(40):  # 10 MiB through 8 MiB of DRAM: some on flash
                self.assertEqual(s.put("b%d" % i, bytes([i]) * 256000), "OK")
            self.assertIn("demotions", s.stats())
            self.assertEqual(s.batch_sizes(["b0", "b39", "nope"]), [256000, 256000, -1])
            self.assertNotEqual(s.put("big", b"x" * (2 << 20)), "OK")  # over max_value_bytes
            with self.assertRaisesRegex(ValueError, "admission"):
                kvpool.Store(dram_bytes=8 << 20, admission="some")
            with self.assertRaises(Exception):  # the engine's own check: says why
                kvpool.Store(dram_bytes=8 << 20, region_bytes=1000)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    @unittest.skipIf(torch is None, "python3-torch not installed")
    def test_torch_tensors(self):
        t = torch.arange(8192, dtype=torch.float16)
        self.assertEqual(self.s.put("t", t), "OK")
        out = torch.zeros(8192, dtype=torch.float16)
        self.assertEqual(self.s.get("t", out), 8192 * 2)
        self.assertTrue(torch.equal(t, out))


class AgainstKvpoold(KvpooldTestCase):
    KVPOOLD = os.path.join(BUILD, "kvpoold")

    def test_client_batches_match_prefix_and_stats(self):
        c = kvpool.Client(self.d.address, namespace="py")
        self.assertTrue(c.ping())
        self.assertEqual(c.put("sized", b"y" * 7777), "OK")
        self.assertEqual(c.size("sized"), 7777)  # no value bytes cross the wire
        self.assertEqual(c.batch_sizes(["sized", "absent"]), [7777, -1])
        keys = kvpool.chain_keys("py", list(range(16 * 32)), 16)
        values = [np.full(65536, i, np.uint8) for i in range(32)]
        self.assertEqual(c.batch_put(keys[:20], values[:20]), ["OK"] * 20)
        outs = [np.zeros(65536, np.uint8) for _ in range(32)]
        sizes = c.batch_get(keys, outs)
        self.assertEqual(sizes, [65536] * 20 + [-1] * 12)
        for i in range(20):
            self.assertTrue((outs[i] == i).all())
        self.assertEqual(c.match_prefix(keys), 20)
        self.assertIn("gets", c.stats())
        # Namespaces are apart: the same key in another namespace is a miss.
        other = kvpool.Client(self.d.address, namespace="elsewhere")
        self.assertIsNone(other.get(keys[0]))

    def test_same_host_shared_memory(self):
        c = kvpool.Client(self.d.unix, namespace="py-shm", shared_memory_bytes=8 << 20)
        self.assertTrue(c.ping())
        region = np.frombuffer(c.shared_memory(), dtype=np.uint8)
        self.assertGreaterEqual(region.size, 4 << 20)
        src, dst = region[:1 << 20], region[1 << 20:2 << 20]
        src[:] = np.arange(1 << 20, dtype=np.uint64).astype(np.uint8)
        self.assertEqual(c.put("blk", src), "OK")
        self.assertEqual(c.get("blk", dst), 1 << 20)
        np.testing.assert_array_equal(src, dst)

    def test_threads_share_the_server_with_the_gil_released(self):
        errors = []

        def worker(i):
            try:
                c = kvpool.Client(self.d.address, namespace="threads")
                buf = np.zeros(16384, np.uint8)
                for j in range(50):
                    v = np.full(16384, (i * 50 + j) % 251, np.uint8)
                    assert c.put(f"{i}/{j}", v, overwrite=True) == "OK"
                    assert c.get(f"{i}/{j}", buf) == 16384 and (buf == v).all()
            except Exception as e:  # reported below
                errors.append(repr(e))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])

    def test_unreachable_server_is_a_prompt_typed_error(self):
        c = kvpool.Client("127.0.0.1:1", timeout_ms=300)
        t0 = time.time()
        # No answer is not "absent": every call raises kvpool.Unavailable (a ConnectionError),
        # promptly, on Store, Client, Pool and NearCache alike (one BlockStore binding).
        with self.assertRaises(kvpool.Unavailable) as e:
            c.exists("k")
        self.assertIsInstance(e.exception, ConnectionError)
        for call in (lambda: c.get("k"), lambda: c.put("k", b"v"),
                     lambda: c.batch_get(["a", "b"], [bytearray(4), bytearray(4)]),
                     lambda: c.batch_put(["a"], [b"1"]), lambda: c.batch_exists(["a", "b"]),
                     lambda: c.match_prefix(["a", "b"]), lambda: c.erase("a"),
                     lambda: c.batch_sizes(["a"])):
            with self.assertRaises(kvpool.Unavailable):
                call()
        # with_status=True asks for each item's status instead.
        self.assertEqual(c.batch_get(["a"], [bytearray(4)], with_status=True),
                         ([-1], ["Unavailable"]))
        self.assertFalse(c.ping())
        self.assertTrue(issubclass(kvpool.Timeout, TimeoutError))
        self.assertFalse(kvpool.Store(dram_bytes=8 << 20).exists("k"))  # in-process: an answer
        self.assertLess(time.time() - t0, 5)

    def test_one_client_shared_by_threads(self):
        """MLPerf's storage adapter needed a connection per worker; a Client is enough now."""
        import threading
        c = kvpool.Client(self.d.address, namespace="shared-threads", max_connections=4)
        n_threads, per = 8, 60
        errors, wrong = [], [0]

        def work(t):
            try:
                for i in range(per):
                    k = "t%d-%d" % (t, i)
                    v = bytes([t + 1, i % 251]) * (2048 + 64 * t)
                    if c.put(k, v) != "OK":
                        errors.append("put " + k)
                    if c.get(k) != v:
                        wrong[0] += 1
                    if c.batch_sizes([k]) != [len(v)] or not c.exists(k):
                        errors.append("size/exists " + k)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        self.assertEqual(errors, [])
        self.assertEqual(wrong[0], 0)
        self.assertLessEqual(c.extra_connections, 3)  # bounded by max_connections
        self.assertEqual(c.match_prefix(["t0-%d" % i for i in range(per)]), per)
        with self.assertRaises(ValueError):
            kvpool.Client(self.d.address, max_connections=0)

    def test_store_client_pool_and_near_cache_answer_alike(self):
        """One binding over kvpool::BlockStore: the same calls, the same answers."""
        stores = {
            "Store": kvpool.Store(dram_bytes=16 << 20),
            "Client": kvpool.Client(self.d.address, namespace="alike-c"),
            "Pool": kvpool.Pool(members=self.d.address, namespace="alike-p"),
            "NearCache": kvpool.NearCache(self.d.address, namespace="alike-n",
                                          dram_bytes=16 << 20, pin=False),
        }
        for name, s in stores.items():
            with self.subTest(store=name):
                keys = ["%s-%d" % (name, i) for i in range(3)]
                vals = [bytes([i + 1]) * (1000 + i) for i in range(3)]
                self.assertEqual(s.batch_put(keys, vals, parents=[None] + keys[:-1]), ["OK"] * 3)
                self.assertEqual(s.put(keys[0], b"x"), "Exists")
                self.assertEqual(s.put(keys[0], vals[0], overwrite=True), "OK")
                self.assertEqual(s.get(keys[1]), vals[1])
                self.assertIsNone(s.get("absent"))
                self.assertEqual(s.batch_sizes(keys + ["absent"]), [1000, 1001, 1002, -1])
                self.assertEqual(s.batch_exists([keys[2], "absent"]), [True, False])
                self.assertEqual(s.match_prefix(keys + ["absent"]), 3)
                self.assertTrue(s.erase(keys[1]))
                self.assertFalse(s.erase(keys[1]))
                self.assertEqual(s.match_prefix(keys), 1)
                out = [bytearray(1002), bytearray(1002)]
                self.assertEqual(s.batch_get([keys[2], keys[1]], out, with_status=True),
                                 ([1002, -1], ["OK", "NotFound"]))

    def test_pool_over_static_members(self):
        p = kvpool.Pool(members=self.d.address + ",id=only", namespace="pool-py")
        self.assertEqual(p.put("a", b"1"), "OK")
        self.assertEqual(p.get("a"), b"1")
        self.assertEqual(p.owner_of("a"), "only")

    def test_pool_with_a_tenant_token(self):
        d = tempfile.mkdtemp(prefix="kvpool-pool-token-")
        conf = os.path.join(d, "k.toml")
        with open(conf, "w") as f:
            f.write('[[tenant]]\nname = "t"\ntoken = "tok"\nnamespaces = ["tn"]\n')
        node = Daemon(["--config", conf])
        try:
            ok = kvpool.Pool(members=node.address, namespace="tn", token="tok")
            self.assertEqual(ok.put("a", b"1"), "OK")
            self.assertEqual(ok.get("a"), b"1")
            wrong = kvpool.Pool(members=node.address, namespace="tn", token="nope")
            self.assertNotEqual(wrong.put("b", b"2"), "OK")
            self.assertIsNone(wrong.get("a"))
        finally:
            node.stop()
            shutil.rmtree(d, ignore_errors=True)

    def test_pool_match_prefix_spans_nodes(self):
        other = Daemon()
        try:
            p = kvpool.Pool(members="%s,id=a;%s,id=b" % (self.d.address, other.address),
                            namespace="pool-mp")
            chain = kvpool.chain_keys("pool-mp", list(range(16 * 40)), 16)
            self.assertEqual(p.batch_put(chain, [b"x" * 1024] * 40), ["OK"] * 40)
            owners = {p.owner_of(k) for k in chain}
            self.assertEqual(owners, {"a", "b"})  # the chain really spans both nodes
            self.assertEqual(p.match_prefix(chain), 40)
            # Remove block 17 on its own node: the prefix ends there.
            node = self.d if p.owner_of(chain[17]) == "a" else other
            self.assertTrue(kvpool.Client(node.address, namespace="pool-mp").erase(chain[17]))
            self.assertEqual(p.match_prefix(chain), 17)
            self.assertEqual(p.match_prefix([]), 0)
        finally:
            other.stop()

    def test_module_command_line(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
        run = lambda *a, **kw: subprocess.run([sys.executable, "-m", "kvpool", *a], env=env,
                                              capture_output=True, timeout=30, **kw)
        h = run("--help")
        self.assertEqual(h.returncode, 0)
        self.assertIn(b"put", h.stdout)
        self.assertEqual(run("--address", self.d.address, "put", "cli-key", input=b"payload").returncode, 0)
        g = run("--address", self.d.address, "get", "cli-key")
        self.assertEqual((g.returncode, g.stdout), (0, b"payload"))
        self.assertEqual(run("--address", self.d.address, "get", "missing").returncode, 1)


class EngineOperations(KvpooldTestCase):
    """Layer streaming, prestaging into the near cache, deadlines and DLPack."""
    KVPOOLD = os.path.join(BUILD, "kvpoold")

    def test_layer_key_matches_the_documented_derivation(self):
        b = kvpool.chain_keys("py", list(range(16)), 16)[0]
        data = struct.pack("<QQ", b.hi, b.lo) + b"layer" + struct.pack("<I", 7)
        self.assertEqual(kvpool.layer_key(b, 7), ref_key(xxhash.xxh3_128_intdigest(data)))

    def test_layers_stream_in_order_while_later_ones_are_in_flight(self):
        c = kvpool.Client(self.d.address, namespace="layers")
        blocks = kvpool.chain_keys("layers", list(range(16 * 8)), 16)
        layers = 12
        # Prefill: one put per layer, as each layer's K/V is produced.
        for layer in range(layers):
            vals = [np.full(16 << 10, (layer * 16 + j) % 251, np.uint8) for j in range(len(blocks))]
            self.assertEqual(c.put_layer(blocks, layer, vals, parents=[None] + blocks[:-1]),
                             ["OK"] * len(blocks))
        self.assertEqual(c.match_prefix([kvpool.layer_key(b, layers - 1) for b in blocks]),
                         len(blocks))
        outs = [[np.zeros(16 << 10, np.uint8) for _ in blocks] for _ in range(layers)]
        seen = []
        for layer, sizes in c.get_layers(blocks, range(layers), outs):
            # Layer `layer` is complete when it is yielded.
            self.assertEqual(sizes, [16 << 10] * len(blocks))
            for j in range(len(blocks)):
                self.assertEqual(int(outs[layer][j][0]), (layer * 16 + j) % 251)
            seen.append(layer)
        self.assertEqual(seen, list(range(layers)))
        # A missing part is a miss for that block of that layer only.
        self.assertTrue(c.erase(kvpool.layer_key(blocks[3], 5)))
        got = dict(c.get_layers(blocks, [4, 5, 6], outs[:3]))
        self.assertEqual(got[5][3], -1)
        self.assertEqual(got[5][2], 16 << 10)
        self.assertEqual(got[6][3], 16 << 10)
        # The transfer runs ahead of the consumer: while it computes layer 0 (here: sleeps),
        # the other layers land, even when they exceed the socket buffers (12 x 1 MiB).
        blocks2 = kvpool.chain_keys("layers", list(range(1000, 1000 + 16 * 8)), 16)
        big = [[np.zeros(128 << 10, np.uint8) for _ in blocks2] for _ in range(layers)]
        for layer in range(layers):
            self.assertEqual(c.put_layer(blocks2, layer, [np.full(128 << 10, layer, np.uint8)] * 8),
                             ["OK"] * 8)
        it = c.get_layers(blocks2, range(layers), big)
        self.assertEqual(next(it)[0], 0)
        deadline = time.time() + 5
        while it.landed < layers and time.time() < deadline:
            time.sleep(0.01)
        self.assertEqual(it.landed, layers)
        self.assertEqual([l for l, _ in it], list(range(1, layers)))
        self.assertEqual(int(big[layers - 1][0][0]), layers - 1)
        # Dropping a stream half-way leaves the client usable.
        it = c.get_layers(blocks, range(layers), outs)
        next(it)
        del it
        self.assertTrue(c.ping())

    def test_prestage_makes_later_gets_local(self):
        c = kvpool.Client(self.d.address, namespace="near")
        chain = kvpool.chain_keys("near", list(range(16 * 128)), 16)
        self.assertEqual(c.batch_put(chain, [np.full(65536, i % 256, np.uint8) for i in range(128)],
                                     parents=[None] + chain[:-1]), ["OK"] * 128)
        nc = kvpool.NearCache(self.d.address, namespace="near", dram_bytes=64 << 20)
        t0 = time.time()
        ticket = nc.prestage(chain, timeout_ms=5000)
        self.assertLess(time.time() - t0, 0.05)  # returns at once
        self.assertEqual(nc.wait_prestaged(ticket), 128)
        self.assertEqual(nc.local_prefix(chain), 128)
        outs = [np.zeros(65536, np.uint8) for _ in chain]
        self.assertEqual(nc.batch_get(chain, outs), [65536] * 128)
        self.assertEqual([int(o[0]) for o in outs], [i % 256 for i in range(128)])
        st = nc.stats()
        self.assertEqual((st["local_hits"], st["pool_hits"], st["prestaged"]), (128, 0, 128))
        # A chain with an unknown block: prestaged up to it.
        other = chain[:10] + kvpool.chain_keys("near", list(range(1, 17)), 16)
        self.assertEqual(nc.wait_prestaged(nc.prestage(other, timeout_ms=5000)), 10)

    def test_deadline_on_a_stopped_server(self):
        d = Daemon()
        try:
            c = kvpool.Client(d.address, namespace="dl", timeout_ms=5000)
            keys = ["dl-%d" % i for i in range(4)]
            self.assertEqual(c.batch_put(keys, [b"v" * 4096] * 4), ["OK"] * 4)
            os.kill(d.proc.pid, 19)  # SIGSTOP
            time.sleep(0.2)
            t0 = time.time()
            sizes, codes = c.batch_get(keys, [bytearray(4096) for _ in keys], timeout_ms=100,
                                       with_status=True)
            took = time.time() - t0
            os.kill(d.proc.pid, 18)  # SIGCONT
            self.assertEqual(sizes, [-1] * 4)
            self.assertEqual(codes, ["Timeout"] * 4)  # late, not a miss
            self.assertLess(took, 1.0)  # the deadline, not the 5 s request timeout
            self.assertEqual(c.batch_get(keys, [bytearray(4096) for _ in keys], timeout_ms=3000),
                             [4096] * 4)
            self.assertEqual(c.batch_get(["dl-0", "absent", "dl-1"],
                                         [bytearray(4096), bytearray(10), bytearray(10)],
                                         with_status=True),
                             ([4096, -1, -1], ["OK", "NotFound", "BufferTooSmall"]))
        finally:
            d.stop()

    @unittest.skipIf(torch is None, "python3-torch not installed")
    def test_dlpack_capsules_and_tensors(self):
        from torch.utils import dlpack
        s = kvpool.Store(dram_bytes=64 << 20)
        t = torch.arange(4096, dtype=torch.bfloat16)  # no buffer protocol: bf16 goes via DLPack
        self.assertEqual(s.put("bf16", t), "OK")
        out = torch.zeros(4096, dtype=torch.bfloat16)
        self.assertEqual(s.get("bf16", dlpack.to_dlpack(out)), 8192)  # a bare capsule
        self.assertTrue(torch.equal(out, t))
        view = torch.zeros(64, 64)[:, :8]  # not contiguous
        with self.assertRaises(ValueError):
            s.put("strided", view)


if __name__ == "__main__":
    unittest.main(verbosity=2)
