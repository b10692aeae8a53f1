#pragma once
// File system calls on paths that a user named (a config's or sweep's `base:`, --out, run directories, data files),
// with errors that say who named the path. std::filesystem's throwing calls end in a bare filesystem_error
// ("status: File name too long [path]") that names neither the file nor the key the path came from, and its
// error_code calls, used as a yes/no, turn "File name too long" or "Permission denied" into "does not exist".
//
// Every function here throws canonlab::Error "<subject> '<path>': <why>", where the caller's subject says who named
// the path and what was to be done with it: "sweep.yaml:3: base: cannot read config file", "--out: cannot create
// sweep directory". A path holding a NUL character is refused rather than silently cut short at it by the system
// call, which would then act on another file.
#include <filesystem>
#include <string>
#include <vector>

#include "engine/error.h"

namespace canonlab {

// A path as messages quote it (without the quotes): control characters such as NUL as \xNN, and a path longer
// than 200 bytes shortened in the middle ("/tmp/aaaa...aaaa.yaml (5000 bytes)").
std::string printable_path(const std::filesystem::path& path);

// What is at a path (symbolic links followed), found out without throwing.
struct PathStatus {
  std::filesystem::file_type type = std::filesystem::file_type::none;
  // Why the type could not be found out: "File name too long", "Permission denied", "contains a NUL character";
  // empty when it was.
  std::string problem;

  bool examined() const { return problem.empty(); }
  bool exists() const;
  bool is_regular_file() const { return type == std::filesystem::file_type::regular; }
  bool is_directory() const { return type == std::filesystem::file_type::directory; }
  // What is there, for messages: "a directory", "a regular file", "a character device", "a pipe (FIFO)", ...;
  // "nothing (no such file or directory)" when nothing is, or the problem.
  std::string kind() const;
};
PathStatus path_status(const std::filesystem::path& path);

// The Error "<subject> '<path>': <why>".
Error path_error(const std::string& subject, const std::filesystem::path& path, const std::string& why);

// Whether anything is at `path`; throws when that cannot be found out.
bool path_exists(const std::filesystem::path& path, const std::string& subject);
// Whether `path` is a directory (false when nothing is there); throws when that cannot be found out.
bool is_directory_at(const std::filesystem::path& path, const std::string& subject);
// Throws unless `path` is a regular file (or a link to one), saying what is there instead.
void require_regular_file(const std::filesystem::path& path, const std::string& subject);
// Creates the directory and its parents where missing; throws if that fails or something else has the name.
void create_directories_at(const std::filesystem::path& dir, const std::string& subject);
// Removes a file or an empty directory if it is there.
void remove_at(const std::filesystem::path& path, const std::string& subject);
// Renames (moves) `from` to `to` on the same file system.
void rename_at(const std::filesystem::path& from, const std::filesystem::path& to, const std::string& subject);
// The paths in a directory, not recursive, sorted; none when nothing is at `dir`.
std::vector<std::filesystem::path> directory_listing(const std::filesystem::path& dir, const std::string& subject);
// `path` made absolute against the working directory, lexically normal ("a/../b" -> "b").
std::filesystem::path absolute_path(const std::filesystem::path& path, const std::string& subject);

}  // namespace canonlab
