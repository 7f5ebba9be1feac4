// kvpoold's configuration: defaults sized from the machine, a TOML file, then flags.
//
// The file is a TOML subset: [server], [store], [cluster], [events] and [[tenant]] tables
// of `key = value` lines; values are "strings", integers, true/false, or ["string", ...]
// arrays; sizes may be strings with units ("8GiB"). Unknown keys are errors (a typo must
// not be ignored). Parsing is a pure function of the text (the fuzz target drives it).
#ifndef KVPOOL_SERVER_CONFIG_H_
#define KVPOOL_SERVER_CONFIG_H_

#include <map>
#include <string>
#include <string_view>

#include "common/log.h"
#include "kvpool/options.h"
#include "server/kv_events.h"
#include "server/server.h"

namespace kvpool::server {

// Pod membership through etcd (docs/DEPLOY.md); off while etcd is empty.
struct ClusterConfig {
  std::string etcd;  // "host:port[,host:port...]"
  std::string prefix = "/kvpool/members/";
  std::string member_id;  // stable name that placement hashes (default: the advertise address)
  std::string advertise;  // address clients dial (default: listen host, bound port)
  uint64_t capacity = 0;  // advertised placement weight (default: DRAM + flash bytes)
  std::string node, rack, zone;  // topology labels
  unsigned lease_ttl = 3;        // seconds; a node that stops keeping it alive leaves after this
  // etcd auth and TLS (the cluster's credential); the password is read from a file.
  std::string etcd_user, etcd_password_file, etcd_tls_ca, etcd_tls_cert, etcd_tls_key;
};

struct DaemonConfig {
  std::string data_dir = "kvpool-data";
  bool unix_socket = true;  // <data_dir>/kvpoold.sock unless server.unix_socket is set
  ServerOptions server;
  StoreOptions store;
  ClusterConfig cluster;
  KvEventsOptions events;  // [events]: vLLM-format KV events over ZeroMQ; off by default
  std::string ready_file;  // written once listening: {"pid":..,"port":..,"resp_port":..}
  // The HTTP endpoint (/metrics for Prometheus, / the live page, /api/stats), host:port;
  // empty: off.
  std::string metrics_listen;
  log::Level log_level = log::Level::kInfo;
};

// The settings a running kvpoold applies again on SIGHUP (the rest take a restart).
inline constexpr const char* kReloadableSettings[] = {"server.log_level"};

// Defaults for this machine: DRAM tier = a quarter of MemAvailable (>= 64 MiB), flash tier
// = a file under data_dir of min(4 GiB, a quarter of the free disk).
DaemonConfig MachineDefaults(const std::string& data_dir);

// Applies a TOML document to `config`. Errors name the line. `settings` (optional) gets
// each setting the text sets, "table.key" -> its value as written ([[tenant]] entries
// not included), so a reload can tell which settings changed.
Status ApplyToml(std::string_view text, DaemonConfig* config,
                 std::map<std::string, std::string>* settings = nullptr);

// What a flag did that is not a setting.
struct FlagEffects {
  bool help = false;          // --help, -h
  bool print_config = false;  // --print-config
};

// Applies the command line's flags (argv[1..]) to `config`: each flag sets one setting of
// the file (the same parser, range and help) or is one of a few of its own (--config,
// --labels, --ready-file, --print-config, --help). Errors name the flag.
Status ApplyFlags(int argc, const char* const* argv, DaemonConfig* config, FlagEffects* effects);

// --help: every flag with what it takes and does (and the setting it sets).
std::string DescribeFlags();
// Every setting of the file that has no flag, one per line.
std::string DescribeSettings();

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_CONFIG_H_
