#!/usr/bin/env python3
"""End-to-end integrity (issue 20): a node, or a hop, that flips bytes of a value on its way
back is a counted miss at the client, never wrong data.

Between the kvpool module's Client and a real kvpoold sits a TCP relay that, when told to,
flips one byte in the values of GET responses (the frames' own header CRC stays valid:
values are checked by the CRC32C the client computed at put, which the node stored).

usage: corrupting_node_test.py BUILD_DIR
"""
import os
import struct
import sys
import threading
import unittest

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
sys.path.insert(0, os.path.join(BUILD, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import kvpool  # noqa: E402
from kvpoold_process import Kvpoold  # noqa: E402
from tcp_relay import TcpRelay  # noqa: E402

HEADER = 40
GET_RESPONSE = 3 | 0x80


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


class Relay(TcpRelay):
    """Forwards one client's connection to kvpoold; corrupts GET values while `flip` is set."""

    def __init__(self, target):
        self.flip = threading.Event()
        self.flipped = 0
        super().__init__(target)

    def downstream(self, server, client):  # responses: frame by frame
        try:
            while True:
                head = recv_exact(server, HEADER)
                opcode = head[5]
                meta_len, data_len = struct.unpack_from("<IQ", head, 20)
                body = bytearray(recv_exact(server, meta_len + data_len))
                if opcode == GET_RESPONSE and data_len > 0 and self.flip.is_set():
                    body[meta_len + data_len // 2] ^= 0x10  # inside the first value
                    self.flipped += 1
                client.sendall(head + bytes(body))
        except (OSError, EOFError):
            pass
        client.close()


class CorruptingNode(unittest.TestCase):
    def test_flipped_bytes_are_counted_misses(self):
        d = Kvpoold(os.path.join(BUILD, "kvpoold"), resp=False)
        relay = Relay(d.address)
        try:
            c = kvpool.Client(relay.address, namespace="crc")
            keys = kvpool.chain_keys("crc", list(range(16 * 8)), 16)
            values = [np.full(4096, i + 1, np.uint8) for i in range(8)]
            self.assertEqual(c.batch_put(keys, values), ["OK"] * 8)
            outs = [np.zeros(4096, np.uint8) for _ in range(8)]
            self.assertEqual(c.batch_get(keys, outs), [4096] * 8)
            self.assertEqual(c.crc_failures, 0)
            relay.flip.set()
            for i, k in enumerate(keys):  # one value per response: each one corrupted
                out = np.zeros(4096, np.uint8)
                self.assertEqual(c.batch_get([k], [out]), [-1], i)
            self.assertEqual(relay.flipped, 8)
            self.assertEqual(c.crc_failures, 8)
            relay.flip.clear()
            self.assertEqual(c.batch_get(keys, outs), [4096] * 8)  # the node's copy was fine
            for i in range(8):
                self.assertTrue((outs[i] == i + 1).all())
        finally:
            relay.close()
            self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
