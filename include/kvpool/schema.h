// Canonical block identity, schema v2: a structured namespace whose root key starts every
// chain, so blocks of different tenants, models, layouts, dtypes or shards never collide.
//
// Byte layout (docs/KEYS.md has it with test vectors):
//   root = XXH3_128bits( "kvpool/ns/v2" || field(tenant) || field(model) || field(layout)
//                        || field(dtype) || le32(tp_rank) || le32(tp_size) || le32(pp_rank)
//                        || le32(pp_size) || field(salt) )
//   field(s) = le32(byte length of s) || UTF-8 bytes of s
// Block keys chain from the root exactly as in key.h (ChainKeys / ChildKey).
//
// Thread safety: values.
#ifndef KVPOOL_SCHEMA_H_
#define KVPOOL_SCHEMA_H_

#include <cstdint>
#include <string>

#include "kvpool/key.h"
#include "kvpool/status.h"

namespace kvpool {

struct NamespaceSpec {
  std::string tenant = "default";
  // The model fingerprint: "name@revision", or a hash of the weights. Two deployments
  // share blocks exactly when every field matches.
  std::string model;
  // KV layout: attention kind, block/page size and geometry, e.g. "mha/p16/l32/kv8/d128".
  std::string layout;
  std::string dtype = "bf16";         // element type of the KV tensors: bf16, fp16, fp8_e4m3, ...
  uint32_t tp_rank = 0, tp_size = 1;  // tensor-parallel shard
  uint32_t pp_rank = 0, pp_size = 1;  // pipeline-parallel stage
  std::string salt;                   // optional isolation (vLLM's cache_salt)

  // kInvalidArgument if model is empty or a rank is outside its size.
  Status Validate() const;
  BlockKey Root() const;
  // Human-readable form: "tenant/model/layout/dtype/tp0of1/pp0of1[/salt]".
  std::string ToString() const;
};

// A foreign block hash (an engine's own identifier of a block, as bytes) inside a
// namespace: XXH3_128bits(le64(root.hi) || le64(root.lo) || "foreign/" || scheme || 0x00
// || hash bytes). What adapters store under when the engine hands over only its hash.
BlockKey ForeignKey(const BlockKey& root, std::string_view scheme, std::string_view hash);

}  // namespace kvpool

#endif  // KVPOOL_SCHEMA_H_
