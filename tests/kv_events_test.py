#!/usr/bin/env python3
"""kvpoold's KV events with a real subscriber: python3-zmq SUB and DEALER sockets, payloads
decoded with python3-msgpack in the shape vLLM's KVEventBatch has (msgspec array_like,
tagged events; vllm/distributed/kv_events.py and examples/online_serving/
kv_events_subscriber.py). Usage: kv_events_test.py BUILD_DIR
"""
import os
import shutil
import struct
import tempfile
import sys
import time
import unittest

import msgpack
import zmq

BUILD = sys.argv.pop(1)
sys.path.insert(0, BUILD + "/python")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvpool  # noqa: E402
from kvpoold_process import Kvpoold  # noqa: E402

KVPOOLD = BUILD + "/kvpoold"


class Subscriber:
    """vLLM's subscriber pattern: SUB for the stream, a replay socket for gaps."""

    def __init__(self, ctx, endpoint, replay=None):
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(endpoint)
        self.replay_endpoint = replay
        self.ctx = ctx
        self.batches = []  # (seq, decoded batch, raw payload)

    def poll(self, timeout_s):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.sub.poll(50):
                topic, seq, payload = self.sub.recv_multipart()
                self.batches.append((struct.unpack(">q", seq)[0],
                                     msgpack.unpackb(payload, raw=False), payload))

    def events(self, kind):
        out = []
        for _, batch, _ in self.batches:
            for ev in batch[1]:
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


class KvEvents(unittest.TestCase):
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

    def test_stored_removed_chain_and_replay(self):
        ep, rep = "ipc://%s/pub" % self.ipc, "ipc://%s/replay" % self.ipc
        d = self.start("--kv-events", ep, "--kv-events-replay", rep)
        sub = self.subscriber(ep, rep)
        c = kvpool.Client(d.address, namespace="tenant/model")
        self.connect_and_warm(d, sub, c)
        sub.poll(0.3)  # the last warm-up events, so that what follows is only ours
        sub.batches.clear()

        keys = kvpool.chain_keys("tenant/model", list(range(64)), 16)
        parents = [None] + keys[:-1]
        self.assertEqual(c.batch_put(keys, [bytes([i]) * 4096 for i in range(4)],
                                     parents=parents), ["OK"] * 4)
        want = [kvpool.pool_key("tenant/model", k).lo for k in keys]
        sub.poll(1.0)
        stored = sub.events("BlockStored")
        hashes = [h for ev in stored for h in ev[1]]
        self.assertEqual(hashes, want)
        # One chain in one batch becomes one BlockStored whose parent is the chain's.
        first = stored[0]
        self.assertEqual(len(first), 7)
        self.assertIsNone(first[2])  # the first block has no parent
        self.assertEqual(first[3], [])  # token ids are not known to the pool
        self.assertEqual(first[4], 16)  # block_size
        self.assertIsNone(first[5])  # lora_id
        self.assertEqual(first[6], "kvpool")  # medium
        for ev in stored[1:]:  # split across batches: each names its own parent
            self.assertEqual(ev[2], want[want.index(ev[1][0]) - 1])
        self.assertIsInstance(sub.batches[0][1][0], float)  # ts

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


if __name__ == "__main__":
    unittest.main()
