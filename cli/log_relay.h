// LogRelay: copies what child processes write to their log files onto this process's
// stderr as it arrives, and keeps each child's last lines — so that `tandem serve` shows
// its workers' messages live and can still quote a worker's last error after it died.
//
// One thread polls the files (every 50 ms); Stop (or the destructor) copies what is
// left and joins it. Thread-safe.
#ifndef TANDEM_CLI_LOG_RELAY_H_
#define TANDEM_CLI_LOG_RELAY_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::cli {

class LogRelay {
 public:
  LogRelay();
  ~LogRelay();  // Stop()

  // Relays `path` (created empty if missing) under `name`, from its current end.
  void Add(const std::string& name, const std::string& path);
  // The last non-empty lines `name` wrote (at most `n`), oldest first, joined by "\n".
  std::string LastLines(const std::string& name, int n = 3);
  void Stop();

 private:
  struct Source {
    std::string path;
    int64_t offset = 0;
    std::string partial;            // a line not yet ended
    std::deque<std::string> lines;  // the last kKeepLines whole lines
  };
  static constexpr size_t kKeepLines = 20;

  void Run();
  void Drain();  // copies what every file holds past its offset (mu_ held)

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, Source> sources_;
  std::thread thread_;
};

}  // namespace tandem::cli

#endif  // TANDEM_CLI_LOG_RELAY_H_
