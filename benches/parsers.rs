//! Parser throughput in Rust: the same outputs as `benches/corpus.py`, cut into
//! token-sized pieces by the DeepSeek tokenizer, at 2 KB, 32 KB and 256 KB.
//!
//!     python tests/fixtures/build_model.py && cargo bench --bench parsers
//!
//! Times are the CPU time of the parsing thread (wall time elsewhere than Linux/glibc).

use std::path::PathBuf;
use std::sync::Arc;

use _core::parsers::chat::ChatOptions;
use _core::parsers::template::Template;
use _core::parsers::{ChatParser, Delta, Tools};

const PARAGRAPH: &str =
    "The forecast for Zürich shows light rain in the morning, clearing by noon; \
temperatures stay between 7 and 12 °C. 東京の天気は晴れ。 Winds are calm. ";
const ARGS: &str = r#"{"city": "Zürich", "days": 3, "units": "metric", "filters": {"hourly": true, "fields": ["temp", "rain", "wind"], "note": "a {brace} \"quote\""}}"#;
const TOOLS: &str = r#"[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"units":{"type":"string"},"filters":{"type":"object"}}}}}]"#;

/// A checkpoint's `response_template` (Qwen-style markers) for the `response_template` row.
const RESPONSE_TEMPLATE: &str = r#"{"start_anchor": "<|im_start|>assistant\n", "fields": {
  "thinking": {"open": "<think>", "close": "</think>"},
  "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json",
    "transform": {"type": "function", "function": {"name": "{content.name}", "arguments": "{content.arguments}"}}}}}"#;

const FORMATS: &[(&str, Option<&str>, Option<&str>)] = &[
    ("hermes", None, Some("hermes")),
    ("qwen3_coder", None, Some("qwen3_coder")),
    ("kimi_k2", None, Some("kimi_k2")),
    ("deepseek_v3_1", None, Some("deepseek_v3_1")),
    ("harmony", Some("gpt_oss"), Some("harmony")),
    ("deepseek_r1+hermes", Some("deepseek_r1"), Some("hermes")),
    // Families added for coverage: one per format, reasoning where the family has its own.
    ("seed_oss", Some("seed_oss"), Some("seed_oss")),
    ("zaya", None, Some("zaya")),
    ("dots", None, Some("dots")),
    ("hunyuan", Some("hunyuan"), Some("hunyuan")),
    ("hy_v4", None, Some("hy_v4")),
    ("iquest_q1", None, Some("iquest_q1")),
    (
        "deepseek_v4_1",
        Some("deepseek_v4_1"),
        Some("deepseek_v4_1"),
    ),
    ("gigachat35", None, Some("gigachat35")),
    ("kimi_k3", Some("kimi_k3"), Some("kimi_k3")),
    ("k2_horizon", None, Some("k2_horizon")),
    ("minimax_m3", None, Some("minimax_m3")),
    ("muse", Some("muse"), Some("muse")),
    ("minicpm5", None, Some("minicpm5")),
    ("longcat", None, Some("longcat")),
    ("internlm", None, Some("internlm")),
    ("inkling", Some("inkling"), Some("inkling")),
    (
        "cohere_command",
        Some("cohere_command"),
        Some("cohere_command"),
    ),
    ("gigachat3", None, Some("gigachat3")),
    ("lfm2", None, Some("lfm2")),
    ("apertus", Some("apertus"), Some("apertus")),
    ("olmo3", None, Some("olmo3")),
    ("functiongemma", None, Some("functiongemma")),
    ("granite_20b_fc", None, Some("granite_20b_fc")),
    ("granite", None, Some("granite")),
    ("xlam", None, Some("xlam")),
    ("plamo3", Some("plamo3"), Some("plamo3")),
    // The families the rows above leave out: the older tool-call formats (with their own
    // reasoning), then every reasoning family alone.
    ("llama3_json", None, Some("llama3_json")),
    ("mistral", Some("mistral"), Some("mistral")),
    ("pythonic", None, Some("pythonic")),
    ("deepseek_v3", Some("deepseek_r1"), Some("deepseek_v3")),
    ("deepseek_v3_2", None, Some("deepseek_v3_2")),
    ("deepseek_v4", Some("deepseek_v4"), Some("deepseek_v4")),
    ("glm45", Some("glm45"), Some("glm45")),
    ("glm47", None, Some("glm47")),
    ("minimax_m2", Some("minimax_m2"), Some("minimax_m2")),
    ("gemma4", Some("gemma4"), Some("gemma4")),
    ("jamba", None, Some("jamba")),
    ("phi4", None, Some("phi4")),
    (
        "nemotron_deci",
        Some("nemotron_deci"),
        Some("nemotron_deci"),
    ),
    ("step3", Some("step3"), Some("step3")),
    ("default", None, Some("default")),
    ("basic", Some("basic"), None),
    ("qwen3", Some("qwen3"), None),
    ("kimi", Some("kimi"), None),
    ("kimi_k2 reasoning", Some("kimi_k2"), None),
    ("granite reasoning", Some("granite"), None),
    ("nemotron_v3", Some("nemotron_v3"), None),
    ("minimax_append_think", Some("minimax_append_think"), None),
    ("minimax_m3 reasoning", Some("minimax_m3"), None),
    ("k2_horizon reasoning", Some("k2_horizon"), None),
    ("ling3", Some("ling3"), None),
    ("ernie45", Some("ernie45"), None),
    // Template-driven: Beam's built-in template, and a checkpoint's (`RESPONSE_TEMPLATE`).
    ("beam", Some("beam"), Some("beam")),
    ("response_template", Some("hf"), Some("hf")),
];

/// The arguments as XML-style parameters write them: (key, text, is a string).
const VALUES: &[(&str, &str, bool)] = &[
    ("city", "Zürich", true),
    ("days", "3", false),
    ("units", "metric", true),
    (
        "filters",
        r#"{"hourly": true, "fields": ["temp", "rain", "wind"], "note": "a {brace} \"quote\""}"#,
        false,
    ),
];

/// Reasoning each family's output opens with.
const REASONING_SPANS: &[(&str, &str, &str)] = &[
    ("deepseek_r1+hermes", "<think>", "</think>"),
    ("harmony", "<|channel|>analysis<|message|>", "<|end|>"),
    ("seed_oss", "<seed:think>", "</seed:think>"),
    ("hunyuan", "<think>", "</think>"),
    ("deepseek_v4_1", "<think>", "</think>"),
    ("kimi_k3", "<|open|>think<|sep|>", "<|close|>think<|sep|>"),
    (
        "muse",
        " to=self<|message|>",
        "<|eom|><|start|>assistant to=user<|message|>",
    ),
    (
        "inkling",
        "<|message_model|><|content_thinking|>",
        "<|end_message|>",
    ),
    ("cohere_command", "<|START_THINKING|>", "<|END_THINKING|>"),
    ("apertus", "<|inner_prefix|>", "<|inner_suffix|>"),
    (
        "plamo3",
        "<|plamo:begin_think:plamo|>",
        "<|plamo:end_think:plamo|>",
    ),
    ("mistral", "[THINK]", "[/THINK]"),
    ("deepseek_v3", "<think>", "</think>"),
    ("deepseek_v4", "<think>", "</think>"),
    ("glm45", "<think>", "</think>"),
    ("minimax_m2", "<think>", "</think>"),
    ("gemma4", "<|channel>thought\n", "<channel|>"),
    ("nemotron_deci", "<think>", "</think>"),
    ("step3", "<think>", "</think>"),
    ("basic", "<think>", "</think>"),
    ("qwen3", "<think>", "</think>"),
    ("kimi", "◁think▷", "◁/think▷"),
    ("kimi_k2 reasoning", "<think>", "</think>"),
    (
        "granite reasoning",
        "Here is my thought process:",
        "Here is my response:",
    ),
    ("nemotron_v3", "<think>", "</think>"),
    ("minimax_append_think", "", ""),
    ("minimax_m3 reasoning", "<mm:think>", "</mm:think>"),
    ("k2_horizon reasoning", "<ifm|think>", "</ifm|think>"),
    ("ling3", "<think>", "</think>"),
    ("ernie45", "<think>", "</think>"),
    (
        "beam",
        "<|channel|>analysis<|message|>",
        "<|end|><|start|>assistant",
    ),
    ("response_template", "<think>", "</think>"),
];

/// Every parameter written by `one(key, text, is_string)`, concatenated.
fn params(one: impl Fn(&str, &str, bool) -> String) -> String {
    VALUES.iter().map(|(k, v, s)| one(k, v, *s)).collect()
}

fn call_text(fmt: &str, index: usize) -> String {
    match fmt {
        "hermes" | "deepseek_r1+hermes" => {
            format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {ARGS}}}\n</tool_call>")
        }
        "qwen3_coder" => "<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich\n</parameter>\n\
<parameter=days>\n3\n</parameter>\n<parameter=units>\nmetric\n</parameter>\n<parameter=filters>\n\
{\"hourly\": true, \"fields\": [\"temp\", \"rain\", \"wind\"], \"note\": \"a {brace} \\\"quote\\\"\"}\n\
</parameter>\n</function>\n</tool_call>"
            .to_owned(),
        "kimi_k2" => format!(
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:{index}\
<|tool_call_argument_begin|>{ARGS}<|tool_call_end|><|tool_calls_section_end|>"
        ),
        "deepseek_v3_1" => format!(
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{ARGS}\
<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        ),
        "harmony" => format!(
            "<|start|>assistant<|channel|>commentary to=functions.get_weather \
<|constrain|>json<|message|>{ARGS}<|call|>"
        ),
        _ => new_family_call(fmt, index),
    }
}

/// A get_weather call in one of the formats added for coverage (`benches/corpus.py` too).
fn new_family_call(fmt: &str, index: usize) -> String {
    let obj = format!("{{\"name\": \"get_weather\", \"arguments\": {ARGS}}}");
    let qwen = params(|k, v, _| format!("<parameter={k}>\n{v}\n</parameter>\n"));
    let named = params(|k, v, _| format!("<parameter name=\"{k}\">{v}</parameter>\n"));
    let kv = params(|k, v, _| format!("<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n"));
    let dsml = |tag: &str| {
        params(|k, v, s| {
            format!("<{tag}parameter name=\"{k}\" string=\"{s}\">{v}</{tag}parameter>\n")
        })
    };
    match fmt {
        "seed_oss" => format!("<seed:tool_call>\n<function=get_weather>\n{qwen}</function>\n</seed:tool_call>"),
        "zaya" => format!("<zyphra_tool_call>\n<function=get_weather>\n{qwen}</function>\n</zyphra_tool_call>"),
        "dots" => format!("<dots_function_call>\n<invoke name=\"get_weather\">\n{named}</invoke>\n</dots_function_call>"),
        "hunyuan" => format!("<tool_calls>\n<tool_call>get_weather<tool_sep>\n{kv}</tool_call>\n</tool_calls>"),
        "hy_v4" => format!("<tool_calls>\n<tool_call>get_weather{kv}</tool_call>\n</tool_calls>"),
        "iquest_q1" => format!("<iquest_tool_call>get_weather\n{kv}</iquest_tool_call>"),
        "deepseek_v4_1" => format!(
            "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n{}</｜DSML｜ invoke>\n</｜DSML｜ calls>",
            dsml("｜DSML｜ ")
        ),
        "gigachat35" => format!(
            "<｜GCML｜tool_calls>\n<｜GCML｜invoke name=\"get_weather\">\n{}</｜GCML｜invoke>\n</｜GCML｜tool_calls>",
            dsml("｜GCML｜")
        ),
        "kimi_k3" => {
            let args = params(|k, v, s| {
                let ty = match (s, k) {
                    (true, _) => "string",
                    (false, "filters") => "object",
                    _ => "integer",
                };
                format!("<|open|>argument key=\"{k}\" type=\"{ty}\"<|sep|>{v}<|close|>argument<|sep|>")
            });
            format!("<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"{index}\"<|sep|>{args}<|close|>call<|sep|><|close|>tools<|sep|>")
        }
        "k2_horizon" => format!(
            "<ifm|tool_calls><ifm|tool_call>get_weather{}</ifm|tool_call></ifm|tool_calls>",
            params(|k, v, _| format!("<ifm|arg_key>{k}</ifm|arg_key><ifm|arg_value>{v}</ifm|arg_value>"))
        ),
        "minimax_m3" => {
            let ns = "]<]minimax[>[";
            format!(
                "{ns}<tool_call>\n{ns}<invoke name=\"get_weather\">\n{}{ns}</invoke>\n{ns}</tool_call>",
                params(|k, v, _| format!("{ns}<{k}>{v}{ns}</{k}>\n"))
            )
        }
        "muse" => format!(
            "<|start|>assistant to=functions.get_weather<|message|><atem:function_calls>\n\
<atem:invoke name=\"get_weather\">\n{}</atem:invoke>\n</atem:function_calls><|eom|>",
            params(|k, v, _| format!("<atem:parameter name=\"{k}\">{v}</atem:parameter>\n"))
        ),
        "minicpm5" => format!(
            "<function name=\"get_weather\">{}</function>",
            params(|k, v, _| format!("<param name=\"{k}\">{v}</param>"))
        ),
        "functiongemma" => "<start_function_call>call:get_weather{city:<escape>Zürich<escape>,days:3,\
units:<escape>metric<escape>,filters:{hourly:true,fields:[<escape>temp<escape>,<escape>rain<escape>,\
<escape>wind<escape>],note:<escape>a {brace} \"quote\"<escape>}}<end_function_call>"
            .to_owned(),
        "longcat" => format!("<longcat_tool_call>{obj}</longcat_tool_call>"),
        "internlm" => format!(
            "<|action_start|><|plugin|>{{\"name\": \"get_weather\", \"parameters\": {ARGS}}}<|action_end|>"
        ),
        "inkling" => format!(
            "<|message_model|><|content_invoke_tool_json|>{{\"name\": \"get_weather\", \"args\": {ARGS}}}<|end_message|>"
        ),
        "cohere_command" => format!(
            "<|START_ACTION|>[{{\"tool_call_id\": \"{index}\", \"tool_name\": \"get_weather\", \"parameters\": {ARGS}}}]<|END_ACTION|>"
        ),
        "gigachat3" => format!("<|function_call|>{obj}</s>"),
        "lfm2" => "<|tool_call_start|>[get_weather(city=\"Zürich\", days=3, units=\"metric\")]<|tool_call_end|>"
            .to_owned(),
        "apertus" => format!("<|tools_prefix|>[{{\"get_weather\": {ARGS}}}]<|tools_suffix|>"),
        "olmo3" => "<function_calls>get_weather(city=\"Zürich\", days=3, filters={\"hourly\": true})</function_calls>"
            .to_owned(),
        "granite_20b_fc" => format!("<function_call> {obj}"),
        "granite" => format!("<|tool_call|>[{obj}]"),
        "xlam" => format!("<tool_call>[{obj}]</tool_call>"),
        "plamo3" => format!(
            "<|plamo:begin_tool_requests:plamo|><|plamo:begin_tool_request:plamo|>\
<|plamo:begin_tool_name:plamo|>get_weather<|plamo:end_tool_name:plamo|>\
<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>{ARGS}\
<|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|><|plamo:end_tool_requests:plamo|>"
        ),
        "glm45" => format!("<tool_call>get_weather\n{kv}</tool_call>"),
        "beam" => format!(
            " to=get_weather<|channel|>analysis <|constrain|>xml<|message|>{}<|end|><|start|>assistant",
            params(|k, v, _| format!("<rfl:parameter name=\"{k}\">\n{v}\n</rfl:parameter>"))
        ),
        "response_template" => format!("<tool_call>{obj}</tool_call>"),
        "glm47" => format!(
            "<tool_call>get_weather{}</tool_call>",
            params(|k, v, _| format!("<arg_key>{k}</arg_key><arg_value>{v}</arg_value>"))
        ),
        "minimax_m2" => format!(
            "<minimax:tool_call>\n<invoke name=\"get_weather\">\n{named}</invoke>\n</minimax:tool_call>"
        ),
        "deepseek_v3_2" | "deepseek_v4" => {
            let block = if fmt == "deepseek_v3_2" { "function_calls" } else { "tool_calls" };
            format!(
                "<｜DSML｜{block}>\n<｜DSML｜invoke name=\"get_weather\">\n{}</｜DSML｜invoke>\n</｜DSML｜{block}>",
                dsml("｜DSML｜")
            )
        }
        "step3" => format!(
            "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"get_weather\">{}\
</steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
            params(|k, v, _| format!("<steptml:parameter name=\"{k}\">{v}</steptml:parameter>"))
        ),
        "gemma4" => "<|tool_call>call:get_weather{city:<|\"|>Zürich<|\"|>,days:3,units:<|\"|>metric<|\"|>,\
filters:{hourly:true,fields:[<|\"|>temp<|\"|>,<|\"|>rain<|\"|>,<|\"|>wind<|\"|>],\
note:<|\"|>a {brace} \"quote\"<|\"|>}}<tool_call|>"
            .to_owned(),
        "llama3_json" => {
            format!("<|python_tag|>{{\"name\": \"get_weather\", \"parameters\": {ARGS}}}")
        }
        "mistral" => format!("[TOOL_CALLS]get_weather[ARGS]{ARGS}"),
        "pythonic" => "[get_weather(city='Zürich', days=3, filters={'hourly': True})]".to_owned(),
        "deepseek_v3" => format!(
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n\
```json\n{ARGS}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        ),
        "jamba" => format!("<tool_calls>[{obj}]</tool_calls>"),
        "phi4" => format!("functools[{obj}]"),
        "nemotron_deci" | "default" => format!("<TOOLCALL>[{obj}]</TOOLCALL>"),
        other => panic!("no generator for {other}"),
    }
}

fn output_text(fmt: &str, tool_call: Option<&str>, size: usize) -> String {
    let span = REASONING_SPANS.iter().find(|(f, _, _)| *f == fmt);
    if tool_call.is_none() {
        // Reasoning alone: half the output reasoning, half the answer.
        let (_, opener, closer) = span.expect("a reasoning row has its span");
        let thought = PARAGRAPH.repeat((size / 2 / PARAGRAPH.len()).max(1));
        let answer = PARAGRAPH.repeat(((size - thought.len().min(size)) / PARAGRAPH.len()).max(1));
        return format!("{opener}{thought}{closer}{answer}");
    }
    let mut text = String::new();
    if let Some((_, opener, closer)) = span {
        text.push_str(opener);
        text.push_str(&PARAGRAPH.repeat(3));
        text.push_str(closer);
    }
    let mut index = 0;
    while text.len() < size {
        text.push_str(PARAGRAPH);
        text.push_str(&call_text(fmt, index));
        index += 1;
    }
    text
}

/// One piece per token, multi-byte characters held until complete, as a streaming detokenizer cuts.
fn token_pieces(tokenizer: &tokenizers::Tokenizer, text: &str) -> Vec<String> {
    let ids = tokenizer.encode(text, false).unwrap().get_ids().to_vec();
    let mut pieces = Vec::with_capacity(ids.len());
    let mut window = Vec::new();
    for id in ids {
        window.push(id);
        let decoded = tokenizer.decode(&window, false).unwrap();
        if decoded.ends_with('\u{fffd}') {
            continue;
        }
        pieces.push(decoded);
        window.clear();
    }
    assert_eq!(pieces.concat(), text, "pieces must reassemble the text");
    pieces
}

/// CPU time of this thread in ns: on a machine shared with other work, wall time would add
/// whatever the scheduler gave others, more the longer a run lasts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn thread_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// Elsewhere, wall time.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn thread_ns() -> u128 {
    use std::time::Instant;
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos()
}

fn median_ns(rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<u128> = (0..rounds)
        .map(|_| {
            let start = thread_ns();
            f();
            thread_ns() - start
        })
        .collect();
    times.sort_unstable();
    times[rounds / 2] as f64
}

fn main() {
    let dir = std::env::var_os("SHAKEDOWN_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("tests/fixtures/model-deepseek"));
    let tokenizer =
        tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run python tests/fixtures/build_model.py",
                dir.display()
            )
        });
    let tools = Arc::new(Tools::from_json(TOOLS.as_bytes()).unwrap());
    println!("format                 CPU ns/piece 2KB  32KB   256KB   per-byte 256KB/2KB");
    for (fmt, reasoning, tool_call) in FORMATS {
        let options = ChatOptions {
            reasoning: reasoning.map(str::to_owned),
            tool_call: tool_call.map(str::to_owned),
            tools: tools.clone(),
            stream_arguments: true,
            in_reasoning: None,
            thinking: None,
            force_nonempty_content: false,
            dialect: Default::default(),
            reference_streaming: false,
            response_template: (*fmt == "response_template")
                .then(|| Arc::new(Template::from_json(RESPONSE_TEMPLATE).unwrap())),
        };
        let mut per_piece = Vec::new();
        let mut per_byte = Vec::new();
        for size in [2 << 10, 32 << 10, 256 << 10] {
            let text = output_text(fmt, *tool_call, size);
            let pieces = token_pieces(&tokenizer, &text);
            let rounds = if size > 100_000 { 9 } else { 51 };
            let ns = median_ns(rounds, || {
                let mut parser = ChatParser::new(&options).unwrap();
                let mut delta = Delta::default();
                for piece in &pieces {
                    delta.clear();
                    parser.feed(piece, &mut delta);
                }
                parser.finish(&mut delta);
                std::hint::black_box(&delta);
            });
            per_piece.push(ns / pieces.len() as f64);
            per_byte.push(ns / text.len() as f64);
        }
        println!(
            "{fmt:22} {:8.0} {:6.0} {:7.0}   {:5.2}x",
            per_piece[0],
            per_piece[1],
            per_piece[2],
            per_byte[2] / per_byte[0]
        );
    }
}
