"""Children that stand for a `convgrid` command end their process the way the console command does.

`convgrid` (runner.cli.console) ends without the interpreter's teardown (runner.cli.process_exit); a
benchmark child that calls `runner.cli.main` in process would otherwise pay that teardown, which the
command a user types does not. A source tree from before it (`--against`) has no such module: its
children exit as its command did, through the interpreter.
"""

from __future__ import annotations


def end_as_the_command_does(code: int = 0) -> None:
    """End this process as the `convgrid` command of the tree being timed would, after `main` returned."""
    try:
        from runner.cli.process_exit import exit_process
    except ImportError:
        return
    exit_process(code)
