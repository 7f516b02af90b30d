#pragma once
// A one-line progress bar on stderr (only when stderr is a terminal or when asked).
#include <string>

namespace kvserve::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, bool enabled);
  void update(float fraction);
  void done();

 private:
  std::string label_;
  bool enabled_;
  int last_ = -1;
};

}  // namespace kvserve::cli
