// Resident weights with real processes: hearth-loader publishes, `hearth generate
// --attach` runs on the segment without the model files, loaders die and are replaced,
// damaged segments are refused.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <boost/json.hpp>

#include "ipc/slab_channel.h"
#include "ipc/weights_layout.h"
#include "tests/integration/hearth_bin.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;

// What a child process sees of an emulated build's CUDA devices (kernels/cuda/emu): none,
// for the tests of a machine without a GPU. A real build ignores it.
const Environment kNoEmulatedDevice = {"HEARTH_EMU_DEVICES=0"};

const std::string kGroundTruth =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, \"I want "
    "to play with your ball, but I can't find it.\"\n";

// A shared-memory directory of the test's own (on tmpfs when /dev/shm is writable).
std::filesystem::path shm_parent() {
  return ::access("/dev/shm", W_OK) == 0 ? std::filesystem::path("/dev/shm") : std::filesystem::path();
}

class ResidentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = shared_path("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(model_)) GTEST_SKIP() << "shared test file " << model_ << " is absent (set HEARTH_SHARED)";
  }

  std::vector<std::string> loader_argv(const std::string& instance, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {hearth_bin("hearth-loader"), "--model", model_.string(), "--instance",
                                     instance, "--shm-dir", shm_.path().string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  // Starts a resident loader and waits for its ready line.
  std::unique_ptr<ChildProcess> start_loader(const std::string& instance, boost::json::object* ready = nullptr,
                                             const std::vector<std::string>& extra = {}) {
    auto child = std::make_unique<ChildProcess>(loader_argv(instance, extra));
    const auto line = child->read_line(30s);
    EXPECT_TRUE(line.has_value()) << "loader never became ready: " << child->err();
    if (line && ready != nullptr) *ready = boost::json::parse(*line).as_object();
    return child;
  }

  ProcessResult generate_attached(const std::string& instance, int max_tokens = 127) {
    return run_process({hearth_bin("hearth"), "generate", "--attach", instance, "--shm-dir", shm_.path().string(),
                        "--prompt", "Once upon a time", "--max-tokens", std::to_string(max_tokens)});
  }

  ProcessResult status(const std::string& instance) {
    return run_process(
        {hearth_bin("hearth"), "status", "--instance", instance, "--shm-dir", shm_.path().string(), "--json"});
  }

  std::filesystem::path segment(const std::string& instance) {
    return shm_.path() / ("hearth." + instance + ".weights");
  }

  std::filesystem::path model_;
  TempDir shm_{shm_parent()};
};

TEST_F(ResidentTest, EngineAttachesAndGeneratesTheGroundTruth) {
  boost::json::object ready;
  auto loader = start_loader("it", &ready);
  EXPECT_FALSE(ready.at("adopted").as_bool());
  const auto r = generate_attached("it");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, kGroundTruth);

  const auto st = status("it");
  ASSERT_EQ(st.exit_code, 0) << st.err;
  const auto seg = boost::json::parse(st.out).at("it").as_array().at(0).as_object();
  EXPECT_EQ(seg.at("state").as_string(), "READY");
  EXPECT_EQ(seg.at("format").as_string(), "gguf");
  EXPECT_EQ(seg.at("loader_pid").to_number<int64_t>(), loader->pid());
  EXPECT_TRUE(seg.at("loader_running").as_bool());
  EXPECT_EQ(seg.at("fingerprint").as_string(), ready.at("fingerprint").as_string());
  EXPECT_EQ(seg.at("huge_page_bytes").to_number<uint64_t>(), 0u) << "1.1 MiB holds no whole huge page";

  // --json says where the time to ready went, stage by stage, and the stages add up to it.
  const auto timed = run_process({hearth_bin("hearth"), "generate", "--attach", "it", "--shm-dir",
                                  shm_.path().string(), "--prompt", "Once", "--max-tokens", "1", "--json"});
  ASSERT_EQ(timed.exit_code, 0) << timed.err;
  const auto out = boost::json::parse(timed.out).as_object();
  const auto& split = out.at("ready_split_ms").as_object();
  double sum = 0.0;
  for (const char* stage : {"start", "attach", "backend", "kv_cache", "model", "rest"}) {
    ASSERT_TRUE(split.contains(stage)) << stage << " in " << timed.out;
    EXPECT_GE(split.at(stage).to_number<double>(), 0.0) << stage;
    sum += split.at(stage).to_number<double>();
  }
  EXPECT_NEAR(sum, out.at("ready_seconds").to_number<double>() * 1e3, 0.5);

  // SIGTERM: the loader exits cleanly and the weights stay resident.
  loader->signal(SIGTERM);
  EXPECT_EQ(loader->wait(10s), 0);
  EXPECT_TRUE(std::filesystem::exists(segment("it")));
  EXPECT_EQ(generate_attached("it", 5).exit_code, 0);
}

TEST_F(ResidentTest, EnginesNeverNeedTheModelFiles) {
  TempDir models;
  const auto copy = models.path() / "stories.gguf";
  std::filesystem::copy_file(model_, copy);
  model_ = copy;
  auto loader = start_loader("moved");
  std::filesystem::rename(copy, models.path() / "elsewhere.gguf");
  const auto r = generate_attached("moved");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, kGroundTruth);
}

TEST_F(ResidentTest, KilledLoaderLeavesWeightsAndIsAdoptedWithoutReadingTheModel) {
  boost::json::object first;
  auto loader = start_loader("kill", &first);
  const pid_t first_pid = loader->pid();
  loader->signal(SIGKILL);
  EXPECT_EQ(loader->wait(10s), 128 + SIGKILL);
  const auto r = generate_attached("kill");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, kGroundTruth);

  boost::json::object second;
  auto again = start_loader("kill", &second);
  EXPECT_TRUE(second.at("adopted").as_bool()) << "a restarted loader must adopt the segment";
  EXPECT_EQ(second.at("fingerprint").as_string(), first.at("fingerprint").as_string());
  const auto seg = boost::json::parse(status("kill").out).at("kill").as_array().at(0).as_object();
  EXPECT_EQ(seg.at("creator_pid").to_number<int64_t>(), first_pid);
  EXPECT_FALSE(seg.at("creator_running").as_bool());
  EXPECT_EQ(seg.at("loader_pid").to_number<int64_t>(), again->pid());

  // A second loader for the same instance refuses to run beside the first, for the same
  // model or another one.
  const auto dup = run_process(loader_argv("kill", {"--exit-after-publish"}));
  EXPECT_EQ(dup.exit_code, 1);
  EXPECT_NE(dup.err.find("already"), std::string::npos) << dup.err;
  const auto other = run_process(loader_argv("kill", {"--quant", "int8", "--exit-after-publish"}));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("holds another model"), std::string::npos) << other.err;
  EXPECT_EQ(generate_attached("kill").out, kGroundTruth) << "the running instance is untouched";
}

TEST_F(ResidentTest, AdoptsEvenWhenTheModelIsGone) {
  TempDir models;
  const auto copy = models.path() / "stories.gguf";
  std::filesystem::copy_file(model_, copy);
  model_ = copy;
  ASSERT_EQ(run_process(loader_argv("gone", {"--exit-after-publish"})).exit_code, 0);
  std::filesystem::remove(copy);
  boost::json::object ready;
  auto loader = start_loader("gone", &ready);
  EXPECT_TRUE(ready.at("adopted").as_bool());
  EXPECT_NE(loader->err().find("is gone"), std::string::npos) << loader->err();
  EXPECT_EQ(generate_attached("gone").out, kGroundTruth);
}

// Copies a good segment to `instance` and lets `damage` edit the header bytes.
void damaged_copy(const std::filesystem::path& good, const std::filesystem::path& bad,
                  const std::function<void(std::string&)>& damage) {
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  damage(bytes);
  std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(ResidentTest, DamagedOrStaleSegmentsAreRefusedClearly) {
  ASSERT_EQ(run_process(loader_argv("good", {"--exit-after-publish"})).exit_code, 0);
  const auto good = segment("good");
  damaged_copy(good, segment("magic"), [](std::string& b) { b[0] ^= 0x5a; });
  damaged_copy(good, segment("version"), [](std::string& b) {
    const uint32_t v = kWeightsLayoutVersion + 7;
    std::memcpy(b.data() + offsetof(WeightsHeader, prologue) + offsetof(SegmentPrologue, layout_version), &v, 4);
  });
  damaged_copy(good, segment("short"), [](std::string& b) { b.resize(b.size() - 4096); });
  // A loader that died half-way: state LOADING, creator a pid that has exited.
  const auto exited = run_process({"/bin/true"});
  ASSERT_EQ(exited.exit_code, 0);
  const pid_t dead = 4194000;  // above the default pid_max: never a live process
  damaged_copy(good, segment("halfway"), [&](std::string& b) {
    const uint32_t loading = static_cast<uint32_t>(SegmentState::kLoading);
    std::memcpy(b.data() + offsetof(WeightsHeader, state), &loading, 4);
    std::memcpy(b.data() + offsetof(WeightsHeader, creator_pid), &dead, 4);
  });
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"magic", "not a hearth weights segment"},
      {"version", "layout version"},
      {"short", "truncated or corrupt"},
      {"halfway", "left half-written by hearth-loader pid 4194000"},
  };
  for (const auto& [instance, message] : cases) {
    const auto r = generate_attached(instance, 5);
    EXPECT_EQ(r.exit_code, 1) << instance;
    EXPECT_NE(r.err.find(message), std::string::npos) << instance << ": " << r.err;
    EXPECT_EQ(r.out, "") << instance;
  }
  EXPECT_NE(run_process({hearth_bin("hearth"), "generate", "--attach", "absent", "--shm-dir", shm_.path().string(),
                         "--prompt", "x"})
                .err.find("is hearth-loader running"),
            std::string::npos);
  // hearth status shows them for what they are instead of failing.
  const auto st = run_process({hearth_bin("hearth"), "status", "--shm-dir", shm_.path().string()});
  EXPECT_EQ(st.exit_code, 0) << st.err;
  EXPECT_NE(st.out.find("UNREADABLE"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("LOADING"), std::string::npos) << st.out;
  // A new loader replaces the stale and damaged ones.
  for (const char* instance : {"halfway", "version", "short"}) {
    const auto r = run_process(loader_argv(instance, {"--exit-after-publish"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(generate_attached(instance).out, kGroundTruth) << instance;
  }
}

TEST_F(ResidentTest, QuantizedSegmentsStillTellTheStory) {
  ASSERT_EQ(run_process(loader_argv("q8", {"--quant", "int8", "--exit-after-publish"})).exit_code, 0);
  // int8 keeps all 40 greedy tokens of the F32 ground truth (measured: 60 of 60).
  const auto q8 = generate_attached("q8", 40);
  ASSERT_EQ(q8.exit_code, 0) << q8.err;
  ASSERT_GT(q8.out.size(), 110u) << q8.out;  // 40 tokens of text
  EXPECT_EQ(q8.out.substr(0, q8.out.size() - 1), kGroundTruth.substr(0, q8.out.size() - 1)) << q8.out;

  ASSERT_EQ(run_process(loader_argv("q4", {"--quant", "int4", "--exit-after-publish"})).exit_code, 0);
  const auto q4 = generate_attached("q4", 60);
  ASSERT_EQ(q4.exit_code, 0) << q4.err;
  // int4 (group-wise, the served row-interleaved layout, bit-identical on every CPU path)
  // keeps the first 23 greedy tokens of the F32 ground truth, then tells its own story
  // ("... in the sun. One day, she found a small box ...").
  const std::string first_23 = "Once upon a time, there was a little girl named Lily. She loved to play outside in the";
  EXPECT_EQ(q4.out.substr(0, first_23.size()), first_23) << q4.out;
  EXPECT_GT(q4.out.size(), 150u) << "60 tokens of text";
  EXPECT_LT(std::filesystem::file_size(segment("q4")), std::filesystem::file_size(segment("q8")));
}

TEST_F(ResidentTest, TooSmallShmDirectoryFailsBeforeWritingAnything) {
  // A real 256 KiB tmpfs, mounted in a private user and mount namespace.
  const std::string dir = (shm_.path() / "small").string();
  std::filesystem::create_directory(dir);
  const std::string script = "mount -t tmpfs -o size=256k tmpfs " + dir + " || exit 77; " + hearth_bin("hearth-loader") +
                             " --model " + model_.string() + " --shm-dir " + dir +
                             " --exit-after-publish; echo \"rc=$?\"; ls -A " + dir + " | wc -l";
  const auto r = run_process({"/usr/bin/unshare", "--user", "--map-root-user", "--mount", "/bin/sh", "-c", script});
  if (r.exit_code == 77 || r.err.find("unshare") != std::string::npos) {
    GTEST_SKIP() << "cannot mount a private tmpfs here: " << r.err;
  }
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("ERR_SHM_TOO_SMALL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the model needs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--quant"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\n0\n"), std::string::npos) << "the directory must stay empty: " << r.out;
}

TEST_F(ResidentTest, SplitSegmentsNeedATensorParallelEngine) {
  ASSERT_EQ(run_process(loader_argv("tp2", {"--tp", "2", "--exit-after-publish"})).exit_code, 0);
  const auto r = generate_attached("tp2", 5);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("2 tensor-parallel ranks"), std::string::npos) << r.err;
  const auto bad = run_process(loader_argv("tp3", {"--tp", "3", "--exit-after-publish"}));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("must divide"), std::string::npos) << bad.err;
}

TEST_F(ResidentTest, TheShmDirComesFromTheEnvironmentAndRemoveOnExitRemoves) {
  // No --shm-dir: HEARTH_SHM_DIR says where (the default is /dev/shm).
  ChildProcess loader({hearth_bin("hearth-loader"), "--model", model_.string(), "--instance", "env", "--remove-on-exit"},
                      {"HEARTH_SHM_DIR=" + shm_.path().string()});
  const auto line = loader.read_line(30s);
  ASSERT_TRUE(line.has_value()) << loader.err();
  EXPECT_TRUE(std::filesystem::exists(segment("env")));
  const auto r = run_process({hearth_bin("hearth"), "generate", "--attach", "env", "--prompt", "Once upon a time",
                              "--max-tokens", "8"},
                             {"HEARTH_SHM_DIR=" + shm_.path().string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  loader.signal(SIGTERM);
  EXPECT_EQ(loader.wait(30s), 0) << loader.err();
  EXPECT_FALSE(std::filesystem::exists(segment("env"))) << "--remove-on-exit removes the segment at SIGTERM";
  // Without the flag a stopped loader leaves its weights resident.
  auto kept = start_loader("kept");
  kept->signal(SIGTERM);
  EXPECT_EQ(kept->wait(30s), 0);
  EXPECT_TRUE(std::filesystem::exists(segment("kept")));
}

TEST_F(ResidentTest, DeviceFlagsAreCheckedBeforeTheModelIsRead) {
  struct Bad {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Bad& b : {Bad{{"--device", "gpu"}, "not cuda or cuda:N"},
                       Bad{{"--device", "cuda:0,0", "--tp", "2"}, "two ranks on CUDA device 0"},
                       Bad{{"--device", "cuda:0", "--tp", "2"}, "names 1 device for 2 ranks"},
                       Bad{{"--device", "cuda:x"}, "not a CUDA device index"},
                       Bad{{"--device-sharing", "vmm"}, "--device-sharing needs --device"},
                       Bad{{"--device", "cuda", "--device-sharing", "magic"}, "not auto, vmm or cuda-ipc"},
                       Bad{{"--device", "cuda", "--layout", "cpu-r16"}, "--layout plain"}}) {
    auto flags = b.flags;
    flags.push_back("--exit-after-publish");
    const auto r = run_process(loader_argv("devflags", flags));
    EXPECT_EQ(r.exit_code, 2) << b.says << ": " << r.err;
    EXPECT_NE(r.err.find(b.says), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(segment("devflags"))) << b.says;
  }
}

TEST_F(ResidentTest, WithoutAGpuTheDeviceSlabIsRefusedClearly) {
  if (std::filesystem::exists("/dev/nvidiactl")) GTEST_SKIP() << "this machine has an NVIDIA driver";
  // HEARTH_EMU_DEVICES=0: an emulated build's processes see no device either.
  const auto r = run_process(loader_argv("nogpu", {"--device", "cuda", "--exit-after-publish"}), kNoEmulatedDevice);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const bool says = r.err.find("no CUDA device is visible") != std::string::npos ||
                    r.err.find("built without CUDA") != std::string::npos;
  EXPECT_TRUE(says) << r.err;
  EXPECT_EQ(r.err.find("Segmentation"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(shm_.path() / "hearth.nogpu.slabs.sock"));
  EXPECT_FALSE(std::filesystem::exists(segment("nogpu"))) << "refused before the model is read";
}

TEST_F(ResidentTest, StatusShowsTheLoadersDeviceSlabs) {
  // A loader's slab socket, served here with a memfd standing in for the GPU slab's fd.
  std::vector<ServedSlab> slabs(1);
  slabs[0].record.device_uuid = "GPU-0123abcd-4567-89ef-0123-456789abcdef";
  slabs[0].record.compute_capability = 90;
  slabs[0].record.bytes = 4u << 20;
  slabs[0].record.data_bytes = 3u << 20;
  slabs[0].record.weights = {1, 2};
  slabs[0].fd = UniqueFd(::memfd_create("slab", MFD_CLOEXEC));
  slabs[0].held_by = {"hearth serve"};
  auto server = SlabServer::start(slab_socket_path(shm_.path(), "gpu"), std::move(slabs));
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  const auto json = status("gpu");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const boost::json::value parsed = boost::json::parse(json.out);
  const auto& entry = parsed.at("gpu").at(0).as_object();
  EXPECT_EQ(entry.at("segment").as_string(), "slabs.sock");
  EXPECT_EQ(entry.at("loader_pid").as_int64(), ::getpid());
  EXPECT_EQ(entry.at("slabs").at(0).at("handle").as_string(), "vmm");
  const auto text = run_process({hearth_bin("hearth"), "status", "--instance", "gpu", "--shm-dir", shm_.path().string()});
  EXPECT_NE(text.out.find("kept by hearth serve: survives a loader restart"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("CUDA device 0 (GPU-0123abcd"), std::string::npos) << text.out;
  server->reset();
  const auto gone = run_process({hearth_bin("hearth"), "status", "--instance", "gpu", "--shm-dir", shm_.path().string()});
  EXPECT_EQ(gone.exit_code, 0) << gone.err;
}

TEST_F(ResidentTest, ServeWithADeviceAndNoGpuStopsWithTheLoadersReason) {
  if (std::filesystem::exists("/dev/nvidiactl")) GTEST_SKIP() << "this machine has an NVIDIA driver";
  const auto r = run_process({hearth_bin("hearth"), "serve", "--model", model_.string(), "--instance", "srvgpu",
                              "--shm-dir", shm_.path().string(), "--port", "0", "--device", "cuda"},
                             kNoEmulatedDevice);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("hearth-loader did not become ready"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(shm_.path() / "hearth.srvgpu.fdstore.sock"));
  const auto bad = run_process({hearth_bin("hearth"), "serve", "--model", model_.string(), "--device", "cuda:0,1"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("names 2 devices for 1 rank"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace hearth::testing
