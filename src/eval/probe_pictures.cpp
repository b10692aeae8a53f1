#include "eval/probe_pictures.h"

#include <limits>
#include <sstream>

namespace canonlab {

namespace {

std::string percent(double x) { return svg::fmt(100.0 * x, 1) + "%"; }

// An <svg> element for inlining in HTML: without an XML declaration, should the renderer write one.
std::string inline_svg(const std::string& svg) {
  if (svg.rfind("<?xml", 0) != 0) return svg;
  const size_t end = svg.find("?>");
  return end == std::string::npos ? svg : svg.substr(svg.find('<', end));
}

}  // namespace

svg::Heatmap ipmr_heatmap(const IpmrResult& ipmr, int delta) {
  svg::Heatmap h;
  // Short: the picture is only as wide as its grid (4 heads: about 360 px); the page caption says the rest.
  h.title = "IPMR δ=" + std::to_string(delta) + ": mean " + percent(ipmr.mean.at(delta)) + ", global " +
            percent(ipmr.global.at(delta));
  for (int l = 0; l < ipmr.n_layers; l++) h.row_labels.push_back('L' + std::to_string(l));
  for (int k = 0; k < ipmr.n_heads; k++) h.col_labels.push_back('H' + std::to_string(k));
  h.values = ipmr.per_head.at(delta);
  h.annotate = true;
  h.x_label = "head";
  h.y_label = "layer";
  return h;
}

svg::Heatmap attention_heatmap(const AttentionMaps& maps, int example, int head_index, const CopyTask& task,
                               std::span<const int> deltas, const IpmrResult* ipmr) {
  const int T = maps.seq_len;
  const HeadId& head = maps.heads[head_index];
  const std::vector<int>& tokens = maps.tokens[example];
  svg::Heatmap h;
  h.title = head.name() + ", example " + std::to_string(example);
  if (ipmr) {
    for (int d : deltas)
      h.title += ", IPMR δ=" + std::to_string(d) + " " +
                 percent(ipmr->per_head.at(d)[size_t(head.layer) * ipmr->n_heads + head.head]);
  }
  for (int t : tokens) h.row_labels.push_back(task.token_text(t));
  h.col_labels = h.row_labels;
  std::span<const float> probs = maps.map(example, head_index);
  h.values.resize(size_t(T) * T);
  for (int q = 0; q < T; q++)
    for (int k = 0; k < T; k++)
      h.values[size_t(q) * T + k] = k > q ? std::numeric_limits<double>::quiet_NaN() : double(probs[size_t(q) * T + k]);
  std::string outlined;
  for (int d : deltas) {
    for (const Cell& c : induction_targets(tokens, task.first_query(), task.last_query(), d))
      h.marked_cells.emplace_back(c.query, c.key);
    outlined += (outlined.empty() ? "p+" : " and p+") + std::to_string(d);
  }
  h.x_label = "key (attended token); outlined: induction target " + outlined + ", p = earlier occurrence";
  h.y_label = "query token";
  return h;
}

std::string probe_page_html(const std::string& heading, const std::string& text_report,
                            std::span<const FigureGroup> groups) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << svg::escape(heading)
     << "</title>\n<style>\nbody{font-family:sans-serif;margin:1.5em;color:#222}\n"
        "h1{font-size:1.4em;overflow-wrap:anywhere}pre{background:#f6f6f6;padding:0.8em;overflow-x:auto}\n"
        ".figures{display:flex;flex-wrap:wrap;gap:1.2em;align-items:flex-start}\n"
        "figure{margin:0}figcaption{font-size:0.85em;color:#555}\n"
        // Attention maps of long sequences are drawn with the heatmap's fixed cell size; scale them to the page.
        ".figures svg{max-width:min(100%,760px);height:auto}\n</style>\n</head>\n<body>\n<h1>"
     << svg::escape(heading) << "</h1>\n<pre>" << svg::escape(text_report) << "</pre>\n";
  for (const FigureGroup& g : groups) {
    os << "<h2>" << svg::escape(g.title) << "</h2>\n";
    if (!g.note.empty()) os << "<p>" << svg::escape(g.note) << "</p>\n";
    os << "<div class=\"figures\">\n";
    for (const Figure& f : g.figures)
      os << "<figure>\n" << inline_svg(f.svg) << "\n<figcaption>" << svg::escape(f.caption) << " (" << svg::escape(f.file)
         << ")</figcaption>\n</figure>\n";
    os << "</div>\n";
  }
  os << "</body>\n</html>\n";
  return os.str();
}

}  // namespace canonlab
