#include "report/report_doc.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "report/svg.h"

namespace canonlab::report::doc {

void Document::heading(int level, std::string text) {
  Block b{Block::Kind::heading};
  b.level = level;
  b.text = std::move(text);
  blocks_.push_back(std::move(b));
}

void Document::paragraph(std::string text) {
  Block b{Block::Kind::paragraph};
  b.text = std::move(text);
  blocks_.push_back(std::move(b));
}

void Document::bullets(std::vector<std::string> items) {
  Block b{Block::Kind::bullets};
  b.items = std::move(items);
  blocks_.push_back(std::move(b));
}

void Document::table(Table t) {
  Block b{Block::Kind::table};
  b.table = std::move(t);
  blocks_.push_back(std::move(b));
}

void Document::figures(std::vector<Figure> f) {
  Block b{Block::Kind::figures};
  b.figures = std::move(f);
  blocks_.push_back(std::move(b));
}

std::string inline_html(const std::string& text) {
  const std::string s = svg::escape(text);
  std::string out;
  bool in_code = false, in_bold = false;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '`') {
      out += in_code ? "</code>" : "<code>";
      in_code = !in_code;
    } else if (!in_code && s.compare(i, 2, "**") == 0) {
      out += in_bold ? "</strong>" : "<strong>";
      in_bold = !in_bold;
      i++;
    } else {
      out += s[i];
    }
  }
  // An unbalanced mark in user text must not swallow the rest of the page.
  if (in_code) out += "</code>";
  if (in_bold) out += "</strong>";
  return out;
}

namespace {

// '<' before a letter, '/', '!' or '?' opens raw HTML or an autolink in Markdown; '&' before "name;" or "#123;" is
// a character reference. Elsewhere both are plain text and stay as written ("B < A").
bool starts_html(std::string_view rest) {
  return rest.size() >= 2 && rest[0] == '<' &&
         (std::isalpha(static_cast<unsigned char>(rest[1])) || rest[1] == '/' || rest[1] == '!' || rest[1] == '?');
}
bool starts_reference(std::string_view rest) {
  size_t i = 1;
  if (i < rest.size() && rest[i] == '#') i++;
  const size_t first = i;
  while (i < rest.size() && i - first < 32 && std::isalnum(static_cast<unsigned char>(rest[i]))) i++;
  return i > first && i < rest.size() && rest[i] == ';';
}

void append_markdown_text(std::string& out, std::string_view text) {
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (c == '<' && starts_html(text.substr(i))) out += "&lt;";
    else if (c == '&' && starts_reference(text.substr(i))) out += "&amp;";
    else if (c == '\\' || c == '[') out.append(1, '\\').append(1, c);  // no escapes, links or images of the text's own
    else out += c;
  }
}

// Text as Markdown, meaning what inline_html makes of it in the HTML: `code` and **bold** marks, everything else
// literal. Text from the sweep (its description, axis names, a run's error) used to reach report.md as written, so
// a "<script>" that report.html escapes was raw HTML there. Code spans are found as inline_html finds them, every
// backtick opening or closing one, and are written so that Markdown finds the same ones: never empty, never next
// to another backtick (adjacent spans are merged), on one line, one left open closed at the end. Inside them all is
// literal.
std::string markdown_inline(std::string_view text) {
  std::string out;
  size_t start = 0;  // of the plain text or the code span being read
  bool in_code = false;
  for (size_t i = 0; i <= text.size(); i++) {
    const bool end = i == text.size();
    if (!end && text[i] != '`') continue;
    if (!in_code) {
      append_markdown_text(out, text.substr(start, i - start));
      start = i + 1;
      in_code = true;
    } else if (!end && i + 1 < text.size() && text[i + 1] == '`') {
      i++;  // "``" inside a span: it closes and at once reopens, so the span goes on
      continue;
    } else {
      std::string code(text.substr(start, i - start));
      std::erase(code, '`');
      // A span cannot cross a blank line in Markdown: the rest would be read as text.
      std::ranges::replace_if(code, [](char c) { return c == '\n' || c == '\r'; }, ' ');
      if (!code.empty()) out.append("`").append(code).append("`");
      start = i + 1;
      in_code = false;
    }
  }
  return out;
}

std::string markdown_cell(const Cell& c) {
  std::string t;
  for (char ch : markdown_inline(c.text)) t += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return c.bold && !t.empty() ? "**" + t + "**" : t;
}

constexpr const char* kCss = R"(
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; color: #222; max-width: 1160px;
       margin: 16px auto; padding: 0 16px; font-size: 14px; line-height: 1.45; background: #ffffff; }
h1 { font-size: 22px; margin: 8px 0 10px; }
h2 { font-size: 18px; margin: 26px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 3px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
p, ul { margin: 6px 0; }
code { background: #f2f2f2; padding: 0 4px; border-radius: 3px; font-size: 13px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e2e2e2; text-align: left; vertical-align: top; }
th { background: #f5f5f5; font-weight: 600; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.failed { color: #b00020; }
td.pending, td.running, td.missing, td.na { color: #999; font-style: italic; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; margin: 8px 0 12px; }
figure { margin: 0; }
figure svg { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 12px; color: #555; max-width: 360px; margin-top: 2px; }
)";

}  // namespace

std::string Document::markdown() const {
  std::string md;
  for (const Block& b : blocks_) {
    switch (b.kind) {
      case Block::Kind::heading: md += std::string(size_t(b.level), '#') + " " + markdown_inline(b.text) + "\n\n"; break;
      case Block::Kind::paragraph: md += markdown_inline(b.text) + "\n\n"; break;
      case Block::Kind::bullets:
        for (const std::string& item : b.items) md += "- " + markdown_inline(item) + "\n";
        md += "\n";
        break;
      case Block::Kind::table: {
        const Table& t = b.table;
        md += "|";
        for (const std::string& h : t.header) md.append(" ").append(markdown_cell({h})).append(" |");
        md += "\n|";
        for (size_t c = 0; c < t.header.size(); c++)
          md += c < t.numeric.size() && t.numeric[c] ? "---:|" : "---|";
        md += "\n";
        for (const auto& row : t.rows) {
          md += "|";
          for (const Cell& cell : row) md.append(" ").append(markdown_cell(cell)).append(" |");
          md += "\n";
        }
        md += "\n";
        break;
      }
      case Block::Kind::figures: {
        // Images in one paragraph sit side by side on GitHub when they fit. Alt text is plain (no marks).
        for (size_t i = 0; i < b.figures.size(); i++) {
          std::string alt = b.figures[i].caption;
          std::erase_if(alt, [](char c) { return c == '`' || c == '*' || c == '[' || c == ']'; });
          md.append(i ? " ![" : "![").append(markdown_inline(alt)).append("](").append(b.figures[i].file).append(")");
        }
        md += "\n\n";
        for (const Figure& f : b.figures)
          if (!f.caption.empty()) md += "*" + markdown_inline(f.caption) + "*  \n";
        md += "\n";
        break;
      }
    }
  }
  return md;
}

std::string Document::html(const std::string& title) const {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  svg::escape(title) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n";
  for (const Block& b : blocks_) {
    switch (b.kind) {
      case Block::Kind::heading: {
        const std::string tag = std::string("h").append(std::to_string(b.level));
        h += "<" + tag + ">" + inline_html(b.text) + "</" + tag + ">\n";
        break;
      }
      case Block::Kind::paragraph: h += "<p>" + inline_html(b.text) + "</p>\n"; break;
      case Block::Kind::bullets:
        h += "<ul>\n";
        for (const std::string& item : b.items) h += "<li>" + inline_html(item) + "</li>\n";
        h += "</ul>\n";
        break;
      case Block::Kind::table: {
        const Table& t = b.table;
        auto num = [&](size_t c) { return c < t.numeric.size() && t.numeric[c]; };
        h += "<table>\n<thead><tr>";
        for (size_t c = 0; c < t.header.size(); c++)
          h += std::string(num(c) ? "<th class=\"num\">" : "<th>") + inline_html(t.header[c]) + "</th>";
        h += "</tr></thead>\n<tbody>\n";
        for (const auto& row : t.rows) {
          h += "<tr>";
          for (size_t c = 0; c < row.size(); c++) {
            std::string cls = num(c) ? "num" : "";
            if (!row[c].css_class.empty()) cls += (cls.empty() ? "" : " ") + row[c].css_class;
            const std::string body = inline_html(row[c].text);
            h += (cls.empty() ? std::string("<td>") : "<td class=\"" + cls + "\">") +
                 (row[c].bold ? "<strong>" + body + "</strong>" : body) + "</td>";
          }
          h += "</tr>\n";
        }
        h += "</tbody>\n</table>\n";
        break;
      }
      case Block::Kind::figures:
        h += "<div class=\"figures\">\n";
        for (const Figure& f : b.figures)
          h += "<figure>\n" + f.svg + "<figcaption>" + inline_html(f.caption) + "</figcaption>\n</figure>\n";
        h += "</div>\n";
        break;
    }
  }
  h += "</body>\n</html>\n";
  return h;
}

}  // namespace canonlab::report::doc
