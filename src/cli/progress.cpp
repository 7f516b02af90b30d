#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace kvserve::cli {

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled && isatty(STDERR_FILENO)) {}

void ProgressBar::update(float fraction) {
  if (!enabled_) return;
  const int pct = static_cast<int>(std::clamp(fraction, 0.0f, 1.0f) * 100.0f);
  if (pct == last_) return;
  last_ = pct;
  const int width = 30, filled = pct * width / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled, "##############################",
               width - filled, "", pct);
  std::fflush(stderr);
}

void ProgressBar::done() {
  if (!enabled_) return;
  update(1.0f);
  std::fprintf(stderr, "\n");
}

}  // namespace kvserve::cli
