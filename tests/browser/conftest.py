"""Fixtures of the browser tests: the scripted servers, `orchestrator serve`, headless Chromium."""

import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from harness import ROOT, Scripts, Serve

# Selenium must use the given chromium and chromedriver, never download its own.
os.environ.setdefault("SE_OFFLINE", "true")

OUTPUT = Path(os.environ.get("BATON_TEST_OUTPUT", ROOT / "target" / "browser-test-output"))


@pytest.fixture(scope="session")
def output_dir():
    OUTPUT.mkdir(parents=True, exist_ok=True)
    return OUTPUT


@pytest.fixture(scope="session")
def scripts():
    s = Scripts()
    yield s
    s.close()


@pytest.fixture(scope="session")
def server(scripts, tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    s = Serve(scripts, d / "store.redb", d / "serve.log")
    yield s
    s.stop()


@pytest.fixture
def own_server(scripts, tmp_path):
    """A serve of the test's own, whose store the test reads after stopping it."""
    s = Serve(scripts, tmp_path / "store.redb", tmp_path / "serve.log")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def driver():
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    chromedriver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1000,1100", "--force-prefers-reduced-motion", "--lang=en-US"):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(chromedriver), options=options)
    d.set_page_load_timeout(20)
    d.set_script_timeout(20)
    yield d
    d.quit()


@pytest.fixture
def proxy(own_server):
    """A proxy the test can cut, between the browser and the test's own serve."""
    from proxy import CuttingProxy

    p = CuttingProxy(own_server.url.removeprefix("http://"))
    yield p
    p.close()
