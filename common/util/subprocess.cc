#include "common/util/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

namespace tandem {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

bool Subprocess::Start(const std::vector<std::string>& args, const std::string& log_path,
                       int nice) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid > 0) {
    pid_ = pid;
    return true;
  }
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  if (nice > 0) setpriority(PRIO_PROCESS, 0, getpriority(PRIO_PROCESS, 0) + nice);
  if (!log_path.empty()) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
  }
  execv(argv[0], argv.data());
  std::fprintf(stderr, "cannot run %s\n", argv[0]);
  _exit(127);
}

void Subprocess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

std::optional<int> Subprocess::Poll() {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  pid_ = -1;
  return status;
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  do {
    if (auto s = Poll()) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (Clock::now() < until);
  return Poll();
}

int Subprocess::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return 0;
  Signal(SIGTERM);
  if (auto s = Wait(grace)) return *s;
  Signal(SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

int WaitForPortFile(const std::string& path, Subprocess* child, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (const int port = ReadPort(path); port > 0) return port;
    if (child->Poll().has_value()) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

int ReadPort(const std::string& path) {
  std::ifstream in(path);
  int port = 0;
  return in >> port && port > 0 ? port : 0;
}

int ReadSecondPort(const std::string& path) {
  std::ifstream in(path);
  int first = 0, second = 0;
  if (in >> first >> second && second > 0) return second;
  return 0;
}

bool WaitForFile(const std::string& path, Subprocess* child, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (std::ifstream(path).good()) return true;
    if (child->Poll().has_value()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace tandem
