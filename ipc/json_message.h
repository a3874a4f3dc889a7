// One JSON request, one JSON reply over an fd-carrying socket (ipc/unix_socket.h): the
// convention of the slab server and the fd holder. A reply is {"ok": true, ...} with its
// descriptors, or {"ok": false, "error": "..."}.
#pragma once

#include <chrono>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/status.h"
#include "common/unique_fd.h"

namespace hearth {

struct JsonReply {
  boost::json::object body;
  std::vector<UniqueFd> fds;
};

// Sends `request` (with `fds`) on the connected `socket` and waits up to `timeout` for the
// reply. An {"ok": false} reply is kUnavailable with its error; `path` names the peer in
// messages.
Result<JsonReply> json_call(int socket, const std::filesystem::path& path, const boost::json::object& request,
                            std::span<const int> fds, std::chrono::milliseconds timeout);

// The server's side: a reply (logged when it cannot be sent), or {"ok": false, "error"}.
void json_reply(int connection, const boost::json::object& body, std::span<const int> fds = {});
void json_reply_error(int connection, std::string message);

}  // namespace hearth
