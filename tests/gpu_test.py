#!/usr/bin/python3
"""kvpool.gpu from Python: everywhere, the errors a host without a GPU gives (clear, never a
crash); on a GPU host (scripts/gpu-check.sh), blocks into torch CUDA tensors of vLLM's and
SGLang's layouts from a Store, a NearCache, kvpoold (TCP, same-host region, several
connections), layer streaming, and saves back, each byte checked against torch's own
indexing of the cache.

usage: gpu_test.py BUILD_DIR      (uses BUILD_DIR/python and BUILD_DIR/kvpoold)
"""
import os
import sys
import unittest

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
sys.path.insert(0, os.path.join(BUILD, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvpool  # noqa: E402
from kvpoold_process import Kvpoold  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:
    torch = None

HAVE_GPU, GPU_INFO = kvpool.gpu.available()
HAVE_CUDA_TORCH = torch is not None and torch.cuda.is_available()


class FakeCudaArray:
    """An object that claims GPU memory (as CuPy or Numba arrays do); nothing touches it."""
    def __init__(self, shape, typestr="<f2", ptr=0x7f0000000000):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "version": 3, "strides": None}


class Everywhere(unittest.TestCase):
    def test_available_says_why_not(self):
        ok, info = kvpool.gpu.available()
        self.assertIsInstance(ok, bool)
        self.assertTrue(info)  # the device, or the reason there is none

    def test_layouts_from_array_interfaces(self):
        layers = [FakeCudaArray((2, 8, 16, 2, 64)) for _ in range(3)]
        lay = kvpool.gpu.Layout.vllm(layers)
        self.assertEqual((lay.layers, lay.num_slots, lay.chunk_bytes), (3, 8, 16 * 2 * 64 * 2))
        self.assertEqual(lay.block_bytes(), 3 * 2 * lay.chunk_bytes)
        self.assertEqual(lay.block_bytes(1), 2 * lay.chunk_bytes)
        k = [FakeCudaArray((64, 4, 128)) for _ in range(2)]
        sg = kvpool.gpu.Layout.split(k, [FakeCudaArray((64, 4, 128)) for _ in range(2)], page_size=16)
        self.assertEqual((sg.layers, sg.num_slots, sg.chunk_bytes), (2, 4, 16 * 4 * 128 * 2))
        cl = kvpool.gpu.Layout.cross_layer(FakeCudaArray((10, 4, 2, 16, 8, 128)))
        self.assertEqual((cl.layers, cl.num_slots), (4, 10))

    def test_bad_layouts_raise_value_error(self):
        with self.assertRaisesRegex(ValueError, r"\[2\]\[num_blocks\]"):
            kvpool.gpu.Layout.vllm([FakeCudaArray((3, 8, 16))])
        with self.assertRaisesRegex(ValueError, "same shape"):
            kvpool.gpu.Layout.vllm([FakeCudaArray((2, 8, 16)), FakeCudaArray((2, 4, 16))])
        with self.assertRaisesRegex(ValueError, "fewer tokens than one page"):
            kvpool.gpu.Layout.split([FakeCudaArray((8, 4))], None, page_size=16)
        with self.assertRaises(ValueError):
            kvpool.gpu.Layout.vllm([])

    @unittest.skipIf(torch is None, "python3-torch is not installed")
    def test_cpu_tensors_are_refused_with_the_reason(self):
        with self.assertRaisesRegex(ValueError, "not a CUDA tensor"):
            kvpool.gpu.Layout.vllm([torch.zeros(2, 4, 16, 2, 8)])

    @unittest.skipIf(HAVE_GPU, "a GPU is present: " + GPU_INFO)
    def test_without_a_gpu_a_loader_raises_with_the_reason(self):
        self.assertIn("prestage", dir(kvpool.gpu.Loader))
        lay = kvpool.gpu.Layout.vllm([FakeCudaArray((2, 8, 16, 2, 64))])
        with self.assertRaisesRegex(RuntimeError, "Unavailable"):
            kvpool.gpu.Loader(lay)
        with self.assertRaisesRegex(RuntimeError, "Unavailable"):
            kvpool.gpu.register(kvpool.Store(dram_bytes=16 << 20))


def block_bytes_of(cache, layer_caches, slot):
    """What kvpool holds for the block in `slot` of a vLLM cache: [layer][k, v][chunk]."""
    return torch.cat([lc[kv, slot].reshape(-1).view(torch.uint8)
                      for lc in layer_caches for kv in range(2)]).cpu()


@unittest.skipUnless(HAVE_GPU and HAVE_CUDA_TORCH, "no GPU here: " + GPU_INFO)
class OnTheGpu(unittest.TestCase):
    LAYERS, BLOCKS, BT, HEADS, DIM = 4, 64, 16, 2, 64

    def setUp(self):
        shape = (2, self.BLOCKS, self.BT, self.HEADS, self.DIM)
        self.caches = [torch.zeros(shape, dtype=torch.bfloat16, device="cuda") for _ in range(self.LAYERS)]
        self.layout = kvpool.gpu.Layout.vllm(self.caches)
        self.src = [torch.randn(shape, dtype=torch.bfloat16, device="cuda") for _ in range(self.LAYERS)]

    def host_block(self, slot):
        return block_bytes_of(None, self.src, slot).numpy()

    def check(self, slots_from, slots_to):
        torch.cuda.synchronize()
        for a, b in zip(slots_from, slots_to):
            for l in range(self.LAYERS):
                self.assertTrue(torch.equal(self.caches[l][:, b], self.src[l][:, a]), (a, b, l))

    def test_store_and_near_cache_into_vllm_layout_and_back(self):
        store = kvpool.Store(dram_bytes=64 << 20)
        keys = kvpool.chain_keys("gpu-test", list(range(16 * 10)), 16)
        for i, k in enumerate(keys):
            self.assertEqual(store.put(k, self.host_block(i)), "OK")
        kvpool.gpu.register(store)
        loader = kvpool.gpu.Loader(self.layout)
        slots = [63 - 3 * i for i in range(10)]
        st = loader.load(store, keys, slots, stream=torch.cuda.current_stream())
        self.assertEqual(st, ["OK"] * 10)
        loader.synchronize()
        self.check(range(10), slots)
        self.assertEqual(loader.stats()["staged_blocks"], 0)
        # Layer by layer: on_layer in order, every layer in place once the last event passed.
        for c in self.caches:
            c.zero_()
        seen = []
        events, st = loader.load_layerwise(store, keys, slots, stream=torch.cuda.current_stream(),
                                           on_layer=seen.append)
        self.assertEqual((st, seen), (["OK"] * 10, list(range(self.LAYERS))))
        events[-1].synchronize()
        self.check(range(10), slots)
        # Save slots back into a fresh store; its bytes equal the source blocks.
        out = kvpool.Store(dram_bytes=64 << 20)
        new_keys = [kvpool.Key(5, i) for i in range(10)]
        self.assertEqual(loader.save(out, new_keys, slots), ["OK"] * 10)
        for i, k in enumerate(new_keys):
            self.assertEqual(out.get(k), self.host_block(i).tobytes())
        # A miss and a wrong-sized block do not fail the batch.
        store.put(kvpool.Key(9, 9), b"short")
        st = loader.load(store, [keys[0], kvpool.Key(8, 8), kvpool.Key(9, 9)], [0, 1, 2])
        self.assertEqual(st, ["OK", "NotFound", "InvalidArgument"])

    def test_kvpoold_tcp_shared_memory_and_parallel_connections(self):
        d = Kvpoold(os.path.join(BUILD, "kvpoold"), resp=False)
        try:
            keys = [kvpool.Key(11, i) for i in range(40)]
            w = kvpool.Client(d.address, namespace="gpu")
            self.assertEqual(w.batch_put(keys, [self.host_block(i) for i in range(40)]), ["OK"] * 40)
            loader = kvpool.gpu.Loader(self.layout, chunk_blocks=8)
            for source in (kvpool.Client(d.address, namespace="gpu"),
                           kvpool.Client(d.unix, namespace="gpu", shared_memory_bytes=16 << 20),
                           [kvpool.Client(d.unix, namespace="gpu", shared_memory_bytes=16 << 20)
                            for _ in range(3)]):
                for c in self.caches:
                    c.zero_()
                slots = [(7 * i) % self.BLOCKS for i in range(40)]
                self.assertEqual(loader.load(source, keys, slots), ["OK"] * 40)
                loader.synchronize()
                self.check(range(40), slots)
            # Layer streaming: per-layer keys, an event per layer.
            c = kvpool.Client(d.unix, namespace="gpu", shared_memory_bytes=16 << 20)
            blocks = [kvpool.Key(12, i) for i in range(6)]
            for l in range(self.LAYERS):
                vals = [torch.cat([self.src[l][kv, i].reshape(-1).view(torch.uint8) for kv in range(2)]).cpu().numpy()
                        for i in range(6)]
                c.put_layer(blocks, l, vals)
            for cc in self.caches:
                cc.zero_()
            seen = []
            events, st = loader.load_layers(c, blocks, [10 + i for i in range(6)], list(range(self.LAYERS)),
                                            stream=torch.cuda.current_stream(), on_layer=seen.append)
            self.assertEqual(st, ["OK"] * (6 * self.LAYERS))
            self.assertEqual(seen, list(range(self.LAYERS)))  # each layer announced in order
            for e in events:
                e.wait(torch.cuda.current_stream())
            self.check(range(6), [10 + i for i in range(6)])
            with self.assertRaises(ZeroDivisionError):  # the callback's error reaches the caller
                loader.load_layers(c, blocks, [10 + i for i in range(6)], [0, 1], on_layer=lambda i: 1 / 0)
            # Near cache in front of kvpoold: prestaged blocks come from pinned memory.
            near = kvpool.NearCache(d.address, namespace="gpu", dram_bytes=64 << 20)
            t = near.prestage(keys[:20], timeout_ms=5000)
            self.assertEqual(near.wait_prestaged(t, 5000), 20)
            for cc in self.caches:
                cc.zero_()
            self.assertEqual(loader.load(near, keys[:30], list(range(30))), ["OK"] * 30)
            loader.synchronize()
            self.check(range(30), range(30))
            # Prestaged into GPU memory: the near cache pulls, the loader's thread moves.
            near2 = kvpool.NearCache(d.address, namespace="gpu", dram_bytes=64 << 20)
            for cc in self.caches:
                cc.zero_()
            t = loader.prestage(near2, keys[:25] + [kvpool.Key(99, 99)] + keys[25:30],
                                [40 + i for i in range(31)], timeout_ms=5000)
            self.assertEqual(loader.wait_prestaged(t), 25)  # the prefix ends at the miss
            self.check(range(25), [40 + i for i in range(25)])
            with self.assertRaises(ValueError):
                loader.wait_prestaged(t)  # reported once
        finally:
            self.assertEqual(d.stop(), 0)

    def test_sglang_split_layout(self):
        tokens, page = 256, 16
        k = [torch.randn(tokens, self.HEADS, self.DIM, dtype=torch.float16, device="cuda") for _ in range(2)]
        v = [torch.randn(tokens, self.HEADS, self.DIM, dtype=torch.float16, device="cuda") for _ in range(2)]
        lay = kvpool.gpu.Layout.split(k, v, page_size=page)
        loader = kvpool.gpu.Loader(lay)
        store = kvpool.Store(dram_bytes=32 << 20)
        keys = [kvpool.Key(3, i) for i in range(4)]
        self.assertEqual(loader.save(store, keys, [1, 3, 5, 7]), ["OK"] * 4)
        want = [x.clone() for x in k + v]
        for x in k + v:
            x.zero_()
        self.assertEqual(loader.load(store, keys, [2, 4, 6, 8]), ["OK"] * 4)
        loader.synchronize()
        for x, w in zip(k + v, want):
            for a, b in zip([1, 3, 5, 7], [2, 4, 6, 8]):
                self.assertTrue(torch.equal(x[b * page:(b + 1) * page], w[a * page:(a + 1) * page]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
