// Tool calling through the shared templates: tool definitions (tojson, with indent in Llama's), assistant tool
// calls with mapping arguments, tool results. The expected texts are what Jinja2 3.1.6 rendered under Hugging
// Face's settings for this conversation, these tools and add_generation_prompt = true.
#include <gtest/gtest.h>

#include <cctype>

#include "chat/reference_clock.h"
#include "diskformer/chat/template.h"
#include "support/test_paths.h"

namespace df::chat {
namespace {

using ojson = nlohmann::ordered_json;

const char* const kConversation = R"J([{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "tags": ["a", "b"], "x": 1.5, "ok": true, "none": null}}}]}, {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21}"}, {"role": "assistant", "content": "It is 21°C in Paris."}, {"role": "user", "content": "Thanks!"}])J";

const char* const kTools = R"J([{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}, "days": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}, "opts": {"type": "object", "properties": {"x": {"type": "boolean"}}}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "search", "description": "Search — the web ünï", "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "number", "nullable": true}}, "required": ["q"]}}}])J";

struct ToolCase {
  const char* template_name;
  const char* extra;  // template variables besides the conversation and kTools
  const char* expected;
};

const ToolCase kToolCases[] = {
    {"Qwen-Qwen3-0.6B.jinja", R"J({})J",
     R"J(<|im_start|>system
You are helpful.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}, "days": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}, "opts": {"type": "object", "properties": {"x": {"type": "boolean"}}}}, "required": ["city"]}}}
{"type": "function", "function": {"name": "search", "description": "Search — the web ünï", "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "number", "nullable": true}}, "required": ["q"]}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "tags": ["a", "b"], "x": 1.5, "ok": true, "none": null}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response><|im_end|>
<|im_start|>assistant
It is 21°C in Paris.<|im_end|>
<|im_start|>user
Thanks!<|im_end|>
<|im_start|>assistant
)J"},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", R"J({})J",
     R"J(<s><|start_header_id|>system<|end_header_id|>

Environment: ipython
Cutting Knowledge Date: December 2023
Today Date: 26 Jul 2024

You are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>

Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.

Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.

{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {
                    "type": "string",
                    "description": "City name"
                },
                "unit": {
                    "type": "string",
                    "enum": [
                        "c",
                        "f"
                    ],
                    "default": "c"
                },
                "days": {
                    "type": "integer"
                },
                "tags": {
                    "type": "array",
                    "items": {
                        "type": "string"
                    }
                },
                "opts": {
                    "type": "object",
                    "properties": {
                        "x": {
                            "type": "boolean"
                        }
                    }
                }
            },
            "required": [
                "city"
            ]
        }
    }
}

{
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search — the web ünï",
        "parameters": {
            "type": "object",
            "properties": {
                "q": {
                    "type": "string"
                },
                "n": {
                    "type": "number",
                    "nullable": true
                }
            },
            "required": [
                "q"
            ]
        }
    }
}

Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>

{"name": "get_weather", "parameters": {"city": "Paris", "days": 3, "tags": ["a", "b"], "x": 1.5, "ok": true, "none": null}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>

"{\"temp\": 21}"<|eot_id|><|start_header_id|>assistant<|end_header_id|>

It is 21°C in Paris.<|eot_id|><|start_header_id|>user<|end_header_id|>

Thanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>

)J"},
    {"openai-gpt-oss-120b.jinja", R"J({})J",
     R"J(<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Knowledge cutoff: 2024-06
Current date: 2026-11-29

Reasoning: medium

# Valid channels: analysis, commentary, final. Channel must be included for every message.
Calls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|># Instructions

You are helpful.

# Tools

## functions

namespace functions {

// Get the weather for a city
type get_weather = (_: {
// City name
city: string,
unit?: "c" | "f", // default: c,
days?: number,
tags?: string[],
opts?: {
x?: 
                boolean},
}) => any;

// Search — the web ünï
type search = (_: {
q: string,
n?: number,
}) => any;

} // namespace functions<|end|><|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris", "days": 3, "tags": ["a", "b"], "x": 1.5, "ok": true, "none": null}<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"{\"temp\": 21}"<|end|><|start|>assistant<|channel|>final<|message|>It is 21°C in Paris.<|end|><|start|>user<|message|>Thanks!<|end|><|start|>assistant)J"},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", R"J({})J",
     R"J(<s>[INST]Weather in Paris?[/INST][TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "tags": ["a", "b"], "x": 1.5, "ok": true, "none": null}, "id": "call12345"}]</s>[TOOL_RESULTS]{"content": {"temp": 21}, "call_id": "call12345"}[/TOOL_RESULTS]It is 21°C in Paris.</s>[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}, "days": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}, "opts": {"type": "object", "properties": {"x": {"type": "boolean"}}}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "search", "description": "Search — the web ünï", "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "number", "nullable": true}}, "required": ["q"]}}}][/AVAILABLE_TOOLS][INST]You are helpful.

Thanks![/INST])J"},
    {"google-gemma-4-31B-it.jinja", R"J({"enable_thinking": true})J",
     R"J(<s><|turn>system
<|think|>
You are helpful.<|tool>declaration:get_weather{description:<|"|>Get the weather for a city<|"|>,parameters:{properties:{city:{description:<|"|>City name<|"|>,type:<|"|>STRING<|"|>},days:{type:<|"|>INTEGER<|"|>},opts:{properties:{x:{type:<|"|>BOOLEAN<|"|>}},type:<|"|>OBJECT<|"|>},tags:{items:{type:<|"|>STRING<|"|>},type:<|"|>ARRAY<|"|>},unit:{enum:[<|"|>c<|"|>,<|"|>f<|"|>],type:<|"|>STRING<|"|>}},required:[<|"|>city<|"|>],type:<|"|>OBJECT<|"|>}}<tool|><|tool>declaration:search{description:<|"|>Search — the web ünï<|"|>,parameters:{properties:{n:{nullable:true,type:<|"|>NUMBER<|"|>},q:{type:<|"|>STRING<|"|>}},required:[<|"|>q<|"|>],type:<|"|>OBJECT<|"|>}}<tool|><turn|>
<|turn>user
Weather in Paris?<turn|>
<|turn>model
<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,none:None,ok:true,tags:[<|"|>a<|"|>,<|"|>b<|"|>],x:1.5}<tool_call|><|tool_response>response:get_weather{value:<|"|>{"temp": 21}<|"|>}<tool_response|>It is 21°C in Paris.<turn|>
<|turn>user
Thanks!<turn|>
<|turn>model
)J"},
    {"Qwen3.5-4B.jinja", R"J({})J",
     R"J(<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}, "days": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}, "opts": {"type": "object", "properties": {"x": {"type": "boolean"}}}}, "required": ["city"]}}}
{"type": "function", "function": {"name": "search", "description": "Search — the web ünï", "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "number", "nullable": true}}, "required": ["q"]}}}
</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT>

You are helpful.<|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
<function=get_weather>
<parameter=city>
Paris
</parameter>
<parameter=days>
3
</parameter>
<parameter=tags>
["a", "b"]
</parameter>
<parameter=x>
1.5
</parameter>
<parameter=ok>
True
</parameter>
<parameter=none>
None
</parameter>
</function>
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response><|im_end|>
<|im_start|>assistant
It is 21°C in Paris.<|im_end|>
<|im_start|>user
Thanks!<|im_end|>
<|im_start|>assistant
<think>
)J"},
};

class ChatTools : public ::testing::TestWithParam<ToolCase> {};

TEST_P(ChatTools, RendersAsJinja2) {
  const ToolCase& c = GetParam();
  DF_REQUIRE_SHARED(path, std::string("templates/jinja/") + c.template_name);
  auto tpl = Template::parse(test::slurp(path), c.template_name);
  ASSERT_TRUE(tpl.ok()) << tpl.error().message;
  ChatInput in;
  in.messages = ojson::parse(kConversation);
  in.extra = ojson::parse(c.extra);
  in.extra["tools"] = ojson::parse(kTools);
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  RenderOptions opt;
  opt.now = test::reference_now();
  auto out = render_chat(*tpl, in, opt);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out, c.expected);
}

INSTANTIATE_TEST_SUITE_P(Chat, ChatTools, ::testing::ValuesIn(kToolCases), [](const auto& info) {
  std::string n = info.param.template_name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace df::chat
