//! Chat templates rendered the way the reference renders them: minijinja with
//! `trim_blocks` + `lstrip_blocks`, Python string/dict methods, `raise_exception`,
//! `strftime_now`, and a `tojson` that writes like Python's `json.dumps`.

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};

const DEFAULT: &str = "default";
const TOOL_USE: &str = "tool_use";

/// The compiled chat template(s) of one model; built once, rendered per request.
pub struct ChatTemplate {
    env: Environment<'static>,
    has_tool_use: bool,
    /// The template inspects `arguments is string`, so tool-call arguments stay strings.
    keeps_argument_strings: bool,
    /// The template reads `reasoning_content` itself.
    reads_reasoning_content: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("has_tool_use", &self.has_tool_use)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    pub fn new(default: &str, tool_use: Option<&str>) -> Result<Self, Error> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_filter("length", length);
        env.add_filter("fromjson", fromjson);
        env.add_filter("from_json", fromjson);
        env.add_template_owned(DEFAULT, strip_generation_markers(default))?;
        if let Some(t) = tool_use {
            env.add_template_owned(TOOL_USE, strip_generation_markers(t))?;
        }
        let sources = [Some(default), tool_use];
        let any = |needle: &str| sources.iter().flatten().any(|s| s.contains(needle));
        Ok(Self {
            env,
            has_tool_use: tool_use.is_some(),
            keeps_argument_strings: any("arguments is string"),
            reads_reasoning_content: any("reasoning_content"),
        })
    }

    pub fn keeps_argument_strings(&self) -> bool {
        self.keeps_argument_strings
    }

    pub fn reads_reasoning_content(&self) -> bool {
        self.reads_reasoning_content
    }

    /// Render with a prepared context; the `tool_use` variant is chosen when the
    /// request carries tools and the model has one.
    pub fn render(&self, context: &serde_json::Value, with_tools: bool) -> Result<String, Error> {
        let name = if with_tools && self.has_tool_use {
            TOOL_USE
        } else {
            DEFAULT
        };
        self.env
            .get_template(name)?
            .render(Value::from_serialize(context))
    }
}

/// Drop `{% generation %}` / `{% endgeneration %}` (HF training markers minijinja
/// does not know), keeping everything between them.
fn strip_generation_markers(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("%}") else {
            break;
        };
        let inner = after[..end].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str(&rest[..start]);
        if inner != "generation" && inner != "endgeneration" {
            out.push_str(&rest[start..start + 2 + end + 2]);
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(fmt)`: the current time (UTC) with the common strftime fields.
fn strftime_now(format: String) -> Result<String, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Ok(strftime(&format, secs))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Days since 1970-01-01 → (year, month 1..=12, day 1..=31).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn strftime(format: &str, unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs_of_day = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs_of_day / 3600, secs_of_day / 60 % 60, secs_of_day % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let day_of_year = days - civil_days_before_year(year) + 1;
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let month_name = MONTHS[month as usize - 1];
    let weekday_name = WEEKDAYS[weekday];

    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:>2}")),
            Some('B') => out.push_str(month_name),
            Some('b') | Some('h') => out.push_str(&month_name[..3]),
            Some('A') => out.push_str(weekday_name),
            Some('a') => out.push_str(&weekday_name[..3]),
            Some('H') => out.push_str(&format!("{hour:02}")),
            Some('I') => out.push_str(&format!("{hour12:02}")),
            Some('M') => out.push_str(&format!("{minute:02}")),
            Some('S') => out.push_str(&format!("{second:02}")),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('j') => out.push_str(&format!("{day_of_year:03}")),
            Some('F') => out.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('T') => out.push_str(&format!("{hour:02}:{minute:02}:{second:02}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

fn civil_days_before_year(year: i64) -> i64 {
    // Days from 1970-01-01 to `year`-01-01, via the inverse of civil_from_days.
    let y = year - 1;
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    // March-based day-of-year of Jan 1 is 306.
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + 306;
    era * 146_097 + doe - 719_468
}

/// `tojson` as Python's `json.dumps(ensure_ascii=False)`: `", "` / `": "`
/// separators (or `","` with an indent), key order kept, no HTML escaping.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(if let Some(s) = v.as_str() {
            s.to_owned()
        } else {
            let n = i64::try_from(v.clone()).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson indent must be an integer",
                )
            })?;
            " ".repeat(n.max(0) as usize)
        }),
    };
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    write_python_json(&mut out, &json, indent.as_deref(), 0);
    Ok(Value::from_safe_string(out))
}

fn write_python_json(
    out: &mut String,
    value: &serde_json::Value,
    indent: Option<&str>,
    depth: usize,
) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(unit) = indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(unit);
            }
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match value {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_python_json(out, item, indent, depth + 1);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                out.push_str(&serde_json::Value::String(key.clone()).to_string());
                out.push_str(": ");
                write_python_json(out, item, indent, depth + 1);
            }
            newline(out, depth);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// `length` that treats none/undefined as 0 instead of failing.
fn length(value: Value) -> Result<Value, Error> {
    if value.is_none() || value.is_undefined() {
        return Ok(Value::from(0));
    }
    value
        .len()
        .map(Value::from)
        .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "object has no length"))
}

fn fromjson(text: String) -> Result<Value, Error> {
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(Value::from_serialize(&json))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn python_json(value: &serde_json::Value) -> String {
        let mut out = String::new();
        write_python_json(&mut out, value, None, 0);
        out
    }

    #[test]
    fn strftime_known_instant() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S", t), "2024-02-29 13:05:09");
        assert_eq!(strftime("%d, %B, %Y", t), "29, February, 2024");
        assert_eq!(strftime("%a %b %j %I%p %%", t), "Thu Feb 060 01PM %");
    }

    #[test]
    fn python_json_separators_and_indent() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"a":[1,"x<>&'",{}],"c":{"d":null}}"#).unwrap();
        assert_eq!(
            python_json(&v),
            r#"{"b": 1, "a": [1, "x<>&'", {}], "c": {"d": null}}"#
        );
        let mut out = String::new();
        write_python_json(&mut out, &v, Some("  "), 0);
        assert_eq!(
            out,
            "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    \"x<>&'\",\n    {}\n  ],\n  \"c\": {\n    \"d\": null\n  }\n}"
        );
    }

    #[test]
    fn generation_markers_are_dropped() {
        let src = "a{% generation %}b{%- endgeneration -%}c{% if x %}d{% endif %}";
        assert_eq!(strip_generation_markers(src), "abc{% if x %}d{% endif %}");
    }

    #[test]
    fn raise_exception_fails_render() {
        let t = ChatTemplate::new("{{ raise_exception('no system') }}", None).unwrap();
        let err = t.render(&serde_json::json!({}), false).unwrap_err();
        assert!(err.to_string().contains("no system"));
    }

    #[test]
    fn python_methods_and_trim_blocks() {
        let t = ChatTemplate::new(
            "{% for m in messages %}\n  {% if m %}{{ m.content.strip().upper() }}{% endif %}|{% endfor %}",
            None,
        )
        .unwrap();
        let ctx = serde_json::json!({"messages": [{"content": " hi "}, {"content": "yo"}]});
        assert_eq!(t.render(&ctx, false).unwrap(), "HI|YO|");
    }
}
