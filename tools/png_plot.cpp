#include "tools/png_plot.h"

#include <png.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace hearth::cli {

const std::vector<Rgb> kPalette = {
    {255, 255, 255}, {0, 0, 0},      {110, 110, 110}, {225, 225, 225},  // white, black, grey, light grey
    {31, 119, 180},  {255, 127, 14}, {44, 160, 44},   {214, 39, 40},   {148, 103, 189}, {140, 86, 75},
};

namespace {

// 5x7 glyphs, one byte per row, bit 4 the leftmost pixel.
struct Glyph {
  char c;
  std::array<uint8_t, 7> rows;
};
constexpr Glyph kFont[] = {
    {' ', {0, 0, 0, 0, 0, 0, 0}},
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11}},
    {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
    {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}},
    {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}},
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}},
    {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
    {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}},
    {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}},
    {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},
    {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},
    {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
    {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},
    {'=', {0, 0, 0x1F, 0, 0x1F, 0, 0}},
    {'/', {0, 0x01, 0x02, 0x04, 0x08, 0x10, 0}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},
    {'_', {0, 0, 0, 0, 0, 0, 0x1F}},
    {'<', {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02}},
    {'>', {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}},
};
constexpr std::array<uint8_t, 7> kBox = {0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F};

const std::array<uint8_t, 7>& glyph(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const Glyph& g : kFont) {
    if (g.c == c) return g.rows;
  }
  return kBox;
}

// A number for an axis: few digits, k/M for large ones.
std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4 || (a >= 1e3 && std::fmod(a, 1e3) == 0)) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

void png_error(png_structp png, png_const_charp message) {
  *static_cast<std::string*>(png_get_error_ptr(png)) = message;
  png_longjmp(png, 1);
}

// The libpng calls, apart: setjmp's frame holds nothing with a destructor. Returns false
// after a libpng error (in *error).
bool png_write_image(FILE* file, int width, int height, const png_color* palette, int colours, png_bytepp rows,
                     std::string* error) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, error, png_error, nullptr);
  png_infop info = png == nullptr ? nullptr : png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    *error = "libpng could not start";
    return false;
  }
  if (setjmp(png_jmpbuf(png)) != 0) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_init_io(png, file);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, PNG_COLOR_TYPE_PALETTE,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_PLTE(png, info, palette, colours);
  png_write_info(png, info);
  png_write_rows(png, rows, static_cast<png_uint_32>(height));
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

Canvas::Canvas(int width, int height)
    : width_(width), height_(height), pixels_(static_cast<size_t>(width) * height, kWhite) {}

void Canvas::set(int x, int y, uint8_t colour) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  pixels_[static_cast<size_t>(y) * width_ + x] = colour;
}

void Canvas::line(double x0, double y0, double x1, double y1, uint8_t colour, int thickness, bool dashed) {
  const double dx = x1 - x0, dy = y1 - y0;
  const double length = std::hypot(dx, dy);
  const int steps = std::max(1, static_cast<int>(std::ceil(length)));
  const int lo = -(thickness - 1) / 2, hi = thickness / 2;
  for (int i = 0; i <= steps; ++i) {
    if (dashed && i % 10 >= 6) continue;
    const int x = static_cast<int>(std::lround(x0 + dx * i / steps));
    const int y = static_cast<int>(std::lround(y0 + dy * i / steps));
    for (int a = lo; a <= hi; ++a) {
      for (int b = lo; b <= hi; ++b) set(x + a, y + b, colour);
    }
  }
}

void Canvas::fill_rect(int x, int y, int w, int h, uint8_t colour) {
  for (int j = y; j < y + h; ++j) {
    for (int i = x; i < x + w; ++i) set(i, j, colour);
  }
}

void Canvas::text(int x, int y, std::string_view s, uint8_t colour, int scale) {
  for (char c : s) {
    const auto& rows = glyph(c);
    for (int r = 0; r < 7; ++r) {
      for (int col = 0; col < 5; ++col) {
        if ((rows[r] >> (4 - col) & 1) != 0) fill_rect(x + col * scale, y + r * scale, scale, scale, colour);
      }
    }
    x += 6 * scale;
  }
}

Status write_png(const std::filesystem::path& path, const Canvas& canvas) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) return make_error(ErrorCode::kIo, "cannot write {}: {}", path.string(), std::strerror(errno));
  std::vector<png_color> palette;
  for (const Rgb& c : kPalette) palette.push_back({c.r, c.g, c.b});
  std::vector<png_bytep> rows(static_cast<size_t>(canvas.height()));
  for (int y = 0; y < canvas.height(); ++y) {
    rows[y] = const_cast<png_bytep>(canvas.pixels().data() + static_cast<size_t>(y) * canvas.width());
  }
  std::string error;
  if (!png_write_image(file.get(), canvas.width(), canvas.height(), palette.data(), static_cast<int>(palette.size()),
                       rows.data(), &error)) {
    return make_error(ErrorCode::kIo, "writing {}: {}", path.string(), error);
  }
  if (std::fflush(file.get()) != 0) return make_error(ErrorCode::kIo, "cannot write {}: {}", path.string(), std::strerror(errno));
  return Status::ok();
}

std::vector<double> nice_ticks(double max, int target) {
  if (!(max > 0) || !std::isfinite(max)) return {0, 1};
  const double raw = max / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * power;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (int i = 0;; ++i) {
    ticks.push_back(i * step);
    if (i * step >= max) break;
  }
  return ticks;
}

Canvas plot_panels(const std::string& title, const std::vector<PlotPanel>& panels, int columns) {
  constexpr int kPanelW = 560, kPanelH = 330, kTop = 40, kLegendRowH = 16;
  constexpr int kLeft = 64, kRight = 20, kPanelTop = 28, kBottom = 44;  // inside a panel
  columns = std::max(1, std::min<int>(columns, static_cast<int>(panels.size())));
  const int rows = (static_cast<int>(panels.size()) + columns - 1) / columns;
  // The legend: every distinct series name with its colour and dash, in first-seen order.
  std::vector<const PlotSeries*> legend;
  for (const PlotPanel& p : panels) {
    for (const PlotSeries& s : p.series) {
      const bool seen = std::any_of(legend.begin(), legend.end(), [&](const PlotSeries* l) { return l->name == s.name; });
      if (!seen) legend.push_back(&s);
    }
  }
  const int legend_h = 12 + kLegendRowH * static_cast<int>(legend.size());
  Canvas c(kPanelW * columns, kTop + kPanelH * rows + legend_h);
  c.text(12, 12, title, Canvas::kBlack, 2);

  for (size_t i = 0; i < panels.size(); ++i) {
    const PlotPanel& p = panels[i];
    const int ox = kPanelW * static_cast<int>(i % columns), oy = kTop + kPanelH * static_cast<int>(i / columns);
    const int x0 = ox + kLeft, x1 = ox + kPanelW - kRight, y0 = oy + kPanelTop, y1 = oy + kPanelH - kBottom;
    c.text(x0, oy + 8, p.title, Canvas::kBlack, 1);
    double xmin = 0, xmax = 1, ymax = 0;
    bool any = false;
    std::vector<double> xs;
    for (const PlotSeries& s : p.series) {
      for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
        if (s.y[k] < 0 || !std::isfinite(s.y[k]) || (p.log_x && s.x[k] <= 0)) continue;
        xmin = any ? std::min(xmin, s.x[k]) : s.x[k];
        xmax = any ? std::max(xmax, s.x[k]) : s.x[k];
        ymax = std::max(ymax, s.y[k]);
        any = true;
        if (std::find(xs.begin(), xs.end(), s.x[k]) == xs.end()) xs.push_back(s.x[k]);
      }
    }
    auto fx = [&](double x) {
      double a = p.log_x ? std::log(x) : x, lo = p.log_x ? std::log(xmin) : xmin, hi = p.log_x ? std::log(xmax) : xmax;
      if (hi <= lo) return (x0 + x1) / 2.0;
      return x0 + 10 + (a - lo) / (hi - lo) * (x1 - x0 - 20);
    };
    const std::vector<double> yticks = nice_ticks(ymax * 1.05);
    const double ytop = yticks.back();
    auto fy = [&](double y) { return y1 - y / ytop * (y1 - y0); };
    for (double t : yticks) {
      const double y = fy(t);
      c.line(x0, y, x1, y, Canvas::kLightGrey);
      const std::string label = tick_label(t);
      c.text(x0 - 6 - Canvas::text_width(label), static_cast<int>(y) - 3, label, Canvas::kGrey);
    }
    c.line(x0, y0, x0, y1, Canvas::kBlack);
    c.line(x0, y1, x1, y1, Canvas::kBlack);
    std::sort(xs.begin(), xs.end());
    for (double x : xs) {
      const double px = fx(x);
      c.line(px, y1, px, y1 + 4, Canvas::kBlack);
      const std::string label = tick_label(x);
      c.text(static_cast<int>(px) - Canvas::text_width(label) / 2, y1 + 8, label, Canvas::kGrey);
    }
    c.text((x0 + x1) / 2 - Canvas::text_width(p.x_label) / 2, y1 + 24, p.x_label, Canvas::kBlack);
    if (!any) continue;
    for (const PlotSeries& s : p.series) {
      const uint8_t colour = static_cast<uint8_t>(Canvas::kFirstSeriesColour + s.colour % Canvas::kSeriesColours);
      double px = -1, py = -1;
      for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
        if (s.y[k] < 0 || !std::isfinite(s.y[k]) || (p.log_x && s.x[k] <= 0)) continue;
        const double x = fx(s.x[k]), y = fy(s.y[k]);
        if (px >= 0) c.line(px, py, x, y, colour, 2, s.dashed);
        c.fill_rect(static_cast<int>(x) - 2, static_cast<int>(y) - 2, 5, 5, colour);
        px = x;
        py = y;
      }
    }
  }
  int ly = kTop + kPanelH * rows + 8;
  for (const PlotSeries* s : legend) {
    const uint8_t colour = static_cast<uint8_t>(Canvas::kFirstSeriesColour + s->colour % Canvas::kSeriesColours);
    c.line(20, ly + 3, 50, ly + 3, colour, 2, s->dashed);
    c.text(58, ly, s->name, Canvas::kBlack);
    ly += kLegendRowH;
  }
  return c;
}

}  // namespace hearth::cli
