// Standard base64 (RFC 4648, '+' '/', '=' padding), as etcd's JSON gateway encodes bytes.
#ifndef KVPOOL_COMMON_BASE64_H_
#define KVPOOL_COMMON_BASE64_H_

#include <optional>
#include <string>
#include <string_view>

namespace kvpool {

std::string Base64Encode(std::string_view bytes);
// nullopt on a character outside the alphabet, bad or non-canonical padding (bits set
// that the padding drops) or a length not a multiple of 4.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace kvpool

#endif  // KVPOOL_COMMON_BASE64_H_
