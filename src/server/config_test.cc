#include "server/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/units.h"
#include "server/resp_parser.h"
#include "server/tenants.h"

namespace kvpool::server {
namespace {

Tenant MakeTenant(std::string name, std::string token, std::vector<std::string> namespaces) {
  Tenant t;
  t.name = std::move(name);
  t.token = std::move(token);
  t.namespaces = std::move(namespaces);
  return t;
}

TEST(Config, TomlOverridesDefaults) {
  DaemonConfig c = MachineDefaults("d");
  EXPECT_GE(c.store.dram_bytes, 64 * kMiB);
  EXPECT_EQ(c.store.reuse_bonus, StoreOptions::kReuseBonusAuto);  // learnt unless set
  EXPECT_EQ(c.store.admission, Admission::kBudget);
  EXPECT_TRUE(c.metrics_listen.empty());
  DaemonConfig auto_bonus = c;
  ASSERT_TRUE(
      ApplyToml("[store]\nreuse_bonus = \"auto\"\nadmission = \"budget\"\n", &auto_bonus).ok());
  EXPECT_EQ(auto_bonus.store.reuse_bonus, StoreOptions::kReuseBonusAuto);
  EXPECT_FALSE(ApplyToml("[store]\nreuse_bonus = \"sometimes\"\n", &auto_bonus).ok());
  EXPECT_FALSE(ApplyToml("[store]\nflash_writes_per_day = -1\n", &auto_bonus).ok());
  Status s = ApplyToml(R"(
# comment
[server]
listen = "127.0.0.1:9000"   # trailing comment
resp_listen = ""
metrics_listen = "127.0.0.1:9402"
max_batch = 16
max_request_bytes = "64MiB"
reactor_nice = -5

[store]
dram_bytes = "512MiB"
flash_bytes = 0
admission = "all"
huge_pages = false
reuse_bonus = 0.25
flash_writes_per_day = 1.5

[cluster]
etcd = "10.0.0.1:2379,10.0.0.2:2379"
member_id = "host7"
capacity = "2TiB"
zone = "z1"
rack = "r4"
lease_ttl = 5

[[tenant]]
name = "a"
token = "x#y"
namespaces = ["a/*", "shared"]
)",
                       &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.server.listen, "127.0.0.1:9000");
  EXPECT_EQ(c.server.resp_listen, "");
  EXPECT_EQ(c.server.limits.max_batch, 16u);
  EXPECT_EQ(c.server.limits.max_request_bytes, 64 * kMiB);
  EXPECT_EQ(c.server.reactor_nice, -5);
  EXPECT_EQ(c.store.dram_bytes, 512 * kMiB);
  EXPECT_EQ(c.store.flash_bytes, 0u);
  EXPECT_EQ(c.store.admission, Admission::kAll);
  EXPECT_FALSE(c.store.huge_pages);
  EXPECT_EQ(c.store.reuse_bonus, 0.25);
  EXPECT_EQ(c.store.flash_writes_per_day, 1.5);
  EXPECT_EQ(c.metrics_listen, "127.0.0.1:9402");
  EXPECT_EQ(c.cluster.etcd, "10.0.0.1:2379,10.0.0.2:2379");
  EXPECT_EQ(c.cluster.member_id, "host7");
  EXPECT_EQ(c.cluster.capacity, 2 * kGiB * 1024);
  EXPECT_EQ(c.cluster.zone, "z1");
  EXPECT_EQ(c.cluster.rack, "r4");
  EXPECT_EQ(c.cluster.lease_ttl, 5u);
  EXPECT_EQ(c.cluster.prefix, "/kvpool/members/");
  ASSERT_EQ(c.server.tenants.size(), 1u);
  EXPECT_EQ(c.server.tenants[0].token, "x#y");
  EXPECT_EQ(c.server.tenants[0].namespaces.size(), 2u);
}

TEST(Config, ErrorsNameTheLine) {
  DaemonConfig c;
  auto err = [&](const char* text) { return std::string(ApplyToml(text, &c).message()); };
  EXPECT_NE(err("[server]\nlisten = \"a\"\nnosuch = 1\n").find("line 3"), std::string::npos);
  EXPECT_NE(err("[store]\ndram_bytes = \"lots\"\n").find("not a size"), std::string::npos);
  EXPECT_NE(err("listen = \"x\"\n").find("outside a table"), std::string::npos);
  EXPECT_NE(err("[nope]\n").find("tables are"), std::string::npos);
  EXPECT_NE(err("[server]\nlisten = \"unterminated\n").find("line 2"), std::string::npos);
  EXPECT_NE(err("[[tenant]]\nname = \"t\"\n").find("without a token"), std::string::npos);
  EXPECT_NE(err("[store]\nadmission = \"lru\"\n").find("probation"), std::string::npos);
  EXPECT_NE(err("[server]\nreactor_nice = 20\n").find("-20..19"), std::string::npos);
  EXPECT_NE(err("[server]\nreactor_nice = \"high\"\n").find("integer"), std::string::npos);
  EXPECT_NE(err("[store]\nreuse_bonus = 65\n").find("[0, 64]"), std::string::npos);
  EXPECT_NE(err("[store]\nreuse_bonus = -0.5\n").find("[0, 64]"), std::string::npos);
  EXPECT_NE(err("[store]\nreuse_bonus = \"much\"\n").find("number"), std::string::npos);
  EXPECT_NE(err("[store]\nreuse_bonus = 1.2.3\n").find("number"), std::string::npos);
}

TEST(Config, SettingsAsWrittenAndTheLogLevel) {
  DaemonConfig c;
  std::map<std::string, std::string> set;
  ASSERT_TRUE(ApplyToml("[server]\nlog_level = \"debug\"\nmax_batch = 64 # comment\n"
                        "[[tenant]]\nname = \"a\"\ntoken = \"t\"\nnamespaces = [\"a\"]\n",
                        &c, &set)
                  .ok());
  EXPECT_EQ(c.log_level, log::Level::kDebug);
  EXPECT_EQ(set, (std::map<std::string, std::string>{{"server.log_level", "\"debug\""},
                                                     {"server.max_batch", "64"}}));
  EXPECT_FALSE(ApplyToml("[server]\nlog_level = \"loud\"\n", &c).ok());
  EXPECT_EQ(log::ParseLevel("warn"), log::Level::kWarn);
  EXPECT_FALSE(log::ParseLevel("WARN").has_value());
}

// The flags set the file's settings through the same parsers and ranges; errors name the
// flag; --help lists every flag (and would throw on a flag naming no setting).
TEST(Flags, EachSetsItsSettingAndErrorsNameTheFlag) {
  auto apply = [](std::vector<const char*> args, DaemonConfig* c, FlagEffects* e = nullptr) {
    FlagEffects none;
    args.insert(args.begin(), "kvpoold");
    return ApplyFlags(static_cast<int>(args.size()), args.data(), c, e ? e : &none);
  };
  DaemonConfig c;
  FlagEffects e;
  ASSERT_TRUE(apply({"--dram",
                     "64MiB",
                     "--max-batch",
                     "64",
                     "--reactor-nice",
                     "-5",
                     "--listen",
                     "off",
                     "--resp-listen",
                     "127.0.0.1:9",
                     "--no-prefault",
                     "--flash-fresh",
                     "--tls-require-client-cert",
                     "--labels",
                     "zone=z1,rack=r2",
                     "--lease-ttl",
                     "7",
                     "--kv-events-format",
                     "array",
                     "--log-level",
                     "debug",
                     "--print-config",
                     "--ready-file",
                     "/tmp/r"},
                    &c, &e)
                  .ok());
  EXPECT_EQ(c.store.dram_bytes, 64 * kMiB);
  EXPECT_EQ(c.server.limits.max_batch, 64u);
  EXPECT_EQ(c.server.reactor_nice, -5);
  EXPECT_EQ(c.server.listen, "");
  EXPECT_EQ(c.server.resp_listen, "127.0.0.1:9");
  EXPECT_FALSE(c.store.prefault);
  EXPECT_FALSE(c.store.flash_restore);
  EXPECT_TRUE(c.server.tls.require_client_cert);
  EXPECT_EQ(c.cluster.zone, "z1");
  EXPECT_EQ(c.cluster.rack, "r2");
  EXPECT_EQ(c.cluster.lease_ttl, 7u);
  EXPECT_FALSE(c.events.map_form);
  EXPECT_EQ(c.log_level, log::Level::kDebug);
  EXPECT_EQ(c.ready_file, "/tmp/r");
  EXPECT_TRUE(e.print_config);
  auto err = [&](std::vector<const char*> args) {
    DaemonConfig d;
    Status s = apply(std::move(args), &d);
    return s.ok() ? std::string("accepted") : std::string(s.message());
  };
  // The file's ranges hold for the flags, and the other way round.
  EXPECT_EQ(err({"--max-batch", "0"}), "--max-batch: at least 1");
  EXPECT_EQ(err({"--max-batch", "70000"}), "--max-batch: at most 65536");
  DaemonConfig d;
  EXPECT_FALSE(ApplyToml("[server]\nmax_batch = 0\n", &d).ok());
  EXPECT_NE(err({"--reactor-nice", "30"}).find("--reactor-nice: must be in -20..19"),
            std::string::npos);
  EXPECT_NE(err({"--reactor-nice", "x"}).find("--reactor-nice:"), std::string::npos);
  EXPECT_NE(err({"--dram", "lots"}).find("--dram:"), std::string::npos);
  EXPECT_NE(err({"--lease-ttl", "1"}).find("at least 2"), std::string::npos);
  EXPECT_NE(err({"--kv-events-hash", "sha"}).find("\"int\" or \"bytes\""), std::string::npos);
  EXPECT_NE(err({"--labels", "floor=3"}).find("--labels: node=..,rack=..,zone=.."),
            std::string::npos);
  EXPECT_EQ(err({"--listen"}), "--listen needs a value (ADDR)");
  EXPECT_NE(err({"--bogus"}).find("unknown option '--bogus'"), std::string::npos);
  std::string help = DescribeFlags();
  for (const char* flag :
       {"--dram SIZE", "--no-prefault", "--labels L", "--help", "--config FILE"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(help.find("(store.dram_bytes)"), std::string::npos);
  std::string settings = DescribeSettings();
  EXPECT_EQ(settings.find("store.dram_bytes"), std::string::npos) << "described with its flag";
  EXPECT_NE(settings.find("store.region_bytes"), std::string::npos);
}

TEST(Units, ParseAndFormatSizes) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64K"), 64 * kKiB);
  EXPECT_EQ(*ParseSize("16MiB"), 16 * kMiB);
  EXPECT_EQ(*ParseSize("1.5G"), 3 * kGiB / 2);
  EXPECT_FALSE(ParseSize("-1").ok());
  EXPECT_FALSE(ParseSize("12Q").ok());
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("1e30").ok());
  EXPECT_EQ(FormatSize(64 * kKiB), "64.0 KiB");
}

TEST(Tenants, QuotasParseAndIdsDependOnNamesOnly) {
  DaemonConfig c;
  ASSERT_TRUE(ApplyToml("[[tenant]]\nname = \"a\"\ntoken = \"t\"\nnamespaces = [\"a\"]\n"
                        "dram_quota = \"2GiB\"\nflash_quota = 68719476736\n",
                        &c)
                  .ok());
  ASSERT_EQ(c.server.tenants.size(), 1u);
  EXPECT_EQ(c.server.tenants[0].dram_quota, 2 * kGiB);
  EXPECT_EQ(c.server.tenants[0].flash_quota, 64 * kGiB);
  auto err = [](const std::string& toml) {
    DaemonConfig d;
    Status s = ApplyToml(toml, &d);
    return s.ok() ? std::string("accepted") : std::string(s.message());
  };
  const std::string head = "[[tenant]]\nname = \"a\"\ntoken = \"t\"\nnamespaces = [\"a\"]\n";
  EXPECT_NE(err(head + "dram_quota = \"lots\"\n").find("dram_quota"), std::string::npos);
  EXPECT_NE(err(head + "flash_quota = 100\n").find("at least 64KiB"), std::string::npos);
  EXPECT_NE(err(head + head).find("two tenants named 'a'"), std::string::npos);
  // Ids: non-zero, distinct, and the same whatever order the tenants are listed in.
  std::vector<Tenant> list;
  for (int i = 0; i < 300; ++i) list.push_back(MakeTenant("t" + std::to_string(i), "s", {"n"}));
  Tenants forward(list);
  std::reverse(list.begin(), list.end());
  Tenants backward(list);
  std::set<uint16_t> ids;
  for (const Tenant& t : forward.list()) {
    EXPECT_GT(t.id, 0);
    EXPECT_LT(t.id, kMaxTenants);
    ids.insert(t.id);
    for (const Tenant& u : backward.list()) {
      if (u.name == t.name) EXPECT_EQ(u.id, t.id) << t.name;
    }
  }
  EXPECT_EQ(ids.size(), 300u);
  uint16_t id = 0;
  EXPECT_TRUE(forward.Authorize("s", "n", nullptr, nullptr, nullptr, &id).ok());
  EXPECT_NE(id, 0);
}

TEST(Tenants, TokensOpenOnlyTheirNamespaces) {
  Tenants open;
  EXPECT_TRUE(open.Authorize("", "anything").ok());
  Tenants t({MakeTenant("a", "sa", {"a/*", "shared"}), MakeTenant("b", "sb", {"b"})});
  EXPECT_TRUE(t.Authorize("sa", "a/llama").ok());
  EXPECT_TRUE(t.Authorize("sa", "shared").ok());
  EXPECT_EQ(t.Authorize("sa", "b").code(), Code::kRefused);
  EXPECT_EQ(t.Authorize("sb", "b/x").code(), Code::kRefused);
  EXPECT_EQ(t.Authorize("", "a/x").code(), Code::kRefused);
  EXPECT_EQ(t.Authorize("s", "a/x").code(), Code::kRefused);
  std::string name = "stale";
  EXPECT_TRUE(t.Authorize("sb", "b", &name).ok());
  EXPECT_EQ(name, "b");  // the tenant a connection counts under
  EXPECT_FALSE(t.Authorize("sb", "a/x", &name).ok());
  EXPECT_EQ(name, "");
  Scope x("x"), y("y");
  BlockKey k{1, 2};
  EXPECT_NE(x.Key(k), y.Key(k));
  EXPECT_EQ(x.Key(k), Scope("x").Key(k));
  EXPECT_TRUE(x.Key(BlockKey{}).empty());
}

TEST(RespParser, ArraysInlineAndErrors) {
  RespLimits limits;
  std::vector<std::string_view> args;
  size_t used = 0;
  std::string err;
  std::string in = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nva\r\nl\r\n*1\r\n$4\r\nPING\r\n";
  ASSERT_EQ(ParseRespCommand(in, limits, &args, &used, &err), RespParse::kOk);
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[2], "va\r\nl");  // binary-safe
  ASSERT_EQ(ParseRespCommand(std::string_view(in).substr(used), limits, &args, &used, &err),
            RespParse::kOk);
  EXPECT_EQ(args[0], "PING");
  for (size_t cut = 0; cut < 30; ++cut) {  // every prefix is incomplete, not an error
    EXPECT_EQ(ParseRespCommand(std::string_view(in).substr(0, cut), limits, &args, &used, &err),
              RespParse::kIncomplete)
        << cut;
  }
  ASSERT_EQ(ParseRespCommand("GET  foo\r\n", limits, &args, &used, &err), RespParse::kOk);
  EXPECT_EQ(args.size(), 2u);
  EXPECT_EQ(args[1], "foo");
  EXPECT_EQ(ParseRespCommand("*1\r\n$x\r\n", limits, &args, &used, &err), RespParse::kError);
  EXPECT_EQ(ParseRespCommand("*1\r\n$2\r\nabXY", limits, &args, &used, &err), RespParse::kError);
  EXPECT_EQ(ParseRespCommand("*-5\r\n", limits, &args, &used, &err), RespParse::kError);
  EXPECT_EQ(ParseRespCommand("*1\r\n:5\r\n", limits, &args, &used, &err), RespParse::kError);
  limits.max_bulk_bytes = 10;
  EXPECT_EQ(ParseRespCommand("*1\r\n$11\r\n", limits, &args, &used, &err), RespParse::kError);
}

}  // namespace
}  // namespace kvpool::server
