// The resident GPU path with real processes (needs a CUDA device; skipped without one):
// hearth-loader --device cuda publishes rank 0's weights as a device slab and gives its
// fd to a holder (this test plays `hearth serve`'s part), an engine on the CUDA backend
// imports the slab and serves, the loader is SIGKILLed and restarted, the engine keeps
// generating the same text, and the new loader reports the slab adopted, not re-copied.
#include <signal.h>

#include <cstdio>
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "ipc/fd_store.h"
#include "ipc/slab_channel.h"
#include "kernels/cuda/device_info.h"
#include "tests/integration/instance.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;

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
  auto engine = inst.engine({"--backend", "cuda:0", "--kv-dtype", "f32"}, {}, &failure);
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
  engine = inst.engine({"--backend", "cuda:0", "--kv-dtype", "f32"}, {}, &failure);
  ASSERT_NE(engine, nullptr) << failure;
  std::string after;
  for (int i = 0; i < 100 && (after = complete(port)) != before; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace hearth::testing
