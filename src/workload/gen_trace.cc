#include "workload/gen_trace.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

namespace kvpool::workload {
namespace {

// Draws block ids, requests and times for one trace.
class Gen {
 public:
  Gen(const GenOptions& o, uint64_t id_base) : o_(o), rng_(o.seed), next_id_(id_base) {}

  std::vector<uint64_t> Fresh(size_t n) {
    std::vector<uint64_t> ids(n);
    for (auto& id : ids) id = next_id_++;
    return ids;
  }
  size_t Uniform(size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng_);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  // A rank in [0, n) with probability ~ 1 / (rank + 1)^s.
  size_t Zipf(size_t n, double s) {
    if (cdf_n_ != n || cdf_s_ != s) {
      cdf_.assign(n, 0);
      double sum = 0;
      for (size_t i = 0; i < n; ++i) cdf_[i] = sum += 1.0 / std::pow(double(i + 1), s);
      for (double& c : cdf_) c /= sum;
      cdf_n_ = n;
      cdf_s_ = s;
    }
    double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    return std::min<size_t>(n - 1, std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }
  // Appends a request at the next arrival (Poisson, ~100 ms apart), its last block partial.
  void Emit(std::vector<TraceRequest>& out, std::vector<uint64_t> ids, uint64_t output) {
    now_ms_ += 1 + static_cast<uint64_t>(std::exponential_distribution<double>(0.01)(rng_));
    TraceRequest r;
    r.timestamp_ms = now_ms_;
    r.input_length = ids.size() * o_.block_tokens - Uniform(0, o_.block_tokens - 1);
    r.output_length = output;
    r.hash_ids = std::move(ids);
    out.push_back(std::move(r));
  }
  uint64_t next_id() const { return next_id_; }

 private:
  const GenOptions& o_;
  std::mt19937_64 rng_;
  uint64_t next_id_;
  uint64_t now_ms_ = 0;
  std::vector<double> cdf_;
  size_t cdf_n_ = 0;
  double cdf_s_ = 0;
};

// Sessions that resend their context each step (chat turns, agent tool loops): up to
// `active` run at once, interleaved; each step appends `grow(g)` blocks.
template <class Grow>
void Sessions(Gen& g, std::vector<TraceRequest>& out, size_t n, size_t active, double cont,
              size_t first_blocks, Grow grow) {
  std::vector<std::vector<uint64_t>> live;
  while (out.size() < n) {
    while (live.size() < active) live.push_back(g.Fresh(g.Uniform(1, first_blocks)));
    size_t i = g.Uniform(0, live.size() - 1);
    std::vector<uint64_t>& ctx = live[i];
    g.Emit(out, ctx, g.Uniform(20, 400));
    if (g.Chance(cont) && ctx.size() < 256) {
      auto more = g.Fresh(grow(g));
      ctx.insert(ctx.end(), more.begin(), more.end());
    } else {
      live.erase(live.begin() + static_cast<long>(i));
    }
  }
}

void Chat(Gen& g, std::vector<TraceRequest>& out, size_t n, double cont) {
  Sessions(g, out, n, 64, cont, 8, [](Gen& x) { return x.Uniform(1, 3); });
}

void Agent(Gen& g, std::vector<TraceRequest>& out, size_t n, double cont) {
  // Long loops (tool output 1-8 blocks a step), fewer at once.
  Sessions(g, out, n, 16, std::max(cont, 0.9), 12, [](Gen& x) { return x.Uniform(1, 8); });
}

void Shared(Gen& g, std::vector<TraceRequest>& out, size_t n) {
  std::vector<std::vector<uint64_t>> headers;
  for (int h = 0; h < 24; ++h) headers.push_back(g.Fresh(g.Uniform(4, 16)));
  while (out.size() < n) {
    auto ids = headers[g.Zipf(headers.size(), 1.0)];
    auto tail = g.Fresh(g.Uniform(1, 4));
    ids.insert(ids.end(), tail.begin(), tail.end());
    g.Emit(out, std::move(ids), g.Uniform(20, 200));
  }
}

void Rag(Gen& g, std::vector<TraceRequest>& out, size_t n) {
  const std::vector<uint64_t> instruction = g.Fresh(2);
  std::vector<std::vector<uint64_t>> seen_docs;
  while (out.size() < n) {
    std::vector<uint64_t> doc;
    if (!seen_docs.empty() && g.Chance(0.08)) {  // a document retrieved again
      doc = seen_docs[g.Zipf(seen_docs.size(), 0.8)];
    } else {
      doc = g.Fresh(g.Uniform(4, 24));
      seen_docs.push_back(doc);
    }
    auto ids = instruction;
    ids.insert(ids.end(), doc.begin(), doc.end());
    ids.push_back(g.Fresh(1)[0]);  // the question
    g.Emit(out, std::move(ids), g.Uniform(50, 400));
  }
}

void Zipfian(Gen& g, std::vector<TraceRequest>& out, size_t n) {
  std::vector<std::vector<uint64_t>> prefixes;
  for (int p = 0; p < 400; ++p) prefixes.push_back(g.Fresh(g.Uniform(2, 40)));
  size_t shift = 0;
  while (out.size() < n) {
    if (out.size() % 500 == 0) shift = g.Uniform(0, prefixes.size() - 1);  // a new burst
    auto ids = prefixes[(g.Zipf(prefixes.size(), 1.1) + shift) % prefixes.size()];
    auto tail = g.Fresh(g.Uniform(1, 3));
    ids.insert(ids.end(), tail.begin(), tail.end());
    g.Emit(out, std::move(ids), g.Uniform(20, 300));
  }
}

}  // namespace

const std::vector<std::string>& TraceFamilies() {
  static const std::vector<std::string> f = {"chat", "shared", "agent", "rag", "zipf", "phase"};
  return f;
}

Result<std::vector<TraceRequest>> GenerateTrace(const GenOptions& o) {
  if (o.requests == 0) return Status::InvalidArgument("gen-trace: --requests must be > 0");
  if (o.block_tokens == 0) return Status::InvalidArgument("gen-trace: block tokens must be > 0");
  if (!(o.continue_p >= 0 && o.continue_p < 1))
    return Status::InvalidArgument("gen-trace: --continue must be in [0, 1)");
  std::vector<TraceRequest> out;
  Gen g(o, 1);
  const std::string& f = o.family;
  if (f == "chat") {
    Chat(g, out, o.requests, o.continue_p);
  } else if (f == "shared") {
    Shared(g, out, o.requests);
  } else if (f == "agent") {
    Agent(g, out, o.requests, o.continue_p);
  } else if (f == "rag") {
    Rag(g, out, o.requests);
  } else if (f == "zipf") {
    Zipfian(g, out, o.requests);
  } else if (f == "phase") {
    Chat(g, out, o.requests / 2, o.continue_p);
    Gen second(o, g.next_id() + (1ull << 40));  // disjoint ids: nothing carries over
    std::vector<TraceRequest> rest;
    Rag(second, rest, o.requests - out.size());
    const uint64_t t0 = out.empty() ? 0 : out.back().timestamp_ms;
    for (auto& r : rest) {
      r.timestamp_ms += t0;
      out.push_back(std::move(r));
    }
  } else {
    std::string known;
    for (const auto& k : TraceFamilies()) known += (known.empty() ? "" : ", ") + k;
    return Status::InvalidArgument("gen-trace: unknown family \"" + f + "\" (" + known + ")");
  }
  out.resize(std::min(out.size(), o.requests));
  return out;
}

std::string TraceLine(const TraceRequest& r) {
  std::ostringstream s;
  s << "{\"timestamp\": " << r.timestamp_ms << ", \"input_length\": " << r.input_length
    << ", \"output_length\": " << r.output_length << ", \"hash_ids\": [";
  for (size_t i = 0; i < r.hash_ids.size(); ++i) s << (i ? ", " : "") << r.hash_ids[i];
  s << "]}";
  return s.str();
}

}  // namespace kvpool::workload
