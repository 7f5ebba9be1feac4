// kvpool.Namespace (schema v2), kvpool.foreign_key and kvpool.engines: engines' own block
// hashes (vLLM, LMCache, SGLang, Dynamo), computed from token ids (docs/KEYS.md).
#include "binding.h"
#include "kvpool/engine_keys.h"
#include "kvpool/schema.h"

namespace kvpool_py {
namespace {

std::vector<uint32_t> Tokens(const py::iterable& tokens) {
  std::vector<uint32_t> out;
  for (const py::handle& t : tokens) out.push_back(t.cast<uint32_t>());
  return out;
}

engines::VllmHash Algo(const std::string& name) {
  auto r = engines::ParseVllmHash(name);
  Check(r.status());
  return *r;
}

// Digests as Python bytes (pybind would turn a std::string into str).
std::vector<py::bytes> AsBytes(const std::vector<std::string>& digests) {
  return {digests.begin(), digests.end()};
}

// Blocks and chunks are limited to one pickle frame (engine_keys.h).
void CheckTokensPer(size_t n, const char* what) {
  if (n == 0 || n > 8192) throw py::value_error(std::string(what) + " in 1..8192");
}

std::string Bytes(const py::handle& h) {
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  return std::string(h.cast<py::bytes>());
}

}  // namespace

void BindKeys(py::module_& m) {
  py::class_<NamespaceSpec>(m, "Namespace",
                            "Schema v2 namespace: tenant, model fingerprint, KV layout, dtype, "
                            "TP/PP shard, salt. root() starts every chain (docs/KEYS.md).")
      .def(py::init([](const std::string& model, const std::string& tenant,
                       const std::string& layout, const std::string& dtype, uint32_t tp_rank,
                       uint32_t tp_size, uint32_t pp_rank, uint32_t pp_size,
                       const std::string& salt) {
             NamespaceSpec n{tenant,  model,   layout,  dtype, tp_rank,
                             tp_size, pp_rank, pp_size, salt};
             Check(n.Validate());
             return n;
           }),
           py::arg("model"), py::arg("tenant") = "default", py::arg("layout") = "",
           py::arg("dtype") = "bf16", py::arg("tp_rank") = 0, py::arg("tp_size") = 1,
           py::arg("pp_rank") = 0, py::arg("pp_size") = 1, py::arg("salt") = "")
      .def_readonly("tenant", &NamespaceSpec::tenant)
      .def_readonly("model", &NamespaceSpec::model)
      .def_readonly("layout", &NamespaceSpec::layout)
      .def_readonly("dtype", &NamespaceSpec::dtype)
      .def_readonly("tp_rank", &NamespaceSpec::tp_rank)
      .def_readonly("tp_size", &NamespaceSpec::tp_size)
      .def_readonly("pp_rank", &NamespaceSpec::pp_rank)
      .def_readonly("pp_size", &NamespaceSpec::pp_size)
      .def_readonly("salt", &NamespaceSpec::salt)
      .def("root", &NamespaceSpec::Root)
      .def(
          "chain_keys",
          [](const NamespaceSpec& n, const py::iterable& tokens, size_t block_tokens) {
            if (block_tokens == 0) throw py::value_error("block_tokens must be > 0");
            auto toks = Tokens(tokens);
            return ChainKeys(n.Root(), toks, block_tokens);
          },
          py::arg("tokens"), py::arg("block_tokens") = 16)
      .def("__str__", &NamespaceSpec::ToString)
      .def("__repr__",
           [](const NamespaceSpec& n) { return "kvpool.Namespace('" + n.ToString() + "')"; });

  m.def(
      "foreign_key",
      [](const BlockKey& root, const std::string& scheme, const py::handle& hash) {
        return ForeignKey(root, scheme, Bytes(hash));
      },
      py::arg("root"), py::arg("scheme"), py::arg("hash"),
      "The kvpool key of an engine's own block hash (bytes, or str such as SGLang's hex) in "
      "the namespace with this root.");

  py::module_ e = m.def_submodule(
      "engines", "Engines' own block hashes from token ids, byte-exact (docs/KEYS.md).");
  e.def(
      "vllm_none_hash",
      [](const std::string& algo, const std::string& seed) {
        return py::bytes(engines::VllmNoneHash(Algo(algo), seed));
      },
      py::arg("algo"), py::arg("python_hash_seed"));
  e.def(
      "vllm_block_hashes",
      [](const std::string& algo, const std::string& seed, const py::iterable& tokens,
         size_t block_size) {
        CheckTokensPer(block_size, "block_size");
        return AsBytes(engines::VllmBlockHashes(Algo(algo), seed, Tokens(tokens), block_size));
      },
      py::arg("algo"), py::arg("python_hash_seed"), py::arg("tokens"), py::arg("block_size") = 16,
      "vLLM prefix-caching block hashes (algo: sha256, sha256_cbor, xxhash, xxhash_cbor; "
      "python_hash_seed: the engine's PYTHONHASHSEED).");
  e.def(
      "vllm_external_hash",
      [](const py::bytes& digest) { return engines::VllmExternalHash(std::string(digest)); },
      "The int form of a block hash in vLLM's KV events.");
  e.def(
      "lmcache_chunk_hashes",
      [](const std::string& algo, const std::string& seed, const py::iterable& tokens,
         size_t chunk_size) {
        CheckTokensPer(chunk_size, "chunk_size");
        return AsBytes(engines::LmcacheChunkHashes(Algo(algo), seed, Tokens(tokens), chunk_size));
      },
      py::arg("algo"), py::arg("python_hash_seed"), py::arg("tokens"), py::arg("chunk_size") = 256);
  e.def(
      "sglang_page_hashes",
      [](const py::iterable& tokens, size_t page_size, bool xxh3) {
        if (page_size == 0) throw py::value_error("page_size must be > 0");
        auto toks = Tokens(tokens);
        return engines::SglangPageHashes(toks, page_size, xxh3);
      },
      py::arg("tokens"), py::arg("page_size") = 64, py::arg("xxh3") = false);
  e.def(
      "dynamo_block_hashes",
      [](const py::iterable& tokens, size_t block_size) {
        if (block_size == 0) throw py::value_error("block_size must be > 0");
        auto toks = Tokens(tokens);
        auto h = engines::DynamoBlockHashes(toks, block_size);
        return py::make_tuple(h.local, h.sequence);
      },
      py::arg("tokens"), py::arg("block_size") = 16, "(local block hashes, sequence hashes)");
}

}  // namespace kvpool_py
