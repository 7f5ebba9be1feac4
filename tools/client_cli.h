// The kvpool CLI's client commands (put, get, del, exists, stat, ping) against a kvpoold.
#ifndef KVPOOL_TOOLS_CLIENT_CLI_H_
#define KVPOOL_TOOLS_CLIENT_CLI_H_

#include <string>

namespace kvpool::tools {

extern const char kClientUsage[];
// argv: the arguments after the command name.
int ClientCommand(const std::string& cmd, int argc, char** argv);

}  // namespace kvpool::tools

#endif  // KVPOOL_TOOLS_CLIENT_CLI_H_
