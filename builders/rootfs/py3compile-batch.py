"""Runs the py3compile calls recorded in the file named by argv[1] (each call's arguments
NUL-terminated, one call per line) in this one process, as run-py3compile.customize-hook asks
(run by the tree's own python3, in the tree; argv[2], if given, is py3compile's path).

dh-python's py3compile is loaded once and its ``main()`` called per recorded call; its
compiling interpreter (``python3.X -m py_compile -``) is started by the first call and fed by
every later one, instead of each call starting and closing its own: its per-call ``WORKERS``
dict shows ``main()`` no worker to close, and they are closed at the end. Exits non-zero, naming
the call, when a call or a compiling interpreter fails, as the postinst that made it would.
"""

import sys

PY3COMPILE = sys.argv[2] if len(sys.argv) > 2 else "/usr/bin/py3compile"


class _Workers(dict):
    """A call's compiling interpreters, hidden from ``main()``'s closing loop."""

    def values(self):
        return []


def main(path):
    tool = {"__name__": "nvkr_py3compile", "__file__": PY3COMPILE}
    with open(PY3COMPILE, encoding="utf-8") as f:
        exec(compile(f.read(), PY3COMPILE, "exec"), tool)
    with open(path, "rb") as f:
        calls = [line.rstrip(b"\n").split(b"\0")[:-1] for line in f if line.strip(b"\n")]
    started = []
    for call in calls:
        args = [a.decode("utf-8", "surrogateescape") for a in call]
        tool["WORKERS"] = workers = _Workers()
        started.append(workers)
        sys.argv = ["py3compile", *args]
        try:
            tool["main"]()
        except SystemExit as e:
            if e.code not in (None, 0):
                sys.exit(f"nvkr: py3compile {' '.join(args)} failed (exit {e.code})")
    failed = 0
    for workers in started:
        for process in dict.values(workers):
            process.communicate()
            failed = failed or process.returncode
    if failed:
        sys.exit(f"nvkr: byte-compiling the recorded py3compile calls failed (exit {failed})")


main(sys.argv[1])
