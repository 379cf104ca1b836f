#include "router/text_stream.h"

#include <algorithm>

namespace tandem::router {

std::string TextStream::Push(int32_t token, bool is_eos) {
  if (stopped_) return {};
  if (!is_eos) {
    auto piece = detok_.Push(token);
    if (piece.ok()) held_ += *piece;
  }
  return Release();
}

std::string TextStream::Finish() {
  if (stopped_) return {};
  held_ += detok_.Finish();
  std::string out = Release();
  if (!stopped_) {
    out += held_;
    held_.clear();
  }
  return out;
}

std::string TextStream::Release() {
  // The earliest complete stop string wins.
  size_t hit = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && at < hit) {
      hit = at;
      stop_ = s;
    }
  }
  if (hit != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, hit);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. Stop
  // strings start with a lead byte, so the cut falls on a character boundary.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

}  // namespace tandem::router
