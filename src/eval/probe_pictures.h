#pragma once
// The probe's pictures: an IPMR heatmap per delta (layer x head, percentages in the cells), an attention map
// per (example, head) with the induction targets outlined, and one self-contained HTML page showing them all.
// Drawing is src/report/svg.h's; this file only decides what goes into each picture.
#include <span>
#include <string>
#include <vector>

#include "data/copy_task.h"
#include "eval/attention_maps.h"
#include "eval/ipmr.h"
#include "report/svg.h"

namespace canonlab {

// Rows L0.., columns H0.., values IPMR[l][h](delta) in [0, 1].
svg::Heatmap ipmr_heatmap(const IpmrResult& ipmr, int delta);

// Rows = query positions, columns = key positions, both labelled with the token text. Cells above the
// diagonal are blank (the causal mask, not a learned zero). Outlined: the induction targets at every delta
// (p + 1, and p + key-shift offset), so an induction head shows one dark outlined cell per second-block row.
// `ipmr` (optional) puts the head's rates in the title.
svg::Heatmap attention_heatmap(const AttentionMaps& maps, int example, int head_index, const CopyTask& task,
                               std::span<const int> deltas, const IpmrResult* ipmr);

// One picture of the page, with the file it was also written to.
struct Figure {
  std::string file, caption, svg;
};
struct FigureGroup {
  std::string title, note;
  std::vector<Figure> figures;
};

// A standalone page: heading, the text report in a <pre>, then each group's figures inlined.
std::string probe_page_html(const std::string& heading, const std::string& text_report,
                            std::span<const FigureGroup> groups);

}  // namespace canonlab
