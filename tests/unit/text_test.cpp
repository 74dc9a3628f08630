// Target text made printable: io_lib's escapes (checked against what io_lib:format("~p") prints
// for the same atoms on OTP 25: '\e[2J', '\e]0;x\a' -> '\e]0;x\007', [16#9b] -> '\233'), bad
// UTF-8 as \x{HH}, and nothing in the output a terminal or a JSON writer would act on.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "base/text.hpp"

namespace {

using bb::escaped;
using bb::has_control_byte;
using bb::is_printable;
using bb::printable;
using bb::wrap_words;

// No byte below 0x20, no DEL, no C1 control (UTF-8 C2 80..C2 9F), valid UTF-8 (json dump
// throws on invalid UTF-8 with the default error handler).
void expect_safe(const std::string& s) {
    for (size_t i = 0; i < s.size(); i++) {
        auto c = static_cast<unsigned char>(s[i]);
        EXPECT_FALSE(c < 0x20 || c == 0x7f) << "byte " << int(c) << " at " << i << " of " << s;
        if (c == 0xc2 && i + 1 < s.size()) {
            auto n = static_cast<unsigned char>(s[i + 1]);
            EXPECT_FALSE(n >= 0x80 && n < 0xa0) << "C1 control at " << i;
        }
    }
    EXPECT_NO_THROW((void)nlohmann::json(s).dump());
}

TEST(Text, PlainTextUnchanged) {
    for (std::string s : {"", "lists:keyfind/3", "MyApp.Repo.all/2", "'Elixir.Foo':bar/1", "a\\b 'q' \"s\"",
                          "caf\xc3\xa9", "\xe2\x82\xac 100", "\xf0\x9f\x98\x80"}) {
        EXPECT_TRUE(is_printable(s)) << s;
        EXPECT_EQ(printable(s), s);
    }
}

TEST(Text, ControlCharactersAsIoLibPrintsThem) {
    EXPECT_EQ(printable("\x1b[2J"), "\\e[2J");
    EXPECT_EQ(printable("\x1b]0;pwned\x07"), "\\e]0;pwned\\007");
    EXPECT_EQ(printable("a\nb\rc\td\ve\bf\fg\x7fh"), "a\\nb\\rc\\td\\ve\\bf\\fg\\dh");
    EXPECT_EQ(printable(std::string("x\0y", 3)), "x\\000y");
    EXPECT_EQ(printable("\x01\x1f"), "\\001\\037");
    // U+009B, CSI to a UTF-8 terminal, and the other C1 controls: octal, as io_lib does (< 160).
    EXPECT_EQ(printable("\xc2\x9b"
                        "2J"),
              "\\2332J");
    EXPECT_EQ(printable("\xc2\x80\xc2\x9f"), "\\200\\237");
    // U+00A0 and up print as themselves.
    EXPECT_EQ(printable("\xc2\xa0"), "\xc2\xa0");
}

// A setting's text: any C0 byte or DEL is one, a tab only where it is not allowed; UTF-8 is not.
TEST(Text, ControlBytesOfASetting) {
    EXPECT_FALSE(has_control_byte("http://pyroscope:4040/a b"));
    EXPECT_FALSE(has_control_byte("caf\xc3\xa9"));
    EXPECT_TRUE(has_control_byte("a\nb"));
    EXPECT_TRUE(has_control_byte(std::string("a\0b", 3)));
    EXPECT_TRUE(has_control_byte("a\x7f"));
    EXPECT_TRUE(has_control_byte("X-Scope-OrgID:\tt"));
    EXPECT_FALSE(has_control_byte("X-Scope-OrgID:\tt", true));
    EXPECT_TRUE(has_control_byte("X-Scope-OrgID: t\r", true));
}

TEST(Text, BidiControlsEscaped) {
    EXPECT_EQ(printable("abc\xe2\x80\xae"
                        "fed"),
              "abc\\x{202E}fed");
    EXPECT_EQ(printable("\xe2\x81\xa6"), "\\x{2066}");
    EXPECT_EQ(printable("\xe2\x80\xa9"), "\xe2\x80\xa9");  // a paragraph separator is not one
}

TEST(Text, InvalidUtf8ByteByByte) {
    EXPECT_EQ(printable("a\xff"
                        "b"),
              "a\\x{FF}b");
    EXPECT_EQ(printable("\xc3"), "\\x{C3}");                                   // cut short
    EXPECT_EQ(printable("\xc0\xaf"), "\\x{C0}\\x{AF}");                        // overlong '/'
    EXPECT_EQ(printable("\xed\xa0\x80"), "\\x{ED}\\x{A0}\\x{80}");             // a surrogate
    EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\x{F4}\\x{90}\\x{80}\\x{80}");  // past U+10FFFF
    EXPECT_EQ(printable("\xe2\x82"
                        "A"),
              "\\x{E2}\\x{82}A");
    EXPECT_FALSE(is_printable("\xff"));
}

TEST(Text, QuotedLikeIoLib) {
    // io_lib:write_atom('it''s') -> 'it\'s'; backslash doubled; the other quote left alone.
    EXPECT_EQ(escaped("it's", '\''), "it\\'s");
    EXPECT_EQ(escaped("a\\b", '\''), "a\\\\b");
    EXPECT_EQ(escaped("say \"hi\"", '\''), "say \"hi\"");
    EXPECT_EQ(escaped("say \"hi\"", '"'), "say \\\"hi\\\"");
    EXPECT_EQ(escaped("\x1b[2J", '\''), "\\e[2J");
}

TEST(Text, IdempotentAndSafeOnEveryByte) {
    std::string all;
    for (int c = 0; c < 256; c++) all += static_cast<char>(c);
    for (const std::string& s : {all, all + all, std::string("\xe2\x80\xae\xc2\x9b\x1b\xff")}) {
        std::string once = printable(s);
        expect_safe(once);
        EXPECT_TRUE(is_printable(once));
        EXPECT_EQ(printable(once), once);
        std::string q = escaped(s, '\'');
        expect_safe(q);
        EXPECT_EQ(printable(q), q);
    }
    // Every 2-byte sequence: the output is always safe.
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++) {
            std::string s{static_cast<char>(a), static_cast<char>(b)};
            std::string p = printable(s);
            ASSERT_TRUE(is_printable(p)) << a << " " << b;
        }
}

TEST(Text, WrapWordsBreaksAtSpacesWithinTheWidth) {
    EXPECT_EQ(wrap_words("one two three four", 0), "one two three four");
    EXPECT_EQ(wrap_words("one two three four", 9), "one two\nthree\nfour");
    EXPECT_EQ(wrap_words("one two three four", 13), "one two three\nfour");
    // A word longer than the width stands alone; lines already broken stay so; indents stay.
    EXPECT_EQ(wrap_words("a verylongword b", 5), "a\nverylongword\nb");
    EXPECT_EQ(wrap_words("first line\n  second one", 8), "first\nline\n  second\none");
    EXPECT_EQ(wrap_words("", 10), "");
    EXPECT_EQ(wrap_words("ends\n", 10), "ends\n");
}

}  // namespace
