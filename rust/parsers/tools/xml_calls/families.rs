//! Tag-shaped formats that differ from the ones in [`super::tagged`] only in their
//! literal tags, so each is a [`Format`] read by the same state machine.

use std::sync::OnceLock;

use super::tagged::{Format, ValueTyping, SCHEMA_TYPED};

/// Qwen3-Coder's grammar inside another block tag (Seed-OSS, ZAYA1).
const fn qwen3_coder_in(block_open: &'static str, block_close: &'static str) -> Format {
    Format {
        block_open,
        block_close,
        invoke_open: Some("<function="),
        head_end: ">",
        invoke_close: "</function>",
        param_open: "<parameter=",
        key_ends: &[(">", ValueTyping::Schema)],
        value_open: None,
        param_close: "</parameter>",
        trim_newlines: true,
        value_ends_at_next_tag: true,
        doubled_namespace: false,
        tables: OnceLock::new(),
    }
}

/// Seed-OSS: `<seed:tool_call><function=F><parameter=K>V</parameter></function></seed:tool_call>`.
pub(super) static SEED_OSS: Format = qwen3_coder_in("<seed:tool_call>", "</seed:tool_call>");

/// ZAYA1: Qwen3-Coder's grammar in `<zyphra_tool_call>`.
pub(super) static ZAYA: Format = qwen3_coder_in("<zyphra_tool_call>", "</zyphra_tool_call>");

/// dots: MiniMax-M2's invoke/parameter tags in `<dots_function_call>`.
pub(super) static DOTS: Format = Format {
    block_open: "<dots_function_call>",
    block_close: "</dots_function_call>",
    invoke_open: Some("<invoke name=\""),
    head_end: "\">",
    invoke_close: "</invoke>",
    param_open: "<parameter name=\"",
    key_ends: SCHEMA_TYPED,
    value_open: None,
    param_close: "</parameter>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// Hunyuan (HY v3): `<tool_calls><tool_call>F<tool_sep><arg_key>K</arg_key>
/// <arg_value>V</arg_value></tool_call></tool_calls>`. Checkpoints whose vocabulary
/// suffixes these tokens (`<tool_call:6124c78e>`) are not covered.
pub(super) static HUNYUAN: Format = Format {
    block_open: "<tool_calls>",
    block_close: "</tool_calls>",
    invoke_open: Some("<tool_call>"),
    head_end: "<tool_sep>",
    invoke_close: "</tool_call>",
    param_open: "<arg_key>",
    key_ends: &[("</arg_key>", ValueTyping::Schema)],
    value_open: Some("<arg_value>"),
    param_close: "</arg_value>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// IQuest Q1: GLM's name-then-`<arg_key>` grammar in `<iquest_tool_call>`.
pub(super) static IQUEST_Q1: Format = Format {
    block_open: "<iquest_tool_call>",
    block_close: "</iquest_tool_call>",
    invoke_open: None,
    head_end: "<arg_key>",
    invoke_close: "</iquest_tool_call>",
    param_open: "<arg_key>",
    key_ends: &[("</arg_key>", ValueTyping::Schema)],
    value_open: Some("<arg_value>"),
    param_close: "</arg_value>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// DeepSeek V4.1: DSML whose tag names start with a space (`<｜DSML｜ invoke name="F">`),
/// in a `<｜DSML｜ calls>` block.
pub(super) static DEEPSEEK_V4_1: Format = Format {
    block_open: "<｜DSML｜ calls>",
    block_close: "</｜DSML｜ calls>",
    invoke_open: Some("<｜DSML｜ invoke name=\""),
    head_end: "\">",
    invoke_close: "</｜DSML｜ invoke>",
    param_open: "<｜DSML｜ parameter name=\"",
    key_ends: DSML_KEY_ENDS,
    value_open: None,
    param_close: "</｜DSML｜ parameter>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// GigaChat 3.5: DSML's grammar under the `GCML` name.
pub(super) static GIGACHAT35: Format = Format {
    block_open: "<｜GCML｜tool_calls>",
    block_close: "</｜GCML｜tool_calls>",
    invoke_open: Some("<｜GCML｜invoke name=\""),
    head_end: "\">",
    invoke_close: "</｜GCML｜invoke>",
    param_open: "<｜GCML｜parameter name=\"",
    key_ends: DSML_KEY_ENDS,
    value_open: None,
    param_close: "</｜GCML｜parameter>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// Kimi K3's XTML tools channel:
/// `<|open|>tools<|sep|><|open|>call tool="F" index="1"<|sep|><|open|>argument key="K"
/// type="string"<|sep|>V<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`.
/// A `string` argument is its raw text, any other type is JSON; the call's `index`
/// attribute is markup.
pub(super) static KIMI_K3: Format = Format {
    block_open: "<|open|>tools<|sep|>",
    block_close: "<|close|>tools<|sep|>",
    invoke_open: Some("<|open|>call tool=\""),
    head_end: "\"",
    invoke_close: "<|close|>call<|sep|>",
    param_open: "<|open|>argument key=\"",
    key_ends: &[
        ("\" type=\"string\"<|sep|>", ValueTyping::Text),
        ("\" type=\"number\"<|sep|>", ValueTyping::Json),
        ("\" type=\"integer\"<|sep|>", ValueTyping::Json),
        ("\" type=\"boolean\"<|sep|>", ValueTyping::Json),
        ("\" type=\"object\"<|sep|>", ValueTyping::Json),
        ("\" type=\"array\"<|sep|>", ValueTyping::Json),
        ("\" type=\"null\"<|sep|>", ValueTyping::Json),
        ("\"<|sep|>", ValueTyping::Schema),
    ],
    value_open: None,
    param_close: "<|close|>argument<|sep|>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// Muse (Spark, Glimmer): an ATEM block in a tool-addressed message,
/// `<atem:function_calls><atem:invoke name="F"><atem:parameter name="K">V
/// </atem:parameter></atem:invoke></atem:function_calls>`. A value is JSON when it
/// reads as JSON and text otherwise; the muse reasoning parser routes messages, so
/// only tool messages' bodies reach this parser.
pub(super) static MUSE: Format = Format {
    block_open: "<atem:function_calls>",
    block_close: "</atem:function_calls>",
    invoke_open: Some("<atem:invoke name=\""),
    head_end: "\">",
    invoke_close: "</atem:invoke>",
    param_open: "<atem:parameter name=\"",
    key_ends: &[("\">", ValueTyping::Json)],
    value_open: None,
    param_close: "</atem:parameter>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: true,
    tables: OnceLock::new(),
};

/// Hunyuan v4 (HY v4): the name follows `<tool_call>` directly and runs to the first
/// `<arg_key>`: `<tool_calls><tool_call>F<arg_key>K</arg_key><arg_value>V</arg_value>
/// </tool_call></tool_calls>`.
pub(super) static HY_V4: Format = Format {
    block_open: "<tool_calls>",
    block_close: "</tool_calls>",
    invoke_open: Some("<tool_call>"),
    head_end: "<arg_key>",
    invoke_close: "</tool_call>",
    param_open: "<arg_key>",
    key_ends: &[("</arg_key>", ValueTyping::Schema)],
    value_open: Some("<arg_value>"),
    param_close: "</arg_value>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// K2 Horizon's IFM tags, laid out like Hunyuan v4's. An `<ifm|arg_type>` tag between a
/// key and its value is markup: values are typed by the tool's schema.
pub(super) static K2_HORIZON: Format = Format {
    block_open: "<ifm|tool_calls>",
    block_close: "</ifm|tool_calls>",
    invoke_open: Some("<ifm|tool_call>"),
    head_end: "<ifm|arg_key>",
    invoke_close: "</ifm|tool_call>",
    param_open: "<ifm|arg_key>",
    key_ends: &[("</ifm|arg_key>", ValueTyping::Schema)],
    value_open: Some("<ifm|arg_value>"),
    param_close: "</ifm|arg_value>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// MiniCPM5: `<function name="F"><param name="K">V</param></function>`, one tag per
/// call. A `<![CDATA[…]]>` wrapper around a value is kept as written.
pub(super) static MINICPM5: Format = Format {
    block_open: "<function name=\"",
    block_close: "</function>",
    invoke_open: None,
    head_end: "\">",
    invoke_close: "</function>",
    param_open: "<param name=\"",
    key_ends: SCHEMA_TYPED,
    value_open: None,
    param_close: "</param>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

pub(super) static MINIMAX_M2: Format = Format {
    block_open: "<minimax:tool_call>",
    block_close: "</minimax:tool_call>",
    invoke_open: Some("<invoke name=\""),
    head_end: "\">",
    invoke_close: "</invoke>",
    param_open: "<parameter name=\"",
    key_ends: SCHEMA_TYPED,
    value_open: None,
    param_close: "</parameter>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

pub(super) const DSML_KEY_ENDS: &[(&str, ValueTyping)] = &[
    ("\" string=\"true\">", ValueTyping::Text),
    ("\" string=\"false\">", ValueTyping::Json),
    ("\">", ValueTyping::Schema),
];

pub(super) static DEEPSEEK_V3_2: Format =
    dsml("<｜DSML｜function_calls>", "</｜DSML｜function_calls>");

/// DeepSeek V4 differs from V3.2 only in the outer tag.
pub(super) static DEEPSEEK_V4: Format = dsml("<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>");

/// DeepSeek's DSML tags inside the outer block tag.
const fn dsml(block_open: &'static str, block_close: &'static str) -> Format {
    Format {
        block_open,
        block_close,
        invoke_open: Some("<｜DSML｜invoke name=\""),
        head_end: "\">",
        invoke_close: "</｜DSML｜invoke>",
        param_open: "<｜DSML｜parameter name=\"",
        key_ends: DSML_KEY_ENDS,
        value_open: None,
        param_close: "</｜DSML｜parameter>",
        trim_newlines: false,
        value_ends_at_next_tag: false,
        doubled_namespace: false,
        tables: OnceLock::new(),
    }
}

/// Step-3 wraps each invoke in `<｜tool_call_begin｜>function<｜tool_sep｜>…<｜tool_call_end｜>`;
/// that wrapper sits between invokes, where text is skipped anyway.
pub(super) static STEP3: Format = Format {
    block_open: "<｜tool_calls_begin｜>",
    block_close: "<｜tool_calls_end｜>",
    invoke_open: Some("<steptml:invoke name=\""),
    head_end: "\">",
    invoke_close: "</steptml:invoke>",
    param_open: "<steptml:parameter name=\"",
    key_ends: SCHEMA_TYPED,
    value_open: None,
    param_close: "</steptml:parameter>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};
