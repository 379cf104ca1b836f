#include "cli/log_relay.h"

#include <cstdio>
#include <fstream>

namespace tandem::cli {

LogRelay::LogRelay() : thread_([this] { Run(); }) {}

LogRelay::~LogRelay() { Stop(); }

void LogRelay::Add(const std::string& name, const std::string& path) {
  std::ofstream(path, std::ios::app).close();  // exists from now on
  std::ifstream in(path, std::ios::ate | std::ios::binary);
  std::lock_guard<std::mutex> lock(mu_);
  Source& s = sources_[name];
  s.path = path;
  s.offset = in ? static_cast<int64_t>(in.tellg()) : 0;
}

std::string LogRelay::LastLines(const std::string& name, int n) {
  std::lock_guard<std::mutex> lock(mu_);
  Drain();
  auto it = sources_.find(name);
  if (it == sources_.end()) return "";
  std::string out;
  std::deque<std::string> lines = it->second.lines;
  if (!it->second.partial.empty()) lines.push_back(it->second.partial);  // died mid-line
  const size_t from = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0;
  for (size_t i = from; i < lines.size(); ++i) {
    if (!out.empty()) out += "\n";
    out += lines[i];
  }
  return out;
}

void LogRelay::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  Drain();
}

void LogRelay::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    Drain();
    cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void LogRelay::Drain() {
  for (auto& [name, s] : sources_) {
    std::ifstream in(s.path, std::ios::binary);
    if (!in) continue;
    in.seekg(0, std::ios::end);
    const int64_t end = static_cast<int64_t>(in.tellg());
    if (end < s.offset) s.offset = 0;  // truncated: start over
    if (end == s.offset) continue;
    std::string data(static_cast<size_t>(end - s.offset), '\0');
    in.seekg(s.offset);
    in.read(data.data(), static_cast<std::streamsize>(data.size()));
    data.resize(static_cast<size_t>(in.gcount()));
    s.offset += static_cast<int64_t>(data.size());
    std::fwrite(data.data(), 1, data.size(), stderr);
    std::fflush(stderr);
    s.partial += data;
    for (size_t nl = s.partial.find('\n'); nl != std::string::npos; nl = s.partial.find('\n')) {
      std::string line = s.partial.substr(0, nl);
      s.partial.erase(0, nl + 1);
      if (line.empty()) continue;
      s.lines.push_back(std::move(line));
      if (s.lines.size() > kKeepLines) s.lines.pop_front();
    }
  }
}

}  // namespace tandem::cli
