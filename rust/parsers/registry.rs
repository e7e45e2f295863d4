//! Parser names: canonical ones and the spellings Dynamo, vLLM and SGLang use.

use std::sync::Arc;

use super::dialect::Dialect;
use super::template::{self, Template};
use super::{reasoning, tools, ReasoningParse, ToolParse, Tools};

/// A parser family: its canonical name, the other names it answers to, and what a
/// server must know about its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParserInfo {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    /// Its markers are special tokens, so the detokenizer must keep special tokens
    /// for the parser to see them.
    pub keeps_special_tokens: bool,
}

const fn info(name: &'static str, aliases: &'static [&'static str]) -> ParserInfo {
    ParserInfo {
        name,
        aliases,
        keeps_special_tokens: false,
    }
}

/// A family whose markers are special tokens.
const fn special(name: &'static str, aliases: &'static [&'static str]) -> ParserInfo {
    ParserInfo {
        keeps_special_tokens: true,
        ..info(name, aliases)
    }
}

const REASONING: &[ParserInfo] = &[
    info("basic", &["think"]),
    info(
        "deepseek_r1",
        &[
            "deepseek-r1",
            "deepseek_v3",
            "deepseek-v3",
            "deepseekv3",
            "deepseek_v3_1",
            "deepseek_v31",
            "deepseekv31",
            "deepseek_v3_2",
            "deepseek_v32",
            "deepseekv32",
            "step5",
            "gigachat35",
            "holo2",
            "iquest_q1",
        ],
    ),
    info("deepseek_v4", &["deepseek-v4", "deepseekv4"]),
    info(
        "qwen3",
        &[
            "qwen3-thinking",
            "qwen3_thinking",
            "interns1",
            "qwen3_coder",
            "dots",
            "nanbeige",
            "zaya",
            "mimo",
            "poolside_v1",
            "ripple",
            "minicpmv",
            "olmo3",
        ],
    ),
    info("glm45", &["glm47", "glm", "glm4"]),
    info("kimi", &[]),
    info(
        "kimi_k2",
        &["kimi_k25", "kimi-k2", "kimi-k25", "kimi_k2_thinking"],
    ),
    info("kimi_k3", &["kimi-k3"]),
    info("mistral", &[]),
    special(
        "gpt_oss",
        &["gpt-oss", "openai_gptoss", "openai", "harmony"],
    ),
    info("granite", &[]),
    info("step3", &["step3p5"]),
    info(
        "nemotron_v3",
        &[
            "nemotron_nano",
            "nemotron3",
            "nemotron_3",
            "nemotron-v3",
            "granite_thinking_parser",
        ],
    ),
    info("nemotron_deci", &[]),
    info("minimax_m2", &["minimax", "minimax-m2"]),
    info(
        "minimax_append_think",
        &["minimax_m2_append_think", "minimax-append-think"],
    ),
    info("minimax_m3", &["minimax-m3"]),
    info("gemma4", &["gemma-4"]),
    info("seed_oss", &["seed-oss"]),
    info("cohere_command", &["cohere_command3", "cohere_command4"]),
    info("apertus", &["apertus2509"]),
    info("k2_horizon", &[]),
    info("plamo3", &[]),
    info("hunyuan", &["hunyuan_a13b", "hy_v3", "hy_v4"]),
    info("ling3", &[]),
    info("ernie45", &[]),
    info("inkling", &[]),
    info("muse", &["muse_glimmer", "musespark"]),
    info(
        "deepseek_v4_1",
        &[
            "deepseek_v41",
            "deepseekv41",
            "deepseek-v41",
            "deepseek-v4.1",
        ],
    ),
    // Driven by the checkpoint's response template (see `super::template`).
    special("response_template", &["hf"]),
    special("beam", &[]),
];

const TOOL_CALL: &[ParserInfo] = &[
    info(
        "hermes",
        &[
            "qwen25",
            "qwen",
            "qwen2_5",
            "qwen3_json",
            "ripple",
            "granite4",
            "trinity",
            "ernie45",
        ],
    ),
    info("llama3_json", &["llama3", "llama4_json", "llama"]),
    info("mistral", &[]),
    info("pythonic", &["llama4_pythonic"]),
    info("deepseek_v3", &["deepseekv3", "deepseek-v3", "deepseek_r1"]),
    info(
        "deepseek_v3_1",
        &[
            "deepseek_v31",
            "deepseekv31",
            "deepseek-v3.1",
            "deepseek-v31",
        ],
    ),
    info(
        "deepseek_v3_2",
        &["deepseek_v32", "deepseekv32", "deepseek-v32"],
    ),
    info("deepseek_v4", &["deepseek-v4", "deepseekv4"]),
    info(
        "qwen3_coder",
        &[
            "qwen3_xml",
            "qwen3-coder",
            "nemotron_nano",
            "mimo",
            "step3p5",
            "step5",
            "nanbeige",
            "granite_toolcall_parser",
            "qwen3",
        ],
    ),
    info("glm45", &["glm", "glm4", "poolside_v1", "spark25"]),
    info("glm47", &["glm-4.7", "ling3"]),
    special("kimi_k2", &["kimi-k2", "kimi_k25"]),
    special("harmony", &["openai", "gpt-oss", "gpt_oss"]),
    info("minimax_m2", &["minimax-m2"]),
    special("gemma4", &["gemma-4"]),
    info("jamba", &["hunyuan_a13b"]),
    info("phi4", &["phi4_mini_json", "phi-4"]),
    info("nemotron_deci", &[]),
    info("step3", &[]),
    info("seed_oss", &["seed-oss"]),
    info("zaya", &["zaya_xml"]),
    info("dots", &[]),
    info("hunyuan", &["hy_v3"]),
    info("iquest_q1", &[]),
    info(
        "deepseek_v4_1",
        &[
            "deepseek_v41",
            "deepseekv41",
            "deepseek-v41",
            "deepseek-v4.1",
        ],
    ),
    info("gigachat35", &[]),
    info("kimi_k3", &["kimi-k3"]),
    info("longcat", &[]),
    info("internlm", &["interns1", "internlm2"]),
    info("inkling", &[]),
    info(
        "minimax_m3",
        &["minimax-m3", "minimax_m3_nom", "minimax-m3-nom"],
    ),
    info("muse", &["muse_glimmer", "musespark"]),
    info("hy_v4", &[]),
    info("k2_horizon", &[]),
    info("cohere_command", &["cohere_command3", "cohere_command4"]),
    info("gigachat3", &[]),
    info("lfm2", &[]),
    info("apertus", &["apertus2509"]),
    info("olmo3", &[]),
    info("functiongemma", &["function_gemma"]),
    info("granite_20b_fc", &["granite-20b-fc"]),
    info("granite", &["granite3"]),
    info("xlam", &[]),
    info("plamo3", &[]),
    info("minicpm5", &[]),
    // Driven by the checkpoint's response template (see `super::template`).
    special("response_template", &["hf"]),
    special("beam", &[]),
    info("default", &[]),
];

/// Reasoning parsers: canonical names with their aliases.
pub fn reasoning_parsers() -> &'static [ParserInfo] {
    REASONING
}

/// Tool-call parsers: canonical names with their aliases.
pub fn tool_call_parsers() -> &'static [ParserInfo] {
    TOOL_CALL
}

/// A parser name nobody knows; the message lists the valid ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} parser `{name}`; valid names: {valid}")]
pub struct UnknownParser {
    pub kind: &'static str,
    pub name: String,
    pub valid: String,
}

fn resolve(
    table: &'static [ParserInfo],
    kind: &'static str,
    name: &str,
) -> Result<&'static ParserInfo, UnknownParser> {
    let wanted = name.trim();
    for entry in table {
        if entry.name.eq_ignore_ascii_case(wanted)
            || entry.aliases.iter().any(|a| a.eq_ignore_ascii_case(wanted))
        {
            return Ok(entry);
        }
    }
    let mut valid: Vec<&str> = table
        .iter()
        .flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()))
        .collect();
    valid.sort_unstable();
    Err(UnknownParser {
        kind,
        name: name.to_owned(),
        valid: valid.join(", "),
    })
}

/// The reasoning parser names Dynamo 1.6.1's own map holds (it lower-cases a name
/// first). Any other name, a family's alias included (`kimi_k2`, `deepseek-r1`,
/// `qwen3-thinking`, `minimax`), runs its plain non-forced `<think>` parser instead.
const DYNAMO_REASONING_NAMES: &[&str] = &[
    "basic",
    "deepseek_r1",
    "deepseek_v3",
    "deepseek_v3_1",
    "deepseek_v3_2",
    "deepseek_v4",
    "deepseek-v4",
    "deepseekv4",
    "gpt_oss",
    "qwen3",
    "nemotron_deci",
    "nemotron_nano",
    "nemotron3",
    "nemotron_v3",
    "kimi",
    "kimi_k25",
    "step3",
    "mistral",
    "granite",
    "glm45",
    "minimax_append_think",
    "minimax_m3",
    "minimax-m3",
    "gemma4",
    "gemma-4",
    "inkling",
];

/// How Dynamo 1.6.1's reasoning map reads a spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DynamoName {
    /// The map holds it.
    Known,
    /// The map holds the family under other names only (`kimi_k2`: it has `kimi_k25`).
    OtherSpelling,
    /// The map lacks the family (`cohere_command`, `minimax_m2`).
    Unknown,
}

impl DynamoName {
    fn of(spelling: &str, info: &ParserInfo) -> Self {
        let known =
            |name: &str| DYNAMO_REASONING_NAMES.contains(&name.to_ascii_lowercase().as_str());
        if known(spelling) {
            DynamoName::Known
        } else if std::iter::once(info.name)
            .chain(info.aliases.iter().copied())
            .any(known)
        {
            DynamoName::OtherSpelling
        } else {
            DynamoName::Unknown
        }
    }
}

/// A reasoning parser name, resolved once: building the parser cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasoningFamily {
    info: &'static ParserInfo,
    /// The spelling itself says output starts inside reasoning (`qwen3-thinking`).
    starts_in_reasoning: bool,
    /// How Dynamo 1.6.1's map reads the spelling (see [`DYNAMO_REASONING_NAMES`]).
    dynamo: DynamoName,
    /// The thinking switch this spelling reads (a gate of [`super::options`]):
    /// the family's, except where a name means a different switch.
    switch: &'static str,
    /// The dialect that reads it (set by [`Self::read_by`]).
    dialect: Dialect,
}

impl ReasoningFamily {
    /// The family for any accepted spelling.
    pub fn resolve(name: &str) -> Result<Self, UnknownParser> {
        let info = resolve(REASONING, "reasoning", name)?;
        let spelling = name.trim().to_ascii_lowercase();
        Ok(Self {
            info,
            starts_in_reasoning: matches!(spelling.as_str(), "qwen3-thinking" | "qwen3_thinking"),
            dynamo: DynamoName::of(&spelling, info),
            // DeepSeek V3 and V3.1 think only when the request asks (their templates
            // default to chat mode); R1 and V3.2 think unless it says otherwise.
            switch: match spelling.as_str() {
                "deepseek_v3" | "deepseek-v3" | "deepseekv3" | "deepseek_v3_1" | "deepseek_v31"
                | "deepseekv31" => "deepseek_v3",
                _ => info.name,
            },
            dialect: Dialect::Dynamo,
        })
    }

    /// The family `dialect` runs for this spelling. In Dynamo's, a name its map lacks
    /// runs its plain `<think>` parser (`basic`) when the map knows the family by
    /// another name (`kimi_k2`, `deepseek-r1`, `qwen3-thinking`), and, in the
    /// pipeline's `reference` mode only, for families it lacks too (`minimax`): that
    /// loses their markers, which standalone parsers keep. vLLM and SGLang names keep
    /// their own meaning.
    pub fn read_by(self, dialect: Dialect, reference: bool) -> Self {
        // A template family's markers are the checkpoint's, not a parser's: it keeps
        // them, in the pipeline too (Dynamo has no such family to copy).
        let plain = !template::is_template_family(self.info.name)
            && match self.dynamo {
                DynamoName::Known => false,
                DynamoName::OtherSpelling => true,
                DynamoName::Unknown => reference,
            };
        if dialect != Dialect::Dynamo || !plain {
            return Self { dialect, ..self };
        }
        let basic = &REASONING[0];
        Self {
            info: basic,
            starts_in_reasoning: false,
            dynamo: DynamoName::Known,
            switch: basic.name,
            dialect,
        }
    }

    pub fn info(self) -> &'static ParserInfo {
        self.info
    }

    pub fn name(self) -> &'static str {
        self.info.name
    }

    /// The gate of [`super::options`] that reads this name's thinking switch.
    pub fn switch(self) -> &'static str {
        self.switch
    }

    /// A parser. `in_reasoning` overrides the family's own default for whether output
    /// starts inside reasoning (the chat template opened it). `exit_markers` end
    /// reasoning implicitly and are passed on as content intact. `reference_streaming`:
    /// see [`super::chat::ChatOptions::reference_streaming`].
    pub fn build(
        self,
        in_reasoning: Option<bool>,
        exit_markers: &'static [&'static str],
        reference_streaming: bool,
    ) -> Box<dyn ReasoningParse> {
        self.build_with(in_reasoning, exit_markers, reference_streaming, None)
    }

    /// [`Self::build`], with the response template a template family parses with.
    pub fn build_with(
        self,
        in_reasoning: Option<bool>,
        exit_markers: &'static [&'static str],
        reference_streaming: bool,
        response_template: Option<Arc<Template>>,
    ) -> Box<dyn ReasoningParse> {
        let in_reasoning = in_reasoning.or(self.starts_in_reasoning.then_some(true));
        if template::is_template_family(self.info.name) {
            return template::reasoning_parser(self.info.name, response_template, in_reasoning);
        }
        reasoning::build(
            self.info.name,
            in_reasoning,
            exit_markers,
            reference_streaming,
            self.dialect,
        )
    }
}

/// A tool-call parser name, resolved once: building the parser cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolCallFamily {
    info: &'static ParserInfo,
    /// The name as the family lists it (canonical or alias) for the spelling asked for:
    /// a server may run different code under two names of one family (SGLang's `qwen25`
    /// and `hermes`).
    spelling: &'static str,
}

impl ToolCallFamily {
    /// The family for any accepted spelling.
    pub fn resolve(name: &str) -> Result<Self, UnknownParser> {
        let info = resolve(TOOL_CALL, "tool-call", name)?;
        let wanted = name.trim();
        let spelling = std::iter::once(info.name)
            .chain(info.aliases.iter().copied())
            .find(|n| n.eq_ignore_ascii_case(wanted))
            .unwrap_or(info.name);
        Ok(Self { info, spelling })
    }

    pub fn info(self) -> &'static ParserInfo {
        self.info
    }

    pub fn name(self) -> &'static str {
        self.info.name
    }

    /// The name asked for, as the family lists it.
    pub fn spelling(self) -> &'static str {
        self.spelling
    }

    /// A parser for the request's `tools` (used by schema-typed formats).
    pub fn build(self, tools: Arc<Tools>) -> Box<dyn ToolParse> {
        self.build_with(tools, None)
    }

    /// [`Self::build`], with the response template a template family parses with.
    pub fn build_with(
        self,
        tools: Arc<Tools>,
        response_template: Option<Arc<Template>>,
    ) -> Box<dyn ToolParse> {
        if template::is_template_family(self.info.name) {
            return template::tool_parser(self.info.name, response_template, tools);
        }
        tools::build(self.info.name, tools)
    }
}

/// A reasoning parser by name (see [`ReasoningFamily::build`]).
pub fn new_reasoning_parser(
    name: &str,
    in_reasoning: Option<bool>,
    exit_markers: &'static [&'static str],
    reference_streaming: bool,
) -> Result<Box<dyn ReasoningParse>, UnknownParser> {
    Ok(ReasoningFamily::resolve(name)?.build(in_reasoning, exit_markers, reference_streaming))
}

/// A tool-call parser by name (see [`ToolCallFamily::build`]).
pub fn new_tool_parser(name: &str, tools: Arc<Tools>) -> Result<Box<dyn ToolParse>, UnknownParser> {
    Ok(ToolCallFamily::resolve(name)?.build(tools))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve() {
        let tool_call = |name| ToolCallFamily::resolve(name).unwrap().name();
        assert_eq!(tool_call("qwen25"), "hermes");
        assert_eq!(
            ToolCallFamily::resolve(" QWEN25").unwrap().spelling(),
            "qwen25"
        );
        assert_eq!(
            ToolCallFamily::resolve("hermes").unwrap().spelling(),
            "hermes"
        );
        assert_eq!(tool_call("gpt-oss"), "harmony");
        assert_eq!(tool_call("deepseekv31"), "deepseek_v3_1");
        let deepseek = ReasoningFamily::resolve("deepseek-r1").unwrap();
        assert_eq!(deepseek.name(), "deepseek_r1");
        assert!(!deepseek.starts_in_reasoning);
        assert!(
            ReasoningFamily::resolve("qwen3_thinking")
                .unwrap()
                .starts_in_reasoning
        );
        assert!(
            ToolCallFamily::resolve("harmony")
                .unwrap()
                .info()
                .keeps_special_tokens
        );
        // As Dynamo 1.6.1: mistral's and minimax_m2's markers are decoded as text.
        for plain in ["hermes", "mistral", "minimax_m2"] {
            assert!(
                !ToolCallFamily::resolve(plain)
                    .unwrap()
                    .info()
                    .keeps_special_tokens
            );
        }
        assert!(
            ReasoningFamily::resolve("gpt_oss")
                .unwrap()
                .info()
                .keeps_special_tokens
        );
    }

    #[test]
    fn dynamo_runs_its_plain_think_parser_for_names_it_lacks() {
        let family = |name| ReasoningFamily::resolve(name).unwrap();
        let read = |name| family(name).read_by(Dialect::Dynamo, true);
        for alias in [
            "kimi_k2",
            "deepseek-r1",
            "qwen3-thinking",
            "minimax",
            "harmony",
        ] {
            assert_eq!(read(alias).name(), "basic", "{alias}");
            assert!(!read(alias).starts_in_reasoning);
        }
        // Outside reference mode a family Dynamo lacks keeps its parser.
        let standalone = |name| family(name).read_by(Dialect::Dynamo, false).name();
        assert_eq!(standalone("minimax"), "minimax_m2");
        assert_eq!(standalone("kimi_k2"), "basic");
        assert_eq!(read("kimi_k25").name(), "kimi_k2");
        assert_eq!(read("Deepseek_V3_1").name(), "deepseek_r1");
        assert_eq!(read("deepseek_v3_1").switch(), "deepseek_v3");
        assert_eq!(read("deepseek_v3_2").switch(), "deepseek_r1");
        // vLLM and SGLang names keep their own meaning.
        let vllm = family("kimi_k2").read_by(Dialect::Vllm, true);
        assert_eq!(vllm.name(), "kimi_k2");
    }

    #[test]
    fn unknown_lists_valid_names() {
        let err = ToolCallFamily::resolve("nope").unwrap_err();
        assert!(err.to_string().contains("hermes"));
        assert!(err.to_string().contains("`nope`"));
    }

    #[test]
    fn every_name_builds() {
        let tools = Arc::new(Tools::default());
        for entry in reasoning_parsers() {
            new_reasoning_parser(entry.name, None, &[], false).unwrap();
        }
        for entry in tool_call_parsers() {
            new_tool_parser(entry.name, tools.clone()).unwrap();
        }
    }

    #[test]
    fn no_name_is_claimed_twice() {
        for table in [REASONING, TOOL_CALL] {
            let mut all: Vec<&str> = table
                .iter()
                .flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()))
                .collect();
            let n = all.len();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), n);
        }
    }
}
