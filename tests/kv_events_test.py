#!/usr/bin/env python3
"""kvpoold's KV events with a real subscriber: python3-zmq SUB and DEALER sockets, payloads
decoded with python3-msgpack, and with the decoding rules of the routers that consume them:
Dynamo's (lib/kv-router zmq_wire.rs: a 3-tuple batch, tagged map or sequence events,
blocks indexed only with block_size token ids each), llm-d's (pkg/kvevents/engineadapter/
vllm_adapter.go: "kv@" topic filter, array batch, tagged array events, and since
llm-d-kv-cache v0.9.0 (PR #661) "type"-tagged map events too) and vLLM's msgspec classes
since PR #42892 (vllm/distributed/kv_events.py: positional batch, "type"-tagged map events,
every field without a default required). Fixtures: Dynamo's own tests, a batch captured
from vLLM 0.26.0 (volcano-sh/kthena#1535) and SGLang's map example (sglang PR #37271).
Usage: kv_events_test.py BUILD_DIR
"""
import os
import shutil
import struct
import tempfile
import sys
import time
import unittest

import msgpack
import numpy as np
import zmq

BUILD = sys.argv.pop(1)
sys.path.insert(0, BUILD + "/python")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvpool  # noqa: E402
from kvpoold_process import Kvpoold  # noqa: E402

KVPOOLD = BUILD + "/kvpoold"


def _hash_ok(h, allow_bytes):
    return (isinstance(h, int) and -(1 << 63) <= h < (1 << 64)) or (allow_bytes and isinstance(h, bytes))


def dynamo_decode(payload):
    """Dynamo's rules: returns (blocks stored, blocks indexed); raises where Dynamo fails."""
    b = msgpack.unpackb(payload, raw=False)
    if not isinstance(b, list) or len(b) != 3:
        raise ValueError("batch is not a (ts, events, data_parallel_rank) tuple")
    ts, events, rank = b
    if not isinstance(ts, (int, float)) or not isinstance(events, list):
        raise ValueError("bad ts or events")
    if rank is not None and not isinstance(rank, int):
        raise ValueError("bad data_parallel_rank")
    stored = indexed = 0
    for ev in events:
        if isinstance(ev, dict):
            tag = ev.get("type")
            if tag is None:
                raise ValueError("missing field type")
            get = ev.get
            if tag == "BlockStored":
                for f in ("block_hashes", "token_ids", "block_size"):
                    if f not in ev:
                        raise ValueError("missing field " + f)
            fields = {k: get(k) for k in ("block_hashes", "parent_block_hash", "token_ids",
                                          "block_size", "medium")}
        elif isinstance(ev, list) and ev:
            tag = ev[0]
            names = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium") \
                if tag == "BlockStored" else ("block_hashes", "medium")
            fields = dict(zip(names, ev[1:]))
            if tag == "BlockStored" and len(ev) < 5:
                raise ValueError("short BlockStored sequence")
        else:
            raise ValueError("an event is neither a tagged map nor a sequence")
        if tag == "BlockStored":
            hashes, tokens, size = fields["block_hashes"], fields["token_ids"], fields["block_size"]
            if not all(_hash_ok(h, False) for h in hashes):
                raise ValueError("block hashes must be 64-bit integers")
            if not isinstance(size, int) or size < 0:
                raise ValueError("bad block_size")
            if tokens and isinstance(tokens[0], list):  # EAGLE bigrams
                tokens = [t[0] for t in tokens] + [tokens[-1][1]]
            if not all(isinstance(t, int) and 0 <= t < (1 << 32) for t in tokens):
                raise ValueError("token ids must be u32")
            stored += len(hashes)
            for i in range(len(hashes)):  # published while each block has its tokens
                if size == 0 or (i + 1) * size > len(tokens):
                    break
                indexed += 1
        elif tag == "BlockRemoved":
            if not all(_hash_ok(h, False) for h in fields["block_hashes"]):
                raise ValueError("block hashes must be 64-bit integers")
        elif tag != "AllBlocksCleared":
            raise ValueError("unknown variant " + str(tag))
    return stored, indexed


def llmd_decode(topic, payload, filter_=b"kv@", block_size=16, maps=True):
    """llm-d's rules: None if its topic filter drops the message; else (pod, model, stored,
    indexed by its own block size); raises where llm-d fails. maps=False: llm-d before
    v0.9.0, which decodes tagged arrays only."""
    if not topic.startswith(filter_):
        return None
    parts = topic.decode().split("@")
    pod, model = (parts[1], parts[2]) if len(parts) == 3 else (topic.decode(), "")
    b = msgpack.unpackb(payload, raw=False)
    if not isinstance(b, list) or len(b) < 2:
        raise ValueError("batch is not an array")
    stored = indexed = 0
    for ev in b[1]:
        if maps and isinstance(ev, dict):  # normalized to the positional layout
            if not isinstance(ev.get("type"), str):
                raise ValueError("map event without a string type")
            names = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                     "medium") if ev["type"] == "BlockStored" else ("block_hashes", "medium")
            ev = [ev["type"]] + [ev.get(n) for n in names]
        if not isinstance(ev, list) or not ev or not isinstance(ev[0], str):
            raise ValueError("failed to decode tagged union")
        if ev[0] == "BlockStored":
            if len(ev) < 5:
                raise ValueError("short BlockStored")
            hashes, parent, tokens, size = ev[1], ev[2], ev[3], ev[4]
            if not all(_hash_ok(h, True) for h in hashes) or not isinstance(size, int):
                raise ValueError("bad BlockStored")
            if not all(isinstance(t, int) and 0 <= t < (1 << 32) for t in tokens):
                raise ValueError("token ids must be u32")
            stored += len(hashes)
            indexed += min(len(hashes), len(tokens) // block_size)
        elif ev[0] == "BlockRemoved":
            if not all(_hash_ok(h, True) for h in ev[1]):
                raise ValueError("bad BlockRemoved")
        elif ev[0] != "AllBlocksCleared":
            raise ValueError("unknown vLLM event tag: " + ev[0])
    return pod, model, stored, indexed


STORED_ORDER = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                "medium", "lora_name")  # BlockStored's fields in the array form
VLLM_STORED_FIELDS = STORED_ORDER  # BlockStored's fields without a default


def vllm_map_decode(payload):
    """vLLM's msgspec classes since PR #42892 (KVEventBatch array-like: ts, events,
    data_parallel_rank with a default; events maps tagged by "type"): returns the blocks
    stored; raises where msgspec would."""
    b = msgpack.unpackb(payload, raw=False)
    if not isinstance(b, list) or not 2 <= len(b) <= 3:
        raise ValueError("KVEventBatch is [ts, events, data_parallel_rank]")
    if not isinstance(b[0], float) or not isinstance(b[1], list):
        raise ValueError("ts must be a float and events a list")
    if len(b) == 3 and b[2] is not None and not isinstance(b[2], int):
        raise ValueError("data_parallel_rank")
    stored = 0
    for ev in b[1]:
        if not isinstance(ev, dict) or "type" not in ev:
            raise ValueError("an event is a map tagged by type")
        if ev["type"] == "BlockStored":
            missing = [f for f in VLLM_STORED_FIELDS if f not in ev]
            if missing:
                raise ValueError("BlockStored missing " + ", ".join(missing))
            if ev["lora_name"] is not None and not isinstance(ev["lora_name"], str):
                raise ValueError("lora_name")
            extra = ev.get("extra_keys")
            if extra is not None and len(extra) != len(ev["block_hashes"]):
                raise ValueError("extra_keys: one per block hash")
            stored += len(ev["block_hashes"])
        elif ev["type"] == "BlockRemoved":
            if "block_hashes" not in ev or "medium" not in ev:
                raise ValueError("BlockRemoved needs block_hashes and medium")
        elif ev["type"] != "AllBlocksCleared":
            raise ValueError("unknown event type")
        for f in ("group_idx",):
            if ev.get(f) is not None and not isinstance(ev[f], int):
                raise ValueError(f)
    return stored


# A batch vLLM 0.26.0 published (volcano-sh/kthena#1535, Qwen3-8B, block size 16).
VLLM_026_BATCH = [1789095808.8378847, [{
    "type": "BlockStored", "block_hashes": [15760518052499183552], "parent_block_hash": None,
    "token_ids": [151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644,
                  77091, 198, 151667],
    "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
    "extra_keys": [None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"}], 0]


class Subscriber:
    """vLLM's subscriber pattern: SUB for the stream, a replay socket for gaps."""

    def __init__(self, ctx, endpoint, replay=None):
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(endpoint)
        self.replay_endpoint = replay
        self.ctx = ctx
        self.batches = []  # (seq, decoded batch, raw payload)
        self.topics = []

    def poll(self, timeout_s):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.sub.poll(50):
                topic, seq, payload = self.sub.recv_multipart()
                self.topics.append(topic)
                self.batches.append((struct.unpack(">q", seq)[0],
                                     msgpack.unpackb(payload, raw=False), payload))

    def events(self, kind):
        """Events of one kind, in the positional layout whichever form they came in."""
        out = []
        for _, batch, _ in self.batches:
            for ev in batch[1]:
                if isinstance(ev, dict):
                    ev = [ev["type"]] + [ev.get(n) for n in (
                        STORED_ORDER if ev["type"] == "BlockStored" else ("block_hashes", "medium"))]
                if ev[0] == kind:
                    out.append(ev)
        return out

    def replay(self, start):
        s = self.ctx.socket(zmq.DEALER)
        s.connect(self.replay_endpoint)
        s.send_multipart([b"", struct.pack(">q", start)])
        got = []
        deadline = time.time() + 5
        while time.time() < deadline:
            if not s.poll(200):
                continue
            _, seq, payload = s.recv_multipart()
            seq = struct.unpack(">q", seq)[0]
            if seq == -1:
                self.assertion_end = payload
                break
            got.append((seq, payload))
        s.close(linger=0)
        return got


class EventsCase(unittest.TestCase):
    """A kvpoold per test, a ZeroMQ context and an ipc directory; no tests of its own."""

    def start(self, *extra, dram="128MiB"):
        d = Kvpoold(KVPOOLD, dram=dram, resp=False, extra=extra)
        self.addCleanup(d.stop)
        return d

    def setUp(self):
        self.ctx = zmq.Context()
        self.addCleanup(self.ctx.term)
        self.ipc = tempfile.mkdtemp(prefix="kvev-")
        self.addCleanup(shutil.rmtree, self.ipc, True)

    def subscriber(self, ep, rep=None):
        sub = Subscriber(self.ctx, ep, rep)
        self.addCleanup(sub.sub.close, 0)
        return sub

    def connect_and_warm(self, d, sub, client):
        # A SUB socket misses what is sent before it has joined: put probe blocks until
        # one is seen (bounded).
        deadline = time.time() + 10
        i = 0
        while time.time() < deadline:
            client.put("warm-%d" % i, b"x" * 64)
            i += 1
            sub.poll(0.1)
            if sub.batches:
                return ["warm-%d" % j for j in range(i)]
        self.fail("no KV event arrived within 10 s")


class KvEvents(EventsCase):
    def test_stored_removed_chain_and_replay(self):
        ep, rep = "ipc://%s/pub" % self.ipc, "ipc://%s/replay" % self.ipc
        d = self.start("--kv-events", ep, "--kv-events-replay", rep)
        sub = self.subscriber(ep, rep)
        c = kvpool.Client(d.address, namespace="tenant/model")
        self.connect_and_warm(d, sub, c)
        sub.poll(0.3)  # the last warm-up events, so that what follows is only ours
        sub.batches.clear()

        tokens = list(range(64))
        keys = kvpool.chain_keys("tenant/model", tokens, 16)
        parents = [None] + keys[:-1]
        self.assertEqual(c.batch_put(keys, [bytes([i]) * 4096 for i in range(4)],
                                     parents=parents,
                                     token_ids=[tokens[16 * i:16 * i + 16] for i in range(4)]),
                         ["OK"] * 4)
        want = [kvpool.pool_key("tenant/model", k).lo for k in keys]
        sub.poll(1.0)
        stored = sub.events("BlockStored")
        hashes = [h for ev in stored for h in ev[1]]
        self.assertEqual(hashes, want)
        # One chain in one batch becomes one BlockStored whose parent is the chain's.
        first = stored[0]
        self.assertEqual(len(first), 8)
        self.assertIsNone(first[2])  # the first block has no parent
        self.assertEqual(first[3], tokens[:16 * len(first[1])])  # the writer's token ids
        self.assertEqual(first[4], 16)  # block_size
        self.assertIsNone(first[5])  # lora_id
        self.assertEqual(first[6], "EXTERNAL")  # medium: Dynamo's external tier
        self.assertIsNone(first[7])  # lora_name
        for ev in stored[1:]:  # split across batches: each names its own parent
            self.assertEqual(ev[2], want[want.index(ev[1][0]) - 1])
            self.assertEqual(ev[3], tokens[16 * want.index(ev[1][0]):16 * (want.index(ev[1][-1]) + 1)])
        self.assertIsInstance(sub.batches[0][1][0], float)  # ts
        self.assertEqual(sub.batches[0][1][2], 0)  # data_parallel_rank
        self.assertTrue(sub.topics[0].startswith(b"kv@") and sub.topics[0].endswith(b"@kvpool"))

        # An insert-only put of a held key stores nothing new: no event.
        self.assertEqual(c.put(keys[0], b"again"), "Exists")
        self.assertTrue(c.erase(keys[1]) and c.erase(keys[3]))
        sub.poll(1.0)
        removed = [h for ev in sub.events("BlockRemoved") for h in ev[1]]
        self.assertEqual(removed, [want[1], want[3]])
        self.assertEqual(len(sub.events("BlockStored")), len(stored))

        # Sequence numbers count batches without gaps; a replay from the first one seen
        # returns the same payloads.
        seqs = [s for s, _, _ in sub.batches]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))))
        replayed = dict(sub.replay(seqs[0]))
        for s, _, payload in sub.batches:
            self.assertEqual(replayed[s], payload)
        self.assertEqual(sorted(replayed), list(range(seqs[0], seqs[0] + len(replayed))))
        self.assertEqual(sub.assertion_end, b"")
        # A garbage replay request is ignored; the publisher keeps going.
        g = self.ctx.socket(zmq.DEALER)
        g.connect(rep)
        g.send_multipart([b"", b"junk"])
        g.close(linger=0)
        self.assertEqual(c.put("after-junk", b"y"), "OK")
        sub.poll(0.5)
        self.assertIn(kvpool.pool_key("tenant/model", kvpool.Key.from_bytes(b"after-junk")).lo,
                      [h for ev in sub.events("BlockStored") for h in ev[1]])

    def test_evictions_are_removals(self):
        ep = "ipc://%s/pub" % self.ipc
        d = self.start("--kv-events", ep, dram="64MiB")
        sub = self.subscriber(ep)
        c = kvpool.Client(d.address, namespace="ev")
        self.connect_and_warm(d, sub, c)
        names = ["big-%d" % i for i in range(160)]  # 160 MiB into a 64 MiB DRAM tier
        value = b"z" * (1 << 20)
        for n in names:
            self.assertIn(c.put(n, value), ("OK",))
        sub.poll(1.5)
        stored = {h for ev in sub.events("BlockStored") for h in ev[1]}
        removed = {h for ev in sub.events("BlockRemoved") for h in ev[1]}
        pool = {kvpool.pool_key("ev", kvpool.Key.from_bytes(n.encode())).lo: n for n in names}
        self.assertTrue(set(pool) <= stored)
        held = {h for h, n in pool.items() if c.exists(n)}
        gone = set(pool) - held
        self.assertGreater(len(gone), 50)
        self.assertEqual(removed & set(pool), gone)  # every lost block announced, no others

    def test_bytes_hashes_and_bad_endpoint(self):
        ep = "ipc://%s/pub" % self.ipc
        d = self.start("--kv-events", ep, "--kv-events-hash", "bytes",
                       "--kv-events-topic", "kv@pool")
        sub = self.subscriber(ep)
        c = kvpool.Client(d.address, namespace="b")
        warm = self.connect_and_warm(d, sub, c)
        put = {bytes.fromhex(kvpool.pool_key("b", kvpool.Key.from_bytes(w.encode())).hex())
               for w in warm}
        first = sub.events("BlockStored")[0][1][0]
        self.assertIsInstance(first, bytes)
        self.assertEqual(len(first), 16)
        self.assertIn(first, put)  # the 16-byte pool key of one of the blocks put
        with self.assertRaises(RuntimeError):  # an endpoint ZeroMQ cannot bind: a clear failure
            Kvpoold(KVPOOLD, resp=False, extra=("--kv-events", "bogus://x"))


class TenantEvents(EventsCase):
    def test_each_tenant_hears_only_its_own_blocks(self):
        node, ea, eb = ("ipc://%s/%s" % (self.ipc, n) for n in ("node", "a", "b"))
        conf = os.path.join(self.ipc, "k.toml")
        with open(conf, "w") as f:
            f.write('[[tenant]]\nname = "a"\ntoken = "ta"\nnamespaces = ["a"]\n'
                    'kv_events_endpoint = "%s"\n\n'
                    '[[tenant]]\nname = "b"\ntoken = "tb"\nnamespaces = ["b"]\n'
                    'kv_events_endpoint = "%s"\n' % (ea, eb))
        d = self.start("--config", conf, "--kv-events", node)
        subs = {n: self.subscriber(ep) for n, ep in (("node", node), ("a", ea), ("b", eb))}
        ca = kvpool.Client(d.address, namespace="a", token="ta")
        cb = kvpool.Client(d.address, namespace="b", token="tb")
        warm_a = self.connect_and_warm(d, subs["a"], ca)
        warm_b = self.connect_and_warm(d, subs["b"], cb)
        for s in subs.values():
            s.poll(0.3)
            s.batches.clear()
        names = ["blk-%d" % i for i in range(20)]
        for n in names:
            self.assertEqual(ca.put(n, b"a" * 1000), "OK")
            self.assertEqual(cb.put(n, b"b" * 1000), "OK")
        self.assertTrue(ca.erase(names[0]) and cb.erase(names[1]))
        for s in subs.values():
            s.poll(1.0)
        pool = {t: [kvpool.pool_key(t, kvpool.Key.from_bytes(n.encode())).lo for n in names]
                for t in ("a", "b")}
        for t in ("a", "b"):
            stored = [h for ev in subs[t].events("BlockStored") for h in ev[1]]
            removed = [h for ev in subs[t].events("BlockRemoved") for h in ev[1]]
            self.assertEqual(sorted(stored), sorted(pool[t]), t)
            self.assertEqual(removed, [pool[t][0 if t == "a" else 1]], t)
        # The node's endpoint carries blocks of no tenant: none of these.
        self.assertEqual(subs["node"].events("BlockStored"), [])
        self.assertEqual(subs["node"].events("BlockRemoved"), [])


class RouterDecoders(EventsCase):
    """Every batch kvpoold publishes, through each router's decoding rules."""

    def put_chains(self, c, ns, chains=3, blocks=4):
        stored_with_tokens = 0
        for j in range(chains):
            tokens = [(j * 1000 + t) for t in range(16 * blocks)]
            keys = kvpool.chain_keys(ns, tokens, 16)
            st = c.batch_put(keys, [b"k" * 2048] * blocks, parents=[None] + keys[:-1],
                             token_ids=[tokens[16 * i:16 * i + 16] for i in range(blocks)])
            self.assertEqual(st, ["OK"] * blocks)
            stored_with_tokens += blocks
        return stored_with_tokens

    def test_decoders_accept_the_engines_own_fixtures(self):
        # Dynamo's test_deserialize_bigram_block_stored_sequence: an EAGLE sequence event.
        seq_event = ["BlockStored", [11, 12], None, [[10, 11], [11, 12], [12, 13], [13, 14]], 2,
                     None, None, None]
        self.assertEqual(dynamo_decode(msgpack.packb([1.0, [seq_event], None])), (2, 2))
        # Dynamo's test_deserialize_block_stored_with_cache_salt_map: a map event.
        map_event = {"type": "BlockStored", "block_hashes": [100], "parent_block_hash": None,
                     "token_ids": [1, 2, 3, 4], "block_size": 4, "cache_salt": "tenant-a"}
        self.assertEqual(dynamo_decode(msgpack.packb([1.0, [map_event], 0])), (1, 1))
        with self.assertRaises(ValueError):  # Dynamo reads a (ts, events, rank) tuple only
            dynamo_decode(msgpack.packb([1.0, [seq_event]]))
        # vLLM's examples/online_serving/kv_events_subscriber.py event shape (array-like).
        self.assertEqual(llmd_decode(b"kv@pod-1@llama", msgpack.packb(
            [1.0, [["BlockStored", [7], None, list(range(16)), 16, None, "GPU"]]])),
            ("pod-1", "llama", 1, 1))
        self.assertIsNone(llmd_decode(b"", msgpack.packb([1.0, []])))  # filtered out
        # What vLLM 0.26.0 published: every decoder reads it, the old llm-d does not.
        vllm = msgpack.packb(VLLM_026_BATCH)
        self.assertEqual(vllm_map_decode(vllm), 1)
        self.assertEqual(dynamo_decode(vllm), (1, 1))
        self.assertEqual(llmd_decode(b"kv@pod-1@qwen", vllm), ("pod-1", "qwen", 1, 1))
        with self.assertRaises(ValueError):
            llmd_decode(b"kv@pod-1@qwen", vllm, maps=False)
        # SGLang's map example (PR #37271): a salted event, data_parallel_rank nil.
        sgl = msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [123],
                                    "parent_block_hash": None, "token_ids": [1, 2], "block_size": 2,
                                    "lora_id": None, "medium": "GPU", "lora_name": None,
                                    "metadata": {"cache_salt": "tenant-a"}}], None])
        self.assertEqual(dynamo_decode(sgl), (1, 1))
        self.assertEqual(vllm_map_decode(sgl), 1)
        # The map decoder is not a pushover: vLLM's old map-batch draft and a missing field.
        with self.assertRaises(ValueError):
            vllm_map_decode(msgpack.packb({"ts": 1.0, "events": [], "data_parallel_rank": 0}))
        bad = dict(VLLM_026_BATCH[1][0])
        del bad["lora_name"]
        with self.assertRaises(ValueError):
            vllm_map_decode(msgpack.packb([1.0, [bad], 0]))

    def test_array_form_every_batch_decodes_in_dynamo_and_llmd(self):
        ep = "ipc://%s/pub" % self.ipc
        d = self.start("--kv-events", ep, "--kv-events-format", "array")
        sub = self.subscriber(ep)
        c = kvpool.Client(d.address, namespace="routers")
        self.connect_and_warm(d, sub, c)
        sub.poll(0.3)
        sub.batches.clear()
        sub.topics.clear()
        n = self.put_chains(c, "routers")
        self.assertTrue(c.erase(kvpool.chain_keys("routers", list(range(64)), 16)[3]))
        # Values from the same-host region: the token ids still travel on the socket.
        u = kvpool.Client(d.unix, namespace="routers", shared_memory_bytes=1 << 20)
        self.assertTrue(u.ping())
        region = np.frombuffer(u.shared_memory(), dtype=np.uint8)
        region[:4096] = 7
        toks = [5000 + t for t in range(32)]
        keys = kvpool.chain_keys("routers", toks, 16)
        self.assertEqual(u.batch_put(keys, [region[:2048], region[2048:4096]], parents=[None, keys[0]],
                                     token_ids=[toks[:16], toks[16:]]), ["OK", "OK"])
        self.assertEqual(c.get(keys[1]), b"\x07" * 2048)
        n += 2
        sub.poll(1.0)
        self.assertTrue(sub.batches)
        d_stored = d_indexed = l_stored = l_indexed = 0
        for topic, (_, _, payload) in zip(sub.topics, sub.batches):
            s, i = dynamo_decode(payload)  # raises on any batch Dynamo would reject
            d_stored, d_indexed = d_stored + s, d_indexed + i
            got = llmd_decode(topic, payload, maps=False)  # what any llm-d reads
            self.assertIsNotNone(got, "llm-d's default kv@ filter dropped topic %r" % topic)
            l_stored, l_indexed = l_stored + got[2], l_indexed + got[3]
        self.assertEqual((d_stored, d_indexed), (n, n))  # every stored block indexed
        self.assertEqual((l_stored, l_indexed), (n, n))

    def test_default_form_decodes_with_vllm_dynamo_and_llmd(self):
        ep = "ipc://%s/pub" % self.ipc
        d = self.start("--kv-events", ep, "--kv-events-medium", "CPU")
        sub = self.subscriber(ep)
        c = kvpool.Client(d.address, namespace="vllm")
        self.connect_and_warm(d, sub, c)
        sub.poll(0.3)
        sub.batches.clear()
        sub.topics.clear()
        n = self.put_chains(c, "vllm", chains=2)
        self.assertTrue(c.erase(kvpool.chain_keys("vllm", list(range(64)), 16)[3]))
        sub.poll(1.0)
        self.assertTrue(sub.batches)
        got = [0, 0, 0, 0, 0]  # vLLM stored; Dynamo stored, indexed; llm-d stored, indexed
        removed = 0
        for topic, (_, _, payload) in zip(sub.topics, sub.batches):
            got[0] += vllm_map_decode(payload)
            s, i = dynamo_decode(payload)
            r = llmd_decode(topic, payload)
            got[1:] = [got[1] + s, got[2] + i, got[3] + r[2], got[4] + r[3]]
            removed += sum(len(e["block_hashes"]) for e in msgpack.unpackb(payload)[1]
                           if e["type"] == "BlockRemoved")
        self.assertEqual(got, [n] * 5)
        self.assertEqual(removed, 1)
        ev = sub.batches[0][1][1][0]
        self.assertEqual((ev["type"], ev["medium"], len(ev["token_ids"]), ev["group_idx"]),
                         ("BlockStored", "CPU", 16 * len(ev["block_hashes"]), 0))
        self.assertEqual(sub.batches[0][1][2], 0)  # data_parallel_rank

    def test_bad_format_is_refused(self):
        with self.assertRaises(RuntimeError):
            Kvpoold(KVPOOLD, resp=False, extra=("--kv-events", "ipc://%s/x" % self.ipc,
                                                "--kv-events-format", "json"))


if __name__ == "__main__":
    unittest.main()
