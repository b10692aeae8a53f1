// io/json_read.h: the depth limit at parse time, bounded messages, and the project rule that no message dumps a value
// read from a file (checked here by reading src/).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "expect_error.h"
#include "io/json_read.h"

namespace canonlab {
namespace {

using nlohmann::json;
using test_support::error_of;

std::string nested_arrays(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonRead, DepthIsLimitedAtParseTime) {
  EXPECT_EQ(parse_json(nested_arrays(5), "t", 5), json::parse(nested_arrays(5)));
  const std::string too_deep = error_of([] { parse_json(nested_arrays(6), "file 'x.json'", 5); });
  EXPECT_CONTAINS(too_deep, "file 'x.json': JSON nests deeper than 5 levels at '[][][][][]['");
  // 80,000 levels in a key: refused at the limit, naming where, in a short message
  const std::string text = R"({"model": {"hidden_size": )" + nested_arrays(80'000) + "}}";
  const std::string deep = error_of([&] { parse_json(text, "config.json"); });
  EXPECT_CONTAINS(deep, "at 'model.hidden_size[][][]");
  EXPECT_LT(deep.size(), 300u);
  EXPECT_TRUE(parse_json_or_discarded(text).is_discarded());
  EXPECT_FALSE(parse_json_or_discarded(R"({"a": [1]})").is_discarded());
  // ordered_json (safetensors headers) goes through the same limit
  EXPECT_CONTAINS(error_of([] { parse_json<nlohmann::ordered_json>(nested_arrays(4), "h", 3); }), "deeper than 3");
}

TEST(JsonRead, ParseErrorsAreBounded) {
  // nlohmann quotes the last token read, here an unterminated 100 KB string
  const std::string text = "{\"a\": \"" + std::string(100'000, 'x');
  const std::string message = error_of([&] { parse_json(text, "big.json"); });
  EXPECT_CONTAINS(message, "big.json: not valid JSON (");
  EXPECT_LT(message.size(), 400u);
  EXPECT_TRUE(parse_json_or_discarded(text).is_discarded());
}

TEST(JsonRead, BriefIsBoundedAndNeverRecursive) {
  EXPECT_EQ(brief(json::parse(R"({"a":[1,2,{"b":null}],"c":"d"})")), R"({"a":[1,2,{"b":null}],"c":"d"})");
  EXPECT_EQ(brief(json(7)), "7");
  EXPECT_EQ(brief(json::array()), "[]");
  // A value built 200,000 levels deep in memory (parsing would refuse it): a recursive printer overflows the stack.
  json deep = json::array();
  for (int i = 0; i < 200'000; i++) deep = json::array({std::move(deep)});
  const std::string shown = brief(deep, 40);
  EXPECT_EQ(shown, std::string(40, '[') + "...");
  // A long string is cut, not copied whole, and never inside a UTF-8 sequence
  const std::string shown_string = brief(json(std::string(100'000, 'y')), 20);
  EXPECT_EQ(shown_string, "\"" + std::string(19, 'y') + "...");
  const std::string accents = brief(json("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"), 5);  // "éééé"
  EXPECT_EQ(accents, "\"\xc3\xa9\xc3\xa9...");
  EXPECT_EQ(brief_text("short"), "short");
  EXPECT_EQ(brief_text(std::string(1000, 'z'), 10), std::string(10, 'z') + "... (1000 bytes)");
}

// docs/engine.md, "Untrusted input": no message built with dump(). A statement (the text between ';', '{' and '}',
// comments removed) that throws, fails or checks and calls dump() is what this rule forbids; brief() is the way to
// show a value.
TEST(JsonRead, NoMessageDumpsAValue) {
  namespace fs = std::filesystem;
  const std::regex message(R"(throw |Error\(|fail\(|CANONLAB_CHECK|bad\(|corrupt\(|refuse\()");
  const std::regex line_comment(R"(//[^\n]*)");
  std::vector<std::string> offenders;
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(CANONLAB_SOURCE_DIR) / "src")) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
    files++;
    std::ifstream in(entry.path());
    const std::string text = std::regex_replace(std::string(std::istreambuf_iterator<char>(in), {}), line_comment, "");
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = std::min(text.find_first_of(";{}", start), text.size());
      const std::string statement = text.substr(start, end - start);
      if (statement.find("dump(") != std::string::npos && std::regex_search(statement, message))
        offenders.push_back(entry.path().lexically_relative(CANONLAB_SOURCE_DIR).string() + ":" +
                            std::to_string(1 + std::count(text.begin(), text.begin() + ptrdiff_t(start), '\n')) + ": " +
                            statement);
      start = end + 1;
    }
  }
  EXPECT_GT(files, 100u);  // the walk found the sources
  for (const std::string& o : offenders) ADD_FAILURE() << "a message dumps a value (use brief()): " << o;
}

}  // namespace
}  // namespace canonlab
