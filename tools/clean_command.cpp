// `hearth clean`: removes an instance's files from the shared-memory directory (its
// segments and sockets), refusing while any process has one of them mapped.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/args.h"
#include "common/process.h"
#include "ipc/segment.h"
#include "tools/commands.h"

namespace hearth::cli {
namespace {

constexpr const char* kUsage = R"(usage: hearth clean [--instance NAME | --all] [--shm-dir DIR] [--dry-run]

Removes the files of an instance (default "default") from the shared-memory directory:
its weights, broker, tensor-parallel and other segments and its sockets. Refused while
any process has one of them mapped (it names them): stop the instance first. --all
cleans every instance; --dry-run only lists what would go.
)";

}  // namespace

Result<std::vector<std::filesystem::path>> instance_files(const std::filesystem::path& dir,
                                                           const std::string& instance) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  const std::string prefix = instance.empty() ? "hearth." : "hearth." + instance + ".";
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // Instance names hold no dots, so the prefix names one instance only.
    if (name.starts_with(prefix)) out.push_back(e.path());
  }
  if (ec) return make_error(ErrorCode::kIo, "{}: {}", dir.string(), ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

Status remove_instance(const std::filesystem::path& dir, const std::string& instance, bool dry_run,
                       std::vector<std::string>* removed) {
  HEARTH_ASSIGN_OR_RETURN(auto files, instance_files(dir, instance));
  std::vector<std::string> users;
  for (const auto& f : files) {
    for (const int pid : processes_mapping(f)) {
      users.push_back(fmt::format("{} is mapped by pid {} ({})", f.filename().string(), pid, process_command(pid)));
    }
  }
  if (!users.empty()) {
    return make_error(ErrorCode::kUnavailable, "{}; stop the instance first (nothing was removed)",
                      fmt::join(users, "; "));
  }
  for (const auto& f : files) {
    std::error_code ec;
    if (!dry_run && !std::filesystem::remove(f, ec) && ec) {
      return make_error(ErrorCode::kIo, "cannot remove {}: {}", f.string(), ec.message());
    }
    if (removed != nullptr) removed->push_back(f.string());
  }
  return Status::ok();
}

int clean_command(const std::vector<std::string>& argv) {
  auto args = Args::parse(argv, {"instance", "shm-dir"}, {"all", "dry-run", "help"});
  if (!args.is_ok()) {
    std::fprintf(stderr, "hearth clean: %s\n\n%s", args.status().message().c_str(), kUsage);
    return 2;
  }
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (args->has("all") && args->has("instance")) {
    std::fprintf(stderr, "hearth clean: --all and --instance exclude each other\n\n%s", kUsage);
    return 2;
  }
  const std::string instance = args->has("all") ? "" : args->get("instance").value_or("default");
  if (!instance.empty()) {
    if (Status st = instance_name_check(instance); !st.is_ok()) {
      std::fprintf(stderr, "hearth clean: %s\n", st.message().c_str());
      return 2;
    }
  }
  const std::filesystem::path dir = args->get("shm-dir").value_or(shm_dir_default().string());
  std::vector<std::string> removed;
  if (Status st = remove_instance(dir, instance, args->has("dry-run"), &removed); !st.is_ok()) {
    std::fprintf(stderr, "hearth clean: %s\n", st.to_string().c_str());
    return 1;
  }
  for (const std::string& f : removed) std::printf("%s %s\n", args->has("dry-run") ? "would remove" : "removed", f.c_str());
  if (removed.empty()) std::printf("nothing to remove for %s in %s\n", instance.empty() ? "any instance" : instance.c_str(), dir.c_str());
  return 0;
}

}  // namespace hearth::cli
