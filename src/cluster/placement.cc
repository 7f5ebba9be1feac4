#include "cluster/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvpool::cluster {

Placement::Placement(std::span<const Member> members) {
  for (const Member& m : members) {
    seeds_.push_back(IdSeed(m.id));
    weights_.push_back(static_cast<double>(std::max<uint64_t>(m.capacity, 1)));
  }
}

uint64_t Placement::IdSeed(std::string_view id) { return XXH3_64bits(id.data(), id.size()); }

double Placement::Score(const BlockKey& key, size_t i) const {
  unsigned char bytes[16];
  for (int b = 0; b < 8; ++b) {
    bytes[b] = static_cast<unsigned char>(key.hi >> (8 * b));
    bytes[8 + b] = static_cast<unsigned char>(key.lo >> (8 * b));
  }
  uint64_t h = XXH3_64bits_withSeed(bytes, sizeof(bytes), seeds_[i]);
  double u = (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return weights_[i] / -std::log(u);
}

size_t Placement::Owner(const BlockKey& key) const {
  size_t best = 0;
  double best_score = -1;
  for (size_t i = 0; i < seeds_.size(); ++i) {
    double s = Score(key, i);
    if (s > best_score) {
      best_score = s;
      best = i;
    }
  }
  return best;
}

void Placement::Rank(const BlockKey& key, std::span<size_t> out) const {
  std::vector<std::pair<double, size_t>> scored;
  scored.reserve(seeds_.size());
  for (size_t i = 0; i < seeds_.size(); ++i) scored.emplace_back(Score(key, i), i);
  size_t n = std::min(out.size(), scored.size());
  std::partial_sort(scored.begin(), scored.begin() + n, scored.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < n; ++i) out[i] = scored[i].second;
}

}  // namespace kvpool::cluster
