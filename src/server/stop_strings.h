// Stop strings over streamed text: text that may be the start of a stop string is held back until it is known not
// to be, so that a client never receives part of a stop string; once one is complete, the text before it is the
// last to go out.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace df::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends generated text; returns what may be sent now. After a stop string completes, stopped() is true and
  // nothing more is returned.
  std::string push(std::string_view text);
  // The end of generation: what is still held back.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace df::server
