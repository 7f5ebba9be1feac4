// The daemon's log: one line per message on stderr, "2026-12-06T01:23:40Z kvpoold[pid]:
// level: message", filtered by a process-wide level that can change while running
// (kvpoold reloads it on SIGHUP).
//
// Thread safety: all functions are thread-safe; a line is written with one fprintf.
#ifndef KVPOOL_COMMON_LOG_H_
#define KVPOOL_COMMON_LOG_H_

#include <optional>
#include <string>
#include <string_view>

namespace kvpool::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

std::optional<Level> ParseLevel(std::string_view name);  // "error", "warn", "info", "debug"
const char* LevelName(Level level);
void SetLevel(Level level);
Level GetLevel();
bool Enabled(Level level);
void SetProgram(std::string name);  // "kvpoold" by default

void Write(Level level, const std::string& msg);
inline void Error(const std::string& msg) { Write(Level::kError, msg); }
inline void Warn(const std::string& msg) { Write(Level::kWarn, msg); }
inline void Info(const std::string& msg) { Write(Level::kInfo, msg); }
inline void Debug(const std::string& msg) { Write(Level::kDebug, msg); }

}  // namespace kvpool::log

#endif  // KVPOOL_COMMON_LOG_H_
