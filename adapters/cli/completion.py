"""``dream completion bash|zsh``: shell completion, written from the parser itself.

The script maps each command path (``dream``, ``dream memory``, ``dream memory add``) to the
words that may follow it: its sub-commands, its options and the choices of its positional
arguments. Generated from the same parser ``dream`` runs, so it cannot fall behind."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

from adapters.cli.options import Commands

SHELLS = ("bash", "zsh")

BASH_FUNCTION = """\
_dream_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}" path="dream" word
  for word in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    if [[ "$word" != -* && -n "${_dream_words["$path $word"]+set}" ]]; then
      path="$path $word"
    fi
  done
  local offered="${_dream_words[$path]}" plain=()
  if [[ "$cur" != -* ]]; then  # options only once a dash is typed, if anything else fits
    for word in $offered; do [[ "$word" != -* ]] && plain+=("$word"); done
    ((${#plain[@]})) && offered="${plain[*]}"
  fi
  COMPREPLY=($(compgen -W "$offered" -- "$cur"))
}
complete -o default -F _dream_complete dream
"""


def command_words(parser: argparse.ArgumentParser, path: str = "dream"
                  ) -> Iterator[tuple[str, list[str]]]:
    """Each command path and the words that may follow it, sub-commands first."""
    words: list[str] = []
    children: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.append(name)
                children.append((f"{path} {name}", sub))
        elif action.help == argparse.SUPPRESS:
            continue  # internal options stay out of sight
        elif action.option_strings:
            words.extend(action.option_strings)
        elif action.choices:
            words.extend(str(choice) for choice in action.choices)
    yield path, words
    for child_path, child in children:
        yield from command_words(child, child_path)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    entries = "\n".join(f"  [{shlex.quote(path)}]={shlex.quote(' '.join(words))}"
                        for path, words in command_words(parser))
    table = f"declare -gA _dream_words=(\n{entries}\n)\n"
    # zsh runs the bash function through its bash-completion layer.
    preamble = ("autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else "")
    return preamble + table + BASH_FUNCTION


def _completion(args: argparse.Namespace) -> int:
    from adapters.cli.main import build_parser  # noqa: PLC0415 - main imports this module

    print(script(build_parser(), args.shell), end="")
    return 0


def add_commands(commands: Commands) -> None:
    completion = commands.add_parser(
        "completion", help="print a shell completion script",
        description="Print the completion script for your shell. Load it now with "
                    "`source <(dream completion bash)`, or for every shell with "
                    "`dream completion bash > ~/.local/share/bash-completion/completions/dream`"
                    " (zsh: `source <(dream completion zsh)` in ~/.zshrc).")
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    completion.set_defaults(handler=_completion)
