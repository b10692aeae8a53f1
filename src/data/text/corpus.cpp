#include "data/text/corpus.h"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "engine/error.h"
#include "io/paths.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;

bool is_pattern(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// The regular files under `dir`, recursively, sorted by path. Symbolic links to directories are not followed
// (a link cycle would never end); links to files are read like files.
std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) throw Error("--input: cannot read directory '" + dir + "': " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error("--input: cannot read directory '" + dir + "': " + ec.message());
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) files.push_back(it->path().string());
  }
  if (ec) throw Error("--input: cannot read directory '" + dir + "': " + ec.message());
  std::ranges::sort(files);
  return files;
}

std::vector<std::string> expand_one(const std::string& input) {
  // A path that cannot be examined (too long, no permission) is named with the reason, not called missing.
  const PathStatus st = path_status(input);
  if (!st.examined()) throw path_error("--input: cannot read", input, st.problem);
  if (st.is_directory()) return files_under(input);
  if (st.is_regular_file()) return {input};
  if (st.exists())
    throw Error("--input: '" + input + "' is " + st.kind() + ", not a regular file or a directory; allowed: a file, a "
                "directory or a glob pattern");
  if (!is_pattern(input))
    throw Error("--input: '" + input + "' does not exist; allowed: a file, a directory or a glob pattern");
  glob_t matches{};
  // GLOB_NOSORT: glob(3) would sort by the locale's collation; we sort by bytes below.
  const int rc = ::glob(input.c_str(), GLOB_NOSORT | GLOB_ERR, nullptr, &matches);
  std::vector<std::string> paths;
  for (size_t i = 0; rc == 0 && i < matches.gl_pathc; i++) paths.emplace_back(matches.gl_pathv[i]);
  ::globfree(&matches);
  if (rc == GLOB_ABORTED) throw Error("--input: a directory cannot be read while matching '" + input + "'");
  if (rc != 0 || paths.empty()) throw Error("--input: the pattern '" + input + "' matches nothing");
  std::ranges::sort(paths);
  std::vector<std::string> files;
  std::error_code ec;
  for (const std::string& p : paths) {
    std::vector<std::string> more = fs::is_directory(p, ec) ? files_under(p) : std::vector<std::string>{p};
    for (std::string& f : more)
      if (fs::is_regular_file(f, ec)) files.push_back(std::move(f));
  }
  return files;
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  CANONLAB_CHECK(!inputs.empty(), "--input: no input given; allowed: one or more files, directories or glob patterns");
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const std::string& input : inputs) {
    for (std::string& f : expand_one(input)) {
      std::error_code ec;
      const fs::path canonical = fs::weakly_canonical(f, ec);
      if (!seen.insert(ec ? f : canonical.string()).second)
        throw Error("--input: '" + f + "' is named twice (by '" + input + "' and an earlier input); each file may be "
                    "read once");
      files.push_back(std::move(f));
    }
  }
  CANONLAB_CHECK(!files.empty(), "--input: the inputs hold no files");
  return files;
}

std::string parse_escapes(std::string_view text, const std::string& what) {
  const auto hex = [](char h) {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); i++) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    const char c = i + 1 < text.size() ? text[i + 1] : ' ';
    const char known[] = {'n', '\n', 't', '\t', 'r', '\r', '\\', '\\', '0', '\0'};
    bool done = false;
    for (size_t k = 0; k < sizeof known; k += 2)
      if (!done && c == known[k]) out += known[k + 1], i++, done = true;
    if (done) continue;
    if (c == 'x' && i + 3 < text.size() && hex(text[i + 2]) >= 0 && hex(text[i + 3]) >= 0) {
      out += char(hex(text[i + 2]) * 16 + hex(text[i + 3]));
      i += 3;
      continue;
    }
    throw Error(what + ": '" + std::string(text) + "' has an unknown escape at byte " + std::to_string(i) +
                "; allowed: \\n \\t \\r \\\\ \\0 \\xNN");
  }
  return out;
}

DocumentReader::DocumentReader(std::vector<std::string> files, std::string delimiter)
    : files_(std::move(files)), delimiter_(std::move(delimiter)) {}

DocumentReader::~DocumentReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool DocumentReader::fill() {
  buffer_.erase(0, begin_);
  begin_ = 0;
  const size_t old = buffer_.size();
  buffer_.resize(old + kBlockBytes);
  size_t got = 0;
  while (got < kBlockBytes) {
    const ssize_t r = ::read(fd_, buffer_.data() + old + got, kBlockBytes - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error("cannot read input '" + files_[file_] + "': " + std::strerror(errno));
    if (r == 0) break;
    got += size_t(r);
  }
  buffer_.resize(old + got);
  bytes_read_ += got;
  return got > 0;
}

bool DocumentReader::next(Piece& piece) {
  for (;;) {
    if (fd_ < 0) {
      if (file_ >= files_.size()) return false;
      fd_ = ::open(files_[file_].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) throw Error("cannot read input '" + files_[file_] + "': " + std::strerror(errno));
      file_done_ = false;
      buffer_.clear();
      begin_ = 0;
    }
    const size_t found = delimiter_.empty() ? std::string::npos : buffer_.find(delimiter_, begin_);
    if (found != std::string::npos) {
      piece_.assign(buffer_, begin_, found - begin_);
      begin_ = found + delimiter_.size();
      if (piece_.empty() && !in_document_) continue;  // an empty document
      in_document_ = false;
      piece = {piece_, true};
      return true;
    }
    if (!file_done_) {
      // Keep what could be the start of a delimiter that the next block completes.
      const size_t keep = delimiter_.empty() ? 0 : delimiter_.size() - 1;
      const size_t available = buffer_.size() - begin_;
      if (available >= kBlockBytes && available > keep) {
        piece_.assign(buffer_, begin_, available - keep);
        begin_ += available - keep;
        in_document_ = true;
        piece = {piece_, false};
        return true;
      }
      if (!fill()) file_done_ = true;
      continue;
    }
    piece_.assign(buffer_, begin_, std::string::npos);  // the file's last document
    ::close(fd_);
    fd_ = -1;
    file_++;
    if (piece_.empty() && !in_document_) continue;
    in_document_ = false;
    piece = {piece_, true};
    return true;
  }
}

}  // namespace canonlab
