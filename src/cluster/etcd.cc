#include "cluster/etcd.h"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cluster/http.h"
#include "common/base64.h"

namespace kvpool::cluster {
namespace {

using nlohmann::json;

// etcd's gateway writes int64 fields as JSON strings ("revision":"7"), and omits zeros.
int64_t Int(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    return end && *end == 0 ? v : 0;
  }
  return 0;
}

std::string Bytes(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || !it->is_string()) return {};
  return Base64Decode(it->get_ref<const std::string&>()).value_or(std::string());
}

Result<json> Parse(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status(Code::kIoError, "etcd: answer is not JSON");
  if (j.contains("error")) {
    std::string msg = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
    return Status(Code::kIoError, "etcd: " + msg);
  }
  return j;
}

}  // namespace

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) != 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::vector<std::string> SplitEndpoints(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string e =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!e.empty() && (e.front() == ' ' || e.front() == '\t')) e.erase(0, 1);
    while (!e.empty() && (e.back() == ' ' || e.back() == '\t')) e.pop_back();
    if (e.starts_with("http://")) e = e.substr(7);
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (!e.empty()) out.push_back(e);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

EtcdAccess EtcdAccess::FromEnvironment() {
  EtcdAccess a;
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  a.user = env("ETCDCTL_USER");
  a.password = env("ETCDCTL_PASSWORD");
  if (size_t colon = a.user.find(':'); colon != std::string::npos && a.password.empty()) {
    a.password = a.user.substr(colon + 1);
    a.user.resize(colon);
  }
  a.tls_ca = env("ETCDCTL_CACERT");
  a.tls_cert = env("ETCDCTL_CERT");
  a.tls_key = env("ETCDCTL_KEY");
  return a;
}

Etcd::Etcd(std::vector<std::string> endpoints, int timeout_ms, EtcdAccess access)
    : endpoints_(std::move(endpoints)), timeout_ms_(timeout_ms), access_(std::move(access)) {
  if (access_.tls()) {
    net::TlsOptions o;
    o.ca_file = access_.tls_ca;
    o.cert_file = access_.tls_cert;
    o.key_file = access_.tls_key;
    auto ctx = net::TlsContext::Client(o);
    if (ctx.ok()) {
      tls_ = std::move(ctx).value();
    } else {
      tls_error_ = ctx.status();
    }
  }
}

Status Etcd::Authenticate(const std::string& endpoint) {
  auto r = HttpPost(endpoint, "/v3/auth/authenticate",
                    json{{"name", access_.user}, {"password", access_.password}}.dump(),
                    timeout_ms_, tls_.get());
  if (!r.ok()) {
    return Status(Code::kRefused,
                  "etcd refused user '" + access_.user + "': " + r.status().ToString());
  }
  auto j = Parse(*r);
  if (!j.ok()) return j.status();
  token_ = j->value("token", std::string());
  if (token_.empty()) return Status(Code::kRefused, "etcd gave no auth token");
  return Status::Ok();
}

Result<std::string> Etcd::CallOne(const std::string& endpoint, const char* path,
                                  const std::string& body) {
  if (!access_.user.empty() && token_.empty()) {
    if (Status s = Authenticate(endpoint); !s.ok()) return s;
  }
  auto r = HttpPost(endpoint, path, body, timeout_ms_, tls_.get(), token_);
  if (!r.ok() && !access_.user.empty() &&
      r.status().ToString().find("invalid auth token") != std::string::npos) {
    token_.clear();  // expired (etcd's simple tokens live 5 minutes): once more, afresh
    if (Status s = Authenticate(endpoint); !s.ok()) return s;
    r = HttpPost(endpoint, path, body, timeout_ms_, tls_.get(), token_);
  }
  return r;
}

Result<std::string> Etcd::Call(const char* path, const std::string& body) {
  if (endpoints_.empty()) return Status(Code::kUnavailable, "no etcd endpoints");
  if (!tls_error_.ok()) return tls_error_;
  Status last;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    size_t e = (preferred_ + i) % endpoints_.size();
    auto r = CallOne(endpoints_[e], path, body);
    if (r.ok()) {
      preferred_ = e;
      return r;
    }
    last = r.status();
    // Credentials etcd refuses are not an outage: say so, and do not try elsewhere.
    if (last.code() == Code::kRefused) return Status(Code::kRefused, "etcd: " + last.ToString());
  }
  return Status(Code::kUnavailable, "etcd unreachable (" + last.ToString() + ")");
}

Result<int64_t> Etcd::LeaseGrant(int ttl_seconds) {
  auto r = Call("/v3/lease/grant", json{{"TTL", ttl_seconds}}.dump());
  if (!r.ok()) return r.status();
  auto j = Parse(*r);
  if (!j.ok()) return j.status();
  int64_t id = Int(*j, "ID");
  if (id == 0) return Status(Code::kIoError, "etcd: lease grant without an ID");
  return id;
}

Result<int64_t> Etcd::LeaseKeepAlive(int64_t lease) {
  auto r = Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!r.ok()) return r.status();
  // A stream of one message: {"result":{"header":..,"ID":"..","TTL":".."}} (no TTL: expired).
  std::string first = r->substr(0, r->find('\n'));
  auto j = Parse(first);
  if (!j.ok()) return j.status();
  auto it = j->find("result");
  if (it == j->end() || !it->is_object())
    return Status(Code::kIoError, "etcd: keepalive without result");
  return Int(*it, "TTL");
}

Status Etcd::LeaseRevoke(int64_t lease) {
  auto r = Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  return r.ok() ? Parse(*r).status() : r.status();
}

Status Etcd::Put(const std::string& key, const std::string& value, int64_t lease) {
  json req = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease) req["lease"] = std::to_string(lease);
  auto r = Call("/v3/kv/put", req.dump());
  return r.ok() ? Parse(*r).status() : r.status();
}

Status Etcd::Delete(const std::string& key) {
  auto r = Call("/v3/kv/deleterange", json{{"key", Base64Encode(key)}}.dump());
  return r.ok() ? Parse(*r).status() : r.status();
}

Status Etcd::RangePrefix(const std::string& prefix, std::vector<EtcdKv>* kvs, int64_t* revision) {
  auto r = Call(
      "/v3/kv/range",
      json{{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}}.dump());
  if (!r.ok()) return r.status();
  auto j = Parse(*r);
  if (!j.ok()) return j.status();
  kvs->clear();
  if (auto h = j->find("header"); h != j->end() && h->is_object()) *revision = Int(*h, "revision");
  if (auto it = j->find("kvs"); it != j->end() && it->is_array()) {
    for (const json& kv : *it) {
      if (kv.is_object()) kvs->push_back({Bytes(kv, "key"), Bytes(kv, "value")});
    }
  }
  return Status::Ok();
}

Status Etcd::WatchPrefix(const std::string& prefix, int64_t from,
                         const std::function<void(const EtcdEvent&)>& on_event,
                         const std::atomic<bool>& stop, int64_t* last_revision) {
  if (endpoints_.empty()) return Status(Code::kUnavailable, "no etcd endpoints");
  if (!tls_error_.ok()) return tls_error_;
  if (!access_.user.empty()) {  // a fresh token: a watch lives longer than one may
    if (Status s = Authenticate(endpoints_[preferred_]); !s.ok()) return s;
  }
  auto conn = HttpConnection::Open(endpoints_[preferred_], timeout_ms_, tls_.get());
  if (!conn.ok()) return conn.status();
  conn->SetAuthorization(token_);
  json create = {{"create_request",
                  {{"key", Base64Encode(prefix)},
                   {"range_end", Base64Encode(PrefixEnd(prefix))},
                   {"start_revision", std::to_string(from)}}}};
  if (Status s = conn->Post("/v3/watch", create.dump()); !s.ok()) return s;
  std::string buffer;
  while (!stop.load(std::memory_order_relaxed)) {
    if (Status s = conn->ReadSome(&buffer, 100); !s.ok()) return s;
    for (size_t eol; (eol = buffer.find('\n')) != std::string::npos;) {
      std::string line = buffer.substr(0, eol);
      buffer.erase(0, eol + 1);
      if (line.empty()) continue;
      auto j = Parse(line);
      if (!j.ok()) return j.status();
      auto res = j->find("result");
      if (res == j->end() || !res->is_object()) continue;
      if (res->value("canceled", false))
        return Status(Code::kUnavailable, "etcd canceled the watch");
      if (auto h = res->find("header"); h != res->end() && h->is_object()) {
        *last_revision = std::max(*last_revision, Int(*h, "revision"));
      }
      auto events = res->find("events");
      if (events == res->end() || !events->is_array()) continue;
      for (const json& e : *events) {
        if (!e.is_object() || !e.contains("kv")) continue;
        EtcdEvent ev;
        ev.deleted = e.value("type", std::string()) == "DELETE";
        ev.kv = {Bytes(e["kv"], "key"), Bytes(e["kv"], "value")};
        *last_revision = std::max(*last_revision, Int(e["kv"], "mod_revision"));
        on_event(ev);
      }
    }
    if (buffer.size() > HttpResponseParser::kMaxBodyBytes)
      return Status(Code::kIoError, "etcd: watch line too long");
  }
  return Status::Ok();
}

}  // namespace kvpool::cluster
