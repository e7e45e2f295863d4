//! Delimited families added so that every reasoning parser name Dynamo 1.6.1, vLLM
//! 0.34 and SGLang 0.5.23 register has one. Where the servers disagree on a forced
//! start, the model's chat template decides: a template that opens reasoning in the
//! prompt makes the family forced.

use super::delimited::Family;
use super::think;

/// Seed-OSS: `<seed:think>…</seed:think>`; the model opens it itself.
static SEED_OSS: Family = Family {
    openers: &["<seed:think>"],
    closers: &["</seed:think>"],
    own_exits: &["<seed:tool_call>"],
    lone_byte_passes: false,
    ..think("seed_oss", false)
};

/// Cohere Command A reasoning (3 and 4): the template opens `<|START_THINKING|>`;
/// the reply's `<|START_RESPONSE|>`/`<|START_TEXT|>` wrappers are framing, and an
/// `<|START_ACTION|>` block is left intact for a tool parser.
static COHERE_COMMAND: Family = Family {
    openers: &["<|START_THINKING|>"],
    closers: &["<|END_THINKING|>"],
    own_exits: &["<|START_ACTION|>"],
    framing: &[
        "<|START_RESPONSE|>",
        "<|END_RESPONSE|>",
        "<|START_TEXT|>",
        "<|END_TEXT|>",
    ],
    lone_byte_passes: false,
    ..think("cohere_command", true)
};

/// Apertus 2509: `<|inner_prefix|>…<|inner_suffix|>`, never forced.
static APERTUS: Family = Family {
    openers: &["<|inner_prefix|>"],
    closers: &["<|inner_suffix|>"],
    own_exits: &["<|tools_prefix|>"],
    lone_byte_passes: false,
    ..think("apertus", false)
};

/// K2 Horizon: the template prefills one of three effort-specific openers, so output
/// starts inside reasoning and ends at the matching closer.
static K2_HORIZON: Family = Family {
    openers: &["<ifm|think>", "<ifm|think_fast>", "<ifm|think_faster>"],
    closers: &["</ifm|think>", "</ifm|think_fast>", "</ifm|think_faster>"],
    own_exits: &["<ifm|tool_calls>"],
    lone_byte_passes: false,
    ..think("k2_horizon", true)
};

/// PLaMo 3: `<|plamo:begin_think:plamo|>…<|plamo:end_think:plamo|>`; with thinking on
/// (vLLM's default) output starts inside reasoning.
static PLAMO3: Family = Family {
    openers: &["<|plamo:begin_think:plamo|>"],
    closers: &["<|plamo:end_think:plamo|>"],
    own_exits: &["<|plamo:begin_tool_requests:plamo|>"],
    lone_byte_passes: false,
    ..think("plamo3", true)
};

/// Hunyuan (A13B, HY v3/v4): `<think>` the model writes itself; its `<tool_calls>`
/// block ends reasoning even without the closer.
static HUNYUAN: Family = Family {
    own_exits: &["<tool_calls>"],
    lone_byte_passes: false,
    ..think("hunyuan", false)
};

/// Ling 3: GLM's `<think>` markup with thinking on by default (the template opens it).
static LING3: Family = Family {
    lone_byte_passes: false,
    ..think("ling3", true)
};

/// ERNIE 4.5: `<think>` opened by the model; the answer's `<response>` wrapper is framing.
static ERNIE45: Family = Family {
    framing: &["<response>", "</response>"],
    lone_byte_passes: false,
    ..think("ernie45", false)
};

/// DeepSeek V4.1: `<think>` opened by the template when thinking is on; its spaced
/// DSML block ends reasoning.
static DEEPSEEK_V4_1: Family = Family {
    own_exits: &["<｜DSML｜ calls>", "<｜DSML｜ invoke name="],
    lone_byte_passes: false,
    ..think("deepseek_v4_1", false)
};

/// Inkling's typed blocks: `<|message_model|><|content_thinking|>…<|end_message|>` is
/// reasoning, a `<|content_text|>` block's framing is dropped from content, and a
/// `<|content_invoke_tool_json|>` block is left for the tool parser (its closing
/// `<|end_message|>` is dropped like any stray closer; the call's JSON ends it).
static INKLING: Family = Family {
    openers: &[
        "<|message_model|><|content_thinking|>",
        "<|content_thinking|>",
    ],
    closers: &["<|end_message|>", "<|content_model_end_sampling|>"],
    own_exits: &["<|message_model|><|content_invoke_tool_json|>"],
    framing: &["<|message_model|><|content_text|>", "<|content_text|>"],
    lone_byte_passes: false,
    ..think("inkling", false)
};

/// The configuration of one of these families.
pub(super) fn family(name: &str) -> Option<&'static Family> {
    Some(match name {
        "seed_oss" => &SEED_OSS,
        "cohere_command" => &COHERE_COMMAND,
        "apertus" => &APERTUS,
        "k2_horizon" => &K2_HORIZON,
        "plamo3" => &PLAMO3,
        "hunyuan" => &HUNYUAN,
        "ling3" => &LING3,
        "ernie45" => &ERNIE45,
        "deepseek_v4_1" => &DEEPSEEK_V4_1,
        "inkling" => &INKLING,
        _ => return None,
    })
}
