#include "io/paths.h"

#include <algorithm>
#include <cstdio>

namespace canonlab {

namespace fs = std::filesystem;

namespace {

// Paths longer than this are shown as their start and end: a 5000-byte name would bury the rest of the message.
constexpr size_t kShownPathBytes = 200;

std::string escape_controls(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

// Moves a cut position off UTF-8 continuation bytes, so a shortened path stays valid UTF-8.
size_t character_boundary(std::string_view text, size_t at) {
  while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) at--;
  return at;
}

bool has_nul(const fs::path& path) { return path.native().find('\0') != std::string::npos; }

}  // namespace

std::string printable_path(const fs::path& path) {
  const std::string_view text = path.native();
  if (text.size() <= kShownPathBytes) return escape_controls(text);
  const size_t head = character_boundary(text, kShownPathBytes / 2);
  const size_t tail = character_boundary(text, text.size() - kShownPathBytes / 4);
  return escape_controls(text.substr(0, head)) + "..." + escape_controls(text.substr(tail)) + " (" +
         std::to_string(text.size()) + " bytes)";
}

bool PathStatus::exists() const {
  return examined() && type != fs::file_type::not_found && type != fs::file_type::none;
}

std::string PathStatus::kind() const {
  if (!examined()) return problem;
  switch (type) {
    case fs::file_type::regular: return "a regular file";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a pipe (FIFO)";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::not_found:
    case fs::file_type::none: return "nothing (no such file or directory)";
    default: return "neither a file nor a directory";
  }
}

PathStatus path_status(const fs::path& path) {
  PathStatus s;
  if (has_nul(path)) {
    s.problem = "the path contains a NUL character (\\x00); allowed: a path without one";
    return s;
  }
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  // ENOENT and ENOTDIR (a parent is a file) come back as not_found with ec set: nothing is there, which is an answer.
  if (ec && st.type() != fs::file_type::not_found) s.problem = ec.message();
  else s.type = st.type();
  return s;
}

Error path_error(const std::string& subject, const fs::path& path, const std::string& why) {
  return Error(subject + " '" + printable_path(path) + "': " + why);
}

namespace {

PathStatus examined_status(const fs::path& path, const std::string& subject) {
  PathStatus s = path_status(path);
  if (!s.examined()) throw path_error(subject, path, s.problem);
  return s;
}

}  // namespace

bool path_exists(const fs::path& path, const std::string& subject) { return examined_status(path, subject).exists(); }

bool is_directory_at(const fs::path& path, const std::string& subject) {
  return examined_status(path, subject).is_directory();
}

void require_regular_file(const fs::path& path, const std::string& subject) {
  const PathStatus s = examined_status(path, subject);
  if (s.is_regular_file()) return;
  if (!s.exists()) throw path_error(subject, path, "no such file or directory");
  throw path_error(subject, path, "it is " + s.kind() + ", not a regular file; allowed: a regular file");
}

void create_directories_at(const fs::path& dir, const std::string& subject) {
  const PathStatus s = examined_status(dir, subject);
  if (s.is_directory()) return;
  if (s.exists())
    throw path_error(subject, dir, "it is " + s.kind() + ", not a directory; allowed: a directory (created if missing)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw path_error(subject, dir, ec.message());
}

void remove_at(const fs::path& path, const std::string& subject) {
  if (has_nul(path)) throw path_error(subject, path, path_status(path).problem);
  std::error_code ec;
  fs::remove(path, ec);  // nothing there is no error
  if (ec) throw path_error(subject, path, ec.message());
}

void rename_at(const fs::path& from, const fs::path& to, const std::string& subject) {
  for (const fs::path* p : {&from, &to})
    if (has_nul(*p)) throw path_error(subject, *p, path_status(*p).problem);
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw Error(subject + " '" + printable_path(from) + "' to '" + printable_path(to) + "': " + ec.message());
}

std::vector<fs::path> directory_listing(const fs::path& dir, const std::string& subject) {
  const PathStatus s = examined_status(dir, subject);
  if (!s.exists()) return {};
  if (!s.is_directory()) throw path_error(subject, dir, "it is " + s.kind() + ", not a directory");
  std::vector<fs::path> paths;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) paths.push_back(it->path());
  if (ec) throw path_error(subject, dir, ec.message());
  std::ranges::sort(paths);
  return paths;
}

fs::path absolute_path(const fs::path& path, const std::string& subject) {
  if (has_nul(path)) throw path_error(subject, path, path_status(path).problem);
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) throw path_error(subject, path, "cannot make it absolute: " + ec.message());
  return absolute.lexically_normal();
}

}  // namespace canonlab
