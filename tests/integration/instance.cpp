#include "tests/integration/instance.h"

#include <algorithm>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

namespace hearth::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

std::filesystem::path shm_parent() {
  return ::access("/dev/shm", W_OK) == 0 ? std::filesystem::path("/dev/shm") : std::filesystem::path();
}

uint16_t free_port() {
  uint16_t port = 0;
  const int fd = listen_socket(port);
  if (fd >= 0) ::close(fd);
  return port;
}

int listen_socket(uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1024) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(addr.sin_port);
  return fd;
}

std::optional<double> metric_value(const std::string& metrics, const std::string& name) {
  std::istringstream in(metrics);
  std::optional<double> sum;
  for (std::string line; std::getline(in, line);) {
    if (line.size() <= name.size() || line.compare(0, name.size(), name) != 0) continue;
    if (line[name.size()] != ' ' && line[name.size()] != '{') continue;
    const size_t space = line.rfind(' ');
    try {
      sum = sum.value_or(0) + std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return sum;
}

json::object status_of(const std::filesystem::path& shm, const std::string& instance) {
  const auto r = run_process({hearth_bin("hearth"), "status", "--json", "--instance", instance, "--shm-dir", shm.string()});
  json::object out;
  if (r.exit_code != 0) return out;
  try {
    const json::value v = json::parse(r.out);
    if (!v.as_object().contains(instance)) return out;
    for (const auto& seg : v.at(instance).as_array()) out[seg.at("segment").as_string()] = seg;
  } catch (const std::exception&) {
    out.clear();
  }
  return out;
}

Instance::Instance(std::string name) : name_(std::move(name)), shm_(shm_parent()) {}

std::string Instance::load(const std::filesystem::path& model, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {hearth_bin("hearth-loader"), "--model", model.string(), "--instance", name_,
                                   "--shm-dir", shm_.path().string(), "--exit-after-publish"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto r = run_process(argv);
  if (r.exit_code == 0) return "";
  return "hearth-loader exited with " + std::to_string(r.exit_code) + ": " + r.err;
}

std::vector<std::string> Instance::engine_argv(const std::vector<std::string>& extra) const {
  std::vector<std::string> argv = {hearth_bin("hearth-engine"), "--instance", name_, "--shm-dir", shm_.path().string()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::vector<std::string> Instance::frontend_argv(const std::vector<std::string>& extra, bool listen_fd) const {
  std::vector<std::string> argv = {hearth_bin("hearth-frontend"), "--instance", name_, "--shm-dir",
                                   shm_.path().string()};
  if (listen_fd) {
    argv.insert(argv.end(), {"--listen-fd", "3"});
  } else {
    argv.insert(argv.end(), {"--port", "0"});
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  // stories260K has no chat template; tests chat with the plain one unless they choose.
  if (std::find(extra.begin(), extra.end(), "--chat-template") == extra.end()) {
    argv.insert(argv.end(), {"--chat-template", plain_chat_template()});
  }
  return argv;
}

std::unique_ptr<ChildProcess> Instance::engine(const std::vector<std::string>& extra, const Environment& env,
                                               std::string* failure) {
  auto e = std::make_unique<ChildProcess>(engine_argv(extra), env);
  if (e->read_line(60s)) return e;
  e->wait(5s);
  if (failure) *failure = "hearth-engine did not start: " + e->err();
  return nullptr;
}

std::unique_ptr<ChildProcess> Instance::frontend(uint16_t& port, const std::vector<std::string>& extra,
                                                 const Environment& env, std::string* failure, int pass_fd) {
  std::vector<int> fds;
  if (pass_fd >= 0) fds.push_back(pass_fd);
  auto f = std::make_unique<ChildProcess>(frontend_argv(extra, pass_fd >= 0), env, fds);
  const auto line = f->read_line(60s);
  if (line) {
    try {
      port = static_cast<uint16_t>(json::parse(*line).at("port").to_number<int>());
      return f;
    } catch (const std::exception& e) {
      if (failure) *failure = std::string("hearth-frontend printed an unexpected line: ") + *line;
      return nullptr;
    }
  }
  f->wait(5s);
  if (failure) *failure = "hearth-frontend did not start: " + f->err();
  return nullptr;
}

std::string target_of(const Case& c) { return c.chat ? "/v1/chat/completions" : "/v1/completions"; }

Answer answer_of(const Case& c, const HttpResponse& r) {
  Answer out;
  if (r.status != 200) {
    out.error = "HTTP " + std::to_string(r.status) + " " + r.error + " " + r.body.substr(0, 300);
    return out;
  }
  try {
    if (!c.stream) {
      const json::value parsed = json::parse(r.body);
      const auto& choice = parsed.at("choices").at(0);
      if (choice.at("finish_reason").is_null()) {
        out.error = "no finish_reason";
        return out;
      }
      out.text = std::string(c.chat ? choice.at("message").at("content").as_string() : choice.at("text").as_string());
      out.completion_tokens = parsed.at("usage").at("completion_tokens").to_number<int>();
      return out;
    }
    const auto events = sse_events(r.body);
    if (events.empty() || events.back() != "[DONE]") {
      out.error = "the stream did not end with [DONE]: " + r.body.substr(0, 300);
      return out;
    }
    bool finished = false;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const json::value v = json::parse(events[i]);
      if (v.as_object().contains("error")) {
        out.error = "error event: " + events[i];
        return out;
      }
      if (const auto* usage = v.as_object().if_contains("usage"); usage && usage->is_object()) {
        out.completion_tokens = usage->at("completion_tokens").to_number<int>();
      }
      for (const auto& ch : v.at("choices").as_array()) {
        if (!ch.at("finish_reason").is_null()) finished = true;
        if (c.chat) {
          if (const auto* content = ch.at("delta").as_object().if_contains("content"); content && content->is_string()) {
            out.text += content->as_string();
          }
        } else {
          out.text += ch.at("text").as_string();
        }
      }
    }
    if (!finished) out.error = "no finish_reason in the stream";
    return out;
  } catch (const std::exception& e) {
    out.error = std::string("unparsable: ") + e.what() + " in " + r.body.substr(0, 300);
    return out;
  }
}

std::vector<Case> load_cases() {
  const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to", "One day, a bird"};
  std::vector<Case> cases;
  for (int i = 0; i < 16; ++i) {
    Case c;
    c.chat = i % 4 == 3;
    c.stream = i % 2 == 1;
    c.body = {{"max_tokens", 24 + 8 * (i % 5)}, {"temperature", i % 3 == 2 ? 0.8 : 0.0}, {"seed", 100 + i}};
    if (c.chat) {
      c.body["messages"] = json::array{json::object{{"role", "user"}, {"content", prompts[i % 4]}}};
    } else {
      c.body["prompt"] = prompts[i % 4];
    }
    if (c.stream) {
      c.body["stream"] = true;
      c.body["stream_options"] = json::object{{"include_usage", true}};
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> long_streams(int n, int tokens) {
  const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to", "One day, a bird"};
  std::vector<Case> out;
  for (int i = 0; i < n; ++i) {
    Case c;
    c.stream = true;
    c.body = {{"prompt", prompts[i % 4]}, {"max_tokens", tokens + 10 * i}, {"temperature", 0}, {"ignore_eos", true},
              {"stream", true}};
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Answer> references(uint16_t port, const std::vector<Case>& cases) {
  std::vector<Answer> out;
  for (const Case& c : cases) {
    Case plain = c;
    plain.stream = false;
    plain.body.erase("stream");
    plain.body.erase("stream_options");
    out.push_back(answer_of(plain, http_request(port, "POST", target_of(plain), json::serialize(plain.body))));
  }
  return out;
}

}  // namespace hearth::testing
