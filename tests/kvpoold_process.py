"""A real kvpoold for the Python tests: loopback ports chosen by the kernel (the ready file
says which), a temporary data directory, stopped by PID with SIGTERM."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest


def free_port():
    """A loopback TCP port nothing listens on now (for servers that cannot take port 0)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Kvpoold:
    def __init__(self, binary, extra=(), dram="128MiB", resp=True):
        self.dir = tempfile.mkdtemp(prefix="kvpoold-py-")
        ready = os.path.join(self.dir, "ready.json")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--data-dir", self.dir, "--dram", dram, "--flash", "0", "--no-prefault",
             "--listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0" if resp else "off",
             "--reactors", "2", "--ready-file", ready, *extra],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 10
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.close()
                if self.proc.poll() is None:
                    self.proc.kill()
                self.proc.wait()
                with open(self.log.name) as f:
                    text = f.read()
                shutil.rmtree(self.dir, ignore_errors=True)
                raise RuntimeError("kvpoold did not start: " + text)
            time.sleep(0.01)
        with open(ready) as f:
            info = json.load(f)
        self.resp_port = info["resp_port"]
        self.address = "127.0.0.1:%d" % info["port"]
        self.unix = "unix:" + info["unix"]

    def stop(self):
        """SIGTERM; returns the exit status (0 for a clean stop)."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


class KvpooldTestCase(unittest.TestCase):
    """Tests that share one kvpoold (self.d) for the whole class. Set KVPOOLD to its binary."""
    KVPOOLD = None

    @classmethod
    def setUpClass(cls):
        cls.d = Kvpoold(cls.KVPOOLD, resp=False)

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0, "kvpoold did not stop cleanly"
