// hearth: the command-line entry point. `hearth <command> [flags]`.
#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "tools/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: hearth <command> [flags]

commands:
  generate   run a model in this process: hearth generate --model PATH --prompt TEXT

Run `hearth <command> --help` for the flags of a command.
)";

}  // namespace

int main(int argc, char** argv) {
  hearth::log_init("hearth");
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "generate") return hearth::cli::generate_command(args);
  if (command == "--help" || command == "help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "hearth: unknown command \"%s\"\n\n%s", command.c_str(), kUsage);
  return 2;
}
