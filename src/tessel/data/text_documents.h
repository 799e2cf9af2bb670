// Documents out of the two input formats of `tessel preprocess` (and of a text --data-path):
//
// - JSONL (Megatron's format): one JSON object per line; each --json-keys key holds a document,
//   as a string or as a list of strings (sentences, each its own sequence, as Megatron's
//   --split-sentences output). Lines holding only whitespace are skipped.
// - plain text (.txt, any other name): the file is cut after every run of blank lines (lines
//   empty or of spaces, tabs and \r only), so a document is a paragraph together with the blank
//   lines after it; the documents put back together are the file, byte for byte. A file without
//   blank lines is one document.
//
// Both must be UTF-8: the first invalid byte is an error naming the file, line and offset.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/data/tokenizer.h"

namespace tessel {

// Whether a file is read as JSONL: its name ends in .jsonl or .json.
bool is_jsonl_path(const std::string& path);

// Where `text` (starting at line `first_line`, byte `first_offset` of `file`) is not UTF-8, an
// Error "FILE:LINE: invalid UTF-8 at byte offset N (0x..)".
void check_utf8(std::string_view text, const std::string& file, int64_t first_line,
                int64_t first_offset);

// The length of the first plain-text document of `text`: up to and including the run of blank
// lines after its first non-blank line (all of `text` when there is no such boundary). With
// `at_end` false a run of blank lines that reaches the end of `text` is no boundary (more of the
// file may follow), and the result is 0 when no boundary is found.
size_t text_document_length(std::string_view text, bool at_end);

// One JSONL line's documents: for each key, its sentences. Throws naming file and line for bad
// JSON, a missing key or a value that is neither a string nor a list of strings.
std::vector<std::vector<std::string>> parse_jsonl_line(std::string_view line,
                                                       const std::vector<std::string>& keys,
                                                       const std::string& file,
                                                       int64_t line_number);

// Calls document(sentences per key, line) for every document of `text`, which starts at line
// `first_line` of `file` and ends at a document boundary: each non-blank JSONL line (`keys`
// selecting its documents), or each plain-text document (one key, one sentence).
using DocumentSink = std::function<void(const std::vector<std::vector<std::string>>&, int64_t)>;
void for_each_document(std::string_view text, bool jsonl, const std::vector<std::string>& keys,
                       const std::string& file, int64_t first_line, const DocumentSink& document);

// A document's tokens and its sequence lengths, as Megatron's Encoder.encode: each non-empty
// sentence a sequence; eod (when >= 0 and the document has tokens) appended to the last.
void tokenize_document(const Tokenizer& tokenizer, const std::vector<std::string>& sentences,
                       int32_t eod, std::vector<int32_t>& tokens, std::vector<int32_t>& lengths);

}  // namespace tessel
