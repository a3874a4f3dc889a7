// The resident GPU path with real processes (needs a CUDA device; skipped without one):
// hearth-loader --device cuda publishes rank 0's weights as a device slab and gives its
// fd to a holder (this test plays `hearth serve`'s part), an engine on the CUDA backend
// imports the slab and serves, the loader is SIGKILLed and restarted, the engine keeps
// generating the same text, and the new loader reports the slab adopted, not re-copied.
// And the resident KV cache on the GPU: an engine SIGKILLed in the middle of 8 streams
// maps its K and V again from the holder and adopts every stream.
#include <signal.h>

#include <cstdio>
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "common/version.h"
#include "ipc/fd_store.h"
#include "ipc/kv_segment.h"
#include "ipc/slab_channel.h"
#include "kernels/cuda/device_info.h"
#include "tests/integration/instance.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;

// The engines' info lines, which say where their weights and KV cache came from (ctest
// runs the tests with HEARTH_LOG_LEVEL=warn).
const Environment kInfoLog = {"HEARTH_LOG_LEVEL=info"};

// The model's greedy continuation of "Once upon a time" (models/README.md, ground truth).
const std::string kContinuation = ", there was a little girl named Lily. She loved to play outside in the park.";

std::string complete(uint16_t port) {
  const auto r = http_request(port, "POST", "/v1/completions",
                              R"({"prompt":"Once upon a time","max_tokens":20,"temperature":0})");
  if (r.status != 200) return "HTTP " + std::to_string(r.status) + ": " + r.body + r.error;
  return std::string(boost::json::parse(r.body).at("choices").at(0).at("text").as_string());
}

TEST(CudaResidentTest, EnginesKeepTheDeviceSlabAcrossALoaderCrash) {
  if (kernels::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: the resident GPU path needs one";
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance inst("cudares");
  auto holder = FdHolder::start(fd_holder_path(inst.shm(), inst.name()));
  ASSERT_TRUE(holder.is_ok()) << holder.status().to_string();
  const Environment env = {std::string(kFdHolderEnv) + "=" + (*holder)->path().string()};
  const std::vector<std::string> loader_argv = {hearth_bin("hearth-loader"), "--model", model.string(), "--instance",
                                                inst.name(), "--shm-dir", inst.shm().string(), "--device", "cuda"};
  auto start_loader = [&](boost::json::object& ready) {
    auto loader = std::make_unique<ChildProcess>(loader_argv, env);
    const auto line = loader->read_line(120s);
    EXPECT_TRUE(line.has_value()) << "the loader never became ready: " << loader->err();
    if (line) {
      ready = boost::json::parse(*line).as_object();
      std::printf("loader ready: %s\n", boost::json::serialize(ready).c_str());
    }
    return loader;
  };
  boost::json::object ready;
  auto loader = start_loader(ready);
  ASSERT_TRUE(ready.contains("device_slabs")) << boost::json::serialize(ready);
  EXPECT_FALSE(ready.at("device_slabs").at(0).at("adopted").as_bool());
  EXPECT_EQ((*holder)->names().size(), 1u);

  std::string failure;
  auto engine = inst.engine({"--backend", "cuda:0", "--kv-dtype", "f32"}, kInfoLog, &failure);
  ASSERT_NE(engine, nullptr) << failure;
  uint16_t port = 0;
  auto frontend = inst.frontend(port, {}, {}, &failure);
  ASSERT_NE(frontend, nullptr) << failure;
  const std::string before = complete(port);
  EXPECT_TRUE(kContinuation.starts_with(before) || before.starts_with(kContinuation)) << before;
  EXPECT_NE(engine->err().find("read in place from the loader's device slab"), std::string::npos) << engine->err();

  loader->signal(SIGKILL);
  loader->wait(10s);
  EXPECT_EQ(complete(port), before) << "the engine's mapping keeps the slab alive";

  boost::json::object again;
  auto restarted = start_loader(again);
  ASSERT_TRUE(again.contains("device_slabs")) << boost::json::serialize(again);
  EXPECT_TRUE(again.at("device_slabs").at(0).at("adopted").as_bool()) << restarted->err();
  auto status = slab_status(slab_socket_path(inst.shm(), inst.name()));
  ASSERT_TRUE(status.is_ok()) << status.status().to_string();
  const auto& slab = status->at("slabs").at(0).as_object();
  EXPECT_TRUE(slab.at("adopted").as_bool());
  EXPECT_EQ(slab.at("held_by").at(0).as_string(), "hearth serve");

  // An engine that starts now imports the adopted slab and says the same.
  engine->signal(SIGKILL);
  engine->wait(10s);
  engine = inst.engine({"--backend", "cuda:0", "--kv-dtype", "f32"}, kInfoLog, &failure);
  ASSERT_NE(engine, nullptr) << failure;
  std::string after;
  for (int i = 0; i < 100 && (after = complete(port)) != before; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(after, before);
}

// The KV cache's K and V live in device memory whose fd the holder keeps: a SIGKILLed
// engine's successor maps them again, checks each resumed stream's last row and
// continues it without computing it again; every stream ends with the text of an
// uninterrupted run.
TEST(CudaResidentTest, AnEngineCrashKeepsTheKvCacheOnTheGpuAndTheNextEngineAdoptsIt) {
  if (kernels::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: the resident GPU path needs one";
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance inst("cudakv");
  ASSERT_EQ(inst.load(model, {"--layout", "plain"}), "");
  auto holder = FdHolder::start(fd_holder_path(inst.shm(), inst.name()));
  ASSERT_TRUE(holder.is_ok()) << holder.status().to_string();
  const Environment env = {std::string(kFdHolderEnv) + "=" + (*holder)->path().string(), kInfoLog[0]};
  const std::vector<std::string> flags = {"--backend", "cuda:0", "--ctx", "512", "--slots", "16", "--kv-blocks", "512"};
  std::string failure;
  auto engine = inst.engine(flags, env, &failure);
  ASSERT_NE(engine, nullptr) << failure;
  auto kept = [&] {
    int n = 0;
    for (const std::string& name : (*holder)->names()) n += name.starts_with(kv_store_prefix(inst.name(), 0)) ? 1 : 0;
    return n;
  };
  EXPECT_EQ(kept(), 1) << engine->err();
  uint16_t port = 0;
  auto frontend = inst.frontend(port, {"--engine-wait", "60000"}, {}, &failure);
  ASSERT_NE(frontend, nullptr) << failure;

  // The emulated device runs the kernels' threads as fibers, which is slow: fewer and
  // shorter streams there.
  const auto cases = cuda_emulated() ? long_streams(4, 120) : long_streams(8);
  const std::vector<std::string> refs = ConcurrentStreams(port, cases).texts();
  ASSERT_FALSE(HasFailure());
  auto counter = [&](const char* name) { return metric_at(port, name); };
  const double adopted0 = counter("hearth_kv_adopted_total");
  ConcurrentStreams streams(port, cases);
  ASSERT_TRUE(streams.all_midway(600, 60s)) << "the streams did not start";
  engine->signal(SIGKILL);
  engine->wait(10s);
  engine = inst.engine(flags, env, &failure);
  ASSERT_NE(engine, nullptr) << failure;
  streams.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(streams.answers[i].error, "") << "stream " << i;
    EXPECT_EQ(streams.answers[i].text, refs[i]) << "stream " << i;
  }
  const double adopted = counter("hearth_kv_adopted_total") - adopted0;
  std::printf("[cuda kv] %.0f of %zu streams adopted after the kill\n", adopted, cases.size());
  EXPECT_GE(adopted, static_cast<double>(cases.size()) - 1) << engine->err();
  EXPECT_EQ(counter("hearth_kv_adopt_rejected_total"), 0) << engine->err();
  EXPECT_NE(engine->err().find("are the ones hearth serve kept"), std::string::npos) << engine->err();
  EXPECT_EQ(kept(), 1) << "the same allocation, not a second one";

  // --no-kv-adopt makes the cache private: the holder lets go of the device memory.
  engine->signal(SIGKILL);
  engine->wait(10s);
  std::vector<std::string> private_flags = flags;
  private_flags.push_back("--no-kv-adopt");
  engine = inst.engine(private_flags, env, &failure);
  ASSERT_NE(engine, nullptr) << failure;
  EXPECT_EQ(kept(), 0);
}

}  // namespace
}  // namespace hearth::testing
