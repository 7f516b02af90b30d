// The reasoning / answer split of chat replies (src/server/reasoning_split.h): whole, and fed in every
// split of the output into two pieces and one byte at a time, the parts are the same, and a tag never
// leaks into either.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/reasoning_split.h"

namespace kvserve::server {
namespace {

struct Case {
  std::string output;
  bool opened_by_prompt;
  std::string reasoning, content;
};

const std::vector<Case> kCases = {
    {"<think>\nplan\n</think>\n\nAnswer", false, "\nplan\n", "\n\nAnswer"},  // Qwen3 opens it itself
    {"plan</think>Answer", true, "plan", "Answer"},                          // an R1 distill's prompt opened it
    {"<think>never closed", false, "never closed", ""},                      // cut by max_tokens
    {"still thinking <th", true, "still thinking <th", ""},
    {"Hello <think>x</think>", false, "", "Hello <think>x</think>"},  // not at the start: content
    {"<thi", false, "", "<thi"},
    {"", false, "", ""},
    {"</think>", true, "", ""},
    {"a</thinking>b</think>c", true, "a</thinking>b", "c"},
    {"<think></think>", false, "", ""},
};

TEST(ReasoningSplit, WholeOutput) {
  for (const Case& c : kCases) {
    const ReasoningSplit s = split_reasoning(c.output, c.opened_by_prompt);
    EXPECT_EQ(s.reasoning, c.reasoning) << c.output;
    EXPECT_EQ(s.content, c.content) << c.output;
  }
}

// Every case fed in every split into two pieces, and one byte at a time: the same parts as whole; `tag` (the one
// that closes the reasoning) never shows in a reasoning piece; `end` never in a content piece unless the case's
// content holds it.
void expect_pieces_give_the_same_parts(const std::vector<Case>& cases, ReasoningFormat format, const std::string& tag,
                                       const std::string& end) {
  for (const Case& c : cases) {
    const ReasoningSplit whole = split_reasoning(c.output, c.opened_by_prompt, format);
    EXPECT_EQ(whole.reasoning, c.reasoning) << c.output;
    EXPECT_EQ(whole.content, c.content) << c.output;
    for (size_t cut = 0; cut <= c.output.size(); ++cut) {
      ReasoningSplitter splitter(c.opened_by_prompt, format);
      std::string reasoning, content;
      for (const std::string& piece : {c.output.substr(0, cut), c.output.substr(cut)}) {
        const ReasoningSplit s = splitter.feed(piece);
        reasoning += s.reasoning;
        content += s.content;
      }
      const ReasoningSplit rest = splitter.finish();
      EXPECT_EQ(reasoning + rest.reasoning, c.reasoning) << c.output << " cut at " << cut;
      EXPECT_EQ(content + rest.content, c.content) << c.output << " cut at " << cut;
    }
    ReasoningSplitter bytewise(c.opened_by_prompt, format);
    std::string reasoning, content;
    for (const char ch : c.output) {
      const ReasoningSplit s = bytewise.feed(std::string(1, ch));
      EXPECT_EQ(s.reasoning.find(tag), std::string::npos) << c.output;
      if (c.content.find(end) == std::string::npos) {
        EXPECT_EQ(s.content.find(end), std::string::npos) << c.output;
      }
      reasoning += s.reasoning;
      content += s.content;
    }
    const ReasoningSplit rest = bytewise.finish();
    EXPECT_EQ(reasoning + rest.reasoning, c.reasoning) << c.output;
    EXPECT_EQ(content + rest.content, c.content) << c.output;
  }
}

TEST(ReasoningSplit, FedInPiecesGivesTheSameParts) {
  expect_pieces_give_the_same_parts(kCases, ReasoningFormat::ThinkTags, "</think>", "</think>");
}

// gpt-oss's harmony replies: the analysis channel's text is reasoning, final's and commentary's content; headers
// and the <|end|> / <|start|> between messages appear in neither, however the output is cut into pieces.
const std::vector<Case> kHarmonyCases = {
    {"<|channel|>analysis<|message|>User asks 2+2.<|end|><|start|>assistant<|channel|>final<|message|>4.", false,
     "User asks 2+2.", "4."},
    {"<|channel|>final<|message|>Just this", false, "", "Just this"},
    {"<|channel|>analysis<|message|>cut by max_tokens", false, "cut by max_tokens", ""},
    {"<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
     "<|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>c",
     false, "ab", "Checking.c"},
    // A call: kept whole for the tool-call parser.
    {"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather "
     "<|constrain|>json<|message|>{\"city\":\"Paris\"}",
     false, "Need weather.",
     "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
     "{\"city\":\"Paris\"}"},
    {"<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|end|>", false, "",
     "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|end|>"},
    {"<|channel|>analysis<|message|>x < y and <|en", false, "x < y and <|en", ""},
    {"<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fin", false, "a", ""},  // stopped in a header
    {"Plain answer, no channels", false, "", "Plain answer, no channels"},                       // e.g. under a grammar
    {"", false, "", ""},
};

TEST(ReasoningSplit, HarmonyChannels) {
  expect_pieces_give_the_same_parts(kHarmonyCases, ReasoningFormat::Harmony, "<|end|>", "<|end|>");
  EXPECT_TRUE(prompt_is_harmony("<|start|>user<|message|>Hi<|end|><|start|>assistant"));
  EXPECT_FALSE(prompt_is_harmony("<|im_start|>assistant\n"));
}

// Gemma 4's thought channel: "<|channel>thought", whitespace, the reasoning, "<channel|>", the answer; with thinking
// off its template closes an empty thought in the prompt and the reply is all answer.
const std::vector<Case> kGemma4Cases = {
    {"<|channel>thought\nThe user wants 2+2.<channel|>4.", false, "The user wants 2+2.", "4."},
    {"Just the answer", false, "", "Just the answer"},
    {"<|channel>thought\ncut by max_tokens", false, "cut by max_tokens", ""},
    {"plan<channel|>answer", true, "plan", "answer"},  // the prompt opened the thought
    {"\n  plan\n<channel|>x", true, "plan\n", "x"},
    {"<|channel>thought<channel|>Hi", false, "", "Hi"},
    {"<|channel>thought\n\n", false, "", ""},
    {"<|chan", false, "", "<|chan"},
    {"Hi <|channel>thought x<channel|>", false, "", "Hi <|channel>thought x<channel|>"},  // not at the start
    {"<think>x</think>y", false, "", "<think>x</think>y"},
};

TEST(ReasoningSplit, Gemma4ThoughtChannel) {
  expect_pieces_give_the_same_parts(kGemma4Cases, ReasoningFormat::Gemma4Channel, "<channel|>", "<channel|>");
  EXPECT_TRUE(prompt_is_gemma4("<|turn>user\nHi<turn|>\n<|turn>model\n"));
  EXPECT_TRUE(prompt_is_gemma4("<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"));
  EXPECT_FALSE(prompt_is_gemma4("<|im_start|>assistant\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<|turn>model\n<|channel>thought\n", ReasoningFormat::Gemma4Channel));
  EXPECT_FALSE(prompt_opens_reasoning("<|turn>model\n<|channel>thought\n<channel|>", ReasoningFormat::Gemma4Channel));
  EXPECT_FALSE(prompt_opens_reasoning("<|turn>model\n<think>", ReasoningFormat::Gemma4Channel));
}

TEST(ReasoningSplit, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<|Assistant|><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // thinking off
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<think>a</think> then <think>"));
}

}  // namespace
}  // namespace kvserve::server
