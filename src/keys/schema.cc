#include "kvpool/schema.h"

#include "common/bytes.h"

namespace kvpool {
namespace {

void Field(std::string& out, std::string_view s) {
  AppendLe(out, s.size(), 4);
  out.append(s);
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
  AppendLe(buf, tp_rank, 4);
  AppendLe(buf, tp_size, 4);
  AppendLe(buf, pp_rank, 4);
  AppendLe(buf, pp_size, 4);
  Field(buf, salt);
  return KeyFromBytes(buf);  // XXH3_128bits, the zero key mapped to {0, 1}
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
  AppendLe(buf, root.hi, 8);
  AppendLe(buf, root.lo, 8);
  buf += "foreign/";
  buf.append(scheme);
  buf.push_back('\0');
  buf.append(hash);
  return KeyFromBytes(buf);
}

}  // namespace kvpool
