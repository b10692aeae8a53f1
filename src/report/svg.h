#pragma once
// Small, dependency-free SVG plots for reports: a heatmap, a strip plot (every seed a dot, the mean a line) and
// a line chart (learning curves). Output is deterministic (fixed number formatting, seeded jitter) so reports
// diff cleanly, valid XML (all text escaped), and self-contained: each function returns one <svg> element
// with xmlns, viewBox, width and height, usable both inlined in HTML and written out as a standalone .svg.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace canonlab::svg {

// Layer x head style matrix: one coloured cell per value on the viridis scale (dark purple at vmin, yellow at
// vmax), with a colour bar. Values outside [vmin, vmax] are clamped.
struct Heatmap {
  std::string title;
  std::vector<std::string> row_labels, col_labels;  // rows top to bottom, columns left to right
  std::vector<double> values;                        // row-major, rows * cols; NaN = blank cell
  double vmin = 0, vmax = 1;
  bool annotate = false;                             // write each value (as a percentage) in its cell
  std::string x_label, y_label;
  std::vector<std::pair<int, int>> marked_cells;     // (row, column) cells outlined with a small square
};
std::string heatmap(const Heatmap& h);               // a complete standalone <svg> document fragment

// Categorical x (one category per axis value), every observation a dot with a small deterministic jitter,
// the per-category mean as a line with markers; optional horizontal threshold line.
struct StripPlot {
  std::string title, x_label, y_label;
  std::vector<std::string> categories;               // x positions, left to right
  std::vector<std::vector<double>> points;           // points[c] = the observations of category c (NaN skipped)
  bool percent = false;                              // format the y axis as percentages of 1
  double y_min = 0, y_max = 1;                       // y range; widened to include every point
  bool has_threshold = false;
  double threshold = 0;
  std::string point_legend = "seed", mean_legend = "mean";
};
std::string strip_plot(const StripPlot& p);

// One coloured line per series (e.g. the mean over seeds of one axis value), plus thin faint lines for its
// members (e.g. the individual seeds), drawn in the same colour underneath.
struct Line {
  std::vector<double> x, y;                          // same length; NaN y values break the line
};
struct Series {
  std::string label;
  Line mean;                                         // drawn bold
  std::vector<Line> members;                         // drawn thin and faint
};
struct LineChart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool percent = false;                              // format the y axis as percentages of 1
  bool auto_y = true;                                // y range from the data; otherwise [y_min, y_max]
  double y_min = 0, y_max = 1;
};
std::string line_chart(const LineChart& c);

// The colours, exposed so tests (and the browser screenshot test) can look for them.
inline constexpr std::string_view kMeanColour = "#d62728";     // strip plot mean line and markers
inline constexpr std::string_view kPointColour = "#1f77b4";    // strip plot dots
inline constexpr std::string_view kThresholdColour = "#7f7f7f";
inline constexpr std::string_view kHeatLow = "#440154";        // heatmap colour at vmin (viridis)
inline constexpr std::string_view kHeatHigh = "#fde725";       // heatmap colour at vmax (viridis)
// Series colours in order (Tableau 10); series i uses palette()[i % size].
const std::vector<std::string_view>& palette();

// Helpers shared by the report: XML-escape text, and fixed formatting of numbers ("%.*f", "-0" -> "0").
std::string escape(std::string_view text);
std::string fmt(double v, int decimals);
// Viridis colour for t in [0, 1] (clamped), as "#rrggbb".
std::string heat_colour(double t);

}  // namespace canonlab::svg
