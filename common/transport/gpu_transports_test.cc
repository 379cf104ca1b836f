// The GPU peer communicators on a real device (label gpu; skips without one):
//   - NCCL as far as one GPU allows in one process: a 1-rank communicator sends 64 MiB
//     to itself through the same issue-and-poll path the pair uses, byte for byte;
//   - the real two-process NCCL pair on one GPU: NCCL refuses two ranks on one device
//     ("Duplicate GPU detected") unless each process names a different host
//     (NCCL_HOSTID) — then the ranks talk over sockets on loopback
//     (NCCL_SOCKET_IFNAME=lo). A test-only arrangement: it proves the handshake, the
//     ordering and the bytes of the pair; its rate is a socket's, not NVLink's;
//   - the CUDA IPC ring between two processes on one GPU;
//   - both pairs move a 2,048-token Llama-3-8B KV (32 layers × 8 KV heads × 128 × K and
//     V × bf16 = 256 MiB) in 8 MiB payloads, byte for byte. The receiving process (this
//     binary re-run) times the transfer itself, from its first byte to its last, after a
//     warm-up payload has set the pair up, so its start-up is outside the figure; it is
//     printed against one device-to-device copy of the same bytes in the sender;
//   - a stalled ring (no receiver) fails the Send at its deadline.
#include "common/transport/gpu_transports.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/util/strings.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/require_gpu.h"

extern char** environ;

namespace tandem::transport {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kKvBytes = int64_t{2048} * 32 * 8 * 128 * 2 * 2;  // 256 MiB
constexpr int64_t kPayload = int64_t{8} << 20;

uint8_t Pattern(int64_t i) { return static_cast<uint8_t>((i * 131 + 7) ^ (i >> 13)); }

std::unique_ptr<kernels::Backend> Gpu() { return *kernels::MakeBackend({.device = "cuda"}); }

std::string Hex(std::string_view s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += {kDigits[c >> 4], kDigits[c & 15]};
  return out;
}
std::string Unhex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

TEST(GpuTransports, NcclSendsToItselfByteForByte) {
  REQUIRE_GPU();
  auto b = Gpu();
  const int64_t n = int64_t{64} << 20;
  std::vector<uint8_t> host(n), back(n);
  for (int64_t i = 0; i < n; ++i) host[i] = Pattern(i);
  auto src = *b->Allocate(kernels::MemoryKind::kStaging, n);
  auto dst = *b->Allocate(kernels::MemoryKind::kStaging, n);
  b->CopyToDevice(host.data(), *src, 0, n);
  ASSERT_TRUE(b->Synchronize().ok());
  const auto t0 = Clock::now();
  absl::Status st = NcclSelfTransfer(0, src->address(), dst->address(), n);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(b->ReadNow(*dst, 0, n, back.data()).ok());
  EXPECT_TRUE(back == host);
  std::printf("NCCL 1-rank self transfer: 64 MiB in %.2f ms (including communicator init)\n", ms);
}

// The receiving half, run only in the child a pair test spawns: joins the pair named
// by TANDEM_PEER_KIND / TANDEM_PEER_ID, receives the warm-up payload, says "ready" on
// fd 3, receives the KV timed, checks every byte, and writes the milliseconds on fd 3.
TEST(GpuTransports, DISABLED_PeerReceiver) {
  const char* kind = std::getenv("TANDEM_PEER_KIND");
  const char* id = std::getenv("TANDEM_PEER_ID");
  ASSERT_NE(kind, nullptr);
  ASSERT_NE(id, nullptr);
  auto b = Gpu();
  auto factory = std::string_view(kind) == "nccl" ? *MakeNcclFactory(0) : *MakeCudaIpcFactory(0);
  auto comm = factory->Join(Unhex(id));
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto dst = *b->Allocate(kernels::MemoryKind::kStaging, kKvBytes);
  const auto deadline = [] { return Clock::now() + std::chrono::seconds(60); };
  absl::Status st = (*comm)->Recv(*dst, 0, kPayload, deadline());  // warm-up
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(write(3, "R", 1), 1);
  const auto t0 = Clock::now();
  for (int64_t off = 0; off < kKvBytes; off += kPayload) {
    st = (*comm)->Recv(*dst, off, kPayload, deadline());
    ASSERT_TRUE(st.ok()) << st;
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<uint8_t> back(kKvBytes);
  ASSERT_TRUE(b->ReadNow(*dst, 0, kKvBytes, back.data()).ok());
  int64_t wrong = 0;
  for (int64_t i = 0; i < kKvBytes; ++i) wrong += back[i] != Pattern(i);
  EXPECT_EQ(wrong, 0);
  const std::string line = std::to_string(ms) + "\n";
  ASSERT_EQ(write(3, line.data(), line.size()), static_cast<ssize_t>(line.size()));
}

// The pair of `factory`'s kind between this process (sender) and a receiving child:
// the receiver's milliseconds for the 256 MiB, or -1 after a failure (reported).
double SendTheKvToAReceivingProcess(PeerCommFactory& factory, const kernels::Buffer& src,
                                    const std::vector<std::string>& child_env) {
  auto created = factory.Create();
  EXPECT_TRUE(created.ok()) << created.status();
  if (!created.ok()) return -1;
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, fds[0]);  // first: fds[0] may be 3
  posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
  std::vector<std::string> args = {"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                   "--gtest_filter=GpuTransports.DISABLED_PeerReceiver"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = child_env;
  env.push_back(StrCat("TANDEM_PEER_KIND=", factory.name()));
  env.push_back("TANDEM_PEER_ID=" + Hex(created->id));
  std::vector<char*> envp;  // this process's, less what the child's overrides
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view var(*e);
    const bool overridden = std::any_of(env.begin(), env.end(), [&](const std::string& o) {
      return var.substr(0, var.find('=') + 1) == o.substr(0, o.find('=') + 1);
    });
    if (!overridden) envp.push_back(*e);
  }
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t child = 0;
  const int spawned =
      posix_spawn(&child, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  EXPECT_EQ(spawned, 0);
  if (spawned != 0) return -1;
  // Reads fd 0 of the pipe until `n` bytes or a newline arrive, for at most 60 s.
  auto read_some = [&](size_t n) {
    std::string got;
    pollfd p{fds[0], POLLIN, 0};
    while (got.size() < n && (got.empty() || got.back() != '\n') && poll(&p, 1, 60000) > 0) {
      char c;
      if (read(fds[0], &c, 1) != 1) break;
      got.push_back(c);
    }
    return got;
  };
  const auto deadline = [] { return Clock::now() + std::chrono::seconds(60); };
  absl::Status sent = created->comm->Send(src, 0, kPayload, deadline());  // warm-up
  if (sent.ok() && read_some(1) != "R") sent = absl::DeadlineExceededError("no ready receiver");
  for (int64_t off = 0; off < kKvBytes && sent.ok(); off += kPayload) {
    sent = created->comm->Send(src, off, kPayload, deadline());
  }
  EXPECT_TRUE(sent.ok()) << sent;
  if (!sent.ok()) kill(child, SIGKILL);  // never leave the receiver behind
  const std::string ms = sent.ok() ? read_some(64) : "";
  int wstatus = 0;
  EXPECT_EQ(waitpid(child, &wstatus, 0), child);
  close(fds[0]);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "the receiving process failed";
  if (!sent.ok() || ms.empty() || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) return -1;
  return std::stod(ms);
}

// The KV in device memory of `b`, and one device-to-device copy of it for comparison.
struct KvSource {
  std::unique_ptr<kernels::Buffer> src;
  double copy_ms = 0;
};
KvSource PrepareKv(kernels::Backend& b) {
  std::vector<uint8_t> host(kKvBytes);
  for (int64_t i = 0; i < kKvBytes; ++i) host[i] = Pattern(i);
  KvSource k{*b.Allocate(kernels::MemoryKind::kStaging, kKvBytes)};
  auto copy = *b.Allocate(kernels::MemoryKind::kStaging, kKvBytes);
  b.CopyToDevice(host.data(), *k.src, 0, kKvBytes);
  EXPECT_TRUE(b.Synchronize().ok());
  const kernels::Copy2D c{.src = k.src.get(),
                          .src_pitch = kKvBytes,
                          .dst = copy.get(),
                          .dst_pitch = kKvBytes,
                          .width = kKvBytes,
                          .rows = 1};
  EXPECT_TRUE(b.CopyNow(c).ok());  // warm
  const auto t0 = Clock::now();
  EXPECT_TRUE(b.CopyNow(c).ok());
  k.copy_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return k;
}

TEST(GpuTransports, CudaIpcRingMovesA2048TokenLlama3KvBetweenTwoProcesses) {
  REQUIRE_GPU();
  auto b = Gpu();
  const KvSource kv = PrepareKv(*b);
  auto factory = *MakeCudaIpcFactory(0);
  const double ms = SendTheKvToAReceivingProcess(*factory, *kv.src, {});
  ASSERT_GT(ms, 0);
  std::printf(
      "CUDA IPC ring: 256 MiB (2,048 tokens of Llama-3-8B KV) in %.2f ms = %.1f GB/s, timed by "
      "the receiver; one device-to-device copy: %.2f ms = %.1f GB/s; ratio %.2f\n",
      ms, kKvBytes / ms / 1e6, kv.copy_ms, kKvBytes / kv.copy_ms / 1e6, ms / kv.copy_ms);
}

// The NCCL pair across two processes on one GPU: distinct NCCL_HOSTID per process (a
// test-only arrangement, see the top), sockets on loopback.
TEST(GpuTransports, NcclPairMovesA2048TokenLlama3KvBetweenTwoProcesses) {
  REQUIRE_GPU();
  setenv("NCCL_HOSTID", "tandem-test-sender", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  auto b = Gpu();
  const KvSource kv = PrepareKv(*b);
  auto factory = *MakeNcclFactory(0);
  const double ms = SendTheKvToAReceivingProcess(
      *factory, *kv.src, {"NCCL_HOSTID=tandem-test-receiver", "NCCL_SOCKET_IFNAME=lo"});
  unsetenv("NCCL_HOSTID");
  unsetenv("NCCL_SOCKET_IFNAME");
  ASSERT_GT(ms, 0);
  std::printf(
      "NCCL pair (two processes on one GPU, distinct NCCL_HOSTID, sockets on loopback): 256 MiB "
      "in %.2f ms = %.1f GB/s, timed by the receiver; one device-to-device copy: %.1f GB/s\n",
      ms, kKvBytes / ms / 1e6, kKvBytes / kv.copy_ms / 1e6);
}

TEST(GpuTransports, AStalledRingFailsTheSendAtItsDeadline) {
  REQUIRE_GPU();
  auto b = Gpu();
  auto factory = *MakeCudaIpcFactory(0, int64_t{1} << 20);
  auto created = factory->Create();
  ASSERT_TRUE(created.ok()) << created.status();
  auto src = *b->Allocate(kernels::MemoryKind::kStaging, int64_t{4} << 20);
  const auto t0 = Clock::now();
  absl::Status st =
      created->comm->Send(*src, 0, int64_t{4} << 20, Clock::now() + std::chrono::milliseconds(300));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  // Broken for good: the next call fails at once.
  EXPECT_FALSE(created->comm->Send(*src, 0, 16, Clock::now() + std::chrono::seconds(5)).ok());
}

}  // namespace
}  // namespace tandem::transport
