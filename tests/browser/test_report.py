"""The routing eval's HTML report (`routing-eval --html`) rendered in headless Chromium: its
numbers equal the text output of the same run."""

import json
import re
import subprocess

from selenium.webdriver.common.by import By

from harness import BIN


def routing_eval(tmp_path, *args):
    out = subprocess.run(
        [str(BIN / "routing-eval"), "--store-path", str(tmp_path / "store.redb"), "--faults", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    return out.stdout, out.stderr


def text_tables(stdout):
    """The category and fault rows of the text report, as strings of cells."""
    categories, faults, failures = {}, {}, []
    section = "categories"
    for line in stdout.splitlines():
        if line.startswith("fault injection"):
            section = "faults"
        cells = line.split()
        if section == "categories" and len(cells) == 4 and cells[3].endswith("%"):
            categories[cells[0]] = cells[1:]
        elif section == "faults" and len(cells) == 6 and cells[1].isdigit():
            faults[cells[0]] = cells[1:]
        m = re.match(r"  (\S+) \[(\S+)\]: (.*)", line)
        if m:
            failures.append(m.groups())
    return categories, faults, failures


def cells(row):
    return [c.get_attribute("textContent") for c in row.find_elements(By.CSS_SELECTOR, "td, th")]


def test_the_report_renders_and_its_numbers_equal_the_text_output(driver, tmp_path, output_dir):
    history = tmp_path / "history"
    history.mkdir()
    # An older run (hand-written, as the eval function stores them) and a real previous run.
    older = {"suite": "routing", "model": "offline", "run_at_ms": 1_700_000_000_000, "passed": 40, "total": 66,
             "by_category": {}, "failures": [], "faults": []}
    (history / "0-older.json").write_text(json.dumps(older))
    _, progress = routing_eval(tmp_path, "--summary", str(history / "1-previous.json"))
    assert "routing 66/66" in progress or re.search(r"routing \d+/\d+", progress), progress
    report = tmp_path / "report.html"
    stdout, stderr = routing_eval(tmp_path, "--html", str(report), "--history", str(history))
    assert f"report written to {report}" in stderr
    categories, faults, failures = text_tables(stdout)
    assert len(categories) > 5 and len(faults) == 10, stdout

    driver.get(report.as_uri())
    html_categories = {
        r.get_attribute("data-category"): cells(r)[1:]
        for r in driver.find_elements(By.CSS_SELECTOR, "#category-table tbody tr")
    }
    assert html_categories == categories, "category table equals the text output"
    html_faults = {
        r.get_attribute("data-fault"): cells(r)[1:6]
        for r in driver.find_elements(By.CSS_SELECTOR, "#fault-table tbody tr")
    }
    # The text columns: applicable, recovered, exact, loose, by design.
    assert html_faults == {k: v for k, v in faults.items()}, "fault table equals the text output"
    bars = driver.find_elements(By.CSS_SELECTOR, "svg[aria-labelledby='cat-title'] rect")
    assert len(bars) == 2 * len(categories) - 2, "a track and a bar per category"

    rows = driver.find_elements(By.CSS_SELECTOR, "#failure-table tbody tr")
    assert [r.get_attribute("data-scenario") for r in rows] == [f[0] for f in failures]
    for row, (_, category, why) in zip(rows, failures):
        scenario, _, expected, routed, shown_why = cells(row)
        assert category in scenario and shown_why == why
        got_tools = re.match(r'tools \[(.*?)\], expected \[(.*?)\]', why)
        if got_tools:
            for tool in re.findall(r'"(\w+)"', got_tools.group(1)):
                assert tool in routed, (routed, why)
            for tool in re.findall(r'"(\w+)"', got_tools.group(2)):
                assert tool in expected, (expected, why)

    trend = [cells(r) for r in driver.find_elements(By.CSS_SELECTOR, "#trend-table tbody tr")]
    assert len(trend) == 3, trend
    assert trend[0][2:] == ["40", "66", "60.6%"]
    assert trend[-1][2:] == categories["overall"], "this run is the last point"
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg[aria-labelledby='trend-title'] circle")) == 3
    assert driver.find_element(By.ID, "overall").text.endswith(f"{categories['overall'][2]}")
    driver.set_window_size(1000, 2400)
    assert driver.save_screenshot(str(output_dir / "eval-report.png"))
    driver.set_window_size(1000, 1100)
