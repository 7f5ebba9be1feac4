// `kvpool gen-trace`: seeded, parameterised request traces in the Mooncake JSONL format, with
// reuse structures unlike the conversation trace, so that policies are judged on workloads
// they were not tuned on. Each request's hash_ids are its input's 512-token blocks (ids are
// block identities: equal ids are equal token blocks), input_length fits them
// (LoadTrace's rule), and timestamps rise.
//
// Families:
//   chat      multi-turn sessions: each turn resends the whole context plus a new message;
//             a session continues with probability --continue (default 0.7) after a think
//             time; sessions interleave.
//   shared    a few system prompts / few-shot headers (4-16 blocks) picked by popularity
//             (Zipf) across many users, each request a short unique tail.
//   agent     tool loops: each step resends the context grown by the last tool output.
//   rag       a shared instruction, a retrieved document (mostly one-off: scan-heavy), a
//             question.
//   zipf      bursty popular prefixes: popularity (Zipf) over prefixes of varied length,
//             the popular set shifting every burst.
//   phase     chat for the first half, rag for the second, in disjoint block ids.
#ifndef KVPOOL_WORKLOAD_GEN_TRACE_H_
#define KVPOOL_WORKLOAD_GEN_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvpool/status.h"
#include "workload/trace.h"

namespace kvpool::workload {

struct GenOptions {
  std::string family = "chat";
  uint64_t seed = 1;
  size_t requests = 5000;
  double continue_p = 0.7;  // chat and agent: the chance a session takes another turn
  unsigned block_tokens = 512;
};

// The families GenerateTrace knows, for --help and errors.
const std::vector<std::string>& TraceFamilies();

Result<std::vector<TraceRequest>> GenerateTrace(const GenOptions& options);

// One request as a Mooncake JSONL line (no newline).
std::string TraceLine(const TraceRequest& r);

}  // namespace kvpool::workload

#endif  // KVPOOL_WORKLOAD_GEN_TRACE_H_
