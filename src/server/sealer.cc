#include "server/sealer.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/clock.h"

extern char** environ;

namespace kvpool::server {
namespace {

constexpr char kMagic[kSealMagicBytes + 1] = "kvpSEAL1";
constexpr char kAdLabel[] = "kvpool/seal/v1";

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void PutLe32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

uint32_t GetLe32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(std::to_integer<uint8_t>(p[i])) << (8 * i);
  return v;
}

// tenant name, stored key, key version: what a sealed block is bound to.
std::vector<unsigned char> AssociatedData(const std::string& tenant, const BlockKey& key,
                                          uint32_t version) {
  std::vector<unsigned char> ad(kAdLabel, kAdLabel + sizeof(kAdLabel) - 1);
  uint32_t n = static_cast<uint32_t>(tenant.size());
  for (int i = 0; i < 4; ++i) ad.push_back(static_cast<unsigned char>(n >> (8 * i)));
  ad.insert(ad.end(), tenant.begin(), tenant.end());
  for (uint64_t w : {key.hi, key.lo})
    for (int i = 0; i < 8; ++i) ad.push_back(static_cast<unsigned char>(w >> (8 * i)));
  for (int i = 0; i < 4; ++i) ad.push_back(static_cast<unsigned char>(version >> (8 * i)));
  return ad;
}

struct CtxDeleter {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxDeleter>;

// A command's standard output, or why not: exit 0 within 10 s, at most 1 MiB.
Result<std::string> RunCommand(const std::string& command) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0)
    return Status::IoError("pipe: " + std::string(strerror(errno)));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    return Status::IoError("key command: " + std::string(strerror(rc)));
  }
  std::string out;
  uint64_t until = NowNanos() + 10'000'000'000ull;
  bool timed_out = false;
  for (;;) {
    uint64_t now = NowNanos();
    if (now >= until) {
      timed_out = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>((until - now) / 1'000'000 + 1));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = read(pipefd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1 << 20)) {
      timed_out = true;  // not a key list: stop it
      break;
    }
  }
  close(pipefd[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return Status::Timeout("key command did not finish within 10 s (or said too much)");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Status::IoError("key command failed (exit status " +
                           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  return out;
}

}  // namespace

Result<std::shared_ptr<const TenantKeys>> TenantKeys::Parse(std::string_view tenant,
                                                            std::string_view text) {
  auto keys = std::make_shared<TenantKeys>();
  keys->tenant_ = std::string(tenant);
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    while (!line.empty() && isspace(static_cast<unsigned char>(line.front())))
      line.remove_prefix(1);
    while (!line.empty() && isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("tenant '" + std::string(tenant) + "' key list, line " +
                                     std::to_string(line_no) + ": " + why);
    };
    size_t sp = line.find_first_of(" \t");
    if (sp == std::string_view::npos) return bad("expected \"<version> <64 hex digits>\"");
    std::string_view ver = line.substr(0, sp), hex = line.substr(sp);
    while (!hex.empty() && isspace(static_cast<unsigned char>(hex.front()))) hex.remove_prefix(1);
    uint64_t v = 0;
    if (ver.empty() || ver.size() > 9) return bad("version: an integer 1..999999999");
    for (char c : ver) {
      if (c < '0' || c > '9') return bad("version: an integer 1..999999999");
      v = v * 10 + uint64_t(c - '0');
    }
    if (v == 0) return bad("version: an integer 1..999999999");
    if (hex.size() != 64) return bad("the key must be 64 hex digits (256 bits)");
    Key k;
    k.version = static_cast<uint32_t>(v);
    for (size_t i = 0; i < 32; ++i) {
      int a = Hex(hex[2 * i]), b = Hex(hex[2 * i + 1]);
      if (a < 0 || b < 0) return bad("the key must be 64 hex digits (256 bits)");
      k.bytes[i] = static_cast<unsigned char>(a * 16 + b);
    }
    for (const Key& other : keys->keys_) {
      if (other.version == k.version) return bad("version " + std::to_string(v) + " twice");
    }
    keys->keys_.push_back(k);
  }
  std::sort(keys->keys_.begin(), keys->keys_.end(),
            [](const Key& a, const Key& b) { return a.version < b.version; });
  return std::shared_ptr<const TenantKeys>(std::move(keys));
}

Result<std::shared_ptr<const TenantKeys>> TenantKeys::Load(std::string_view tenant,
                                                           const std::string& file,
                                                           const std::string& command) {
  if (file.empty() == command.empty())
    return Status::InvalidArgument("tenant '" + std::string(tenant) +
                                   "': one of encryption_key_file, encryption_key_command");
  if (!command.empty()) {
    auto out = RunCommand(command);
    if (!out.ok())
      return Status(out.status().code(),
                    "tenant '" + std::string(tenant) + "': " + std::string(out.status().message()));
    return Parse(tenant, *out);
  }
  struct stat st;
  if (stat(file.c_str(), &st) != 0)
    return Status::InvalidArgument("tenant '" + std::string(tenant) + "' key file " + file + ": " +
                                   strerror(errno));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return Status::InvalidArgument("tenant '" + std::string(tenant) + "' key file " + file +
                                   " is readable by group or others (chmod 600 it)");
  std::ifstream f(file);
  std::stringstream text;
  text << f.rdbuf();
  if (!f) return Status::IoError("tenant '" + std::string(tenant) + "' key file " + file);
  return Parse(tenant, text.str());
}

const TenantKeys::Key* TenantKeys::Find(uint32_t version) const {
  for (const Key& k : keys_) {
    if (k.version == version) return &k;
  }
  return nullptr;
}

std::vector<uint32_t> TenantKeys::versions() const {
  std::vector<uint32_t> v;
  for (const Key& k : keys_) v.push_back(k.version);
  return v;
}

bool IsSealed(std::span<const std::byte> stored) {
  return stored.size() >= kSealOverhead && std::memcmp(stored.data(), kMagic, kSealMagicBytes) == 0;
}

Status Seal(const TenantKeys& keys, const BlockKey& stored_key, uint32_t crc,
            std::span<std::byte> buf) {
  const TenantKeys::Key* k = keys.current();
  if (!k) return Status::Refused("tenant '" + keys.tenant() + "' has no encryption key");
  if (buf.size() < kSealOverhead) return Status::InvalidArgument("seal: buffer too small");
  std::byte* p = buf.data();
  std::memcpy(p, kMagic, kSealMagicBytes);
  PutLe32(p + 8, k->version);
  unsigned char* nonce = reinterpret_cast<unsigned char*>(p + 12);
  if (RAND_bytes(nonce, 12) != 1) return Status::Internal("seal: no random bytes");
  PutLe32(p + 24, crc);
  auto ad = AssociatedData(keys.tenant(), stored_key, k->version);
  Ctx ctx(EVP_CIPHER_CTX_new());
  unsigned char* body = reinterpret_cast<unsigned char*>(p + 24);
  int body_len = static_cast<int>(buf.size() - kSealOverhead + 4);
  int n = 0;
  if (!ctx ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, k->bytes.data(), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, ad.data(), static_cast<int>(ad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), body, &n, body, body_len) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), body + n, &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kSealTag, p + buf.size() - kSealTag) !=
          1) {
    return Status::Internal("seal: AES-256-GCM failed");
  }
  return Status::Ok();
}

Result<uint32_t> Open(const TenantKeys& keys, const BlockKey& stored_key,
                      std::span<const std::byte> stored, std::byte* out) {
  if (!IsSealed(stored)) return Status::NotFound("not a sealed block");
  const std::byte* p = stored.data();
  uint32_t version = GetLe32(p + 8);
  const TenantKeys::Key* k = keys.Find(version);
  if (!k) return Status::NotFound("key version retired or shredded");
  auto ad = AssociatedData(keys.tenant(), stored_key, version);
  const unsigned char* nonce = reinterpret_cast<const unsigned char*>(p + 12);
  const unsigned char* body = reinterpret_cast<const unsigned char*>(p + 24);
  size_t value_len = stored.size() - kSealOverhead;
  unsigned char crc_bytes[4];
  Ctx ctx(EVP_CIPHER_CTX_new());
  int n = 0;
  if (!ctx ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, k->bytes.data(), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, ad.data(), static_cast<int>(ad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), crc_bytes, &n, body, 4) != 1 ||
      (value_len > 0 && EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out), &n,
                                          body + 4, static_cast<int>(value_len)) != 1) ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kSealTag,
                          const_cast<std::byte*>(p + stored.size() - kSealTag)) != 1) {
    return Status::NotFound("open: AES-256-GCM failed");
  }
  unsigned char fin[16];
  if (EVP_DecryptFinal_ex(ctx.get(), fin, &n) != 1) {
    return Status::NotFound("sealed block does not authenticate (moved, swapped or corrupt)");
  }
  return GetLe32(reinterpret_cast<const std::byte*>(crc_bytes));
}

}  // namespace kvpool::server
