#include "workload/baselines.h"

#include <algorithm>
#include <list>
#include <queue>
#include <unordered_map>

namespace kvpool::workload {

size_t FullBlocks(const TraceRequest& r, unsigned tokens_per_block) {
  size_t n = r.hash_ids.size();
  if (n > 0 && tokens_per_block > 0 && r.input_length % tokens_per_block != 0) --n;
  return n;
}

uint64_t TokensSaved(uint64_t hits, const TraceRequest& r, unsigned tokens_per_block) {
  return std::min<uint64_t>(hits * tokens_per_block, r.input_length);
}

namespace {

// The request's leading blocks `held` holds (a prefix hit), added to the totals.
template <class Map>
void CountPrefix(const TraceRequest& r, const Map& held, unsigned tokens_per_block, uint64_t* hits,
                 uint64_t* saved) {
  uint64_t h = 0;
  while (h < r.hash_ids.size() && held.count(r.hash_ids[h])) ++h;
  *hits += h;
  *saved += TokensSaved(h, r, tokens_per_block);
}

}  // namespace

uint64_t LruPrefixHits(const std::vector<TraceRequest>& trace, uint64_t capacity,
                       uint64_t* tokens_saved, unsigned tokens_per_block) {
  std::list<uint64_t> lru;  // front = most recent
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  uint64_t hits = 0, saved = 0;
  for (const TraceRequest& r : trace) {
    CountPrefix(r, where, tokens_per_block, &hits, &saved);
    const size_t full = FullBlocks(r, tokens_per_block);
    for (size_t j = 0; j < r.hash_ids.size(); ++j) {
      const uint64_t id = r.hash_ids[j];
      auto it = where.find(id);
      if (it != where.end()) {
        lru.splice(lru.begin(), lru, it->second);
        continue;
      }
      if (j >= full) continue;  // never offered
      lru.push_front(id);
      where[id] = lru.begin();
      if (lru.size() > capacity) {
        where.erase(lru.back());
        lru.pop_back();
      }
    }
  }
  if (tokens_saved) *tokens_saved = saved;
  return hits;
}

uint64_t OfflinePrefixHits(const std::vector<TraceRequest>& trace, uint64_t capacity,
                           uint64_t* tokens_saved, unsigned tokens_per_block) {
  constexpr uint64_t kNever = ~0ull;
  // The next reference of every reference, in the flattened order of the trace.
  size_t refs = 0;
  for (const TraceRequest& r : trace) refs += r.hash_ids.size();
  std::vector<uint64_t> next(refs);
  {
    std::unordered_map<uint64_t, uint64_t> seen;
    size_t t = refs;
    for (size_t ri = trace.size(); ri-- > 0;) {
      const auto& ids = trace[ri].hash_ids;
      for (size_t j = ids.size(); j-- > 0;) {
        --t;
        auto it = seen.find(ids[j]);
        next[t] = it == seen.end() ? kNever : it->second;
        seen[ids[j]] = t;
      }
    }
  }
  std::unordered_map<uint64_t, uint64_t> held;             // id -> its next use
  std::priority_queue<std::pair<uint64_t, uint64_t>> far;  // (next use, id), stale entries too
  auto farthest = [&]() -> std::pair<uint64_t, uint64_t> {
    while (!far.empty()) {
      auto [n, id] = far.top();
      auto it = held.find(id);
      if (it != held.end() && it->second == n) return {n, id};
      far.pop();  // stale: evicted, or used since
    }
    return {0, 0};
  };
  uint64_t hits = 0, saved = 0;
  size_t t = 0;
  for (const TraceRequest& r : trace) {
    CountPrefix(r, held, tokens_per_block, &hits, &saved);
    const size_t full = FullBlocks(r, tokens_per_block);
    for (size_t j = 0; j < r.hash_ids.size(); ++j, ++t) {
      const uint64_t id = r.hash_ids[j];
      auto it = held.find(id);
      if (it != held.end()) {
        it->second = next[t];
        far.push({next[t], id});
        continue;
      }
      if (j >= full || capacity == 0) continue;
      if (held.size() >= capacity) {
        auto [n, victim] = farthest();
        if (n <= next[t]) continue;  // the new block is needed last: do not admit it
        held.erase(victim);
        far.pop();
      }
      held[id] = next[t];
      far.push({next[t], id});
    }
  }
  if (tokens_saved) *tokens_saved = saved;
  return hits;
}

}  // namespace kvpool::workload
