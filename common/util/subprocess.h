// Subprocess: start a program, signal it, wait for it — what `tandem serve` and the
// cluster tests do with worker processes.
//
// Children run in their own process group (a terminal's Ctrl-C reaches only the
// parent, which then stops them in order), with SIGINT/SIGTERM unblocked, and die with
// SIGTERM if the parent dies. Not thread-safe; one owner per child.
#ifndef TANDEM_COMMON_UTIL_SUBPROCESS_H_
#define TANDEM_COMMON_UTIL_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

class Subprocess {
 public:
  Subprocess() = default;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();  // kills (SIGKILL) and reaps a child still running

  // args[0] is the program's path. stdout/stderr are inherited, or redirected to
  // `log_path` (appended) when it is set. `nice` > 0 lowers the child's OS scheduling
  // priority by that much (nice(2)) before it runs the program.
  bool Start(const std::vector<std::string>& args, const std::string& log_path = "", int nice = 0);

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  void Signal(int sig);

  // Reaps the child if it has exited; its wait status then. Never blocks.
  std::optional<int> Poll();
  // Waits up to `timeout` for the child to exit; its wait status, or nothing.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, up to `grace` to exit, then SIGKILL. The wait status.
  int Stop(std::chrono::milliseconds grace);

 private:
  pid_t pid_ = -1;
};

// Waits for `path` to hold a port number written by `child`; 0 if the child exits or
// `timeout` passes first.
int WaitForPortFile(const std::string& path, Subprocess* child, std::chrono::milliseconds timeout);
// The first port of a port file (tandem servers write "<grpc>\n<http>\n"); 0 if none yet.
int ReadPort(const std::string& path);
// The second port of a port file; 0 if none.
int ReadSecondPort(const std::string& path);
// Waits up to `timeout` for `path` to exist; false if `child` exits or time runs out.
bool WaitForFile(const std::string& path, Subprocess* child, std::chrono::milliseconds timeout);

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_SUBPROCESS_H_
