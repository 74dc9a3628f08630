// Text for people: sizes; and text that came from the target (atom text, JIT symbol names, native symbols, file paths, term
// text) made safe to print: no control byte reaches a terminal or a file, and what is printed is
// valid UTF-8 (JSON writers need it). Characters are escaped as io_lib prints them inside quotes
// (io_lib.erl string_char/4, unicode_as_unicode):
//   - \n \r \t \v \b \f \e and \d (DEL) by name;
//   - other code points below 160 (C0 controls, and the C1 controls 128-159 that a UTF-8 terminal
//     takes for CSI and OSC) as three octal digits, \033;
//   - printable ASCII and code points from 160 up as they are.
// Two additions io_lib does not need (its input is always a list of code points): a byte that is
// not part of valid UTF-8 (overlong, surrogate, cut short, past U+10FFFF) is \x{HH}, its value;
// and the Unicode bidirectional controls (U+202A-U+202E, U+2066-U+2069), which reorder what a
// terminal shows after them, are \x{202E}.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace bb {

// "512 B", "37 KiB", "12 MiB": whole units, up to 10 of the next.
std::string human_bytes(uint64_t bytes);
// A growth in those units: "+37 KiB", "-512 B".
std::string signed_bytes(int64_t bytes);

// The inside of a quoted atom or string: as above, and `quote` and backslash escaped as well
// ('\'' for an atom, '"' for a string). printed form: quote + escaped(s, quote) + quote.
std::string escaped(std::string_view bytes, char quote);

// Text for a report (a name built from atoms, a path, a symbol): control characters and bad
// bytes escaped as above, backslashes and quotes left alone. Idempotent: its output has nothing
// left to escape, so text that went through it once (or through `escaped`) passes unchanged.
std::string printable(std::string_view bytes);

// JSON text that never throws on bytes that are not UTF-8 (nlohmann's default does): they become
// U+FFFD. Strings from the target should be printable() first; this is for what slips by.
std::string json_text(const nlohmann::json& j, int indent = -1);

// How wide a table on stdout may be: COLUMNS when set (as a shell sets it), else the terminal's
// width when stdout is one, else 0 (piped: no limit).
size_t output_columns();

// `s` in `width` columns at most, cut at its end with "..." (0: as it is). For a table's names
// and rows.
std::string fit(std::string_view s, size_t width);

// `text` with each of its lines broken at spaces into lines of at most `columns` (a word longer
// than that alone on its line); 0: unchanged. For prose headings; tables fit by their columns.
std::string wrap_words(std::string_view text, size_t columns);

// True when printable(bytes) == bytes: nothing to escape (the common case, checked first so
// clean names are not copied).
bool is_printable(std::string_view bytes);

// Whether a setting's text holds an ASCII control byte (DEL too), which would end a line or a
// header and start another (header injection); a tab only where `tab` is not allowed.
bool has_control_byte(std::string_view s, bool tab_allowed = false);

}  // namespace bb
