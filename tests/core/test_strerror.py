"""ss_strerror: every status code of include/shmstream.h has its own
sentence, an unknown code a fallback, and the C examples print it."""

from __future__ import annotations

import re
import subprocess

import numpy as np

import shmstream

import support

HEADER = support.ROOT + "/include/shmstream.h"

PROGRAM = r"""
#include <stdio.h>
#include <errno.h>
#include "shmstream.h"
int main(void) {
  for (int s = -200; s <= 0; s++) printf("%d\t%s\n", s, ss_strerror(s));
  printf("ENOENT\t%s\n", ss_strerror(ENOENT));
  printf("big\t%s\n", ss_strerror(1 << 30));
  printf("min\t%s\n", ss_strerror(-2147483647 - 1));
  return 0;
}
"""


def _status_codes() -> dict[str, int]:
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    body = re.search(r"enum ss_status \{(.*?)\};", text, re.S)
    assert body, "enum ss_status not found in include/shmstream.h"
    body_text = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
    codes = dict(re.findall(r"(SS_\w+)\s*=\s*(-?\d+)", body_text))
    assert len(codes) >= 30, codes
    return {k: int(v) for k, v in codes.items()}


def _texts(tmp_path) -> dict[str, str]:
    src = tmp_path / "strerror.c"
    src.write_text(PROGRAM)
    exe = support.compile_c(str(tmp_path / "strerror"), [str(src)])
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    return dict(line.split("\t", 1) for line in out.splitlines())


def test_every_status_code_has_its_own_sentence_and_unknown_ones_a_fallback(tmp_path):
    texts = _texts(tmp_path)
    codes = _status_codes()
    fallback = texts["-200"]
    assert fallback == "unknown shmstream status"
    mine = {name: texts[str(code)] for name, code in codes.items()}
    for name, text in mine.items():
        assert text and text != fallback, f"{name} has no text of its own"
    assert len(set(mine.values())) == len(mine), "two status codes share a text"
    known = set(map(str, codes.values()))
    for code, text in texts.items():
        if code.lstrip("-").isdigit() and code not in known:
            assert text == fallback, f"status {code} is not in the enum but has a text"
    assert texts["min"] == fallback
    assert texts["ENOENT"] == "No such file or directory"
    assert texts["big"] == "unknown system error"


def test_c_example_prints_the_status_sentence(tmp_path, name):
    exe = support.compile_c(str(tmp_path / "c_consumer"), ["examples/c_consumer.c"])
    h = shmstream.create(name, shape=(2,), dtype=np.uint8)
    try:
        proc = subprocess.run([exe, name], capture_output=True, text=True, timeout=30, check=False)
    finally:
        h.close()
        shmstream.unlink(name)
    assert proc.returncode != 0
    texts = _texts(tmp_path)
    assert f"{texts['-6']} (status -6)" in proc.stderr, proc.stderr


def test_every_failure_status_has_a_row_in_the_bindings_table_or_says_the_core_text():
    """The bindings raise per-call messages from one table (_binding.h); a
    status without a row falls back to ss_strerror's sentence there. The
    codes that may do so are the ones that are not failures."""
    with open(support.ROOT + "/src/bindings/_binding.h", encoding="utf-8") as f:
        binding = f.read()
    table = binding[binding.index("kStatusTable[] = {") :]
    table = table[: table.index("\n};")]
    rows = set(re.findall(r"\{(SS_\w+),", table))
    assert set(_status_codes()) - rows == {"SS_OK", "SS_EOWNERDEAD"}
    fallback = binding[binding.index("[[noreturn]] inline void raise_status(") :]
    assert "ss_strerror(rc)" in fallback[: fallback.index("\n}\n")]
