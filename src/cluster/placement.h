// Weighted rendezvous (highest-random-weight) placement over pool members.
//
// For key k and member m with weight w_m (its advertised capacity) and id hash h_m:
//   u      = (XXH3_64bits_withSeed(k as 16 bytes, hi first, little-endian halves, h_m) >> 11
//             + 0.5) / 2^53                          (uniform in (0, 1))
//   score  = w_m / -ln(u)
// The owner is the member with the highest score; the next-ranked members are the
// fallbacks. Each member wins a share of keys equal to its share of the total weight, and
// adding or removing one member moves only the keys it wins or held (nothing else
// changes rank order). Any client computes this locally: no lookup round trip.
#ifndef KVPOOL_CLUSTER_PLACEMENT_H_
#define KVPOOL_CLUSTER_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cluster/member.h"
#include "kvpool/key.h"

namespace kvpool::cluster {

class Placement {
 public:
  Placement() = default;
  explicit Placement(std::span<const Member> members);

  size_t size() const { return seeds_.size(); }
  bool empty() const { return seeds_.empty(); }
  // Index (into the members given) of the key's owner. REQUIRES: !empty().
  size_t Owner(const BlockKey& key) const;
  // The first out.size() members by rank for `key` (out.size() <= size()).
  void Rank(const BlockKey& key, std::span<size_t> out) const;

  static uint64_t IdSeed(std::string_view id);

 private:
  double Score(const BlockKey& key, size_t i) const;
  std::vector<uint64_t> seeds_;
  std::vector<double> weights_;
};

}  // namespace kvpool::cluster

#endif  // KVPOOL_CLUSTER_PLACEMENT_H_
