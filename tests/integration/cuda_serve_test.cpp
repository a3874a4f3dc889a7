// `hearth serve --device cuda:0,1 --tp 2` as a user runs it, on two CUDA devices (the
// emulated ones in an emulated build; skipped on a machine with fewer than two GPUs):
// the stories260K greedy ground truth through the HTTP API, the loader SIGKILLed and its
// successor adopting both ranks' device slabs from the fd store instead of copying them
// again, and rank 0's engine SIGKILLed in the middle of streams, its successor adopting
// the device KV cache and every stream ending with the text of an uninterrupted run.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "common/process.h"
#include "common/subprocess.h"
#include "common/version.h"
#include "ipc/slab_channel.h"
#include "kernels/cuda/device_info.h"
#include "tests/integration/hearth_bin.h"
#include "tests/integration/http_client.h"
#include "tests/integration/instance.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;
namespace json = boost::json;

// The model's greedy continuation of "Once upon a time" (models/README.md, ground truth).
const std::string kContinuation = ", there was a little girl named Lily. She loved to play outside in the park.";

std::string complete(uint16_t port) {
  const auto r = http_request(port, "POST", "/v1/completions",
                              R"({"prompt":"Once upon a time","max_tokens":20,"temperature":0})");
  if (r.status != 200) return "HTTP " + std::to_string(r.status) + ": " + r.body + r.error;
  return std::string(json::parse(r.body).at("choices").at(0).at("text").as_string());
}

std::string cmdline(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : s) c = c == '\0' ? ' ' : c;
  return s;
}

// The pid of `serve`'s child `name` whose command line holds `has` (or any), or -1.
int child(const ChildProcess& serve, const std::string& name, const std::string& has = "") {
  for (int pid : children_of(serve.pid(), name)) {
    if (has.empty() || cmdline(pid).find(has) != std::string::npos) return pid;
  }
  return -1;
}

// Waits until `serve` has a child `name` (holding `has`) other than `old`.
int next_child(const ChildProcess& serve, const std::string& name, int old, const std::string& has = "") {
  for (int i = 0; i < 600; ++i) {
    const int pid = child(serve, name, has);
    if (pid > 0 && pid != old) return pid;
    std::this_thread::sleep_for(100ms);
  }
  return -1;
}

TEST(CudaServeTest, TwoRanksOnTwoDevicesKeepTheGroundTruthThroughLoaderAndEngineKills) {
  // Two emulated devices in an emulated build, for this process and its children (a real
  // build ignores the variable).
  ::setenv("HEARTH_EMU_DEVICES", "2", 1);
  if (kernels::cuda::device_count() < 2) GTEST_SKIP() << "two CUDA devices are needed, this machine has fewer";
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir shm(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "");
  const std::string instance = "cudatp";
  ChildProcess serve({hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0", "--instance", instance,
                      "--shm-dir", shm.path().string(), "--device", "cuda:0,1", "--tp", "2", "--ctx", "512", "--slots",
                      "8"});
  const auto line = serve.read_line(180s);
  ASSERT_TRUE(line.has_value()) << "hearth serve did not start: " << serve.err();
  const size_t colon = line->rfind(':', line->find("/v1"));
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));
  const std::string before = complete(port);
  EXPECT_TRUE(kContinuation.starts_with(before) || before.starts_with(kContinuation)) << before;

  // The loader SIGKILLed: serve starts another, which adopts both ranks' slabs from the
  // fd store; the engines never stopped reading theirs.
  const int loader = child(serve, "hearth-loader");
  ASSERT_GT(loader, 0);
  ::kill(loader, SIGKILL);
  EXPECT_EQ(complete(port), before);
  ASSERT_GT(next_child(serve, "hearth-loader", loader), 0) << serve.err();
  bool adopted = false;
  for (int i = 0; i < 300 && !adopted; ++i) {
    auto status = slab_status(slab_socket_path(shm.path(), instance));
    if (status.is_ok() && status->at("slabs").as_array().size() == 2) {
      adopted = true;
      for (const auto& slab : status->at("slabs").as_array()) adopted = adopted && slab.at("adopted").as_bool();
    }
    if (!adopted) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(adopted) << "the restarted loader copied the slabs again: " << serve.err();
  EXPECT_EQ(complete(port), before);

  // Rank 0's engine SIGKILLed in the middle of four streams: its successor adopts the KV
  // cache the holder kept on the device and each stream ends as it would have.
  // The emulated device runs the kernels' threads as fibers, which is slow: shorter
  // streams there.
  const auto cases = cuda_emulated() ? long_streams(4, 120) : long_streams(4);
  const std::vector<std::string> refs = ConcurrentStreams(port, cases).texts();
  ASSERT_FALSE(HasFailure());
  const double adopted0 = metric_at(port, "hearth_kv_adopted_total");
  ConcurrentStreams streams(port, cases);
  ASSERT_TRUE(streams.all_midway(300, 120s)) << "the streams did not start";
  const int rank0 = child(serve, "hearth-engine", "--rank 0");
  ASSERT_GT(rank0, 0);
  ::kill(rank0, SIGKILL);
  streams.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(streams.answers[i].error, "") << "stream " << i;
    EXPECT_EQ(streams.answers[i].text, refs[i]) << "stream " << i;
  }
  const double adopted_streams = metric_at(port, "hearth_kv_adopted_total") - adopted0;
  std::printf("[cuda tp 2] %.0f of %zu streams adopted after rank 0 was killed\n", adopted_streams, cases.size());
  EXPECT_GE(adopted_streams, static_cast<double>(cases.size()) - 1) << serve.err();
  EXPECT_EQ(complete(port), before);
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(60s), 0) << serve.err();
}

// The emulated device's memory is settable (HEARTH_EMU_MEMORY): a device too small for
// what the backend needs is refused with what was asked and what is free, as on a GPU,
// and the process exits with an error instead of crashing.
TEST(CudaServeTest, TooLittleDeviceMemoryIsRefusedSayingWhatIsFree) {
  if (!cuda_emulated()) GTEST_SKIP() << "HEARTH_EMU_MEMORY sizes the emulated device only";
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  const auto r = run_process({hearth_bin("hearth"), "generate", "--model", model.string(), "--backend", "cuda",
                              "--prompt", "Once upon a time", "--max-tokens", "4"},
                             {"HEARTH_EMU_MEMORY=16MiB", "HEARTH_EMU_DEVICES=1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("CUDA out of memory allocating"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MiB of 16 MiB free"), std::string::npos) << r.err;
  // Room enough: the same command answers.
  const auto ok = run_process({hearth_bin("hearth"), "generate", "--model", model.string(), "--backend", "cuda",
                               "--prompt", "Once upon a time", "--max-tokens", "4"},
                              {"HEARTH_EMU_MEMORY=64MiB", "HEARTH_EMU_DEVICES=1"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("Once upon a time, there was"), std::string::npos) << ok.out;
  // A size that is not one is named.
  const auto bad = run_process({hearth_bin("hearth"), "generate", "--model", model.string(), "--backend", "cuda",
                                "--prompt", "Once upon a time", "--max-tokens", "4"},
                               {"HEARTH_EMU_MEMORY=lots"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("HEARTH_EMU_MEMORY=lots is not a size"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace hearth::testing
