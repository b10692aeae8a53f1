#pragma once
// A minimal document model for reports: headings, paragraphs, bullet lists, tables and rows of figures,
// rendered once as GitHub-flavoured Markdown and once as self-contained HTML, so the two never disagree.
// Text may use two inline marks, `code` and **bold**; everything else is literal (escaped for HTML).
#include <string>
#include <utility>
#include <vector>

namespace canonlab::report::doc {

struct Cell {
  Cell(std::string text = {}, bool bold = false, std::string css_class = {})
      : text(std::move(text)), bold(bold), css_class(std::move(css_class)) {}
  std::string text;
  bool bold = false;
  std::string css_class;  // HTML only: "failed", "pending", ... (Markdown shows the text alone)
};

struct Table {
  std::vector<std::string> header;
  std::vector<bool> numeric;  // per column: right-aligned
  std::vector<std::vector<Cell>> rows;
};

struct Figure {
  std::string file;  // the .svg next to report.md
  std::string svg;   // inlined into the HTML
  std::string caption;
};

struct Block {
  enum class Kind { heading, paragraph, bullets, table, figures };
  explicit Block(Kind kind) : kind(kind) {}
  Kind kind;
  int level = 0;
  std::string text;
  std::vector<std::string> items;
  Table table;
  std::vector<Figure> figures;
};

class Document {
 public:
  void heading(int level, std::string text);
  void paragraph(std::string text);
  void bullets(std::vector<std::string> items);
  void table(Table t);
  void figures(std::vector<Figure> f);

  std::string markdown() const;
  std::string html(const std::string& title) const;
  const std::vector<Block>& blocks() const { return blocks_; }

 private:
  std::vector<Block> blocks_;
};

// Inline marks to HTML (text escaped first).
std::string inline_html(const std::string& text);

}  // namespace canonlab::report::doc
