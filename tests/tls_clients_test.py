#!/usr/bin/env python3
"""TLS 1.3 and connection timeouts against real clients (issue 20).

A kvpoold with --tls-cert is driven by redis-cli --tls, redis-py with ssl, openssl s_client,
Python's urllib over https (the HTTP endpoint) and the kvpool module (Client and Pool).
A TCP relay between a client and the node records the bytes on the wire: with TLS, a
known value is nowhere in them (without TLS it is: the check can fail). Then 1000 idle
and byte-at-a-time connections are opened against a node and new clients must be served.

usage: tls_clients_test.py BUILD_DIR
"""
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(BUILD, "python"))
sys.path.insert(0, HERE)

import redis  # noqa: E402

import kvpool  # noqa: E402
from kvpoold_process import Kvpoold, free_port  # noqa: E402
from tcp_relay import TcpRelay  # noqa: E402

KVPOOLD = os.path.join(BUILD, "kvpoold")
CERTS = tempfile.mkdtemp(prefix="kvpool-certs-")
subprocess.run([os.path.join(HERE, "..", "scripts", "make-test-certs.sh"), CERTS], check=True,
               stdout=subprocess.DEVNULL)


def cert(name):
    return os.path.join(CERTS, name)


TLS_FLAGS = ["--tls-cert", cert("server.pem"), "--tls-key", cert("server.key")]


class Recorder(TcpRelay):
    """A TCP relay that keeps every byte passing in either direction."""

    def __init__(self, target):
        self.seen_bytes = bytearray()
        self.lock = threading.Lock()
        super().__init__(target)

    def seen(self, data):
        with self.lock:
            self.seen_bytes += data


class TlsClients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.http_port = free_port()
        cls.d = Kvpoold(KVPOOLD, extra=TLS_FLAGS + ["--metrics-listen",
                                                     "127.0.0.1:%d" % cls.http_port])

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0

    def test_redis_cli_tls(self):
        base = ["redis-cli", "--tls", "--cacert", cert("ca.pem"), "-p", str(self.d.resp_port)]
        out = subprocess.run(base + ["SET", "cli-key", "cli-value"], capture_output=True,
                             text=True, timeout=10)
        self.assertEqual(out.stdout.strip(), "OK", out.stderr)
        out = subprocess.run(base + ["GET", "cli-key"], capture_output=True, text=True,
                             timeout=10)
        self.assertEqual(out.stdout.strip(), "cli-value")
        # Without --tls the port does not answer Redis's protocol.
        out = subprocess.run(["redis-cli", "-p", str(self.d.resp_port), "PING"],
                             capture_output=True, text=True, timeout=10)
        self.assertNotIn("PONG", out.stdout)

    def test_redis_py_ssl(self):
        r = redis.Redis(port=self.d.resp_port, ssl=True, ssl_ca_certs=cert("ca.pem"),
                        socket_timeout=5)
        value = os.urandom(200_000)  # many TLS records
        self.assertTrue(r.set(b"py-key", value))
        self.assertEqual(r.get(b"py-key"), value)
        pipe = r.pipeline(transaction=False)
        for i in range(50):
            pipe.set(b"p%d" % i, b"v%d" % i)
        pipe.execute()
        self.assertEqual(r.mget([b"p%d" % i for i in range(50)]),
                         [b"v%d" % i for i in range(50)])
        r.close()
        bad = redis.Redis(port=self.d.resp_port, ssl=True, ssl_ca_certs=cert("rogue-ca.pem"),
                          socket_timeout=5)
        with self.assertRaises(redis.exceptions.ConnectionError):
            bad.ping()

    def test_openssl_s_client_tls13_only(self):
        for port in (int(self.d.address.rsplit(":", 1)[1]), self.d.resp_port, self.http_port):
            out = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                                  "-CAfile", cert("ca.pem"), "-verify_return_error"],
                                 input="", capture_output=True, text=True, timeout=10)
            self.assertIn("TLSv1.3", out.stdout, out.stderr)
            self.assertIn("Verify return code: 0 (ok)", out.stdout)
            old = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                                  "-tls1_2"], input="", capture_output=True, text=True,
                                 timeout=10)
            self.assertNotEqual(old.returncode, 0)
            self.assertIn("alert protocol version", old.stdout + old.stderr)

    def test_https_endpoint(self):
        ctx = ssl.create_default_context(cafile=cert("ca.pem"))
        url = "https://127.0.0.1:%d/metrics" % self.http_port
        body = urllib.request.urlopen(url, context=ctx, timeout=5).read().decode()
        self.assertIn("kvpool_tls_failures_total", body)
        page = urllib.request.urlopen("https://localhost:%d/" % self.http_port, context=ctx,
                                      timeout=5).read()
        self.assertIn(b"<html", page)
        with self.assertRaises(Exception):  # plain HTTP to a TLS port
            urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.http_port, timeout=3)

    def test_kvpool_module_client_and_pool(self):
        c = kvpool.Client(self.d.address, namespace="tls", tls=True, tls_ca=cert("ca.pem"))
        keys = kvpool.chain_keys("tls", list(range(16 * 4)), 16)
        values = [bytes([i + 1]) * 70_000 for i in range(4)]
        self.assertEqual(c.batch_put(keys, values), ["OK"] * 4)
        for k, v in zip(keys, values):
            self.assertEqual(c.get(k), v)
        rogue = kvpool.Client(self.d.address, namespace="tls", tls=True,
                              tls_ca=cert("rogue-ca.pem"))
        with self.assertRaises(kvpool.Unavailable):  # the handshake fails: no answer
            rogue.put("x", b"1")
        pool = kvpool.Pool(members=self.d.address, namespace="tls", tls=True,
                           tls_ca=cert("ca.pem"))
        self.assertEqual(pool.batch_put([kvpool.Key(9, 9)], [b"pooled"]), ["OK"])
        out = bytearray(6)
        self.assertEqual(pool.batch_get([kvpool.Key(9, 9)], [out]), [6])
        self.assertEqual(bytes(out), b"pooled")

    def test_known_plaintext_is_not_on_the_wire(self):
        secret = b"KNOWN-PLAINTEXT-" * 512
        for tls in (True, False):
            d = self.d if tls else Kvpoold(KVPOOLD)
            relay = Recorder(d.address)
            try:
                c = kvpool.Client(relay.address, namespace="wire", tls=tls,
                                  tls_ca=cert("ca.pem") if tls else "",
                                  tls_server_name="127.0.0.1" if tls else "")
                self.assertEqual(c.put("wire-key", secret), "OK")
                self.assertEqual(c.get("wire-key"), secret)
                time.sleep(0.2)
                with relay.lock:
                    seen = bytes(relay.seen_bytes)
                self.assertGreater(len(seen), 2 * len(secret))
                # The control: without TLS the value crosses the wire as it is.
                self.assertEqual(b"KNOWN-PLAINTEXT-" in seen, not tls)
            finally:
                relay.close()
                if not tls:
                    self.assertEqual(d.stop(), 0)


class SlowAndIdleClients(unittest.TestCase):
    """Idle sockets and byte-at-a-time senders do not lock clients out."""

    def test_new_clients_served_while_1000_idle_or_slow_connections_are_open(self):
        d = Kvpoold(KVPOOLD, extra=["--max-connections", "1100"])
        port = d.resp_port
        socks = []
        try:
            for i in range(1000):
                s = socket.create_connection(("127.0.0.1", port))
                if i % 2:  # slow: a command's first bytes, then nothing more
                    s.sendall(b"*3\r\n$3\r\nSE")
                socks.append(s)
            r = redis.Redis(port=port, socket_timeout=5)
            worst = 0.0
            for i in range(50):
                t0 = time.perf_counter()
                self.assertTrue(r.set(b"k%d" % i, b"v"))
                worst = max(worst, time.perf_counter() - t0)
            print("1000 idle/slow connections open: worst of 50 SETs %.2f ms" % (worst * 1e3))
            self.assertLess(worst, 1.0)
        finally:
            for s in socks:
                s.close()
            self.assertEqual(d.stop(), 0)

    def test_a_stalled_tls_record_is_closed(self):
        """A TLS client past its first command that sends part of a record and stops."""
        config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
        config.write("[server]\nrequest_timeout_ms = 1500\n")
        config.close()
        d = Kvpoold(KVPOOLD, extra=TLS_FLAGS + ["--config", config.name])
        try:
            sock = socket.create_connection(("127.0.0.1", d.resp_port))
            ctx = ssl.create_default_context(cafile=cert("ca.pem"))
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")

            def pump():
                data = outgoing.read()
                if data:
                    sock.sendall(data)

            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    pump()
                    incoming.write(sock.recv(65536))
            pump()
            tls.write(b"PING\r\n")
            pump()
            reply = b""
            while b"PONG" not in reply:
                incoming.write(sock.recv(65536))
                try:
                    reply += tls.read(100)
                except ssl.SSLWantReadError:
                    pass
            tls.write(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
            record = outgoing.read()
            sock.sendall(record[:-3])  # all but the record's last bytes, then nothing
            sock.settimeout(6)
            t0 = time.time()
            try:
                while sock.recv(65536):  # (a ticket or an alert may come first)
                    pass
            except ConnectionResetError:
                pass
            waited = time.time() - t0
            self.assertLess(waited, 4.5)
            print("a stalled TLS record was closed after %.1f s" % waited)
        finally:
            os.unlink(config.name)
            self.assertEqual(d.stop(), 0)

    def test_byte_at_a_time_senders_are_closed(self):
        config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
        config.write("[server]\nmax_connections = 8\nrequest_timeout_ms = 1500\n"
                     "handshake_timeout_ms = 1500\n")
        config.close()
        d = Kvpoold(KVPOOLD, extra=["--config", config.name])
        port = d.resp_port
        slow = []
        try:
            # Eight clients that completed a PING (handshaken), then trickle a SET.
            for _ in range(8):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"PING\r\n")
                self.assertEqual(s.recv(16), b"+PONG\r\n")
                slow.append(s)
            refused = socket.create_connection(("127.0.0.1", port))
            refused.settimeout(3)
            self.assertIn(b"max connections", refused.recv(100))
            command = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n"
            t0 = time.time()
            closed = 0
            for i in range(len(command) - 1):  # one byte each 200 ms: never completes
                for s in slow:
                    try:
                        s.sendall(command[i:i + 1])
                    except OSError:
                        pass
                time.sleep(0.2)
                r = redis.Redis(port=port, socket_timeout=2)
                try:
                    if r.ping():
                        break
                except (redis.exceptions.ConnectionError, redis.exceptions.ResponseError):
                    pass  # refused while the slow ones hold every slot
                finally:
                    r.close()
            waited = time.time() - t0
            self.assertLess(waited, 6.0)
            for s in slow:
                s.settimeout(1)
                try:
                    closed += s.recv(1) == b""
                except (ConnectionResetError, socket.timeout):
                    closed += 1
            self.assertEqual(closed, 8)
            print("8 byte-at-a-time senders closed; a new client served after %.1f s" % waited)
        finally:
            for s in slow:
                s.close()
            os.unlink(config.name)
            self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
