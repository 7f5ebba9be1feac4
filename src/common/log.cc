#include "common/log.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>

#include "common/mutex.h"

namespace kvpool::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
Mutex g_program_mu;
std::string g_program GUARDED_BY(g_program_mu) = "kvpoold";

}  // namespace

std::optional<Level> ParseLevel(std::string_view name) {
  for (Level l : {Level::kError, Level::kWarn, Level::kInfo, Level::kDebug}) {
    if (name == LevelName(l)) return l;
  }
  return std::nullopt;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kError:
      return "error";
    case Level::kWarn:
      return "warn";
    case Level::kInfo:
      return "info";
    case Level::kDebug:
      return "debug";
  }
  return "info";
}

void SetLevel(Level level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
Level GetLevel() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
bool Enabled(Level level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void SetProgram(std::string name) {
  MutexLock lock(g_program_mu);
  g_program = std::move(name);
}

void Write(Level level, const std::string& msg) {
  if (!Enabled(level)) return;
  char ts[32];
  time_t now = time(nullptr);
  struct tm utc {};
  gmtime_r(&now, &utc);
  strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &utc);
  std::string program;
  {
    MutexLock lock(g_program_mu);
    program = g_program;
  }
  // Info lines keep the form they always had; the others name their level.
  const char* tag = level == Level::kInfo ? "" : LevelName(level);
  std::fprintf(stderr, "%s %s[%d]: %s%s%s\n", ts, program.c_str(), getpid(), tag,
               level == Level::kInfo ? "" : ": ", msg.c_str());
}

}  // namespace kvpool::log
