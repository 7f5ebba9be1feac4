// PolicyTuner: learns the DRAM tier's reuse bonus while the store runs.
//
// The bonus (how long a block's past uses keep it, see dram_tier.h) is worth 8 points of
// hit ratio on one workload and costs 20 on another; a constant picked on one trace is
// wrong for the next, and a pod's workload shifts during the day. So the store runs the
// candidates beside itself, on a sample, and follows the best (miniature simulation:
// Waldspurger et al., "Cache Modeling and Optimization using Miniature Simulations",
// USENIX ATC'17; chosen over ARC/LeCaR-style gradient steps because it compares whole
// policies on the same accesses, needs no learning rate, and cannot oscillate on the
// order of arrivals):
//
// - Keys are sampled spatially (a hash of the key below a threshold), 1 in R with R set
//   so a simulated cache holds about 64Ki pages (R = 1 below 256 MiB of DRAM). A sampled
//   key's accesses all reach the simulations, so each sees a scaled-down copy of the
//   workload's reuse structure; each simulation has DRAM's capacity / R.
// - Each simulation is the main queue's rule (priority = last use + bonus x past uses,
//   past uses remembered across an eviction by a ghost) with one candidate bonus, from 0
//   (LRU) to 4 DRAM-fulls per use, spaced by factors of 2.
// - Every epoch (accesses to twice the sampled blocks held, at least 4096) the hits are
//   folded into a score that decays by 3/4 each epoch (a phase change is followed within
//   a few epochs), and once the simulations are full the store switches to the best
//   candidate if it beats the current one by more than 1% (no flapping between equals).
//   It starts at 0 (LRU).
//
// What the simulations see. A KV cache is read by prefix: an engine matches a request's
// chain of blocks, loads the leading blocks found and recomputes (then puts) the rest, so
// a block held after a missing one is worth nothing. Where the store is asked for prefix
// matches, a chain is sampled by its first block, and each simulation scores the length
// of the prefix it holds, then holds the whole chain (touching the blocks it had, adding
// the rest, parents outliving their children as in the DRAM tier). Where the store only
// sees single keys (gets, puts), each access scores a hit if the simulation holds the
// key, and a put adds it; that mode is used until the first sampled chain arrives.
//
// The probation queue and flash admission of one-hit blocks (a store with flash and the
// budget admission). A block that leaves DRAM's probation queue unused is written to
// flash or dropped. Written, it may be used again before its region is taken (a chat turn
// after a long think time); but in a first-in first-out log it costs the room of a block
// that was used, for as long (shared prompts and Zipf-popular prefixes lose 5-10% of
// their hits to it at 2% of their working set, multi-turn chats gain 5%). How long new
// blocks wait in probation trades the same way (a share of 2% of DRAM is best for some
// workloads, 50% for others). So eight more simulations run, each a scaled copy of the
// two tiers (a probation FIFO and the main queue above with the bonus now chosen, over a
// first-in first-out flash of the flash's capacity / R'; a flash hit is promoted and
// keeps its flash copy, as in the store), for each probation share of
// 2, 10, 25 and 50% of DRAM one writing one-hit blocks and one dropping them, on the
// same sampled chains; the store follows the best (the same scores, decay and 1% margin),
// starting from writing them with the share nearest its own. R' >= R keeps them at about
// 64Ki pages of DRAM + flash, as a bonus simulation holds of DRAM alone (a 4 GiB DRAM
// with 16 GiB of flash: 188 MB for all sixteen simulations against 150 MB for the eight);
// their keys are a subset of the sampled ones. A store drops one-hit blocks only while its
// flash is full: with room to spare, everything it is given is kept.
//
// Promotion of flash hits. A flash hit promoted into DRAM keeps its flash copy: the block
// then takes the room of two, which a workload ruled by recency pays for (chats, agent
// loops and shared prompts at 2-5% of their blocks lose 1-4% of their hits to it), while
// one whose hot blocks are told apart by their uses gains (DRAM's reuse bonus keeps them;
// the log only knows whether a block was used since it was written: the Mooncake trace
// loses 1% without the promotions). So two more simulations run, with the chosen
// probation share, one-hit admission and bonus, each over a log that reinserts the blocks
// used since they were written (as the store's does) when they reach its end: one
// promoting every flash hit, one leaving a hit on flash (marked used) while its copy is
// in the newer half of the log, far from being taken. The store follows the better (same
// scores, decay and margin), starting by promoting every hit. They add about 8% to the
// simulations' time and memory.
//
// Cost: the simulations never run on the request path. A sampled chain or access is
// copied into a queue (Offer*: a try-lock and a copy, dropped when the queue is full or
// contended) and Drain runs them, on the store's mover thread (or inline in a store
// without one). A 1000-block prefix match went from 7 to 46 us when they ran inline.
//
// Thread safety: all methods are thread-safe (the simulations under one mutex, the queue
// under another).
#ifndef KVPOOL_ENGINE_POLICY_TUNER_H_
#define KVPOOL_ENGINE_POLICY_TUNER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "kvpool/key.h"

namespace kvpool::engine {

class PolicyTuner {
 public:
  // `dram_pages`: DRAM's capacity in 4 KiB pages; `ghost_blocks`: how many dropped blocks
  // its ghost remembers (the simulations remember as many, scaled). `initial`: the
  // candidate to start with, in DRAM-fulls per use (the nearest candidate is taken).
  // `flash_pages` > 0 (with `probation`, the probation queue's share of DRAM): also
  // learn flash admission of one-hit blocks.
  PolicyTuner(uint64_t dram_pages, uint64_t ghost_blocks, double initial, uint64_t flash_pages = 0,
              double probation = 0);

  bool Sampled(const BlockKey& key) const { return SampleHash(key) < threshold_; }
  // The request path's side: queue a sampled chain (REQUIRES: nonempty, Sampled(chain[0])),
  // access or erase (REQUIRES: Sampled(key)) for Drain. Never blocks.
  // `dram_held`: the share of its DRAM the store holds now (the rest is kept free for
  // promotions and freed in batches; the two-tier simulations hold as much, on a moving
  // mean), or negative for no sample.
  void OfferChain(std::span<const BlockKey> chain, double dram_held = -1);
  void OfferAccess(const BlockKey& key, uint32_t pages, bool put);
  void OfferErase(const BlockKey& key);
  // Runs what was queued through the simulations, in order. True when a choice (bonus,
  // probation share, one-hit admission) changed.
  bool Drain();
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // The queue is a quarter full: time to drain it.
  bool backlog() const { return queued_keys_.load(std::memory_order_relaxed) >= (1u << 14); }

  // A prefix lookup. REQUIRES: chain nonempty, Sampled(chain[0]). Returns true when it
  // ended an epoch that changed the chosen bonus (as Access).
  bool Chain(std::span<const BlockKey> chain);
  // A single-key access. REQUIRES: Sampled(key). `put`: the block is stored now (added
  // where absent). Returns true when this access ended an epoch that changed the chosen
  // bonus. Once chains are seen, only notes the size of put blocks.
  bool Access(const BlockKey& key, uint32_t pages, bool put);
  // REQUIRES: Sampled(key).
  void Erase(const BlockKey& key);

  // The chosen bonus, in DRAM-fulls per past use.
  double bonus() const { return bonus_.load(std::memory_order_relaxed); }
  uint64_t epochs() const { return epochs_.load(std::memory_order_relaxed); }
  // Whether every flash hit is worth a DRAM copy (else only one in the older half of the
  // log); true without flash.
  bool promote_all() const { return promote_all_.load(std::memory_order_relaxed); }
  // Whether blocks leaving probation unused are worth a flash write (true without flash).
  bool admit_one_hit() const { return admit_one_hit_.load(std::memory_order_relaxed); }
  // A sample of the share of its DRAM the store holds (as OfferChain's).
  void SetDramHeld(double share);
  // The probation queue's share of DRAM (with flash: learnt; without: as constructed).
  double probation() const { return probation_.load(std::memory_order_relaxed); }
  // Entries in the two-tier simulations' FIFOs (probation and flash), live or stale: for
  // tests of their bound.
  size_t TierFifoEntries();
  // 1 in how many keys is simulated.
  uint64_t sample_rate() const { return 65536 / threshold_; }

 private:
  struct Entry {
    uint64_t last_use = 0;
    uint32_t pages = 0, seq = 0;
    uint8_t freq = 0;
    bool probation = false;  // a two-tier simulation's probation FIFO holds it, not the heap
  };
  struct HeapItem {
    uint64_t key;
    uint64_t block;
    uint32_t seq;
  };
  struct Sim {
    double bonus = 0;          // DRAM-fulls per use
    uint64_t bonus_pages = 0;  // in the simulation's (scaled) pages
    uint64_t used = 0, clock = 0, hits = 0;
    uint64_t added = 0;    // pages added by the access under way
    bool evicted = false;  // has been full
    uint32_t seq = 0;
    double score = 0;
    std::unordered_map<uint64_t, Entry> map;
    std::vector<HeapItem> heap;                   // min priority on top; stale items skipped
    std::unordered_map<uint64_t, uint8_t> ghost;  // evicted blocks' past uses
    std::deque<uint64_t> ghost_order;
  };
  // The two tiers, scaled (see above): `dram` is the main queue, whose heap holds only
  // records out of probation.
  struct TierSim {
    bool admit = true;           // one-hit blocks go to flash
    bool promote_all = true;     // false: a hit in the newer half of the flash stays there
    bool reinsert = false;       // the flash reinserts used blocks that reach its end
    double probation_share = 0;  // of DRAM
    uint64_t probation_cap = 0;  // pages
    Sim dram;
    std::deque<std::pair<uint64_t, uint32_t>> probation;  // block, seq; oldest first
    uint64_t probation_used = 0;
    struct Copy {
      uint32_t pages = 0, seq = 0;
      uint8_t freq = 0;
      bool used = false;  // read since written (reinsert)
      uint64_t at = 0;    // flash_written when appended
    };
    std::unordered_map<uint64_t, Copy> flash;
    std::deque<std::pair<uint64_t, uint32_t>> flash_order;  // block, seq; oldest first
    uint64_t flash_used = 0;
    uint64_t flash_written = 0;  // pages appended, ever
    bool flash_full = false;     // has dropped a block to make room
  };
  static uint64_t SampleHash(const BlockKey& key) {
    return (((key.lo ^ key.hi) * 0x9E3779B97F4A7C15ull) >> 32) & 0xffff;
  }
  // Touches the block if held (returns true), else adds it if `add`.
  bool AccessSim(Sim& s, uint64_t block, uint32_t pages, bool add);
  bool CountAndMaybeEndEpoch(uint64_t accesses) REQUIRES(mu_);
  bool EvictOne(Sim& s);  // false: nothing left to evict
  void Push(Sim& s, uint64_t block, const Entry& e);
  void EndEpoch() REQUIRES(mu_);
  // The two-tier simulations' counterparts (REQUIRES mu_).
  bool TierSampled(const BlockKey& key) const { return SampleHash(key) < tier_threshold_; }
  bool AccessTier(TierSim& t, uint64_t block, uint32_t pages, bool add) REQUIRES(mu_);
  // Holds a block in DRAM (probation, or main), evicting first as needed.
  void Hold(TierSim& t, uint64_t block, uint32_t pages, uint8_t freq, bool main) REQUIRES(mu_);
  // Takes the main queue's lowest (removed from the map, returned); false when empty.
  bool PopMain(Sim& s, uint64_t* block, Entry* out);
  bool EvictTier(TierSim& t);
  void ToFlash(TierSim& t, uint64_t block, uint32_t pages, uint8_t freq);
  // A promotion simulation takes the chosen tier simulation's probation and admission.
  static void Follow(TierSim& t, const TierSim& chosen);
  // A sampled chain or access through one two-tier simulation.
  void ChainTier(TierSim& t, std::span<const BlockKey> chain) REQUIRES(mu_);
  void AccessTierOnce(TierSim& t, uint64_t block, uint32_t pages, bool put) REQUIRES(mu_);
  void EraseTier(TierSim& t, uint64_t block) REQUIRES(mu_);
  // The tier simulations' scores decayed, and the promotion simulations set to the chosen
  // probation share, admission and bonus.
  void EndTierEpoch() REQUIRES(mu_);
  static void Forget(Sim& s, uint64_t block, uint8_t freq, uint64_t ghost_capacity);
  void Rekey(Sim& s, double bonus);

  uint64_t threshold_;       // of 65536
  uint64_t capacity_;        // each simulation's capacity, in pages
  uint64_t ghost_capacity_;  // evicted blocks each simulation remembers

  Mutex mu_;
  std::vector<Sim> sims_ GUARDED_BY(mu_);
  size_t chosen_ GUARDED_BY(mu_) = 0;
  uint64_t epoch_accesses_ GUARDED_BY(mu_) = 0;
  double total_score_ GUARDED_BY(mu_) = 0;    // decayed accesses
  bool chains_ GUARDED_BY(mu_) = false;       // chain lookups seen
  uint32_t block_pages_ GUARDED_BY(mu_) = 1;  // size of the last block put
  std::atomic<double> bonus_{0};              // sims_[chosen_].bonus
  uint64_t tier_threshold_ = 0;               // of 65536; 0: no two-tier simulations
  uint64_t tier_dram_ = 0, tier_flash_ = 0;   // their capacities, pages
  uint64_t tier_held_ GUARDED_BY(mu_) = 0;    // the DRAM pages they hold (tier_dram_ x held)
  double held_share_ GUARDED_BY(mu_) = -1;    // moving mean of SetDramHeld; -1: none yet
  uint64_t tier_ghost_ = 0;
  std::vector<TierSim> tiers_ GUARDED_BY(mu_);  // writing one-hit blocks or not x shares
  size_t tier_chosen_ GUARDED_BY(mu_) = 0;
  std::atomic<bool> admit_one_hit_{true};
  // Promoting every flash hit or not (see above), over reinserting logs.
  std::vector<TierSim> promos_ GUARDED_BY(mu_);
  size_t promo_chosen_ GUARDED_BY(mu_) = 0;
  std::atomic<bool> promote_all_{true};
  std::atomic<double> probation_{0};
  struct Queued {
    uint32_t first, count;  // in queue_keys_
    uint32_t pages;         // a chain's: the DRAM held share x 2^16 + 1, 0 for none
    uint8_t kind;           // 0 chain, 1 get, 2 put, 3 erase
  };
  Mutex queue_mu_;
  std::vector<BlockKey> queue_keys_ GUARDED_BY(queue_mu_);
  std::vector<Queued> queue_ GUARDED_BY(queue_mu_);
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint32_t> queued_keys_{0};  // queue_keys_.size(), read without the lock
  std::atomic<uint64_t> epochs_{0};
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_POLICY_TUNER_H_
