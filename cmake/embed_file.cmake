# Writes OUT, a C++ source that defines `std::string_view NAMESPACE::FUNCTION()` returning
# the bytes of IN (a file embedded in the binary: no install step, nothing to fetch).
#
#   cmake -DIN=file -DOUT=file.cc -DNAMESPACE=ns -DFUNCTION=Name -P cmake/embed_file.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" digits)
math(EXPR size "${digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
get_filename_component(name "${IN}" NAME)
file(WRITE "${OUT}.tmp"
  "// Generated from ${name} by cmake/embed_file.cmake; do not edit.\n"
  "#include <string_view>\n\n"
  "namespace ${NAMESPACE} {\n"
  "namespace {\n"
  "constexpr unsigned char kBytes[] = {${bytes}};\n"
  "}  // namespace\n\n"
  "std::string_view ${FUNCTION}() {\n"
  "  return {reinterpret_cast<const char*>(kBytes), ${size}};\n"
  "}\n\n"
  "}  // namespace ${NAMESPACE}\n")
file(RENAME "${OUT}.tmp" "${OUT}")
