"""python3 -m kvpool: one operation against a kvpoold, from Python."""
import argparse
import sys

from . import Client, Timeout, Unavailable

EPILOG = """engines:
  SGLang HiCache:  --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
      '{"backend_name": "kvpool", "module_path": "kvpool.sglang",
        "class_name": "KvpoolHiCacheStorage", "address": "127.0.0.1:7400"}'
  LMCache (vLLM):  --l2-adapter '{"type": "native_plugin", "module_path": "kvpool.lmcache",
      "class_name": "Connector", "adapter_params": {"address": "127.0.0.1:7400"}}'
  KV-aware routers: kvpoold --kv-events tcp://*:5557 --kv-events-replay tcp://*:5558
In Python: kvpool.Client / Pool / Store / NearCache, kvpool.Namespace, kvpool.engines
(help(kvpool) says more)."""


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m kvpool",
        description="kvpool's Python client: put, get, exists, del, stat or ping against a kvpoold.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    p.add_argument("--address", default="127.0.0.1:7400", help="host:port or unix:/path (default %(default)s)")
    p.add_argument("--namespace", default="default", help="key namespace (default %(default)s)")
    p.add_argument("--token", default="", help="access token, if the server has tenants")
    sub = p.add_subparsers(dest="cmd", required=True)
    put = sub.add_parser("put", help="store a file (or stdin) under KEY")
    put.add_argument("key")
    put.add_argument("file", nargs="?", default="-")
    get = sub.add_parser("get", help="write the value of KEY to stdout (exit 1 on a miss)")
    get.add_argument("key")
    ex = sub.add_parser("exists", help="exit 0 if KEY is held, 1 if not")
    ex.add_argument("key")
    de = sub.add_parser("del", help="erase KEY")
    de.add_argument("key")
    sub.add_parser("stat", help="the server's counters")
    sub.add_parser("ping", help="exit 0 if the server answers")
    a = p.parse_args(argv)
    c = Client(a.address, a.namespace, a.token)
    try:
        return _run(a, c)
    except (Unavailable, Timeout) as e:
        print("no answer: %s" % e, file=sys.stderr)
        return 2


def _run(a, c):
    if a.cmd == "put":
        data = sys.stdin.buffer.read() if a.file == "-" else open(a.file, "rb").read()
        status = c.put(a.key, data, overwrite=True)
        print(status)
        return 0 if status == "OK" else 1
    if a.cmd == "get":
        v = c.get(a.key)
        if v is None:
            print("miss", file=sys.stderr)
            return 1
        sys.stdout.buffer.write(v)
        return 0
    if a.cmd == "exists":
        return 0 if c.exists(a.key) else 1
    if a.cmd == "del":
        return 0 if c.erase(a.key) else 1
    if a.cmd == "stat":
        print(c.stats(), end="")
        return 0
    return 0 if c.ping() else 1


if __name__ == "__main__":
    sys.exit(main())
