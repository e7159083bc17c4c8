"""``shmstream view`` in a real browser (headless Chromium driven by
Selenium): the page draws what a producer writes, counts its pictures,
lists every kind of segment, survives a stream removed while shown, shows
a corrupt segment as corrupt, scrubs history and plays a recording back.

Every wait polls the page's own counters (the count of the frame shown,
the pictures drawn); none sleeps. Set SHMSTREAM_WRITE_SCREENSHOT=1 to
rewrite docs/view.png from the table test.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import shmstream
from shmstream.recording import RecordingWriter
from shmstream.viewer import Viewer

import support
from view_util import (
    canvas_pixels,
    page,
    pictures,
    start_cli,
    stop_cli,
    text,
    wait_for,
    wait_for_count,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
H, W = 192, 256


@pytest.fixture
def viewer():
    """A view server in this process; its page's base URL."""
    v = Viewer().start()
    yield v
    v.close()


def gradient() -> np.ndarray:
    return np.tile(np.linspace(0, 65535, W).astype(np.uint16), (H, 1))


def checkerboard(square: int = 16) -> np.ndarray:
    return ((np.indices((H, W)) // square).sum(axis=0) % 2 * 65535).astype(np.uint16)


def rows(driver) -> list[tuple[str, str, str]]:
    """(kind, name, segment) of each row of the page's table."""
    return [
        tuple(r)
        for r in driver.execute_script(
            "return [...document.querySelectorAll('#segments tbody tr')]"
            ".map(tr => [tr.dataset.kind, tr.dataset.name, tr.dataset.segment])"
        )
    ]


def click_row(driver, name: str) -> None:
    driver.execute_script(
        "for (const tr of document.querySelectorAll('#segments tbody tr'))"
        "  if (tr.dataset.name === arguments[0]) tr.click();",
        name,
    )


def set_input(driver, element_id: str, value) -> None:
    """Move a slider or tick a box as a user does (an 'input' event)."""
    driver.execute_script(
        "const e = document.getElementById(arguments[0]);"
        "if (e.type === 'checkbox') e.checked = arguments[1]; else e.value = arguments[1];"
        "e.dispatchEvent(new Event('input'));",
        element_id,
        value,
    )


def test_the_page_draws_a_gradient_then_a_checkerboard_and_counts_pictures(browser, name):
    with shmstream.create(name, shape=(H, W), dtype=np.uint16) as s:
        s.write(gradient())  # count 1
        proc, url = start_cli(name)  # the command, as a user runs it
        try:
            browser.get(url)
            wait_for_count(browser, 1)
            px = canvas_pixels(browser)
            assert px.shape[:2] == (H, W)
            assert (px[..., 0] == px[..., 2]).all()  # the gray map
            row = px[H // 2, :, 0]
            assert row[0] < 10 and row[-1] > 245, row
            assert (np.diff(row) >= 0).all() and len(set(row.tolist())) > 100, row
            drawn = pictures(browser)

            board = checkerboard()
            s.write(board)  # count 2
            wait_for_count(browser, 2)
            assert pictures(browser) > drawn  # the page's own counter advanced
            px = canvas_pixels(browser)
            centres = [(y, x) for y in range(8, H, 16) for x in range(8, W, 16)]
            bright = [px[y, x, 0] > 245 for y, x in centres]
            dark = [px[y, x, 0] < 10 for y, x in centres]
            assert bright == [bool(board[y, x]) for y, x in centres]
            assert dark == [not board[y, x] for y, x in centres]
        finally:
            err = stop_cli(proc)
    assert "Traceback" not in err, err


def _rows_dataset():
    torch = pytest.importorskip("torch")

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.full((256,), float(i))

    return Rows()


def rings(h: int = 384, w: int = 512) -> np.ndarray:
    y, x = np.indices((h, w))
    r = np.hypot(y - h / 2, x - w / 2)
    return (np.cos(r / 9) * np.exp(-r / 250) * 30000 + 32768).astype(np.uint16)


def test_the_table_lists_a_stream_a_channel_an_array_and_a_pool_at_once(browser, viewer, make_name):
    from shmstream.torch import DataLoader

    dataset = _rows_dataset()
    stream_name, channel_name, array_name = (
        make_name("camera"),
        make_name("commands"),
        make_name("calibration"),
    )
    with (
        shmstream.create(stream_name, shape=(384, 512), dtype=np.uint16, history=16) as s,
        shmstream.channel(channel_name, 4096) as producer,
    ):
        producer.send(b"x" * 1000)
        arr = shmstream.share(np.arange(12.0).reshape(3, 4), name=array_name)
        loader = DataLoader(dataset, batch_size=4, num_workers=1)
        batches = iter(loader)
        next(batches)  # the loader's pool and a slot exist now
        try:
            s.write(rings())
            browser.get(viewer.url)
            wanted = {stream_name: "stream", channel_name: "channel", array_name: "array"}
            wait_for(
                browser,
                lambda d: (
                    {n: k for k, n, _ in rows(d) if n in wanted} == wanted
                    and any(k == "loader-pool" for k, _, _ in rows(d))
                ),
                "a stream, a channel, an array and a loader pool in the table",
            )
            table = browser.execute_script("return document.getElementById('segments').innerText")
            assert "(384, 512)" in table and "uint16" in table
            assert "% of 4096 B" in table  # the channel's fill level
            assert "slot file(s)" in table  # the pool's slots
            assert f"{os.getpid()} (alive)" in table
            click_row(browser, stream_name)
            set_input(browser, "cmap", "viridis")
            wait_for_count(browser, 1)
            wait_for(browser, lambda d: "instance_id" in text(d, "details"), "the details")
            if os.environ.get("SHMSTREAM_WRITE_SCREENSHOT") == "1":
                browser.save_screenshot(str(DOCS / "view.png"))
        finally:
            del batches, loader, arr


def test_a_stream_removed_while_shown_leaves_the_page_working(browser, viewer, make_name):
    first, second = make_name(), make_name()
    s = shmstream.create(first, shape=(H, W), dtype=np.uint16)
    s.write(gradient())
    browser.get(page(viewer, stream=first))
    wait_for_count(browser, 1)
    s.close()
    shmstream.unlink(first)
    wait_for(
        browser,
        lambda d: d.find_element("id", "state").get_attribute("data-state") == "removed",
        "that the stream was removed",
    )
    wait_for(browser, lambda d: first not in [n for _, n, _ in rows(d)], "the row gone")
    with shmstream.create(second, shape=(H, W), dtype=np.uint16) as s2:
        s2.write(checkerboard())
        s2.write(checkerboard())
        wait_for(browser, lambda d: second in [n for _, n, _ in rows(d)], "the new stream")
        click_row(browser, second)
        wait_for_count(browser, 2)  # the page goes on with another stream
        assert "was removed" not in text(browser, "message")


def test_a_corrupt_segment_is_shown_as_corrupt(browser, viewer, name):
    shmstream.create(name, shape=(4,)).close()
    support.patch_bytes(support.segment_path(name), 0, b"NOTSHMS!")
    segname = "/" + support.segment_name(name)
    browser.get(viewer.url)
    wait_for(browser, lambda d: ("corrupt", "", segname) in rows(d), "the corrupt row")
    browser.execute_script(
        "for (const tr of document.querySelectorAll('#segments tbody tr'))"
        "  if (tr.dataset.segment === arguments[0]) tr.click();",
        segname,
    )
    wait_for(browser, lambda d: "corrupt" in text(d, "details"), "why it is corrupt")
    assert "unlink" in text(browser, "details")  # the next step
    browser.get(page(viewer, stream=name))  # asked for by its name
    wait_for(
        browser,
        lambda d: d.find_element("id", "state").get_attribute("data-state") == "corrupt",
        "the stream as corrupt",
    )
    assert "corrupt" in text(browser, "message")


def test_history_is_scrubbed_back_and_forth(browser, viewer, name):
    with shmstream.create(name, shape=(H, W), dtype=np.uint16, history=8) as s:
        for k in range(1, 9):
            s.write(gradient() if k % 2 else checkerboard(), frame_id=100 + k)
        browser.get(page(viewer, stream=name))
        wait_for_count(browser, 8)
        set_input(browser, "scrub", 3)
        wait_for_count(browser, 3)
        assert text(browser, "frame-id") == "103"
        set_input(browser, "live", True)
        wait_for_count(browser, 8)
        s.write(gradient())
        wait_for_count(browser, 9)  # live again


def test_a_recording_directory_plays_back(browser, tmp_path):
    path = tmp_path / "rec"
    frames = np.stack([np.roll(gradient(), 20 * k, axis=1) for k in range(5)])
    with RecordingWriter(path, shape=(H, W), dtype=np.uint16, description={"name": "cam"}) as w:
        w.append(frames, np.arange(11, 16), np.arange(5), 1_000_000_000 * np.arange(1, 6))
    proc, url = start_cli(str(path))
    try:
        browser.get(url)
        wait_for(browser, lambda d: pictures(d) >= 2, "the recording playing")
        assert text(browser, "index-text").endswith("of 5")
        set_input(browser, "frame-index", 2)  # pause, jump to the third frame
        wait_for_count(browser, 13)
        assert text(browser, "frame-id") == "2"
    finally:
        err = stop_cli(proc)
    assert "Traceback" not in err, err
