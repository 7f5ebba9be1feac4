"""kvpool as a secondary tier of vLLM's tiered KV offloading (TieringOffloadingSpec).

vLLM's OffloadingConnector keeps a CPU primary tier; secondary tiers receive what it holds
(cascade) and give it back (promotion). This tier keeps those blocks in kvpoold, so every
vLLM instance of the pod finds what any of them offloaded. vLLM loads it out of tree:

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", ...,
        "secondary_tiers": [{"type": "KvpoolTier", "module_path": "kvpool.vllm",
                             "address": "127.0.0.1:7400"}]}}'

Tier options (the rest of the tier's dict): address ("host:port" or "unix:/path"), namespace
("vllm"), token, model (default: vLLM's served model), timeout_ms (5000), io_threads (2),
enable_secondary_tier_events / enable_kv_events (publish STORAGE-medium events through
vLLM's own KV events; vLLM's global kv_events_config must enable them too). Instances share
blocks only when their block hashes agree: start every instance with the same
PYTHONHASHSEED (vLLM seeds its hash chain from it) and the same hash algorithm.

Checked against vllm-project/vllm's vllm/v1/kv_offload/tiering/ (base.py, factory.py,
manager.py, fs/manager.py, async_lookup.py; read 2026-12 at the versions with TransferJob /
chunk_ids and with JobMetadata / block_ids, which this tier both accepts). Contract kept:
every method runs on the scheduler thread and returns at once (dictionary and queue work
only); I/O runs on this tier's threads, each with its own kvpool Client; the primary view is
addressed as chunk c = bytes [c * stride, (c + 1) * stride) with stride = view.strides[0].
lookup answers RETRY for a key it has not asked kvpoold about yet; the keys looked up in one
scheduler step go to kvpoold as one batch at the step's end (on_schedule_end, or the next
get_finished_jobs / take_events on vLLM versions without that hook), and the answer is
there for the step after. drain_jobs waits for every submitted job; none is aborted.

Keys: vLLM's OffloadKey (block hash + 4-byte KV group index) under
foreign_key(root, "vllm", key), root being the namespace of the model and the chunk size in
bytes (chunks of another shape never alias). Stores are insert-only and chain each block to
the one before it in the job (same group) for leaf-first eviction.

Not done: the tier publishes "stored" events only; blocks kvpoold evicts are announced by
kvpoold's own KV event publisher (--kv-events), not through vLLM. touch() does nothing
(kvpoold sees the loads). Lookups never answer HIT_PENDING, and every request gets the
default (chunk-level) offloading context. vLLM itself could not be run here: the tier is
tested by replaying the manager's calls (tests/vllm_tier_test.py) against a real kvpoold.
"""
import collections
import logging
import queue
import threading

from . import Client, Namespace, foreign_key

logger = logging.getLogger(__name__)

try:  # vLLM's own classes when vLLM is installed (the factory checks issubclass)
    from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager
    try:
        from vllm.v1.kv_offload.base import (LookupResult, Medium, OffloadingEvent,
                                             RequestOffloadingContext)
    except ImportError:  # older vLLM: lookup answers True / False / None
        LookupResult = Medium = OffloadingEvent = RequestOffloadingContext = None
except ImportError:  # vLLM is not installed here: the same shapes, for tests and tools
    import enum
    from dataclasses import dataclass

    class SecondaryTierManager:  # noqa: D101 - stands in for vLLM's ABC
        def __init__(self, offloading_spec=None, primary_kv_view=None, tier_type=None):
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view
            self.tier_type = tier_type

    @dataclass
    class JobResult:  # noqa: D101
        job_id: int
        success: bool
        successful_keys: object = None

    class LookupResult(enum.Enum):  # noqa: D101
        MISS = 1
        HIT = 2
        HIT_PENDING = 3
        RETRY = 4

    class Medium(enum.Enum):  # noqa: D101
        CPU = "CPU"
        STORAGE = "STORAGE"

    @dataclass
    class OffloadingEvent:  # noqa: D101
        keys: list
        medium: object
        removed: bool

    @dataclass
    class RequestOffloadingContext:  # noqa: D101
        pass


class _Job:
    __slots__ = ("job_id", "keys", "slots", "load")

    def __init__(self, job_id, keys, slots, load):
        self.job_id, self.keys, self.slots, self.load = job_id, keys, slots, load


class KvpoolTier(SecondaryTierManager):
    medium = Medium.STORAGE if Medium is not None else None

    def __init__(self, offloading_spec=None, primary_kv_view=None, tier_type="KvpoolTier",
                 address="127.0.0.1:7400", namespace="vllm", token="", model=None,
                 timeout_ms=5000, io_threads=2, enable_secondary_tier_events=False,
                 enable_kv_events=False, vllm_config=None, **unknown):
        if unknown:
            raise ValueError("kvpool.vllm: unknown tier option(s) %s" % ", ".join(sorted(unknown)))
        if primary_kv_view is None:
            raise ValueError("kvpool.vllm: no primary_kv_view (vLLM passes the CPU tier's view)")
        super().__init__(offloading_spec, primary_kv_view, tier_type)
        view = memoryview(primary_kv_view)
        self._stride = int(view.strides[0]) if view.ndim > 1 else int(view.itemsize)
        flat = view if view.ndim == 1 and view.format == "B" else view.cast("B")
        self._view = flat
        self._slots = flat.nbytes // self._stride
        if not 0 < int(io_threads) <= 64:
            raise ValueError("kvpool.vllm: io_threads must be 1..64")
        cfg = vllm_config or getattr(offloading_spec, "vllm_config", None)
        model = model or getattr(getattr(cfg, "model_config", None), "model", None) or "unknown-model"
        self.namespace = Namespace(model=str(model), tenant="default",
                                   layout="vllm/tier/%d" % self._stride)
        self.root = self.namespace.root()
        self._client_args = dict(address=address, namespace=namespace, token=token,
                                 timeout_ms=int(timeout_ms))
        Client(**self._client_args)  # invalid options fail here, not in a thread
        events_on = bool(enable_secondary_tier_events or enable_kv_events)
        if events_on and offloading_spec is not None:
            kv_events = getattr(offloading_spec, "kv_events_config", None)
            if kv_events is not None and not getattr(kv_events, "enable_kv_cache_events", True):
                logger.warning("kvpool.vllm: tier events asked for but vLLM's KV events are off")
                events_on = False
        self._events = [] if events_on else None
        # Scheduler-thread state (never touched by the I/O threads).
        self._known = {}             # key -> True / False (kvpoold's answer), None (asked)
        self._req_keys = collections.defaultdict(set)  # req_id -> keys it looked up
        self._key_reqs = collections.defaultdict(set)  # key -> req_ids holding the answer
        self._batch = []             # keys to ask about at the end of this step
        self._store_keys = {}        # job_id -> keys, for events
        self._pending = 0            # jobs submitted, not yet reported
        # Thread handoff.
        self._lookups = queue.SimpleQueue()   # lists of keys, or None to stop
        self._answers = queue.SimpleQueue()   # lists of (key, found)
        self._jobs = collections.deque()      # loads go first
        self._cv = threading.Condition()
        self._finished = queue.SimpleQueue()  # JobResult
        self._running = 0
        self._stop = False
        self._threads = [threading.Thread(target=self._lookup_loop, daemon=True,
                                          name="kvpool-vllm-lookup")]
        self._threads += [threading.Thread(target=self._io_loop, daemon=True,
                                           name="kvpool-vllm-io%d" % i) for i in range(int(io_threads))]
        for t in self._threads:
            t.start()

    @staticmethod
    def get_tier_type():
        return "KvpoolTier"

    # -- keys ------------------------------------------------------------------------------
    def _kv_key(self, key):
        return foreign_key(self.root, "vllm", bytes(key))

    def _slot(self, c):
        c = int(c)
        if not 0 <= c < self._slots:
            raise ValueError("kvpool.vllm: chunk %d outside the primary tier (%d)" % (c, self._slots))
        return self._view[c * self._stride:(c + 1) * self._stride]

    # -- lookups (scheduler thread) --------------------------------------------------------
    def _take_answers(self):
        while True:
            try:
                batch = self._answers.get_nowait()
            except queue.Empty:
                return
            for key, found in batch:
                if key in self._known:  # not forgotten meanwhile
                    self._known[key] = found

    def _answer(self, state):
        if LookupResult is None:
            return state
        if state is None:
            return LookupResult.RETRY
        return LookupResult.HIT if state else LookupResult.MISS

    def lookup(self, key, req_context):
        self._take_answers()
        if key not in self._known:
            self._known[key] = None
            self._batch.append(key)
        req = getattr(req_context, "req_id", None)
        if req is not None:
            self._req_keys[req].add(key)
            self._key_reqs[key].add(req)
        return self._answer(self._known[key])

    def _flush(self):
        if self._batch:
            self._lookups.put(self._batch)
            self._batch = []

    def on_schedule_end(self, context=None):
        self._flush()

    def on_new_request(self, req_context):
        return RequestOffloadingContext() if RequestOffloadingContext is not None else None

    def on_request_finished(self, req_context):
        req = getattr(req_context, "req_id", None)
        for key in self._req_keys.pop(req, ()):
            holders = self._key_reqs.get(key)
            if holders is not None:
                holders.discard(req)
                if not holders:
                    del self._key_reqs[key]
                    self._known.pop(key, None)  # a late answer for it is dropped

    request_finished = on_request_finished  # older name

    def touch(self, keys, req_context):
        return  # kvpoold sees the loads themselves; nothing to do on the scheduler thread

    # -- transfers (scheduler thread submits, I/O threads run) -----------------------------
    def _submit(self, job, load):
        slots = getattr(job, "chunk_ids", None)
        if slots is None:
            slots = job.block_ids
        keys = list(job.keys)
        slots = [int(c) for c in slots]
        if len(keys) != len(slots):
            raise ValueError("kvpool.vllm: %d keys for %d chunks" % (len(keys), len(slots)))
        if not load:
            # Blocks stored become known: a later lookup answers at once.
            for k in keys:
                if k in self._known:
                    self._known[k] = True
            if self._events is not None:
                self._store_keys[job.job_id] = keys
        with self._cv:
            j = _Job(job.job_id, keys, slots, load)
            if load:
                self._jobs.appendleft(j)
            else:
                self._jobs.append(j)
            self._pending += 1
            self._cv.notify()

    def submit_store(self, job_metadata):
        self._submit(job_metadata, load=False)

    def submit_load(self, job_metadata):
        self._submit(job_metadata, load=True)

    def get_finished_jobs(self):
        self._flush()  # vLLM versions without on_schedule_end poll here once per step
        out = []
        while True:
            try:
                r = self._finished.get_nowait()
            except queue.Empty:
                break
            out.append(r)
            keys = self._store_keys.pop(r.job_id, None)
            if keys and r.success and self._events is not None:
                self._events.append(OffloadingEvent(keys=keys, medium=self.medium, removed=False))
        with self._cv:
            self._pending -= len(out)
        return out

    get_finished = get_finished_jobs  # older name

    def has_pending_work(self):
        with self._cv:
            return self._pending > 0 or bool(self._batch)

    def take_events(self):
        self._flush()
        if not self._events:
            return ()
        ev, self._events = self._events, []
        return ev

    def drain_jobs(self):
        with self._cv:
            self._cv.wait_for(lambda: not self._jobs and self._running == 0)

    def shutdown(self):
        self.drain_jobs()
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._lookups.put(None)
        for t in self._threads:
            t.join(5)

    # -- threads ---------------------------------------------------------------------------
    def _lookup_loop(self):
        client = Client(**self._client_args)
        while True:
            keys = self._lookups.get()
            if keys is None:
                return
            try:
                found = client.batch_exists([self._kv_key(k) for k in keys])
            except Exception as e:  # noqa: BLE001 - an unreachable pool is a miss
                logger.warning("kvpool.vllm: lookup of %d keys failed: %s", len(keys), e)
                found = [False] * len(keys)
            self._answers.put(list(zip(keys, found)))

    def _io_loop(self):
        client = Client(**self._client_args)
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._stop or self._jobs)
                if self._stop and not self._jobs:
                    return
                job = self._jobs.popleft()
                self._running += 1
            try:
                result = self._run(client, job)
            except Exception as e:  # noqa: BLE001 - reported as a failed job, never raised
                logger.warning("kvpool.vllm: job %d failed: %s", job.job_id, e)
                result = JobResult(job_id=job.job_id, success=False)
            self._finished.put(result)
            with self._cv:
                self._running -= 1
                self._cv.notify_all()

    def _run(self, client, job):
        kv = [self._kv_key(k) for k in job.keys]
        bufs = [self._slot(c) for c in job.slots]
        if job.load:
            sizes = client.batch_get(kv, bufs)
            ok = [s == self._stride for s in sizes]
            if all(ok):
                return JobResult(job_id=job.job_id, success=True)
            got = [k for k, good in zip(job.keys, ok) if good]
            try:
                return JobResult(job_id=job.job_id, success=False, successful_keys=got)
            except TypeError:  # older JobResult: all or nothing
                return JobResult(job_id=job.job_id, success=False)
        parents, prev = [], None
        for k in job.keys:  # chain each block to the one before it in its KV group
            parents.append(prev if prev is not None and bytes(prev)[-4:] == bytes(k)[-4:] else None)
            prev = k
        status = client.batch_put(kv, bufs, parents=[None if p is None else self._kv_key(p)
                                                      for p in parents])
        return JobResult(job_id=job.job_id, success=all(s in ("OK", "Exists") for s in status))


__all__ = ["KvpoolTier"]
