"""Helpers of the live-view tests (tests/viewer/test_view*.py): a headless
Chromium driven by Selenium, and waits on the page's own counters."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

WAIT = 30.0  # seconds a page state may take on a loaded 2-core machine


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install '.[test]')"
    for module in ("starlette", "uvicorn", "websockets"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (the 'view' extra: pip install '.[view]')"
    if chromium() is None:
        return "no Chromium (Debian: apt-get install chromium chromium-driver)"
    if shutil.which("chromedriver") is None:
        return "no chromedriver (Debian: apt-get install chromium-driver)"
    return None


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def start_browser() -> Any:
    """A headless Chromium (new headless mode, no sandbox: CI runs as root)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium() or ""
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1700,1000",
        "--disable-dev-shm-usage",
        "--force-device-scale-factor=1",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))


def page(viewer: Any, path: str = "", **query: Any) -> str:
    """The URL of ``path`` on ``viewer`` (a shmstream.viewer.Viewer) with
    its token and ``query``: what a user's browser or script asks for."""
    import urllib.parse

    base = viewer.url.split("?")[0]
    return base + path + "?" + urllib.parse.urlencode({"token": viewer.token, **query})


def socket_url(viewer: Any, **query: Any) -> str:
    """The picture socket's URL on ``viewer``, with its token."""
    return page(viewer, "ws", **query).replace("http://", "ws://", 1)


def text(driver: Any, element_id: str) -> str:
    return driver.execute_script(f"return document.getElementById('{element_id}').textContent")


def wait_for(driver: Any, predicate: Any, what: str, timeout: float = WAIT) -> Any:
    """Poll the page until ``predicate(driver)`` is truthy (WebDriverWait
    polls; no fixed sleep); the failure says what the page showed."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05).until(predicate)
    except TimeoutException:
        shown = {
            k: text(driver, k)
            for k in ("message", "state", "pictures", "frame-count", "server-state")
        }
        pytest.fail(f"the page never showed {what}; it shows {shown}")


def wait_for_count(driver: Any, count: int) -> None:
    wait_for(
        driver, lambda d: text(d, "frame-count") == str(count), f"the picture of count {count}"
    )


def pictures(driver: Any) -> int:
    return int(text(driver, "pictures") or 0)


def canvas_pixels(driver: Any, element_id: str = "picture") -> Any:
    """The element as the browser drew it (a screenshot), as an RGB array."""
    import numpy as np
    from PIL import Image
    from selenium.webdriver.common.by import By

    png = driver.find_element(By.ID, element_id).screenshot_as_png
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def start_cli(*args: str) -> tuple[subprocess.Popen, str]:
    """``shmstream view ARGS`` in a child process, and the URL it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmstream", "view", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if "http://" not in line:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"shmstream view printed no URL: {line + out!r} {err!r}")
    return proc, line.split()[2]


def stop_cli(proc: subprocess.Popen) -> str:
    """Stop the server as Ctrl-C does; its stderr (a crash would show there)."""
    import signal

    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"shmstream view did not stop on Ctrl-C: {err}")
    return err
