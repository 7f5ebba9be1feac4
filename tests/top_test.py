#!/usr/bin/env python3
"""`kvpool top` as an operator runs it: in a real terminal (tmux), against real kvpoold
nodes under load, found directly or through the pod's member list in a real etcd.

- under tmux: the frame shows each node's row and the tenants, its figures move between
  two captures, and pressing q ends it (the terminal is given back: the shell's stty
  settings are restored);
- --once: two nodes found through etcd (each advertises its HTTP endpoint in its member
  record), a pod row summing them; exit status 1 when a node does not answer.

usage: top_test.py BUILD_DIR
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvpoold_process import Kvpoold, free_port  # noqa: E402

TMUX = shutil.which("tmux")
ETCD = shutil.which("etcd")
KVPOOL = os.path.join(BUILD, "kvpool")


def http_port(d):
    import json
    with open(os.path.join(d.dir, "ready.json")) as f:
        return json.load(f)["metrics_port"]


class RespLoad:
    def __init__(self, port):
        import redis
        self.r = redis.Redis(host="127.0.0.1", port=port)
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        i = 0
        while not self.stop.is_set():
            self.r.set("k%d" % (i % 200), b"v" * 1024)
            self.r.get("k%d" % ((i * 3) % 300))
            i += 1

    def finish(self):
        self.stop.set()
        self.t.join(timeout=10)


class Etcd:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvpool-etcd-")
        self.port, peer = free_port(), free_port()
        self.endpoint = "127.0.0.1:%d" % self.port
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "t", "--data-dir", self.dir + "/data",
             "--listen-client-urls", "http://" + self.endpoint,
             "--advertise-client-urls", "http://" + self.endpoint,
             "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-cluster", "t=http://127.0.0.1:%d" % peer, "--log-level", "error"],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("etcd did not start")
                time.sleep(0.1)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipIf(TMUX is None, "tmux not installed (scripts/deps.sh installs it)")
class TopInTmux(unittest.TestCase):
    def tmux(self, *args, check=True):
        return subprocess.run([TMUX, "-L", self.socket, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, check=check, timeout=20).stdout.decode()

    def setUp(self):
        self.socket = "kvpool-top-%d" % os.getpid()
        self.d = Kvpoold(os.path.join(BUILD, "kvpoold"), extra=["--metrics-listen", "127.0.0.1:0"])

    def tearDown(self):
        self.tmux("kill-server", check=False)
        self.assertEqual(self.d.stop(), 0)

    def alive(self):
        return "top" in self.tmux("list-sessions", check=False)

    def test_frames_move_and_q_quits(self):
        load = RespLoad(self.d.resp_port)
        try:
            cmd = "%s top --http 127.0.0.1:%d --interval 0.5" % (os.path.abspath(KVPOOL),
                                                                  http_port(self.d))
            self.tmux("new-session", "-d", "-s", "top", "-x", "200", "-y", "40",
                      "stty -a > %s/stty.before; %s; echo top-exited=$?; stty -a > %s/stty.after;"
                      " sleep 30" % (self.d.dir, cmd, self.d.dir))
            frames = []
            deadline = time.time() + 15
            while len(frames) < 2 and time.time() < deadline:
                time.sleep(0.7)
                screen = self.tmux("capture-pane", "-p", "-t", "top")
                if "GETS/S" in screen and "default" in screen and (
                        not frames or screen != frames[-1]):
                    frames.append(screen)
            self.assertEqual(len(frames), 2, frames)
            for screen in frames:
                self.assertIn("(q quits)", screen)
                row = [l for l in screen.splitlines() if l.startswith("127.0.0.1:")]
                self.assertEqual(len(row), 1, screen)
                fields = row[0].split()
                gets = fields[1]
                self.assertRegex(gets, r"^[0-9.]+k?$")
                self.assertRegex(fields[2], r"^[0-9.]+%$")  # hit ratio
                self.assertRegex(screen, r"default\s+1\s+[0-9.]+k?\s")  # tenant, one connection
            self.assertNotEqual(frames[0], frames[1])
            self.tmux("send-keys", "-t", "top", "q")
            deadline = time.time() + 5
            screen = ""
            while time.time() < deadline:
                screen = self.tmux("capture-pane", "-p", "-t", "top")
                if "top-exited=" in screen:
                    break
                time.sleep(0.1)
            self.assertIn("top-exited=0", screen)
            deadline = time.time() + 5
            while not os.path.exists(self.d.dir + "/stty.after") and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(0.2)
            with open(self.d.dir + "/stty.before") as a, open(self.d.dir + "/stty.after") as b:
                self.assertEqual(a.read(), b.read())  # echo and canonical mode given back
        finally:
            load.finish()


@unittest.skipIf(ETCD is None, "etcd not installed (scripts/deps.sh installs it)")
class TopOverThePod(unittest.TestCase):
    def test_nodes_from_etcd_and_a_node_that_does_not_answer(self):
        etcd = Etcd()
        nodes = []
        try:
            for name in ("n1", "n2"):
                nodes.append(Kvpoold(os.path.join(BUILD, "kvpoold"), extra=[
                    "--metrics-listen", "127.0.0.1:0", "--etcd", etcd.endpoint,
                    "--member-id", name, "--capacity", "1GiB"]))
            loads = [RespLoad(n.resp_port) for n in nodes]
            try:
                deadline = time.time() + 15
                while True:
                    out = subprocess.run([KVPOOL, "top", "--etcd", etcd.endpoint, "--once",
                                          "--interval", "0.5"], stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, timeout=30)
                    text = out.stdout.decode()
                    if (out.returncode == 0 and re.search(r"^n1 ", text, re.M) and
                            re.search(r"^n2 ", text, re.M)) or time.time() > deadline:
                        break
                    time.sleep(0.5)
            finally:
                for load in loads:
                    load.finish()
            self.assertEqual(out.returncode, 0, text)
            self.assertIn("2 nodes", text)
            self.assertRegex(text, r"(?m)^pod\s+[0-9.]+k?\s+[0-9.]+%")
            self.assertNotIn("\x1b[", text)  # plain text when not on a terminal
            self.assertIn("default", text)
            # A node listed but not answering: said so, and the exit status says it too.
            out = subprocess.run([KVPOOL, "top", "--http", "127.0.0.1:%d,127.0.0.1:1" %
                                  http_port(nodes[0]), "--once", "--interval", "0.2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            self.assertEqual(out.returncode, 1)
            self.assertRegex(out.stdout.decode(), r"(?m)^127\.0\.0\.1:1 +not answering: ")
            bad = subprocess.run([KVPOOL, "top", "--interval", "0"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=10)
            self.assertEqual(bad.returncode, 2)
            self.assertIn("--interval", bad.stdout.decode())
        finally:
            for n in nodes:
                self.assertEqual(n.stop(), 0)
            etcd.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
