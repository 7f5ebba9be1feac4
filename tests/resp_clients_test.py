#!/usr/bin/python3
"""kvpoold's RESP port against the real Redis clients from Debian: redis-py (python3-redis),
redis-cli and redis-benchmark (redis-tools). Starts its own kvpoold on loopback and stops
it by PID.

usage: resp_clients_test.py PATH/TO/kvpoold
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import redis

from kvpoold_process import Kvpoold

KVPOOLD = sys.argv.pop(1) if len(sys.argv) > 1 else "build/kvpoold"


def Daemon(extra=()):
    return Kvpoold(KVPOOLD, extra)

class RespClients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()
        cls.r = redis.Redis(host="127.0.0.1", port=cls.d.resp_port)

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        assert cls.d.stop() == 0

    def test_strings_round_trip_with_redis_py(self):
        r = self.r
        self.assertTrue(r.ping())
        value = bytes(range(256)) * 400  # 100 KiB, every byte value
        self.assertTrue(r.set("blob", value))
        self.assertEqual(r.get("blob"), value)
        self.assertIsNone(r.get("never-set"))
        self.assertTrue(r.set("blob", b"replaced"))  # SET overwrites, as in Redis
        self.assertEqual(r.get("blob"), b"replaced")
        self.assertTrue(r.mset({"m1": b"one", "m2": b"two"}))
        self.assertEqual(r.mget(["m1", "nope", "m2"]), [b"one", None, b"two"])
        self.assertEqual(r.exists("m1", "m2", "nope"), 2)
        self.assertEqual(r.delete("m1", "nope"), 1)
        self.assertIsNone(r.get("m1"))
        self.assertGreaterEqual(r.dbsize(), 2)
        self.assertEqual(r.info()["redis_version"], "7.0.0")

    def test_set_options(self):
        r = self.r
        self.assertTrue(r.set("ttl", b"x", px=150))
        self.assertEqual(r.get("ttl"), b"x")
        time.sleep(0.3)
        self.assertIsNone(r.get("ttl"))  # expired reads as a miss
        self.assertTrue(r.set("ex", b"y", ex=100))
        self.assertEqual(r.get("ex"), b"y")
        self.assertTrue(r.set("nx", b"first", nx=True))
        self.assertIsNone(r.set("nx", b"second", nx=True))
        self.assertEqual(r.get("nx"), b"first")
        self.assertIsNone(r.set("xx-missing", b"v", xx=True))
        self.assertTrue(r.setex("sx", 100, b"z"))
        self.assertEqual(r.get("sx"), b"z")
        with self.assertRaises(redis.ResponseError):
            r.execute_command("SET", "k", "v", "EX", "-5")
        with self.assertRaises(redis.ResponseError):
            r.execute_command("NOSUCHCOMMAND")

    def test_commands_that_differed_from_redis(self):
        # Each accepted command does what Redis does, or is refused with an error.
        r = self.r
        self.assertTrue(r.execute_command("SELECT", "0"))
        with self.assertRaisesRegex(redis.ResponseError, "DB index is out of range"):
            r.execute_command("SELECT", "5")  # one keyspace: no silent sharing of dbs
        self.assertIsNone(r.client_getname())
        self.assertTrue(r.client_setname("worker-7"))
        self.assertEqual(r.client_getname(), "worker-7")
        self.assertIsInstance(r.client_id(), int)
        with self.assertRaises(redis.ResponseError):
            r.execute_command("CLIENT", "KILL", "ID", "1")
        # TTL / PTTL, and SET ... KEEPTTL keeps the expiry (plain SET drops it).
        self.assertEqual(r.ttl("no-such-key"), -2)
        self.assertTrue(r.set("plain", b"v"))
        self.assertEqual(r.ttl("plain"), -1)
        self.assertTrue(r.set("kt", b"a", ex=100))
        self.assertTrue(r.set("kt", b"b", keepttl=True))
        self.assertEqual(r.get("kt"), b"b")
        self.assertTrue(95 <= r.ttl("kt") <= 100, r.ttl("kt"))
        self.assertTrue(90_000 <= r.pttl("kt") <= 100_000)
        self.assertTrue(r.set("kt", b"c"))
        self.assertEqual(r.ttl("kt"), -1)
        self.assertTrue(r.set("kt-new", b"n", keepttl=True))  # a new key: no expiry
        self.assertEqual(r.ttl("kt-new"), -1)
        with self.assertRaises(redis.ResponseError):
            r.execute_command("SET", "k", "v", "EX", "10", "KEEPTTL")  # Redis: syntax error
        with self.assertRaises(redis.ResponseError):
            r.execute_command("SET", "k", "v", "NX", "XX")

    def test_silent_connections_are_closed(self):
        # 20 sockets that send one byte and go quiet: closed after the handshake timeout
        # (1 s here), and a real client is served meanwhile and after.
        d = Daemon(["--config", self.conf_with("[server]\nhandshake_timeout_ms = 1000\n")])
        try:
            silent = []
            for port in (d.resp_port, int(d.address.split(":")[1])):
                for _ in range(10):
                    s = socket.create_connection(("127.0.0.1", port))
                    s.sendall(b"*")
                    silent.append(s)
            r = redis.Redis(host="127.0.0.1", port=d.resp_port)
            self.assertTrue(r.set("still", b"served"))
            deadline = time.time() + 5
            closed = 0
            for s in silent:
                s.settimeout(max(0.1, deadline - time.time()))
                try:
                    closed += s.recv(1) == b""
                except (socket.timeout, ConnectionResetError):
                    pass
                s.close()
            self.assertEqual(closed, 20)
            self.assertEqual(r.get("still"), b"served")  # an active client stays
        finally:
            self.assertEqual(d.stop(), 0)

    def conf_with(self, text):
        d = tempfile.mkdtemp(prefix="kvpoold-conf-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "k.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_pipelines_and_transactions(self):
        p = self.r.pipeline(transaction=False)
        for i in range(200):
            p.set(f"p{i}", str(i))
        self.assertEqual(p.execute(), [True] * 200)
        p = self.r.pipeline()  # MULTI/EXEC
        for i in range(50):
            p.get(f"p{i}")
        self.assertEqual(p.execute(), [str(i).encode() for i in range(50)])

    def test_redis_cli(self):
        cli = ["redis-cli", "-h", "127.0.0.1", "-p", str(self.d.resp_port)]
        self.assertEqual(subprocess.check_output(cli + ["PING"]).strip(), b"PONG")
        subprocess.check_call(cli + ["SET", "from-cli", "hello world"], stdout=subprocess.DEVNULL)
        self.assertEqual(self.r.get("from-cli"), b"hello world")
        out = subprocess.check_output(cli + ["GET", "from-cli"]).strip()
        self.assertEqual(out, b"hello world")
        out = subprocess.check_output(cli, input=b"SET a 1\nGET a\nEXISTS a zz\nDEL a\n")
        self.assertEqual(out.split(), [b"OK", b"1", b"1", b"1"])

    def test_redis_benchmark(self):
        out = subprocess.run(
            ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.d.resp_port), "-t", "set,get,mset",
             "-n", "3000", "-c", "4", "-d", "4096", "-q"],
            capture_output=True, timeout=120, check=True).stdout.decode()
        # Every test ran and reported a rate, and nothing was an error.
        for t in ("SET", "GET", "MSET"):
            self.assertRegex(out, t + r".*requests per second")
        self.assertNotIn("ERR", out)

    def test_lmcache_redis_connector_call_sequence(self):
        # The calls LMCache's RedisConnector makes (lmcache/v1/storage_backend/connector/
        # redis_connector.py, LMCache main at 030c771, read 2026-12-02), through the same
        # redis.asyncio client it uses: put = SET <key>kv_bytes then SET <key>metadata;
        # exists / batched_async_contains = EXISTS <key>metadata; get = GET metadata, GET
        # kv_bytes; a kv_bytes miss with metadata present = DEL metadata.
        import asyncio
        import redis.asyncio as aredis

        async def run():
            pool = aredis.ConnectionPool.from_url(f"redis://127.0.0.1:{self.d.resp_port}",
                                                  max_connections=150)
            conn = aredis.Redis.from_pool(pool) if hasattr(aredis.Redis, "from_pool") \
                else aredis.Redis(connection_pool=pool)
            keys = [f"vllm@llama@1@0@{i:064x}" for i in range(8)]
            kv = [os.urandom(256 * 1024) for _ in keys]
            meta = [b"meta:" + str(len(v)).encode() for v in kv]
            await asyncio.gather(*(conn.set(k + "kv_bytes", v) for k, v in zip(keys, kv)))
            await asyncio.gather(*(conn.set(k + "metadata", m) for k, m in zip(keys, meta)))
            hits = 0
            for k in keys + ["vllm@llama@1@0@missing"]:
                if not await conn.exists(k + "metadata"):
                    break
                hits += 1
            self.assertEqual(hits, len(keys))
            got = await asyncio.gather(*(conn.get(k + "kv_bytes") for k in keys))
            self.assertEqual(got, kv)
            self.assertEqual(await conn.get(keys[0] + "metadata"), meta[0])
            await conn.delete(keys[1] + "kv_bytes")  # as if evicted
            self.assertIsNone(await conn.get(keys[1] + "kv_bytes"))
            await conn.delete(keys[1] + "metadata")  # what the connector does then
            self.assertFalse(await conn.exists(keys[1] + "metadata"))
            await conn.close()
            await pool.disconnect()

        asyncio.run(run())

    def test_flushall(self):
        self.r.set("f1", b"1")
        self.assertTrue(self.r.flushall())
        self.assertIsNone(self.r.get("f1"))
        self.assertEqual(self.r.dbsize(), 0)


class RespAuth(unittest.TestCase):
    def test_tenants_require_auth(self):
        d = tempfile.mkdtemp(prefix="kvpoold-conf-")
        conf = os.path.join(d, "k.toml")
        with open(conf, "w") as f:
            f.write('[server]\nresp_namespace = "cache"\n[[tenant]]\nname = "t"\n'
                    'token = "s3cret"\nnamespaces = ["cache"]\ndram_quota = "256KiB"\n')
        daemon = Daemon(["--config", conf])
        try:
            r = redis.Redis(host="127.0.0.1", port=daemon.resp_port)
            with self.assertRaises(redis.AuthenticationError):
                r.get("x")
            # Real Redis answers a bad password with WRONGPASS; this redis-py maps it to
            # ResponseError (newer ones to AuthenticationError).
            with self.assertRaisesRegex((redis.AuthenticationError, redis.ResponseError),
                                        "WRONGPASS"):
                redis.Redis(host="127.0.0.1", port=daemon.resp_port, password="wrong").get("x")
            ok = redis.Redis(host="127.0.0.1", port=daemon.resp_port, password="s3cret")
            self.assertTrue(ok.set("x", b"1"))
            self.assertEqual(ok.get("x"), b"1")
            with self.assertRaises(redis.ResponseError):
                ok.flushall()  # would empty every tenant
            with self.assertRaisesRegex(redis.ResponseError, "not available"):
                ok.dbsize()  # the store's size is every tenant's
            info = ok.info()  # the tenant's own figures, in Redis's fields
            self.assertEqual(info["used_memory"], 4096)  # its one block, not the store's
            self.assertEqual(info["maxmemory"], 256 * 1024)
            self.assertEqual(info["kvpool_tenant"], "t")
            self.assertEqual(info["keyspace_hits"], 1)
            self.assertEqual(info["connected_clients"], 1)
            # Its quota: values past it push its own older ones out; one larger than the
            # whole quota is refused as Redis refuses a write over maxmemory (OOM).
            for i in range(100):
                self.assertTrue(ok.set("k%d" % i, b"v" * 10000))
            self.assertLessEqual(ok.info()["used_memory"], 256 * 1024)
            self.assertEqual(ok.get("k99"), b"v" * 10000)
            self.assertIsNone(ok.get("k0"))
            with self.assertRaisesRegex(redis.ResponseError, "^OOM .*quota"):
                ok.set("big", b"x" * 300000)
        finally:
            self.assertEqual(daemon.stop(), 0)
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=1)
