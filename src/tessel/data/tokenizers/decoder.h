// tokenizer.json's decoders, the chain Hugging Face's tokenizers library runs over the tokens of
// a decode (each step maps the list of token strings to a new list, which is joined at the end):
// ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace and a Sequence of them.
#pragma once

#include <string>
#include <vector>

namespace tessel {

struct DecoderStep {
  enum class Kind { ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace };
  Kind kind = Kind::Fuse;
  std::string pattern, content;  // Replace: every `pattern` in a token becomes `content`;
                                 // Strip: `content` is the character stripped; Metaspace: the replacement
  int start = 0, stop = 0;       // Strip: at most this many off each token's start, end
  bool prepend = true;           // Metaspace: its prepend_scheme is not "never"
};

class Decoder {
 public:
  std::vector<DecoderStep> steps;
  // What joins the tokens at the end: nothing, or " " for a tokenizer.json without a decoder
  // (the library joins the tokens with spaces then).
  std::string separator;

  // The tokens' text: the steps in order, then the list joined. ByteLevel is a plain join here
  // because byte-level vocabularies are held as their bytes already.
  std::string decode(std::vector<std::string> tokens) const;
};

}  // namespace tessel
