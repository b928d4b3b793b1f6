"""`dream completion`: the script a real bash loads completes every command path from the
parser itself."""

from __future__ import annotations

import subprocess
import sys

from adapters.cli.completion import command_words, script
from adapters.cli.main import build_parser


def complete(shell: str, *words: str) -> list[str]:
    """What the shell offers after ``words`` (the last one is being typed)."""
    line = " ".join(repr(word) for word in ("dream", *words))
    probe = (f'source <("{sys.executable}" -m adapters.cli completion {shell})\n'
             f"COMP_WORDS=({line}); COMP_CWORD={len(words)}\n"
             '_dream_complete; printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run([shell, "-c", probe], capture_output=True, text=True, check=True,
                          timeout=60)
    return done.stdout.split()


def test_bash_completes_commands_sub_commands_options_and_choices() -> None:
    assert complete("bash", "me") == ["memory"]
    assert set(complete("bash", "memory", "")) == {"create", "add", "revise", "show"}
    assert complete("bash", "memory", "-") == ["-h", "--help"]
    # Option values in between do not lose the command path.
    offered = complete("bash", "memory", "add", "--scope", "team", "--")
    assert {"--entry", "--kind", "--text", "--source", "--expected-revision"} <= set(offered)
    assert "--expected-entry-version" not in offered  # only `memory revise` has it
    assert complete("bash", "completion", "") == ["bash", "zsh"]
    assert complete("bash", "audit", "history", "ca") == ["candidate"]


def test_internal_options_are_not_offered() -> None:
    serve = dict(command_words(build_parser()))["dream serve"]
    assert "--port" in serve
    assert "--listen-fd" not in serve


def test_zsh_gets_the_bash_script_through_its_bash_completion_layer() -> None:
    bash, zsh = (script(build_parser(), shell) for shell in ("bash", "zsh"))
    assert zsh == "autoload -U +X bashcompinit && bashcompinit\n" + bash
