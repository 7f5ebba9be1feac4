// RESP2 request parsing: one command at a time from a byte buffer, as arrays of bulk
// strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", what every client library sends) or inline
// commands ("PING\r\n", what a human types into nc). Pure function, no I/O: the fuzz
// target drives it. Arguments point into the caller's buffer.
#ifndef KVPOOL_SERVER_RESP_PARSER_H_
#define KVPOOL_SERVER_RESP_PARSER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvpool::server {

struct RespLimits {
  size_t max_args = 1 + 2 * 1024;      // MSET of 1024 pairs
  size_t max_bulk_bytes = 512 << 20;   // one argument
  size_t max_inline_bytes = 64 << 10;  // one inline line
};

enum class RespParse {
  kIncomplete,  // need more bytes; nothing consumed
  kOk,          // *args and *consumed set
  kError,       // protocol error (*error says what); the connection should be closed
};

RespParse ParseRespCommand(std::string_view in, const RespLimits& limits,
                           std::vector<std::string_view>* args, size_t* consumed,
                           std::string* error);

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_RESP_PARSER_H_
