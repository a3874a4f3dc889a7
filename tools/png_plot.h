// Line plots written as PNG, with no plotting library: a palette canvas, a 5x7 bitmap
// font for labels, and libpng for the file. Enough for `hearth bench`'s latency and
// throughput panels; not a general charting tool. Pure, single-threaded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hearth::cli {

// An 8-bit palette image (kPalette's colours), white to start with.
class Canvas {
 public:
  static constexpr uint8_t kWhite = 0, kBlack = 1, kGrey = 2, kLightGrey = 3;
  static constexpr uint8_t kFirstSeriesColour = 4;
  static constexpr int kSeriesColours = 6;

  Canvas(int width, int height);
  int width() const { return width_; }
  int height() const { return height_; }
  uint8_t at(int x, int y) const { return pixels_[static_cast<size_t>(y) * width_ + x]; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }  // row-major

  void set(int x, int y, uint8_t colour);  // outside the canvas: nothing
  // A line `thickness` pixels wide; dashed lines draw 6 pixels of every 10.
  void line(double x0, double y0, double x1, double y1, uint8_t colour, int thickness = 1, bool dashed = false);
  void fill_rect(int x, int y, int w, int h, uint8_t colour);
  // Text in the 5x7 font, `scale` pixels per font pixel, left edge at x, top at y.
  // Lower-case letters are drawn as capitals; characters the font lacks as boxes.
  void text(int x, int y, std::string_view s, uint8_t colour, int scale = 1);
  static int text_width(std::string_view s, int scale = 1) { return static_cast<int>(s.size()) * 6 * scale; }

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;
};

// The palette, RGB per index.
struct Rgb {
  uint8_t r, g, b;
};
extern const std::vector<Rgb> kPalette;

Status write_png(const std::filesystem::path& path, const Canvas& canvas);

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // same length; points with y < 0 are skipped
  int colour = 0;            // 0..Canvas::kSeriesColours-1
  bool dashed = false;
};
struct PlotPanel {
  std::string title;
  std::string x_label;
  bool log_x = false;  // log scale on x (all x > 0)
  std::vector<PlotSeries> series;
};

// Panels in a grid of `columns`, a title above, a legend of the series names below.
Canvas plot_panels(const std::string& title, const std::vector<PlotPanel>& panels, int columns = 2);

// "Nice" axis ticks from 0 to at least `max` (1, 2 or 5 times a power of ten apart).
std::vector<double> nice_ticks(double max, int target = 5);

}  // namespace hearth::cli
