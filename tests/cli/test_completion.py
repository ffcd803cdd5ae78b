"""`pacer completion bash|zsh`: the scripts complete in a real bash and a real zsh."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pacer.__main__ import _parser, main
from pacer.cli.completion import _subcommands
from pacer.runtime import logs


def completion_script(shell: str, capsys: pytest.CaptureFixture[str], folder: Path) -> Path:
    assert main(["completion", shell]) == 0
    path = folder / f"pacer.{shell}"
    path.write_text(capsys.readouterr().out)
    return path


def complete_in_bash(script: Path, words: list[str], cwd: Path) -> list[str]:
    """What ``_pacer`` offers for the last of ``words`` in a real bash."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (f"source '{script}'; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _pacer; "
               'printf "%s\\n" "${COMPREPLY[@]}"')  # fmt: skip
    done = subprocess.run(["bash", "--norc", "-c", program], cwd=cwd, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("words", "offered"),
    [
        (["pacer", "si"], ["simulate"]),
        (["pacer", "co"], ["config", "completion"]),
        (["pacer", "simulate", "--po"], ["--policy"]),
        (["pacer", "serve", "--log-level", "d"], ["debug"]),
        (["pacer", "simulate", "--policy", "cu"], ["cuzk", "cuzk-default"]),
        (["pacer", "completion", ""], ["bash", "zsh"]),
        (["pacer", "tune", "--trace", "tr"], ["trace.jsonl"]),
        (["pacer", "submit", "--jobs", ""], []),
        (["pacer", "jobs", "--state", "c"], ["completed", "cancelled"]),
    ],
    ids=["command", "commands", "option", "choice", "choices", "positional-choice", "path",
         "a-number", "job-state"],
)  # fmt: skip
def test_bash_completes_commands_options_choices_and_paths(
    words: list[str],
    offered: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = completion_script("bash", capsys, tmp_path)
    (tmp_path / "trace.jsonl").write_text("")
    assert complete_in_bash(script, words, tmp_path) == offered


@pytest.mark.slow
def test_every_command_is_offered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = completion_script("bash", capsys, tmp_path)
    commands = list(_subcommands(_parser()))
    assert {"run", "serve", "simulate", "completion"} <= set(commands)
    assert complete_in_bash(script, ["pacer", ""], tmp_path) == [*commands, "--help", "--version"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_registers_the_completion_and_offers_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = completion_script("zsh", capsys, tmp_path)
    assert script.read_text().startswith("#compdef pacer\n")
    # As zsh's _bash_complete calls it: sh emulation. zsh filters the words by what is typed.
    program = (f"autoload -U compinit && compinit -u -d '{tmp_path}/zcompdump'; "
               f"source '{script}'; print -r -- $_comps[pacer]; "
               "t() { emulate -L sh; setopt kshglob noshglob braceexpand; "
               "COMP_WORDS=(pacer serve --log-level d); COMP_CWORD=3; _pacer; "
               'printf "%s\\n" "${COMPREPLY[@]}"; }; t')  # fmt: skip
    done = subprocess.run(["zsh", "-f", "-c", program], cwd=tmp_path, capture_output=True,
                          text=True, check=True)  # fmt: skip
    registered, *offered = done.stdout.splitlines()
    assert registered == "_bash_complete -o filenames -F _pacer"
    assert offered == list(logs.LEVELS)


def test_an_unknown_shell_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["completion", "fish"])
    assert info.value.code == 2
    assert "argument shell: invalid choice: 'fish' (choose from" in capsys.readouterr().err
