#include "kvpool/schema.h"

#include <xxhash.h>

namespace kvpool {
namespace {

void Le32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void Le64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void Field(std::string& out, std::string_view s) {
  Le32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}
BlockKey FromHash(XXH128_hash_t h) {
  BlockKey k{h.high64, h.low64};
  if (k.empty()) k.lo = 1;
  return k;
}

}  // namespace

Status NamespaceSpec::Validate() const {
  if (model.empty()) return Status::InvalidArgument("namespace: model fingerprint is empty");
  if (tp_size == 0 || tp_rank >= tp_size)
    return Status::InvalidArgument("namespace: tp_rank must be < tp_size");
  if (pp_size == 0 || pp_rank >= pp_size)
    return Status::InvalidArgument("namespace: pp_rank must be < pp_size");
  return Status::Ok();
}

BlockKey NamespaceSpec::Root() const {
  std::string buf = "kvpool/ns/v2";
  Field(buf, tenant);
  Field(buf, model);
  Field(buf, layout);
  Field(buf, dtype);
  Le32(buf, tp_rank);
  Le32(buf, tp_size);
  Le32(buf, pp_rank);
  Le32(buf, pp_size);
  Field(buf, salt);
  return FromHash(XXH3_128bits(buf.data(), buf.size()));
}

std::string NamespaceSpec::ToString() const {
  std::string s = tenant + "/" + model + "/" + layout + "/" + dtype + "/tp" +
                  std::to_string(tp_rank) + "of" + std::to_string(tp_size) + "/pp" +
                  std::to_string(pp_rank) + "of" + std::to_string(pp_size);
  if (!salt.empty()) s += "/" + salt;
  return s;
}

BlockKey ForeignKey(const BlockKey& root, std::string_view scheme, std::string_view hash) {
  std::string buf;
  Le64(buf, root.hi);
  Le64(buf, root.lo);
  buf += "foreign/";
  buf.append(scheme);
  buf.push_back('\0');
  buf.append(hash);
  return FromHash(XXH3_128bits(buf.data(), buf.size()));
}

}  // namespace kvpool
