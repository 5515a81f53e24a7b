//! Forethought's documented answer, `widget_components`, read into plain text and prompts.
//!
//! Each component has a `type` and an HTML `message`; a `button` component adds `buttons`
//! (`display_name`, `value`) and the `output_variable` the picked value goes into on the next
//! request. The HTML is untrusted: [`html_to_text`] walks it with a WHATWG tokenizer and keeps
//! only text (paragraphs, line breaks, lists, links as `text (url)`), so no markup reaches a
//! client: script and style content, event-handler attributes and `javascript:` URLs are dropped.

use html5gum::{DefaultEmitter, Token, Tokenizer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Something a component asks the user to answer: pick one option, or fill fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// The question, as plain text.
    pub text: String,
    /// The context variable the answer goes into (a form field may name its own).
    pub output_variable: String,
    /// The options of a `button` component, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<PromptOption>,
    /// The fields of a `form` component, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<PromptField>,
}

/// One option of a `button` component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptOption {
    /// `display_name`, shown to the user.
    pub label: String,
    /// `value`, sent back in `context_variables`.
    pub value: String,
}

/// One field of a `form` component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptField {
    /// What the field asks for.
    pub label: String,
    /// The context variable its value goes into.
    pub output_variable: String,
}

/// The answer's outcome fields, where present.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// `is_solved`.
    pub is_solved: Option<bool>,
    /// `should_escalate`.
    pub should_escalate: Option<bool>,
    /// `intent`.
    pub intent: Option<String>,
    /// `workflow_id`.
    pub workflow_id: Option<String>,
}

impl Outcome {
    /// Reads the four fields of an answer object; `None` when it has none of them.
    pub(crate) fn of(object: &Map<String, Value>) -> Option<Outcome> {
        let text = |k: &str| object.get(k).and_then(Value::as_str).map(str::to_owned);
        let outcome = Outcome {
            is_solved: object.get("is_solved").and_then(Value::as_bool),
            should_escalate: object.get("should_escalate").and_then(Value::as_bool),
            intent: text("intent"),
            workflow_id: text("workflow_id"),
        };
        (outcome != Outcome::default()).then_some(outcome)
    }

    /// The fields that are present, as a JSON object.
    pub(crate) fn to_map(&self) -> Map<String, Value> {
        let mut map = Map::new();
        if let Some(v) = self.is_solved {
            map.insert("is_solved".into(), Value::Bool(v));
        }
        if let Some(v) = self.should_escalate {
            map.insert("should_escalate".into(), Value::Bool(v));
        }
        if let Some(v) = &self.intent {
            map.insert("intent".into(), Value::String(v.clone()));
        }
        if let Some(v) = &self.workflow_id {
            map.insert("workflow_id".into(), Value::String(v.clone()));
        }
        map
    }
}

/// One component read: its plain text (the prompt's options or fields listed after the
/// message) and, for `button` and `form`, the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ComponentText {
    /// What the user reads.
    pub text: String,
    /// What the user can answer.
    pub prompt: Option<Prompt>,
}

/// Reads one component; `None` for a type Baton does not know (logged) or one without text.
pub(crate) fn read_component(component: &Value) -> Option<ComponentText> {
    let kind = component.get("type").and_then(Value::as_str).unwrap_or("");
    let message = component.get("message").and_then(Value::as_str).map(html_to_text).unwrap_or_default();
    let output_variable =
        component.get("output_variable").and_then(Value::as_str).unwrap_or("").trim().to_owned();
    let (text, prompt) = match kind {
        "text" => (message, None),
        "button" => {
            let options: Vec<PromptOption> = list(component, &["buttons"])
                .filter_map(|b| {
                    let label = html_to_text(b.get("display_name").and_then(Value::as_str)?);
                    let value = match b.get("value")? {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (!label.is_empty()).then_some(PromptOption { label, value })
                })
                .collect();
            let mut text = message.clone();
            for (i, option) in options.iter().enumerate() {
                text.push_str(&format!("\n{}. {}", i + 1, option.label));
            }
            let prompt = (!options.is_empty()).then(|| Prompt {
                text: message,
                output_variable,
                options,
                fields: Vec::new(),
            });
            (text, prompt)
        }
        "form" => {
            let fields: Vec<PromptField> = list(component, &["form_fields", "fields"])
                .filter_map(|f| {
                    let label = ["display_name", "label", "placeholder", "name"]
                        .iter()
                        .find_map(|k| f.get(*k).and_then(Value::as_str))
                        .map(html_to_text)
                        .filter(|l| !l.is_empty())?;
                    let variable = f
                        .get("output_variable")
                        .and_then(Value::as_str)
                        .map(|v| v.trim().to_owned())
                        .filter(|v| !v.is_empty())
                        .unwrap_or_else(|| output_variable.clone());
                    (!variable.is_empty()).then_some(PromptField { label, output_variable: variable })
                })
                .collect();
            let mut text = message.clone();
            for field in &fields {
                text.push_str(&format!("\n- {}", field.label));
            }
            if fields.len() > 1 {
                text.push_str("\n(Reply with one line per field, in this order.)");
            }
            let prompt = (!fields.is_empty()).then(|| Prompt {
                text: message,
                output_variable,
                options: Vec::new(),
                fields,
            });
            (text, prompt)
        }
        other => {
            tracing::warn!(component_type = other, "skipped a Forethought widget component of unknown type");
            return None;
        }
    };
    let text = text.trim().to_owned();
    (!text.is_empty() || prompt.is_some()).then_some(ComponentText { text, prompt })
}

/// The array under the first of `keys` that holds one, as objects.
fn list<'a>(component: &'a Value, keys: &[&str]) -> impl Iterator<Item = &'a Map<String, Value>> {
    keys.iter()
        .find_map(|k| component.get(*k).and_then(Value::as_array))
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

/// How a user's reply answers `prompt`: the context variables to send and the query to send
/// with them, or `None` when the reply is not an answer (it is then an ordinary query).
///
/// Options: the option's number (`2`, `2.`) or its label, any case, trimmed; the query is the
/// label. Fields: one field takes the whole reply; several take one non-empty line each, in
/// order (a different number of lines is not an answer); the query is the reply.
pub(crate) fn answer_prompt(prompt: &Prompt, reply: &str) -> Option<(Map<String, Value>, String)> {
    let reply = reply.trim();
    if reply.is_empty() {
        return None;
    }
    let mut variables = Map::new();
    if !prompt.options.is_empty() {
        let picked = baton::text::picked_option(prompt.options.iter().map(|o| o.label.as_str()), reply)
            .map(|i| &prompt.options[i])?;
        if prompt.output_variable.is_empty() {
            return None;
        }
        variables.insert(prompt.output_variable.clone(), Value::String(picked.value.clone()));
        return Some((variables, picked.label.clone()));
    }
    let lines: Vec<&str> = if prompt.fields.len() == 1 {
        vec![reply]
    } else {
        reply.lines().map(str::trim).filter(|l| !l.is_empty()).collect()
    };
    if prompt.fields.is_empty() || lines.len() != prompt.fields.len() {
        return None;
    }
    for (field, value) in prompt.fields.iter().zip(lines) {
        variables.insert(field.output_variable.clone(), Value::String(value.to_owned()));
    }
    Some((variables, reply.to_owned()))
}

/// Elements whose content is never text for a reader.
const SKIPPED: &[&[u8]] = &[
    b"script",
    b"style",
    b"template",
    b"noscript",
    b"iframe",
    b"object",
    b"embed",
    b"head",
    b"title",
    b"svg",
    b"math",
    b"select",
    b"textarea",
    b"button",
];

/// Elements that stand as their own paragraph.
const BLOCKS: &[&[u8]] = &[
    b"p",
    b"div",
    b"h1",
    b"h2",
    b"h3",
    b"h4",
    b"h5",
    b"h6",
    b"blockquote",
    b"section",
    b"article",
    b"header",
    b"footer",
    b"table",
    b"pre",
    b"hr",
    b"figure",
    b"address",
    b"dl",
    b"details",
    b"summary",
    b"form",
    b"fieldset",
    b"main",
    b"nav",
    b"aside",
];

/// Elements that start a line.
const LINES: &[&[u8]] = &[b"tr", b"dt", b"dd", b"caption"];

/// The plain text of untrusted HTML: paragraphs as blank lines, `<br>` as a line break, list
/// items as `- item` or `1. item`, links as `text (url)` for `http`, `https`, `mailto` and
/// `tel` URLs (any other URL, `javascript:` among them, is dropped and its text kept),
/// entities decoded, whitespace collapsed as a browser does; script, style and the like
/// dropped with their content.
pub(crate) fn html_to_text(html: &str) -> String {
    let mut emitter = DefaultEmitter::default();
    emitter.naively_switch_states(true);
    let mut text = TextBuilder::default();
    for token in Tokenizer::new_with_emitter(html, emitter).flatten() {
        match token {
            Token::StartTag(tag) => {
                let name = tag.name.to_ascii_lowercase();
                if let Some((skipped, depth)) = &mut text.skip {
                    if *skipped == name && !tag.self_closing {
                        *depth += 1;
                    }
                    continue;
                }
                let attr = |key: &[u8]| {
                    tag.attributes.get(key).map(|v| String::from_utf8_lossy(&v.value).into_owned())
                };
                text.start(&name, tag.self_closing, attr);
            }
            Token::EndTag(tag) => {
                let name = tag.name.to_ascii_lowercase();
                if let Some((skipped, depth)) = &mut text.skip {
                    if *skipped == name {
                        *depth -= 1;
                        if *depth == 0 {
                            text.skip = None;
                        }
                    }
                    continue;
                }
                text.end(&name);
            }
            Token::String(s) if text.skip.is_none() => text.push(&String::from_utf8_lossy(&s)),
            _ => {}
        }
    }
    text.finish()
}

#[derive(Default)]
struct TextBuilder {
    out: String,
    /// A space is due before the next text.
    space: bool,
    /// Line breaks due before the next text (1: a new line, 2: a new paragraph).
    breaks: usize,
    /// Inside a skipped element: its name and nesting depth.
    skip: Option<(Vec<u8>, usize)>,
    /// Open lists: `None` for `ul`, the next number for `ol`.
    lists: Vec<Option<u64>>,
    /// Open links: the kept URL (if any) and where the link's text starts.
    links: Vec<(Option<String>, usize)>,
    /// Inside `pre`: whitespace kept.
    pre: usize,
}

impl TextBuilder {
    fn start(&mut self, name: &[u8], self_closing: bool, attr: impl Fn(&[u8]) -> Option<String>) {
        match name {
            _ if SKIPPED.contains(&name) && !self_closing => self.skip = Some((name.to_vec(), 1)),
            _ if SKIPPED.contains(&name) => {}
            b"br" => {
                self.flush_breaks();
                if !self.out.is_empty() {
                    self.out.push('\n');
                }
                self.space = false;
            }
            b"ul" => {
                self.block(if self.lists.is_empty() { 2 } else { 1 });
                self.lists.push(None);
            }
            b"ol" => {
                self.block(if self.lists.is_empty() { 2 } else { 1 });
                let start = attr(b"start").and_then(|s| s.trim().parse().ok()).unwrap_or(1);
                self.lists.push(Some(start));
            }
            b"li" => {
                self.block(1);
                self.flush_breaks();
                let indent = "  ".repeat(self.lists.len().saturating_sub(1));
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        *n += 1;
                        format!("{indent}{}. ", *n - 1)
                    }
                    _ => format!("{indent}- "),
                };
                self.out.push_str(&marker);
                self.space = false;
            }
            b"a" => {
                let url = attr(b"href").map(|h| h.trim().to_owned()).filter(|h| safe_url(h));
                self.links.push((url, self.out.len()));
            }
            b"img" => {
                if let Some(alt) = attr(b"alt").filter(|a| !a.trim().is_empty()) {
                    self.push(&alt);
                }
            }
            b"td" | b"th" => self.space = !self.out.is_empty(),
            _ if BLOCKS.contains(&name) => {
                self.block(2);
                if name == b"pre" {
                    self.pre += 1;
                }
            }
            _ if LINES.contains(&name) => self.block(1),
            _ => {}
        }
    }

    fn end(&mut self, name: &[u8]) {
        match name {
            b"ul" | b"ol" => {
                self.lists.pop();
                self.block(if self.lists.is_empty() { 2 } else { 1 });
            }
            b"li" => self.block(1),
            b"a" => {
                if let Some((Some(url), at)) = self.links.pop() {
                    let shown = self.out.get(at..).unwrap_or("").trim().to_owned();
                    let bare =
                        url.strip_prefix("mailto:").or_else(|| url.strip_prefix("tel:")).unwrap_or(&url);
                    if shown != url && shown != bare {
                        self.flush_breaks();
                        if !shown.is_empty() {
                            self.out.push(' ');
                        }
                        self.out.push_str(&format!("({url})"));
                    }
                }
            }
            b"pre" => {
                self.pre = self.pre.saturating_sub(1);
                self.block(2);
            }
            _ if BLOCKS.contains(&name) => self.block(2),
            _ if LINES.contains(&name) => self.block(1),
            _ => {}
        }
    }

    fn block(&mut self, breaks: usize) {
        self.breaks = self.breaks.max(breaks);
        self.space = false;
    }

    fn flush_breaks(&mut self) {
        if self.breaks > 0 && !self.out.is_empty() {
            let trimmed = self.out.trim_end_matches([' ', '\t']).len();
            self.out.truncate(trimmed);
            let have = self.out.len() - self.out.trim_end_matches('\n').len();
            for _ in have..self.breaks {
                self.out.push('\n');
            }
        }
        self.breaks = 0;
    }

    fn push(&mut self, text: &str) {
        if self.pre > 0 {
            self.flush_breaks();
            self.out.push_str(text);
            return;
        }
        for c in text.chars() {
            if c.is_whitespace() {
                self.space = !self.out.is_empty() && self.breaks == 0;
                continue;
            }
            if self.breaks > 0 {
                self.flush_breaks();
            } else if self.space && !self.out.ends_with(['\n', ' ']) {
                self.out.push(' ');
            }
            self.space = false;
            // Control characters other than whitespace never reach a client.
            if !c.is_control() {
                self.out.push(c);
            }
        }
    }

    fn finish(self) -> String {
        let lines: Vec<&str> = self.out.lines().map(str::trim_end).collect();
        lines.join("\n").trim().to_owned()
    }
}

/// Whether a link's URL may be shown: `http`, `https`, `mailto` or `tel`, no control character.
fn safe_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    ["http://", "https://", "mailto:", "tel:"].iter().any(|p| lower.starts_with(p))
        && !url.chars().any(|c| c.is_control() || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paragraphs_breaks_lists_links_and_entities_become_plain_text() {
        let html = "<p style=\"\" dir=\"ltr\">Hello&nbsp;there &amp; welcome</p><p>Line one<br>Line two</p>\
                    <ul><li>first</li><li>second <b>bold</b></li></ul><ol start=\"3\"><li>three</li><li>four</li></ol>\
                    <p>See <a href=\"https://help.example.com/a?b=1&amp;c=2\">the guide</a> or \
                    <a href=\"mailto:help@example.com\">help@example.com</a>.</p>";
        assert_eq!(
            html_to_text(html),
            "Hello there & welcome\n\nLine one\nLine two\n\n- first\n- second bold\n\n3. three\n4. four\n\n\
             See the guide (https://help.example.com/a?b=1&c=2) or help@example.com."
        );
    }

    #[test]
    fn hostile_markup_leaves_only_inert_text() {
        let html = "<p>Hi <script>alert('x')</script><img src=x onerror=\"alert(1)\" alt=\"pic\"> \
                    <a href=\"javascript:alert(2)\">click</a><a href=\" JAVASCRIPT:alert(3)\">me</a>\
                    <style>p{color:red}</style><iframe src=\"https://evil\">frame</iframe></p>\
                    &lt;script&gt;alert(4)&lt;/script&gt;";
        let text = html_to_text(html);
        assert_eq!(text, "Hi pic clickme\n\n<script>alert(4)</script>");
        assert!(!text.contains("alert('x')") && !text.contains("javascript") && !text.contains("onerror"));
    }

    #[test]
    fn unclosed_and_nested_markup_never_loses_the_rest() {
        assert_eq!(html_to_text("<div><p>a<div>b"), "a\n\nb");
        assert_eq!(html_to_text("<script><script>x</script>after"), "after");
        assert_eq!(html_to_text("plain  text\n here"), "plain text here");
        assert_eq!(html_to_text(""), "");
        assert_eq!(html_to_text("<ul><li>a<ul><li>b</li></ul></li></ul>"), "- a\n  - b");
    }

    #[test]
    fn the_documented_button_component_reads_as_a_numbered_prompt() {
        let component = json!({
            "type": "button",
            "message": "<p style=\"\" dir=\"ltr\">please select one branch</p>",
            "buttons": [
                {"display_name": "branch 1", "value": "15442886_a721_4a02_9b85_9ff7cf7fc051"},
                {"display_name": "branch 2", "value": "824e5122_2e92_46f4_bfd8_a96e1782295b"}
            ],
            "output_variable": "27d5459e_5110_42a7_9ce1_5a844230639c"
        });
        let read = read_component(&component).unwrap();
        assert_eq!(read.text, "please select one branch\n1. branch 1\n2. branch 2");
        let prompt = read.prompt.unwrap();
        assert_eq!(prompt.output_variable, "27d5459e_5110_42a7_9ce1_5a844230639c");
        for reply in ["2", " 2. ", "BRANCH 2", "branch 2 "] {
            let (vars, query) = answer_prompt(&prompt, reply).unwrap();
            assert_eq!(query, "branch 2");
            assert_eq!(
                Value::Object(vars),
                json!({"27d5459e_5110_42a7_9ce1_5a844230639c": "824e5122_2e92_46f4_bfd8_a96e1782295b"})
            );
        }
        for other in ["3", "0", "branch", "where are my points?", ""] {
            assert_eq!(answer_prompt(&prompt, other), None, "{other:?}");
        }
    }

    #[test]
    fn a_form_lists_its_fields_and_takes_one_line_each() {
        let component = json!({
            "type": "form", "message": "<p>Tell us more</p>", "output_variable": "cv_form",
            "form_fields": [{"display_name": "Email", "output_variable": "cv_email"}, {"display_name": "Order"}]
        });
        let read = read_component(&component).unwrap();
        assert_eq!(
            read.text,
            "Tell us more\n- Email\n- Order\n(Reply with one line per field, in this order.)"
        );
        let prompt = read.prompt.unwrap();
        let (vars, _) = answer_prompt(&prompt, "a@b.c\n 42 ").unwrap();
        assert_eq!(Value::Object(vars), json!({"cv_email": "a@b.c", "cv_form": "42"}));
        assert_eq!(answer_prompt(&prompt, "only one line"), None);
    }

    #[test]
    fn unknown_component_types_are_skipped() {
        assert_eq!(read_component(&json!({"type": "carousel", "message": "<p>x</p>"})), None);
        assert_eq!(read_component(&json!({"type": "text", "message": "<p> </p>"})), None);
    }
}
