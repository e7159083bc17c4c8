"""The registry (list, stat, unlink, purge) survives anything in /dev/shm:
FIFOs, links, directories, names that are not UTF-8, stored names that are
not UTF-8 or hold terminal escape codes, corrupt headers. It never blocks,
never follows a link, never stops at one bad entry, says what it skipped,
and prints names with control characters escaped.

Hostile entries are planted in a private /dev/shm (a child in its own
mount namespace), never in the shared one: a FIFO there would hang any
other process that lists it with an older build. Each child runs under a
timeout, so a scan that blocks fails the test instead of hanging the
suite; its tmpfs, and all it holds, goes when it exits.
"""

from __future__ import annotations

import json
import os

import pytest

import shmstream
from shmstream import cli, registry

import support

TESTS_DIR = support.TESTS_DIR
TIMEOUT = 60.0

# The start of every child script: what it plants, and how it runs the
# command. Raw text: b"\xff" here is a byte in the child.
PRELUDE = r'''
import errno, json, os, subprocess, sys
sys.path.insert(0, TESTS_DIR)
import shmstream, support
from shmstream import _native, registry

SHM = "/dev/shm"
RED = b"\x1b[31mred\x1b[0m"  # a stored name that would colour a terminal


def plant_hostile():
    """A stream, and every kind of entry the registry must step around."""
    shmstream.create("ok", shape=(2,)).close()
    os.mkfifo(SHM + "/shmstream-fifo")
    os.symlink(support.segment_path("ok"), SHM + "/shmstream-link")  # to a valid segment
    os.mkdir(SHM + "/shmstream-dir")
    with open(b"/dev/shm/shmstream-\xff", "wb") as f:  # not UTF-8, not a segment
        f.write(b"\xff" * 8192)
    with open(b"/dev/shm/shmstream.loader-\xff.0.0", "wb") as f:  # a slot of no pool
        f.write(bytes(4096))
    os.mkfifo(SHM + "/shmstream.loader-fifo.0.0")


def forge(name, stored):
    """A valid stream ``name`` whose header holds the user name ``stored``
    (checksum fixed: it validates)."""
    shmstream.create(name, shape=(2,)).close()
    path = support.segment_path(name)
    support.patch_identity(path, support.field("name")[0], stored + b"\0")
    support.patch_identity(path, support.field("name_len")[0], len(stored).to_bytes(4, "little"))


def run_cli(*args):
    p = subprocess.run([sys.executable, "-m", "shmstream", *args], capture_output=True,
                       timeout=30)
    return {"rc": p.returncode, "raw_out": list(p.stdout),
            "out": p.stdout.decode("utf-8", "surrogateescape"),
            "err": p.stderr.decode("utf-8", "surrogateescape")}


def files():
    return sorted(os.fsdecode(f) for f in os.listdir(b"/dev/shm"))


def report(**facts):
    print("RESULT " + json.dumps(facts))
'''


def run_private(body: str) -> dict:
    """Run PRELUDE + body in a child with a private /dev/shm; the facts it
    reported."""
    reason = support.private_shm_available()
    if reason:
        pytest.skip(reason)
    script = PRELUDE.replace("TESTS_DIR", repr(TESTS_DIR)) + body
    proc = support.run_in_private_shm(script, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    return json.loads(lines[0][len("RESULT ") :])


SKIPPED = {
    "/shmstream-dir": "a directory, not a regular file",
    "/shmstream-fifo": "a FIFO, not a regular file",
    "/shmstream-link": "a symbolic link, not a regular file",
    "/shmstream.loader-fifo.0.0": "a FIFO, not a regular file",
}
LEFT_ALONE = sorted(p.lstrip("/") for p in SKIPPED)


# ---- the C core: peek --------------------------------------------------------------


def test_peek_neither_blocks_on_a_fifo_nor_follows_a_link():
    facts = run_private(r"""
plant_hostile()
got = {}
for segname in ("/shmstream-fifo", "/shmstream-link", "/shmstream-dir", b"/shmstream-\xff"):
    try:
        _native.Segment.peek(segname)
        got[os.fsdecode(segname)] = "opened"
    except OSError as exc:
        got[os.fsdecode(segname)] = errno.errorcode[exc.errno]
    except Exception as exc:
        got[os.fsdecode(segname)] = type(exc).__name__
report(got=got)
""")
    assert facts["got"] == {
        "/shmstream-fifo": "ENODEV",  # opened without blocking, refused on its type
        "/shmstream-link": "ELOOP",  # never followed, though it points at a segment
        "/shmstream-dir": "ENODEV",
        "/shmstream-\udcff": "CorruptStreamError",  # any name bytes reach the core
    }


# ---- list and stat -----------------------------------------------------------------


def test_the_python_registry_lists_around_hostile_entries_and_says_what_it_skipped():
    facts = run_private(r"""
plant_hostile()
forge("forged1", b"bad\xff")
forge("forged2", RED)
entries, skipped = registry.survey()
os.mkfifo(support.segment_path("fifo-named"))
try:
    shmstream.stat("fifo-named")
    stat_of_fifo = "no error"
except shmstream.CorruptStreamError as exc:
    stat_of_fifo = str(exc)
report(entries=[[e.segname, e.name, e.kind, e.shown] for e in entries],
       skipped=[[s.segname, s.reason] for s in skipped],
       streams=shmstream.list_streams(), channels=shmstream.list_channels(),
       stat_ok=shmstream.stat("ok")["name"], stat_of_fifo=stat_of_fifo)
""")
    by_segname = {segname: [name, kind, shown] for segname, name, kind, shown in facts["entries"]}
    assert by_segname["/shmstream-\udcff"] == [None, "corrupt", "/shmstream-\\xff"]
    assert by_segname["/" + support.segment_name("ok")] == ["ok", "stream", "ok"]
    assert by_segname["/" + support.segment_name("forged1")] == ["bad\udcff", "stream", "bad\\xff"]
    assert by_segname["/" + support.segment_name("forged2")] == [
        "\x1b[31mred\x1b[0m",
        "stream",
        "\\x1b[31mred\\x1b[0m",
    ]
    assert len(facts["entries"]) == 4  # the link to "ok" is not a second "ok"
    assert dict(facts["skipped"]) == SKIPPED
    assert facts["streams"] == sorted(["ok", "bad\udcff", "\x1b[31mred\x1b[0m"])
    assert facts["channels"] == []
    assert facts["stat_ok"] == "ok"
    assert (
        "FIFO" in facts["stat_of_fifo"]
        and "shmstream.unlink('fifo-named')" in facts["stat_of_fifo"]
    )


def test_the_list_command_escapes_names_and_reports_skipped_entries_on_stderr():
    facts = run_private(r"""
plant_hostile()
forge("forged1", b"bad\xff")
forge("forged2", RED)
report(table=run_cli("list"), names=run_cli("list", "--names"), json=run_cli("list", "--json"))
""")
    table = facts["table"]
    assert table["rc"] == 0, table["err"]
    rows = {line.split()[-1]: line.split()[0] for line in table["out"].splitlines()[1:]}
    assert rows == {
        "ok": "stream",
        "bad\\xff": "stream",
        "\\x1b[31mred\\x1b[0m": "stream",
        "/shmstream-\\xff": "corrupt",
    }
    assert 0x1B not in table["raw_out"] and 0xFF not in table["raw_out"]  # nothing raw
    for segname, reason in SKIPPED.items():
        assert f"shmstream: skipped {segname}: {reason}" in table["err"]
    names = facts["names"]
    assert names["rc"] == 0 and 0x1B not in names["raw_out"]
    assert sorted(names["out"].split()) == sorted(["ok", "bad\\xff", "\\x1b[31mred\\x1b[0m"])
    listed = json.loads(facts["json"]["out"])  # escaped by JSON itself
    assert {e["name"] for e in listed} == {None, "ok", "bad\udcff", "\x1b[31mred\x1b[0m"}


def test_a_name_list_shows_escaped_is_one_unlink_accepts():
    facts = run_private(r"""
plant_hostile()
forge("forged1", b"bad\xff")
forge("forged2", RED)
shown = sorted(e.shown for e in registry.scan() if e.kind in ("stream", "corrupt"))
cli_unlink = run_cli("unlink", "bad\\xff", "/shmstream-\\xff")
shmstream.unlink("\\x1b[31mred\\x1b[0m")  # the Python API takes the shown text too
fifo = run_cli("unlink", "/shmstream-fifo")  # a skipped entry, by the name it is reported as
report(shown=shown, cli_unlink=cli_unlink, fifo=fifo, files=files())
""")
    assert facts["shown"] == sorted(["ok", "bad\\xff", "\\x1b[31mred\\x1b[0m", "/shmstream-\\xff"])
    assert facts["cli_unlink"]["rc"] == 0, facts["cli_unlink"]["err"]
    assert facts["cli_unlink"]["out"].splitlines() == [
        "unlinked 'bad\\xff'",
        "unlinked '/shmstream-\\xff'",
    ]
    assert facts["fifo"]["out"] == "unlinked '/shmstream-fifo'\n"
    assert facts["files"] == sorted(
        [
            support.segment_name("ok"),
            "shmstream-dir",
            "shmstream-link",
            "shmstream.loader-\udcff.0.0",
            "shmstream.loader-fifo.0.0",
        ]
    )


# ---- purge -------------------------------------------------------------------------

ABANDONED = r'''
def abandoned():
    """An array and a channel whose creator exited, and the slot file of a
    loader pool that has no root any more."""
    child = ("import os, shmstream; from shmstream import _native\n"
             "_native.Segment.create('arr', _native.KIND_ARRAY, [4], 1, '|u1')\n"
             "shmstream.channel('chan', capacity=4096)\n"
             "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", child], check=True, timeout=30)
    with open(SHM + "/shmstream.loader-0123456789abcdef.0.0", "wb") as f:
        f.write(bytes(4096))
'''


def test_the_purge_command_skips_hostile_entries_says_why_and_removes_the_abandoned():
    facts = run_private(
        ABANDONED
        + r"""
plant_hostile()
forge("forged1", b"bad\xff")
abandoned()
report(purge=run_cli("purge"), files=files())
"""
    )
    purge = facts["purge"]
    assert purge["rc"] == 0, purge["err"]
    assert sorted(purge["out"].splitlines()) == sorted(
        f"purged '{n}'" for n in ("ok", "bad\\xff", "/shmstream-\\xff", "arr", "chan")
    )
    for segname, reason in SKIPPED.items():
        assert f"shmstream: skipped {segname}: {reason}" in purge["err"]
    assert "removed 5 object(s)" in purge["err"]
    # every regular file went (the orphan slot files included); what is not
    # a regular file was left alone
    assert facts["files"] == LEFT_ALONE


def test_the_python_purge_goes_on_past_bad_entries_and_reports_them():
    facts = run_private(
        ABANDONED
        + r"""
plant_hostile()
abandoned()
names = shmstream.purge()
after = files()
shmstream.create("ok", shape=(2,)).close()  # again, for the report
with open(b"/dev/shm/shmstream-\xff", "wb") as f:
    f.write(b"\xff" * 8192)
rep = shmstream.purge()
report(names=names, after=after, removed=sorted(e.shown for e in rep.removed),
       skipped=[[s.segname, s.reason] for s in rep.skipped])
"""
    )
    assert facts["names"] == ["arr", "chan", "ok"]  # the corrupt one has no name to return
    assert facts["after"] == LEFT_ALONE
    assert facts["removed"] == ["/shmstream-\\xff", "ok"]
    assert dict(facts["skipped"]) == SKIPPED


def test_purge_reports_the_cuda_ipc_files_it_removed_and_the_command_prints_them():
    facts = run_private(
        r"""
import subprocess
dead = subprocess.Popen([sys.executable, "-c", "pass"]); dead.wait()
def plant(seq):
    name = "cuda.shm.1.%x.%d" % (dead.pid, seq)
    open("/dev/shm/" + name, "wb").close()
    return name
first = plant(0)
living = "cuda.shm.1.%x.0" % os.getpid()
open("/dev/shm/" + living, "wb").close()
kept = shmstream.purge()  # without the flag: left alone
result = shmstream.purge(include_cuda_orphans=True)
second = plant(1)
report(first=first, second=second, living=living, kept=kept.cuda_orphans,
       orphans=result.cuda_orphans, names=list(result), cli=run_cli("purge", "--include-cuda-orphans"),
       files=files())
"""
    )
    assert facts["kept"] == []
    assert facts["orphans"] == [facts["first"]] and facts["names"] == []
    assert facts["cli"]["rc"] == 0, facts["cli"]["err"]
    assert facts["cli"]["out"] == f"purged CUDA IPC file '{facts['second']}'\n"
    assert "removed 1 object(s)" in facts["cli"]["err"]
    assert facts["files"] == [facts["living"]]  # its process (the child) is alive


# ---- corrupt segments: the advice works ----------------------------------------------


@pytest.mark.parametrize("how", ["command", "api", "api without slash"])
def test_a_corrupt_segment_is_removed_by_the_name_list_shows_for_it(name, how, capsys):
    shmstream.create(name, shape=(4,)).close()
    support.patch_bytes(support.segment_path(name), 0, b"NOTSHMS!")
    segname = "/" + support.segment_name(name)
    assert [e.shown for e in registry.scan(("corrupt",)) if e.segname == segname] == [segname]
    with pytest.raises(shmstream.CorruptStreamError) as info:
        shmstream.stat(name)
    assert f"shmstream.unlink({name!r})" in str(info.value)
    assert f"shmstream.unlink('{segname}')" not in str(info.value)  # no second, other advice
    if how == "command":
        assert cli.main(["unlink", segname]) == 0
        assert capsys.readouterr().out == f"unlinked '{segname}'\n"
    else:
        shmstream.unlink(segname if how == "api" else segname[1:])
    assert not os.path.exists(support.segment_path(name))


def test_the_stat_command_names_a_removal_that_works(name, capsys):
    shmstream.create(name, shape=(4,)).close()
    support.patch_bytes(support.segment_path(name), 0, b"NOTSHMS!")
    assert cli.main(["stat", name]) == 1
    err = capsys.readouterr().err
    assert f"shmstream unlink {name}" in err
    assert cli.main(["unlink", name]) == 0  # what it says
    assert not os.path.exists(support.segment_path(name))


def test_a_user_name_comes_before_the_escaped_form_list_shows(make_name):
    # list shows a stream named X"a\b" as X"a\\b" (backslashes escaped); if a
    # stream has that very name, unlink removes it first
    base = make_name()
    plain, literal = base + "a\\b", base + "a\\\\b"
    for n in (plain, literal):
        shmstream.create(n, shape=(1,)).close()
    try:
        assert [e.shown for e in registry.scan(("stream",)) if e.name == plain] == [literal]
        assert registry.remove(literal) is True
        assert plain in shmstream.list_streams() and literal not in shmstream.list_streams()
        assert registry.remove(literal) is True  # now: the name list shows for plain
        assert plain not in shmstream.list_streams()
    finally:
        for n in (plain, literal):
            registry.remove(n)


# ---- the one escaping helper -------------------------------------------------------


@pytest.mark.parametrize(
    "text, shown",
    [
        ("cam/left", "cam/left"),
        ("温度", "温度"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\nb\tc\x7f", "a\\x0ab\\x09c\\x7f"),
        ("bad\udcff", "bad\\xff"),  # an undecodable byte, as os.fsdecode gives it
        ("rtl\u202eexe", "rtl\\u202eexe"),
        ("back\\slash", "back\\\\slash"),  # so that the escapes are unambiguous
    ],
)
def test_printable_escapes_what_a_terminal_would_interpret(text, shown):
    assert registry.printable(text) == shown


def test_printable_can_leave_backslashes_of_quoted_text_alone():
    assert registry.printable("no '\\\\' in \x1b", backslash=False) == "no '\\\\' in \\x1b"


def test_stat_by_the_name_list_shows_for_a_corrupt_entry_says_what_it_is(name):
    # The listed name of a corrupt segment is its segment name; stat took it
    # for a user name and said "no object named".
    import numpy as np

    shmstream.create(name, shape=(4,), dtype=np.float32).close()
    path = support.segment_path(name)
    support.patch_bytes(path, support.field("checksum")[0], b"\xff" * 8)
    listed = "/" + os.path.basename(path)
    with pytest.raises(shmstream.CorruptStreamError, match="its header is corrupt") as caught:
        shmstream.stat(listed)
    assert f"shmstream.unlink({listed!r})" in str(caught.value)
    shmstream.unlink(listed)
    assert not os.path.exists(path)
