"""etbuild.cli: the parser is made from the command table, and every command in it is reachable."""

from __future__ import annotations

import pytest

from etbuild.cli import ALIASES, COMMANDS, main, parser


def test_every_command_of_the_table_parses_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in COMMANDS:
        with pytest.raises(SystemExit) as stop:
            main([command.name, "--help"])
        assert stop.value.code == 0
        assert command.help in " ".join(capsys.readouterr().out.split())


def test_hidden_commands_are_reached_by_their_two_word_form() -> None:
    hidden = {c.name for c in COMMANDS if c.hidden}
    assert hidden == set(ALIASES.values()) == {"release-verify", "release-diff"}
    listed = parser().format_help()
    assert "build recipes" in listed and "check a release's digests" not in listed


def test_command_names_are_unique_and_each_runs_its_own_function() -> None:
    names = [c.name for c in COMMANDS]
    assert len(names) == len(set(names))
    p = parser()
    for command in COMMANDS:
        args = p.parse_args([command.name, *_required(command.name)])
        assert args.fn is command.run


def test_a_usage_error_exits_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "x.pte", "--prompt", "one,two"]) == 2
    assert "--prompt 'one,two': expected token ids" in capsys.readouterr().err


def _required(name: str) -> list[str]:
    """The least each command needs to parse."""
    return {
        "release": ["r.yaml"], "release-verify": ["dist"], "release-diff": ["a", "b"], "select": ["--union", "r.yaml"],
        "run": ["x.pte", "--inputs", "i.npz", "--out", "o.npz"], "profile": ["x.pte"],
        "generate": ["x.pte", "--prompt", "1"], "inspect": ["x.pte"],
    }.get(name, [])
