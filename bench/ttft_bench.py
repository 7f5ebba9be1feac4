#!/usr/bin/env python3
"""Time to first token with kvpool against recomputing the prefix, on a GPU host.

A Llama-3.1-8B-shaped model (transformers' LlamaForCausalLM from a config, random bf16
weights: compute time does not depend on the weights) answers a prompt of T tokens:
  recompute   prefill all T tokens, first token
  reload      the first P = T - 16 tokens' KV loaded from kvpool into a vLLM-layout paged
              cache on the GPU (kvpool.gpu.Loader), then the last 16 tokens prefilled over
              it, first token; from (a) the near cache in pinned host memory (prestaged),
              (b) kvpoold on this host (Unix socket, same-host shared region), (c) kvpoold
              over loopback TCP; (b) and (c) with 1 and with N parallel connections.
The reload's first-token logits are compared with the recompute's (the same model, the same
tokens): the loaded KV must give the same answer. The layer-streaming section measures the
stall of a request whose prefix is prestaged against one fetched on demand, whole or layer
by layer (an event per layer, the compute stream waiting only for the layer it needs).

Writes OUT/ttft.json and prints a table. Median of --reps timed runs after a warm-up.

usage: ttft_bench.py --build DIR --kvpoold PATH --out DIR [--tokens 8192,32768] [--reps 3]
                     [--connections 4]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--build", required=True, help="directory holding python/kvpool")
ap.add_argument("--kvpoold", required=True, help="the kvpoold binary")
ap.add_argument("--out", required=True)
ap.add_argument("--tokens", default="8192,32768")
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--connections", type=int, default=8)
ap.add_argument("--layers", type=int, default=32, help="model layers (32: Llama-3.1-8B)")
ap.add_argument("--no-layer-streaming", action="store_true", help="skip the stall measurement")
args = ap.parse_args()
sys.path.insert(0, os.path.join(args.build, "python"))

import torch  # noqa: E402
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

import kvpool  # noqa: E402

BT, KVH, HD, SUFFIX, NS = 16, 8, 128, 16, "ttft/llama-3.1-8b-shape/bf16"
os.makedirs(args.out, exist_ok=True)
RESULT = {"device": kvpool.gpu.available()[1], "torch": torch.__version__, "rows": [], "errors": []}


def log(*a):
    print(*a, flush=True)


def save():
    with open(os.path.join(args.out, "ttft.json"), "w") as f:
        json.dump(RESULT, f, indent=1)


def timed(fn, reps, before=None):
    """Median seconds of fn() over reps runs after one warm-up; fn's last result."""
    if before:
        before()
    r = fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        if before:
            before()
        torch.cuda.synchronize()
        t = time.perf_counter()
        r = fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), ts, r


class Kvpoold:
    def __init__(self, binary, dram):
        self.dir = tempfile.mkdtemp(prefix="kvpoold-ttft-")
        ready = os.path.join(self.dir, "ready.json")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--data-dir", self.dir, "--dram", dram, "--flash", "0", "--no-prefault",
             "--listen", "127.0.0.1:0", "--resp-listen", "off", "--ready-file", ready],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 20
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("kvpoold did not start: " + open(self.log.name).read())
            time.sleep(0.02)
        time.sleep(0.05)
        info = json.load(open(ready))
        self.tcp = "127.0.0.1:%d" % info["port"]
        self.unix = "unix:" + info["unix"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def kv_of(cache, layer):
    if hasattr(cache, "layers"):
        return cache.layers[layer].keys, cache.layers[layer].values
    return cache.key_cache[layer], cache.value_cache[layer]


def init_layers(cache, L, like):
    """Initializes every layer of the HF cache with no tokens (transformers creates a layer's
    tensors on its first update, with a host-synchronizing copy: done here, before any load is
    in flight, so that handing layers over later never waits for the GPU). False where the
    cache keeps no per-layer tensors (then fill_layer copies through update())."""
    layers = getattr(cache, "layers", None)
    if layers is None or len(layers) < L or not hasattr(layers[0], "keys"):
        return False
    try:
        for layer in range(L):
            cache.update(like[:, :, :0], like[:, :, :0], layer)
        return True
    except Exception:
        return False


def fill_layer(cache, layer, k, v, initialized):
    """Hands the loaded prefix KV (views of the paged cache) to the HF cache: without a copy
    where init_layers succeeded (as an engine hands its paged KV to attention), else through
    update() (one copy)."""
    if initialized:
        cache.layers[layer].keys, cache.layers[layer].values = k, v
    else:
        cache.update(k, v, layer)


def new_cache(model):
    try:
        return DynamicCache(config=model.config)
    except TypeError:
        return DynamicCache()


def main():
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=KVH,
                      max_position_embeddings=131072, rms_norm_eps=1e-5,
                      tie_word_embeddings=False)
    try:
        cfg._attn_implementation = "sdpa"
    except Exception as e:  # the default is sdpa where torch has it
        log("attention implementation left at the default:", e)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    t = time.perf_counter()
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model = model.to(torch.bfloat16).eval()
    L = cfg.num_hidden_layers
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters, {L} layers, "
        f"built in {time.perf_counter() - t:.1f} s on {RESULT['device']}")
    RESULT["model"] = {"layers": L, "hidden": 4096, "kv_heads": KVH, "head_dim": HD, "dtype": "bf16",
                       "kv_bytes_per_token": L * 2 * KVH * HD * 2}

    @torch.inference_mode()
    def forward(ids, cache=None):
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1].float()

    tokens = [int(x) for x in args.tokens.split(",")]
    d = Kvpoold(args.kvpoold, "%dGiB" % max(8, 2 * sum(tokens) * L * 2 * KVH * HD * 2 // (1 << 30) + 4))
    try:
        for T in tokens:
            try:
                run_length(model, forward, d, T, L)
            except Exception:
                RESULT["errors"].append(f"T={T}: " + traceback.format_exc())
                log(traceback.format_exc())
            save()
            torch.cuda.empty_cache()
    finally:
        rc = d.stop()
        RESULT["kvpoold_exit"] = rc
        save()


def run_length(model, forward, d, T, L):
    P = T - SUFFIX
    nb = P // BT
    ids = torch.randint(0, 128256, (1, T), device="cuda", generator=torch.Generator("cuda").manual_seed(T))
    kv_bytes = nb * L * 2 * BT * KVH * HD * 2
    log(f"\n== T={T} tokens: prefix {P} ({nb} blocks of {BT} tokens, {kv_bytes / 2**30:.2f} GiB of KV)")

    rec_s, rec_all, ref_logits = timed(lambda: forward(ids), args.reps)
    log(f"recompute (prefill {T} tokens): {rec_s * 1e3:.1f} ms  {['%.1f' % (x * 1e3) for x in rec_all]}")
    row = {"tokens": T, "prefix_tokens": P, "blocks": nb, "kv_bytes": kv_bytes, "recompute_ms": rec_s * 1e3,
           "recompute_runs_ms": [x * 1e3 for x in rec_all], "paths": {}}
    RESULT["rows"].append(row)
    save()

    # The prefix's KV as the engine would have it: prefill of P tokens, into vLLM's layout.
    with torch.inference_mode():
        cache = new_cache(model)
        model(input_ids=ids[:, :P], past_key_values=cache, use_cache=True, logits_to_keep=1)
        ref = []
        for layer in range(L):
            k, v = kv_of(cache, layer)  # [1, KVH, P, HD]
            ref.append(torch.stack([x[0].transpose(0, 1).reshape(nb, BT, KVH, HD) for x in (k, v)]))
        del cache
    paged = [torch.zeros_like(r) for r in ref]
    layout = kvpool.gpu.Layout.vllm(paged)
    ref_layout = kvpool.gpu.Layout.vllm(ref)
    keys = kvpool.chain_keys(NS, ids[0, :P].tolist(), BT)
    slots = list(range(nb))
    assert len(keys) == nb and layout.block_bytes() == L * 2 * BT * KVH * HD * 2

    # kvpoold gets the blocks through the GPU save path (GPU -> same-host region -> kvpoold).
    saver = kvpool.gpu.Loader(ref_layout, chunk_blocks=16)
    c = kvpool.Client(d.unix, namespace=NS, shared_memory_bytes=(16 * layout.block_bytes()) + (1 << 20))
    t = time.perf_counter()
    st = saver.save(c, keys, slots, parents=[None] + keys[:-1])
    log(f"saved {nb} blocks GPU -> kvpoold in {time.perf_counter() - t:.2f} s: "
        f"{sum(s in ('OK', 'Exists') for s in st)} stored")
    assert all(s in ("OK", "Exists") for s in st), st[:5]

    def suffix_from_paged():
        cache = new_cache(model)
        views = [paged[layer].view(2, P, KVH, HD).transpose(1, 2).unsqueeze(1) for layer in range(L)]
        initialized = init_layers(cache, L, views[0][0])
        for layer in range(L):
            fill_layer(cache, layer, views[layer][0], views[layer][1], initialized)
        return forward(ids[:, P:], cache)

    def zero():
        for p in paged:
            p.zero_()

    def check(name, logits):
        same = all(torch.equal(p, r) for p, r in zip(paged, ref))
        cos = torch.nn.functional.cosine_similarity(logits, ref_logits, dim=0).item()
        same_token = int(logits.argmax()) == int(ref_logits.argmax())
        return same, cos, same_token

    def record(name, load_fn, gbps_bytes=kv_bytes):
        def full():
            st = load_fn()
            return suffix_from_paged(), st
        s, runs, (logits, st) = timed(full, args.reps, before=zero)
        ok = sum(x == "OK" for x in st)
        same, cos, same_token = check(name, logits)
        # The load alone (no suffix prefill), for GB/s.
        ls, _, _ = timed(lambda: (load_fn(), torch.cuda.synchronize()), args.reps, before=zero)
        if "suffix_ms" not in row:  # the reload's compute alone: HF cache from the paged KV + 16 tokens
            row["suffix_ms"] = timed(suffix_from_paged, args.reps)[0] * 1e3
            log(f"reload compute alone (cache from the paged KV, prefill of {SUFFIX} tokens): "
                f"{row['suffix_ms']:.1f} ms")
        row["paths"][name] = {"ttft_ms": s * 1e3, "runs_ms": [x * 1e3 for x in runs], "speedup": rec_s / s,
                              "load_ms": ls * 1e3, "load_gbps": gbps_bytes / ls / 1e9, "blocks_ok": ok,
                              "kv_identical": same, "logits_cosine": cos, "same_first_token": same_token}
        log(f"{name:42s} TTFT {s * 1e3:8.1f} ms  {rec_s / s:5.1f}x faster  load {ls * 1e3:7.1f} ms "
            f"({gbps_bytes / ls / 1e9:5.1f} GB/s)  KV identical={same} cos={cos:.5f} token={same_token}")
        save()

    loader = kvpool.gpu.Loader(layout, chunk_blocks=16)
    stream = torch.cuda.current_stream()

    # (a) the near cache in pinned host memory, prestaged from kvpoold.
    near = kvpool.NearCache(d.tcp, namespace=NS, dram_bytes=int(kv_bytes * 1.25) + (256 << 20))
    t = time.perf_counter()
    ticket = near.prestage(keys, timeout_ms=120000)
    got = near.wait_prestaged(ticket, 120000)
    log(f"prestaged {got}/{nb} blocks into the near cache in {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    try:
        kvpool.gpu.register(near)
    except RuntimeError as e:
        log("could not register the near cache (its blocks will be staged):", e)
    log(f"registered the near cache's DRAM with the GPU in {time.perf_counter() - t:.2f} s (once per process)")
    record("(a) near cache, pinned host memory", lambda: loader.load(near, keys, slots, stream=stream))
    overlapped_path(row, model, forward, loader, near, keys, slots, paged, ref, ref_logits, rec_s, ids, P, L,
                    zero, check)
    del near

    # (b) kvpoold on this host, same-host region; (c) kvpoold over loopback TCP.
    region = 2 * 16 * layout.block_bytes() + (1 << 20)
    for n in sorted({1, args.connections}):
        cs = [kvpool.Client(d.unix, namespace=NS, shared_memory_bytes=region) for _ in range(n)]
        record(f"(b) kvpoold same host, {n} conn", lambda: loader.load(cs if n > 1 else cs[0], keys, slots, stream=stream))
    for n in sorted({1, args.connections}):
        cs = [kvpool.Client(d.tcp, namespace=NS) for _ in range(n)]
        record(f"(c) kvpoold loopback TCP, {n} conn", lambda: loader.load(cs if n > 1 else cs[0], keys, slots, stream=stream))

    if not args.no_layer_streaming and T == min(int(x) for x in args.tokens.split(",")):
        layer_streaming(row, d, ref_layout, layout, keys, slots, paged, ref, P, nb, L, stream)
    del ref, paged


def overlapped_path(row, model, forward, loader, near, keys, slots, paged, ref, ref_logits, rec_s, ids, P, L,
                    zero, check):
    """(a) layer by layer: one kernel per layer on a copy stream, the HF cache's layer l
    built there right after it, and the suffix's layer l waiting (a forward pre-hook) only for
    its own layer's event: the prefix's transfer hides behind the suffix's prefill."""
    copy_stream = torch.cuda.Stream()
    state = {"events": None}

    def pre_hook(layer):
        def hook(module, args):
            if state["events"] is not None:
                state["events"][layer].wait(torch.cuda.current_stream())
        return hook

    handles = [model.model.layers[layer].register_forward_pre_hook(pre_hook(layer)) for layer in range(L)]

    def overlapped():
        cache = new_cache(model)
        evs = [torch.cuda.Event() for _ in range(L)]
        views = [paged[layer].view(2, P, KVH, HD).transpose(1, 2).unsqueeze(1) for layer in range(L)]
        initialized = init_layers(cache, L, views[0][0])  # before any load is in flight

        def on_layer(layer):
            with torch.cuda.stream(copy_stream):
                fill_layer(cache, layer, views[layer][0], views[layer][1], initialized)
                evs[layer].record(copy_stream)

        copy_stream.wait_stream(torch.cuda.current_stream())
        _, st = loader.load_layerwise(near, keys, slots, stream=copy_stream, on_layer=on_layer)
        state["events"] = evs
        try:
            logits = forward(ids[:, P:], cache)
        finally:
            state["events"] = None
        torch.cuda.synchronize()  # before the cache (allocated on copy_stream) goes
        return logits, st

    name = "(a) near cache, layer-wise, overlapped"
    try:
        s, runs, (logits, st) = timed(overlapped, args.reps, before=zero)
    finally:
        for h in handles:
            h.remove()
    same, cos, same_token = check(name, logits)
    row["paths"][name] = {"ttft_ms": s * 1e3, "runs_ms": [x * 1e3 for x in runs], "speedup": rec_s / s,
                          "blocks_ok": sum(x == "OK" for x in st), "kv_identical": same,
                          "logits_cosine": cos, "same_first_token": same_token}
    log(f"{name:42s} TTFT {s * 1e3:8.1f} ms  {rec_s / s:5.1f}x faster  (load hidden behind the suffix) "
        f"KV identical={same} cos={cos:.5f} token={same_token}")
    save()


def layer_streaming(row, d, ref_layout, layout, keys, slots, paged, ref, P, nb, L, stream):
    """Stall of the suffix's attention over the prefix, layer by layer: compute per layer is
    the 16-token suffix's attention over that layer's prefix KV plus its MLP products. Stall
    = wall time from the request to the last layer's compute, minus the compute alone."""
    c = kvpool.Client(d.unix, namespace=NS, shared_memory_bytes=L * nb * layout.block_bytes(1) + (1 << 20))
    saver = kvpool.gpu.Loader(ref_layout, chunk_blocks=64)
    for layer in range(L):
        lk = [kvpool.layer_key(k, layer) for k in keys]
        st = saver.save(c, lk, slots, layers=(layer, 1))
        assert all(s in ("OK", "Exists") for s in st), st[:3]
    q = torch.randn(1, 32, SUFFIX, HD, device="cuda")
    x = torch.randn(SUFFIX, 4096, device="cuda")
    w1 = torch.randn(4096, 14336, device="cuda") * 0.01
    w2 = torch.randn(14336, 4096, device="cuda") * 0.01

    def layer_compute(layer):
        k = paged[layer][0].view(1, P, KVH, HD).transpose(1, 2)
        v = paged[layer][1].view(1, P, KVH, HD).transpose(1, 2)
        torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        (x @ w1) @ w2

    def compute_all():
        for layer in range(L):
            layer_compute(layer)

    comp_s, _, _ = timed(compute_all, args.reps)
    loader = kvpool.gpu.Loader(layout, chunk_blocks=16)
    near = kvpool.NearCache(d.tcp, namespace=NS, dram_bytes=int(nb * layout.block_bytes() * 1.25) + (256 << 20))
    near.wait_prestaged(near.prestage(keys, timeout_ms=120000), 120000)
    try:
        kvpool.gpu.register(near)
    except RuntimeError as e:
        log("could not register the near cache (its blocks will be staged):", e)
    cs = [kvpool.Client(d.unix, namespace=NS, shared_memory_bytes=2 * 16 * layout.block_bytes() + (1 << 20))
          for _ in range(args.connections)]

    def zero():
        for p in paged:
            p.zero_()

    out = {"compute_ms": comp_s * 1e3}
    copy_stream = torch.cuda.Stream()

    def overlapped_compute():
        """on_layer for a load on copy_stream: layer l's compute, on the compute stream,
        waits for layer l's move only."""
        evs = [torch.cuda.Event() for _ in range(L)]
        copy_stream.wait_stream(stream)

        def on_layer(layer):
            evs[layer].record(copy_stream)
            evs[layer].wait(stream)
            layer_compute(layer)
        return on_layer

    cases = [
        ("prestaged, one launch, then compute",
         lambda: (loader.load(near, keys, slots, stream=stream), compute_all())),
        ("prestaged, layer-wise, compute overlapped",
         lambda: loader.load_layerwise(near, keys, slots, stream=copy_stream, on_layer=overlapped_compute())),
        (f"on demand, whole blocks ({args.connections} conn), then compute",
         lambda: (loader.load(cs, keys, slots, stream=stream), compute_all())),
        ("on demand, layer streaming (1 conn), compute overlapped",
         lambda: loader.load_layers(c, keys, slots, list(range(L)), stream=copy_stream,
                                    on_layer=overlapped_compute())),
    ]
    for name, fn in cases:
        s, _, _ = timed(fn, args.reps, before=zero)
        torch.cuda.synchronize()
        same = all(torch.equal(p, r) for p, r in zip(paged, ref))
        out[name] = {"wall_ms": s * 1e3, "stall_ms": (s - comp_s) * 1e3, "kv_identical": same}
        log(f"layer streaming: {name:58s} wall {s * 1e3:7.1f} ms  stall {(s - comp_s) * 1e3:7.1f} ms "
            f"(compute alone {comp_s * 1e3:.1f} ms) KV identical={same}")
    row["layer_streaming"] = out
    save()


if __name__ == "__main__":
    try:
        main()
    except Exception:
        RESULT["errors"].append(traceback.format_exc())
        log(traceback.format_exc())
        save()
        sys.exit(1)
