#pragma once
// The input side of `canonlab data prepare`: which files, and the documents in them. Files are read in blocks, so
// no document or file has to fit in memory.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace canonlab {

// The files named by --input, in a fixed order: each argument in the order given; a directory's regular files
// recursively, sorted by path (byte order, not the locale's); a glob pattern (* ? [) expanded by us and sorted the
// same way, so the result never depends on the shell. A file named twice is an error, as is a pattern that matches
// nothing or a path that is neither a regular file nor a directory.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

// C-style escapes of --doc-delimiter: \n \t \r \\ \0 and \xNN; anything else after a backslash is an error.
std::string parse_escapes(std::string_view text, const std::string& what);

// Reads the documents of the input files in order: each file is one document, or, with a delimiter, every part of
// a file between delimiters is one (the delimiter belongs to neither side; documents never span files). Empty
// documents are skipped. Text comes in pieces of at most kBlockBytes; a document's last piece says so.
class DocumentReader {
 public:
  static constexpr size_t kBlockBytes = size_t(4) << 20;

  DocumentReader(std::vector<std::string> files, std::string delimiter);

  struct Piece {
    std::string_view text;  // valid until the next call of next()
    bool ends_document = false;
  };
  // The next piece of the current document (the first one of the next document after an ending piece); false at
  // the end of the last file. Pieces are never empty, except that an ending piece may be empty.
  bool next(Piece& piece);
  uint64_t bytes_read() const { return bytes_read_; }  // of the files, delimiters included

 private:
  bool fill();  // reads the next block of the current file into buffer_; false at its end

  std::vector<std::string> files_;
  std::string delimiter_;
  size_t file_ = 0;
  int fd_ = -1;
  bool file_done_ = true;
  std::string buffer_;   // unread text of the current file
  size_t begin_ = 0;     // first unread byte of buffer_
  std::string piece_;    // the text handed out by the last next()
  bool in_document_ = false;  // a piece of the current document has been handed out
  uint64_t bytes_read_ = 0;

 public:
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;
};

}  // namespace canonlab
