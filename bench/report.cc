#include "report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kvpool::bench {

extern const char kReportScript[];

namespace {

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Status MakeDirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IoError("cannot create " + part + ": " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f) return Status::IoError("cannot write " + path);
  return Status::Ok();
}

std::string Python() {
  if (const char* p = std::getenv("KVPOOL_PYTHON"); p && *p) return p;
  if (::access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

}  // namespace

Result<std::vector<std::string>> WriteReport(const std::string& dir, const std::string& name,
                                             const std::string& json) {
  if (Status s = MakeDirs(dir); !s.ok()) return s;
  if (Status s = WriteFile(dir + "/" + name + ".json", json); !s.ok()) return s;
  std::string script = dir + "/plot.py";
  if (Status s = WriteFile(script, kReportScript); !s.ok()) return s;
  std::string cmd = Quote(Python()) + " " + Quote(script) + " " + Quote(dir) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return Status::IoError("cannot run " + Python() + ": " + std::strerror(errno));
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  if (rc != 0) {
    return Status::IoError("drawing the figures failed (" + Python() + " " + script + "): " + out +
                           "the results are in " + dir + "/" + name + ".json");
  }
  std::vector<std::string> files;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) files.push_back(line);
  }
  return files;
}

}  // namespace kvpool::bench
