#include "report/svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "engine/rng.h"

namespace canonlab::svg {

const std::vector<std::string_view>& palette() {
  static const std::vector<std::string_view> colours = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                                        "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728"};
  return colours;
}

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  // "-0.0" and "0.0" are the same number; printing one spelling keeps output byte-stable across platforms.
  if (s.front() == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string heat_colour(double t) {
  // matplotlib's viridis sampled at 0, 0.1, ..., 1, interpolated linearly in RGB.
  static constexpr std::array<std::array<int, 3>, 11> stops = {{{0x44, 0x01, 0x54}, {0x48, 0x24, 0x75},
                                                                {0x41, 0x44, 0x87}, {0x35, 0x5f, 0x8d},
                                                                {0x2a, 0x78, 0x8e}, {0x21, 0x91, 0x8c},
                                                                {0x22, 0xa8, 0x84}, {0x44, 0xbf, 0x70},
                                                                {0x7a, 0xd1, 0x51}, {0xbd, 0xdf, 0x26},
                                                                {0xfd, 0xe7, 0x25}}};
  if (!(t > 0)) t = 0;  // also maps NaN to the low end; callers draw NaN cells blank before asking
  if (t > 1) t = 1;
  const double pos = t * (stops.size() - 1);
  const size_t i = std::min(size_t(pos), stops.size() - 2);
  const double f = pos - double(i);
  char buf[8];
  int rgb[3];
  for (int k = 0; k < 3; k++) rgb[k] = int(std::lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k])));
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buf;
}

namespace {

constexpr const char* kFont = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";
constexpr double kCharWidth = 6.6;  // rough width of one 11-12px sans-serif character, for layout only

// Opening tag shared by every plot: standalone-valid (xmlns), scalable (viewBox) and sized (width/height).
std::string open_svg(double width, double height) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt(width, 0) + "\" height=\"" + fmt(height, 0) +
         "\" viewBox=\"0 0 " + fmt(width, 0) + " " + fmt(height, 0) + "\" " + kFont +
         " font-size=\"12\">\n<rect x=\"0\" y=\"0\" width=\"" + fmt(width, 0) + "\" height=\"" + fmt(height, 0) +
         "\" fill=\"#ffffff\"/>\n";
}

std::string text(double x, double y, std::string_view s, std::string_view anchor = "middle",
                 std::string_view extra = "") {
  return "<text x=\"" + fmt(x, 1) + "\" y=\"" + fmt(y, 1) + "\" text-anchor=\"" + std::string(anchor) + "\"" +
         (extra.empty() ? "" : " " + std::string(extra)) + ">" + escape(s) + "</text>\n";
}

std::string line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
                 std::string_view extra = "") {
  return "<line x1=\"" + fmt(x1, 1) + "\" y1=\"" + fmt(y1, 1) + "\" x2=\"" + fmt(x2, 1) + "\" y2=\"" + fmt(y2, 1) +
         "\" stroke=\"" + std::string(stroke) + "\" stroke-width=\"" + fmt(width, 1) + "\"" +
         (extra.empty() ? "" : " " + std::string(extra)) + "/>\n";
}

// Title centred at title_x, x label centred at x_label_x (at height x_label_y), y label rotated beside the plot.
std::string title_and_labels(double title_x, double x_label_x, double x_label_y, double top, double plot_h,
                             const std::string& title, const std::string& x_label, const std::string& y_label) {
  std::string s;
  if (!title.empty()) s += text(title_x, 20, title, "middle", "font-size=\"14\" font-weight=\"bold\"");
  if (!x_label.empty()) s += text(x_label_x, x_label_y, x_label);
  if (!y_label.empty()) {
    const double cy = top + plot_h / 2;
    s += "<text x=\"14\" y=\"" + fmt(cy, 1) + "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " + fmt(cy, 1) +
         ")\">" + escape(y_label) + "</text>\n";
  }
  return s;
}

// Axis ticks at 1, 2, 2.5 or 5 times a power of ten, about `target` of them, covering [lo, hi].
struct Ticks {
  double lo, hi, step;
  int decimals;  // enough to tell neighbouring ticks apart
};
Ticks nice_ticks(double lo, double hi, int target, double scale) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  Ticks t;
  t.step = step;
  t.lo = std::floor(lo / step + 1e-9) * step;
  t.hi = std::ceil(hi / step - 1e-9) * step;
  const double shown = step * scale;  // the step as printed (percent ticks print 100x)
  t.decimals = std::max(0, int(std::ceil(-std::log10(shown) - 1e-9)));
  if (std::abs(std::round(shown * std::pow(10.0, t.decimals)) - shown * std::pow(10.0, t.decimals)) > 1e-6)
    t.decimals++;  // 2.5 steps need one more digit
  return t;
}

std::string tick_label(double v, const Ticks& t, bool percent) {
  return percent ? fmt(100 * v, t.decimals) + "%" : fmt(v, t.decimals);
}

// Horizontal grid lines with labels on the left of the plot area [left, left+w] x [top, top+h].
std::string y_axis(const Ticks& t, bool percent, double left, double top, double w, double h) {
  std::string s;
  const int n = int(std::lround((t.hi - t.lo) / t.step));
  for (int i = 0; i <= n; i++) {
    const double v = t.lo + i * t.step;
    const double y = top + h - (v - t.lo) / (t.hi - t.lo) * h;
    s += line(left, y, left + w, y, "#e5e5e5", 1);
    s += text(left - 6, y + 4, tick_label(v, t, percent), "end");
  }
  s += line(left, top, left, top + h, "#333333", 1);
  s += line(left, top + h, left + w, top + h, "#333333", 1);
  return s;
}

std::string circle(double x, double y, double r, std::string_view fill, std::string_view extra = "") {
  return "<circle cx=\"" + fmt(x, 1) + "\" cy=\"" + fmt(y, 1) + "\" r=\"" + fmt(r, 1) + "\" fill=\"" +
         std::string(fill) + "\"" + (extra.empty() ? "" : " " + std::string(extra)) + "/>\n";
}

std::string diamond(double x, double y, double r, std::string_view fill) {
  return "<path d=\"M" + fmt(x, 1) + " " + fmt(y - r, 1) + " L" + fmt(x + r, 1) + " " + fmt(y, 1) + " L" +
         fmt(x, 1) + " " + fmt(y + r, 1) + " L" + fmt(x - r, 1) + " " + fmt(y, 1) + " Z\" fill=\"" +
         std::string(fill) + "\" stroke=\"#ffffff\" stroke-width=\"1\"/>\n";
}

// A legend laid out left to right, wrapping at `max_width`. Each entry draws its own symbol in a 24x12 box.
struct LegendEntry {
  std::string label;
  std::string symbol;  // SVG drawn relative to (0, 0) = the symbol box's left-middle, via a translate
};
std::string legend(const std::vector<LegendEntry>& entries, double x0, double y0, double max_width,
                   double* height_out) {
  std::string s;
  double x = x0, y = y0;
  for (const LegendEntry& e : entries) {
    const double w = 30 + kCharWidth * double(e.label.size()) + 16;
    if (x > x0 && x + w > x0 + max_width) {
      x = x0;
      y += 18;
    }
    s += "<g transform=\"translate(" + fmt(x, 1) + " " + fmt(y, 1) + ")\">\n" + e.symbol + "</g>\n";
    s += text(x + 30, y + 4, e.label, "start");
    x += w;
  }
  if (height_out) *height_out = y - y0 + 18;
  return s;
}

double legend_height(const std::vector<LegendEntry>& entries, double max_width) {
  double h = 0;
  legend(entries, 0, 0, max_width, &h);
  return h;
}

bool finite(double v) { return std::isfinite(v); }

}  // namespace

std::string heatmap(const Heatmap& h) {
  const size_t rows = h.row_labels.size(), cols = h.col_labels.size();
  const double cell_w = 54, cell_h = 34;
  const double left = h.y_label.empty() ? 44 : 62, top = h.title.empty() ? 16 : 36;
  const double grid_w = cell_w * double(cols), grid_h = cell_h * double(rows);
  const double bar_x = left + grid_w + 18, bar_w = 14;
  // Widen for a long title (run names can be long) rather than clip it.
  const double title_w = 8.4 * double(h.title.size()) + 16;
  const double width = std::max(bar_x + bar_w + 48, title_w);
  const double title_x = title_w > bar_x + bar_w + 48 ? width / 2 : left + grid_w / 2;
  const double height = top + grid_h + (h.x_label.empty() ? 28 : 46);
  const double span = h.vmax > h.vmin ? h.vmax - h.vmin : 1;
  const bool percent_scale = h.vmin >= 0 && h.vmax <= 1;

  std::string s = open_svg(width, height);
  s += title_and_labels(title_x, left + grid_w / 2, top + grid_h + 38, top, grid_h, h.title, h.x_label,
                        h.y_label);
  for (size_t r = 0; r < rows; r++) {
    const double y = top + cell_h * double(r);
    s += text(left - 8, y + cell_h / 2 + 4, h.row_labels[r], "end");
    for (size_t c = 0; c < cols; c++) {
      const double x = left + cell_w * double(c);
      const size_t idx = r * cols + c;
      const double v = idx < h.values.size() ? h.values[idx] : std::numeric_limits<double>::quiet_NaN();
      const std::string geom = "x=\"" + fmt(x, 1) + "\" y=\"" + fmt(y, 1) + "\" width=\"" + fmt(cell_w, 1) +
                               "\" height=\"" + fmt(cell_h, 1) + "\"";
      if (!finite(v)) {
        s += "<rect " + geom + " fill=\"#ffffff\" stroke=\"#dddddd\"/>\n";
        continue;
      }
      const double t = (v - h.vmin) / span;
      s += "<rect " + geom + " fill=\"" + heat_colour(t) + "\" stroke=\"#ffffff\" stroke-width=\"1\"/>\n";
      if (h.annotate) {
        // Light text on the dark (low) half of viridis, dark text on the bright half.
        const char* ink = t < 0.6 ? "#ffffff" : "#000000";
        s += text(x + cell_w / 2, y + cell_h / 2 + 4, fmt(100 * v, 1) + "%", "middle",
                  std::string("font-size=\"11\" fill=\"") + ink + "\"");
      }
    }
  }
  // Marked cells: a square inset in the cell, drawn after every cell so no neighbour paints over it.
  for (const auto& [r, c] : h.marked_cells) {
    if (r < 0 || c < 0 || size_t(r) >= rows || size_t(c) >= cols) continue;
    s += "<rect x=\"" + fmt(left + cell_w * c + 3, 1) + "\" y=\"" + fmt(top + cell_h * r + 3, 1) + "\" width=\"" +
         fmt(cell_w - 6, 1) + "\" height=\"" + fmt(cell_h - 6, 1) + "\" fill=\"none\" stroke=\"#ff3030\" stroke-width=\"2\"/>\n";
  }
  for (size_t c = 0; c < cols; c++)
    s += text(left + cell_w * (double(c) + 0.5), top + grid_h + 16, h.col_labels[c]);

  // Colour bar: 20 bands from vmin (bottom) to vmax (top).
  const int bands = 20;
  for (int i = 0; i < bands; i++) {
    const double y = top + grid_h * (1 - double(i + 1) / bands);
    s += "<rect x=\"" + fmt(bar_x, 1) + "\" y=\"" + fmt(y, 1) + "\" width=\"" + fmt(bar_w, 1) + "\" height=\"" +
         fmt(grid_h / bands + 0.5, 1) + "\" fill=\"" + heat_colour((i + 0.5) / bands) + "\"/>\n";
  }
  auto bar_label = [&](double v) { return percent_scale ? fmt(100 * v, 0) + "%" : fmt(v, 2); };
  s += text(bar_x + bar_w + 4, top + 10, bar_label(h.vmax), "start", "font-size=\"11\"");
  s += text(bar_x + bar_w + 4, top + grid_h, bar_label(h.vmin), "start", "font-size=\"11\"");
  s += "</svg>\n";
  return s;
}

std::string strip_plot(const StripPlot& p) {
  const size_t n_cat = p.categories.size();
  const double left = 56, right = 14, top = p.title.empty() ? 16 : 36;
  // Three plots (strip + two learning curves) fit side by side in a 1160 px page.
  const double band = std::max(56.0, 290.0 / double(std::max<size_t>(n_cat, 1)));
  const double plot_w = band * double(std::max<size_t>(n_cat, 1)), plot_h = 220;
  const double width = left + plot_w + right;

  double lo = p.y_min, hi = p.y_max;
  for (const auto& pts : p.points)
    for (double v : pts)
      if (finite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (p.has_threshold && finite(p.threshold)) lo = std::min(lo, p.threshold), hi = std::max(hi, p.threshold);
  const Ticks t = nice_ticks(lo, hi, 5, p.percent ? 100 : 1);
  auto y_of = [&](double v) { return top + plot_h - (v - t.lo) / (t.hi - t.lo) * plot_h; };

  std::vector<LegendEntry> entries;
  entries.push_back({p.point_legend, circle(12, 0, 4, kPointColour, "stroke=\"#ffffff\" stroke-width=\"0.8\"")});
  entries.push_back({p.mean_legend, line(0, 0, 24, 0, kMeanColour, 2.5) + diamond(12, 0, 5, kMeanColour)});
  if (p.has_threshold)
    entries.push_back({"threshold " + (p.percent ? fmt(100 * p.threshold, 1) + "%" : fmt(p.threshold, 3)),
                       line(0, 0, 24, 0, kThresholdColour, 1.5, "stroke-dasharray=\"5 3\"")});
  const double legend_y = top + plot_h + (p.x_label.empty() ? 34 : 52);
  const double height = legend_y + legend_height(entries, plot_w) + 4;

  std::string s = open_svg(width, height);
  s += title_and_labels(width / 2, left + plot_w / 2, top + plot_h + 38, top, plot_h, p.title, p.x_label, p.y_label);
  s += y_axis(t, p.percent, left, top, plot_w, plot_h);
  for (size_t c = 0; c < n_cat; c++)
    s += text(left + band * (double(c) + 0.5), top + plot_h + 18, p.categories[c]);
  if (p.has_threshold && finite(p.threshold))
    s += line(left, y_of(p.threshold), left + plot_w, y_of(p.threshold), kThresholdColour, 1.5,
              "stroke-dasharray=\"5 3\"");

  // Dots: jitter is a pure function of (category, index), so the same data always gives the same picture.
  std::vector<double> means(n_cat, std::numeric_limits<double>::quiet_NaN());
  for (size_t c = 0; c < n_cat && c < p.points.size(); c++) {
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < p.points[c].size(); i++) {
      const double v = p.points[c][i];
      if (!finite(v)) continue;
      CounterRng rng(0x5eed, c, i);
      const double x = left + band * (double(c) + 0.5) + (rng.uniform() - 0.5) * band * 0.36;
      s += circle(x, y_of(v), 4, kPointColour, "stroke=\"#ffffff\" stroke-width=\"0.8\"");
      sum += v;
      n++;
    }
    if (n > 0) means[c] = sum / n;
  }
  // Mean line: joins neighbouring categories that both have a mean.
  for (size_t c = 0; c + 1 < n_cat; c++)
    if (finite(means[c]) && finite(means[c + 1]))
      s += line(left + band * (double(c) + 0.5), y_of(means[c]), left + band * (double(c) + 1.5),
                y_of(means[c + 1]), kMeanColour, 2.5);
  for (size_t c = 0; c < n_cat; c++)
    if (finite(means[c])) s += diamond(left + band * (double(c) + 0.5), y_of(means[c]), 6, kMeanColour);

  s += legend(entries, left, legend_y, plot_w, nullptr);
  s += "</svg>\n";
  return s;
}

namespace {
// "M x y L x y ..." with a new M after every NaN, so gaps in the data show as gaps in the line.
std::string path_data(const Line& l, auto&& x_of, auto&& y_of) {
  std::string d;
  bool pen_down = false;
  for (size_t i = 0; i < l.x.size() && i < l.y.size(); i++) {
    if (!finite(l.x[i]) || !finite(l.y[i])) {
      pen_down = false;
      continue;
    }
    d += (pen_down ? " L" : (d.empty() ? "M" : " M")) + fmt(x_of(l.x[i]), 1) + " " + fmt(y_of(l.y[i]), 1);
    pen_down = true;
  }
  return d;
}
}  // namespace

std::string line_chart(const LineChart& c) {
  const double left = 56, right = 14, top = c.title.empty() ? 16 : 36;
  const double plot_w = 290, plot_h = 220;
  const double width = left + plot_w + right;

  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = c.auto_y ? x_lo : c.y_min, y_hi = c.auto_y ? -x_lo : c.y_max;
  auto extend = [&](const Line& l) {
    for (size_t i = 0; i < l.x.size() && i < l.y.size(); i++) {
      if (!finite(l.x[i]) || !finite(l.y[i])) continue;
      x_lo = std::min(x_lo, l.x[i]), x_hi = std::max(x_hi, l.x[i]);
      if (c.auto_y) y_lo = std::min(y_lo, l.y[i]), y_hi = std::max(y_hi, l.y[i]);
    }
  };
  for (const Series& s : c.series) {
    extend(s.mean);
    for (const Line& m : s.members) extend(m);
  }
  if (!finite(x_lo)) x_lo = 0, x_hi = 1;
  if (!finite(y_lo)) y_lo = 0, y_hi = 1;
  const Ticks ty = nice_ticks(y_lo, y_hi, 5, c.percent ? 100 : 1);
  const Ticks tx = nice_ticks(x_lo, x_hi, 6, 1);
  auto x_of = [&](double x) { return left + (x - tx.lo) / (tx.hi - tx.lo) * plot_w; };
  auto y_of = [&](double y) { return top + plot_h - (y - ty.lo) / (ty.hi - ty.lo) * plot_h; };

  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < c.series.size(); i++)
    entries.push_back({c.series[i].label, line(0, 0, 24, 0, palette()[i % palette().size()], 2.5)});
  const double legend_y = top + plot_h + (c.x_label.empty() ? 34 : 52);
  const double height = legend_y + legend_height(entries, plot_w) + 4;

  std::string s = open_svg(width, height);
  s += title_and_labels(width / 2, left + plot_w / 2, top + plot_h + 38, top, plot_h, c.title, c.x_label, c.y_label);
  s += y_axis(ty, c.percent, left, top, plot_w, plot_h);
  const int nx = int(std::lround((tx.hi - tx.lo) / tx.step));
  for (int i = 0; i <= nx; i++) {
    const double v = tx.lo + i * tx.step;
    s += line(x_of(v), top + plot_h, x_of(v), top + plot_h + 4, "#333333", 1);
    s += text(x_of(v), top + plot_h + 18, fmt(v, tx.decimals));
  }
  // Members first (thin, faint), then every mean on top so no series hides another's mean.
  for (size_t i = 0; i < c.series.size(); i++) {
    const std::string colour(palette()[i % palette().size()]);
    for (const Line& m : c.series[i].members) {
      const std::string d = path_data(m, x_of, y_of);
      if (!d.empty())
        s += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + colour +
             "\" stroke-width=\"0.8\" stroke-opacity=\"0.3\"/>\n";
    }
  }
  for (size_t i = 0; i < c.series.size(); i++) {
    const std::string d = path_data(c.series[i].mean, x_of, y_of);
    if (!d.empty())
      s += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + std::string(palette()[i % palette().size()]) +
           "\" stroke-width=\"2.2\" stroke-linejoin=\"round\"/>\n";
  }
  s += legend(entries, left, legend_y, plot_w, nullptr);
  s += "</svg>\n";
  return s;
}

}  // namespace canonlab::svg
