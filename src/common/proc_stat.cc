#include "common/proc_stat.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvpool {
namespace {

std::string FirstLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

ProcStat ProcStat::Parse(const std::string& line) {
  ProcStat s;
  size_t open = line.find('('), close = line.rfind(')');  // the command may hold spaces
  if (open == std::string::npos || close == std::string::npos || close < open) return s;
  s.fields_.push_back(line.substr(0, open - (open > 0 ? 1 : 0)));
  s.fields_.push_back(line.substr(open + 1, close - open - 1));
  std::istringstream rest(line.substr(close + 1));
  for (std::string f; rest >> f;) s.fields_.push_back(f);
  return s;
}

ProcStat ProcStat::OfProcess(pid_t pid) {
  return Parse(FirstLine("/proc/" + std::to_string(pid) + "/stat"));
}

std::vector<ProcStat> ProcStat::OfThreads(pid_t pid) {
  std::vector<ProcStat> out;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    ProcStat s = Parse(FirstLine((e.path() / "stat").string()));
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

const std::string& ProcStat::Field(size_t n) const {
  static const std::string kNone;
  return n >= 1 && n <= fields_.size() ? fields_[n - 1] : kNone;
}

long long ProcStat::Number(size_t n) const { return std::strtoll(Field(n).c_str(), nullptr, 10); }

}  // namespace kvpool
