"""Nothing OS-specific lies outside the core's platform seam
(src/core/platform.h, docs/platforms.md): no other file of src/core
includes a header only Linux has or names a call only Linux makes. The
check reads the code with its comments removed, so a comment may still say
what the seam does."""

import pathlib
import re

import support

CORE = pathlib.Path(support.ROOT) / "src" / "core"

# Headers Linux has and macOS lacks (or has without what the core used).
LINUX_HEADERS = re.compile(
    r"#\s*include\s*<(linux/[^>]+|sys/prctl\.h|sys/syscall\.h|sys/vfs\.h|sys/random\.h"
    r"|sys/epoll\.h|sys/eventfd\.h|sys/statfs\.h|sys/sysinfo\.h)>"
)
# Calls, flags and paths only Linux has.
LINUX_CALLS = re.compile(
    r"\bsyscall\s*\(|\bprctl\s*\(|\bSYS_\w+|\b__NR_\w+|\bFUTEX_\w+|\bF_OFD_\w+"
    r"|\bposix_fallocate\s*\(|\bposix_fadvise\s*\(|\bO_DIRECT\b|\bMAP_POPULATE\b"
    r"|\bmremap\s*\(|\bsched_getaffinity\s*\(|\bgetrandom\s*\(|\bstatx\s*\(|\bfstatfs\s*\("
    r"|\bdup3\s*\(|\bstrerrordesc_np\s*\(|\bmincore\s*\(|\bio_uring_\w+|\bIORING_\w+|\"/proc/|\"/dev/shm"
)


def _is_platform_file(name: str) -> bool:
    return name == "platform.h" or name.startswith("platform_")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _findings(path) -> list[str]:
    out = []
    code = _strip_comments(path.read_text())
    for n, line in enumerate(code.splitlines(), 1):
        for pattern in (LINUX_HEADERS, LINUX_CALLS):
            for m in pattern.finditer(line):
                out.append(f"{path.relative_to(CORE.parent.parent)}:{n}: {m.group(0)}")
    return out


def test_only_the_platform_files_use_linux_only_headers_and_calls():
    files = sorted(p for p in CORE.iterdir() if p.suffix in (".c", ".h"))
    outside = [p for p in files if not _is_platform_file(p.name)]
    assert len(outside) > 20, "the core's files were not found"
    findings = [f for p in outside for f in _findings(p)]
    assert findings == [], "OS-specific code outside the platform seam:\n" + "\n".join(findings)


def test_the_check_sees_what_the_platform_files_hold():
    # The patterns find what the seam moved: were they wrong, the test above
    # would pass for nothing.
    linux = _findings(CORE / "platform_linux.c")
    assert any("prctl" in f for f in linux)
    assert any("F_OFD_" in f for f in linux)
    assert any("posix_fallocate" in f for f in linux)
    assert any('"/proc/' in f for f in linux)
    assert any("FUTEX_" in f for f in _findings(CORE / "platform.h"))
    assert any("io_uring" in f for f in _findings(CORE / "platform_linux_uring.c"))


def test_a_comment_naming_a_linux_call_is_not_a_finding():
    assert _findings_in("/* prctl(PR_GET_TIMERSLACK) and O_DIRECT */\nint x;\n") == []
    assert _findings_in("int s = prctl(1);\n") != []


def _findings_in(text: str) -> list[str]:
    code = _strip_comments(text)
    return [m.group(0) for line in code.splitlines() for m in [LINUX_CALLS.search(line)] if m]
