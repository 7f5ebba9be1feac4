#include "common/units.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kvpool {

Result<uint64_t> ParseSize(std::string_view text) {
  std::string s(text);
  auto bad = [&] {
    return Status::InvalidArgument("'" + s + "' is not a size (examples: 4096, 64K, 16MiB, 8GiB)");
  };
  if (s.empty() || s[0] == '-' || s[0] == '+') return bad();
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(v) || v < 0) return bad();
  std::string_view unit(end);
  double mult = 1;
  if (!unit.empty()) {
    char u = unit[0];
    if (u == 'K' || u == 'k') mult = 1024.0;
    else if (u == 'M' || u == 'm') mult = 1024.0 * 1024;
    else if (u == 'G' || u == 'g') mult = 1024.0 * 1024 * 1024;
    else if (u == 'T' || u == 't') mult = 1024.0 * 1024 * 1024 * 1024;
    else if (u != 'B') return bad();
    if (u != 'B') unit.remove_prefix(1);
    if (unit.starts_with("i")) unit.remove_prefix(1);
    if (unit.starts_with("B")) unit.remove_prefix(1);
    if (!unit.empty()) return bad();
  }
  double bytes = v * mult;
  if (bytes >= 18446744073709551615.0) return bad();
  return static_cast<uint64_t>(bytes);
}

std::string FormatSize(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace kvpool
