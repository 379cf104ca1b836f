#include "common/tokenizer/tokenizer.h"

#include <fstream>
#include <set>

#include "common/model/hf_directory.h"
#include "common/tokenizer/byte_level_bpe.h"
#include "common/util/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/gguf_builder.h"
#include "tests/test_paths.h"

namespace tandem::tokenizer {
namespace {

using ::tandem::testing::DefaultModelPath;
using ::tandem::testing::GgufBuilder;
using ::tandem::testing::TestDataPath;
using ::testing::ElementsAre;

nlohmann::json LoadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return nlohmann::json::parse(in);
}

struct Loaded {
  std::unique_ptr<model::GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

Loaded Load(const std::string& path) {
  Loaded l;
  auto f = model::OpenModel(path);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return l;
  l.file = std::move(*f);
  auto t = Tokenizer::FromGguf(*l.file);
  EXPECT_TRUE(t.ok()) << t.status();
  if (t.ok()) l.tok = std::move(*t);
  return l;
}

// Every golden case: ids identical to the reference, and decode(encode(s)) equal to
// the reference's decoding (the text itself, or "decoded" where the reference says
// otherwise: SentencePiece writes a literal "▁" back as a space).
// Whose ids a golden case must give: Hugging Face's ("ids"), or, for a GGUF, llama.cpp's
// where the golden records that they differ ("llama_cpp_ids": the families whose
// tokenizer.json normalizes to NFC, which a GGUF does not carry and llama.cpp skips).
enum class Reference { kHuggingFace, kLlamaCpp };

void CheckGolden(const Tokenizer& tok, const nlohmann::json& golden, size_t min_cases,
                 bool parse_special = true, Reference reference = Reference::kHuggingFace) {
  const auto& cases = golden.at("cases");
  ASSERT_GE(cases.size(), min_cases);
  EncodeOptions no_bos;
  no_bos.add_special = false;
  no_bos.parse_special = parse_special;
  int mismatches = 0, roundtrip_failures = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const bool llama_cpp = reference == Reference::kLlamaCpp && c.contains("llama_cpp_ids");
    const std::vector<int32_t> want = c.at(llama_cpp ? "llama_cpp_ids" : "ids");
    auto got = tok.Encode(text, no_bos);
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got != want && mismatches++ < 5) {
      ADD_FAILURE() << "ids differ for " << nlohmann::json(text).dump() << "\n  got  "
                    << nlohmann::json(*got).dump() << "\n  want " << nlohmann::json(want).dump();
    }
    auto back = tok.Decode(*got);
    ASSERT_TRUE(back.ok());
    // Unnormalized ids decode to the text itself.
    const std::string expected_text = llama_cpp ? text : c.value("decoded", text);
    if (*back != expected_text && roundtrip_failures++ < 5) {
      ADD_FAILURE() << "round trip of " << nlohmann::json(text).dump() << " gave "
                    << nlohmann::json(*back).dump();
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " cases";
  EXPECT_EQ(roundtrip_failures, 0);
}

TEST(Tokenizer, MatchesHuggingFaceOnDefaultModel) {
  Loaded l = Load(DefaultModelPath());
  ASSERT_NE(l.tok, nullptr) << "run scripts/fetch-model.sh";
  CheckGolden(*l.tok, LoadJson(TestDataPath("tokenizer_smollm2.json")), 300);
}

// Every byte-level pre-tokenizer family, each on a small vocabulary trained by Hugging
// Face tokenizers with that family's published pre-tokenizer, normalizer, added tokens
// and BPE options (tests/reference/make_pretokenizer_goldens.py): ids identical on ~530
// cases to Hugging Face's, and for the NFC families (qwen2, qwen35, mpt) to llama.cpp's
// where the two differ (23 texts NFC changes: a GGUF is not normalized, as llama.cpp
// does not). The llama3 and tekken vocabularies hold whole words no merge makes, which
// only ignore_merges finds; mpt's hold GPT-NeoX's space runs as user-defined tokens.
TEST(Tokenizer, MatchesItsReferencesOnEveryPreTokenizerFamily) {
  for (const char* family : {"gpt2", "llama3", "qwen2", "qwen35", "tekken", "gpt4o", "chatglm_bpe",
                             "deepseek_llm", "deepseek_coder", "falcon", "mpt"}) {
    SCOPED_TRACE(family);
    const nlohmann::json golden =
        LoadJson(TestDataPath(std::string("tokenizer_") + family + ".json"));
    Loaded l = Load(TestDataPath(golden.at("gguf_file").get<std::string>()));
    ASSERT_NE(l.tok, nullptr);
    EXPECT_EQ(l.tok->vocab().pre, golden.at("pre").get<std::string>());
    EXPECT_EQ(l.tok->vocab().normalization, Normalization::kNone);
    CheckGolden(*l.tok, golden, 500, true, Reference::kLlamaCpp);
  }
}

// Qwen2's published tokenizer.json (transformers' Qwen2Tokenizer writes it) composes text
// to NFC before splitting; llama.cpp normalizes no GGUF. 1,164 texts that NFC changes
// (decomposed Latin, Greek, Cyrillic and Vietnamese, combining marks in any order,
// Hangul as conjoining jamo, singletons, composition exclusions, ZWJ emoji beside them),
// on a vocabulary trained on both forms (tests/reference/make_pretokenizer_goldens.py):
// the directory gives Hugging Face's ids, the GGUF of the same vocabulary llama.cpp's
// (llama-tokenize), and the two references differ on every text.
TEST(Tokenizer, NormalizesAsEachReferenceDoes) {
  const nlohmann::json golden = LoadJson(TestDataPath("tokenizer_qwen2_nfc.json"));
  Loaded dir = Load(TestDataPath(golden.at("hf_dir").get<std::string>()));
  Loaded gguf = Load(TestDataPath(golden.at("gguf_file").get<std::string>()));
  ASSERT_NE(dir.tok, nullptr);
  ASSERT_NE(gguf.tok, nullptr);
  EXPECT_EQ(dir.tok->vocab().pre, "qwen2");
  EXPECT_EQ(dir.tok->vocab().normalization, Normalization::kNfc);
  EXPECT_EQ(gguf.tok->vocab().normalization, Normalization::kNone);
  size_t differ = 0;
  for (const auto& c : golden.at("cases")) differ += c.contains("llama_cpp_ids");
  EXPECT_GE(differ, 1000u);
  {
    SCOPED_TRACE("Hugging Face directory");
    CheckGolden(*dir.tok, golden, 1000);
  }
  {
    SCOPED_TRACE("GGUF");
    CheckGolden(*gguf.tok, golden, 1000, true, Reference::kLlamaCpp);
  }
}

// The same tokenizers saved as Hugging Face directories (tokenizer.json with its
// pre-tokenizer, added tokens and ignore_merges; tokenizer_config.json): the ids of the
// GGUF goldens, and the special tokens and template tokenizer_config.json names.
TEST(Tokenizer, ReadsHuggingFaceTokenizerJson) {
  for (const char* family : {"gpt2", "llama3", "qwen2", "tekken", "mpt"}) {
    SCOPED_TRACE(family);
    const nlohmann::json golden =
        LoadJson(TestDataPath(std::string("tokenizer_") + family + ".json"));
    Loaded l = Load(TestDataPath(std::string("hf_tokenizer_") + family));
    ASSERT_NE(l.tok, nullptr);
    EXPECT_EQ(l.tok->vocab().pre, golden.at("pre").get<std::string>());
    const bool nfc = std::string_view(family) == "qwen2" || std::string_view(family) == "mpt";
    EXPECT_EQ(l.tok->vocab().normalization, nfc ? Normalization::kNfc : Normalization::kNone);
    EXPECT_EQ(l.tok->vocab().tokens[l.tok->vocab().bos_id], "<|begin_of_text|>");
    EXPECT_EQ(l.tok->vocab().tokens[l.tok->vocab().eos_id], "<|end_of_text|>");
    EXPECT_FALSE(l.tok->vocab().add_bos);
    EXPECT_EQ(*l.file->GetString("tokenizer.chat_template"),
              "{% for m in messages %}{{ m.content }}{% endfor %}");
    CheckGolden(*l.tok, golden, 500);
  }
}

// Gemma 4's tokenizer (tokenizer.ggml.model gemma4: spaces as "▁", newline runs cut
// apart, ranked merges over code points, byte fallback) on a small vocabulary trained by
// Hugging Face tokenizers (tests/reference/make_gemma4_tokenizer_golden.py): ids
// identical on ~500 cases, 204 of them through byte fallback. (The real 262,144-token
// vocabulary: llama.cpp's suite, tests/reference/vocab_suite.py, 46/46.)
TEST(Tokenizer, MatchesHuggingFaceOnAGemma4StyleVocab) {
  Loaded l = Load(TestDataPath("spm_gemma4.gguf"));
  ASSERT_NE(l.tok, nullptr);
  EXPECT_EQ(l.tok->vocab().model, TokenizerModel::kCodePointBpe);
  CheckGolden(*l.tok, LoadJson(TestDataPath("tokenizer_spm_gemma4.json")), 500);
}

TEST(Tokenizer, MatchesSentencePieceOnSyntheticVocab) {
  Loaded l = Load(TestDataPath("spm_tiny.gguf"));
  ASSERT_NE(l.tok, nullptr);
  EXPECT_EQ(l.tok->vocab().model, TokenizerModel::kSentencePieceBpe);
  // sentencepiece reads control-token text such as "<s>" as plain text.
  CheckGolden(*l.tok, LoadJson(TestDataPath("tokenizer_spm_tiny.json")), 100,
              /*parse_special=*/false);
}

// Gemma's SentencePiece style: no "▁" prefix (add_space_prefix false), every digit
// alone, user-defined pieces (turn markers, "\n\n") matched whole.
TEST(Tokenizer, MatchesSentencePieceOnAGemmaStyleVocab) {
  Loaded l = Load(TestDataPath("spm_gemma.gguf"));
  ASSERT_NE(l.tok, nullptr);
  EXPECT_FALSE(l.tok->vocab().add_space_prefix);
  CheckGolden(*l.tok, LoadJson(TestDataPath("tokenizer_spm_gemma.json")), 100,
              /*parse_special=*/false);
  EncodeOptions plain;
  plain.add_special = false;
  plain.parse_special = false;
  auto ids = l.tok->Encode("<start_of_turn>user\nhi<end_of_turn>", plain);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(l.tok->vocab().tokens[ids->front()], "<start_of_turn>");
  EXPECT_EQ(l.tok->vocab().tokens[ids->back()], "<end_of_turn>");
}

// SentencePiece vocabularies saved as the tokenizer.json layouts their families publish
// (tests/reference/make_spm_tokenizer_json.py): Llama 2's legacy Prepend normalizer,
// Mistral's Metaspace pre-tokenizer (prepend_scheme "first") and Gemma's Split on spaces.
// The ids Hugging Face tokenizers gives, special tokens inside the text included; where
// those equal sentencepiece's, also the ids of the same vocabulary read from its GGUF.
TEST(Tokenizer, ReadsSentencePieceStyleTokenizerJson) {
  struct Layout {
    const char* name;
    const char* gguf;
    SpacePrefix space_prefix;
    bool add_space_prefix;
  };
  for (const Layout& layout :
       {Layout{"llama", "spm_tiny.gguf", SpacePrefix::kEverySegment, true},
        Layout{"mistral", "spm_tiny.gguf", SpacePrefix::kMetaspaceFirst, true},
        Layout{"gemma", "spm_gemma.gguf", SpacePrefix::kEverySegment, false}}) {
    SCOPED_TRACE(layout.name);
    const nlohmann::json golden =
        LoadJson(TestDataPath(std::string("tokenizer_hf_spm_") + layout.name + ".json"));
    Loaded l = Load(TestDataPath(golden.at("hf_dir").get<std::string>()));
    Loaded gguf = Load(TestDataPath(layout.gguf));
    ASSERT_NE(l.tok, nullptr);
    ASSERT_NE(gguf.tok, nullptr);
    const Vocab& v = l.tok->vocab();
    EXPECT_EQ(v.model, TokenizerModel::kSentencePieceBpe);
    EXPECT_EQ(v.space_prefix, layout.space_prefix);
    EXPECT_EQ(v.add_space_prefix, layout.add_space_prefix);
    EXPECT_TRUE(v.add_bos);
    EXPECT_EQ(v.tokens[v.bos_id], "<s>");
    EXPECT_EQ(v.tokens[v.eos_id], "</s>");
    EXPECT_EQ(v.tokens[v.unk_id], "<unk>");
    CheckGolden(*l.tok, golden, 150);

    EncodeOptions text_only;  // sentencepiece reads "<s>" as text
    text_only.add_special = false;
    text_only.parse_special = false;
    int compared = 0;
    for (const auto& c : golden.at("cases")) {
      if (!c.at("sentencepiece_ids_equal").get<bool>()) continue;
      ++compared;
      const std::string text = c.at("text");
      auto from_gguf = gguf.tok->Encode(text, text_only);
      ASSERT_TRUE(from_gguf.ok());
      EXPECT_EQ(*from_gguf, c.at("ids").get<std::vector<int32_t>>()) << nlohmann::json(text).dump();
    }
    EXPECT_GE(compared, 120);
  }
}

TEST(Tokenizer, SentencePieceAddsBosWhenAsked) {
  Loaded l = Load(TestDataPath("spm_tiny.gguf"));
  ASSERT_NE(l.tok, nullptr);
  auto ids = l.tok->Encode("hello");
  ASSERT_TRUE(ids.ok());
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ((*ids)[0], l.tok->vocab().bos_id);
  EXPECT_EQ(*l.tok->Decode({(*ids).begin() + 1, (*ids).end()}), "hello");
}

TEST(Tokenizer, SpecialTokensAreMatchedWhole) {
  Loaded l = Load(DefaultModelPath());
  ASSERT_NE(l.tok, nullptr);
  auto ids = l.tok->Encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ(ids->front(), 1);
  EXPECT_EQ(ids->back(), 2);
  EncodeOptions plain;
  plain.parse_special = false;
  auto literal = l.tok->Encode("<|im_start|>", plain);
  ASSERT_TRUE(literal.ok());
  EXPECT_GT(literal->size(), 1u);
  EXPECT_EQ(*l.tok->Decode(*literal), "<|im_start|>");
}

TEST(Tokenizer, RejectsInvalidUtf8AndOutOfRangeIds) {
  Loaded l = Load(DefaultModelPath());
  ASSERT_NE(l.tok, nullptr);
  auto ids = l.tok->Encode("ok\xC3(");
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), ::testing::HasSubstr("byte 2"));
  EXPECT_EQ(l.tok->Decode({5, 49152}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(l.tok->Decode({-1}).status().code(), absl::StatusCode::kInvalidArgument);
  auto empty = l.tok->Encode("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// A vocabulary small enough to follow by hand: all 256 spelled bytes, then merges.
GgufBuilder HandVocab() {
  std::vector<std::string> tokens;
  const ByteAlphabet& abc = GetByteAlphabet();
  for (int b = 0; b < 256; ++b) tokens.emplace_back(abc.Spell(static_cast<uint8_t>(b)));
  tokens.push_back("ab");   // 256
  tokens.push_back("abc");  // 257
  tokens.push_back("bc");   // 258
  tokens.push_back("<s>");  // 259, control
  std::vector<int32_t> types(tokens.size(), 1);
  types[259] = 3;
  GgufBuilder b;
  b.String("general.architecture", "llama")
      .String("tokenizer.ggml.model", "gpt2")
      .String("tokenizer.ggml.pre", "gpt2")
      .StringArray("tokenizer.ggml.tokens", tokens)
      .Int32Array("tokenizer.ggml.token_type", types)
      .StringArray("tokenizer.ggml.merges", {"b c", "a b", "ab c"});
  return b;
}

TEST(ByteLevelBpe, AppliesMergesByRank) {
  std::string bytes = HandVocab().Build();
  auto f = model::GgufFile::Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  ASSERT_TRUE(f.ok()) << f.status();
  auto tok = Tokenizer::FromGguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "b c" outranks "a b": abc → a + bc, and "ab c" never gets a chance.
  EXPECT_THAT(*(*tok)->Encode("abc"), ElementsAre('a', 258));
  EXPECT_THAT(*(*tok)->Encode("ab"), ElementsAre(256));
  EXPECT_THAT(*(*tok)->Encode("a<s>b"), ElementsAre('a', 259, 'b'));
  // " ab" is one GPT-2 piece; "Ġ" (the spelled space, token 32 here) has no merge.
  EXPECT_THAT(*(*tok)->Encode("ab ab"), ElementsAre(256, 32, 256));
}

// A Gemma 4 vocabulary by hand: its byte tokens spell bytes, a BYTE-typed token that is
// not "<0xXX>" (the GGUF fuzzer's "<0xZZ>") is plain text rather than a crash, and a code
// point outside the vocabulary falls back to its UTF-8 bytes.
TEST(CodePointBpe, ByteTokensAndFallbackOnAHandVocab) {
  std::vector<std::string> tokens = {"<bos>", "<0xC3>", "<0xA9>",       "<0xZZ>", "a",
                                     "b",     "ab",     "\xE2\x96\x81", "\n\n"};
  std::vector<int32_t> types = {3, 6, 6, 6, 1, 1, 1, 1, 1};
  GgufBuilder b;
  b.String("general.architecture", "gemma4")
      .String("tokenizer.ggml.model", "gemma4")
      .StringArray("tokenizer.ggml.tokens", tokens)
      .Int32Array("tokenizer.ggml.token_type", types)
      .StringArray("tokenizer.ggml.merges", {"a b"})
      .Uint32("tokenizer.ggml.bos_token_id", 0);
  const std::string bytes = b.Build();
  auto f = model::GgufFile::Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  ASSERT_TRUE(f.ok()) << f.status();
  auto tok = Tokenizer::FromGguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "é" is no token: its bytes C3 A9; the space is "▁"; "\n\n" is one token.
  EXPECT_THAT(*(*tok)->Encode("ab é\n\nb", {.add_special = false}), ElementsAre(6, 7, 1, 2, 8, 5));
  EXPECT_TRUE((*tok)->vocab().add_bos);  // Gemma 4 always begins with BOS
  EXPECT_EQ(*(*tok)->Decode({6, 7, 1, 2, 3}), "ab é<0xZZ>");
}

TEST(ByteAlphabet, IsABijectionOverBytes) {
  const ByteAlphabet& abc = GetByteAlphabet();
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    std::string_view s = abc.Spell(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(std::string(s)).second);
    size_t len = 0;
    EXPECT_EQ(abc.ByteOf(utf8::DecodeCodepoint(s, &len)), b);
  }
  EXPECT_EQ(abc.Spell(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(abc.Spell('A'), "A");
}

}  // namespace
}  // namespace tandem::tokenizer

namespace tandem::tokenizer {
namespace {

// Found by the fuzzer: a BYTE token spelled "<0x-1>" once indexed out of bounds.
TEST(SentencePieceBpe, IgnoresMalformedByteTokens) {
  GgufBuilder b;
  b.String("tokenizer.ggml.model", "llama")
      .StringArray("tokenizer.ggml.tokens", {"<unk>", "<0x-1>", "<0x41>", "<0xzz>",
                                             "\xE2\x96\x81"
                                             "a"})
      .Float32Array("tokenizer.ggml.scores", {0, 0, 0, 0, 1})
      .Int32Array("tokenizer.ggml.token_type", {2, 6, 6, 6, 1})
      .Uint32("tokenizer.ggml.unknown_token_id", 0);
  std::string bytes = b.Build();
  auto f = model::GgufFile::Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  ASSERT_TRUE(f.ok()) << f.status();
  auto tok = Tokenizer::FromGguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EncodeOptions o;
  o.add_special = false;
  EXPECT_THAT(*(*tok)->Encode("aA", o), ElementsAre(4, 2));  // "▁a", then byte 0x41
  EXPECT_THAT(*(*tok)->Encode("B", o), ElementsAre(0, 0));   // "▁" and "B": no byte token
}

}  // namespace
}  // namespace tandem::tokenizer
