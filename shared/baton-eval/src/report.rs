//! The routing eval as a self-contained HTML report, and the JSON summary runs are kept as.
//!
//! [`run_suite`] runs a suite like [`eval::run_suite`] (the same routing and the same scoring,
//! [`eval::route_scenario`] and [`Scenario::score`]) but keeps each scenario's routed calls, which
//! the report shows beside the expected ones, and reports each finished scenario to a callback
//! (the CLI prints progress on stderr). [`Summary`] is the JSON a run is stored as (by the
//! scheduled `eval` function, or `routing-eval --summary`); previous summaries make the trend.
//!
//! [`run_json`] is the run as `routing-eval --json` prints it: per scenario every dispatched call
//! with all its arguments, the repairs the rules made and the verdict, so a user measuring a real
//! model sees why a turn failed.
//!
//! [`render_html`] writes one HTML file with inline SVG charts and no external asset: accuracy
//! per category, fault recovery, every failing scenario with expected vs routed calls, and the
//! trend over previous runs. Numbers are printed with the same rounding as the text report, and
//! every chart has a table beside it, so the report reads without colour and without the chart.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::{self as eval, FaultOutcome, Outcome, Report, Scenario};
use baton::guard::PlannedCall;
use baton::routing::Router;

/// A suite run with the calls each scenario was routed to.
#[derive(Debug, Clone)]
pub struct SuiteRun {
    /// The scores.
    pub report: Report,
    /// The routed calls by scenario id (absent when routing failed).
    pub routed: HashMap<String, Vec<PlannedCall>>,
}

/// Runs `scenarios` through `router`, `concurrency` at a time, calling `progress(done, total,
/// outcome)` as each finishes (in suite order).
pub async fn run_suite(
    router: Arc<Router>,
    scenarios: &[Scenario],
    concurrency: usize,
    mut progress: impl FnMut(usize, usize, &Outcome),
) -> SuiteRun {
    let total = scenarios.len();
    let mut routed = HashMap::new();
    let mut outcomes = Vec::with_capacity(total);
    let mut runs = futures::stream::iter(scenarios)
        .map(|s| {
            let router = router.clone();
            async move { (s, eval::route_scenario(&router, s).await) }
        })
        .buffered(concurrency.max(1));
    while let Some((s, route)) = runs.next().await {
        let (result, actions) = match route {
            Ok(route) => {
                let scored = s.score(&route.calls, false);
                routed.insert(s.id.clone(), route.calls);
                (scored, route.actions)
            }
            Err(e) => (Err(e), Vec::new()),
        };
        let outcome = Outcome { id: s.id.clone(), category: s.category.clone(), result, actions };
        progress(outcomes.len() + 1, total, &outcome);
        outcomes.push(outcome);
    }
    SuiteRun { report: Report { model: router.model_name().to_owned(), outcomes }, routed }
}

/// Passed and total of one category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Score {
    /// Scenarios that passed.
    pub passed: usize,
    /// Scenarios run.
    pub total: usize,
}

/// A failing scenario in a summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Scenario id.
    pub id: String,
    /// What was wrong.
    pub why: String,
}

/// One fault's recovery in a summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSummary {
    /// The fault's name.
    pub fault: String,
    /// Scenarios it was injected into.
    pub applicable: usize,
    /// Recovered (exactly or loosely).
    pub recovered: usize,
    /// Not recoverable by design.
    pub by_design: usize,
    /// Not recovered although it should have been.
    pub missed: usize,
}

/// The stored JSON summary of one run: what the trend is made of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The suite's name.
    pub suite: String,
    /// The model evaluated.
    pub model: String,
    /// When the run finished (ms since the epoch); absent in summaries stored before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<u64>,
    /// Passed scenarios.
    pub passed: usize,
    /// Scenarios run.
    pub total: usize,
    /// Passed and total per category.
    pub by_category: BTreeMap<String, Score>,
    /// Failing scenarios.
    pub failures: Vec<Failure>,
    /// Fault recovery (empty when faults were not run).
    #[serde(default)]
    pub faults: Vec<FaultSummary>,
}

impl Summary {
    /// The summary of `report` and `faults`, finished at `run_at_ms`.
    pub fn new(suite: &str, report: &Report, faults: &[FaultOutcome], run_at_ms: Option<u64>) -> Summary {
        Summary {
            suite: suite.to_owned(),
            model: report.model.clone(),
            run_at_ms,
            passed: report.passed(),
            total: report.outcomes.len(),
            by_category: report
                .by_category()
                .into_iter()
                .map(|(c, (passed, total))| (c.to_owned(), Score { passed, total }))
                .collect(),
            failures: report
                .outcomes
                .iter()
                .filter_map(|o| {
                    o.result.as_ref().err().map(|why| Failure { id: o.id.clone(), why: why.clone() })
                })
                .collect(),
            faults: faults
                .iter()
                .map(|f| FaultSummary {
                    fault: f.fault.name().to_owned(),
                    applicable: f.applicable,
                    recovered: f.exact + f.loose,
                    by_design: f.by_design.len(),
                    missed: f.missed.len(),
                })
                .collect(),
        }
    }

    /// The summary as pretty JSON (what `routing-eval --summary` writes).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a summary serializes")
    }
}

/// The verdict on one scenario in [`run_json`].
#[derive(Debug, Clone, Serialize)]
struct ScenarioJson<'a> {
    id: &'a str,
    category: &'a str,
    message: &'a str,
    /// `pass`, `pass_loose` (a `support_category` the scenario expects was left out) or `fail`.
    verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<&'a str>,
    expected: Vec<serde_json::Value>,
    /// The calls dispatched, after the failsafe and guards, with every argument.
    calls: Vec<serde_json::Value>,
    repairs: &'a [baton::guard::GuardAction],
}

/// The run as JSON: `summary`, and per scenario (in suite order) its message, the expected and the
/// dispatched calls (each with all its arguments), the repairs the rules made and the verdict.
pub fn run_json(summary: &Summary, run: &SuiteRun, scenarios: &[Scenario]) -> serde_json::Value {
    let results: Vec<ScenarioJson<'_>> = run
        .report
        .outcomes
        .iter()
        .map(|o| {
            let scenario = scenarios.iter().find(|s| s.id == o.id);
            ScenarioJson {
                id: &o.id,
                category: &o.category,
                message: scenario.map_or("", |s| s.message.as_str()),
                verdict: match &o.result {
                    Ok(eval::Strictness::Exact) => "pass",
                    Ok(eval::Strictness::Loose) => "pass_loose",
                    Err(_) => "fail",
                },
                why: o.result.as_ref().err().map(String::as_str),
                expected: scenario
                    .into_iter()
                    .flat_map(|s| &s.expect)
                    .map(|c| {
                        let mut expected = serde_json::json!({"tool": c.tool, "query": c.query,
                            "support_category": c.support_category, "prior_context": c.prior_context});
                        // A full turn's expectations (`turns`) say who calls, with what.
                        if let Some(agent) = &c.agent {
                            expected["agent"] = serde_json::json!(agent);
                        }
                        if let Some(arguments) = &c.arguments {
                            expected["arguments"] = serde_json::json!(arguments);
                        }
                        expected
                    })
                    .collect(),
                calls: run
                    .routed
                    .get(&o.id)
                    .into_iter()
                    .flatten()
                    .map(|c| serde_json::json!({"tool": c.tool, "arguments": c.arguments}))
                    .collect(),
                repairs: &o.actions,
            }
        })
        .collect();
    serde_json::json!({"summary": summary, "scenarios": results})
}

/// Reads previous summaries from `text`: one JSON summary, a JSON array of them, or one per line.
pub fn parse_summaries(text: &str) -> Result<Vec<Summary>, serde_json::Error> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str(trimmed);
    }
    match serde_json::from_str::<Summary>(trimmed) {
        Ok(one) => Ok(vec![one]),
        Err(whole) => {
            let lines: Result<Vec<Summary>, _> =
                trimmed.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str).collect();
            lines.map_err(|_| whole)
        }
    }
}

/// Previous summaries from a file (see [`parse_summaries`]) or a directory of `*.json` files,
/// oldest first (by `run_at_ms`, then file name). Errors name the file.
pub fn load_history(path: &std::path::Path) -> Result<Vec<Summary>, String> {
    let read = |p: &std::path::Path| -> Result<Vec<Summary>, String> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        parse_summaries(&text).map_err(|e| format!("{}: not an eval summary: {e}", p.display()))
    };
    let mut out = Vec::new();
    if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for file in files {
            out.extend(read(&file)?);
        }
    } else {
        out = read(path)?;
    }
    // A stable sort keeps file order among runs without a time.
    out.sort_by_key(|s| s.run_at_ms.unwrap_or(0));
    Ok(out)
}

/// What the report shows.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// The suite's name.
    pub suite: &'a str,
    /// This run.
    pub run: &'a SuiteRun,
    /// The scenarios, for messages and expected calls.
    pub scenarios: &'a [Scenario],
    /// Fault injection, when it was run.
    pub faults: Option<&'a [FaultOutcome]>,
    /// Previous runs, oldest first (this run is added as the last point of the trend).
    pub history: &'a [Summary],
    /// When this run finished (ms since the epoch), for the trend.
    pub run_at_ms: Option<u64>,
}

/// Same rounding as the text report's accuracy column.
fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A UTC date and time (`2026-11-23 18:04`) from ms since the epoch.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (H. Hinnant), for dates after 1970.
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
}

const STYLE: &str = "
body{font:15px/1.45 system-ui,sans-serif;max-width:64rem;margin:0 auto;padding:1rem;color:#1b1b1b;background:#fff}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5rem 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #bbb;padding:.2rem .5rem;text-align:left;vertical-align:top}
td.n,th.n{text-align:right}
.overall{font-size:1.1rem}.fail{font-weight:700}
svg{max-width:100%;height:auto;font:12px system-ui,sans-serif}
ul.calls{margin:0;padding-left:1rem}
.muted{color:#555}
";

/// Renders the report as one self-contained HTML document.
pub fn render_html(input: &ReportInput<'_>) -> String {
    let report = &input.run.report;
    let (passed, total) = (report.passed(), report.outcomes.len());
    let mut h = String::with_capacity(32 * 1024);
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Routing eval: {suite}</title><style>{STYLE}</style></head><body>\n\
         <h1>Routing eval: {suite}</h1>\n<p>Model <strong>{model}</strong>{when}. \
         <span class=\"overall\" id=\"overall\">Overall <strong data-passed=\"{passed}\" data-total=\"{total}\">\
         {passed} / {total} passed, {acc:.1}%</strong></span></p>\n",
        suite = esc(input.suite),
        model = esc(&report.model),
        when = input.run_at_ms.map(|ms| format!(", run {} UTC", utc(ms))).unwrap_or_default(),
        acc = percent(passed, total),
    );
    categories(&mut h, report);
    if let Some(faults) = input.faults {
        fault_chart(&mut h, faults);
    }
    failures(&mut h, input);
    trend(&mut h, input);
    h.push_str("</body></html>\n");
    h
}

fn categories(h: &mut String, report: &Report) {
    let rows = report.by_category();
    let (label_w, bar_w, row_h) = (190.0, 420.0, 22.0);
    let height = row_h * rows.len() as f64 + 30.0;
    let _ = write!(
        h,
        "<h2 id=\"categories\">Accuracy per category</h2>\n\
         <svg role=\"img\" aria-labelledby=\"cat-title\" viewBox=\"0 0 {w} {height}\" width=\"{w}\">\
         <title id=\"cat-title\">Accuracy per category, as a bar per category from 0 to 100 percent</title>\n",
        w = label_w + bar_w + 120.0,
    );
    for (i, (category, (passed, total))) in rows.iter().enumerate() {
        let y = i as f64 * row_h + 4.0;
        let acc = percent(*passed, *total);
        let _ = writeln!(
            h,
            "<text x=\"{tx}\" y=\"{ty}\" text-anchor=\"end\">{c}</text>\
             <rect x=\"{label_w}\" y=\"{y}\" width=\"{bar_w}\" height=\"16\" fill=\"#eee\" stroke=\"#999\"/>\
             <rect x=\"{label_w}\" y=\"{y}\" width=\"{bw:.1}\" height=\"16\" fill=\"{fill}\"/>\
             <text x=\"{nx}\" y=\"{ty}\">{passed}/{total} {acc:.1}%</text>",
            tx = label_w - 6.0,
            ty = y + 12.5,
            c = esc(category),
            bw = bar_w * acc / 100.0,
            fill = if passed == total { "#2e6f40" } else { "#b45309" },
            nx = label_w + bar_w + 6.0,
        );
    }
    let axis_y = row_h * rows.len() as f64 + 12.0;
    for tick in [0, 50, 100] {
        let x = label_w + bar_w * f64::from(tick) / 100.0;
        let _ =
            write!(h, "<text x=\"{x}\" y=\"{axis_y}\" text-anchor=\"middle\" class=\"muted\">{tick}%</text>");
    }
    h.push_str(
        "</svg>\n<table id=\"category-table\"><thead><tr><th>category</th><th class=\"n\">passed</th>\
                <th class=\"n\">total</th><th class=\"n\">accuracy</th></tr></thead><tbody>\n",
    );
    for (category, (passed, total)) in &rows {
        let _ = writeln!(
            h,
            "<tr data-category=\"{c}\"><td>{c}</td><td class=\"n\">{passed}</td><td class=\"n\">{total}</td>\
             <td class=\"n\">{acc:.1}%</td></tr>",
            c = esc(category),
            acc = percent(*passed, *total),
        );
    }
    let (passed, total) = (report.passed(), report.outcomes.len());
    let _ = writeln!(
        h,
        "<tr data-category=\"overall\" class=\"overall\"><th>overall</th><th class=\"n\">{passed}</th>\
         <th class=\"n\">{total}</th><th class=\"n\">{:.1}%</th></tr></tbody></table>",
        percent(passed, total)
    );
}

fn fault_chart(h: &mut String, faults: &[FaultOutcome]) {
    let (label_w, bar_w, row_h) = (190.0, 420.0, 22.0);
    let legend_h = 26.0;
    let height = row_h * faults.len() as f64 + legend_h + 8.0;
    let _ = write!(
        h,
        "<h2 id=\"faults\">Fault recovery</h2>\n<p class=\"muted\">A scripted model routes each scenario \
         correctly but makes one mistake; the bars show how the failsafe and guards handled it.</p>\n\
         <svg role=\"img\" aria-labelledby=\"fault-title\" viewBox=\"0 0 {w} {height}\" width=\"{w}\">\
         <title id=\"fault-title\">Fault recovery: per fault, scenarios recovered exactly, loosely, \
         not recoverable by design, and missed</title>\
         <defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#9ecf9e\"/>\
         <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#2e6f40\" stroke-width=\"3\"/></pattern>\
         <pattern id=\"dots\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\">\
         <rect width=\"5\" height=\"5\" fill=\"#ddd\"/><circle cx=\"2.5\" cy=\"2.5\" r=\"1\" fill=\"#666\"/></pattern></defs>\n",
        w = label_w + bar_w + 150.0,
    );
    // Fill and a name for each segment: solid, hatched, dotted, black; the legend says which.
    let kinds =
        [("exact", "#2e6f40"), ("loose", "url(#hatch)"), ("by design", "url(#dots)"), ("missed", "#111")];
    for (i, o) in faults.iter().enumerate() {
        let y = i as f64 * row_h + 4.0;
        let _ = write!(
            h,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            label_w - 6.0,
            y + 12.5,
            o.fault.name()
        );
        let counts = [o.exact, o.loose, o.by_design.len(), o.missed.len()];
        let mut x = label_w;
        for ((name, fill), n) in kinds.iter().zip(counts) {
            if n == 0 || o.applicable == 0 {
                continue;
            }
            let w = bar_w * n as f64 / o.applicable as f64;
            let _ = write!(
                h,
                "<rect x=\"{x:.1}\" y=\"{y}\" width=\"{w:.1}\" height=\"16\" fill=\"{fill}\" stroke=\"#fff\">\
                 <title>{name}: {n}</title></rect>"
            );
            x += w;
        }
        let _ = writeln!(
            h,
            "<text x=\"{}\" y=\"{}\">{}/{} recovered</text>",
            label_w + bar_w + 6.0,
            y + 12.5,
            o.exact + o.loose,
            o.applicable
        );
    }
    let ly = row_h * faults.len() as f64 + 10.0;
    let mut lx = label_w;
    for (name, fill) in kinds {
        let _ = write!(
            h,
            "<rect x=\"{lx}\" y=\"{ly}\" width=\"14\" height=\"14\" fill=\"{fill}\" stroke=\"#666\"/>\
             <text x=\"{}\" y=\"{}\">{name}</text>",
            lx + 18.0,
            ly + 11.5
        );
        lx += 100.0;
    }
    h.push_str(
        "</svg>\n<table id=\"fault-table\"><thead><tr><th>fault</th><th class=\"n\">applicable</th>\
         <th class=\"n\">recovered</th><th class=\"n\">exact</th><th class=\"n\">loose</th>\
         <th class=\"n\">by design</th><th class=\"n\">missed</th></tr></thead><tbody>\n",
    );
    for o in faults {
        let _ = writeln!(
            h,
            "<tr data-fault=\"{f}\"><td>{f}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            o.applicable,
            o.exact + o.loose,
            o.exact,
            o.loose,
            o.by_design.len(),
            o.missed.len(),
            f = o.fault.name(),
        );
    }
    h.push_str("</tbody></table>\n");
    let reasons: Vec<String> = faults
        .iter()
        .filter_map(|o| {
            o.by_design
                .first()
                .map(|(_, why)| format!("<li><strong>{}</strong>: {}</li>", o.fault.name(), esc(why)))
        })
        .collect();
    if !reasons.is_empty() {
        let _ = writeln!(h, "<p>Not recoverable by design:</p><ul>{}</ul>", reasons.join(""));
    }
    let missed: Vec<String> = faults
        .iter()
        .flat_map(|o| {
            o.missed.iter().map(move |(id, why)| {
                format!("<li class=\"fail\">{} in {}: {}</li>", o.fault.name(), esc(id), esc(why))
            })
        })
        .collect();
    if !missed.is_empty() {
        let _ = writeln!(h, "<p class=\"fail\">Missed recoveries:</p><ul>{}</ul>", missed.join(""));
    }
}

fn calls_list(calls: &[(String, String, Option<String>)]) -> String {
    if calls.is_empty() {
        return "<em>no call (direct answer)</em>".to_owned();
    }
    let items: Vec<String> = calls
        .iter()
        .map(|(tool, query, prior)| {
            let prior = prior
                .as_ref()
                .map(|p| format!(" <span class=\"muted\">(prior context: {})</span>", esc(p)))
                .unwrap_or_default();
            format!("<li><code>{}</code>: “{}”{prior}</li>", esc(tool), esc(query))
        })
        .collect();
    format!("<ul class=\"calls\">{}</ul>", items.join(""))
}

fn failures(h: &mut String, input: &ReportInput<'_>) {
    let by_id: HashMap<&str, &Scenario> = input.scenarios.iter().map(|s| (s.id.as_str(), s)).collect();
    let failing: Vec<&Outcome> = input.run.report.outcomes.iter().filter(|o| o.result.is_err()).collect();
    let _ = writeln!(h, "<h2 id=\"failures\">Failing scenarios ({})</h2>", failing.len());
    if failing.is_empty() {
        h.push_str("<p>Every scenario passed.</p>\n");
        return;
    }
    h.push_str(
        "<table id=\"failure-table\"><thead><tr><th>scenario</th><th>message</th><th>expected calls</th>\
         <th>routed calls</th><th>why</th></tr></thead><tbody>\n",
    );
    for o in failing {
        let scenario = by_id.get(o.id.as_str());
        let expected: Vec<(String, String, Option<String>)> = scenario
            .map(|s| s.expect.iter().map(|c| (c.tool.clone(), c.query.clone(), None)).collect())
            .unwrap_or_default();
        let routed = match input.run.routed.get(&o.id) {
            Some(calls) => calls_list(
                &calls
                    .iter()
                    .map(|c| (c.tool.clone(), c.query.clone(), c.prior_context.clone()))
                    .collect::<Vec<_>>(),
            ),
            None => "<em>routing failed</em>".to_owned(),
        };
        let _ = writeln!(
            h,
            "<tr data-scenario=\"{id}\"><td><strong>{id}</strong><br><span class=\"muted\">{cat}</span></td>\
             <td>{msg}</td><td>{exp}</td><td>{routed}</td><td>{why}</td></tr>",
            id = esc(&o.id),
            cat = esc(&o.category),
            msg = scenario.map(|s| esc(&s.message)).unwrap_or_default(),
            exp = calls_list(&expected),
            why = esc(o.result.as_ref().err().map_or("", String::as_str)),
        );
    }
    h.push_str("</tbody></table>\n");
}

fn trend(h: &mut String, input: &ReportInput<'_>) {
    let report = &input.run.report;
    let mut points: Vec<(String, String, usize, usize)> = input
        .history
        .iter()
        .map(|s| {
            (s.run_at_ms.map(utc).unwrap_or_else(|| "earlier run".into()), s.model.clone(), s.passed, s.total)
        })
        .collect();
    let now = input.run_at_ms.map(utc).unwrap_or_else(|| "this run".into());
    points.push((now, report.model.clone(), report.passed(), report.outcomes.len()));
    let _ = writeln!(h, "<h2 id=\"trend\">Trend over {} run(s)</h2>", points.len());
    if points.len() < 2 {
        h.push_str("<p class=\"muted\">No previous runs were given (routing-eval --history).</p>\n");
    } else {
        let (left, top, w, ht) = (50.0, 10.0, 560.0, 160.0);
        let step = w / (points.len() - 1) as f64;
        let _ = write!(
            h,
            "<svg role=\"img\" aria-labelledby=\"trend-title\" viewBox=\"0 0 {} {}\" width=\"{}\">\
             <title id=\"trend-title\">Overall accuracy per run, oldest first</title>",
            left + w + 40.0,
            top + ht + 30.0,
            left + w + 40.0
        );
        for tick in [0, 50, 100] {
            let y = top + ht * (1.0 - f64::from(tick) / 100.0);
            let _ = write!(
                h,
                "<line x1=\"{left}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#ccc\"/>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"muted\">{tick}%</text>",
                left + w,
                left - 6.0,
                y + 4.0
            );
        }
        let coords: Vec<(f64, f64, f64)> = points
            .iter()
            .enumerate()
            .map(|(i, (_, _, p, t))| {
                let acc = percent(*p, *t);
                (left + step * i as f64, top + ht * (1.0 - acc / 100.0), acc)
            })
            .collect();
        let path: Vec<String> = coords.iter().map(|(x, y, _)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            h,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"#1a56db\" stroke-width=\"2\"/>",
            path.join(" ")
        );
        for (x, y, acc) in &coords {
            let _ = write!(
                h,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"#1a56db\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{acc:.1}%</text>",
                y - 8.0
            );
        }
        h.push_str("</svg>\n");
    }
    h.push_str(
        "<table id=\"trend-table\"><thead><tr><th>run</th><th>model</th><th class=\"n\">passed</th>\
         <th class=\"n\">total</th><th class=\"n\">accuracy</th></tr></thead><tbody>\n",
    );
    for (when, model, passed, total) in &points {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{passed}</td><td class=\"n\">{total}</td>\
             <td class=\"n\">{:.1}%</td></tr>",
            esc(when),
            esc(model),
            percent(*passed, *total)
        );
    }
    h.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton::model::scripted::{Reply, ScriptedModel};

    const ASK_SHOPPING: &str = "ask_shopping";

    /// The reference configuration's routing with `model`.
    fn router_with(model: Arc<ScriptedModel>) -> Arc<Router> {
        let reference = baton::wiring::build_router(
            &baton_reference::reference_config(),
            &baton::wiring::Backends::in_memory(),
        )
        .unwrap()
        .unwrap();
        Arc::new(reference.with_model(model))
    }
    use serde_json::json;

    async fn always_shopping_run() -> (Vec<Scenario>, SuiteRun) {
        let suite = eval::load_suite(eval::REFERENCE_SUITE, "reference").unwrap();
        let model = Arc::new(ScriptedModel::new(
            "always-shopping",
            Some(Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "x", "intent_count": 1}))),
        ));
        let mut seen = Vec::new();
        let run =
            run_suite(router_with(model), &suite, 4, |done, total, o| seen.push((done, total, o.id.clone())))
                .await;
        assert_eq!(seen.len(), suite.len(), "progress for every scenario");
        assert_eq!(seen.last().unwrap().0, suite.len());
        (suite, run)
    }

    #[tokio::test]
    async fn a_run_scores_like_the_eval_and_keeps_the_routed_calls() {
        let (suite, run) = always_shopping_run().await;
        let model = Arc::new(ScriptedModel::new(
            "always-shopping",
            Some(Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "x", "intent_count": 1}))),
        ));
        let reference = eval::run_suite(router_with(model), &suite, 4).await;
        assert_eq!(run.report.to_string(), reference.to_string(), "same scores as eval::run_suite");
        let failing = run.report.outcomes.iter().find(|o| o.result.is_err()).unwrap();
        assert_eq!(run.routed[&failing.id][0].tool, ASK_SHOPPING);
    }

    #[tokio::test]
    async fn the_report_shows_every_failure_with_expected_and_routed_calls() {
        let (suite, run) = always_shopping_run().await;
        let summary = Summary::new("routing", &run.report, &[], Some(1_700_000_000_000));
        let html = render_html(&ReportInput {
            suite: "routing",
            run: &run,
            scenarios: &suite,
            faults: None,
            history: std::slice::from_ref(&summary),
            run_at_ms: Some(1_700_000_100_000),
        });
        for o in run.report.outcomes.iter().filter(|o| o.result.is_err()) {
            assert!(html.contains(&format!("<tr data-scenario=\"{}\">", esc(&o.id))), "{} missing", o.id);
            let routed = &run.routed[&o.id][0];
            let shown = format!("<code>{}</code>: “{}”", routed.tool, esc(&routed.query));
            assert!(html.contains(&shown), "routed calls of {} shown", o.id);
        }
        assert!(html.contains("Trend over 2 run(s)") && html.contains("<polyline"));
        assert!(html.contains("2023-11-14 22:13"), "run time in UTC");
        assert!(
            !html.contains("http://") && !html.contains("https://") && !html.contains("src="),
            "self-contained"
        );
    }

    #[test]
    fn summaries_round_trip_and_history_accepts_arrays_lines_and_old_summaries() {
        let old = r#"{"suite":"routing","model":"m","passed":1,"total":2,
            "by_category":{"a":{"passed":1,"total":2}},"failures":[{"id":"x","why":"y"}],"faults":[]}"#;
        let one = parse_summaries(old).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].run_at_ms, None);
        assert_eq!((one[0].passed, one[0].total), (1, 2));
        let line = serde_json::to_string(&one[0]).unwrap();
        assert_eq!(parse_summaries(&format!("{line}\n{line}\n")).unwrap().len(), 2);
        assert_eq!(parse_summaries(&format!("[{line},{line},{line}]")).unwrap().len(), 3);
        assert!(parse_summaries("{\"suite\": 1}").is_err());
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[tokio::test]
    async fn json_shows_every_dispatched_call_with_its_arguments_the_repairs_and_the_verdict() {
        let (suite, run) = always_shopping_run().await;
        let summary = Summary::new("routing", &run.report, &[], None);
        let json = run_json(&summary, &run, &suite);
        assert_eq!(json["summary"]["total"], suite.len());
        let scenarios = json["scenarios"].as_array().unwrap();
        assert_eq!(scenarios.len(), suite.len());
        let first = scenarios.iter().find(|s| s["id"] == "single-support-01").unwrap();
        assert_eq!(first["verdict"], "fail");
        assert!(first["why"].as_str().unwrap().contains("ask_shopping"));
        assert_eq!(first["expected"][0]["support_category"], "rejected_receipt");
        let call = &first["calls"][0];
        assert_eq!(call["tool"], ASK_SHOPPING);
        assert_eq!(call["arguments"], json!({"query": "my receipt didn't scan", "intent_count": 1}));
        assert_eq!(
            first["repairs"][0],
            json!({"repair": "query_verbatim", "tool": ASK_SHOPPING, "was": "x"})
        );
        let shopping = scenarios.iter().find(|s| s["id"] == "single-shopping-01").unwrap();
        assert_eq!(shopping["verdict"], "pass");
    }
}
