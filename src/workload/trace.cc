#include "workload/trace.h"

#include <sys/stat.h>

#include <charconv>
#include <fstream>

namespace kvpool::workload {
namespace {

struct Cursor {
  std::string_view s;
  size_t i = 0;
  void Ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  bool Eat(char c) {
    Ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool Number(uint64_t* v) {
    Ws();
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), *v);
    if (ec != std::errc()) return false;
    i = static_cast<size_t>(p - s.data());
    return true;
  }
  bool Key(std::string_view* k) {
    if (!Eat('"')) return false;
    size_t start = i;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\') return false;  // trace keys never need escapes
      ++i;
    }
    if (i >= s.size()) return false;
    *k = s.substr(start, i - start);
    ++i;
    return true;
  }
};

}  // namespace

Result<TraceRequest> ParseTraceLine(std::string_view line) {
  Cursor c{line};
  TraceRequest r;
  auto bad = [](const char* what) { return Status::InvalidArgument(what); };
  if (!c.Eat('{')) return bad("expected '{'");
  bool first = true, have_ids = false;
  while (!c.Eat('}')) {
    if (!first && !c.Eat(',')) return bad("expected ',' or '}'");
    first = false;
    std::string_view key;
    if (!c.Key(&key)) return bad("expected a quoted key");
    if (!c.Eat(':')) return bad("expected ':'");
    c.Ws();
    if (c.i < line.size() && line[c.i] == '[') {
      ++c.i;
      std::vector<uint64_t> ids;
      if (!c.Eat(']')) {
        do {
          uint64_t v;
          if (!c.Number(&v)) return bad("expected a number in array");
          ids.push_back(v);
        } while (c.Eat(','));
        if (!c.Eat(']')) return bad("expected ']'");
      }
      if (key == "hash_ids") {
        r.hash_ids = std::move(ids);
        have_ids = true;
      }
      continue;
    }
    uint64_t v;
    if (!c.Number(&v)) return bad("expected a non-negative integer value");
    if (key == "timestamp")
      r.timestamp_ms = v;
    else if (key == "input_length")
      r.input_length = v;
    else if (key == "output_length")
      r.output_length = v;
  }
  c.Ws();
  if (c.i != line.size()) return bad("trailing characters after the object");
  if (!have_ids) return bad("missing hash_ids");
  return r;
}

Result<std::vector<TraceRequest>> LoadTrace(const std::string& path, size_t limit,
                                            unsigned tokens_per_block) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return Status::InvalidArgument(path + " is a directory, not a trace file");
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open trace file " + path);
  std::vector<TraceRequest> out;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto r = ParseTraceLine(line);
    if (!r.ok()) {
      return Status::InvalidArgument(path + ":" + std::to_string(lineno) + ": " +
                                     std::string(r.status().message()));
    }
    // Each hash id names one block of tokens_per_block tokens of the input (the last may be
    // partial): a line whose counts disagree would be replayed as some other request.
    const uint64_t tpb = tokens_per_block ? tokens_per_block : 1;
    const uint64_t blocks = r->input_length / tpb + (r->input_length % tpb != 0 ? 1 : 0);
    if (tokens_per_block > 0 && blocks != r->hash_ids.size()) {
      return Status::InvalidArgument(path + ":" + std::to_string(lineno) + ": input_length " +
                                     std::to_string(r->input_length) + " needs " +
                                     std::to_string(blocks) + " blocks of " +
                                     std::to_string(tokens_per_block) + " tokens, hash_ids has " +
                                     std::to_string(r->hash_ids.size()));
    }
    out.push_back(std::move(r).value());
    if (limit && out.size() >= limit) break;
  }
  if (in.bad()) return Status::IoError("reading " + path + " failed");
  if (out.empty()) return Status::InvalidArgument(path + ": no requests in the trace");
  return out;
}

}  // namespace kvpool::workload
