#include "common/tokenizer/jinja/py_string.h"

#include <cstdio>

#include "common/util/utf8.h"

namespace tandem::tokenizer::jinja::py {

uint32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  size_t n = 0;
  const uint32_t cp = utf8::DecodeCodepoint(s.substr(i), &n);
  if (n == 0) {  // ill-formed: the lone byte stands for itself
    *len = 1;
    return static_cast<unsigned char>(s[i]);
  }
  *len = n;
  return cp;
}

bool IsSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    offsets.push_back(i);
    DecodeAt(s, i, &len);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t Length(std::string_view s) {
  size_t n = 0, len = 0;
  for (size_t i = 0; i < s.size(); i += len, ++n) DecodeAt(s, i, &len);
  return n;
}

namespace {

// The start of the code point that ends at byte `end` (> 0).
size_t PrevStart(std::string_view s, size_t end) {
  for (size_t back = 2; back <= 4 && back <= end; ++back) {
    size_t len = 0;
    DecodeAt(s, end - back, &len);
    if (len == back) return end - back;
  }
  return end - 1;
}

template <typename Pred>
std::string_view StripIf(std::string_view s, bool left, bool right, Pred strip) {
  size_t b = 0, e = s.size(), len = 0;
  while (left && b < e && strip(s.substr(b, (DecodeAt(s, b, &len), len)))) b += len;
  while (right && e > b) {
    const size_t start = PrevStart(s, e);
    if (start < b || !strip(s.substr(start, e - start))) break;
    e = start;
  }
  return s.substr(b, e - b);
}

}  // namespace

std::string_view Strip(std::string_view s, bool left, bool right) {
  return StripIf(s, left, right, [](std::string_view cp) {
    size_t len = 0;
    return IsSpace(DecodeAt(cp, 0, &len));
  });
}

std::string_view StripChars(std::string_view s, std::string_view chars, bool left, bool right) {
  const std::vector<size_t> offsets = CodePointOffsets(chars);
  return StripIf(s, left, right, [&](std::string_view cp) {
    for (size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (chars.substr(offsets[k], offsets[k + 1] - offsets[k]) == cp) return true;
    }
    return false;
  });
}

std::vector<std::string> Split(std::string_view s, std::string_view sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!sep.empty()) {
    size_t i = 0;
    for (size_t j; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
                   (j = s.find(sep, i)) != std::string_view::npos;
         i = j + sep.size()) {
      parts.emplace_back(s.substr(i, j - i));
    }
    parts.emplace_back(s.substr(i));
    return parts;
  }
  // Whitespace: runs separate, and no empty strings come out.
  size_t i = 0, len = 0;
  while (true) {
    s = Strip(s.substr(i), /*left=*/true, /*right=*/false);
    if (s.empty()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.emplace_back(s);  // the rest, trailing whitespace and all
      break;
    }
    for (i = 0; i < s.size() && !IsSpace(DecodeAt(s, i, &len)); i += len) {
    }
    parts.emplace_back(s.substr(0, i));
  }
  return parts;
}

namespace {
char AsciiUpper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool AsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
}  // namespace

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiUpper(c);
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiLower(c);
  return out;
}

std::string Title(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    c = prev_cased ? AsciiLower(c) : AsciiUpper(c);
    prev_cased = AsciiAlpha(c);
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = AsciiUpper(out[0]);
  return out;
}

namespace {

// Python's str.isprintable() is false for these (control, format and separator
// characters other than the plain space); repr() escapes them.
bool NotPrintable(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || (IsSpace(cp) && cp != ' ') || cp == 0xAD ||
         (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) ||
         (cp >= 0x2060 && cp <= 0x2064) || cp == 0xFEFF;
}

}  // namespace

std::string Repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const char quote = has_single && s.find('"') == std::string_view::npos ? '"' : '\'';
  std::string out(1, quote);
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const uint32_t cp = DecodeAt(s, i, &len);
    char buf[16];
    if (cp == '\\' || cp == static_cast<unsigned char>(quote)) {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (NotPrintable(cp)) {
      const char* fmt = cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x";
      std::snprintf(buf, sizeof(buf), fmt, cp);
      out += buf;
    } else {
      out.append(s.substr(i, len));
    }
  }
  out.push_back(quote);
  return out;
}

void AppendJsonString(std::string_view s, std::string* out, bool ascii) {
  out->push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (ascii && static_cast<unsigned char>(c) >= 0x80) {
      // json.dumps' ensure_ascii: \uXXXX, lowercase, past U+FFFF as a surrogate pair.
      size_t len = 0;
      const uint32_t cp = DecodeAt(s, i, &len);
      char buf[16];
      if (cp > 0xFFFF) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      *out += buf;
      i += len - 1;
      continue;
    }
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

}  // namespace tandem::tokenizer::jinja::py
